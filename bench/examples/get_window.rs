//! Counts behind the fabric get row of `splitrt-bench vys`: rank 1 gets
//! `SIZE`-byte blocks (default 65536) from rank 0 in batches of `K`
//! (default `8 MiB / SIZE`, 4..256, as the bench keeps in flight) for
//! `MS` milliseconds (default 1000; `IDLE_MS` of idling first), and prints its rate and the UDP fabric's
//! congestion counters of both ranks (timeouts, spurious ones undone,
//! retransmissions, fast retransmissions, duplicates dropped, kernel
//! drops, window reductions) per 1000 gets. Across two hosts:
//!
//! ```text
//! splitrt-run --hosts node1:1,node2:1 --rsh RSH get_window
//! ```

use splitrt::pgas::Pgas;
use splitrt::Result;
use std::time::{Duration, Instant};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("get_window: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let pg = Pgas::attach()?;
    let size = env("SIZE", 65536).max(1);
    let k = env("K", ((8 << 20) / size).clamp(4, 256)).max(1);
    let time = Duration::from_millis(env("MS", 1000) as u64);
    // rank 1 idles this long before its first get (rank 0 waits in the
    // barrier meanwhile, as in the vys bench after its memcpy baselines)
    let idle = Duration::from_millis(env("IDLE_MS", 0) as u64);
    let area = pg.alloc_sym::<u8>(32 << 20)?;
    area.local().fill(1);
    let per_area = ((32 << 20) / size).max(1);
    let s0 = pg.endpoint().udp_stats().unwrap_or_default();
    pg.barrier()?;
    let mut gets = 0usize;
    let mut secs = 0.0;
    let mut first = 0.0;
    if pg.rank() == 1 {
        std::thread::sleep(idle);
        let mut bufs: Vec<Vec<u8>> = (0..k).map(|_| vec![0u8; size]).collect();
        let t = Instant::now();
        while t.elapsed() < time {
            pg.scope(|s| {
                for b in bufs.iter_mut() {
                    s.get(area.ptr(0).add((gets % per_area) * size), b)?;
                    gets += 1;
                }
                Ok(())
            })?;
            if first == 0.0 {
                first = t.elapsed().as_secs_f64();
            }
        }
        secs = t.elapsed().as_secs_f64();
    }
    pg.barrier()?;
    let s = pg.endpoint().udp_stats().unwrap_or_default();
    let mut n = [gets as u64];
    pg.broadcast(1, &mut n)?;
    let gets = (n[0] as usize).max(1);
    let per = |a: u64, b: u64| (a - b) as f64 * 1000.0 / gets as f64;
    if pg.rank() == 1 {
        println!(
            "get {size} B x {k}: {:.3} GB/s ({gets} gets in {secs:.2} s; first batch {:.1} ms)",
            (gets * size) as f64 / secs / 1e9,
            first * 1e3
        );
    }
    println!(
        "rank {} per 1000 gets: sent {:.0} received {:.0} timeouts {:.2} spurious {:.2} \
         retransmits {:.1} fast {:.2} duplicates {:.1} kernel_drops {:.1} cwnd_reductions {:.2} \
         paced {:.0}",
        pg.rank(),
        per(s.sent, s0.sent),
        per(s.received, s0.received),
        per(s.timeouts, s0.timeouts),
        per(s.spurious_timeouts, s0.spurious_timeouts),
        per(s.retransmits, s0.retransmits),
        per(s.fast_retransmits, s0.fast_retransmits),
        per(s.duplicates, s0.duplicates),
        per(s.kernel_drops, s0.kernel_drops),
        per(s.cwnd_reductions, s0.cwnd_reductions),
        per(s.paced, s0.paced),
    );
    pg.finish()
}
