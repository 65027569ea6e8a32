//! vys with real processes on one host: the `vys_producer` and
//! `vys_consumer` examples, several of each with different filters; a
//! consumer that starts late and consumers killed mid-run; a stranger
//! without the stream key.

mod common;
use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A multicast group of this test binary's own (`n` tells tests apart).
fn group(n: u16) -> String {
    let port = 20_000 + (std::process::id() % 4_000) as u16 * 2 + n;
    format!("239.255.79.{}:{port}", n + 1)
}

/// Start example `prog` of the stream `group` with `args` (split at
/// white space).
fn start(prog: &str, key: &Path, group: &str, args: &str) -> Child {
    Command::new(example(prog))
        .args(["--group", group, "--key-file"])
        .arg(key)
        .args(args.split_whitespace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{prog}: {e}"))
}

fn done(c: Child) -> Run {
    finish(c, Duration::from_secs(60))
}

/// Two producers, three consumers with different filters (one reads only
/// through the producers' read servers): each gets exactly the spectra its
/// filter chose, every one with the right content.
#[test]
fn several_producers_and_consumers_get_exactly_what_their_filters_chose() {
    let _lock = job_lock();
    let (_dir, key) = vys_key_file("filters");
    let g = group(0);
    let common = "--duration-s 6 --check --stats-s 0";
    let mut c1 = start(
        "vys_consumer",
        &key,
        &g,
        &format!("{common} --spw 0 --stokes 1"),
    );
    let mut c2 = start(
        "vys_consumer",
        &key,
        &g,
        &format!("{common} --stations 0-1 --remote-only"),
    );
    let mut c3 = start("vys_consumer", &key, &g, &format!("{common} --every 3"));
    let outs: Vec<_> = [&mut c1, &mut c2, &mut c3]
        .into_iter()
        .map(wait_ready)
        .collect();
    let prod = |id: &str, antennas: &str| {
        start(
            "vys_producer",
            &key,
            &g,
            &format!(
                "--id {id} --antennas {antennas} --spectral-windows 2 --stokes 2 \
                 --channels 128 --integration-ms 2 --integrations 300 --checkable --slots 100000"
            ),
        )
    };
    let p1 = prod("a1", "3"); // 6 baselines x 2 x 2 = 24 spectra per integration
    let p2 = prod("b2", "2"); // 3 baselines x 2 x 2 = 12
    let (r1, r2) = (done(p1), done(p2));
    r1.ok();
    r2.ok();
    let mut runs = Vec::new();
    for (c, o) in [c1, c2, c3].into_iter().zip(outs) {
        let mut c = c;
        c.stdout = Some(o);
        runs.push(done(c));
    }
    // C1: spw 0, stokes 1: (6 + 3) baselines x 300
    // C2: stations 0-1: 4 products of each producer x 300
    // C3: one in three of all (24 + 12) x 300
    for (r, want) in runs.iter().zip([2700, 2400, 3600]) {
        r.ok();
        let v = |k| summary_value(&r.stdout, "vys_consumer:", k);
        assert_eq!(v("valid"), want, "{}", r.stdout);
        for k in [
            "mismatched",
            "unfiltered",
            "verification_failures",
            "read_failures",
            "starved",
            "signals_lost",
            "bad_signals",
        ] {
            assert_eq!(v(k), 0, "{k}: {}\n{}", r.stdout, r.stderr);
        }
    }
    assert_eq!(
        summary_value(&runs[0].stdout, "vys_consumer:", "local_reads"),
        2700
    );
    assert_eq!(
        summary_value(&runs[1].stdout, "vys_consumer:", "remote_reads"),
        2400
    );
    for r in [&r1, &r2] {
        assert_eq!(
            summary_value(&r.stdout, "vys_producer:", "integrations"),
            300
        );
    }
}

/// A consumer that starts after the producer and two killed mid-run (one
/// mapping the ring, one in a read session), each killed only once it has
/// delivered valid spectra: the producer keeps its schedule and finishes,
/// the undisturbed consumer gets every spectrum it chose, and the
/// producer's read server closes the dead consumer's session (5 s of
/// silence) while it lingers.
#[test]
fn late_and_killed_consumers_leave_the_producer_and_others_undisturbed() {
    let _lock = job_lock();
    let (_dir, key) = vys_key_file("killed");
    let g = group(1);
    let mut steady = start(
        "vys_consumer",
        &key,
        &g,
        "--duration-s 7 --check --spw 0 --stats-s 0",
    );
    let so = wait_ready(&mut steady);
    let integrations = 1500;
    let p = start(
        "vys_producer",
        &key,
        &g,
        "--antennas 2 --spectral-windows 2 --stokes 1 --channels 256 --integration-ms 2 \
         --integrations 1500 --checkable --buffer-ms 500 --linger-s 6",
    );
    std::thread::sleep(Duration::from_millis(500));
    let args = "--duration-s 30 --check --stats-s 0.1";
    let mut late_local = start("vys_consumer", &key, &g, args);
    let mut late_remote = start("vys_consumer", &key, &g, &format!("{args} --remote-only"));
    let mut a = wait_ready(&mut late_local);
    let mut b = wait_ready(&mut late_remote);
    // both are reading before they are killed
    wait_valid(&mut a, "late local consumer");
    wait_valid(&mut b, "late remote consumer");
    late_local.kill().unwrap();
    late_remote.kill().unwrap();
    let _ = late_local.wait();
    let _ = late_remote.wait();
    let r = done(p);
    r.ok();
    let mut steady = steady;
    steady.stdout = Some(so);
    let s = done(steady);
    s.ok();
    let pv = |k| summary_value(&r.stdout, "vys_producer:", k);
    assert_eq!(pv("integrations"), integrations);
    assert!(
        pv("sessions") >= 1,
        "the remote consumer had a session: {}",
        r.stdout
    );
    assert!(
        pv("sessions_closed") >= 1,
        "the killed consumer's session was closed: {}",
        r.stdout
    );
    // 3 baselines x 1 window (spw 0) x 1 stokes per integration
    let sv = |k| summary_value(&s.stdout, "vys_consumer:", k);
    assert_eq!(sv("valid"), 3 * integrations, "{}\n{}", s.stdout, s.stderr);
    for k in [
        "mismatched",
        "unfiltered",
        "verification_failures",
        "read_failures",
        "starved",
    ] {
        assert_eq!(sv(k), 0, "{k}: {}", s.stdout);
    }
    // on schedule: a producer that waited for anyone would fall far behind
    // (bounded loosely: 2 cores are shared with the consumers)
    let secs = r
        .stdout
        .split("seconds=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let secs: f64 = secs.parse().unwrap();
    println!(
        "producer: {} ({secs} s for a 3.0 s schedule)",
        r.stdout.trim()
    );
    assert!(
        secs < 6.0,
        "the producer fell behind: {secs} s for a 3 s schedule"
    );
}

/// Read a consumer's `stats:` lines until one counts valid spectra (at
/// most 10 s).
fn wait_valid(out: &mut std::process::ChildStdout, who: &str) {
    use std::io::Read;
    let t = std::time::Instant::now();
    let mut seen = Vec::new();
    let mut b = [0u8; 1];
    while t.elapsed() < Duration::from_secs(10) {
        if out.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        seen.push(b[0]);
        if b[0] == b'\n' {
            let text = String::from_utf8_lossy(&seen);
            let line = text.lines().last().unwrap_or("");
            if line.starts_with("stats:") && summary_value(line, "stats:", "valid") > 0 {
                return;
            }
        }
    }
    panic!(
        "{who} delivered nothing: {}",
        String::from_utf8_lossy(&seen)
    );
}

/// A consumer with another stream key gets nothing: its signals are
/// foreign, and the producer hands its ring to no one without the key.
#[test]
fn a_consumer_without_the_key_gets_nothing() {
    let _lock = job_lock();
    let (_dir, key) = vys_key_file("stranger");
    let (_dir2, other) = vys_key_file("stranger-other");
    let g = group(2);
    let mut c = start("vys_consumer", &other, &g, "--duration-s 3 --stats-s 0");
    let o = wait_ready(&mut c);
    let p = start(
        "vys_producer",
        &key,
        &g,
        "--antennas 2 --integration-ms 2 --integrations 200 --checkable",
    );
    done(p).ok();
    c.stdout = Some(o);
    let r = done(c);
    r.ok();
    let v = |k| summary_value(&r.stdout, "vys_consumer:", k);
    assert_eq!(v("valid"), 0);
    assert!(v("bad_signals") > 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("not signed with this stream's key"),
        "{}",
        r.stderr
    );
}

/// vys inside a job: rank 0's signals go by Active Message to ranks 1 and
/// 2, whose consumers (fed through their injectors) read what their
/// filters chose from rank 0's ring, content checked.
#[test]
fn signals_by_active_message_inside_a_job() {
    let hex: String = (0..32).map(|i| format!("{:02x}", i * 7 + 1)).collect();
    let r = run_job(
        3,
        &example("vys_am"),
        &["300"],
        &[("SPLITRT_VYS_KEY", &hex)],
        60,
    );
    r.ok();
    for rank in [1, 2] {
        let line = format!("rank {rank} valid=1800 mismatched=0 expected=1800 other=0");
        assert!(
            r.stdout.contains(&line),
            "{line}\n{}\n{}",
            r.stdout,
            r.stderr
        );
    }
}

/// A stranger (`nobody`, without the key) records a producer's signals
/// from the group and replays them all 5 times while the producer still
/// serves its ring: a `--check` consumer delivers every spectrum exactly
/// once (it delivered each of them up to 6 times: issue 24, item 1) and
/// counts the replays.
#[test]
fn replayed_signals_deliver_no_spectrum_twice() {
    let _lock = job_lock();
    let (_dir, key) = vys_key_file("replay");
    let g = group(3);
    let mut c = start(
        "vys_consumer",
        &key,
        &g,
        "--duration-s 12 --check --stats-s 0",
    );
    let co = wait_ready(&mut c);
    let (_bin, copy) = world_runnable(&std::env::current_exe().unwrap(), "vys-replayer");
    let mut r = as_nobody(&copy)
        .args([
            "--exact",
            "replayer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VYS_REPLAY_GROUP", &g)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ro = wait_ready(&mut r);
    // 2 antennas: 3 baselines x 2 windows x 2 stokes = 12 spectra per
    // integration, 500 integrations: 6000 spectra in 750 signals
    let p = start(
        "vys_producer",
        &key,
        &g,
        "--antennas 2 --integration-ms 2 --integrations 500 --checkable --slots 100000 \
         --linger-s 7",
    );
    r.stdout = Some(ro);
    let replayer = finish(r, Duration::from_secs(60));
    println!("replayer: {}", replayer.stdout.trim());
    assert!(
        replayer.stdout.contains("replayed"),
        "{}\n{}",
        replayer.stdout,
        replayer.stderr
    );
    done(p).ok();
    c.stdout = Some(co);
    let r = done(c);
    println!("consumer: {}", r.stdout.trim());
    r.ok();
    let v = |k| summary_value(&r.stdout, "vys_consumer:", k);
    assert_eq!(v("mismatched"), 0, "{}", r.stdout);
    assert_eq!(
        v("valid"),
        6000,
        "every spectrum exactly once: {}",
        r.stdout
    );
    let replayed: u64 = replayer
        .stdout
        .split("replayed ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert_eq!(v("replays"), 5 * replayed, "replays counted: {}", r.stdout);
}

/// The stranger of the test above, when run by it (as `nobody`): records
/// the group's datagrams until 1 s passes without one, then sends them
/// all again 5 times. Otherwise nothing.
#[test]
fn replayer_child() {
    let Ok(g) = std::env::var("VYS_REPLAY_GROUP") else {
        return;
    };
    use std::io::Write;
    let g: std::net::SocketAddrV4 = g.parse().unwrap();
    let sock = multicast_socket(g);
    println!("ready");
    let _ = std::io::stdout().flush();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let t0 = std::time::Instant::now();
    let mut recorded = Vec::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => recorded.push(buf[..n].to_vec()),
            Err(_) if !recorded.is_empty() || t0.elapsed() > Duration::from_secs(30) => break,
            Err(_) => {}
        }
    }
    for _ in 0..5 {
        for (i, d) in recorded.iter().enumerate() {
            sock.send_to(d, g).unwrap();
            if i % 50 == 49 {
                // paced: the consumer's socket queue is finite
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    println!("replayed {} datagrams 5 times", recorded.len());
}

/// A UDP socket on `group`'s port (shared, `SO_REUSEADDR`, as the
/// consumers' are), joined to it on loopback and sending to it there.
fn multicast_socket(group: std::net::SocketAddrV4) -> std::net::UdpSocket {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor, owned by the socket from here on.
    let s = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on our socket with a c_int option of its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: group.port().to_be(),
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    };
    // SAFETY: bind(2) with a sockaddr_in of the stated size.
    let r = unsafe {
        libc::bind(
            fd,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let lo = std::net::Ipv4Addr::LOCALHOST;
    s.join_multicast_v4(group.ip(), &lo).unwrap();
    s.set_multicast_loop_v4(true).unwrap();
    let iface = libc::in_addr {
        s_addr: u32::from(lo).to_be(),
    };
    // SAFETY: setsockopt on our socket with an in_addr option of its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            &iface as *const libc::in_addr as *const libc::c_void,
            std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    s
}
