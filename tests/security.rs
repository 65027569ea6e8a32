//! The trust model under attack (docs/security.md): strangers hitting a
//! running job's bootstrap port, a second user planting files, jobs sharing
//! an id, a launcher killed during start-up, a too-small `/dev/shm`. Every
//! job here must either finish with correct results or fail with a clear
//! message, and leave nothing behind.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Peak resident set (kB) and thread count of `pid`, sampled until `stop`.
fn watch(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut rss, mut threads) = (0, 0);
        let field = |s: &str, k: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        while !stop.load(Ordering::Relaxed) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                rss = rss.max(field(&s, "VmRSS:"));
                threads = threads.max(field(&s, "Threads:"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (rss, threads)
    })
}

/// Run `t_attacker ADDR MODES` (as `nobody` if asked) and return its output.
fn attack(addr: &str, modes: &[&str], nobody: bool) -> String {
    let prog = example("t_attacker");
    let (_dir, copy) = world_runnable(&prog, &modes.join("-"));
    let mut c = if nobody {
        as_nobody(&copy)
    } else {
        Command::new(&prog)
    };
    let out = c
        .arg(addr)
        .args(modes)
        .stdin(Stdio::null())
        .output()
        .expect("run the attacker");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "the attacker got in:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Start a job whose rank 0 prints `BOOT <addr>`, attack its bootstrap port
/// while it runs, and require correct results and exit 0. The job runs
/// until `stop` exists; it is created once the attack is over.
fn attacked_job(
    program: &[&str],
    modes: &[&str],
    nobody: bool,
    stop_file: &Path,
) -> (Run, String, (u64, u64)) {
    attacked_job_with(program, modes, nobody, stop_file, true, &[])
}

/// [`attacked_job`] with the wrong-key rank first or not, and extra
/// environment for the job.
fn attacked_job_with(
    program: &[&str],
    modes: &[&str],
    nobody: bool,
    stop_file: &Path,
    fakerank_first: bool,
    env: &[(&str, &str)],
) -> (Run, String, (u64, u64)) {
    let _lock = job_lock();
    let _ = std::fs::remove_file(stop_file);
    let (prog, args) = program.split_first().unwrap();
    let mut child = Command::new(launcher())
        .args(["-n", "3", "--timeout", "90", "--verbose", prog])
        .args(args)
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn splitrt-run");
    let pid = child.id();
    // read rank 0's address line, then keep relaying stdout for the checks
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let addr = loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("job ended before printing its address:\n{seen}");
        }
        seen.push_str(&line);
        if let Some(a) = line.trim().split("BOOT ").nth(1) {
            break a.to_string();
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let peaks = watch(pid, stop.clone());
    // a wrong-key rank alone first (so no flood can crowd its handshake out
    // and it is always answered), then the floods together
    let first = if fakerank_first {
        attack(&addr, &["fakerank"], nobody)
    } else {
        String::new()
    };
    let report = first + &attack(&addr, modes, nobody);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job ended before the attack did:\n{report}"
    );
    std::fs::write(stop_file, "").unwrap();
    stop.store(true, Ordering::Relaxed);
    let peaks = peaks.join().unwrap();
    child.stdout = None;
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let mut r = finish(child, Duration::from_secs(120));
    let _ = std::fs::remove_file(stop_file);
    r.stdout = seen + &rest.join().unwrap();
    (r, report, peaks)
}

fn stop_file(tag: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("stop-{tag}-{}", std::process::id()))
}

fn barriers_ok(r: &Run, n: usize) {
    r.ok();
    assert_eq!(r.stdout.matches("barriers ok").count(), n, "{}", r.stdout);
}

/// A stranger (another user) throws everything at a running job's bootstrap
/// port: the job's barriers stay exact, it exits 0, and the launcher's
/// memory and threads stay bounded.
#[test]
fn strangers_attacking_a_running_job_change_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let prog = example("t_barriers");
    let stop = stop_file("running");
    let (r, report, (rss_kb, threads)) = attacked_job(
        &[
            prog.to_str().unwrap(),
            "100000",
            "10",
            stop.to_str().unwrap(),
        ],
        &["garbage", "oversize", "halves", "forge"],
        true,
        &stop,
    );
    barriers_ok(&r, 3);
    assert!(report.contains("fakerank: 4 of 4"), "{report}");
    assert!(report.contains("halves: "), "{report}");
    // the launcher said what it turned away
    assert!(
        r.stderr.contains("turned away") || r.stderr.contains("unauthenticated"),
        "{}",
        r.stderr
    );
    assert!(
        rss_kb < 64 << 10,
        "launcher grew to {rss_kb} kB under attack"
    );
    assert!(
        threads <= (splitrt::runtime::bootstrap::MAX_PENDING + 40) as u64,
        "launcher ran {threads} threads under attack"
    );
}

/// Forged barrier arrivals and releases alone (nothing else that could end
/// the job first), while two ranks wait in every barrier for a late third:
/// a server that counted them would let the two leave before the third
/// sent its requests, which `t_barriers` reports as missing requests.
#[test]
fn forged_barrier_frames_release_no_one() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let prog = example("t_barriers");
    let stop = stop_file("barriers");
    let (r, report, _) = attacked_job_with(
        &[
            prog.to_str().unwrap(),
            "100000",
            "20",
            stop.to_str().unwrap(),
        ],
        &["barriers"],
        true,
        &stop,
        false,
        &[("T_BARRIERS_LATE_RANK", "2")],
    );
    barriers_ok(&r, 3);
    assert!(report.contains("forged barrier frames sent"), "{report}");
}

/// Attacks while the ranks are still joining (each rank waits 2 s before it
/// attaches): nothing a stranger sends refuses or aborts the job.
#[test]
fn attacks_during_start_up_do_not_refuse_the_job() {
    let prog = example("t_barriers");
    let stop = stop_file("startup");
    let script = format!(
        "echo BOOT $SPLITRT_BOOTSTRAP; sleep 2; exec {} 100000 10 {}",
        prog.display(),
        stop.display()
    );
    let (r, report, _) = attacked_job(
        &["/bin/sh", "-c", &script],
        &["garbage", "forge", "halves"],
        false,
        &stop,
    );
    barriers_ok(&r, 3);
    assert!(report.contains("fakerank: 4 of 4"), "{report}");
}

/// A stranger holds every pending-handshake slot of a starting job with
/// connections that trickle the 72-byte proof one byte every 4 s (a
/// per-read timeout of 5 s never fires), replacing each one the server
/// closes: the job still starts (its ranks arrive 2 s into the attack),
/// and no trickling connection outlives the handshake deadline.
#[test]
fn trickled_handshakes_neither_outlive_their_deadline_nor_keep_the_job_out() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let prog = example("t_barriers");
    let stop = stop_file("trickle");
    let script = format!(
        "echo BOOT $SPLITRT_BOOTSTRAP; sleep 2; exec {} 100000 10 {}",
        prog.display(),
        stop.display()
    );
    let (r, report, _) = attacked_job_with(
        &["/bin/sh", "-c", &script],
        &["trickle"],
        true,
        &stop,
        false,
        &[],
    );
    barriers_ok(&r, 3);
    let seconds = |after: &str| -> f64 {
        let tail = report
            .split(after)
            .nth(1)
            .unwrap_or_else(|| panic!("{report}"));
        let num: String = tail
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse().unwrap_or_else(|_| panic!("{report}"))
    };
    eprintln!("{report}");
    let limit = splitrt::runtime::bootstrap::HANDSHAKE_TIMEOUT.as_secs_f64() + 1.5;
    let (closed, open) = (seconds("longest lived"), seconds("oldest"));
    assert!(
        closed <= limit && open <= limit,
        "a trickling connection lived past the handshake deadline:\n{report}"
    );
}

/// Two jobs given the same SPLITRT_JOB run side by side: their files are
/// named by their own keys, so neither refuses nor damages the other.
#[test]
fn two_jobs_with_the_same_id_do_not_touch_each_other() {
    let _lock = job_lock();
    let job = job_id("same");
    let prog = example("t_barriers");
    let start = || {
        launch(2, &prog, &["40", "5"], &[("SPLITRT_JOB", &job)], 60)
            .spawn()
            .expect("spawn")
    };
    let (a, b) = (start(), start());
    let (ra, rb) = (
        finish(a, Duration::from_secs(90)),
        finish(b, Duration::from_secs(90)),
    );
    barriers_ok(&ra, 2);
    barriers_ok(&rb, 2);
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}

/// SIGKILL to the launcher while its ranks are still in the bootstrap: the
/// ranks die with it and leave no file (files are made only after every
/// rank joined).
#[test]
fn killing_the_launcher_during_start_up_leaves_nothing() {
    let _lock = job_lock();
    let job = job_id("killboot");
    let hello = example("hello");
    // rank 3 comes 5 s late, so the kill lands while the others wait for
    // it in the bootstrap (where the old code had already made its files)
    let script = format!(
        "[ \"$SPLITRT_RANK\" = 3 ] && sleep 5; exec {}",
        hello.display()
    );
    let mut c = launch(
        4,
        &"/bin/sh".into(),
        &["-c", &script],
        &[("SPLITRT_JOB", &job)],
        60,
    )
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = c.kill();
    let _ = c.wait();
    // the ranks get SIGKILL from the kernel (parent-death signal)
    std::thread::sleep(Duration::from_millis(500));
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}

/// Issue 24 item 15: the launcher is killed (SIGKILL) the moment the
/// first rank has made its shared-memory file, in the window before the
/// ranks unlink them: no file of the job is left behind for long.
#[test]
fn killing_the_launcher_while_ranks_make_their_files_leaves_nothing() {
    let _lock = job_lock();
    let job = job_id("killfiles");
    let mut c = launch(8, &example("hello"), &[], &[("SPLITRT_JOB", &job)], 60)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while shm_leftovers(&job).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no file ever appeared"
        );
        if c.try_wait().unwrap().is_some() {
            panic!("the job ended before the kill (no window caught)");
        }
        std::thread::yield_now();
    }
    let _ = c.kill();
    let _ = c.wait();
    let seen = shm_leftovers(&job).len();
    // the ranks die with the launcher; their files must go too
    let t1 = Instant::now();
    while !shm_leftovers(&job).is_empty() && t1.elapsed() < Duration::from_secs(6) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = shm_leftovers(&job);
    remove_leftovers(&left);
    assert!(
        left.is_empty(),
        "{} file(s) left 6 s after the kill (had {seen}): {left:?}",
        left.len()
    );
}

fn remove_leftovers(files: &[String]) {
    for f in files {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(f));
    }
}

/// Ranks started by hand (the srun / mpirun way, no splitrt-run) in a
/// `TMPDIR` that is shared with other users.
fn by_hand(tmp: &Path, job: &str, ranks: &[usize], size: usize) -> Vec<std::process::Child> {
    ranks
        .iter()
        .map(|&r| {
            Command::new(example("hello"))
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("TMPDIR", tmp)
                .env("SPLITRT_RANK", r.to_string())
                .env("SPLITRT_SIZE", size.to_string())
                .env("SPLITRT_JOB", job)
                .env("SPLITRT_BOOTSTRAP_TIMEOUT", "3")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// A directory like `/tmp` (everyone may create, sticky) that other users
/// can reach.
fn shared_tmp(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("splitrt-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // like /tmp: everyone may create, sticky
    let _ = Command::new("chmod").arg("1777").arg(&d).status();
    Scratch(d)
}

/// Without splitrt-run, rank 0 hands the address and key over through a
/// private directory; a clean run leaves no file there.
#[test]
fn hand_started_ranks_meet_through_the_private_directory() {
    let _lock = job_lock();
    let tmp = shared_tmp("clean");
    let job = job_id("byhand");
    let ranks = by_hand(&tmp, &job, &[0, 1, 2], 3);
    for c in ranks {
        let r = finish(c, Duration::from_secs(60));
        r.ok();
        assert!(r.stdout.contains("rank got"), "{r:?}");
    }
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let dir = tmp.join(format!("splitrt-{}", unsafe { libc::geteuid() }));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
    assert!(shm_leftovers(&job).is_empty());
}

/// Another user plants the rendezvous directory (and an address file
/// pointing at their own listener) before the job starts: the ranks refuse
/// it with a clear message and never connect to the planted address.
#[test]
fn a_stranger_cannot_plant_the_rendezvous_file() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let _lock = job_lock();
    let tmp = shared_tmp("planted");
    let job = job_id("planted");
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let trap_addr = trap.local_addr().unwrap();
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let dir = tmp.join(format!("splitrt-{}", unsafe { libc::geteuid() }));
    let plant = format!(
        "mkdir -m 0777 {d} && printf '{trap_addr}\\n{key}\\n' > {d}/boot-{job} && chmod 0666 {d}/boot-{job}",
        d = dir.display(),
        key = "ab".repeat(32)
    );
    let st = as_nobody(Path::new("/bin/sh"))
        .args(["-c", &plant])
        .status()
        .unwrap();
    assert!(st.success(), "nobody could not plant (test setup)");
    for c in by_hand(&tmp, &job, &[0, 1], 2) {
        let r = finish(c, Duration::from_secs(60));
        assert_ne!(r.code, 0, "{r:?}");
        assert!(
            r.stderr.contains("refusing to trust") && r.stderr.contains("owned by uid 65534"),
            "{}",
            r.stderr
        );
    }
    assert!(
        trap.accept().is_err(),
        "a rank connected to the planted address"
    );
    assert!(shm_leftovers(&job).is_empty());
}

/// A 2-rank job (16 MiB segments) of `prog args` with `env` set, in a
/// private mount namespace whose `/dev/shm` is a tmpfs of `size`.
fn in_private_shm(size: &str, env: &str, prog: &Path, args: &str) -> Run {
    let script = format!(
        "mount -t tmpfs -o size={size} splitrt-test /dev/shm && {env} \
         exec {} -n 2 --timeout 60 --segment-size 16M {} {args}",
        launcher().display(),
        prog.display()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "/bin/sh", "-c"])
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, Duration::from_secs(90))
}

/// A `/dev/shm` too small for what two ranks touch at start-up (a private
/// mount namespace with a small tmpfs; with the per-pair rings, two ranks
/// populate their rings and landing zones, 6 MiB, in 4 MiB; with the
/// shared receive queue, `SPLITRT_SHM_QUEUE=shared`, their two queues each,
/// 1 MiB, in 512 KiB): a clear error naming `/dev/shm`, the size needed,
/// the size free and every setting that sizes the files, never a SIGBUS
/// (exit 135). With the shared queue the files have no rings and no
/// landing zones: the error names the queues and their settings, not
/// rings nor `SPLITRT_MEDIUM_SLOTS`.
#[test]
fn a_full_dev_shm_is_named_not_a_sigbus() {
    if !is_root() {
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    let _lock = job_lock();
    for (queue, tmpfs, free, touched, settings, not_named) in [
        (
            "pairs",
            "4m",
            "MiB free of 4.0 MiB",
            "touch 6.0 MiB of it at start-up",
            &[
                "SEGMENT_SIZE",
                "RING_LEN",
                "CELL_SIZE",
                "MEDIUM_SLOTS",
                "MAX_MEDIUM",
            ][..],
            &["shared receive queue"][..],
        ),
        (
            "shared",
            "512k",
            "MiB free of 0.5 MiB",
            "touch 1.0 MiB of it at start-up",
            &["SEGMENT_SIZE", "RING_LEN", "CELL_SIZE", "SHM_QUEUE"][..],
            &["MEDIUM_SLOTS", " ring", "landing zones 0.0"][..],
        ),
    ] {
        let env = format!("SPLITRT_SHM_QUEUE={queue}");
        let r = in_private_shm(tmpfs, &env, &example("hello"), "");
        assert_ne!(r.code, 0, "{queue}: {r:?}");
        assert_ne!(r.code, 135, "{queue}: SIGBUS: {r:?}");
        assert!(
            r.stderr.contains("/dev/shm is too small")
                && r.stderr.contains(free)
                && r.stderr.contains(touched)
                && settings
                    .iter()
                    .all(|k| r.stderr.contains(&format!("SPLITRT_{k}")))
                && !not_named.iter().any(|w| r.stderr.contains(w)),
            "{queue}: {}",
            r.stderr
        );
    }
}

/// `/dev/shm` fills up after start-up (a private 64 MiB tmpfs, filled by
/// a rank's own file): the write to a fresh segment page dies by `SIGBUS`
/// with a message naming the rank, the cause and the remedies; with
/// `SPLITRT_SHM_RESERVE=1` the space was reserved at start-up and the same
/// job completes.
#[test]
fn dev_shm_filling_up_later_is_named_and_reserving_prevents_it() {
    if !is_root() {
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    let _lock = job_lock();
    let run = |reserve: &str| {
        in_private_shm(
            "64m",
            &format!("SPLITRT_SHM_RESERVE={reserve}"),
            &example("t_faults"),
            "fill_shm 0",
        )
    };
    let r = run("0");
    assert_ne!(r.code, 0, "{r:?}");
    assert_ne!(r.code, 124, "ended by the fault, not the timeout: {r:?}");
    assert!(
        r.stderr
            .contains("SIGBUS writing its shared memory: /dev/shm ran out of space")
            && r.stderr.contains("SPLITRT_SHM_RESERVE=1")
            && (r.stderr.contains("splitrt: rank 0:") || r.stderr.contains("splitrt: rank 1:")),
        "{}",
        r.stderr
    );
    let r = run("1");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("[0] allocated") && r.stdout.contains("[1] allocated"),
        "{}",
        r.stdout
    );
}

/// A rank of another job (right address, wrong key) is turned away with a
/// message about the key, and the job it knocked on is unaffected.
#[test]
fn a_rank_with_the_wrong_key_is_told_so() {
    let _lock = job_lock();
    let started = Instant::now();
    // a lone rank pointed at a server that holds another key
    let key = splitrt::runtime::key::JobKey::generate().unwrap();
    let server = splitrt::runtime::bootstrap::Server::bind("127.0.0.1:0", key).unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let stats = server.stats();
    std::thread::spawn(move || server.run(2, Duration::from_secs(5)));
    let r = finish(
        Command::new(example("hello"))
            .env("SPLITRT_RANK", "1")
            .env("SPLITRT_SIZE", "2")
            .env("SPLITRT_BOOTSTRAP", &addr)
            .env("SPLITRT_JOB_KEY", "cd".repeat(32))
            .env("SPLITRT_BOOTSTRAP_TIMEOUT", "3")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(30),
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a wrong key is final at once, not retried until the timeout"
    );
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("rejected this rank's job key"),
        "{}",
        r.stderr
    );
    assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 1);
}

/// Rank 0 hosting the rendezvous of a large job under a low descriptor
/// limit: it fails at start saying how many it needs and how to raise it.
#[test]
fn too_few_file_descriptors_are_named_with_the_fix() {
    let tmp = shared_tmp("nofile");
    let r = finish(
        Command::new("prlimit")
            .arg("--nofile=64:64")
            .arg(example("hello"))
            .env("TMPDIR", &*tmp)
            .env("SPLITRT_RANK", "0")
            .env("SPLITRT_SIZE", "300")
            .env("SPLITRT_JOB", job_id("nofile"))
            .env("SPLITRT_BOOTSTRAP_TIMEOUT", "2")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(30),
    );
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("needs about 792 open files")
            && r.stderr.contains("the limit is 64")
            && r.stderr.contains("ulimit -n 792"),
        "{}",
        r.stderr
    );
}

/// The mpirun case of a rank 0 that fails during start-up: the other ranks
/// give up at the bootstrap timeout with a clear message and leave no file
/// (files are made only once every rank has joined).
#[test]
fn a_missing_rank_0_leaves_no_files_behind() {
    let _lock = job_lock();
    let tmp = shared_tmp("norank0");
    let job = job_id("norank0");
    for c in by_hand(&tmp, &job, &[1, 2], 3) {
        let r = finish(c, Duration::from_secs(30));
        assert_ne!(r.code, 0);
        assert!(r.stderr.contains("rank 0 did not publish"), "{}", r.stderr);
    }
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}
