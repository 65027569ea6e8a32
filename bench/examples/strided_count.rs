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

mod counted;

use splitrt::pgas::{Pgas, Shape};
use splitrt::Result;

const RUNS: usize = 1000;
const W: usize = 8; // u64 per run: 64 B

fn main() {
    counted::main_with("strided_count", run);
}

fn run() -> Result<()> {
    let pg = Pgas::attach()?;
    let n = counted::env_n(100);
    let area = pg.alloc_sym::<u64>(RUNS * 2 * W)?;
    let src: Vec<u64> = (0..(RUNS * W) as u64).collect();
    let shape = Shape::new(W, &[RUNS])?;
    let dst = area.ptr(1);
    for f in counted::forms(&["strided", "separate"]) {
        let (secs, d) = counted::counted(&pg, n, || {
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
            Ok(())
        })?;
        let us = secs * 1e6 / n as f64;
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
