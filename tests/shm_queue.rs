//! The shared receive queue (`SPLITRT_SHM_QUEUE=shared`, issue 28 point 1)
//! through the launcher: the AM conformance and flood programs of
//! `tests/am.rs` with every rank's inbound traffic in one queue per
//! channel, tiny queues included (every sender of the host contends for two
//! cells, Mediums stream over many), and several sender threads.

mod common;
use common::*;

const SHARED: (&str, &str) = ("SPLITRT_SHM_QUEUE", "shared");

fn conformance(n: usize, rounds: &str, extra: &[(&str, &str)]) {
    let mut env = vec![SHARED, ("SPLITRT_SEGMENT_SIZE", "16M")];
    env.extend_from_slice(extra);
    let r = run_job(n, &example("t_conformance"), &[rounds], &env, 120);
    r.ok();
    assert_eq!(
        r.stdout.matches("conformance ok").count(),
        n,
        "every rank reports: {}",
        r.stdout
    );
}

fn stress(n: usize, msgs: &str, threads: &str, ring: &str, cell: &str) {
    let r = run_job(
        n,
        &example("t_stress"),
        &[msgs, threads],
        &[
            SHARED,
            ("SPLITRT_SEGMENT_SIZE", "8M"),
            ("SPLITRT_RING_LEN", ring),
            ("SPLITRT_CELL_SIZE", cell),
        ],
        120,
    );
    r.ok();
    assert_eq!(r.stdout.matches("stress ok").count(), n, "{}", r.stdout);
}

#[test]
fn shmq_conformance_1_2_4_ranks() {
    conformance(1, "2", &[]);
    conformance(2, "3", &[]);
    conformance(4, "2", &[]);
}

/// 256 B cells and queues of 2 cells shared by 3 senders: every large
/// Medium streams, interleaved with the other senders' cells.
#[test]
fn shmq_conformance_tiny_queues() {
    conformance(
        3,
        "1",
        &[("SPLITRT_CELL_SIZE", "256"), ("SPLITRT_RING_LEN", "2")],
    );
}

#[test]
fn shmq_conformance_single_threaded() {
    conformance(
        3,
        "1",
        &[
            ("SPLITRT_CELL_SIZE", "256"),
            ("SPLITRT_RING_LEN", "2"),
            ("SPLITRT_THREADS", "single"),
        ],
    );
}

/// testcore2-style flood: every rank floods every rank through 2-cell
/// queues (4 and 8 ranks), and 3 sender threads per rank.
#[test]
fn shmq_stress_floods() {
    stress(4, "400", "1", "2", "256");
    stress(8, "150", "1", "2", "512");
    stress(3, "200", "3", "4", "512");
}

/// With nothing set (`SPLITRT_SHM_QUEUE=auto`, the default) a host of 16
/// ranks runs on the shared receive queue: every rank of a 16-rank
/// `t_scale` job (one Short to every other rank) reports the queue its
/// fabric chose, and its own file is the shared queue's size (the same
/// whatever the ranks), not the rings' (a ring per sender and channel).
#[test]
fn shmq_auto_runs_16_ranks_on_the_shared_queue() {
    use splitrt::runtime::fabric::shm::layout::{medium_slots_for, Layout};
    let n = splitrt::runtime::fabric::shm::queue_choice::SHARED_QUEUE_FROM;
    let (seg, cell, len, medium) = (1usize << 20, 4096, 64, 65536);
    let shared_kb = Layout::shared(cell, len, seg, medium).unwrap().total / 1024;
    let pairs_kb = Layout::new(n, cell, len, seg, medium, medium_slots_for(n, medium))
        .unwrap()
        .total
        / 1024;
    assert_ne!(shared_kb, pairs_kb);
    let _lock = job_lock();
    let mut c = launch(
        n,
        &example("t_scale"),
        &[],
        &[("SPLITRT_SEGMENT_SIZE", "1M")],
        120,
    );
    // nothing set: not this test process's setting either
    for v in [
        "SPLITRT_SHM_QUEUE",
        "SPLITRT_CELL_SIZE",
        "SPLITRT_RING_LEN",
        "SPLITRT_MAX_MEDIUM",
        "SPLITRT_MEDIUM_SLOTS",
    ] {
        c.env_remove(v);
    }
    let r = finish(
        c.spawn().expect("spawn splitrt-run"),
        std::time::Duration::from_secs(150),
    );
    r.ok();
    let lines: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("scale rank "))
        .collect();
    assert_eq!(lines.len(), n, "every rank reports: {}", r.stdout);
    for l in lines {
        assert!(l.ends_with(" queue shared"), "{l}");
        let kb: usize = l
            .split(" shm_file_kb ")
            .nth(1)
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no shm_file_kb: {l}"));
        assert_eq!(kb, shared_kb, "{l}");
    }
    // SPLITRT_MEDIUM_SLOTS was not set: no note about it
    assert!(
        !r.stderr.contains("SPLITRT_MEDIUM_SLOTS is ignored"),
        "{}",
        r.stderr
    );
}

/// Review of `auto`: `SPLITRT_MEDIUM_SLOTS` set on a host of 16 ranks,
/// which `auto` gives the shared queue (no landing zones), was ignored
/// without a word. The host's first rank now says so once at start,
/// naming why the queue was chosen; the job runs as before.
#[test]
fn shmq_auto_notes_an_ignored_medium_slots_setting_once() {
    let n = splitrt::runtime::fabric::shm::queue_choice::SHARED_QUEUE_FROM;
    let _lock = job_lock();
    let mut c = launch(
        n,
        &example("t_scale"),
        &[],
        &[
            ("SPLITRT_SEGMENT_SIZE", "1M"),
            ("SPLITRT_MEDIUM_SLOTS", "4"),
        ],
        120,
    );
    c.env_remove("SPLITRT_SHM_QUEUE");
    let r = finish(
        c.spawn().expect("spawn splitrt-run"),
        std::time::Duration::from_secs(150),
    );
    r.ok();
    assert_eq!(
        r.stdout.matches(" queue shared").count(),
        n,
        "every rank on the queue: {}",
        r.stdout
    );
    let note = "splitrt: note: SPLITRT_MEDIUM_SLOTS is ignored";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "SPLITRT_SHM_QUEUE=auto (the default) with {n} rank(s)"
        )),
        "{}",
        r.stderr
    );
}
