//! `splitrt-bench vys --spead2`: spead2 (from PyPI) beside vys in the same
//! run. A spead2 sender on the producers' host sends heaps of one item
//! of the spectrum size to a receiver on the consumers' host that uses
//! spead2's C++ receive path (a chunk stream whose heap placement is a
//! C function: no Python per heap or packet; the script is
//! `spead2_peer.py`). Packets are at most the UDP payload a 1500-byte
//! MTU path carries (as vys's read sessions default to there). The
//! sender runs flat out and paced at several rates; the best received
//! rate of complete heaps is spead2's figure, printed with spead2's own
//! stream statistics (heaps, packets, heaps evicted incomplete, too-old
//! heaps) as evidence. Both peers ask for the socket buffers vys's read
//! sessions ask for (8 MiB; the host's `net.core.rmem_max` caps both). Skipped, with a message
//! saying why, when `python3` cannot import spead2.

use super::plan::{Plan, Reads};
use super::record::Output;
use crate::harness::report::size_label;
use crate::harness::run::Run;
use crate::harness::stats::median;
use splitrt::vys::signal::DigestKind;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The peer script (run by `python3` on both hosts).
const PEER: &str = include_str!("spead2_peer.py");
/// UDP payload of spead2's packets.
const PACKET: usize = 1472;
/// Sender rates tried (bytes/s; 0: flat out).
const RATES: [f64; 4] = [0.0, 2e9, 1e9, 0.4e9];
/// Socket buffer bytes the peers ask for (as `SOCKET_BUFFER` in the
/// script and vys's read sessions in `read_client.rs`/`read_server.rs`).
const SOCKET_BUFFER: usize = 8 << 20;
/// The receiver's UDP port.
const PORT: u16 = 47_931;

/// Where the two spead2 peers run: on this host, or through `rsh` on
/// the producers' host `a` (sender) and the consumers' host `b`
/// (receiver).
pub struct Hosts<'a> {
    /// `(rsh, a, b)` across hosts; `None`: both here, over loopback.
    pub across: Option<(&'a str, &'a str, &'a str)>,
}

fn command(h: &Hosts<'_>, on_b: bool, args: &[String]) -> Command {
    match h.across {
        None => {
            let mut c = Command::new("python3");
            c.args(args);
            c
        }
        Some((rsh, a, b)) => {
            let mut words = rsh.split_whitespace();
            let mut c = Command::new(words.next().unwrap_or("ssh"));
            c.args(words);
            c.arg(if on_b { b } else { a });
            let line: Vec<String> = std::iter::once("python3".to_string())
                .chain(args.iter().map(|s| format!("'{s}'")))
                .collect();
            c.arg(line.join(" "));
            c
        }
    }
}

/// One spead2 measurement: GB/s of complete heaps and the evidence
/// (the sender's heap count, spead2's stream statistics, the socket
/// buffer cap).
struct Measured {
    gbps: f64,
    evidence: String,
}

/// Complete heaps of `size` bytes received per second with the sender
/// at `rate` (0: flat out), sending for `secs`.
fn measure(
    h: &Hosts<'_>,
    script: &str,
    size: usize,
    secs: f64,
    rate: f64,
) -> Result<Measured, String> {
    let dest = match h.across {
        None => "127.0.0.1".to_string(),
        Some((_, _, b)) => b.to_string(),
    };
    let s = |x: &dyn ToString| x.to_string();
    let rx = command(
        h,
        true,
        &[
            s(&script),
            s(&"recv"),
            s(&PORT),
            s(&size),
            s(&(secs + 1.0)),
            s(&PACKET),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .map_err(|e| format!("spead2 receiver: {e}"))?;
    // the receiver binds within its first second (compiling its place
    // function); the sender starts after it and stops before it
    std::thread::sleep(Duration::from_millis(700));
    let mut args = vec![
        s(&script),
        s(&"send"),
        dest,
        s(&PORT),
        s(&size),
        s(&secs),
        s(&PACKET),
    ];
    if rate > 0.0 {
        args.push(s(&rate));
    }
    let tx = command(h, false, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output();
    let out = rx.wait_with_output().map_err(|e| e.to_string())?;
    let tx = tx.map_err(|e| format!("spead2 sender: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("spead2-recv heaps="))
        .ok_or_else(|| format!("spead2 receiver said: {text:?}"))?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
    };
    let sent = String::from_utf8_lossy(&tx.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("spead2-send heaps="))
        .and_then(|v| v.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    // spead2's own statistics: every heap the sender sent should be
    // among `heaps`, none evicted incomplete or too old
    let stat = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or("?")
            .to_string()
    };
    let evidence = format!(
        "sent {sent} heaps; received {} heaps, {} packets, {} evicted incomplete, \
         {} too old; rmem_max {}",
        stat("heaps="),
        stat("packets="),
        stat("incomplete_heaps_evicted="),
        stat("too_old_heaps="),
        stat("rmem_max="),
    );
    match (field("bytes="), field("seconds=")) {
        (Some(b), Some(t)) if t > 0.0 => Ok(Measured {
            gbps: b / t / 1e9,
            evidence,
        }),
        _ => Err(format!("spead2 receiver's line {line:?}")),
    }
}

/// Median delivered GB/s of the `1x1 remote none` row at `size` in
/// `output`.
fn vys_remote(plan: &Plan, output: &Output, size: usize) -> Option<f64> {
    let row = plan.stream_rows(size).into_iter().find(|r| {
        r.setup.producers == 1
            && r.setup.consumers == 1
            && r.setup.reads == Reads::Remote
            && r.setup.digest == DigestKind::None
    })?;
    let v: Vec<f64> = output
        .row(&row.key())
        .iter()
        .map(|r| r.delivered_gbps())
        .collect();
    (!v.is_empty()).then(|| median(&v))
}

/// Measure spead2 at every size of `plan` and print vys's `1x1 remote
/// none` delivered rate beside it (from `output`, the same run); writes
/// `DIR/vys-spead2.txt`. A skip (spead2 not importable) is printed, not
/// an error.
pub fn compare(r: &Run, plan: &Plan, output: &Output, h: &Hosts<'_>) -> Result<(), String> {
    let script = r.write("spead2_peer.py", PEER)?;
    let script = script.display().to_string();
    let check = command(h, true, &[script.clone(), "check".into()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "vys --spead2: skipped: python3 cannot import spead2 (pip install spead2): {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return Ok(());
        }
        Err(e) => {
            println!("vys --spead2: skipped: cannot run python3: {e}");
            return Ok(());
        }
    }
    let secs = if r.quick() { 1.0 } else { 2.0 };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nspead2 beside vys (same run): spead2 4.x sender -> C++ chunk-stream receiver, \
         {PACKET} B packets,\nbest of sender flat out and paced at 2, 1, 0.4 GB/s; \
         complete heaps received per second\n(between the first and last chunk after a warm-up), \
         heaps sent one after another (serial)\n"
    );
    let _ = writeln!(
        t,
        "{:>8} {:>12} {:>14} {:>12}  {:>8}",
        "size", "spead2 GB/s", "(per rate)", "vys GB/s", "vys/spead2"
    );
    let mut evidence = String::new();
    for &size in &plan.sizes {
        let mut rates = Vec::new();
        let mut best_evidence = String::new();
        for rate in RATES {
            let m = measure(h, &script, size, secs, rate).unwrap_or_else(|e| {
                eprintln!("vys --spead2: {e}");
                Measured {
                    gbps: f64::NAN,
                    evidence: String::new(),
                }
            });
            let beats = |x: &f64| x.is_nan() || *x < m.gbps;
            if m.gbps.is_finite() && rates.iter().all(beats) {
                best_evidence = m.evidence;
            }
            rates.push(m.gbps);
        }
        let best = rates
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .fold(f64::NAN, f64::max);
        let vys = vys_remote(plan, output, size).unwrap_or(f64::NAN);
        let per: Vec<String> = rates.iter().map(|x| format!("{x:.2}")).collect();
        let _ = writeln!(
            t,
            "{:>8} {:>12.3} {:>14} {:>12.3}  {:>8.2}",
            size_label(Some(size)),
            best,
            per.join("/"),
            vys,
            vys / best
        );
        let _ = writeln!(
            evidence,
            "  {:>6} best: {best_evidence}",
            size_label(Some(size))
        );
    }
    let _ = writeln!(
        t,
        "spead2's own stream statistics (best rate per size):\n{evidence}\
         socket buffers: spead2's sender and receiver ask for {} MiB, as vys's read \
         sessions do; the host's net.core.rmem_max caps both alike",
        SOCKET_BUFFER >> 20
    );
    t += "target: vys remote delivery >= 0.9x spead2 (issue 27 part 6)\n";
    print!("{t}");
    r.write("vys-spead2.txt", &t)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number after `key` in `text` (the peer's `key=N` fields).
    fn count(text: &str, key: &str) -> Option<u64> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
    }

    /// The spead2 baseline counts the heaps a spead2 sender sends as
    /// received complete: a slow, paced sender on loopback loses none to
    /// the harness (heaps interleaved past what the receiver keeps open
    /// were evicted incomplete: 0.024 GB/s at every size and rate).
    /// Skipped when `python3` cannot import spead2.
    #[test]
    fn vysspeed_spead2_peer_receives_the_heaps_sent() {
        let ok = Command::new("python3")
            .args(["-c", "import spead2.recv; spead2.recv.ChunkRingStream"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: python3 cannot import spead2");
            return;
        }
        let dir = std::env::temp_dir().join(format!("vysspeed-spead2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("spead2_peer.py");
        std::fs::write(&script, PEER).unwrap();
        let script = script.display().to_string();
        // 8 KiB heaps paced at 5 MB/s for 1.5 s: about 900 heaps, slow
        // enough for a loaded machine's loopback and socket buffers
        let port = "47937";
        let rx = Command::new("python3")
            .args([&script, "recv", port, "8192", "2.5", "1472"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let tx = Command::new("python3")
            .args([
                &script,
                "send",
                "127.0.0.1",
                port,
                "8192",
                "1.5",
                "1472",
                "5e6",
            ])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let rx = rx.wait_with_output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let (tx, rx) = (
            String::from_utf8_lossy(&tx.stdout).to_string(),
            String::from_utf8_lossy(&rx.stdout).to_string(),
        );
        let sent = count(&tx, "heaps=").expect("the sender's count");
        let line = rx
            .lines()
            .find(|l| l.starts_with("spead2-recv heaps="))
            .expect("the receiver's line");
        let complete = count(line, "heaps=").expect("complete heaps");
        // the window starts after a warm-up: most, not all, heaps sent
        assert!(
            sent > 100 && complete * 2 >= sent,
            "{complete} of {sent} heaps received complete: {line}"
        );
        assert_eq!(count(line, "incomplete_heaps_evicted="), Some(0), "{line}");
        eprintln!("{complete} of {sent} heaps received complete: {line}");
    }
}
