//! The UDP fabric on one host (`--fabric udp`: every pair of ranks over
//! loopback UDP), as real multi-process jobs: conformance, stress, the
//! PGAS model and the examples, datagrams lost / duplicated / reordered by
//! the driver's fault injection, a stranger spraying datagrams at the
//! ranks' ports, and a rank that stops answering.

mod common;
use common::*;
use std::process::Stdio;
use std::time::Duration;

const UDP: (&str, &str) = ("SPLITRT_FABRIC", "udp");

fn conformance(n: usize, rounds: &str, extra: &[(&str, &str)]) -> Run {
    let mut env = vec![UDP, ("SPLITRT_SEGMENT_SIZE", "16M")];
    env.extend_from_slice(extra);
    let r = run_job(n, &example("t_conformance"), &[rounds], &env, 120);
    r.ok();
    assert_eq!(
        r.stdout.matches("conformance ok").count(),
        n,
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("udp: ").count(), n, "{}", r.stdout);
    r
}

/// Sum of one number over the ranks' `udp: ...` lines (the word before `what`).
fn udp_sum(r: &Run, what: &str) -> u64 {
    r.stdout
        .lines()
        .filter(|l| l.contains("udp: "))
        .filter_map(|l| {
            let at = l.find(what)?;
            l[..at].split_whitespace().last()?.parse::<u64>().ok()
        })
        .sum()
}

#[test]
fn conformance_over_udp() {
    conformance(4, "2", &[]);
}

/// Small datagrams and a window of 2: every Medium and Long is cut into
/// many fragments and senders run out of window all the time.
#[test]
fn conformance_small_datagrams_tiny_window() {
    conformance(
        3,
        "1",
        &[("SPLITRT_UDP_MTU", "1500"), ("SPLITRT_UDP_WINDOW", "2")],
    );
}

/// 5% of datagrams dropped, 1% duplicated, 5% held back, both directions:
/// every byte still checked, and retransmissions happened.
#[test]
fn conformance_under_injected_loss() {
    let r = conformance(
        4,
        "1",
        &[(
            "SPLITRT_UDP_FAULTS",
            "drop=0.05,dup=0.01,reorder=0.05,delay_us=300,dir=both,seed=5",
        )],
    );
    assert!(udp_sum(&r, "retransmitted") > 0, "{}", r.stdout);
}

#[test]
fn stress_over_udp_threads_and_tiny_windows() {
    let r = run_job(
        6,
        &example("t_stress"),
        &["200", "2"],
        &[
            UDP,
            ("SPLITRT_SEGMENT_SIZE", "8M"),
            ("SPLITRT_UDP_WINDOW", "2"),
        ],
        120,
    );
    r.ok();
    assert_eq!(r.stdout.matches("stress ok").count(), 6, "{}", r.stdout);
}

#[test]
fn pgas_model_over_udp() {
    let r = run_job(4, &example("t_pgas_model"), &[], &[UDP], 120);
    r.ok();
    assert_eq!(r.stdout.matches("pgas model ok").count(), 4, "{}", r.stdout);
}

#[test]
fn examples_over_udp() {
    for prog in [
        "hello",
        "am_reqrep",
        "em3d",
        "sample_sort",
        "matmul",
        "npb_is",
    ] {
        let r = run_job(4, &example(prog), &[], &[UDP], 120);
        assert_eq!(r.code, 0, "{prog}: {r:?}");
    }
}

/// Settings are checked before any rank starts.
#[test]
fn bad_udp_settings_are_named() {
    for (k, v) in [
        ("SPLITRT_UDP_MTU", "100"),
        ("SPLITRT_UDP_WINDOW", "1"),
        ("SPLITRT_UDP_FAULTS", "drop=2"),
        ("SPLITRT_UDP_PEER_TIMEOUT", "0.01"),
    ] {
        let r = run_job(2, &example("hello"), &[], &[UDP, (k, v)], 30);
        assert_ne!(r.code, 0, "{k}={v}: {r:?}");
        assert!(r.stderr.contains(k), "{k}={v}: {}", r.stderr);
    }
}

/// Another user sprays garbage and well-formed headers with a made-up tag
/// at every UDP port of the job while it runs: nothing is acted on (the
/// job checks every byte and exits 0) and the ranks count what they dropped.
#[test]
fn stranger_datagrams_are_dropped_and_counted() {
    if !is_root() {
        eprintln!("skipped: needs root to run the attacker as another user");
        return;
    }
    let _lock = job_lock();
    let job = launch(
        4,
        &example("t_conformance"),
        &["8"],
        &[UDP, ("SPLITRT_SEGMENT_SIZE", "16M")],
        120,
    )
    .spawn()
    .expect("launch");
    std::thread::sleep(Duration::from_millis(600));
    let (_d, copy) = world_runnable(&example("t_attacker"), "udp");
    let out = as_nobody(&copy)
        .args(["127.0.0.1:1", "udp"])
        .env("ATTACK_UID", "0")
        .stdin(Stdio::null())
        .output()
        .expect("attacker");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let r = finish(job, Duration::from_secs(120));
    r.ok();
    assert_eq!(
        r.stdout.matches("conformance ok").count(),
        4,
        "{}",
        r.stdout
    );
    assert!(said.contains("udp: "), "{said}");
    let dropped = udp_sum(&r, "foreign");
    assert!(dropped > 0, "attacker: {said}\n{}", r.stdout);
}

/// A rank that stops (SIGSTOP) in the middle of traffic stops answering
/// keepalives: its peers declare it dead after the peer timeout and the
/// job ends with its rank named, long before `--timeout`.
#[test]
fn a_stopped_rank_is_declared_dead_over_udp() {
    let _lock = job_lock();
    let child = launch(
        3,
        &example("t_stress"),
        &["100000000", "1"],
        &[
            UDP,
            ("SPLITRT_UDP_PEER_TIMEOUT", "1"),
            ("SPLITRT_HANG_REPORT", "off"),
        ],
        60,
    )
    .spawn()
    .expect("launch");
    let launcher_pid = child.id();
    // find rank 2 and stop it once traffic flows
    std::thread::sleep(Duration::from_millis(800));
    let mut victim = None;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1));
        let env = String::from_utf8_lossy(&std::fs::read(p.join("environ")).unwrap_or_default())
            .to_string();
        if ppid == Some(&launcher_pid.to_string()) && env.split('\0').any(|v| v == "SPLITRT_RANK=2")
        {
            victim = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
        }
    }
    let pid = victim.expect("rank 2 found");
    let t0 = std::time::Instant::now();
    // SAFETY: kill(2) on the rank this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let r = finish(child, Duration::from_secs(90));
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("rank 2 has not answered over UDP")
            || r.stdout.contains("rank 2 has not answered over UDP"),
        "{r:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "ended by the peer timeout"
    );
}

/// `SPLITRT_UDP_AUTH=header` (tag over the header only): the same checks
/// pass, and strangers' datagrams are still refused (their header tag
/// fails).
#[test]
fn header_only_tags_work() {
    conformance(3, "1", &[("SPLITRT_UDP_AUTH", "header")]);
}

/// Ranks that disagree on what the tag covers could never read each
/// other's datagrams: the job is refused at start, naming the setting.
#[test]
fn ranks_disagreeing_on_the_tag_are_refused_at_start() {
    let hello = example("hello");
    let script = format!(
        "[ \"$SPLITRT_RANK\" = 1 ] && export SPLITRT_UDP_AUTH=header; exec {}",
        hello.display()
    );
    let r = run_job(2, &"/bin/sh".into(), &["-c", &script], &[UDP], 30);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("SPLITRT_UDP_AUTH"), "{}", r.stderr);
}

/// A rank that computes for 3 s without polling, with a 1 s peer timeout:
/// its keeper thread answers for it, so nobody takes it for dead.
#[test]
fn a_rank_computing_past_the_peer_timeout_is_not_dead() {
    let r = run_job(
        3,
        &example("t_faults"),
        &["compute", "1"],
        &[UDP, ("SPLITRT_UDP_PEER_TIMEOUT", "1")],
        60,
    );
    r.ok();
    assert_eq!(r.stdout.matches("computed").count(), 3, "{r:?}");
}
