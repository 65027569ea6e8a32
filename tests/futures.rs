//! Futures that sleep: a pending split-phase get under an async executor
//! uses (almost) no CPU while its reply is delayed, and then completes.

mod common;
use common::*;

/// The value of `key=` in `line`.
fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .to_string()
}

/// Run `t_async_sleep ARGS` on 2 ranks over the AM path (plus `env`), check
/// the job ended well, and return its report line (the one with `tag`).
fn sleep_report(args: &[&str], env: &[(&str, &str)], tag: &str) -> String {
    let mut all = vec![("SPLITRT_RMA", "am")];
    all.extend_from_slice(env);
    let r = run_job(2, &example("t_async_sleep"), args, &all, 60);
    r.ok();
    r.stdout
        .lines()
        .find(|l| l.contains(tag))
        .unwrap_or_else(|| panic!("{r:?}"))
        .to_string()
}

/// Rank 1 awaits a get over the AM path under a current-thread tokio
/// runtime while rank 0 does not poll for 2 s. Its process must use under
/// 10% of one CPU in that time (a future that wakes itself keeps the
/// executor polling: ~100% of whatever CPU it gets), and the get must then
/// complete with rank 0's data.
#[test]
fn a_pending_get_sleeps_under_tokio_until_the_reply_comes() {
    for fabric in ["shm", "udp"] {
        let line = &sleep_report(&["2"], &[("SPLITRT_FABRIC", fabric)], "async get:");
        let cpu: u64 = field(line, "cpu_ms=").parse().expect("a number");
        let wall: u64 = field(line, "wall_ms=").parse().expect("a number");
        let polls: u64 = field(line, "polls=").parse().expect("a number");
        assert_eq!(field(line, "data="), "ok", "{fabric}: {line}");
        // (rank 1 may leave the barrier after rank 0 on a busy host)
        assert!(
            (1000..2000 + 1000).contains(&wall),
            "{fabric}: the peer delayed its reply 2 s (then the get must end): {line}"
        );
        assert!(
            cpu * 10 < wall,
            "{fabric}: a pending get used {cpu} ms CPU in {wall} ms (>= 10%): {line}"
        );
        // independent of the host's load: a future that wakes itself is
        // polled thousands of times in 2 s, however little CPU it gets
        assert!(
            polls < 100,
            "{fabric}: the executor polled the pending gets {polls} times: {line}"
        );
    }
}

/// The tokio example: every rank gathers every rank's part by async gets
/// (over the AM path and over UDP), driven by a progress task waiting on
/// the doorbell descriptor through `AsyncFd`, and checks the data.
#[test]
fn the_async_get_example_gathers_right_data() {
    for (n, env) in [
        (4, [("SPLITRT_RMA", "am"), ("SPLITRT_FABRIC", "shm")]),
        (3, [("SPLITRT_RMA", "native"), ("SPLITRT_FABRIC", "udp")]),
    ] {
        let r = run_job(n, &example("async_get"), &[], &env, 60);
        r.ok();
        let right = r
            .stdout
            .lines()
            .filter(|l| l.ends_with("all right"))
            .count();
        assert_eq!(right, n, "{env:?}: {r:?}");
    }
}

/// A pending get whose owner dies ends with an error naming the owner,
/// promptly and without spinning (the bridge fires for a failed job;
/// the future must then end, not register again).
#[test]
fn a_pending_get_ends_with_an_error_when_its_owner_dies() {
    let r = run_job(
        2,
        &example("t_async_sleep"),
        &["1", "die"],
        &[("SPLITRT_RMA", "am")],
        60,
    );
    assert_ne!(r.code, 0, "{r:?}");
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("async get failed:"))
        .unwrap_or_else(|| panic!("the await never ended: {r:?}"));
    assert!(line.contains("rank 0"), "{line}");
    let cpu: u64 = field(line, "cpu_ms=").parse().expect("a number");
    let wall: u64 = field(line, "wall_ms=").parse().expect("a number");
    assert!(wall < 10_000, "{line}");
    assert!(cpu * 10 < wall, "spun: {line}");
}

/// Dropping pending gets (a `tokio::time::timeout` gave up on them while
/// the peer sleeps) returns at once, leaves no waker with the doorbell
/// bridge and the caller's buffer untouched; a later `sync` (which counts
/// the cancelled gets' late replies) and a new get work.
#[test]
fn dropping_a_pending_get_cancels_it_without_waiting() {
    let line = &sleep_report(&["2", "cancel"], &[], "cancel:");
    let drop_ms: u64 = field(line, "drop_ms=").parse().expect("a number");
    assert!(
        drop_ms < 100,
        "dropping pending gets took {drop_ms} ms: {line}"
    );
    assert_eq!(field(line, "waiters="), "0", "{line}");
    assert_eq!(field(line, "sync="), "ok", "{line}");
    assert_eq!(field(line, "data="), "ok", "{line}");
    assert_eq!(field(line, "untouched="), "ok", "{line}");
}

/// A pending get's waker is woken by the reply handler through the get's
/// slot, on whichever thread polls the endpoint (here a second thread,
/// `poller`), not only by the doorbell bridge; the get then completes.
#[test]
fn the_reply_handler_wakes_a_pending_get_on_the_thread_that_polls() {
    let line = &sleep_report(&["1", "slot"], &[], "slot:");
    let names = field(line, "woken_by=");
    assert!(
        names.split(',').any(|n| n == "poller"),
        "the slot's waker was not woken by the handler on the polling thread: {line}"
    );
    assert_eq!(field(line, "data="), "ok", "{line}");
    assert_eq!(field(line, "waiters="), "0", "{line}");
}

/// Commit 38b8f31's regression test: over pure UDP (no doorbell count)
/// a waiter that read the endpoint's count, saw its word clear,
/// registered with the count and saw the word still clear, must be woken
/// within 3 s after a poll round (another thread's) then ran the word's
/// handler and met a malformed message in the same batch (the round's
/// poll failed) (`t_wake_batch`; before 38b8f31 that round counted
/// nothing and the bridge slept until the next datagram: 12 s here).
#[test]
fn a_malformed_message_in_the_batch_keeps_a_waiters_wake_up() {
    let r = run_job(
        2,
        &example("t_wake_batch"),
        &[],
        &[
            ("SPLITRT_FABRIC", "udp"),
            ("SPLITRT_SEGMENT_SIZE", "1M"),
            // keepalives 12 s apart: none wakes the bridge within the bound
            ("SPLITRT_UDP_PEER_TIMEOUT", "60"),
        ],
        60,
    );
    r.ok();
    assert!(r.stdout.contains("wake batch: woken in"), "{r:?}");
    assert_eq!(r.stdout.matches("wake batch ok").count(), 2, "{r:?}");
}
