//! `splitrt-run`: start an SPMD job of N ranks on this node.

use clap::Parser;
use splitrt::runtime::config;
use splitrt::runtime::launcher::{launch, parse_hosts, read_hostfile, LaunchOptions};
use std::ffi::OsString;
use std::time::Duration;

fn env_help() -> String {
    let mut s = String::from("Environment (a flag wins over its variable):\n");
    for (k, v) in config::ALL_VARS {
        s.push_str(&format!("  {k:<28} {v}\n"));
    }
    s.push_str(
        "  SPLITRT_JOB                  job id (names /dev/shm files; default: generated)\n",
    );
    s
}

/// Launch PROGRAM as N ranks of one splitrt job, on this host or on the
/// hosts given.
#[derive(Parser, Debug)]
#[command(name = "splitrt-run", version, after_help = env_help())]
struct Args {
    /// Number of ranks (default: 1, or every slot of --hosts / --hostfile).
    #[arg(short = 'n', long = "ranks")]
    ranks: Option<usize>,
    /// Hosts and their slots, e.g. `node1:2,node2:2`: ranks fill them in
    /// order; ranks on other hosts start through --rsh.
    #[arg(long, conflicts_with = "hostfile")]
    hosts: Option<String>,
    /// A file of hosts, one per line: `host`, `host:N` or `host slots=N`.
    #[arg(long)]
    hostfile: Option<std::path::PathBuf>,
    /// Remote-shell command for ranks on other hosts, run as `RSH HOST
    /// SCRIPT` (default: ssh).
    #[arg(long)]
    rsh: Option<String>,
    /// Fabric between ranks: auto (shm within a host, udp between hosts),
    /// shm, udp, ibverbs (RDMA; needs a build with `--features ibverbs`).
    #[arg(long, value_parser = ["auto", "shm", "udp", "ibverbs"])]
    fabric: Option<String>,
    /// Kill the whole job after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// Segment size per rank (e.g. 64M).
    #[arg(long)]
    segment_size: Option<String>,
    /// shm ring cell size in bytes (multiple of 64, >= 256).
    #[arg(long)]
    cell_size: Option<String>,
    /// Cells per shm ring (>= 2).
    #[arg(long)]
    ring_len: Option<String>,
    /// Largest Medium payload (>= 512).
    #[arg(long)]
    max_medium: Option<String>,
    /// Bootstrap timeout in seconds.
    #[arg(long)]
    bootstrap_timeout: Option<f64>,
    /// One-sided access path for get/put/store/atomics.
    #[arg(long, value_parser = ["native", "am"])]
    rma: Option<String>,
    /// Spin without sleeping, yielding only every 1024 rounds (dedicated cores only).
    #[arg(long)]
    spin_only: bool,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long)]
    no_prefix: bool,
    /// Print launcher diagnostics.
    #[arg(short, long)]
    verbose: bool,
    /// The program to run (a path or a name on PATH).
    program: OsString,
    /// Its arguments, passed unchanged.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

fn main() {
    let a = Args::parse();
    let mut env = Vec::new();
    let mut set = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            env.push((k.to_string(), v));
        }
    };
    set(config::ENV_FABRIC, a.fabric);
    set(config::ENV_SEGMENT_SIZE, a.segment_size);
    set(config::ENV_CELL_SIZE, a.cell_size);
    set(config::ENV_RING_LEN, a.ring_len);
    set(config::ENV_MAX_MEDIUM, a.max_medium);
    set(
        config::ENV_BOOTSTRAP_TIMEOUT,
        a.bootstrap_timeout.map(|t| t.to_string()),
    );
    set(config::ENV_SPIN_ONLY, a.spin_only.then(|| "1".to_string()));
    set(config::ENV_RMA, a.rma);
    let seconds = |flag: &str, t: f64| {
        Duration::try_from_secs_f64(t)
            .ok()
            .filter(|d| t > 0.0 && *d <= config::MAX_DURATION)
            .unwrap_or_else(|| {
                eprintln!("splitrt-run: {flag} must be a number of seconds above 0 and at most one year, not {t}");
                std::process::exit(2);
            })
    };
    let timeout = a.timeout.map(|t| seconds("--timeout", t));
    if let Some(t) = a.bootstrap_timeout {
        seconds("--bootstrap-timeout", t);
    }
    let hosts = match (&a.hosts, &a.hostfile) {
        (Some(h), _) => Some(parse_hosts(h)),
        (None, Some(f)) => Some(read_hostfile(f)),
        (None, None) => None,
    }
    .transpose()
    .unwrap_or_else(|e| {
        eprintln!("splitrt-run: {e}");
        std::process::exit(2);
    });
    let ranks = a.ranks.unwrap_or_else(|| {
        hosts
            .as_ref()
            .map_or(1, |h| h.iter().map(|h| h.slots).sum())
    });
    let opts = LaunchOptions {
        ranks,
        hosts,
        rsh: a.rsh,
        program: a.program,
        args: a.args,
        env,
        timeout,
        prefix_output: !a.no_prefix,
        verbose: a.verbose,
    };
    match launch(&opts) {
        Ok(o) => std::process::exit(o.code),
        Err(e) => {
            eprintln!("splitrt-run: {e}");
            std::process::exit(2);
        }
    }
}
