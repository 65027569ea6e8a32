//! The ibverbs fabric from a user's side on a machine without RDMA: a job
//! asked to run on it fails at start, every rank saying what is wrong and
//! what to use instead, with no hang and nothing left in /dev/shm. (The
//! fabric's protocol runs over the verbs model in
//! `runtime/tests/rdma_model.rs`; the real device path needs hardware.)

mod common;
use common::*;

/// What a rank says when there is no RDMA: with the `ibverbs` feature the
/// device layer looks and finds none; without it, the build has none.
fn expected() -> &'static str {
    if cfg!(feature = "ibverbs") {
        "no RDMA device found; use --fabric shm or udp"
    } else {
        "built without RDMA support"
    }
}

fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn a_job_on_ibverbs_without_a_device_fails_clearly_on_every_rank() {
    if has_rdma_device() {
        eprintln!("skipped: this machine has an RDMA device");
        return;
    }
    let job = job_id("ibv");
    let r = run_job(
        3,
        &example("hello"),
        &[],
        &[("SPLITRT_FABRIC", "ibverbs"), ("SPLITRT_JOB", &job)],
        30,
    );
    assert_ne!(r.code, 0, "{r:?}");
    let told = r.stderr.matches(expected()).count();
    assert!(told >= 1, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(shm_leftovers(&job).is_empty());
}

#[test]
fn the_launcher_flag_reaches_the_fabric_too() {
    if has_rdma_device() {
        return;
    }
    let _lock = job_lock();
    let out = std::process::Command::new(launcher())
        .args(["-n", "2", "--timeout", "30", "--fabric", "ibverbs"])
        .arg(example("hello"))
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .output()
        .expect("splitrt-run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(expected()), "{err}");
}

#[test]
fn bad_ibverbs_settings_are_named() {
    for (k, v) in [
        ("SPLITRT_IBV_BUFFERS", "1"),
        ("SPLITRT_IBV_BUFFER_SIZE", "64"),
    ] {
        let r = run_job(
            2,
            &example("hello"),
            &[],
            &[("SPLITRT_FABRIC", "ibverbs"), (k, v)],
            30,
        );
        assert_ne!(r.code, 0, "{k}={v}: {r:?}");
        assert!(r.stderr.contains(k), "{k}={v}: {}", r.stderr);
    }
}
