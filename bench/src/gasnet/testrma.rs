//! One rank of GASNet-EX's `testsmall` and `testlarge` (put / get),
//! measured their way (GASNet-EX 2025.8 `tests/testsmall.c`,
//! `testlarge.c`), with their default iterations and sizes: rank 0 puts
//! into and gets from rank 1's segment, with one local buffer and one
//! remote buffer reused by every iteration (cache resident), sizes
//! doubling; rank 1 only waits. Each row's key is `TEST: SIZE byte NAME`
//! with the test's own row name, so rows pair with theirs (the two tests
//! print throughput rows of the same names and sizes, kept apart by TEST).
//!
//! * testsmall (1 B .. 2 KiB, 1000 iterations) latency rows, one
//!   operation completed before the next: `PutBlocking` = `write_slice`,
//!   `GetBlocking` = `read_slice`, `PutNB+NOW` = `put` then `sync`, `GetNB`
//!   = `get_into` (the caller's buffer, as GASNet-EX's `gex_RMA_GetNB`) then
//!   `wait` on its handle, `PutNBI+NOW` / `GetNBI` = one put / get in a
//!   `scope` (which waits at its end); and its throughput rows, as below.
//! * throughput rows (testsmall's, and testlarge's from 16 B to 2 MiB,
//!   1000 iterations): `PutBlocking` / `GetBlocking` as above; `PutNBI+NOW`
//!   (testsmall) / `PutNBI+DEFER` (testlarge) and `GetNBI` = `iters` puts /
//!   gets in one `scope`; `PutNB+NOW` / `PutNB+DEFER` = `iters` puts then
//!   one `sync`, `GetNB` = `iters` `get_into` handles (all into the one
//!   buffer) then waiting for each; testlarge's `PutNBI+GROUP` and
//!   `PutNB+event` repeat its two non-blocking put rows. (A put here has
//!   copied its source when it returns, so NOW, DEFER, GROUP and event are
//!   the same call.) Reported as
//!   microseconds per operation, like the latency rows (lower is better).

use crate::job::{pin_this_rank, this_rank};
use splitrt::pgas::{GlobalPtr, Pgas};
use splitrt::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Environment: testsmall's iterations and largest size.
pub const ENV_SMALL: &str = "SPLITRT_BENCH_TESTSMALL";
/// Environment: testlarge's iterations and largest size.
pub const ENV_LARGE: &str = "SPLITRT_BENCH_TESTLARGE";

/// testlarge's smallest size (its default `min_payload`).
pub const LARGE_MIN: usize = 16;

/// testsmall's default iterations and largest size.
pub const SMALL_DEFAULT: (usize, usize) = (1000, 2048);

/// testlarge's default iterations and largest size.
pub const LARGE_DEFAULT: (usize, usize) = (1000, 2 << 20);

/// The throughput rows' names: testsmall's, testlarge's (they differ in
/// the local-completion mode of the non-blocking puts).
const SMALL_NAMES: [&str; 6] = [
    "PutBlocking throughput",
    "GetBlocking throughput",
    "PutNBI+NOW throughput",
    "GetNBI throughput",
    "PutNB+NOW throughput",
    "GetNB throughput",
];
const LARGE_NAMES: [&str; 6] = [
    "PutBlocking throughput",
    "GetBlocking throughput",
    "PutNBI+DEFER throughput",
    "GetNBI throughput",
    "PutNB+DEFER throughput",
    "GetNB throughput",
];

/// `ITERS,MAXSZ` from `name`, else the defaults.
fn iters_max(name: &str, default: (usize, usize)) -> (usize, usize) {
    std::env::var(name)
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once(',')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or(default)
}

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

struct Bench<'a> {
    pg: &'a Pgas,
    remote: GlobalPtr<u8>,
    local: &'a mut [u8],
    out: String,
}

impl Bench<'_> {
    fn row(&mut self, test: &str, size: usize, name: &str, t: Instant, ops: usize) {
        let us = t.elapsed().as_secs_f64() * 1e6 / ops as f64;
        let _ = writeln!(self.out, "{test}: {size} byte {name}\t{us:.4}\t0");
    }

    fn small(&mut self, iters: usize, max: usize) -> Result<()> {
        let pg = self.pg;
        for sz in sizes(1, max) {
            let r = self.remote;
            let t = Instant::now();
            for _ in 0..iters {
                pg.write_slice(r, &self.local[..sz])?;
            }
            self.row("testsmall", sz, "PutBlocking latency", t, iters);
            let t = Instant::now();
            for _ in 0..iters {
                pg.read_slice(r, &mut self.local[..sz])?;
            }
            self.row("testsmall", sz, "GetBlocking latency", t, iters);
            let t = Instant::now();
            for _ in 0..iters {
                pg.scope(|s| s.put(r, &self.local[..sz]))?;
            }
            self.row("testsmall", sz, "PutNBI+NOW latency", t, iters);
            let t = Instant::now();
            for _ in 0..iters {
                let dst = &mut self.local[..sz];
                pg.scope(|s| s.get(r, dst))?;
            }
            self.row("testsmall", sz, "GetNBI latency", t, iters);
            let t = Instant::now();
            for _ in 0..iters {
                pg.put(r, &self.local[..sz])?;
                pg.sync()?;
            }
            self.row("testsmall", sz, "PutNB+NOW latency", t, iters);
            let t = Instant::now();
            for _ in 0..iters {
                pg.get_into(r, &mut self.local[..sz])?.wait()?;
            }
            self.row("testsmall", sz, "GetNB latency", t, iters);
            self.throughput("testsmall", &SMALL_NAMES, sz, iters)?;
        }
        Ok(())
    }

    fn large(&mut self, iters: usize, max: usize) -> Result<()> {
        for sz in sizes(LARGE_MIN, max) {
            self.throughput("testlarge", &LARGE_NAMES, sz, iters)?;
            // testlarge's second pass, local completion tracked by a group
            // or an event: for a put that has copied its source when it
            // returns, the same calls
            self.nbi_puts("testlarge", "PutNBI+GROUP throughput", sz, iters)?;
            self.nb_puts("testlarge", "PutNB+event throughput", sz, iters)?;
        }
        Ok(())
    }

    /// `iters` puts in one `scope`, as row `name`.
    fn nbi_puts(&mut self, test: &str, name: &str, sz: usize, iters: usize) -> Result<()> {
        let (pg, r) = (self.pg, self.remote);
        let t = Instant::now();
        pg.scope(|s| {
            for _ in 0..iters {
                s.put(r, &self.local[..sz])?;
            }
            Ok(())
        })?;
        self.row(test, sz, name, t, iters);
        Ok(())
    }

    /// `iters` puts then one `sync`, as row `name`.
    fn nb_puts(&mut self, test: &str, name: &str, sz: usize, iters: usize) -> Result<()> {
        let (pg, r) = (self.pg, self.remote);
        let t = Instant::now();
        for _ in 0..iters {
            pg.put(r, &self.local[..sz])?;
        }
        pg.sync()?;
        self.row(test, sz, name, t, iters);
        Ok(())
    }

    /// The six throughput rows of one size, named as `test` names them.
    fn throughput(&mut self, test: &str, names: &[&str; 6], sz: usize, iters: usize) -> Result<()> {
        let pg = self.pg;
        let r = self.remote;
        let t = Instant::now();
        for _ in 0..iters {
            pg.write_slice(r, &self.local[..sz])?;
        }
        self.row(test, sz, names[0], t, iters);
        let t = Instant::now();
        for _ in 0..iters {
            pg.read_slice(r, &mut self.local[..sz])?;
        }
        self.row(test, sz, names[1], t, iters);
        self.nbi_puts(test, names[2], sz, iters)?;
        // every get of the scope lands in the same buffer, as in the tests
        let base = self.local.as_mut_ptr();
        let t = Instant::now();
        pg.scope(|s| {
            for _ in 0..iters {
                // SAFETY: the gets all write the same bytes of `local`,
                // which outlives the scope and is not read before the
                // scope (which waits for every get) ends.
                let dst = unsafe { std::slice::from_raw_parts_mut(base, sz) };
                s.get(r, dst)?;
            }
            Ok(())
        })?;
        self.row(test, sz, names[3], t, iters);
        self.nb_puts(test, names[4], sz, iters)?;
        // the handle array is allocated before the clock starts, as the
        // tests' `events`
        let mut handles = Vec::with_capacity(iters);
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: as for GetNBI: every handle writes the same bytes
            // of `local`, not read until all are waited for.
            let dst = unsafe { std::slice::from_raw_parts_mut(base, sz) };
            handles.push(pg.get_into(r, dst)?);
        }
        for h in handles.drain(..) {
            h.wait()?;
        }
        self.row(test, sz, names[5], t, iters);
        Ok(())
    }
}

/// Run this rank; rank 0 writes `key \t us \t 0` rows to `result`.
pub fn run(result: &Path) -> Result<()> {
    pin_this_rank(this_rank());
    let (si, sm) = iters_max(ENV_SMALL, SMALL_DEFAULT);
    let (li, lm) = iters_max(ENV_LARGE, LARGE_DEFAULT);
    let pg = Pgas::attach()?;
    if pg.size() != 2 {
        return Err(Error::usage("testsmall / testlarge need exactly 2 ranks"));
    }
    let max = sm.max(lm);
    // as in testlarge: the local buffer is in this rank's own segment
    // (`msgbuf = myseg`), the remote one in the peer's
    let area = pg.alloc_sym::<u8>(max)?;
    let mut mine = pg.alloc_sym::<u8>(max)?;
    if pg.rank() == 0 {
        let local = mine.local_mut();
        local.fill(1);
        let mut b = Bench {
            pg: &pg,
            remote: area.ptr(1),
            local,
            out: String::new(),
        };
        // warm-up: map both buffers' pages in this process before timing
        // (the first touch of a peer's page is a page fault, ~1 us)
        pg.write_slice(b.remote, &b.local[..max])?;
        pg.read_slice(b.remote, &mut b.local[..max])?;
        b.small(si.max(1), sm)?;
        b.large(li.max(1), lm)?;
        std::fs::write(result, &b.out)
            .map_err(|e| Error::usage(format!("writing {}: {e}", result.display())))?;
    }
    pg.barrier_notify()?;
    pg.barrier_wait()?;
    pg.finish()
}
