//! Shared by the multi-process tests: find the launcher and the test
//! programs, run one job at a time (a file lock shared by every test binary),
//! and bound every job in time.
#![allow(dead_code)]

pub mod verbs_model;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `splitrt-run` binary cargo built for this test run, or the one
/// `SPLITRT_TEST_LAUNCHER` names (to run these tests against another build,
/// e.g. an older release, and see which of them it fails).
pub fn launcher() -> PathBuf {
    match std::env::var_os("SPLITRT_TEST_LAUNCHER") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_BIN_EXE_splitrt-run")),
    }
}

/// A cargo example of this workspace (built by `cargo test --workspace` next
/// to the bins; the vys examples are splitrt-vys's),
/// or one from the `examples` directory next to `SPLITRT_TEST_LAUNCHER`.
pub fn example(name: &str) -> PathBuf {
    let p = launcher()
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} not built (`cargo test --workspace` builds every package's examples; \
         the vys examples belong to splitrt-vys: `cargo build -p splitrt-vys --examples`)",
        p.display()
    );
    p
}

/// Held while a job runs: two 8-rank jobs at once would starve 2 cores.
pub struct JobLock(File);

pub fn job_lock() -> JobLock {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("splitrt-jobs.lock");
    let f = File::create(&path).expect("lock file");
    f.lock().expect("lock");
    JobLock(f)
}

/// A finished job.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "job failed:\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// A unique job id, so leftover files can be checked per test.
pub fn job_id(tag: &str) -> String {
    format!("t{}{}", tag, std::process::id())
}

/// `splitrt-run -n N --timeout T PROG ARGS` with extra environment.
pub fn launch(
    n: usize,
    prog: &PathBuf,
    args: &[&str],
    env: &[(&str, &str)],
    timeout_s: u64,
) -> Command {
    let mut c = Command::new(launcher());
    c.arg("-n")
        .arg(n.to_string())
        .arg("--timeout")
        .arg(timeout_s.to_string())
        .arg(prog)
        .args(args)
        // a start-up that goes wrong fails in seconds, not the default 30 s
        .env("SPLITRT_BOOTSTRAP_TIMEOUT", "10")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Wait for `child`, killing it if it outlives `limit` (the launcher's own
/// timeout should fire first; this is the outer bound).
pub fn finish(mut child: Child, limit: Duration) -> Run {
    fn slurp(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    }
    let t_out = slurp(child.stdout.take());
    let t_err = slurp(child.stderr.take());
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("launcher did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Run a job to completion under the job lock.
pub fn run_job(
    n: usize,
    prog: &PathBuf,
    args: &[&str],
    env: &[(&str, &str)],
    timeout_s: u64,
) -> Run {
    let _lock = job_lock();
    let child = launch(n, prog, args, env, timeout_s)
        .spawn()
        .expect("spawn splitrt-run");
    finish(child, Duration::from_secs(timeout_s + 30))
}

/// Shared-memory files of `job` still in /dev/shm.
pub fn shm_leftovers(job: &str) -> Vec<String> {
    let prefix = format!("splitrt-{job}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The unprivileged user the hostile-user tests run as.
pub const NOBODY: &str = "65534";

pub fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// `cmd` run as the unprivileged user (we are root in CI).
pub fn as_nobody(prog: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .arg(prog);
    c
}

/// A scratch directory, removed when dropped.
pub struct Scratch(pub PathBuf);
impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A copy of `prog` that any user can run (the checkout may sit in a
/// directory only root can enter).
pub fn world_runnable(prog: &Path, tag: &str) -> (Scratch, PathBuf) {
    let dir = Scratch(
        std::env::temp_dir().join(format!("splitrt-test-bin-{tag}-{}", std::process::id())),
    );
    std::fs::create_dir_all(&*dir).unwrap();
    let _ = Command::new("chmod").arg("755").arg(&*dir).status();
    let copy = dir.join(prog.file_name().unwrap());
    std::fs::copy(prog, &copy).unwrap();
    let _ = Command::new("chmod").arg("755").arg(&copy).status();
    (dir, copy)
}

/// The value of `key=value` on the line of `out` that starts with
/// `prefix` (the vys examples' summary lines).
pub fn summary_value(out: &str, prefix: &str, key: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{out}"));
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in '{line}'"))
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("{key} in '{line}': {e}")) as u64
}

/// A stream key file for the vys examples (64 hex digits), in a scratch
/// directory removed on drop.
pub fn vys_key_file(tag: &str) -> (Scratch, PathBuf) {
    let dir = std::env::temp_dir().join(format!("splitrt-vys-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut k = [0u8; 32];
    getrandom_bytes(&mut k);
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    let f = dir.join("stream.key");
    std::fs::write(&f, hex).expect("key file");
    (Scratch(dir), f)
}

fn getrandom_bytes(b: &mut [u8]) {
    let mut f = File::open("/dev/urandom").expect("/dev/urandom");
    f.read_exact(b).expect("random bytes");
}

/// Read the child's stdout until a line containing `ready` (bounded in
/// time); the rest of its stdout is returned, to be put back before
/// [`finish`].
pub fn wait_ready(c: &mut Child) -> std::process::ChildStdout {
    let mut out = c.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let t = Instant::now();
    let mut b = [0u8; 1];
    while t.elapsed() < Duration::from_secs(20) {
        if out.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        seen.push(b[0]);
        if seen.ends_with(b"\n") && String::from_utf8_lossy(&seen).contains("ready") {
            return out;
        }
    }
    panic!("no ready line: {}", String::from_utf8_lossy(&seen));
}

/// The ranks the launcher `launcher_pid` started, as (rank, pid) sorted
/// by rank: its children whose environment has `SPLITRT_RANK`.
pub fn rank_pids(launcher_pid: u32) -> Vec<(usize, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1));
        if ppid != Some(&launcher_pid.to_string()) {
            continue;
        }
        let env = std::fs::read(p.join("environ")).unwrap_or_default();
        let rank = String::from_utf8_lossy(&env)
            .split('\0')
            .find_map(|v| v.strip_prefix("SPLITRT_RANK=")?.parse::<usize>().ok());
        if let (Some(r), Some(pid)) = (rank, e.file_name().to_str().and_then(|s| s.parse().ok())) {
            out.push((r, pid));
        }
    }
    out.sort();
    out
}

/// Run `prog args` on `n` ranks on one-sided path `rma` (and `env`) within
/// `timeout_s`: the job must succeed and every rank print a line holding
/// `marker` and its path ("(Native path)" / "(Am path)").
pub fn every_rank_reports(
    n: usize,
    prog: &str,
    args: &[&str],
    rma: &str,
    env: &[(&str, &str)],
    marker: &str,
    timeout_s: u64,
) {
    let mut all = vec![("SPLITRT_RMA", rma)];
    all.extend_from_slice(env);
    let r = run_job(n, &example(prog), args, &all, timeout_s);
    r.ok();
    let path = if rma == "am" {
        "(Am path)"
    } else {
        "(Native path)"
    };
    let ok = r
        .stdout
        .lines()
        .filter(|l| l.contains(marker) && l.contains(path))
        .count();
    assert_eq!(
        ok, n,
        "{prog} {args:?} on {n} ranks ({env:?}, {rma} path): every rank must print {marker:?}:\n{}",
        r.stdout
    );
}
