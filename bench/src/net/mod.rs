//! `splitrt-bench net`: the UDP fabric between two ranks (on this host over
//! loopback, or on two hosts with `--hosts a,b --rsh CMD`), beside a raw
//! UDP busy-poll ping-pong and a raw one-way stream that the same two
//! processes measure on the same cores in the same job; then the same
//! under 1% and 5% injected loss (`SPLITRT_UDP_FAULTS`, every datagram
//! either way). Ratios: AM Short RTT / raw RTT, bandwidths / raw stream,
//! lossy / lossless. `--gasnet DIR` also runs GASNet-EX's udp-conduit
//! testam / testsmall / testlarge from a tree the user built.

pub mod worker;

use crate::harness::job::Place;
use crate::harness::run::Run;
use std::collections::BTreeMap;
use std::path::Path;

const METRICS: &[&str] = &[
    "raw UDP RTT (us)",
    "AM Short RTT (us)",
    "AM Medium 1 KiB RTT (us)",
    "AM Long 64 KiB RTT (us)",
    "raw UDP stream (MB/s)",
    "AM Medium max one-way (MB/s)",
    "AM Long 1 MiB one-way (MB/s)",
    "AM Short 8 B rate (M msg/s)",
    "put 1 MiB (MB/s)",
    "get 64 KiB (MB/s)",
    "get 1 MiB (MB/s)",
    "strided put 1000 x 64 B + sync (us)",
    "1000 separate 64 B puts + sync (us)",
    "datagrams sent",
    "retransmitted",
    "strided put data (MB/s)",
    "separate puts data (MB/s)",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.rsplitn(3, ',');
        let (Some(v), Some(_rep), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if let Ok(v) = v.parse::<f64>() {
            by.entry(name.to_string()).or_default().push(v);
        }
    }
    by.into_iter().map(|(k, v)| (k, median(v))).collect()
}

/// Run the benchmark and print its table: on this host, or on `hosts`
/// (`a,b`) through `rsh`; `gasnet`: a built GASNet-EX tree whose
/// `udp-conduit` tests run too.
pub fn run(
    r: &Run,
    hosts: Option<&str>,
    rsh: Option<String>,
    gasnet: Option<&Path>,
) -> Result<(), String> {
    let place = Place::new(hosts, rsh)?;
    let where_ = hosts.unwrap_or("loopback");
    let scenarios = [
        ("lossless", None),
        ("1% loss", Some("drop=0.01,dir=tx,seed=11")),
        ("5% loss", Some("drop=0.05,dir=tx,seed=12")),
        ("header tag", None),
    ];
    let mut cols = Vec::new();
    for (name, faults) in scenarios {
        eprintln!("net: {name} ({where_})");
        let result = format!("net-{}.raw", name.replace(['%', ' '], ""));
        let mut env = vec![("SPLITRT_FABRIC", "udp".to_string())];
        if let Some(f) = faults {
            env.push(("SPLITRT_UDP_FAULTS", f.into()));
        }
        if name == "header tag" {
            env.push(("SPLITRT_UDP_AUTH", "header".into()));
        }
        let text = r.job_on("net-worker", &result, &env, &place)?;
        cols.push((name, parse(&text)));
    }
    let get = |c: usize, m: &str| cols[c].1.get(m).copied().unwrap_or(f64::NAN);
    let mut table = format!(
        "UDP fabric, 2 ranks ({where_}), {} repetition(s), medians\n{:<30} {:>12} {:>12} {:>12} {:>12}\n",
        r.common.reps, "", cols[0].0, cols[1].0, cols[2].0, cols[3].0
    );
    let mut csv = String::from("metric,lossless,loss1,loss5,header_tag\n");
    for m in METRICS {
        table += &format!(
            "{m:<30} {:>12.2} {:>12.2} {:>12.2} {:>12.2}\n",
            get(0, m),
            get(1, m),
            get(2, m),
            get(3, m)
        );
        csv += &format!(
            "{m},{},{},{},{}\n",
            get(0, m),
            get(1, m),
            get(2, m),
            get(3, m)
        );
    }
    let ratio = |a: f64, b: f64| a / b;
    table += "\nratios (same job, same cores)\n";
    let rows = [
        (
            "AM Short RTT / raw UDP RTT",
            ratio(get(0, METRICS[1]), get(0, METRICS[0])),
        ),
        (
            "Long 1 MiB one-way / raw stream",
            ratio(get(0, METRICS[6]), get(0, METRICS[4])),
        ),
        (
            "put 1 MiB / raw stream",
            ratio(get(0, METRICS[8]), get(0, METRICS[4])),
        ),
        (
            "get 1 MiB / raw stream",
            ratio(get(0, METRICS[10]), get(0, METRICS[4])),
        ),
        (
            "1000 x 64 B: separate puts / strided",
            ratio(get(0, METRICS[12]), get(0, METRICS[11])),
        ),
        (
            "strided put data / raw stream",
            ratio(get(0, METRICS[15]), get(0, METRICS[4])),
        ),
        (
            "separate puts data / raw stream",
            ratio(get(0, METRICS[16]), get(0, METRICS[4])),
        ),
        (
            "Long 1 MiB, 1% loss / lossless",
            ratio(get(1, METRICS[6]), get(0, METRICS[6])),
        ),
        (
            "Long 1 MiB, 5% loss / lossless",
            ratio(get(2, METRICS[6]), get(0, METRICS[6])),
        ),
        (
            "put 1 MiB, 5% loss / lossless",
            ratio(get(2, METRICS[8]), get(0, METRICS[8])),
        ),
        (
            "Short rate, 5% loss / lossless",
            ratio(get(2, METRICS[7]), get(0, METRICS[7])),
        ),
        (
            "header tag: AM Short RTT / raw",
            ratio(get(3, METRICS[1]), get(3, METRICS[0])),
        ),
        (
            "header tag: put 1 MiB / raw stream",
            ratio(get(3, METRICS[8]), get(3, METRICS[4])),
        ),
        (
            "header tag: get 1 MiB / raw stream",
            ratio(get(3, METRICS[10]), get(3, METRICS[4])),
        ),
    ];
    for (k, v) in rows {
        table += &format!("{k:<34} {v:>8.2}\n");
        csv += &format!("{k},{v},,,\n");
    }
    if let Some(dir) = gasnet {
        table += &gasnet_udp(dir, r.quick());
    }
    print!("{table}");
    r.write("net.csv", &csv)?;
    r.write("net.txt", &table)?;
    Ok(())
}

/// GASNet-EX udp-conduit tests from a user-built tree (the GASNet source
/// directory after `configure --enable-udp && make -C udp-conduit seq
/// testam testsmall testlarge && make -C other/amudp amudprun`), run on
/// this host with local spawning and shared memory off
/// (`GASNET_SUPERNODE_MAXSIZE=1`, so the two processes talk over UDP),
/// their key lines quoted.
fn gasnet_udp(dir: &Path, quick: bool) -> String {
    let udp = dir.join("udp-conduit");
    let run = [
        dir.join("other/amudp/amudprun"),
        udp.join("contrib/amudprun"),
        dir.join("bin/amudprun"),
    ]
    .into_iter()
    .find(|p| p.exists());
    let mut s = format!(
        "\nGASNet-EX udp-conduit ({}), same host, PSHM off\n",
        udp.display()
    );
    let Some(run) = run else {
        return s + "  amudprun not found (make -C other/amudp amudprun)\n";
    };
    let iters = if quick { "200" } else { "2000" };
    let keep: &[(&str, &[&str])] = &[
        (
            "testam",
            &[
                "AMShort     ping-pong roundtrip ReqRep",
                "AMShort     flood     one-way",
                "65000 AMMedium",
                "65000 AMLong",
            ],
        ),
        ("testsmall", &["      8 byte"]),
        ("testlarge", &["65536 byte", "1048576 byte"]),
    ];
    for (test, pats) in keep {
        let exe = udp.join(test);
        if !exe.exists() {
            s += &format!("  {test}: not built (make -C udp-conduit {test})\n");
            continue;
        }
        let args: Vec<&str> = match *test {
            "testlarge" => vec!["50", "1048576"],
            _ => vec![iters],
        };
        let out = std::process::Command::new(&run)
            .args(["-np", "2"])
            .arg(&exe)
            .args(&args)
            .env("GASNET_SPAWNFN", "L")
            .env("GASNET_SUPERNODE_MAXSIZE", "1")
            .env("GASNET_QUIET", "1")
            .output();
        match out {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).to_string();
                let lines: Vec<&str> = text
                    .lines()
                    .filter(|l| pats.iter().any(|p| l.contains(p)))
                    .collect();
                if lines.is_empty() {
                    s += &format!("  {test}: no result lines (exit {:?})\n", o.status.code());
                }
                for l in lines {
                    s += &format!("  {test}: {}\n", l.trim());
                }
            }
            Err(e) => s += &format!("  {test}: could not run: {e}\n"),
        }
    }
    s
}
