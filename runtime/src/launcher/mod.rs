//! `splitrt-run`'s engine: start N ranks of a program on this node with the
//! `SPLITRT_*` environment, host their bootstrap rendezvous, prefix their
//! output, and end the job as soon as one rank fails or time runs out. The
//! exit code is the first failing rank's; shared-memory files are removed
//! whatever happened.

mod output;

use crate::bootstrap::{Server, MAX_PENDING};
use crate::config::{Config, ENV_BOOTSTRAP_TIMEOUT};
use crate::job::{
    sanitize_job_id, ENV_BOOTSTRAP, ENV_JOB, ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_NODE, ENV_RANK,
    ENV_SIZE,
};
use crate::key::{JobKey, ENV_JOB_KEY};
use crate::segment::remove_job_files;
use crate::{Error, Result};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What to launch.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// Number of ranks.
    pub ranks: usize,
    /// Program: a path, or a name looked up on `PATH`; executed directly.
    pub program: OsString,
    /// Its arguments, unchanged.
    pub args: Vec<OsString>,
    /// Extra `SPLITRT_*` settings for every rank (from launcher flags).
    pub env: Vec<(String, String)>,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// Prefix every output line with `[rank] `.
    pub prefix_output: bool,
    /// Print launcher diagnostics to stderr.
    pub verbose: bool,
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// Exit code for the launcher: 0, the first failing rank's code, 128 +
    /// signal for a rank killed by a signal, or 124 on timeout.
    pub code: i32,
    /// One line on why the job failed, if it did.
    pub reason: Option<String>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn describe(rank: usize, st: &ExitStatus) -> (i32, String) {
    if let Some(c) = st.code() {
        (c, format!("rank {rank} exited with code {c}"))
    } else {
        let s = st.signal().unwrap_or(0);
        (
            128 + s,
            format!("rank {rank} was killed by signal {s} ({})", signal_name(s)),
        )
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

fn new_job_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{:05x}", std::process::id(), t & 0xfffff)
}

/// Block until child `pid` has exited, without reaping it: the exited
/// child stays a zombie, so its pid cannot be reused while the main thread
/// may still signal it; the main thread reaps it after marking it stopped.
fn wait_exit_keep_zombie(pid: u32) {
    loop {
        // SAFETY: waitid(2) writes only into `info`, a zeroed siginfo_t we own.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory effects; pid is a child we spawned and
    // have not reaped (the waiter threads wait with WNOWAIT, and the main
    // thread reaps a rank only after it stopped signalling it).
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Run a job to completion.
pub fn launch(opts: &LaunchOptions) -> Result<JobOutcome> {
    let n = opts.ranks;
    if n == 0 {
        return Err(Error::usage("a job needs at least one rank (-n 1 or more)"));
    }
    let lookup = |k: &str| {
        opts.env
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
    };
    // Validate settings once here, so a typo fails before any rank starts.
    let cfg = Config::from_lookup(lookup)?;
    let job = sanitize_job_id(&lookup(ENV_JOB).unwrap_or_else(new_job_id));
    // A fresh secret for every job: only our ranks can join the rendezvous,
    // and the job's shared-memory files are named after it.
    let key = JobKey::generate()?;
    let stem = format!("{job}-{}", key.file_tag());
    let server = Server::bind("127.0.0.1:0", key.clone())?;
    let addr = server.local_addr()?.to_string();
    let boot_timeout = cfg.bootstrap_timeout;
    let culprit = server.culprit();
    let stats = server.stats();
    let boot = std::thread::spawn(move || server.run(n, boot_timeout));

    // SAFETY: installing an async-signal-safe handler that only stores to an
    // atomic; SIG_ERR is ignored (we would merely lose Ctrl-C cleanup).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }

    let mut pids = Vec::with_capacity(n);
    let mut relays = Vec::new();
    let (tx, rx) = mpsc::channel::<usize>();
    let mut children = Vec::with_capacity(n);
    let mut spawn_error = None;
    for rank in 0..n {
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(ENV_RANK, rank.to_string())
            .env(ENV_SIZE, n.to_string())
            .env(ENV_LOCAL_RANK, rank.to_string())
            .env(ENV_LOCAL_SIZE, n.to_string())
            .env(ENV_NODE, "0")
            .env(ENV_JOB, &job)
            .env(ENV_BOOTSTRAP, &addr)
            .env(ENV_JOB_KEY, key.to_hex())
            .env(
                ENV_BOOTSTRAP_TIMEOUT,
                boot_timeout.as_secs_f64().to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                // Die with the launcher, whatever kills it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                let prefix = opts.prefix_output.then(|| format!("[{rank}] "));
                if let Some(o) = child.stdout.take() {
                    relays.push(output::relay(o, prefix.clone(), false));
                }
                if let Some(e) = child.stderr.take() {
                    relays.push(output::relay(e, prefix, true));
                }
                let pid = child.id();
                pids.push(pid);
                children.push(child);
                let tx = tx.clone();
                std::thread::spawn(move || {
                    wait_exit_keep_zombie(pid);
                    let _ = tx.send(rank);
                });
            }
            Err(e) => {
                spawn_error = Some(Error::io(
                    format!("starting rank {rank}: {}", opts.program.to_string_lossy()),
                    e,
                ));
                break;
            }
        }
    }
    drop(tx);

    let started = Instant::now();
    let mut running: Vec<bool> = vec![true; pids.len()];
    // Why each rank failed, once it has exited unsuccessfully.
    let mut failed: Vec<Option<(i32, String)>> = vec![None; pids.len()];
    let mut first_failure: Option<(usize, Instant)> = None;
    let mut outcome: Option<JobOutcome> = spawn_error.as_ref().map(|e| JobOutcome {
        code: 127,
        reason: Some(e.to_string()),
    });
    let mut kill_at: Option<Instant> = None;
    let stop_all = |running: &[bool], kill_at: &mut Option<Instant>| {
        for (r, &alive) in running.iter().enumerate() {
            if alive {
                kill(pids[r], libc::SIGTERM);
            }
        }
        kill_at.get_or_insert(Instant::now() + Duration::from_secs(2));
    };
    if let Some(e) = &spawn_error {
        eprintln!("splitrt-run: {e}; stopping the ranks already started");
        stop_all(&running, &mut kill_at);
    }
    while running.iter().any(|&r| r) {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(rank) => {
                running[rank] = false;
                // now that nothing signals it any more, reap it
                match children[rank].wait() {
                    Ok(st) if st.success() => {}
                    Ok(st) => failed[rank] = Some(describe(rank, &st)),
                    Err(e) => {
                        failed[rank] = Some((1, format!("waiting for rank {rank} failed: {e}")))
                    }
                }
                if failed[rank].is_some() && first_failure.is_none() {
                    first_failure = Some((rank, Instant::now()));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if outcome.is_none() {
            if let Some((first, when)) = first_failure {
                // Ranks that saw a peer fail exit quickly; the rank that
                // caused it (named by the bootstrap) may still be printing
                // its panic. Blame the cause if it ends within a grace period.
                let cause = culprit.lock().filter(|&c| c < pids.len()).unwrap_or(first);
                let grace_over = !running[cause] || when.elapsed() > Duration::from_secs(2);
                let blamed = if failed[cause].is_some() {
                    Some(cause)
                } else if grace_over {
                    Some(first)
                } else {
                    None
                };
                if let Some(b) = blamed {
                    let (code, why) = failed[b].clone().expect("failed rank");
                    if running.iter().any(|&r| r) {
                        eprintln!("splitrt-run: {why}; stopping the other ranks");
                    } else {
                        eprintln!("splitrt-run: {why}");
                    }
                    outcome = Some(JobOutcome {
                        code,
                        reason: Some(why),
                    });
                    stop_all(&running, &mut kill_at);
                }
            }
        }
        if outcome.is_none() {
            if let Some(t) = opts.timeout.filter(|t| started.elapsed() >= *t) {
                let why = format!(
                    "job timed out after {:.1} s; killing all ranks",
                    t.as_secs_f64()
                );
                eprintln!("splitrt-run: {why}");
                outcome = Some(JobOutcome {
                    code: 124,
                    reason: Some(why),
                });
                stop_all(&running, &mut kill_at);
            } else if INTERRUPTED.load(Ordering::SeqCst) {
                let why = "interrupted; killing all ranks".to_string();
                eprintln!("splitrt-run: {why}");
                outcome = Some(JobOutcome {
                    code: 130,
                    reason: Some(why),
                });
                stop_all(&running, &mut kill_at);
            }
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            for (r, &alive) in running.iter().enumerate() {
                if alive {
                    kill(pids[r], libc::SIGKILL);
                }
            }
            kill_at = Some(Instant::now() + Duration::from_secs(3600));
        }
    }
    // Every rank is gone; a failure noticed only now still counts.
    if outcome.is_none() {
        if let Some((first, _)) = first_failure {
            let cause = culprit
                .lock()
                .filter(|&c| failed.get(c).is_some_and(Option::is_some));
            let (code, why) = failed[cause.unwrap_or(first)].clone().expect("failed rank");
            eprintln!("splitrt-run: {why}");
            outcome = Some(JobOutcome {
                code,
                reason: Some(why),
            });
        }
    }
    for r in relays {
        let _ = r.join();
    }
    let left = remove_job_files(&stem);
    if opts.verbose && left > 0 {
        eprintln!("splitrt-run: removed {left} shared-memory file(s) the ranks left behind");
    }
    if opts.verbose {
        let (u, o, t) = (
            stats.unauthenticated.load(Ordering::Relaxed),
            stats.over_limit.load(Ordering::Relaxed),
            stats.turned_away.load(Ordering::Relaxed),
        );
        if u + o + t > 0 {
            eprintln!(
                "splitrt-run: the bootstrap turned away {u} unauthenticated connection(s), \
                 closed {o} over the limit of {MAX_PENDING} pending, and refused {t} late or \
                 duplicate rank(s)"
            );
        }
    }
    // The rendezvous ends when every rank is gone; its verdict is already
    // known to the ranks, so only join it if it has finished.
    if boot.is_finished() {
        if let Ok(Err(e)) = boot.join() {
            if opts.verbose {
                eprintln!("splitrt-run: bootstrap: {e}");
            }
        }
    }
    Ok(outcome.unwrap_or(JobOutcome {
        code: 0,
        reason: None,
    }))
}
