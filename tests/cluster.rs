//! Jobs across hosts of the namespace cluster (`../shared/tools/netns-cluster.sh`;
//! `.ci/run` starts one and sets `SPLITRT_TEST_CLUSTER` to its state
//! directory). Without it these tests report themselves skipped.

mod common;
use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The running cluster's state directory, if the tests should use one.
fn cluster() -> Option<PathBuf> {
    match std::env::var_os("SPLITRT_TEST_CLUSTER") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            eprintln!("skipped: SPLITRT_TEST_CLUSTER is not set (.ci/run starts the cluster)");
            None
        }
    }
}

/// Run `args` on cluster host `host`, bounded in time.
fn on(d: &std::path::Path, host: &str, args: &[&str]) -> Run {
    let _lock = job_lock();
    let child = Command::new(d.join("bin/nsc-on"))
        .arg(host)
        .args(["timeout", "60"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nsc-on");
    finish(child, Duration::from_secs(90))
}

/// `srun --mpi=pmi2 -N2`: rank 0 (on node1) hands its address and key over
/// through Slurm's PMI-2 space to ranks on node2, every rank joins the
/// rendezvous across the network, and then the job stops at start with the
/// reason (only the shared-memory fabric exists so far).
#[test]
fn srun_pmi2_bootstraps_across_hosts() {
    let Some(d) = cluster() else { return };
    let hello = example("hello");
    let r = on(
        &d,
        "ctl",
        &["srun", "--mpi=pmi2", "-N2", "-n4", hello.to_str().unwrap()],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("the job spans hosts 'node1' and 'node2'")
            || r.stderr.contains("the job spans hosts 'node2' and 'node1'"),
        "ranks on both hosts met at the rendezvous: {}",
        r.stderr
    );
}

/// Without PMI-2 or an address, a job over several hosts is refused with a
/// message that says what to use.
#[test]
fn srun_across_hosts_without_pmi_says_what_to_set() {
    let Some(d) = cluster() else { return };
    let hello = example("hello");
    let r = on(&d, "ctl", &["srun", "-N2", "-n4", hello.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("srun --mpi=pmi2") && r.stderr.contains("SPLITRT_BOOTSTRAP"),
        "{}",
        r.stderr
    );
}
