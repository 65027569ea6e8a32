//! The PGAS layer through real multi-process jobs, on both one-sided paths:
//! `native` (copies through the mapped peer segment) and `am` (Active
//! Message request/reply). `t_pgas_model` checks random get/put/store
//! sequences against a sequential model, store_sync byte counting, atomics
//! under contention (every operation on every type: `atomics_conformance`),
//! refused bad pointers and the collectives.

mod common;
use common::*;

fn model(n: usize, rma: &str, rounds: &str, ops: &str) {
    every_rank_reports(
        n,
        "t_pgas_model",
        &[rounds, ops],
        rma,
        &[],
        "pgas model ok",
        120,
    );
}

#[test]
fn model_native_1_rank() {
    model(1, "native", "3", "200");
}

#[test]
fn model_am_1_rank() {
    model(1, "am", "3", "200");
}

#[test]
fn model_native_2_ranks() {
    model(2, "native", "4", "200");
}

#[test]
fn model_am_2_ranks() {
    model(2, "am", "4", "200");
}

/// An odd size (the atomics conformance's owners and bit patterns).
#[test]
fn model_native_3_ranks() {
    model(3, "native", "1", "100");
}

#[test]
fn model_am_3_ranks() {
    model(3, "am", "1", "100");
}

#[test]
fn model_native_4_ranks() {
    model(4, "native", "3", "150");
}

#[test]
fn model_am_4_ranks() {
    model(4, "am", "3", "150");
}

#[test]
fn model_native_8_ranks() {
    model(8, "native", "2", "100");
}

#[test]
fn model_am_8_ranks() {
    model(8, "am", "2", "100");
}

/// The launcher flag selects the path too (flag > variable).
#[test]
fn rma_flag_overrides_environment() {
    let _lock = job_lock();
    let out = std::process::Command::new(launcher())
        .args(["-n", "2", "--rma", "am"])
        .arg(example("t_pgas_model"))
        .args(["1", "20"])
        .env("SPLITRT_RMA", "native")
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("(Am path)").count(), 2, "{stdout}");
}

/// `t_capabilities` on 2 ranks over `fabric` (native path, the default):
/// each rank's `caps:` line, after checking that every rank's put and get
/// arrived.
fn capabilities(fabric: &str) -> Vec<String> {
    let r = run_job(
        2,
        &example("t_capabilities"),
        &[],
        &[("SPLITRT_FABRIC", fabric)],
        60,
    );
    r.ok();
    assert_eq!(
        r.stdout.matches("capabilities ok").count(),
        2,
        "{}",
        r.stdout
    );
    r.stdout
        .lines()
        .filter_map(|l| Some(l[l.find("caps: ")?..].to_string()))
        .collect()
}

/// Shared memory lends the PGAS layer the load/store capability (both
/// ranks' segments mapped) and no one-sided one: puts and gets are
/// copies, no datagram involved.
#[test]
fn shm_lends_pgas_load_store() {
    let caps = capabilities("shm");
    assert_eq!(caps.len(), 2, "{caps:?}");
    for c in &caps {
        assert!(
            c.ends_with("load_store=true one_sided=false mapped=2 put_datagrams=-"),
            "{caps:?}"
        );
    }
}

/// A fabric without the load/store and one-sided capabilities (UDP):
/// the PGAS layer's puts and gets take the message path (datagrams sent
/// while the put was issued) and arrive.
#[test]
fn without_capabilities_pgas_puts_and_gets_travel_as_messages() {
    let caps = capabilities("udp");
    assert_eq!(caps.len(), 2, "{caps:?}");
    for c in &caps {
        assert!(
            c.contains("load_store=false one_sided=false mapped=0 put_datagrams="),
            "{caps:?}"
        );
        let sent: u64 = c.rsplit('=').next().unwrap().parse().unwrap();
        assert!(sent > 0, "the put sent no datagram: {caps:?}");
    }
}

/// `t_views <mode>` on `n` ranks over `rma`: every rank reports success.
fn views(mode: &str, n: usize, rma: &str) {
    views_on(mode, n, &[("SPLITRT_RMA", rma)]);
}

/// [`views`] with the given environment.
fn views_on(mode: &str, n: usize, env: &[(&str, &str)]) {
    let r = run_job(n, &example("t_views"), &[mode], env, 120);
    r.ok();
    let ok = r
        .stdout
        .lines()
        .filter(|l| l.contains(&format!("views {mode} ok")))
        .count();
    assert_eq!(ok, n, "every rank reports success:\n{}", r.stdout);
}

/// Issue 23, point 1: a view read around a write through the same
/// location sees the write (the `&[u64]` of `local()` returned the stale
/// value at opt-level 1 before views).
#[test]
fn view_sees_writes_native_2_ranks() {
    views("alias", 2, "native");
}

#[test]
fn view_sees_writes_am_2_ranks() {
    views("alias", 2, "am");
}

/// Issue 23, point 3: `drop(pg); a.local().get(0)` reads mapped memory (the
/// array holds the endpoint); before, the rank died of SIGSEGV.
#[test]
fn array_outlives_pgas_native_2_ranks() {
    views("drop", 2, "native");
}

#[test]
fn array_outlives_pgas_am_2_ranks() {
    views("drop", 2, "am");
}

/// Frozen arrays: a plain `&[T]`, every write into them refused at the
/// sender on both paths, thaw restores writes.
#[test]
fn frozen_array_native_3_ranks() {
    views("frozen", 3, "native");
}

#[test]
fn frozen_array_am_3_ranks() {
    views("frozen", 3, "am");
}

/// Freeze and thaw against a writer thread on every rank: a put that
/// passed its check before the freeze finishes before it (the writers
/// announce themselves; the freeze runs membarrier and waits), and no
/// rank writes before every rank gave its slice up (thaw's first
/// barrier). Before: rank 0's frozen `&[u64]` changed under it.
#[test]
fn frozen_array_races_writer_threads_native_2_ranks() {
    views("race", 2, "native");
}

#[test]
fn frozen_array_races_writer_threads_am_2_ranks() {
    views("race", 2, "am");
}

/// The same over UDP, where a put is deposited when its packet arrives:
/// each rank's freeze waits until its peers acknowledged what it sent.
#[test]
fn frozen_array_races_writer_threads_udp_2_ranks() {
    views_on(
        "race",
        2,
        &[("SPLITRT_RMA", "am"), ("SPLITRT_FABRIC", "udp")],
    );
}

/// A user Long acknowledged before the target froze the range, and fed
/// after: refused as it is written (UDP deposits when the target polls,
/// after the ack), the frozen bytes unchanged, reported naming the sender.
/// Before: the bytes were written under the frozen range.
#[test]
fn a_late_udp_long_is_refused_at_deposit() {
    views_on("late", 2, &[("SPLITRT_FABRIC", "udp")]);
}

/// A seal that fails past the freeze's barrier leaves the range frozen
/// (other ranks may hold slices of it). Before: the range was unfrozen.
/// Writes and reads into splitrt's reserved bytes and collective scratch
/// are refused on every path (see `t_views reserved`).
#[test]
fn the_reserved_bytes_and_scratch_are_refused_native_2_ranks() {
    views("reserved", 2, "native");
}

#[test]
fn the_reserved_bytes_and_scratch_are_refused_am_2_ranks() {
    views("reserved", 2, "am");
}

/// A collective from a second thread of a rank while another is inside one
/// is refused (see `t_views threads`).
#[test]
fn a_collective_from_a_second_thread_is_refused_native_2_ranks() {
    views("threads", 2, "native");
}

#[test]
fn a_collective_from_a_second_thread_is_refused_am_2_ranks() {
    views("threads", 2, "am");
}

#[test]
fn a_failed_seal_keeps_the_range_frozen() {
    views("sealfail", 1, "native");
}

#[test]
fn frozen_array_native_1_rank() {
    views("frozen", 1, "native");
}
