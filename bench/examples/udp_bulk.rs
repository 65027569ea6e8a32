//! Counts behind the UDP bulk rows of `splitrt-bench net` (issue 28 point
//! 3): rank 0 puts 1 MiB into rank 1 `N` times and syncs, then gets 1 MiB
//! from it `N` times (`FORM=put|get`, default both one after the other),
//! and each rank prints its time per MiB and the UDP fabric's counters per
//! MiB (datagrams sent, of which control ones, datagrams received). Meant
//! to run under `strace -c -f` or `valgrind --tool=callgrind` with one form
//! at a time, so system calls and instructions per MiB can be compared
//! between builds:
//!
//! ```text
//! SPLITRT_FABRIC=udp FORM=put N=64 splitrt-run -n 2 udp_bulk
//! ```

use splitrt::pgas::Pgas;
use splitrt::Result;
use std::time::Instant;

const MIB: usize = 1 << 20;

fn main() {
    if let Err(e) = run() {
        eprintln!("udp_bulk: {e}");
        std::process::exit(1);
    }
}

fn stats(pg: &Pgas) -> [u64; 3] {
    pg.endpoint()
        .udp_stats()
        .map_or([0; 3], |s| [s.sent, s.controls, s.received])
}

fn run() -> Result<()> {
    let pg = Pgas::attach()?;
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let form = std::env::var("FORM").unwrap_or_default();
    let area = pg.alloc_sym::<u8>(MIB)?;
    area.local().fill(1);
    let mut buf = vec![7u8; MIB];
    let forms: Vec<&str> = match form.as_str() {
        "" => vec!["put", "get"],
        f => vec![f],
    };
    for f in forms {
        pg.barrier()?;
        let s0 = stats(&pg);
        let t = Instant::now();
        if pg.rank() == 0 {
            for _ in 0..n {
                if f == "put" {
                    pg.put(area.ptr(1), &buf)?;
                } else {
                    pg.read_slice(area.ptr(1), &mut buf)?;
                }
            }
            pg.sync()?;
        }
        let secs = t.elapsed().as_secs_f64();
        pg.barrier()?;
        let s1 = stats(&pg);
        let d: Vec<f64> = (0..3).map(|i| (s1[i] - s0[i]) as f64 / n as f64).collect();
        println!(
            "rank {} {f}: {:8.1} MB/s (rank 1: incl. barrier skew); per MiB: sent {:.2} \
             datagrams ({:.2} control), received {:.2}",
            pg.rank(),
            (n * MIB) as f64 / secs / 1e6,
            d[0],
            d[1],
            d[2]
        );
    }
    pg.finish()
}
