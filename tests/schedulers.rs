//! Launch under real schedulers, with no splitrt-run: Slurm's `srun` and
//! Open MPI's `mpirun`. `.ci/run` installs and starts them and then sets
//! `SPLITRT_TEST_SLURM=1` / `SPLITRT_TEST_MPIRUN=1`; with a variable set, its
//! tests must pass. Without it (a developer machine with no Slurm) they
//! report themselves skipped.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a job of N ranks of a program under one scheduler.
type Launch = fn(usize, &Path, &[&str], &[(&str, &str)]) -> Run;

fn enabled(var: &str) -> bool {
    match std::env::var(var).as_deref() {
        Ok("1") => true,
        _ => {
            eprintln!("skipped: {var} is not set (.ci/run sets it once the scheduler is up)");
            false
        }
    }
}

/// `srun -n N --overcommit PROG ARGS` (the command docs/launching.md shows).
fn srun(n: usize, prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = Command::new("srun");
    c.args(["-n", &n.to_string(), "--overcommit", "--time=5"]);
    sched(c, prog, args, env)
}

/// `mpirun --allow-run-as-root --oversubscribe -n N PROG ARGS`.
fn mpirun(n: usize, prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
    ]);
    for (k, _) in env {
        c.args(["-x", k]); // Open MPI forwards only what it is told to
    }
    sched(c, prog, args, env)
}

fn sched(mut c: Command, prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let _lock = job_lock();
    c.arg(prog)
        .args(args)
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    finish(
        c.spawn().expect("start the scheduler's launcher"),
        Duration::from_secs(120),
    )
}

fn conformance(run: Launch) {
    let r = run(
        4,
        &example("t_conformance"),
        &["1"],
        &[("SPLITRT_SEGMENT_SIZE", "16M")],
    );
    r.ok();
    assert_eq!(
        r.stdout.matches("conformance ok").count(),
        4,
        "{}",
        r.stdout
    );
}

fn pgas_example(run: Launch, rma: &str) {
    let r = run(4, &example("npb_cg"), &["S"], &[("SPLITRT_RMA", rma)]);
    r.ok();
    assert!(
        r.stdout
            .contains("Verification    =               SUCCESSFUL"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("Total processes =                        4"),
        "{}",
        r.stdout
    );
}

/// A rank that panics ends the job with a clear error on every other rank
/// (no hang) and a failing exit code from the scheduler's launcher.
fn rank_failure(run: Launch) {
    let t = Instant::now();
    let r = run(4, &example("t_faults"), &["panic", "2"], &[]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("panics on purpose"), "{}", r.stderr);
    assert!(
        r.stderr
            .matches("job aborted: rank 2 failed: the rank panicked")
            .count()
            >= 1,
        "the other ranks say who failed:\n{}",
        r.stderr
    );
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn srun_am_conformance() {
    if enabled("SPLITRT_TEST_SLURM") {
        conformance(srun);
    }
}

#[test]
fn srun_pgas_example_native_and_am() {
    if enabled("SPLITRT_TEST_SLURM") {
        pgas_example(srun, "native");
        pgas_example(srun, "am");
    }
}

#[test]
fn srun_rank_failure_ends_the_job() {
    if enabled("SPLITRT_TEST_SLURM") {
        rank_failure(srun);
    }
}

#[test]
fn srun_propagates_the_exit_code() {
    if enabled("SPLITRT_TEST_SLURM") {
        let r = srun(2, &example("t_faults"), &["exit", "1"], &[]);
        assert_eq!(r.code, 3, "srun returns the failing task's code: {r:?}");
    }
}

/// The multi-node way, on one node: rank 0 listens at SPLITRT_BOOTSTRAP,
/// every rank proves it holds SPLITRT_JOB_KEY; without the key the job is
/// refused with a message naming it.
#[test]
fn srun_with_an_explicit_bootstrap_address() {
    if enabled("SPLITRT_TEST_SLURM") {
        // a port free now (a fixed guess from the pid collided with a port
        // in use: EADDRINUSE); each job binds it again in turn
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let r = srun(2, &example("hello"), &[], &[("SPLITRT_BOOTSTRAP", &addr)]);
        assert_ne!(r.code, 0, "no key, no job: {r:?}");
        assert!(r.stderr.contains("SPLITRT_JOB_KEY is not"), "{}", r.stderr);
        let key = "5e".repeat(32);
        let r = srun(
            3,
            &example("hello"),
            &[],
            &[("SPLITRT_BOOTSTRAP", &addr), ("SPLITRT_JOB_KEY", &key)],
        );
        r.ok();
        assert_eq!(
            r.stdout.matches("rank got \"hello from rank").count(),
            3,
            "{}",
            r.stdout
        );
    }
}

#[test]
fn mpirun_am_conformance() {
    if enabled("SPLITRT_TEST_MPIRUN") {
        conformance(mpirun);
    }
}

#[test]
fn mpirun_pgas_example_native_and_am() {
    if enabled("SPLITRT_TEST_MPIRUN") {
        pgas_example(mpirun, "native");
        pgas_example(mpirun, "am");
    }
}

#[test]
fn mpirun_rank_failure_ends_the_job() {
    if enabled("SPLITRT_TEST_MPIRUN") {
        rank_failure(mpirun);
    }
}

/// `srun --mpi=pmi2`: the address and key travel through Slurm's PMI-2
/// key-value space, so no file is needed (TMPDIR here cannot even be
/// created) and no variable either.
#[test]
fn srun_pmi2_hands_over_address_and_key() {
    if enabled("SPLITRT_TEST_SLURM") {
        let mut c = Command::new("srun");
        c.args(["--mpi=pmi2", "-n", "4", "--overcommit", "--time=5"]);
        let r = sched(
            c,
            &example("t_conformance"),
            &["1"],
            &[
                ("TMPDIR", "/nonexistent/splitrt-no-files"),
                ("SPLITRT_SEGMENT_SIZE", "16M"),
            ],
        );
        r.ok();
        assert_eq!(
            r.stdout.matches("conformance ok").count(),
            4,
            "{}",
            r.stdout
        );
    }
}
