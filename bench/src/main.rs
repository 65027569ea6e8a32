//! `splitrt-bench`: benchmarks of splitrt between pinned processes.
//!
//! ```text
//! splitrt-bench [am] [--quick] [--reps R] [--out DIR] [--timeout S] [--no-ucx] [--rows rtt,sizes,bw,rate,progress]
//! splitrt-bench pgas | latency | throughput | ring-scan | cell-scan | breakdown [--quick] [--reps R] [--out DIR]
//! splitrt-bench compare [--no-peers] [--quick] [--reps R] [--out DIR]
//! splitrt-bench apps [--class S|W] [--quick] [--reps R] [--out DIR]
//! splitrt-bench net [--hosts a,b --rsh CMD] [--gasnet DIR] [--quick] [--reps R] [--out DIR]
//! splitrt-bench gasnet [--gasnet DIR] [--iters N] [--max-size B] [--quick] [--reps R] [--out DIR]
//! splitrt-bench vys [--hosts a,b --rsh CMD] [--sizes 512,8K] [--setups 1x1-local-none] [--no-scan] [--spead2] [--quick] [--reps R] [--out DIR]
//! splitrt-bench scale [--ranks 16,64,256] [--out DIR]
//! ```
//!
//! * `am` (the default): Active Message latency, throughput and message
//!   rate next to a raw cache-line ping-pong measured in the same run (and
//!   UCX, when `ucx_perftest` is installed); `DIR/am.csv`, `am-*.svg`.
//! * `pgas`: one-sided put/get/store on both one-sided paths next to a
//!   memcpy baseline; `DIR/pgas.csv`, `pgas-bandwidth.svg`.
//! * `latency`, `throughput`: size sweeps of AM Short/Medium/Long and
//!   get/put (round trips with p50/p99; one-way MB/s and msgs/s).
//! * `ring-scan`, `cell-scan`: max-size Medium streaming vs the shm ring
//!   length / cell size, one job per setting.
//! * `compare`: splitrt beside UCX, libfabric, raw UDP, the raw line
//!   ping-pong and memcpy on the same pinned CPUs, with ratios.
//! * `apps`: the example applications at 1, 2, 4, 8, 16 ranks (speedup,
//!   and the cost of oversubscription against 2 ranks).
//! * `net`: the UDP fabric beside raw UDP (busy-poll ping-pong, stream)
//!   measured by the same two ranks, lossless and under 1% / 5% loss;
//!   `DIR/net.csv`, `net.txt`.
//! * `vys`: the vys visibility stream library: delivered spectra/s and
//!   GB/s vs spectrum size beside memcpy and the fabric's get of the same
//!   run, and verification failures vs ring length; `DIR/vys.csv`,
//!   `vys.txt`.
//! * `gasnet`: GASNet-EX's `testam` methodology run by splitrt, and with
//!   `--gasnet DIR` the user's GASNet-EX smp-conduit `testam` back to back
//!   in the same run, rows paired, with ratios and the raw cache-line
//!   round trip of the same moment; `DIR/gasnet.csv`, `gasnet.txt`.
//! * `breakdown`: per-stage time of an AM round trip (`SPLITRT_TRACE=1`).
//! * `scale`: peak RSS, RSS and PSS, /dev/shm, descriptors, threads and
//!   start time per rank beside the rank count on one host (`t_scale`);
//!   `DIR/scale.txt` (docs/scale.md).
//!
//! Every subcommand prints a table, writes `DIR/<name>.csv` and SVG plots,
//! repeats every measurement (`--reps`) and flags noisy rows. Run by a
//! user, the binary is the *driver*: it launches two ranks of itself
//! (hidden worker subcommands) through the splitrt launcher, reads rank 0's
//! measurements and reports. See `docs/BENCHMARKS.md`.

mod am;
mod apps;
mod breakdown;
mod compare;
mod gasnet;
mod harness;
mod host;
mod net;
mod pgas;
mod plot;
mod scale;
mod sweep;
mod touch;
mod vys;

use clap::{Args, Parser, Subcommand};
use harness::run::Run;
use harness::worker::Body;
use std::path::PathBuf;

/// Command line of `splitrt-bench`.
#[derive(Parser, Debug)]
#[command(
    name = "splitrt-bench",
    version,
    about = "splitrt benchmarks on 2 pinned ranks: AM latency / throughput / message rate \
             (default, or `am`), PGAS put / get / store (`pgas`), size sweeps, ring and cell \
             scans, comparisons with UCX / libfabric / hardware limits, applications, and a \
             per-stage breakdown"
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
    /// Only these groups of rows, comma-separated: rtt (raw line, AM
    /// Short and RPC round trips), sizes (Medium/Long round trips), bw
    /// (one-way throughput), rate (AM Short flood and aggregated RPC
    /// rate), progress (Short round trip, peer on its progress thread);
    /// default all. UCX runs only with all.
    #[arg(long, value_name = "LIST", value_parser = am::rows::Rows::parse)]
    rows: Option<am::rows::Rows>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Active Message latency, throughput and message rate (the default).
    Am(AmArgs),
    /// PGAS one-sided put/get/store on the native and the AM path, with a
    /// memcpy baseline.
    Pgas,
    /// AM Short/Medium/Long and get/put round-trip latency vs size (p50, p99).
    Latency,
    /// One-way bandwidth and message rate vs size (AM Medium/Long, put, get).
    Throughput,
    /// Max-size Medium streaming vs shm ring length (2 .. 64 cells).
    RingScan,
    /// Max-size Medium streaming vs shm cell size (256 B .. 1 MiB, ring of 4).
    CellScan,
    /// splitrt beside UCX, libfabric (if installed), raw UDP, the raw
    /// cache-line ping-pong and memcpy, on the same pinned CPUs.
    Compare {
        /// Do not run ucx_perftest / fi_pingpong even if installed.
        #[arg(long)]
        no_peers: bool,
    },
    /// Wall-clock time and speedup of the example applications at 1, 2, 4,
    /// 8 and 16 ranks (needs `cargo build --release --examples --bins`).
    Apps {
        /// NPB problem class (S or W).
        #[arg(long, default_value = "S")]
        class: String,
    },
    /// Where an AM round trip's time goes, per runtime stage
    /// (SPLITRT_TRACE=1), beside the untraced round trip.
    Breakdown,
    /// The UDP fabric beside raw UDP on the same cores, lossless and under
    /// 1% and 5% loss (loopback, or two hosts with --hosts a,b --rsh CMD).
    Net {
        /// Two hosts of one rank each, e.g. `node1,node2`.
        #[arg(long)]
        hosts: Option<String>,
        /// Remote shell for --hosts (default ssh).
        #[arg(long)]
        rsh: Option<String>,
        /// A GASNet-EX build tree whose udp-conduit tests run too.
        #[arg(long)]
        gasnet: Option<PathBuf>,
    },
    /// The vys stream library: delivered rate vs spectrum size beside
    /// memcpy and the fabric's get, and verification failures vs ring
    /// length (this host, or producer and consumer on two hosts with
    /// --hosts a,b --rsh CMD).
    Vys {
        /// Two hosts of one rank each: producers on the first, consumers
        /// on the second.
        #[arg(long)]
        hosts: Option<String>,
        /// Remote shell for --hosts (default ssh).
        #[arg(long)]
        rsh: Option<String>,
        /// Only these spectrum sizes, e.g. `512,8K,1M`.
        #[arg(long)]
        sizes: Option<String>,
        /// Only these setups, e.g. `1x1-local-none,2x2-remote-none`.
        #[arg(long)]
        setups: Option<String>,
        /// Skip the verification-failure scan.
        #[arg(long)]
        no_scan: bool,
        /// Report an earlier run's raw file (DIR/vys-host.raw or
        /// vys-across.raw) instead of measuring.
        #[arg(long, hide = true)]
        from_raw: Option<PathBuf>,
        /// Also run spead2 (from PyPI: sender -> C++ chunk-stream
        /// receiver) between the same hosts, beside vys's remote reads
        /// (skipped with a message when spead2 is not importable).
        #[arg(long)]
        spead2: bool,
    },
    /// GASNet-EX's testam methodology (AM Short / Medium / Long ping-pong
    /// and flood) run by splitrt, beside the user's own GASNet-EX
    /// smp-conduit testam with --gasnet DIR, with ratios.
    Gasnet {
        /// A GASNet-EX tree configured with --enable-smp, with
        /// `make -C smp-conduit testam` done.
        #[arg(long)]
        gasnet: Option<PathBuf>,
        /// Iterations per row (testam's default 1000).
        #[arg(long, default_value_t = 1000)]
        iters: usize,
        /// Largest payload in bytes (testam's default 2 MiB).
        #[arg(long, default_value_t = 2 << 20)]
        max_size: usize,
    },
    /// Peak RSS, RSS and PSS (the memory a rank costs, shared pages
    /// divided among the ranks that map them) and /dev/shm per rank,
    /// descriptors, threads and time to start beside the rank count, on
    /// this host (the `t_scale` example; docs/scale.md).
    Scale {
        /// Rank counts, comma-separated.
        #[arg(long, default_value = "16,64,256")]
        ranks: String,
    },
}

/// The hidden worker subcommands the drivers start (one rank each).
const WORKERS: &[(&str, Body)] = &[
    ("worker", am::worker::run),
    ("pgas-worker", pgas::worker::run),
    ("sweep-worker", sweep::worker::run),
    ("breakdown-worker", breakdown::worker),
    ("net-worker", net::worker::run),
    ("vys-worker", vys::worker::run),
    ("gasnet-worker", |_, result| gasnet::testam::run(result)),
    ("gasnet-rma-worker", |_, result| {
        gasnet::testrma::run(result)
    }),
];

fn main() {
    let outcome = harness::worker::dispatch(WORKERS).unwrap_or_else(|| drive(&Cli::parse()));
    if let Err(e) = outcome {
        eprintln!("splitrt-bench: {e}");
        std::process::exit(1);
    }
}

/// Run the benchmark the user asked for.
fn drive(cli: &Cli) -> Result<(), String> {
    let run = || Run::new(cli.common, cli.driver.out.clone(), cli.driver.timeout);
    match &cli.cmd {
        None => am::driver::run(&run()?, !cli.am.no_ucx, cli.am.rows.unwrap_or_default()),
        Some(Cmd::Am(a)) => am::driver::run(
            &run()?,
            !(a.no_ucx || cli.am.no_ucx),
            a.rows.or(cli.am.rows).unwrap_or_default(),
        ),
        Some(Cmd::Latency) => sweep::driver::latency(&run()?),
        Some(Cmd::Throughput) => sweep::driver::throughput(&run()?),
        Some(Cmd::RingScan) => sweep::driver::ring_scan(&run()?),
        Some(Cmd::CellScan) => sweep::driver::cell_scan(&run()?),
        Some(Cmd::Compare { no_peers }) => compare::run(&run()?, *no_peers || cli.am.no_ucx),
        Some(Cmd::Apps { class }) => apps::run(&run()?, class),
        Some(Cmd::Breakdown) => breakdown::run(&run()?),
        Some(Cmd::Net { hosts, rsh, gasnet }) => {
            net::run(&run()?, hosts.as_deref(), rsh.clone(), gasnet.as_deref())
        }
        Some(Cmd::Vys {
            hosts,
            rsh,
            sizes,
            setups,
            no_scan,
            from_raw,
            spead2,
        }) => vys::plan::Selection::parse(sizes.as_deref(), setups.as_deref(), *no_scan).and_then(
            |selection| {
                vys::run(
                    &run()?,
                    &vys::Options {
                        hosts: hosts.clone(),
                        rsh: rsh.clone(),
                        selection,
                        from_raw: from_raw.clone(),
                        spead2: *spead2,
                    },
                )
            },
        ),
        Some(Cmd::Gasnet {
            gasnet,
            iters,
            max_size,
        }) => gasnet::run(
            &run()?,
            &gasnet::Options {
                gasnet: gasnet.clone(),
                iters: *iters,
                max_size: *max_size,
            },
        ),
        Some(Cmd::Pgas) if cli.am.no_ucx => {
            Err("--no-ucx applies to the AM benchmark only".to_string())
        }
        Some(Cmd::Pgas) => pgas::driver::run(&run()?),
        Some(Cmd::Scale { ranks }) => scale::run(&run()?, ranks),
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
        assert!(matches!(
            c.cmd,
            Some(Cmd::Am(AmArgs {
                no_ucx: true,
                rows: None
            }))
        ));
        assert_eq!(c.common.reps, 2);
        let r = parse(&["am", "--rows", "rate", "--quick"]).unwrap();
        let Some(Cmd::Am(a)) = r.cmd else {
            panic!("not am")
        };
        assert_eq!(a.rows, Some(am::rows::Rows::parse("rate").unwrap()));
        assert!(parse(&["--rows", "rate,rtt"]).unwrap().am.rows.is_some());
        assert!(parse(&["am", "--rows", "nope"]).is_err());
        let c = parse(&["pgas", "--quick", "--reps", "1", "--out", "y"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Pgas)));
        assert_eq!((c.common.quick, c.common.reps), (true, 1));
        assert_eq!(c.driver.out, PathBuf::from("y"));
        assert!(parse(&["pgas", "--no-ucx"]).is_err());
        let c = parse(&["vys", "--hosts", "a,b", "--rsh", "r", "--quick"]).unwrap();
        assert!(matches!(
            c.cmd,
            Some(Cmd::Vys {
                hosts: Some(_),
                rsh: Some(_),
                no_scan: false,
                ..
            })
        ));
        assert!(parse(&["--reps", "0"]).is_err());
    }
}
