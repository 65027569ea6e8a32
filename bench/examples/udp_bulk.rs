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

mod counted;

use splitrt::pgas::Pgas;
use splitrt::Result;

const MIB: usize = 1 << 20;

fn main() {
    counted::main_with("udp_bulk", run);
}

fn run() -> Result<()> {
    let pg = Pgas::attach()?;
    let n = counted::env_n(64);
    let area = pg.alloc_sym::<u8>(MIB)?;
    area.local().fill(1);
    let mut buf = vec![7u8; MIB];
    for f in counted::forms(&["put", "get"]) {
        let (secs, d) = counted::counted(&pg, n, || {
            for _ in 0..n {
                if f == "put" {
                    pg.put(area.ptr(1), &buf)?;
                } else {
                    pg.read_slice(area.ptr(1), &mut buf)?;
                }
            }
            pg.sync()
        })?;
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
