//! A rank with nothing to do sleeps until a peer gives it work: rank 0
//! waits for one message that rank 1 sends after computing (here:
//! sleeping) for SECONDS, and reports how often its waiting thread woke
//! (voluntary context switches) and the CPU time it used meanwhile.
//!
//! Every rank also prints the spin time it chose (`rank R spin_us=N`): 0
//! when its host's ranks outnumber the CPUs they may run on together.
//!
//! Usage: t_idle [SECONDS]   (prints `idle wait: N wake-ups, C ms CPU, W ms`)

use splitrt::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// This thread's voluntary context switches.
fn wakeups() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// This thread's CPU time.
fn cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_idle: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let got = Arc::new(AtomicBool::new(false));
    let mut b = EndpointBuilder::new();
    let g = got.clone();
    let ping = b.request("ping", Kind::Short, 0, move |_t, _m| {
        g.store(true, Ordering::Release)
    })?;
    let ep = b.attach()?;
    println!(
        "rank {} spin_us={}",
        ep.rank(),
        ep.config().spin.as_micros()
    );
    ep.barrier()?;
    match ep.rank() {
        0 => {
            let (w0, c0, t0) = (wakeups(), cpu(), Instant::now());
            ep.wait_until(|| got.load(Ordering::Acquire))?;
            println!(
                "idle wait: {} wake-ups, {} ms CPU, {} ms",
                wakeups() - w0,
                (cpu() - c0).as_millis(),
                t0.elapsed().as_millis()
            );
        }
        1 => {
            std::thread::sleep(Duration::from_secs_f64(secs));
            ep.request(0, ping, &[], Payload::None)?;
        }
        _ => {}
    }
    ep.finish()
}
