//! Progress without polling (`splitrt::am::Progress`): ranks that compute
//! without calling into splitrt still answer AM requests and serve
//! one-sided operations on the AM path when they run a progress thread
//! (`tests/progs/progress.rs`), over shared memory and loopback UDP; the
//! thread is joined at finish.

mod common;
use common::*;

const UDP: (&str, &str) = ("SPLITRT_FABRIC", "udp");
const SHM: (&str, &str) = ("SPLITRT_FABRIC", "shm");

fn progress(n: usize, mode: &str, env: &[(&str, &str)]) -> Run {
    run_job(n, &example("t_progress"), &[mode], env, 90)
}

fn all_ok(n: usize, mode: &str, env: &[(&str, &str)]) {
    let r = progress(n, mode, env);
    r.ok();
    assert_eq!(r.stdout.matches("progress ok").count(), n, "{}", r.stdout);
}

/// With a progress thread (handlers inline or only on the thread), on 2
/// and 3 ranks, both RMA paths, shm and UDP.
#[test]
fn progress_thread_answers_while_ranks_compute_shm_and_udp() {
    for fabric in [SHM, UDP] {
        for rma in ["am", "native"] {
            for mode in ["thread", "thread-only"] {
                for n in [2, 3] {
                    all_ok(n, mode, &[fabric, ("SPLITRT_RMA", rma)]);
                }
            }
        }
    }
}

/// 8 ranks whose progress threads share 2 cores with their computing
/// threads: the threads must yield the CPU for every rank to progress.
#[test]
fn progress_threads_of_8_ranks_share_the_cores() {
    all_ok(8, "thread-only", &[SHM, ("SPLITRT_RMA", "am")]);
}

/// A handler that panics on rank 1's progress thread: rank 1's wait and
/// its finish report it (naming the panic), the job fails (rank 0 hears
/// that rank 1 failed), and rank 1's main thread never runs the handler
/// again (the poll the panic cut short is not resumed).
#[test]
fn a_panic_on_the_progress_thread_surfaces_at_the_wait_and_finish() {
    for fabric in [SHM, UDP] {
        let r = progress(2, "panic", &[fabric]);
        assert_ne!(r.code, 0, "the job fails: {}", r.stdout);
        let why = "a handler panicked on the progress thread: boom";
        for line in [
            "progress panic at the wait:",
            "progress panic at finish:",
            "progress panic rank 0 saw:",
        ] {
            assert!(
                r.stdout
                    .lines()
                    .any(|l| l.contains(line) && l.contains(why)),
                "{line}\n--- stdout\n{}\n--- stderr\n{}",
                r.stdout,
                r.stderr
            );
        }
        assert!(
            !r.stderr.contains("thread 'main'"),
            "the main thread ran the handler again:\n{}",
            r.stderr
        );
    }
}

/// Two threads of each rank set the progress mode at once, many times:
/// exactly one progress thread runs afterwards, none after polling (the
/// setting was not serialised: a thread could be started twice and one
/// left running, never joined).
#[test]
fn concurrent_set_progress_leaves_one_thread() {
    all_ok(2, "race", &[SHM]);
}
