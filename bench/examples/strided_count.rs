//! Counts behind the strided bench row (issue 25): rank 0 puts 1000 runs
//! of 64 B into rank 1, `N` times, either as one `put_strided` + `sync`
//! or as 1000 `put`s + `sync` (`FORM=strided|separate`, default both one
//! after the other), and prints the UDP fabric's counters for each form
//! on both ranks (datagrams sent, of which control ones: acknowledgements;
//! datagrams received). Meant to run under `strace -c -f` or
//! `valgrind --tool=callgrind` with one form at a time:
//!
//! ```text
//! SPLITRT_FABRIC=udp FORM=strided N=200 splitrt-run -n 2 strided_count
//! ```

use splitrt::pgas::{Pgas, Shape};
use splitrt::Result;
use std::time::Instant;

const RUNS: usize = 1000;
const W: usize = 8; // u64 per run: 64 B

fn main() {
    if let Err(e) = run() {
        eprintln!("strided_count: {e}");
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
        .unwrap_or(100);
    let form = std::env::var("FORM").unwrap_or_default();
    let area = pg.alloc_sym::<u64>(RUNS * 2 * W)?;
    let src: Vec<u64> = (0..(RUNS * W) as u64).collect();
    let shape = Shape::new(W, &[RUNS])?;
    let dst = area.ptr(1);
    let forms: Vec<&str> = match form.as_str() {
        "" => vec!["strided", "separate"],
        f => vec![f],
    };
    for f in forms {
        pg.barrier()?;
        let s0 = stats(&pg);
        let t = Instant::now();
        if pg.rank() == 0 {
            for _ in 0..n {
                if f == "strided" {
                    pg.put_strided(dst, &[2 * W], &src, &[W], &shape)?;
                } else {
                    for i in 0..RUNS {
                        pg.put(dst.add(i * 2 * W), &src[i * W..(i + 1) * W])?;
                    }
                }
                pg.sync()?;
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        pg.barrier()?;
        let s1 = stats(&pg);
        let d: Vec<f64> = (0..3).map(|i| (s1[i] - s0[i]) as f64 / n as f64).collect();
        println!(
            "rank {} {f:>8}: {us:9.1} us/op (incl. barrier skew on rank 1); per op: sent {:.2} \
             datagrams ({:.2} control), received {:.2}",
            pg.rank(),
            d[0],
            d[1],
            d[2]
        );
    }
    pg.finish()
}
