//! Hierarchical team collectives (`t_team_hier`; `pgas/src/team_hier.rs`,
//! `team_hier_a2a.rs`, `team_hier_scan.rs`: the program also checks
//! alltoall, reduce_scatter and both scans, on a team whose order
//! interleaves hosts too) where the members share one host: the same calls take the one-area
//! shared-memory path (native) or the flat messages (the AM path, UDP),
//! with the same results. Across hosts (the hierarchical path itself,
//! and its messages counted against the flat ones) in `tests/cluster.rs`
//! (`srun_pmi2_hosts_team_hier`).

mod common;
use common::*;

fn conformance(n: usize, rma: &str, fabric: &str) {
    every_rank_reports(
        n,
        "t_team_hier",
        &["conf"],
        rma,
        &[
            ("SPLITRT_FABRIC", fabric),
            ("SPLITRT_HANG_REPORT", "10"),
            ("SPLITRT_HANG_ABORT", "1"),
        ],
        "team_hier ok",
        120,
    );
}

#[test]
fn hier_one_host_shm_native_3_ranks() {
    conformance(3, "native", "shm");
}

#[test]
fn hier_one_host_shm_am_5_ranks() {
    conformance(5, "am", "shm");
}

#[test]
fn hier_one_host_udp_native_3_ranks() {
    conformance(3, "native", "udp");
}

/// `t_team_hier nb` (the non-blocking forms, `team_hier_nb.rs`) where
/// the members share one host: flat messages, the same results.
fn nb_conformance(n: usize, rma: &str, fabric: &str) {
    every_rank_reports(
        n,
        "t_team_hier",
        &["nb"],
        rma,
        &[
            ("SPLITRT_FABRIC", fabric),
            ("SPLITRT_HANG_REPORT", "10"),
            ("SPLITRT_HANG_ABORT", "1"),
        ],
        "team_hier nb ok",
        120,
    );
}

#[test]
fn nbsig_hier_nb_one_host_shm_native_3_ranks() {
    nb_conformance(3, "native", "shm");
}

#[test]
fn nbsig_hier_nb_one_host_shm_am_5_ranks() {
    nb_conformance(5, "am", "shm");
}

#[test]
fn nbsig_hier_nb_one_host_udp_native_3_ranks() {
    nb_conformance(3, "native", "udp");
}

/// `t_team_hier nbscan` (the non-blocking reduce_scatter and scans,
/// `team_hier_nb_scan.rs`) where the members share one host: flat
/// messages, the flat results.
fn nbscan_conformance(n: usize, rma: &str, fabric: &str) {
    every_rank_reports(
        n,
        "t_team_hier",
        &["nbscan"],
        rma,
        &[
            ("SPLITRT_FABRIC", fabric),
            ("SPLITRT_HANG_REPORT", "10"),
            ("SPLITRT_HANG_ABORT", "1"),
        ],
        "team_hier nbscan ok",
        120,
    );
}

#[test]
fn hnbscan_one_host_shm_native_3_ranks() {
    nbscan_conformance(3, "native", "shm");
}

#[test]
fn hnbscan_one_host_udp_am_5_ranks() {
    nbscan_conformance(5, "am", "udp");
}
