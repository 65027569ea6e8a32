//! Typed RPC (splitrt::rpc) as a multi-process job, for `tests/rpc.rs`.
//!
//! Usage: t_rpc MODE
//!   basic     every rank calls every rank (itself too): round trips by
//!             `wait` and by `.await`, 4000 outstanding calls, aggregation
//!             (counted), results larger than a batch's reply (held and
//!             fetched), a result and arguments too large (clear errors)
//!   bad       arguments that do not decode at the target (raw bytes
//!             past the types) and a function that panics: errors at the
//!             caller naming rank, function and cause; the target lives on
//!   dead      rank 1 exits after the start; rank 0's calls to it fail
//!             with the endpoint's error (no hang)
//!   missing   rank 0 registers a function the others lack: the attach
//!             fails on every rank, naming the differing handler entry
//!   idle      (2 ranks) rank 1 does not poll for 2 s; rank 0 awaits a
//!             call to it and prints `rpc idle: cpu_ms=C wall_ms=W polls=P`
//!             (process CPU time while the future was pending)
//!
//! Prints `rpc ok` per rank when every check passed (`bad`: also the
//! errors; `dead`: `rpc dead peer: <error>` on rank 0).

use splitrt::rpc::Rpc;
use splitrt::EndpointBuilder;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Runs a future on this thread, parking while it is pending (its waker
/// unparks): shows that the futures wake their task.
fn block_on<F: Future>(f: F) -> F::Output {
    block_on_counting(f).0
}

/// [`block_on`], also counting the polls.
fn block_on_counting<F: Future>(f: F) -> (F::Output, u64) {
    struct Unpark(std::thread::Thread, AtomicU64);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.unpark();
        }
    }
    let w = Arc::new(Unpark(std::thread::current(), AtomicU64::new(0)));
    let waker = Waker::from(w.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return (v, polls);
        }
        std::thread::park_timeout(std::time::Duration::from_secs(1));
    }
}

#[allow(dead_code)]
fn main() -> splitrt::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let me = splitrt::runtime::job::JobInfo::from_env().map_or(0, |j| j.rank);
    run_on(&mode, me, |b| b.attach())
}

/// The body, attached by `attach` (the verbs-model test attaches over its
/// test double; `me` is this rank, known before the attach).
pub fn run_on(
    mode: &str,
    me: usize,
    attach: impl FnOnce(EndpointBuilder) -> splitrt::Result<splitrt::Endpoint>,
) -> splitrt::Result<()> {
    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b)?;
    let add = rpc.register(&mut b, "add", |src, (x, y): (u64, u64)| {
        x + y + 1000 * src as u64
    })?;
    if mode == "missing" && me == 0 {
        rpc.register(&mut b, "only_on_rank_0", |_src, x: u64| x)?;
    }
    let echo = rpc.register(&mut b, "echo", |_src, v: Vec<u32>| v)?;
    let blob = rpc.register(&mut b, "blob", |_src, n: u32| vec![7u8; n as usize])?;
    let boom = rpc.register(&mut b, "boom", |_src, why: String| -> u64 {
        panic!("boom on purpose: {why}")
    })?;
    let ep = attach(b)?;
    let n = ep.size();
    match mode {
        "basic" => {
            let max = ep.max_medium(0)?;
            for r in 0..n {
                // one call, waited
                assert_eq!(add.call(&ep, r, &(2, 3))?.wait()?, 5 + 1000 * me as u64);
                // one call, awaited
                let v: Vec<u32> = (0..100).map(|i| i * r as u32).collect();
                assert_eq!(block_on(echo.call(&ep, r, &v)?)?, v);
                // an empty result type round trip
                assert!(block_on(echo.call(&ep, r, &vec![])?)?.is_empty());
            }
            // many outstanding calls to every rank, aggregated
            let before = rpc.stats();
            let calls = 4000u64;
            let futs = (0..calls)
                .map(|i| add.call(&ep, (i as usize) % n, &(i, 1)))
                .collect::<splitrt::Result<Vec<_>>>()?;
            rpc.flush(&ep)?;
            let mut sum = 0;
            for (i, f) in futs.into_iter().enumerate() {
                let got = if i % 2 == 0 { f.wait()? } else { block_on(f)? };
                assert_eq!(got, i as u64 + 1 + 1000 * me as u64);
                sum += got;
            }
            let after = rpc.stats();
            let (c, m) = (after.calls - before.calls, after.messages - before.messages);
            assert_eq!(c, calls);
            assert!(m * 20 <= c, "{c} calls in {m} messages: not aggregated");
            println!("rank {me}: {c} calls in {m} messages, sum {sum}");
            // results that together overflow a batch's one reply: held at
            // the target, fetched by the futures
            for r in 0..n {
                let each = (max / 3) as u32;
                let futs = (0..8)
                    .map(|_| blob.call(&ep, r, &each))
                    .collect::<splitrt::Result<Vec<_>>>()?;
                for f in futs {
                    let v = f.wait()?;
                    assert_eq!(v.len(), each as usize);
                    assert!(v.iter().all(|&b| b == 7));
                }
            }
            // a result too large for one Medium: a clear error
            let e = blob
                .call(&ep, n - 1, &(max as u32 * 2))?
                .wait()
                .unwrap_err();
            let s = e.to_string();
            assert!(
                s.contains("rpc 'blob'") && s.contains("not chunked") && s.contains("Medium"),
                "{s}"
            );
            // arguments too large: refused at the call
            let e = echo.call(&ep, 0, &vec![1u32; max]).err().expect("refused");
            assert!(e.to_string().contains("not chunked"), "{e}");
            ep.barrier()?;
        }
        "bad" => {
            let peer = (me + 1) % n;
            // raw bytes that are no (u64, u64): a varint that never ends
            let e = add.call_raw(&ep, peer, &[0xff; 12])?.wait().unwrap_err();
            println!("rank {me}: bad arguments: {e}");
            let s = e.to_string();
            assert!(
                s.contains("rpc 'add'")
                    && s.contains(&format!("on rank {peer}"))
                    && s.contains("did not decode"),
                "{s}"
            );
            // a (u64, u64) followed by junk: left-over bytes are refused too
            let e = add.call_raw(&ep, peer, &[1, 2, 3, 4])?.wait().unwrap_err();
            assert!(e.to_string().contains("left over"), "{e}");
            // bad arguments inside a batch: only that call fails
            let good1 = add.call(&ep, peer, &(1, 1))?;
            let bad = add.call_raw(&ep, peer, &[0xff; 3])?;
            let good2 = add.call(&ep, peer, &(2, 2))?;
            assert!(bad.wait().is_err());
            assert_eq!(good1.wait()?, 2 + 1000 * me as u64);
            assert_eq!(good2.wait()?, 4 + 1000 * me as u64);
            // a panicking function: error at the caller, the target lives
            let e = boom.call(&ep, peer, &"x".to_string())?.wait().unwrap_err();
            println!("rank {me}: panicking function: {e}");
            assert!(
                e.to_string().contains("panicked") && e.to_string().contains("boom on purpose"),
                "{e}"
            );
            assert_eq!(add.call(&ep, peer, &(5, 5))?.wait()?, 10 + 1000 * me as u64);
            ep.barrier()?;
        }
        "idle" => {
            ep.barrier()?;
            if me == 1 {
                // not polling: the call waits here until the barrier below
                std::thread::sleep(std::time::Duration::from_secs(2));
            } else {
                let f = add.call(&ep, 1, &(1, 2))?;
                let (c0, t0) = (process_cpu(), std::time::Instant::now());
                let (v, polls) = block_on_counting(f);
                let (cpu, wall) = (process_cpu() - c0, t0.elapsed());
                assert_eq!(v?, 3);
                println!(
                    "rpc idle: cpu_ms={} wall_ms={} polls={polls}",
                    cpu.as_millis(),
                    wall.as_millis()
                );
            }
            ep.barrier()?;
        }
        "dead" => {
            ep.barrier()?;
            if me == 1 {
                std::process::exit(3);
            }
            if me == 0 {
                // calls to the dead rank, by wait and by await: both fail
                let r1 = add.call(&ep, 1, &(1, 1)).and_then(|f| f.wait());
                let r2 = add.call(&ep, 1, &(1, 1)).and_then(block_on);
                let e = r1.expect_err("a call to a dead rank fails");
                assert!(r2.is_err());
                println!("rpc dead peer: {e}");
            }
            // the others wait for the job to end
            let _ = ep.barrier();
            return Ok(());
        }
        other => panic!("unknown mode {other:?}"),
    }
    println!("rpc ok");
    ep.finish()
}

/// CPU time (user + system) of this process, every thread.
fn process_cpu() -> std::time::Duration {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for getrusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
