//! One benchmark job: two ranks of this very binary (a hidden worker
//! subcommand) started through the splitrt launcher with
//! `SPLITRT_SPIN_ONLY=1`; each rank pins itself to the CPU of its number
//! ([`pin_this_rank`](super::worker::pin_this_rank)) and rank 0 writes its
//! measurements to a file that the driver reads back.

use crate::Common;
use splitrt::runtime::config::ENV_SPIN_ONLY;
use splitrt::runtime::launcher::{launch, HostSlots, LaunchOptions};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// What to launch.
#[derive(Clone, Debug)]
pub struct Job<'a> {
    /// The hidden worker subcommand the ranks run.
    pub worker: &'a str,
    /// Flags passed on to the ranks.
    pub common: Common,
    /// Where rank 0 writes its measurements (removed first).
    pub result: &'a Path,
    /// Environment of the ranks besides `SPLITRT_SPIN_ONLY=1`.
    pub env: Vec<(String, String)>,
    /// Seconds before the job is killed.
    pub timeout: f64,
}

/// Check a `--timeout` value.
pub fn check_timeout(t: f64) -> Result<(), String> {
    if t.is_finite() && t > 0.0 {
        Ok(())
    } else {
        Err("--timeout must be a positive number of seconds".into())
    }
}

/// Run `job` on 2 ranks placed at `place`; returns the text rank 0 wrote.
pub fn run(job: &Job<'_>, place: &Place) -> Result<String, String> {
    check_timeout(job.timeout)?;
    let _ = std::fs::remove_file(job.result);
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let result_abs = std::path::absolute(job.result).unwrap_or_else(|_| job.result.to_path_buf());
    let mut args: Vec<OsString> = vec![job.worker.into(), "--result".into(), result_abs.into()];
    args.extend(["--reps".into(), job.common.reps.to_string().into()]);
    if job.common.quick {
        args.push("--quick".into());
    }
    let mut env = vec![(ENV_SPIN_ONLY.to_string(), "1".to_string())];
    env.extend(job.env.iter().cloned());
    let outcome = launch(&LaunchOptions {
        ranks: 2,
        program: exe.into(),
        args,
        env,
        timeout: Some(Duration::from_secs_f64(job.timeout)),
        prefix_output: true,
        verbose: false,
        hosts: place.hosts.clone(),
        rsh: place.rsh.clone(),
    })
    .map_err(|e| format!("launching the ranks: {e}"))?;
    if outcome.code != 0 {
        return Err(format!(
            "the benchmark job failed (exit code {}): {}",
            outcome.code,
            outcome.reason.unwrap_or_default()
        ));
    }
    std::fs::read_to_string(job.result)
        .map_err(|e| format!("reading {}: {e}", job.result.display()))
}

/// Where a job's two ranks run: this host, or two hosts through a remote
/// shell.
#[derive(Clone, Debug, Default)]
pub struct Place {
    /// Two hosts of one slot each (`None`: this host).
    pub hosts: Option<Vec<HostSlots>>,
    /// Remote shell for `hosts`.
    pub rsh: Option<String>,
}

impl Place {
    /// `--hosts a,b` and `--rsh CMD` checked.
    pub fn new(hosts: Option<&str>, rsh: Option<String>) -> Result<Place, String> {
        Ok(Place {
            hosts: two_hosts(hosts)?,
            rsh,
        })
    }
}

/// `--hosts a,b`: two hosts of one slot each (`None`: this host).
fn two_hosts(hosts: Option<&str>) -> Result<Option<Vec<HostSlots>>, String> {
    let Some(h) = hosts else {
        return Ok(None);
    };
    let h = splitrt::runtime::launcher::parse_hosts(h).map_err(|e| e.to_string())?;
    if h.len() != 2 || h.iter().any(|x| x.slots != 1) {
        return Err("--hosts takes two hosts of one slot each: a,b".into());
    }
    Ok(Some(h))
}
