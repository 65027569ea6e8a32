//! No silent hangs: a wait that makes no progress reports what it waits
//! for (`SPLITRT_HANG_REPORT`), or ends the job naming the missing ranks
//! (`SPLITRT_HANG_ABORT=1`); collectives of different kinds never match.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Rank 2 is 3 s late to a barrier: the others report, once each, that
/// they wait for rank 2, and the job still succeeds.
#[test]
fn a_late_rank_is_named_by_the_hang_report() {
    let r = run_job(
        4,
        &example("t_hangs"),
        &["barrier", "2", "3"],
        &[("SPLITRT_HANG_REPORT", "1")],
        60,
    );
    r.ok();
    assert_eq!(r.stdout.matches("done").count(), 4, "{}", r.stdout);
    for rank in [0, 1, 3] {
        let line = format!("[{rank}] splitrt: rank {rank}: no progress for");
        let reports = r.stderr.lines().filter(|l| l.starts_with(&line)).count();
        assert_eq!(reports, 1, "rank {rank} reports once:\n{}", r.stderr);
    }
    assert!(
        r.stderr
            .contains("in Endpoint::barrier #3 for rank 2, which has not entered it"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("rank 2: no progress"), "{}", r.stderr);
}

/// Rank 1 never arrives: with SPLITRT_HANG_ABORT=1 the job ends within a
/// few seconds (not at the launcher's timeout) naming rank 1.
#[test]
fn hang_abort_ends_a_partial_barrier_naming_the_missing_rank() {
    let t = Instant::now();
    let r = run_job(
        3,
        &example("t_hangs"),
        &["barrier", "1", "0"],
        &[("SPLITRT_HANG_REPORT", "1"), ("SPLITRT_HANG_ABORT", "1")],
        60,
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{r:?}");
    assert_ne!(r.code, 0);
    assert_ne!(r.code, 124, "ended by the report, not the timeout: {r:?}");
    assert!(
        r.stderr.contains("gave up after")
            && r.stderr.contains("for rank 1, which has not entered it"),
        "{}",
        r.stderr
    );
}

/// Rank 0 calls finish while the others are in Endpoint::barrier: an error
/// naming both collectives on every rank, at once.
#[test]
fn a_barrier_never_matches_the_exit_barrier() {
    let t = Instant::now();
    let r = run_job(3, &example("t_hangs"), &["vs_finish", "0"], &[], 60);
    assert!(t.elapsed() < Duration::from_secs(20), "{r:?}");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("collective mismatch")
            && r.stderr.contains("the exit barrier of finish")
            && r.stderr.contains("Endpoint::barrier"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("done"), "{}", r.stdout);
}

/// A request handler on rank 1 never returns: the ranks waiting for its
/// answer report what they wait for, and with SPLITRT_HANG_ABORT=1 the job
/// ends well before the launcher's timeout.
#[test]
fn a_handler_that_never_returns_is_reported() {
    let t = Instant::now();
    let r = run_job(
        3,
        &example("t_hangs"),
        &["stuck_handler", "1"],
        &[("SPLITRT_HANG_REPORT", "1"), ("SPLITRT_HANG_ABORT", "1")],
        60,
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{r:?}");
    assert_ne!(r.code, 124, "ended by the report, not the timeout: {r:?}");
    assert!(
        r.stderr.contains("gave up after")
            && r.stderr.contains("in Endpoint::wait_until")
            && r.stderr.contains("send credits"),
        "{}",
        r.stderr
    );
}

/// A stopped rank (SIGSTOP) in a ring: its neighbours report that they are
/// waiting, once each, and keep waiting; the job still ends at --timeout.
#[test]
fn a_stopped_rank_is_reported_by_the_ranks_waiting_for_it() {
    use std::io::{BufRead, BufReader};
    let _lock = job_lock();
    let mut child = launch(
        3,
        &example("hello"),
        &["--spin", "30"],
        &[("SPLITRT_HANG_REPORT", "1")],
        8,
    )
    .spawn()
    .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let pid = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "job ended early");
        if let Some(p) = line.trim().strip_prefix("[1] ready pid=") {
            break p.parse::<i32>().unwrap();
        }
    };
    // SAFETY: kill(2) on the rank's pid, which the launcher has not reaped
    // (the job is running).
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let r = finish(child, Duration::from_secs(60));
    assert_eq!(r.code, 124, "{r:?}");
    let reports = r
        .stderr
        .lines()
        .filter(|l| l.contains("no progress for") && l.contains("in Endpoint::wait_until"))
        .count();
    assert_eq!(reports, 2, "both other ranks report once:\n{}", r.stderr);
}

/// Pgas::allreduce called on every rank but rank 2: rank 0 (which counts
/// the arrivals) names rank 2, and with SPLITRT_HANG_ABORT=1 the job ends.
#[test]
fn a_collective_called_on_some_ranks_only_names_the_missing_rank() {
    let t = Instant::now();
    let r = run_job(
        3,
        &example("t_hangs"),
        &["allreduce", "2"],
        &[("SPLITRT_HANG_REPORT", "1"), ("SPLITRT_HANG_ABORT", "1")],
        60,
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{r:?}");
    assert_ne!(r.code, 124, "ended by the report, not the timeout: {r:?}");
    assert!(
        r.stderr.contains("in Pgas::allreduce #")
            && r.stderr.contains("for rank(s) 2, which have not arrived"),
        "{}",
        r.stderr
    );
}

/// A rank in `finish` (the exit barrier, which serves traffic meanwhile)
/// answers a request that arrives then: its handler's reply goes out, on
/// shared memory and over UDP, and every rank finishes.
#[test]
fn a_rank_in_finish_still_answers_requests() {
    for fabric in ["shm", "udp"] {
        let r = run_job(
            3,
            &example("t_hangs"),
            &["ask_finishing", "1"],
            &[("SPLITRT_FABRIC", fabric)],
            60,
        );
        assert_eq!(r.code, 0, "{fabric}: {r:?}");
        assert_eq!(r.stdout.matches("done").count(), 3, "{fabric}: {r:?}");
    }
}

/// Runs `t_hangs ARGS` on 2 ranks under `SPLITRT_SPIN_ONLY=1` with a 1 s
/// hang report that ends the job, and checks that it ended by the report
/// (naming `what`) within 15 s, not by the launcher's 20 s timeout.
fn spin_only_hang_is_reported(args: &[&str], what: &str) {
    let t = Instant::now();
    let r = run_job(
        2,
        &example("t_hangs"),
        args,
        &[
            ("SPLITRT_HANG_REPORT", "1"),
            ("SPLITRT_HANG_ABORT", "1"),
            ("SPLITRT_SPIN_ONLY", "1"),
        ],
        20,
    );
    assert_ne!(r.code, 124, "ended by the timeout, no report: {r:?}");
    assert!(
        r.stderr.contains("gave up after") && r.stderr.contains(what),
        "{}",
        r.stderr
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{r:?}");
}

/// Self-review fixes (session 10): under `SPLITRT_SPIN_ONLY=1` a wait's
/// back-off never leaves spinning, and the world barrier looked at its
/// hang watch only once the back-off was slow: a rank that never arrives
/// was never reported (the job ran to the launcher's timeout). The clock
/// is now read every 64th round whatever the back-off.
#[test]
fn fixes_a_spin_only_barrier_reports_the_missing_rank() {
    spin_only_hang_is_reported(
        &["barrier", "1", "0"],
        "for rank 1, which has not entered it",
    );
}

/// As above for `Endpoint::wait_until` (waiting for the answer of a
/// handler that never returns): under `SPLITRT_SPIN_ONLY=1` it never
/// reported.
#[test]
fn fixes_a_spin_only_wait_until_reports() {
    spin_only_hang_is_reported(&["stuck_handler", "1"], "in Endpoint::wait_until");
}
