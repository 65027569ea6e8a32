//! splitrt-run's contract: environment, prefixes, argv passed unchanged,
//! bad programs and bad settings reported clearly, singleton runs.

mod common;
use common::*;
use std::path::Path;
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

/// Absurd durations on the command line or in the environment are clear
/// errors naming the setting, never a panic.
#[test]
fn absurd_durations_are_refused_clearly() {
    let hello = example("hello");
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 6] = [
        (&["--timeout", "1e20"], &[], "--timeout"),
        (&["--bootstrap-timeout", "1e19"], &[], "--bootstrap-timeout"),
        (&[], &[("SPLITRT_SPIN_US", "1e30")], "SPLITRT_SPIN_US"),
        (&[], &[("SPLITRT_SLEEP_US", "inf")], "SPLITRT_SLEEP_US"),
        (
            &[],
            &[("SPLITRT_BOOTSTRAP_TIMEOUT", "nan")],
            "SPLITRT_BOOTSTRAP_TIMEOUT",
        ),
        (
            &[],
            &[("SPLITRT_HANG_REPORT", "1e300")],
            "SPLITRT_HANG_REPORT",
        ),
    ];
    for (flags, env, name) in cases {
        let out = Command::new(launcher())
            .args(["-n", "2"])
            .args(flags)
            .arg(&hello)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(name) && !err.contains("panicked"),
            "{name}: {err}"
        );
    }
}

/// Lines of many ranks printed at once, to stdout and stderr merged into
/// one pipe (as `2>&1` does), never interleave: each relayed line is its
/// prefix and one whole line of one rank.
#[test]
fn output_lines_never_interleave() {
    let _lock = job_lock();
    let (mut rd, wr) = std::io::pipe().unwrap();
    let mut child = Command::new(launcher())
        .args(["-n", "4", "--timeout", "60", "/bin/sh", "-c"])
        .arg("yes \"rank $SPLITRT_RANK says a fairly long line of text\" | head -n 10000 | tee /dev/stderr")
        .stdin(std::process::Stdio::null())
        .stdout(wr.try_clone().unwrap())
        .stderr(wr)
        .spawn()
        .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut rd, &mut text).unwrap();
    assert!(child.wait().unwrap().success());
    let mut n = 0;
    for l in text.lines() {
        let (p, rest) = l.split_once("] ").expect(l);
        let rank = p.strip_prefix('[').expect(l);
        assert_eq!(
            rest,
            format!("rank {rank} says a fairly long line of text"),
            "{l}"
        );
        n += 1;
    }
    assert_eq!(n, 80000);
}

/// A rank printing 64 MiB without a newline: the launcher relays it in
/// pieces of at most 64 KiB (each prefixed) and its memory stays small.
#[test]
fn an_endless_line_is_relayed_in_bounded_pieces() {
    let _lock = job_lock();
    let child = launch(
        1,
        &"/bin/sh".into(),
        &["-c", "head -c 67108864 /dev/zero | tr '\\0' x"],
        &[],
        60,
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let p = peak.clone();
    let sampler = std::thread::spawn(move || {
        while let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            {
                p.fetch_max(kb, std::sync::atomic::Ordering::Relaxed);
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    });
    let r = finish(child, std::time::Duration::from_secs(90));
    sampler.join().unwrap();
    r.ok();
    let pieces: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(pieces.len(), 1024, "64 MiB in 64 KiB pieces");
    assert!(pieces
        .iter()
        .all(|l| l.len() == 4 + 65536 && l.starts_with("[0] xx")));
    let kb = peak.load(std::sync::atomic::Ordering::Relaxed);
    assert!(kb < 32 << 10, "launcher grew to {kb} kB");
}

/// A rank that leaves a background process holding its stdout: the
/// launcher returns when the rank has exited, not when the process does.
#[test]
fn a_background_process_holding_output_does_not_hold_the_launcher() {
    let t = std::time::Instant::now();
    let r = run_job(
        2,
        &"/bin/sh".into(),
        &["-c", "sleep 20 & echo started"],
        &[],
        60,
    );
    r.ok();
    assert_eq!(r.stdout.matches("started").count(), 2, "{}", r.stdout);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}

/// Too few descriptors for the rank count: a message with the fix, before
/// any rank starts.
#[test]
fn too_few_descriptors_for_the_ranks_are_named() {
    let out = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(launcher())
        .args(["-n", "200", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("splitrt-run with 200 ranks needs about 928 open files")
            && err.contains("ulimit -n 928"),
        "{err}"
    );
}

/// An ordinary user at their process limit (`ulimit -u`): starting the
/// ranks fails part way; the launcher says so, stops the ranks it started,
/// does not panic and leaves nothing behind.
#[test]
fn a_process_limit_ends_the_job_cleanly() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let _lock = job_lock();
    let (_d1, run) = world_runnable(&launcher(), "nproc-launcher");
    let (_d2, hello) = world_runnable(&example("hello"), "nproc-hello");
    let job = job_id("nproc");
    let out = as_nobody(Path::new("/usr/bin/prlimit"))
        .arg("--nproc=12")
        .arg(&run)
        .args(["-n", "16", "--timeout", "60"])
        .arg(&hello)
        .env("SPLITRT_JOB", &job)
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("process limit") && !err.contains("panicked"),
        "{err}"
    );
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}
