//! The benchmark harness, written once for every subcommand.
//!
//! A benchmark is a plan (what to measure), a worker body (one rank of a
//! 2-rank job of this very binary, started under a hidden subcommand) and a
//! table (rows built from what rank 0 recorded). The harness owns the rest:
//!
//! * [`run::Run`], the driver's side: the output directory, the timeout,
//!   launching a worker job with its environment ([`job`]), reading back
//!   rank 0's result file and parsing its rows ([`results`]), the progress
//!   line ([`progress`]), the report banner, the text table and the CSV
//!   ([`report`]);
//! * [`worker`], the rank's side: the table of worker bodies by hidden
//!   subcommand, pinning, the 2-rank check, the per-repetition progress
//!   line and writing the result file;
//! * [`stats`]: percentiles within a repetition and the summary across
//!   repetitions (p50 / p99 / min / max / noisy).

pub mod job;
pub mod pin;
pub mod progress;
pub mod report;
pub mod results;
pub mod run;
pub mod stats;
pub mod worker;
