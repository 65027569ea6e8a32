//! Team collectives through shared memory and the world collectives as
//! the world team's (`t_team_shm`): on shared memory (both one-sided
//! paths: the native one takes the shared-memory path, the AM path goes
//! by team messages) on 1, 2, 3, 4 and 8 ranks, over UDP, and (in
//! `tests/verbs_model.rs`) over the verbs model; a member that never
//! arrives at a split team's shared-memory collective is named.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn conformance(n: usize, rma: &str, fabric: &str) {
    every_rank_reports(
        n,
        "t_team_shm",
        &["conf"],
        rma,
        &[
            ("SPLITRT_FABRIC", fabric),
            // a rank out of step hangs: end the job, naming it
            ("SPLITRT_HANG_REPORT", "10"),
            ("SPLITRT_HANG_ABORT", "1"),
        ],
        "team_shm ok",
        120,
    );
}

#[test]
fn teamshm_shm_native_1_rank() {
    conformance(1, "native", "shm");
}

#[test]
fn teamshm_shm_am_1_rank() {
    conformance(1, "am", "shm");
}

#[test]
fn teamshm_shm_native_2_ranks() {
    conformance(2, "native", "shm");
}

#[test]
fn teamshm_shm_am_2_ranks() {
    conformance(2, "am", "shm");
}

#[test]
fn teamshm_shm_native_3_ranks() {
    conformance(3, "native", "shm");
}

#[test]
fn teamshm_shm_am_3_ranks() {
    conformance(3, "am", "shm");
}

#[test]
fn teamshm_shm_native_4_ranks() {
    conformance(4, "native", "shm");
}

#[test]
fn teamshm_shm_am_4_ranks() {
    conformance(4, "am", "shm");
}

#[test]
fn teamshm_shm_native_8_ranks() {
    conformance(8, "native", "shm");
}

#[test]
fn teamshm_shm_am_8_ranks() {
    conformance(8, "am", "shm");
}

#[test]
fn teamshm_udp_native_3_ranks() {
    conformance(3, "native", "udp");
}

#[test]
fn teamshm_udp_am_4_ranks() {
    conformance(4, "am", "udp");
}

#[test]
fn teamshm_udp_am_2_ranks() {
    conformance(2, "am", "udp");
}

#[test]
fn teamshm_udp_native_8_ranks() {
    conformance(8, "native", "udp");
}

/// A member of a split team (the odd ranks of 8) that never calls its
/// allreduce, which goes through shared memory: the others' hang report
/// names it, and with SPLITRT_HANG_ABORT=1 the job ends within seconds.
#[test]
fn teamshm_a_member_that_never_arrives_is_named() {
    let t = Instant::now();
    let r = run_job(
        8,
        &example("t_team_shm"),
        &["absent", "3"],
        &[("SPLITRT_HANG_REPORT", "1"), ("SPLITRT_HANG_ABORT", "1")],
        60,
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{r:?}");
    assert_ne!(r.code, 0);
    assert_ne!(r.code, 124, "ended by the report, not the timeout: {r:?}");
    assert!(
        r.stderr.contains("in Team::allreduce #")
            && r.stderr.contains("(world rank 3) to send its part"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("(world rank 1) to send its part")
            && !r.stderr.contains("(world rank 5) to send its part"),
        "only the missing rank is named: {}",
        r.stderr
    );
}
