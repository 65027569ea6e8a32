//! splitrt-run's contract: environment, prefixes, argv passed unchanged,
//! bad programs and bad settings reported clearly, singleton runs.

mod common;
use common::*;
use std::process::Command;

#[test]
fn ranks_get_their_environment_and_prefixes() {
    let sh = std::path::PathBuf::from("/bin/sh");
    let r = run_job(
        3,
        &sh,
        &["-c", "echo \"$SPLITRT_RANK/$SPLITRT_SIZE/$SPLITRT_LOCAL_RANK/$SPLITRT_LOCAL_SIZE/$SPLITRT_NODE $1\"; echo err >&2", "sh", "a b"],
        &[],
        30,
    );
    r.ok();
    for rank in 0..3 {
        let line = format!("[{rank}] {rank}/3/{rank}/3/0 a b");
        assert!(
            r.stdout.lines().any(|l| l == line),
            "missing {line:?}:\n{}",
            r.stdout
        );
        assert!(r.stderr.contains(&format!("[{rank}] err")), "{}", r.stderr);
    }
}

#[test]
fn missing_program_is_a_clear_error() {
    let r = run_job(2, &"/nonexistent/prog".into(), &[], &[], 30);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("starting rank 0: /nonexistent/prog"),
        "{}",
        r.stderr
    );
}

#[test]
fn bad_setting_fails_before_any_rank_starts() {
    let r = run_job(2, &example("hello"), &[], &[("SPLITRT_RING_LEN", "1")], 30);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("SPLITRT_RING_LEN=1 must be at least 2"),
        "{}",
        r.stderr
    );
}

#[test]
fn flags_override_environment() {
    let _lock = job_lock();
    let out = Command::new(launcher())
        .args([
            "-n",
            "1",
            "--ring-len",
            "3",
            "/bin/sh",
            "-c",
            "echo ring=$SPLITRT_RING_LEN",
        ])
        .env("SPLITRT_RING_LEN", "9")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[0] ring=3");
}

#[test]
fn program_without_launcher_is_a_one_rank_job() {
    let _lock = job_lock();
    let out = Command::new(example("hello"))
        .env_remove("SPLITRT_RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello from rank 0 of 1"));
}
