//! A pending get sleeps: rank 1 awaits two gets of rank 0's data (a
//! `Get` and a `GetInto`, joined) under a
//! current-thread tokio runtime while rank 0, for SECONDS, neither polls
//! nor serves anything (a plain `thread::sleep`, so the request waits in
//! its ring). Rank 1 reports the CPU time its whole process used over the
//! await (`getrusage(RUSAGE_SELF)`: every thread, the doorbell bridge's
//! too), the wall time, and whether the data is right.
//!
//! Usage (with `--rma am`, so the get is a request answered by rank 0's
//! handler): t_async_sleep [SECONDS] [die|cancel|slot]
//! prints `async get: cpu_ms=C wall_ms=W polls=P data=ok|bad` (P: how
//! often the executor polled the joined future); with `die`, rank 0
//! exits (code 3) instead of answering and rank 1 prints
//! `async get failed: cpu_ms=C wall_ms=W error=...`.
//!
//! With `cancel`, rank 1 gives up on a `Get` and a `GetInto` after 200 ms
//! (`tokio::time::timeout`), drops them, and prints `cancel: drop_ms=D
//! waiters=N sync=ok|ERR data=ok|bad untouched=ok|bad`: how long the two
//! drops took, how many wakers the doorbell bridge still holds after
//! them, whether a `sync` (which waits for the cancelled gets' late
//! replies) and a new get then work, and whether the dropped `GetInto`
//! left its buffer alone.
//!
//! With `slot`, rank 1 polls a `Get` once by hand (pending: rank 0
//! sleeps) and a second thread, `poller`, polls the endpoint until the
//! get's waker is woken on it (by the reply handler, through the get's
//! slot, not by the bridge thread); it prints `slot: woken_by=NAMES
//! data=ok|bad waiters=N` (the threads that woke the waker, in order).

use splitrt::pgas::Pgas;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
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
    let mode = std::env::args().nth(2).unwrap_or_default();
    let die = mode == "die";
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
        1 if mode == "cancel" => cancel(&pg, a.at(0, 0))?,
        1 if mode == "slot" => slot(&pg, a.at(0, 0))?,
        1 => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            let (c0, t0) = (process_cpu(), Instant::now());
            let mut into = vec![0u64; N];
            let mut polls = 0u64;
            let got = rt.block_on(async {
                let g = pg.get(a.at(0, 0), N)?;
                let h = pg.get_into(a.at(0, 0), &mut into)?;
                let mut both = std::pin::pin!(async { tokio::join!(g, h) });
                // count the executor's polls: a future that wakes itself
                // is polled thousands of times a second, whatever the load
                let (g, h) = std::future::poll_fn(|cx| {
                    polls += 1;
                    both.as_mut().poll(cx)
                })
                .await;
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
                "async get: cpu_ms={} wall_ms={} polls={polls} data={}",
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

fn ok(b: bool) -> &'static str {
    if b {
        "ok"
    } else {
        "bad"
    }
}

/// Rank 1 of `cancel` (see the module docs).
fn cancel(pg: &Pgas, src: splitrt::pgas::GlobalPtr<u64>) -> splitrt::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut into = vec![7u64; N];
    let drop_time = rt.block_on(async {
        let mut g = pg.get(src, N)?;
        let mut h = pg.get_into(src, &mut into)?;
        let limit = Duration::from_millis(200);
        let r = tokio::time::timeout(limit, async { tokio::join!(&mut g, &mut h) }).await;
        assert!(
            r.is_err(),
            "rank 0 sleeps: the gets cannot complete in 200 ms"
        );
        let t = Instant::now();
        drop(g);
        drop(h);
        Ok::<_, splitrt::Error>(t.elapsed())
    })?;
    let waiters = pg.endpoint().traffic_waiters();
    let untouched = into.iter().all(|&v| v == 7);
    let sync = pg.sync();
    let data = pg.get(src, N)?.wait()?;
    let good = data.iter().enumerate().all(|(i, &v)| v == value(0, i));
    println!(
        "cancel: drop_ms={} waiters={waiters} sync={} data={} untouched={}",
        drop_time.as_millis(),
        match &sync {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{e:?}").replace(' ', "_"),
        },
        ok(good),
        ok(untouched)
    );
    sync
}

/// Records the names of the threads that woke it.
struct Rec(Mutex<Vec<String>>);
impl Wake for Rec {
    fn wake(self: Arc<Self>) {
        let me = std::thread::current();
        self.0
            .lock()
            .unwrap()
            .push(me.name().unwrap_or("unnamed").to_string());
    }
}

/// Rank 1 of `slot` (see the module docs).
fn slot(pg: &Pgas, src: splitrt::pgas::GlobalPtr<u64>) -> splitrt::Result<()> {
    let rec = Arc::new(Rec(Mutex::new(Vec::new())));
    let waker = Waker::from(rec.clone());
    let mut cx = Context::from_waker(&waker);
    let mut g = pg.get(src, N)?;
    assert!(
        std::pin::Pin::new(&mut g).poll(&mut cx).is_pending(),
        "rank 0 sleeps: the get is pending"
    );
    let woken_on_poller = || rec.0.lock().unwrap().iter().any(|n| n == "poller");
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("poller".into())
            .spawn_scoped(s, || {
                let t = Instant::now();
                while !woken_on_poller() && t.elapsed() < Duration::from_secs(20) {
                    let _ = pg.endpoint().poll();
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
            .expect("a thread");
    });
    let got = match std::pin::Pin::new(&mut g).poll(&mut cx) {
        Poll::Ready(r) => r?,
        Poll::Pending => Vec::new(),
    };
    let good = got.len() == N && got.iter().enumerate().all(|(i, &v)| v == value(0, i));
    let names = rec.0.lock().unwrap().join(",");
    println!(
        "slot: woken_by={names} data={} waiters={}",
        ok(good),
        pg.endpoint().traffic_waiters()
    );
    Ok(())
}
