//! A fixed amount of RPC or AM traffic, for counting instructions
//! (`valgrind --tool=callgrind`) and for quick timings: what the bench's
//! `RPC RTT` / `AM Short RTT` and `RPC aggregated rate` / `AM Short flood`
//! rows compare, without the rest of the bench.
//!
//! ```text
//! splitrt-run -n 1 target/release/examples/rpc_count MODE N   # to itself
//! splitrt-run -n 2 target/release/examples/rpc_count MODE N   # rank 0 -> rank 1
//! ```
//!
//! `MODE`: `rpc` (N round trips of `u64 -> u64`, called and waited one at
//! a time), `short` (N AM Short ping-pongs, as the bench's), `medium` (N AM
//! Medium ping-pongs of 8 B), `rate` (N calls of `u64 -> u64`, 4096
//! outstanding, as the bench's aggregated rate), `flood` (N one-way AM
//! Shorts, 256 in flight, acknowledged every 32, as the bench's AM Short
//! flood rate: the reference of `rate`) or `none` (set-up only: the
//! cost to subtract). With one rank every message goes to itself, so a
//! wait never spins for long and the count is the same run after run: the
//! caller's and the target's costs together. Rank 0 prints the time per
//! operation. Each loop is its own function (`#[inline(never)]`), so
//! callgrind's inclusive count of `rpc_count::rpc_loop` (etc.) is the loop's.
use splitrt_am::{Endpoint, EndpointBuilder, Error, Kind, Payload, RequestHandler, Result};
use splitrt_rpc::{Rpc, RpcFn};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<()> {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "rpc".into());
    let n: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let mut b = EndpointBuilder::new();
    let pong = Arc::new(AtomicU64::new(0));
    let p = pong.clone();
    let pong_short = b.reply("count_pong_short", Kind::Short, 1, move |m| {
        p.store(m.arg(0), Ordering::Release)
    })?;
    let p = pong.clone();
    let pong_medium = b.reply("count_pong_medium", Kind::Medium, 1, move |m| {
        p.store(m.arg(0), Ordering::Release)
    })?;
    let ping_short = b.request("count_ping_short", Kind::Short, 1, move |tok, m| {
        let _ = tok.reply(pong_short, &[m.arg(0)], Payload::None);
    })?;
    let ping_medium = b.request("count_ping_medium", Kind::Medium, 1, move |tok, m| {
        let _ = tok.reply(pong_medium, &[m.arg(0)], Payload::Medium(m.payload()));
    })?;
    let rpc = Rpc::new(&mut b)?;
    let inc = rpc.register(&mut b, "count_inc", |_src, x: u64| x.wrapping_add(1))?;
    let acked = Arc::new(AtomicU64::new(0));
    let sink = flood_handlers(&mut b, &acked)?;
    let ep = b.attach()?;
    let dest = (ep.rank() + 1) % ep.size();
    ep.barrier()?;
    if ep.rank() == 0 {
        // warm up every path once (slots, buffers, rings)
        for x in 0..100 {
            check(x, inc.call(&ep, dest, &x)?.wait()?)?;
        }
        let t = Instant::now();
        match mode.as_str() {
            "rpc" => rpc_loop(&ep, &inc, dest, n)?,
            "short" => ping_loop(&ep, &pong, n, |s| {
                ep.request(dest, ping_short, &[s], Payload::None)
            })?,
            "medium" => medium_loop(&ep, &pong, ping_medium, dest, n)?,
            "rate" => rate_loop(&ep, &inc, dest, n)?,
            "flood" => flood_loop(&ep, sink, &acked, dest, n)?,
            "none" => {}
            other => return Err(Error::usage(format!("unknown mode {other}"))),
        }
        let ns = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
        println!("{mode}: {n} in {:.3} us each", ns / 1000.0);
    }
    ep.barrier()?;
    ep.finish()
}

fn check(x: u64, got: u64) -> Result<()> {
    if got != x.wrapping_add(1) {
        return Err(Error::usage(format!("count_inc({x}) returned {got}")));
    }
    Ok(())
}

#[inline(never)]
fn rpc_loop(ep: &Endpoint, inc: &RpcFn<u64, u64>, dest: usize, n: u64) -> Result<()> {
    for x in 0..n {
        check(x, inc.call(ep, dest, &x)?.wait()?)?;
    }
    Ok(())
}

#[inline(never)]
fn ping_loop(
    ep: &Endpoint,
    pong: &AtomicU64,
    n: u64,
    send: impl Fn(u64) -> Result<()>,
) -> Result<()> {
    let base = pong.load(Ordering::Acquire);
    for s in base + 1..=base + n {
        send(s)?;
        ep.wait_until(|| pong.load(Ordering::Acquire) == s)?;
    }
    Ok(())
}

#[inline(never)]
fn medium_loop(
    ep: &Endpoint,
    pong: &AtomicU64,
    h: RequestHandler,
    dest: usize,
    n: u64,
) -> Result<()> {
    let data = [7u8; 8];
    ping_loop(ep, pong, n, |s| {
        ep.request(dest, h, &[s], Payload::Medium(&data))
    })
}

#[inline(never)]
fn rate_loop(ep: &Endpoint, inc: &RpcFn<u64, u64>, dest: usize, n: u64) -> Result<()> {
    const WINDOW: usize = 4096;
    let mut out = VecDeque::with_capacity(WINDOW);
    for x in 0..n {
        if out.len() == WINDOW {
            let (y, f): (u64, splitrt_rpc::RpcFuture<u64>) = out.pop_front().expect("full");
            check(y, f.wait()?)?;
        }
        out.push_back((x, inc.call(ep, dest, &x)?));
    }
    for (y, f) in out {
        check(y, f.wait()?)?;
    }
    Ok(())
}

/// Messages in flight in the flood, and its acknowledgement interval (the
/// bench's `--window` and `ack_every`).
const FLOOD_WINDOW: u64 = 256;
const FLOOD_ACK_EVERY: u64 = 32;

/// The flood's handlers, as the bench's `bench_sink_short` and
/// `bench_ack`: the sink counts, and acknowledges every
/// [`FLOOD_ACK_EVERY`] messages and the last (its word: the stream's
/// length); the acknowledgement publishes the count in `acked`.
fn flood_handlers(b: &mut EndpointBuilder, acked: &Arc<AtomicU64>) -> Result<RequestHandler> {
    let a = acked.clone();
    let ack = b.reply("count_ack", Kind::Short, 1, move |m| {
        a.store(m.arg(0), Ordering::Release)
    })?;
    let sunk = AtomicU64::new(0);
    b.request("count_sink_short", Kind::Short, 1, move |tok, m| {
        let total = m.arg(0);
        let n = sunk.fetch_add(1, Ordering::Relaxed) + 1;
        if n == total {
            sunk.store(0, Ordering::Relaxed);
        }
        if n == total || n.is_multiple_of(FLOOD_ACK_EVERY) {
            let _ = tok.reply(ack, &[n], Payload::None);
        }
    })
}

#[inline(never)]
fn flood_loop(
    ep: &Endpoint,
    sink: RequestHandler,
    acked: &AtomicU64,
    dest: usize,
    n: u64,
) -> Result<()> {
    acked.store(0, Ordering::Relaxed);
    for sent in 0..n {
        if sent - acked.load(Ordering::Acquire) >= FLOOD_WINDOW {
            ep.wait_until(|| sent - acked.load(Ordering::Acquire) < FLOOD_WINDOW)?;
        }
        ep.request(dest, sink, &[n], Payload::None)?;
    }
    ep.wait_until(|| acked.load(Ordering::Acquire) == n)
}
