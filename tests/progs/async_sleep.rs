//! A pending get sleeps: rank 1 awaits two gets of rank 0's data (a
//! `Get` and a `GetInto`, joined) under a
//! current-thread tokio runtime while rank 0, for SECONDS, neither polls
//! nor serves anything (a plain `thread::sleep`, so the request waits in
//! its ring). Rank 1 reports the CPU time its whole process used over the
//! await (`getrusage(RUSAGE_SELF)`: every thread, the doorbell bridge's
//! too), the wall time, and whether the data is right.
//!
//! Usage (with `--rma am`, so the get is a request answered by rank 0's
//! handler): t_async_sleep [SECONDS] [die]
//! prints `async get: cpu_ms=C wall_ms=W data=ok|bad`; with `die`, rank 0
//! exits (code 3) instead of answering and rank 1 prints
//! `async get failed: cpu_ms=C wall_ms=W error=...`.

use splitrt::pgas::Pgas;
use std::time::{Duration, Instant};

const N: usize = 4096;

/// CPU time (user + system) of this process, every thread.
fn process_cpu() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for getrusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn value(rank: usize, i: usize) -> u64 {
    (rank as u64) << 32 | (i as u64 * 7 + 3)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_async_sleep: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let die = std::env::args().nth(2).as_deref() == Some("die");
    let pg = Pgas::attach()?;
    let me = pg.rank();
    let a = pg.alloc_sym::<u64>(N)?;
    let mine: Vec<u64> = (0..N).map(|i| value(me, i)).collect();
    pg.write_slice(a.at(me, 0), &mine)?;
    pg.barrier()?;
    match me {
        0 => {
            std::thread::sleep(Duration::from_secs_f64(secs));
            if die {
                std::process::exit(3);
            }
        }
        1 => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            let (c0, t0) = (process_cpu(), Instant::now());
            let mut into = vec![0u64; N];
            let got = rt.block_on(async {
                let g = pg.get(a.at(0, 0), N)?;
                let h = pg.get_into(a.at(0, 0), &mut into)?;
                let (g, h) = tokio::join!(g, h);
                h?;
                g
            });
            let (cpu, wall) = (process_cpu() - c0, t0.elapsed());
            let got = match got {
                Ok(got) => got,
                Err(e) => {
                    println!(
                        "async get failed: cpu_ms={} wall_ms={} error={e}",
                        cpu.as_millis(),
                        wall.as_millis()
                    );
                    return Err(e);
                }
            };
            let ok = [&got, &into]
                .iter()
                .all(|d| d.iter().enumerate().all(|(i, &v)| v == value(0, i)));
            println!(
                "async get: cpu_ms={} wall_ms={} data={}",
                cpu.as_millis(),
                wall.as_millis(),
                if ok { "ok" } else { "bad" }
            );
        }
        _ => {}
    }
    pg.barrier()?;
    pg.finish()
}
