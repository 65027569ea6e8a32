//! Active Messages over shared memory, through the launcher, as real
//! multi-process jobs.

mod common;
use common::*;
use std::path::PathBuf;

/// testcore4-style conformance: every kind x argument count 0..=16, random
/// arguments and payload sizes up to the maximum, every byte checked.
fn conformance(n: usize, rounds: &str) {
    conformance_with(n, rounds, &[("SPLITRT_SEGMENT_SIZE", "16M")]);
}

fn conformance_with(n: usize, rounds: &str, env: &[(&str, &str)]) {
    let r = run_job(n, &example("t_conformance"), &[rounds], env, 120);
    r.ok();
    assert_eq!(
        r.stdout.matches("conformance ok").count(),
        n,
        "every rank reports: {}",
        r.stdout
    );
}

/// Small cells and 2-cell rings: Mediums stream over many cells and sends
/// wait for credits (running handlers meanwhile).
const SMALL_RINGS: [(&str, &str); 3] = [
    ("SPLITRT_SEGMENT_SIZE", "8M"),
    ("SPLITRT_CELL_SIZE", "256"),
    ("SPLITRT_RING_LEN", "2"),
];

#[test]
fn conformance_1_rank() {
    conformance(1, "2");
}

#[test]
fn conformance_2_ranks() {
    conformance(2, "3");
}

#[test]
fn conformance_4_ranks() {
    conformance(4, "2");
}

/// 8 ranks on this 2-core machine complete the conformance test.
#[test]
fn conformance_8_ranks_oversubscribed() {
    conformance(8, "1");
}

/// Small cells force Medium payloads to stream over many cells.
#[test]
fn conformance_small_cells_short_rings() {
    conformance_with(3, "1", &SMALL_RINGS);
}

/// `SPLITRT_THREADS=single` (sends and polls without locks on the
/// attaching thread) over the same small rings.
#[test]
fn conformance_single_threaded() {
    let mut env = SMALL_RINGS.to_vec();
    env.push(("SPLITRT_THREADS", "single"));
    conformance_with(3, "1", &env);
}

fn stress(n: usize, msgs: &str, threads: &str, ring: &str, cell: &str) {
    let r = run_job(
        n,
        &example("t_stress"),
        &[msgs, threads],
        &[
            ("SPLITRT_SEGMENT_SIZE", "8M"),
            ("SPLITRT_RING_LEN", ring),
            ("SPLITRT_CELL_SIZE", cell),
        ],
        120,
    );
    r.ok();
    assert_eq!(r.stdout.matches("stress ok").count(), n, "{}", r.stdout);
    // With 2-cell rings every rank must have run out of credits at times.
    if ring == "2" {
        let refusals: u64 = r
            .stdout
            .lines()
            .filter_map(|l| l.split(", ").last()?.split(' ').next()?.parse::<u64>().ok())
            .sum();
        assert!(refusals > 0, "no back-pressure seen:\n{}", r.stdout);
    }
}

/// testcore2-style flood with credits exhausted on all ranks at once.
#[test]
fn stress_flood_tiny_rings() {
    stress(4, "400", "1", "2", "256");
}

#[test]
fn stress_flood_8_ranks() {
    stress(8, "150", "1", "2", "512");
}

/// Several threads of each rank send at once (the endpoint is Send + Sync).
#[test]
fn stress_threads() {
    stress(3, "200", "3", "4", "512");
}

#[test]
fn hello_runs_on_4_ranks() {
    let r = run_job(4, &example("hello"), &[], &[], 60);
    r.ok();
    for rank in 0..4 {
        let from = (rank + 3) % 4;
        let line = format!("[{rank}] rank got \"hello from rank {from} of 4\" from rank {from}");
        assert!(
            r.stdout.contains(&line),
            "missing {line:?} in\n{}",
            r.stdout
        );
    }
}

#[test]
fn am_reqrep_example_runs() {
    run_job(4, &example("am_reqrep"), &[], &[], 60).ok();
}

/// A rank waiting a second for a peer that computes sleeps on its doorbell
/// (woken by the message, or every 2 ms to check on the job) instead of
/// waking every 100 us: a few hundred wake-ups, not thousands, and the
/// message still arrives.
/// Ranks bound one per CPU (as `srun --cpu-bind=cores` or `mpirun
/// --bind-to core` bind them) each see one CPU in their own mask, yet are
/// not oversubscribed: they keep spinning while they wait (yielding at once
/// had made a Short round trip 3.5x slower). Ranks bound to one CPU
/// together are oversubscribed and do not spin.
#[test]
fn ranks_bound_one_per_cpu_spin_and_ranks_sharing_one_cpu_do_not() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs 2 CPUs");
        return;
    }
    let sh = PathBuf::from("/bin/sh");
    let idle = example("t_idle");
    let idle = idle.to_str().expect("utf-8 path");
    for (cpu, spins) in [("$SPLITRT_RANK", true), ("0", false)] {
        let script = format!("exec taskset -c {cpu} \"$0\" 0");
        let r = run_job(2, &sh, &["-c", &script, idle], &[], 60);
        assert_eq!(r.code, 0, "{r:?}");
        let spin: Vec<u64> = r
            .stdout
            .lines()
            .filter_map(|l| l.split("spin_us=").nth(1))
            .map(|v| v.trim().parse().expect("a number"))
            .collect();
        assert_eq!(spin.len(), 2, "{r:?}");
        assert!(
            spin.iter().all(|&s| (s > 0) == spins),
            "bound to CPU {cpu}: spin {spin:?} us\n{r:?}"
        );
    }
}

#[test]
fn an_idle_rank_sleeps_until_a_peer_wakes_it() {
    let r = run_job(2, &example("t_idle"), &["1"], &[], 60);
    assert_eq!(r.code, 0, "{r:?}");
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("idle wait:"))
        .unwrap_or_else(|| panic!("{r:?}"));
    let n: u64 = line
        .split("idle wait: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // 1 s at one wake-up per 2 ms is 500; the 100 us timed sleep was > 5000
    assert!(n < 1500, "{line}");
}
