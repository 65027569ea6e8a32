//! `splitrt-run`'s engine: start N ranks of a program on this node with the
//! `SPLITRT_*` environment, host their bootstrap rendezvous, prefix their
//! output, and end the job as soon as one rank fails or time runs out. The
//! exit code is the first failing rank's; shared-memory files are removed
//! whatever happened.

mod relay;
mod remote;

pub use remote::{parse_hostfile, parse_hosts, read_hostfile, HostSlots, HOSTFILE_MAX};

use crate::bootstrap::{Server, MAX_PENDING};
use crate::config::{Config, ENV_BOOTSTRAP_TIMEOUT};
use crate::job::{
    sanitize_job_id, ENV_BOOTSTRAP, ENV_JOB, ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_NODE, ENV_RANK,
    ENV_SIZE,
};
use crate::key::{JobKey, ENV_JOB_KEY};
use crate::segment::remove_job_files;
use crate::{Error, Result};
use relay::{Relay, Source};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Hosts to place the ranks on, in order (`None`: all on this one).
    pub hosts: Option<Vec<HostSlots>>,
    /// Remote-shell command for other hosts (default `ssh`); run as
    /// `RSH HOST SCRIPT`.
    pub rsh: Option<String>,
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

fn describe(rank: usize, st: &ExitStatus, remote: bool) -> (i32, String) {
    if remote && st.code() == Some(remote::NO_KEY_EXIT) {
        return (
            remote::NO_KEY_EXIT,
            format!(
                "rank {rank} exited with code {}: the job key never arrived on its remote \
                 shell's standard input (does --rsh drop stdin, like `ssh -n`?)",
                remote::NO_KEY_EXIT
            ),
        );
    }
    if let Some(c) = st.code().filter(|&c| remote && c > 128 && c < 160) {
        // a remote shell reports a rank killed by a signal as 128 + signal
        let s = c - 128;
        return (
            c,
            format!("rank {rank} was killed by signal {s} ({})", signal_name(s)),
        );
    }
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

fn thread_error(what: &str, e: std::io::Error) -> Error {
    Error::io(
        format!("cannot start a thread for {what} (process or thread limit? see `ulimit -u`)"),
        e,
    )
}

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory effects; pid is a child we spawned and
    // have not reaped (only this thread reaps, and it stops signalling a
    // rank once it has reaped it).
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Time the ranks get to end on their own once one has failed (the
/// bootstrap tells them at once) before they are sent SIGTERM, so their
/// last words are not cut off.
const SURVIVOR_GRACE: Duration = Duration::from_secs(1);
/// Time between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Time output may still flow after the last rank exited (a background
/// process holding a rank's stdout is not waited for longer).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// A process that outlives the launcher to remove the job's
/// shared-memory files if the launcher dies without doing so (a SIGKILL
/// while the ranks make their files, before they unlink them: the ranks
/// die with it, and nobody else knows the files). It reads rank pids on
/// its standard input until that closes (the launcher ended, however),
/// waits (at most 5 s) for those ranks to be gone (exited or zombies:
/// they are SIGKILLed by their parent-death signal), and removes the
/// files.
/// It is started before any rank, in its own process group (a Ctrl-C to
/// the job does not end it), and never holds up a normal exit.
fn start_janitor(stem: &str) -> Option<Child> {
    let first = crate::segment::ShmFile::path_for(stem, 0);
    let prefix = first.to_string_lossy();
    let prefix = prefix.strip_suffix('0')?;
    let script = format!(
        "alive() {{ s=$(cat /proc/$1/stat 2>/dev/null) || return 1; \
         case \"${{s##*) }}\" in Z*|X*) return 1;; esac; }}; \
         pids=; while IFS= read -r p; do pids=\"$pids $p\"; done; i=0; \
         for p in $pids; do while alive \"$p\" && [ $i -lt 100 ]; \
         do sleep 0.05; i=$((i+1)); done; done; rm -f -- {}[0-9]*",
        remote::quote(prefix)
    );
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
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
    // Where each rank runs: (host, rank on the host, ranks on the host,
    // remote?).
    let me = crate::route::hostname();
    let placement: Vec<(usize, usize, usize, Option<String>)> = match &opts.hosts {
        None => (0..n).map(|r| (0, r, n, None)).collect(),
        Some(h) => remote::place(n, h)?
            .into_iter()
            .map(|(i, l, k)| {
                let host = &h[i].host;
                let local = host == "localhost" || *host == me;
                (i, l, k, (!local).then(|| host.clone()))
            })
            .collect(),
    };
    let first_remote = placement.iter().find_map(|p| p.3.clone());
    let (server, addr) = match &first_remote {
        None => {
            let s = Server::bind("127.0.0.1:0", key.clone())?;
            let a = s.local_addr()?.to_string();
            (s, a)
        }
        Some(h) => {
            let ip = crate::route::local_ip_toward(&format!("{h}:9"))?;
            let s = Server::bind(&format!("{ip}:0"), key.clone())?;
            let a = s.local_addr()?.to_string();
            (s, a)
        }
    };
    let rsh: Vec<String> = opts
        .rsh
        .as_deref()
        .unwrap_or("ssh")
        .split_whitespace()
        .map(String::from)
        .collect();
    if rsh.is_empty() {
        return Err(Error::usage("--rsh is empty"));
    }
    // What remote ranks get of this environment: the SPLITRT_* settings
    // whose names a shell can take (others are named and left out).
    let mut forwarded: Vec<(String, String)> = Vec::new();
    if first_remote.is_some() {
        for (k, v) in std::env::vars_os() {
            let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
                if k.to_string_lossy().starts_with("SPLITRT_") {
                    eprintln!("splitrt-run: not forwarding {k:?} to remote ranks: not UTF-8");
                }
                continue;
            };
            if !k.starts_with("SPLITRT_") || k == ENV_JOB_KEY {
                continue;
            }
            if remote::is_identifier(k) {
                forwarded.push((k.to_string(), v.to_string()));
            } else {
                eprintln!(
                    "splitrt-run: not forwarding {k:?} to remote ranks: not a valid variable name"
                );
            }
        }
    }
    let cwd = std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into());
    let boot_timeout = cfg.bootstrap_timeout;
    let culprit = server.culprit();
    let stats = server.stats();
    // Two pipes per rank here, two sockets per rank at the rendezvous, the
    // handshakes it may have pending (two descriptors each), and some slack.
    crate::limits::ensure_open_files(
        4 * n as u64 + 2 * MAX_PENDING as u64 + 64,
        &format!("splitrt-run with {n} ranks"),
    )?;
    let mut boot = Some(
        std::thread::Builder::new()
            .name("splitrt-boot-host".into())
            .spawn(move || server.run(n, boot_timeout))
            .map_err(|e| thread_error("the bootstrap rendezvous", e))?,
    );

    // SAFETY: `on_signal` is an `extern "C" fn(c_int)`, the handler type
    // signal(2) expects, and async-signal-safe (it only stores to an
    // atomic); SIG_ERR is ignored (we would merely lose Ctrl-C cleanup).
    unsafe { libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t) };
    // SAFETY: as for SIGINT just above.
    unsafe { libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t) };

    let mut janitor = start_janitor(&stem);
    let mut children: Vec<Child> = Vec::with_capacity(n);
    // A remote rank's lifeline: its remote shell's standard input.
    let mut lifelines: Vec<Option<std::process::ChildStdin>> = Vec::with_capacity(n);
    let mut sources = Vec::with_capacity(2 * n);
    let mut spawn_error = None;
    for (rank, (node, local, local_n, remote_host)) in placement.iter().enumerate() {
        let vars: Vec<(String, String)> = [
            (ENV_RANK, rank.to_string()),
            (ENV_SIZE, n.to_string()),
            (ENV_LOCAL_RANK, local.to_string()),
            (ENV_LOCAL_SIZE, local_n.to_string()),
            (ENV_NODE, node.to_string()),
            (ENV_JOB, job.clone()),
            (ENV_BOOTSTRAP, addr.clone()),
            (
                ENV_BOOTSTRAP_TIMEOUT,
                boot_timeout.as_secs_f64().to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut cmd = match remote_host {
            None => {
                let mut c = Command::new(&opts.program);
                c.args(&opts.args)
                    .envs(opts.env.iter().map(|(k, v)| (k, v)))
                    .envs(vars.iter().map(|(k, v)| (k, v)))
                    .env(ENV_JOB_KEY, key.to_hex())
                    .stdin(Stdio::null());
                c
            }
            Some(host) => {
                // The remote shell starts with a bare environment: every
                // SPLITRT_* setting travels in the script (the key on stdin).
                let mut env = forwarded.clone();
                env.extend(opts.env.iter().cloned());
                env.extend(vars);
                let mut argv = vec![opts.program.to_string_lossy().into_owned()];
                argv.extend(opts.args.iter().map(|a| a.to_string_lossy().into_owned()));
                let shm = crate::segment::ShmFile::path_for(&stem, rank);
                let text = remote::script(&cwd, &env, &argv, &shm.to_string_lossy());
                let mut c = Command::new(&rsh[0]);
                c.args(&rsh[1..]).arg(host).arg(text).stdin(Stdio::piped());
                c
            }
        };
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        // Die with the launcher, whatever kills it.
        let die_with_launcher = || {
            // SAFETY: PR_SET_PDEATHSIG takes a signal number and touches no
            // memory of ours.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            Ok(())
        };
        // SAFETY: `pre_exec`'s contract: the closure runs in the child
        // between fork and exec and calls only prctl(2), which is
        // async-signal-safe; it allocates nothing and takes no lock.
        unsafe { cmd.pre_exec(die_with_launcher) };
        match cmd.spawn() {
            Ok(mut child) => {
                if let Some(w) = janitor.as_mut().and_then(|j| j.stdin.as_mut()) {
                    use std::io::Write;
                    let _ = writeln!(w, "{}", child.id());
                }
                let mut lifeline = child.stdin.take();
                if let Some(w) = lifeline.as_mut() {
                    use std::io::Write;
                    // a remote shell that cannot take the key fails on its own
                    let _ = writeln!(w, "{}", key.to_hex());
                }
                lifelines.push(lifeline);
                let prefix = opts.prefix_output.then(|| format!("[{rank}] "));
                if let Some(o) = child.stdout.take() {
                    sources.push(Source {
                        fd: o.into(),
                        prefix: prefix.clone(),
                        to_stderr: false,
                    });
                }
                if let Some(e) = child.stderr.take() {
                    sources.push(Source {
                        fd: e.into(),
                        prefix,
                        to_stderr: true,
                    });
                }
                children.push(child);
            }
            Err(e) => {
                let hint = if e.raw_os_error() == Some(libc::EAGAIN) {
                    " (process limit reached? see `ulimit -u`)"
                } else {
                    ""
                };
                let what = match remote_host {
                    None => opts.program.to_string_lossy().into_owned(),
                    Some(h) => format!("remote shell '{}' for host {h}", rsh[0]),
                };
                spawn_error = Some(Error::io(format!("starting rank {rank}: {what}{hint}"), e));
                break;
            }
        }
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let relay = match Relay::start(sources) {
        Ok(r) => Some(r),
        Err(e) => {
            spawn_error.get_or_insert(thread_error("relaying the ranks' output", e));
            None
        }
    };

    let started = Instant::now();
    let mut running: Vec<bool> = vec![true; pids.len()];
    // Why each rank failed, once it has exited unsuccessfully.
    let mut failed: Vec<Option<(i32, String)>> = vec![None; pids.len()];
    let mut exited_ok: Vec<bool> = vec![false; pids.len()];
    let mut first_failure: Option<(usize, Instant)> = None;
    let mut outcome: Option<JobOutcome> = spawn_error.as_ref().map(|e| JobOutcome {
        code: if matches!(e.kind(), crate::ErrorKind::Io(..)) {
            127
        } else {
            1
        },
        reason: Some(e.to_string()),
    });
    // When to send SIGTERM, then SIGKILL, to the ranks still running.
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    // The bootstrap's own failure (e.g. ranks that never arrived) and when.
    let mut boot_failed: Option<(String, Instant)> = None;
    if let Some(e) = &spawn_error {
        eprintln!("splitrt-run: {e}; stopping the ranks already started");
        term_at = Some(Instant::now());
    }
    while running.iter().any(|&r| r) {
        std::thread::sleep(Duration::from_millis(5));
        for (rank, child) in children.iter_mut().enumerate() {
            if !running[rank] {
                continue;
            }
            // Only this thread reaps and signals, so a reaped pid is never
            // signalled again.
            match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(st)) if st.success() => exited_ok[rank] = true,
                Ok(Some(st)) => {
                    failed[rank] = Some(describe(rank, &st, placement[rank].3.is_some()))
                }
                Err(e) => failed[rank] = Some((1, format!("waiting for rank {rank} failed: {e}"))),
            }
            running[rank] = false;
            lifelines[rank] = None;
            if failed[rank].is_some() && first_failure.is_none() {
                first_failure = Some((rank, Instant::now()));
            }
        }
        // A rank the bootstrap names as the cause (its connection closed
        // before it finished) that exited with 0 still failed the job.
        let cause = culprit.lock().filter(|&c| c < pids.len());
        if let Some(c) = cause.filter(|&c| exited_ok[c] && failed[c].is_none()) {
            failed[c] = Some((
                1,
                format!("rank {c} exited (code 0) before finishing the job"),
            ));
            first_failure.get_or_insert((c, Instant::now()));
        }
        if outcome.is_none() {
            if let Some((first, when)) = first_failure {
                // Ranks that saw a peer fail exit quickly; the rank that
                // caused it (named by the bootstrap) may still be printing
                // its panic. Blame the cause if it ends within a grace period.
                let cause = cause.unwrap_or(first);
                let grace_over = !running[cause] || when.elapsed() > KILL_GRACE;
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
                    // they were told; let them say their last words
                    term_at.get_or_insert(Instant::now() + SURVIVOR_GRACE);
                }
            }
        }
        if boot_failed.is_none() && boot.as_ref().is_some_and(|b| b.is_finished()) {
            if let Some(Ok(Err(e))) = boot.take().map(|b| b.join()) {
                boot_failed = Some((e.to_string(), Instant::now()));
            }
        }
        // The bootstrap gave up (ranks never arrived) and no rank ended
        // since: remote shells that never started their rank (stuck on a
        // prompt, an unreachable host) would hold the job until --timeout.
        if outcome.is_none() && first_failure.is_none() {
            if let Some((e, _)) = boot_failed.as_ref().filter(|b| b.1.elapsed() >= KILL_GRACE) {
                let mut hosts: Vec<&str> = placement
                    .iter()
                    .zip(&running)
                    .filter(|(_, &alive)| alive)
                    .filter_map(|(p, _)| p.3.as_deref())
                    .collect();
                hosts.dedup();
                let why = if hosts.is_empty() {
                    format!("{e}; stopping the ranks")
                } else {
                    format!(
                        "{e}; the remote shell ('{}') for host(s) {} never started its rank \
                         (stuck on a password or host-key prompt, or the host unreachable?); \
                         stopping them",
                        rsh.join(" "),
                        hosts.join(", ")
                    )
                };
                eprintln!("splitrt-run: {why}");
                outcome = Some(JobOutcome {
                    code: 1,
                    reason: Some(why),
                });
                term_at = Some(Instant::now());
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
                term_at = Some(Instant::now());
            } else if INTERRUPTED.load(Ordering::SeqCst) {
                let why = "interrupted; killing all ranks".to_string();
                eprintln!("splitrt-run: {why}");
                outcome = Some(JobOutcome {
                    code: 130,
                    reason: Some(why),
                });
                term_at = Some(Instant::now());
            }
        }
        let now = Instant::now();
        if term_at.is_some_and(|t| now >= t) {
            term_at = None;
            for (r, &alive) in running.iter().enumerate() {
                if alive {
                    // a remote rank's shell ends it when its input closes
                    lifelines[r] = None;
                    kill(pids[r], libc::SIGTERM);
                }
            }
            kill_at = Some(now + KILL_GRACE);
        }
        if kill_at.is_some_and(|t| now >= t) {
            kill_at = None;
            for (r, &alive) in running.iter().enumerate() {
                if alive {
                    kill(pids[r], libc::SIGKILL);
                }
            }
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
    // Output still in the pipes comes through; a process that outlived its
    // rank and holds the pipe open is not waited for.
    if let Some(relay) = relay {
        let end = Instant::now() + OUTPUT_GRACE;
        while !relay.is_done() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        relay.stop();
    }
    let left = remove_job_files(&stem);
    if let Some(mut j) = janitor.take() {
        // its ranks are reaped: it finds nothing left and ends at once
        drop(j.stdin.take());
        let end = Instant::now() + OUTPUT_GRACE;
        while matches!(j.try_wait(), Ok(None)) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
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
    if let Some(b) = boot.filter(|b| b.is_finished()) {
        if let Ok(Err(e)) = b.join() {
            boot_failed = Some((e.to_string(), Instant::now()));
        }
    }
    if let Some((e, _)) = boot_failed.filter(|_| opts.verbose) {
        eprintln!("splitrt-run: bootstrap: {e}");
    }
    Ok(outcome.unwrap_or(JobOutcome {
        code: 0,
        reason: None,
    }))
}
