//! One rank of GASNet-EX's `testam`, measured the way `testam` measures
//! it (GASNet-EX 2025.8 `tests/testam.c`): rank 0 is the sender, rank 1
//! the receiver; payloads are never touched; every handler only counts
//! (pong) or answers with the same payload (ping); sizes 0, 1, 2, 4, ...
//! up to the maximum (the last one exactly the maximum); `iters`
//! iterations per row, timed by the sender around the whole loop. Each
//! row's description is the one `testam` prints, so rows pair up.
//!
//! * ping-pong roundtrip ReqRep: request to ping, which replies to pong;
//!   wait for each reply before the next request.
//! * ping-pong roundtrip ReqReq: request to pong on the peer, whose main
//!   loop answers with a request to pong here.
//! * flood one-way Req: `iters` requests to pong back to back, then a
//!   barrier (inside the timing, as in `testam`).
//! * flood roundtrip ReqRep: `iters` requests to ping back to back, then
//!   wait for every reply.
//! * flood two-way Req (Medium, Long): both ranks flood each other.
//!
//! Before each kind's rows, testam's warm-up (skipped only by its `-s`):
//! one ping of the kind's largest size, then an untimed flood of
//! `min(iters, 10000)` of them.
//!
//! The barrier between rows is two Active Messages (as cheap as
//! `testam`'s shared-memory barrier; the bootstrap barrier would dominate
//! a 1000-message flood). The raw cache-line round trip is measured first
//! in the same job (see `am::pingpong`).

use crate::am::pingpong::Line;
use crate::am::plan::RAW_BATCH;
use crate::harness::stats::p50_p99;
use crate::harness::worker;
use splitrt::{Endpoint, EndpointBuilder, Kind, Payload, RequestHandler, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Environment: iterations per row (default 1000, `testam`'s).
pub const ENV_ITERS: &str = "SPLITRT_BENCH_TESTAM_ITERS";
/// Environment: largest payload (default 2 MiB, `testam`'s; cut to the
/// Medium and Long maxima).
pub const ENV_MAXSZ: &str = "SPLITRT_BENCH_TESTAM_MAXSZ";

/// Environment: largest Medium (default: `ENV_MAXSZ`; the driver passes
/// GASNet-EX's own maximum so the rows pair up).
pub const ENV_MAX_MEDIUM: &str = "SPLITRT_BENCH_TESTAM_MAX_MEDIUM";
/// Environment: largest Long (as `ENV_MAX_MEDIUM`).
pub const ENV_MAX_LONG: &str = "SPLITRT_BENCH_TESTAM_MAX_LONG";

/// Where Long payloads land in the peer's segment (past the raw line).
const LONG_OFF: u64 = 1 << 20;
/// The page size the payload source is aligned to.
const PAGE: usize = 4096;

#[derive(Default)]
struct Counters {
    flag: AtomicU64,
    arrived: AtomicU64,
}

/// The handlers: ping (answers) and pong (counts) per kind, request and
/// reply variants, and the barrier's arrival.
#[derive(Clone, Copy)]
struct H {
    ping: [RequestHandler; 3],
    pong: [RequestHandler; 3],
    arrive: RequestHandler,
}

const KINDS: [Kind; 3] = [Kind::Short, Kind::Medium, Kind::Long];

fn register(b: &mut EndpointBuilder, c: &Arc<Counters>) -> Result<H> {
    let mut reps = Vec::new();
    for k in KINDS {
        let c = c.clone();
        reps.push(b.reply(&format!("pong_rep_{k:?}"), k, 0, move |_m| {
            c.flag.fetch_add(1, Ordering::Release);
        })?);
    }
    let mut ping = Vec::new();
    let mut pong = Vec::new();
    for (i, k) in KINDS.into_iter().enumerate() {
        let rep = reps[i];
        ping.push(b.request(&format!("ping_{k:?}"), k, 0, move |tok, m| {
            let p = match k {
                Kind::Short => Payload::None,
                Kind::Medium => Payload::Medium(m.payload()),
                Kind::Long => {
                    let view = m.long_payload().expect("a Long");
                    // SAFETY: the pinger waits for this reply before it
                    // sends again and nothing else writes the landing
                    // bytes, so they do not change while the reply copies
                    // them out.
                    let data = unsafe { view.as_slice() };
                    Payload::Long {
                        data,
                        offset: LONG_OFF,
                    }
                }
            };
            let _ = tok.reply(rep, &[], p);
        })?);
        let c = c.clone();
        pong.push(b.request(&format!("pong_req_{k:?}"), k, 0, move |_t, _m| {
            c.flag.fetch_add(1, Ordering::Release);
        })?);
    }
    let c = c.clone();
    let arrive = b.request("arrive", Kind::Short, 0, move |_t, _m| {
        c.arrived.fetch_add(1, Ordering::Release);
    })?;
    Ok(H {
        ping: [ping[0], ping[1], ping[2]],
        pong: [pong[0], pong[1], pong[2]],
        arrive,
    })
}

struct Rank<'a> {
    ep: &'a Endpoint,
    c: &'a Counters,
    h: H,
    peer: usize,
    sender: bool,
    epoch: u64,
    iters: u64,
    /// The payload source: `len` bytes from `start` of `buf`, page
    /// aligned as testam's (`myseg`, a page-aligned segment base).
    buf: Vec<u8>,
    start: usize,
    out: String,
}

impl Rank<'_> {
    fn barrier(&mut self) -> Result<()> {
        self.epoch += 1;
        self.ep
            .request(self.peer, self.h.arrive, &[], Payload::None)?;
        let e = self.epoch;
        self.ep
            .wait_until(|| self.c.arrived.load(Ordering::Acquire) >= e)
    }

    /// testam's warm-up before each kind's rows: one ping of the kind's
    /// largest size, then a flood of `min(iters, 10000)` of them, untimed.
    fn warm_up(&mut self, k: usize, sz: usize) -> Result<()> {
        self.barrier()?;
        if self.sender {
            let base = self.flag();
            self.send(self.h.ping[k], k, sz)?;
            self.wait_flag(base + 1)?;
            let n = self.iters.min(10_000);
            for _ in 0..n {
                self.send(self.h.ping[k], k, sz)?;
            }
            self.wait_flag(base + 1 + n)?;
        }
        Ok(())
    }

    fn flag(&self) -> u64 {
        self.c.flag.load(Ordering::Acquire)
    }

    fn wait_flag(&self, n: u64) -> Result<()> {
        self.ep
            .wait_until(|| self.c.flag.load(Ordering::Acquire) >= n)
    }

    fn send(&self, h: RequestHandler, k: usize, sz: usize) -> Result<()> {
        let data = &self.buf[self.start..self.start + sz];
        let p = match KINDS[k] {
            Kind::Short => Payload::None,
            Kind::Medium => Payload::Medium(data),
            Kind::Long => Payload::Long {
                data,
                offset: LONG_OFF,
            },
        };
        self.ep.request(self.peer, h, &[], p)
    }

    fn report(&mut self, desc: &str, t: Instant, sz: usize, rt: bool) {
        if !self.sender {
            return;
        }
        let secs = t.elapsed().as_secs_f64();
        let us = secs * 1e6 / self.iters as f64;
        let mbs = if sz > 0 {
            (sz as f64 * if rt { 2.0 } else { 1.0 } * self.iters as f64 / (1024.0 * 1024.0)) / secs
        } else {
            0.0
        };
        let _ = writeln!(self.out, "{desc}\t{us:.3}\t{mbs:.3}");
    }

    /// ping-pong ReqRep, ping-pong ReqReq, flood one-way, flood roundtrip
    /// (and for Medium / Long, flood two-way) at size `sz` of kind `k`.
    fn rows(&mut self, k: usize, sz: usize, label: &str) -> Result<()> {
        let n = self.iters;
        // ping-pong roundtrip ReqRep
        self.barrier()?;
        if self.sender {
            let base = self.flag();
            let t = Instant::now();
            for i in 0..n {
                self.send(self.h.ping[k], k, sz)?;
                self.wait_flag(base + i + 1)?;
            }
            self.report(&format!("{label} ping-pong roundtrip ReqRep"), t, sz, true);
        }
        // ping-pong roundtrip ReqReq (counts read before the barrier: the
        // peer may send as soon as it leaves it)
        let base = self.flag();
        self.barrier()?;
        let t = Instant::now();
        for i in 0..n {
            if self.sender {
                self.send(self.h.pong[k], k, sz)?;
                self.wait_flag(base + i + 1)?;
            } else {
                self.wait_flag(base + i + 1)?;
                self.send(self.h.pong[k], k, sz)?;
            }
        }
        self.report(&format!("{label} ping-pong roundtrip ReqReq"), t, sz, true);
        // flood one-way Req
        let base = self.flag();
        self.barrier()?;
        let t = Instant::now();
        if self.sender {
            for _ in 0..n {
                self.send(self.h.pong[k], k, sz)?;
            }
            self.barrier()?;
            self.report(&format!("{label} flood     one-way   Req"), t, sz, false);
        } else {
            self.wait_flag(base + n)?;
            self.barrier()?;
        }
        // flood roundtrip ReqRep
        self.barrier()?;
        // the timeline (feature `shm-timeline`): AM Short of size 0
        let stamp = cfg!(feature = "shm-timeline") && k == 0 && sz == 0;
        timeline_arm(stamp);
        if self.sender {
            let base = self.flag();
            let t = Instant::now();
            for _ in 0..n {
                self.send(self.h.ping[k], k, sz)?;
            }
            self.wait_flag(base + n)?;
            timeline_disarm(stamp);
            self.report(&format!("{label} flood     roundtrip ReqRep"), t, sz, true);
        }
        if KINDS[k] != Kind::Short {
            // flood two-way Req
            let base = self.flag();
            self.barrier()?;
            let t = Instant::now();
            for _ in 0..n {
                self.send(self.h.pong[k], k, sz)?;
            }
            self.wait_flag(base + n)?;
            self.report(&format!("{label} flood     two-way   Req"), t, sz, false);
        }
        let r = self.barrier();
        if !self.sender {
            timeline_disarm(stamp);
        }
        r
    }
}

/// Start the shared-memory timeline if `on` (feature `shm-timeline`).
fn timeline_arm(on: bool) {
    #[cfg(feature = "shm-timeline")]
    if on {
        splitrt::runtime::fabric::shm::timeline::arm(0);
    }
    let _ = on;
}

/// Stop the shared-memory timeline if `on`.
fn timeline_disarm(on: bool) {
    #[cfg(feature = "shm-timeline")]
    if on {
        splitrt::runtime::fabric::shm::timeline::disarm(0);
    }
    let _ = on;
}

/// Write the timeline to `$SPLITRT_SHM_TIMELINE.<rank>` if that is set.
fn timeline_dump(rank: usize) {
    #[cfg(feature = "shm-timeline")]
    if let Ok(p) = std::env::var("SPLITRT_SHM_TIMELINE") {
        let path = format!("{p}.{rank}");
        if let Err(e) = splitrt::runtime::fabric::shm::timeline::dump(Path::new(&path)) {
            eprintln!("timeline: {path}: {e}");
        }
    }
    let _ = rank;
}

/// Sizes 0, 1, 2, 4, ... below `max`, then `max` (`testam`'s ADVANCESZ).
fn sizes(max: usize) -> Vec<usize> {
    let mut v = vec![0];
    let mut sz = 1;
    while sz < max {
        v.push(sz);
        sz *= 2;
    }
    if max > 0 {
        v.push(max);
    }
    v
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run this rank; rank 0 writes `desc \t us \t MB/s` rows to `result`.
pub fn run(result: &Path) -> Result<()> {
    worker::pin();
    let iters = env_num(ENV_ITERS, 1000).max(1) as u64;
    let maxsz = env_num(ENV_MAXSZ, 2 << 20);
    let c = Arc::new(Counters::default());
    let mut b = EndpointBuilder::new();
    let h = register(&mut b, &c)?;
    let ep = b.attach()?;
    worker::two_ranks(ep.size())?;
    let me = ep.rank();
    let peer = 1 - me;
    let max_med = ep.max_medium(peer)?.min(env_num(ENV_MAX_MEDIUM, maxsz));
    let max_long = ep
        .max_long(peer)?
        .saturating_sub(LONG_OFF as usize)
        .min(env_num(ENV_MAX_LONG, maxsz));
    let mut r = Rank {
        ep: &ep,
        c: &c,
        h,
        peer,
        sender: me == 0,
        epoch: 0,
        iters,
        buf: vec![0u8; max_med.max(max_long) + PAGE],
        start: 0,
        out: String::new(),
    };
    // Page-aligned source, as testam's: a heap block starts 16 B into its
    // page, and a copy whose loads run 16 B ahead of its stores modulo
    // 4 KiB waits on them (a 64 KiB Long flood 2.4 us from there, 2.0-2.2
    // from a page boundary; same job, alternated runs).
    r.start = (PAGE - r.buf.as_ptr() as usize % PAGE) % PAGE;
    // the floor, in the same job and moment
    let line = Line::of(&ep)?;
    ep.barrier()?;
    let batches = 20;
    if me == 0 {
        let means = line.side_a(0, 10_000, batches);
        let (p50, _) = p50_p99(&means);
        let _ = writeln!(
            r.out,
            "raw cache-line ping-pong roundtrip\t{:.3}\t0",
            p50 / 1e3
        );
    } else {
        line.side_b(0, 10_000 + (batches * RAW_BATCH) as u64);
    }
    r.warm_up(0, 0)?;
    r.rows(0, 0, "        AMShort    ")?;
    for (k, max, name) in [(1, max_med, "AMMedium   "), (2, max_long, "AMLong     ")] {
        r.warm_up(k, max)?;
        for sz in sizes(max) {
            r.rows(k, sz, &format!("{sz:7} {name}"))?;
        }
    }
    if me == 0 {
        let _ = writeln!(r.out, "max Medium\t{max_med}\t0\nmax Long\t{max_long}\t0");
        worker::write_result(result, 0, &r.out)?;
    }
    timeline_dump(me);
    ep.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_double_and_end_at_the_maximum() {
        assert_eq!(super::sizes(8), vec![0, 1, 2, 4, 8]);
        assert_eq!(super::sizes(65000).last(), Some(&65000));
        assert_eq!(super::sizes(65000)[16], 32768);
        assert_eq!(super::sizes(0), vec![0]);
    }
}
