//! The rank's side of a benchmark job: the hidden worker subcommands
//! ([`dispatch`]), pinning, the 2-rank check, the per-repetition progress
//! line and the result file rank 0 (or rank 1) hands to the driver.

use super::pin::pin_to_cpu;
use crate::Common;
use clap::Parser;
use splitrt::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A worker body: one rank of a job, writing its measurements to the
/// result file.
pub type Body = fn(Common, &Path) -> Result<()>;

/// Command line of a hidden worker subcommand (started by the driver, not
/// by users): `NAME --result FILE --reps R [--quick]`.
#[derive(Parser, Debug)]
struct WorkerCli {
    /// Where the recording rank writes its measurements.
    #[arg(long)]
    result: PathBuf,
    #[command(flatten)]
    common: Common,
}

/// If the first argument names one of `workers`, run that body with the
/// rest of the command line and return its outcome; `None` otherwise.
pub fn dispatch(workers: &[(&str, Body)]) -> Option<std::result::Result<(), String>> {
    let mut args = std::env::args_os();
    let _ = args.next();
    let name = args.next()?;
    let (name, body) = workers.iter().find(|(n, _)| name == **n)?;
    let cli = WorkerCli::parse_from(std::iter::once((*name).into()).chain(args));
    Some(body(cli.common, &cli.result).map_err(|e| e.to_string()))
}

/// This process's rank in the job (0 when started without the launcher).
pub fn this_rank() -> usize {
    std::env::var(splitrt::runtime::job::ENV_RANK)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Pin this process to CPU `rank`, warning (not failing) when that is
/// impossible.
pub fn pin_this_rank(rank: usize) {
    if let Err(e) = pin_to_cpu(rank) {
        eprintln!("warning: could not pin rank {rank} to CPU {rank}: {e}; numbers will be noisy");
    }
}

/// Pin this rank to the CPU of its number (rank r on CPU r).
pub fn pin() {
    pin_this_rank(this_rank());
}

/// An error unless the job has exactly 2 ranks.
pub fn two_ranks(size: usize) -> Result<()> {
    if size == 2 {
        Ok(())
    } else {
        Err(Error::usage(format!(
            "the benchmark needs exactly 2 ranks, this job has {size}"
        )))
    }
}

/// Write `text` to `path` for the driver (`rank` names the writer in the
/// error).
pub fn write_result(path: &Path, rank: usize, text: &str) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e).at_rank(rank))
}

/// Run `body(rep)` for every repetition (`--reps`), in order. With a
/// `label`, a full (not `--quick`) run prints `{label}repetition r/R done
/// in S s` after each.
pub fn repetitions(
    common: &Common,
    label: Option<&str>,
    mut body: impl FnMut(usize) -> Result<()>,
) -> Result<()> {
    for rep in 0..common.reps as usize {
        let started = Instant::now();
        body(rep)?;
        if let Some(what) = label.filter(|_| !common.quick) {
            eprintln!(
                "{what}repetition {}/{} done in {:.1} s",
                rep + 1,
                common.reps,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
