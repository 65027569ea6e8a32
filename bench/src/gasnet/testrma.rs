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
//!
//! Each test runs as theirs does: first its warm-up (every operation on
//! 8 B, `iters` times, with a handle array of twice that, then the largest
//! size once), then its sections in their order, each over every size
//! before the next section starts (testsmall: blocking latency, blocking
//! throughput, NBI latency, NBI throughput, NB latency, NB throughput;
//! testlarge: blocking, NBI, NB, NBI+GROUP, NB+event), the source written
//! before each row. Until 2026-11-26 ours ran every row of a size before
//! the next size and warmed up with one large put and get only.

use crate::harness::worker;
use splitrt::pgas::{GlobalPtr, Pgas};
use splitrt::Result;
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

/// How a row runs its `iters` operations (see the module docs).
#[derive(Clone, Copy)]
enum Op {
    /// `write_slice` each.
    PutBlocking,
    /// `read_slice` each.
    GetBlocking,
    /// One put in a `scope` each.
    PutScopeEach,
    /// One get in a `scope` each.
    GetScopeEach,
    /// `put` then `sync` each.
    PutSyncEach,
    /// `get_into` then `wait` each.
    GetHandleEach,
    /// All puts in one `scope`.
    PutScopeAll,
    /// All gets in one `scope`.
    GetScopeAll,
    /// All puts, then one `sync`.
    PutSyncAll,
    /// All `get_into` handles, then a `wait` on each.
    GetHandleAll,
}

/// testsmall's sections in its order (`main`: each runs every size before
/// the next starts), each a list of (row name, how).
const SMALL_SECTIONS: [&[(&str, Op)]; 6] = [
    &[
        ("PutBlocking latency", Op::PutBlocking),
        ("GetBlocking latency", Op::GetBlocking),
    ],
    &[
        ("PutBlocking throughput", Op::PutBlocking),
        ("GetBlocking throughput", Op::GetBlocking),
    ],
    &[
        ("PutNBI+NOW latency", Op::PutScopeEach),
        ("GetNBI latency", Op::GetScopeEach),
    ],
    &[
        ("PutNBI+NOW throughput", Op::PutScopeAll),
        ("GetNBI throughput", Op::GetScopeAll),
    ],
    &[
        ("PutNB+NOW latency", Op::PutSyncEach),
        ("GetNB latency", Op::GetHandleEach),
    ],
    &[
        ("PutNB+NOW throughput", Op::PutSyncAll),
        ("GetNB throughput", Op::GetHandleAll),
    ],
];

/// testlarge's sections in its order (`bulk_test`, `bulk_test_nbi` and
/// `bulk_test_nb` with deferred local completion, then with a group and
/// events, which time no gets).
const LARGE_SECTIONS: [&[(&str, Op)]; 5] = [
    &[
        ("PutBlocking throughput", Op::PutBlocking),
        ("GetBlocking throughput", Op::GetBlocking),
    ],
    &[
        ("PutNBI+DEFER throughput", Op::PutScopeAll),
        ("GetNBI throughput", Op::GetScopeAll),
    ],
    &[
        ("PutNB+DEFER throughput", Op::PutSyncAll),
        ("GetNB throughput", Op::GetHandleAll),
    ],
    &[("PutNBI+GROUP throughput", Op::PutScopeAll)],
    &[("PutNB+event throughput", Op::PutSyncAll)],
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

    /// The tests' warm-up before their first section: `iters` (at most
    /// 32767) rounds of every operation on 8 B with a handle array of
    /// twice that, then one put and one get of the largest size. It also
    /// leaves the heap with the pages a later handle array reuses.
    fn warm_up(&mut self, iters: usize, max: usize) -> Result<()> {
        let (pg, r) = (self.pg, self.remote);
        let n = iters.min(32767);
        let w = self.local.len().min(8);
        let base = self.local.as_mut_ptr();
        let mut handles = Vec::with_capacity(2 * n);
        for _ in 0..n {
            pg.write_slice(r, &self.local[..w])?;
            pg.read_slice(r, &mut self.local[..w])?;
            pg.scope(|s| s.put(r, &self.local[..w]))?;
            pg.scope(|s| s.get(r, &mut self.local[..w]))?;
            pg.put(r, &self.local[..w])?;
            // SAFETY: every handle writes the same `w` bytes of `local`,
            // which is not read until all are waited for below.
            let dst = unsafe { std::slice::from_raw_parts_mut(base, w) };
            handles.push(pg.get_into(r, dst)?);
        }
        pg.write_slice(r, &self.local[..max])?;
        pg.read_slice(r, &mut self.local[..max])?;
        for h in handles.drain(..) {
            h.wait()?;
        }
        pg.sync()
    }

    /// Every section of a test in its order, each over every size.
    fn sections(
        &mut self,
        test: &str,
        sections: &[&[(&str, Op)]],
        sizes: &[usize],
        iters: usize,
    ) -> Result<()> {
        for section in sections {
            for &sz in sizes {
                for &(name, op) in section.iter() {
                    // as the tests: the source is written before each row
                    self.local[..sz].fill(1);
                    self.run(test, name, op, sz, iters)?;
                }
            }
        }
        Ok(())
    }

    /// Row `name`: `iters` operations of `sz` bytes as `op`.
    fn run(&mut self, test: &str, name: &str, op: Op, sz: usize, iters: usize) -> Result<()> {
        let (pg, r) = (self.pg, self.remote);
        let base = self.local.as_mut_ptr();
        // the handle array is allocated before the clock starts, as the
        // tests' `events`
        let mut handles = match op {
            Op::GetHandleAll => Vec::with_capacity(iters),
            _ => Vec::new(),
        };
        let t = Instant::now();
        match op {
            Op::PutBlocking => {
                for _ in 0..iters {
                    pg.write_slice(r, &self.local[..sz])?;
                }
            }
            Op::GetBlocking => {
                for _ in 0..iters {
                    pg.read_slice(r, &mut self.local[..sz])?;
                }
            }
            Op::PutScopeEach => {
                for _ in 0..iters {
                    pg.scope(|s| s.put(r, &self.local[..sz]))?;
                }
            }
            Op::GetScopeEach => {
                for _ in 0..iters {
                    let dst = &mut self.local[..sz];
                    pg.scope(|s| s.get(r, dst))?;
                }
            }
            Op::PutSyncEach => {
                for _ in 0..iters {
                    pg.put(r, &self.local[..sz])?;
                    pg.sync()?;
                }
            }
            Op::GetHandleEach => {
                for _ in 0..iters {
                    pg.get_into(r, &mut self.local[..sz])?.wait()?;
                }
            }
            Op::PutScopeAll => pg.scope(|s| {
                for _ in 0..iters {
                    s.put(r, &self.local[..sz])?;
                }
                Ok(())
            })?,
            Op::GetScopeAll => pg.scope(|s| {
                // every get of the scope lands in the same buffer, as in
                // the tests
                for _ in 0..iters {
                    // SAFETY: the gets all write the same bytes of
                    // `local`, which outlives the scope and is not read
                    // before the scope (which waits for every get) ends.
                    let dst = unsafe { std::slice::from_raw_parts_mut(base, sz) };
                    s.get(r, dst)?;
                }
                Ok(())
            })?,
            Op::PutSyncAll => {
                for _ in 0..iters {
                    pg.put(r, &self.local[..sz])?;
                }
                pg.sync()?;
            }
            Op::GetHandleAll => {
                for _ in 0..iters {
                    // SAFETY: as for GetScopeAll: every handle writes the
                    // same bytes of `local`, not read until all are
                    // waited for.
                    let dst = unsafe { std::slice::from_raw_parts_mut(base, sz) };
                    handles.push(pg.get_into(r, dst)?);
                }
                for h in handles.drain(..) {
                    h.wait()?;
                }
            }
        }
        self.row(test, sz, name, t, iters);
        Ok(())
    }
}

/// Run this rank; rank 0 writes `key \t us \t 0` rows to `result`.
pub fn run(result: &Path) -> Result<()> {
    worker::pin();
    let (si, sm) = iters_max(ENV_SMALL, SMALL_DEFAULT);
    let (li, lm) = iters_max(ENV_LARGE, LARGE_DEFAULT);
    let pg = Pgas::attach()?;
    worker::two_ranks(pg.size())?;
    let max = sm.max(lm);
    // as in testlarge: the local buffer is in this rank's own segment
    // (`msgbuf = myseg`), the remote one in the peer's
    let area = pg.alloc_sym::<u8>(max)?;
    let mine = pg.alloc_sym::<u8>(max)?;
    if pg.rank() == 0 {
        // SAFETY: only rank 0 touches its `mine` (rank 1 only serves, and
        // every remote access targets its `area`), through this slice
        // only, until the tests end.
        let local = unsafe { mine.local().as_mut_slice() };
        local.fill(1);
        let mut b = Bench {
            pg: &pg,
            remote: area.ptr(1),
            local,
            // sized once: growing it would take the heap blocks the handle
            // arrays reuse (as the tests print rather than collect rows)
            out: String::with_capacity(64 << 10),
        };
        // each test warms up before its first section (this also maps
        // both buffers' pages here: a first touch is a page fault, ~1 us)
        b.warm_up(si.max(1), sm)?;
        b.sections("testsmall", &SMALL_SECTIONS, &sizes(1, sm), si.max(1))?;
        b.warm_up(li.max(1), lm)?;
        b.sections(
            "testlarge",
            &LARGE_SECTIONS,
            &sizes(LARGE_MIN, lm),
            li.max(1),
        )?;
        worker::write_result(result, 0, &b.out)?;
    }
    pg.barrier_notify()?;
    pg.barrier_wait()?;
    pg.finish()
}
