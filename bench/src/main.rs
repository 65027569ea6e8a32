//! `splitrt-bench`: Active Message latency, throughput and message rate of
//! splitrt between two pinned ranks, next to a raw cache-line ping-pong
//! measured in the same run (and UCX, when `ucx_perftest` is installed).
//!
//! ```text
//! splitrt-bench [--quick] [--reps R] [--out DIR] [--no-ucx]
//! ```
//!
//! Run by a user, the binary is the *driver*: it launches two ranks of
//! itself (the hidden `worker` subcommand) through the splitrt launcher,
//! reads rank 0's measurements, runs UCX, prints the table and writes
//! `DIR/am.csv`. See `report` for what each number means.

mod driver;
mod handlers;
mod latency;
mod pin;
mod pingpong;
mod plan;
mod report;
mod results;
mod stats;
mod throughput;
mod ucx;
mod worker;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Command line of `splitrt-bench`.
#[derive(Parser, Debug)]
#[command(
    name = "splitrt-bench",
    version,
    about = "splitrt AM latency / throughput / message rate vs a raw cache-line ping-pong and UCX"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    /// Output directory: am.csv, worker-rank0.csv (per repetition), ucx.log.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Do not run ucx_perftest even if it is installed.
    #[arg(long)]
    no_ucx: bool,
    /// Kill the benchmark job after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
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

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One rank of the benchmark job (started by the driver, not by users).
    #[command(hide = true)]
    Worker {
        /// Where rank 0 writes its measurements (CSV).
        #[arg(long)]
        result: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.cmd {
        Some(Cmd::Worker { result }) => worker::run(cli.common, &result).map_err(|e| e.to_string()),
        None => driver::run(&driver::Options {
            common: cli.common,
            out: cli.out,
            ucx: !cli.no_ucx,
            timeout: cli.timeout,
        }),
    };
    if let Err(e) = outcome {
        eprintln!("splitrt-bench: {e}");
        std::process::exit(1);
    }
}
