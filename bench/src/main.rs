//! `splitrt-bench`: benchmarks of splitrt between two pinned ranks.
//!
//! ```text
//! splitrt-bench [am] [--quick] [--reps R] [--out DIR] [--no-ucx]
//! splitrt-bench pgas [--quick] [--reps R] [--out DIR]
//! ```
//!
//! * `am` (the default): Active Message latency, throughput and message
//!   rate next to a raw cache-line ping-pong measured in the same run (and
//!   UCX, when `ucx_perftest` is installed); writes `DIR/am.csv`.
//! * `pgas`: one-sided put/get/store latency and bandwidth and the cost of
//!   `sync`, on both one-sided paths (`SPLITRT_RMA=native` and `am`, one
//!   job each, back to back) next to a memcpy baseline measured in the same
//!   run; writes `DIR/pgas.csv`.
//!
//! Run by a user, the binary is the *driver*: it launches two ranks of
//! itself (hidden worker subcommands) through the splitrt launcher, reads
//! rank 0's measurements, prints the table and writes the CSV. The text
//! printed above each table says what every number means.

mod am;
mod host;
mod job;
mod pgas;
mod pin;
mod report;
mod results;
mod stats;
mod touch;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Command line of `splitrt-bench`.
#[derive(Parser, Debug)]
#[command(
    name = "splitrt-bench",
    version,
    about = "splitrt benchmarks on 2 pinned ranks: AM latency / throughput / message rate \
             (default, or `am`) and PGAS one-sided put / get / store (`pgas`)"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    driver: DriverArgs,
    #[command(flatten)]
    am: AmArgs,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

/// Flags the driver passes on to every rank unchanged.
#[derive(Args, Debug, Clone, Copy)]
pub struct Common {
    /// Tiny sizes and few iterations (a smoke test of a few seconds).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Repetitions of every measurement (spread = min..max over them).
    #[arg(long, default_value_t = 3, global = true, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
}

/// Flags of the driver, for every benchmark.
#[derive(Args, Debug, Clone)]
struct DriverArgs {
    /// Output directory: am.csv or pgas.csv, and rank 0's per-repetition
    /// rows.
    #[arg(long, default_value = "bench-out", global = true)]
    out: PathBuf,
    /// Kill a benchmark job after this many seconds.
    #[arg(long, default_value_t = 600.0, global = true)]
    timeout: f64,
}

/// Flags of the AM benchmark only.
#[derive(Args, Debug, Clone, Copy, Default)]
struct AmArgs {
    /// Do not run ucx_perftest even if it is installed.
    #[arg(long)]
    no_ucx: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Active Message latency, throughput and message rate (the default).
    Am(AmArgs),
    /// PGAS one-sided put/get/store on the native and the AM path, with a
    /// memcpy baseline.
    Pgas,
    /// One rank of the AM benchmark job (started by the driver, not by users).
    #[command(hide = true)]
    Worker {
        /// Where rank 0 writes its measurements (CSV).
        #[arg(long)]
        result: PathBuf,
    },
    /// One rank of a PGAS benchmark job (started by the driver, not by users).
    #[command(hide = true)]
    PgasWorker {
        /// Where rank 0 writes its measurements (CSV).
        #[arg(long)]
        result: PathBuf,
    },
}

fn am_options(cli: &Cli, a: AmArgs) -> am::driver::Options {
    am::driver::Options {
        common: cli.common,
        out: cli.driver.out.clone(),
        ucx: !(a.no_ucx || cli.am.no_ucx),
        timeout: cli.driver.timeout,
    }
}

fn main() {
    let cli = Cli::parse();
    let outcome = match &cli.cmd {
        Some(Cmd::Worker { result }) => {
            am::worker::run(cli.common, result).map_err(|e| e.to_string())
        }
        Some(Cmd::PgasWorker { result }) => {
            pgas::worker::run(cli.common, result).map_err(|e| e.to_string())
        }
        None => am::driver::run(&am_options(&cli, AmArgs::default())),
        Some(Cmd::Am(a)) => am::driver::run(&am_options(&cli, *a)),
        Some(Cmd::Pgas) if cli.am.no_ucx => {
            Err("--no-ucx applies to the AM benchmark only".to_string())
        }
        Some(Cmd::Pgas) => pgas::driver::run(&pgas::driver::Options {
            common: cli.common,
            out: cli.driver.out.clone(),
            timeout: cli.driver.timeout,
        }),
    };
    if let Err(e) = outcome {
        eprintln!("splitrt-bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("splitrt-bench").chain(args.iter().copied()))
    }

    #[test]
    fn command_line() {
        Cli::command().debug_assert();
        let c = parse(&["--quick", "--no-ucx", "--out", "x"]).unwrap();
        assert!(c.cmd.is_none() && c.common.quick && c.am.no_ucx);
        assert_eq!(c.driver.out, PathBuf::from("x"));
        let c = parse(&["am", "--no-ucx", "--reps", "2"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Am(AmArgs { no_ucx: true }))));
        assert_eq!(c.common.reps, 2);
        let c = parse(&["pgas", "--quick", "--reps", "1", "--out", "y"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Pgas)));
        assert_eq!((c.common.quick, c.common.reps), (true, 1));
        assert_eq!(c.driver.out, PathBuf::from("y"));
        assert!(parse(&["pgas", "--no-ucx"]).is_err());
        assert!(parse(&["--reps", "0"]).is_err());
    }
}
