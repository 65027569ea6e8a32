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
        err.contains("splitrt-run with 200 ranks needs about 992 open files")
            && err.contains("ulimit -n 992"),
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
    // Where the limit bites depends on how many processes and threads
    // the user (nobody) has at the moment, so either of the launcher's
    // two messages naming the limit is right: spawning a rank ("process
    // limit reached?") or one of its own threads ("process or thread
    // limit?").
    assert!(
        (err.contains("process limit") || err.contains("process or thread limit"))
            && !err.contains("panicked"),
        "{err}"
    );
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}

/// A scratch directory holding fake `--rsh` scripts (never a real ssh):
/// `local` runs the script on this host, `hang` never starts anything (an
/// ssh stuck on a prompt), `nostdin` runs it with stdin closed (`ssh -n`).
fn fake_rsh(tag: &str) -> Scratch {
    let dir = Scratch(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rsh-{tag}-{}", std::process::id())),
    );
    std::fs::create_dir_all(&*dir).unwrap();
    for (name, body) in [
        ("local", "shift; exec /bin/sh -c \"$1\""),
        ("hang", "exec sleep 600"),
        ("nostdin", "shift; exec /bin/sh -c \"$1\" </dev/null"),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// `splitrt-run --hosts HOSTS --rsh RSH PROG` with `env`; (run, seconds).
fn remote_job(hosts: &str, rsh: &Path, prog: &Path, env: &[(&str, &str)]) -> (Run, f64) {
    let _lock = job_lock();
    let t0 = std::time::Instant::now();
    let child = Command::new(launcher())
        .args(["--hosts", hosts, "--rsh"])
        .arg(rsh)
        .args(["--timeout", "30"])
        .arg(prog)
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "3")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let r = finish(child, std::time::Duration::from_secs(60));
    (r, t0.elapsed().as_secs_f64())
}

/// Issue 24 item 9: a remote shell that hangs for every rank (all ranks
/// remote): the job ends at the bootstrap timeout, naming the hosts, not
/// at `--timeout`.
#[test]
fn a_hanging_remote_shell_ends_the_job_at_the_bootstrap_timeout() {
    let rsh = fake_rsh("hang");
    let (r, took) = remote_job(
        "127.0.0.1:1,127.0.0.2:1",
        &rsh.join("hang"),
        &example("hello"),
        &[],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        took < 15.0,
        "ended after {took:.1} s (bootstrap timeout 3 s): {r:?}"
    );
    assert!(
        r.stderr.contains("127.0.0.1") && r.stderr.contains("127.0.0.2"),
        "hosts not named: {r:?}"
    );
}

/// Issue 24 item 10: a remote shell that drops standard input (like
/// `ssh -n`): the job key never arrives, and the launcher says so.
#[test]
fn a_remote_shell_dropping_stdin_is_named() {
    let rsh = fake_rsh("nostdin");
    let (r, _) = remote_job("127.0.0.1:1", &rsh.join("nostdin"), &example("hello"), &[]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("job key never arrived"),
        "no hint that the key never arrived: {}",
        r.stderr
    );
}

/// Issue 24 item 12: a `SPLITRT_*` variable whose name holds shell syntax
/// is not pasted into the remote script (nothing runs), and values are
/// quoted; a valid one still arrives.
#[test]
fn environment_names_with_shell_syntax_run_nothing_remotely() {
    let rsh = fake_rsh("names");
    let planted = rsh.join("planted");
    let evil_name = format!("SPLITRT_X=1;touch {};Y", planted.display()).replace('=', "_");
    let evil_name = format!("{evil_name} $(touch {}.2)", planted.display());
    let (r, _) = remote_job(
        "127.0.0.1:1",
        &rsh.join("local"),
        Path::new("/usr/bin/printenv"),
        &[
            (evil_name.as_str(), "v"),
            ("SPLITRT_OK_VALUE", "it's $(touch /nonexistent) `x`"),
        ],
    );
    assert!(
        !planted.exists(),
        "the variable's name ran a command remotely: {r:?}"
    );
    assert!(
        !Path::new(&format!("{}.2", planted.display())).exists(),
        "the variable's name ran a command remotely: {r:?}"
    );
    assert!(
        r.stdout
            .contains("SPLITRT_OK_VALUE=it's $(touch /nonexistent) `x`"),
        "the value did not arrive unchanged: {r:?}"
    );
}

/// Issue 24 item 11: an endless host file (`/dev/zero`) is read up to a
/// cap and refused clearly, not read whole (under a 1 GiB address-space
/// limit, so the old behaviour fails fast instead of eating the host).
#[test]
fn an_endless_host_file_is_capped() {
    let t0 = std::time::Instant::now();
    let mut c = Command::new(launcher());
    c.args([
        "--hostfile",
        "/dev/zero",
        "--rsh",
        "/bin/false",
        "/bin/true",
    ]);
    let limit_memory = || {
        let lim = libc::rlimit {
            rlim_cur: 1 << 30,
            rlim_max: 1 << 30,
        };
        // SAFETY: setrlimit(2) reads the struct we pass and nothing else.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
        Ok(())
    };
    // SAFETY: the closure only calls setrlimit(2), async-signal-safe.
    unsafe { std::os::unix::process::CommandExt::pre_exec(&mut c, limit_memory) };
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("1 MiB"), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
}

/// Issue 24 item 14: rank 1 is killed (SIGKILL) while the other ranks
/// wait for rank 2 in the bootstrap: the launcher blames rank 1 (exit 137,
/// naming it), not a rank that exited because of it.
#[test]
fn a_rank_killed_during_the_bootstrap_is_the_one_blamed() {
    let _lock = job_lock();
    let hello = example("hello");
    let script = format!(
        "[ \"$SPLITRT_RANK\" = 2 ] && sleep 20; exec {}",
        hello.display()
    );
    let child = launch(3, &"/bin/sh".into(), &["-c", &script], &[], 60)
        .spawn()
        .unwrap();
    // rank 1: the launcher's child that became `hello` and connected
    let me = child.id().to_string();
    let t0 = std::time::Instant::now();
    let victim = loop {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "rank 1 never connected"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let p = e.path();
            let stat = std::fs::read_to_string(p.join("stat")).ok()?;
            let ppid = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .to_string();
            let env = std::fs::read(p.join("environ")).ok()?;
            let rank1 = String::from_utf8_lossy(&env)
                .split('\0')
                .any(|v| v == "SPLITRT_RANK=1");
            let exe = std::fs::read_link(p.join("exe")).ok()?;
            let sockets = std::fs::read_dir(p.join("fd"))
                .ok()?
                .flatten()
                .filter(|f| {
                    std::fs::read_link(f.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count();
            (ppid == me && rank1 && exe == hello && sockets > 0)
                .then(|| e.file_name().to_str()?.parse::<i32>().ok())?
        });
        if let Some(pid) = found {
            break pid;
        }
    };
    // let its hello reach the bootstrap
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on a rank this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let r = finish(child, std::time::Duration::from_secs(60));
    assert_eq!(r.code, 137, "{r:?}");
    assert!(
        r.stderr.contains("rank 1 was killed by signal 9"),
        "{}",
        r.stderr
    );
}
