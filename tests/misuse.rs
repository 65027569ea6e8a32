//! API misuse refused at the caller, as real jobs: each mode of `t_misuse`
//! checks its refusals and that the job goes on unharmed.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn refused_and_job_goes_on(mode: &str) {
    let r = run_job(3, &example("t_misuse"), &[mode], &[], 60);
    r.ok();
    assert_eq!(
        r.stdout.matches(&format!("misuse ok {mode}")).count(),
        3,
        "{}",
        r.stdout
    );
}

#[test]
fn a_handle_of_another_builder_is_refused_at_the_sender() {
    refused_and_job_goes_on("foreign_handle");
}

#[test]
fn far_and_overflowing_global_pointers_are_refused() {
    refused_and_job_goes_on("far_pointers");
}

#[test]
fn a_second_attach_is_an_error_that_leaves_the_job_running() {
    refused_and_job_goes_on("second_attach");
}

#[test]
fn user_longs_into_reserved_ranges_are_refused() {
    refused_and_job_goes_on("reserved_long");
}

/// A rank that promised one thread (SPLITRT_THREADS=single, no locks on
/// its rings) refuses a call from another thread with a clear error
/// instead of racing, and goes on.
#[test]
fn a_single_threaded_rank_refuses_another_thread() {
    let r = run_job(
        3,
        &example("t_misuse"),
        &["other_thread"],
        &[("SPLITRT_THREADS", "single")],
        60,
    );
    r.ok();
    assert_eq!(
        r.stdout.matches("misuse ok other_thread").count(),
        3,
        "{r:?}"
    );
}

#[test]
fn limits_of_a_rank_that_does_not_exist_are_errors() {
    refused_and_job_goes_on("bad_peer");
}

#[test]
fn a_finished_endpoint_refuses_everything_at_once() {
    let t = Instant::now();
    refused_and_job_goes_on("after_finish");
    assert!(t.elapsed() < Duration::from_secs(20));
}

/// Rank 0 in Pgas::barrier while the others are in Pgas::finish: every
/// rank ends with an error naming the mismatch, long before the timeout.
#[test]
fn a_pgas_barrier_never_matches_the_exit_barrier() {
    let t = Instant::now();
    let r = run_job(3, &example("t_misuse"), &["pgas_vs_finish"], &[], 60);
    assert!(t.elapsed() < Duration::from_secs(20), "{r:?}");
    assert_ne!(r.code, 0);
    assert_ne!(r.code, 124);
    assert!(
        r.stderr.contains("collective mismatch")
            && r.stderr.contains("Pgas::barrier #")
            && r.stderr.contains("the exit barrier of Pgas::finish #"),
        "{}",
        r.stderr
    );
}

/// A broken peer sends a packet with an unregistered handler id: the
/// receiver is told, naming that peer, and its collectives keep working.
#[test]
fn an_unknown_handler_id_is_the_senders_fault_and_collectives_go_on() {
    refused_and_job_goes_on("raw_unknown_id");
}
