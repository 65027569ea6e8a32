//! The part the counting examples (`strided_count`, `udp_bulk`) share:
//! the `N` / `FORM` environment, the UDP fabric's counters, and one timed,
//! counted round per form between two barriers.

use splitrt::pgas::Pgas;
use splitrt::Result;
use std::time::Instant;

/// Runs `run`, printing `name: error` and exiting with status 1 on error.
pub fn main_with(name: &str, run: fn() -> Result<()>) {
    if let Err(e) = run() {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}

/// `N` from the environment (repetitions), `default` when unset or invalid.
pub fn env_n(default: usize) -> usize {
    std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The forms to run: `FORM` from the environment, or all of `all` when unset.
pub fn forms(all: &[&str]) -> Vec<String> {
    match std::env::var("FORM").unwrap_or_default().as_str() {
        "" => all.iter().map(|f| f.to_string()).collect(),
        f => vec![f.to_string()],
    }
}

/// The UDP fabric's counters: datagrams sent, of which control ones,
/// datagrams received (zeros on other fabrics).
fn stats(pg: &Pgas) -> [u64; 3] {
    pg.endpoint()
        .udp_stats()
        .map_or([0; 3], |s| [s.sent, s.controls, s.received])
}

/// Runs `work` on rank 0 between two barriers and returns the seconds
/// elapsed on this rank (rank 1: including barrier skew) and the counters'
/// growth divided by `n`.
pub fn counted(pg: &Pgas, n: usize, work: impl FnOnce() -> Result<()>) -> Result<(f64, [f64; 3])> {
    pg.barrier()?;
    let s0 = stats(pg);
    let t = Instant::now();
    if pg.rank() == 0 {
        work()?;
    }
    let secs = t.elapsed().as_secs_f64();
    pg.barrier()?;
    let s1 = stats(pg);
    let d = std::array::from_fn(|i| (s1[i] - s0[i]) as f64 / n as f64);
    Ok((secs, d))
}
