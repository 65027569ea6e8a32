//! sample_sort: Split-C style sample sort of 64-bit keys.
//!
//! Every rank starts with `KEYS` keys; at the end the keys are sorted across
//! the job: each rank's keys are sorted and every key on rank r is <= every
//! key on rank r + 1. The steps:
//!
//! 1. sort the local keys;
//! 2. pick regularly spaced samples and put them into rank 0's symmetric
//!    sample array (`pg.put`, `pg.sync`, barrier);
//! 3. rank 0 sorts the samples, picks `ranks - 1` splitters and broadcasts
//!    them;
//! 4. each rank finds (by binary search in its sorted keys) the run of keys
//!    bound for every destination and reserves room for it in the
//!    destination's receive buffer with a remote `fetch_add` on the
//!    destination's fill counter;
//! 5. the runs move with `pg.store` (one-way, no acknowledgement) and one
//!    collective `pg.all_store_sync()` waits until every store everywhere has
//!    landed: the Split-C `:-` idiom;
//! 6. each rank sorts what it received.
//!
//! Five key distributions run by default: uniform, gaussian, zero (every key
//! equal: everything lands on one rank), bucket-sorted (every rank's keys
//! already grouped by destination) and duplicates (few distinct values).
//! Skew is handled by sizing each receive buffer for every key of the job.
//!
//! Checks, per distribution: every rank's keys are sorted; each rank's
//! largest key is <= the smallest key of the next non-empty rank (read from
//! its symmetric `[count, min, max]` record); every key lies in its rank's
//! splitter range; and the key count and three checksums (wrapping sum,
//! xor, wrapping sum of hashed keys), combined with allreduce, are the same
//! before and after. Any failure makes every rank exit non-zero.
//!
//! ```text
//! cargo build --examples --bins
//! target/debug/splitrt-run -n 4 target/debug/examples/sample_sort
//! target/debug/splitrt-run -n 8 --rma am target/debug/examples/sample_sort 20000 zero uniform
//! ```
//!
//! Arguments (optional): keys per rank (default 100000), then the names of
//! the distributions to run (default all five).

use splitrt::pgas::{Op, Pgas, SymArray};
use splitrt::{Error, Result};
use std::time::Instant;

const SEED: u64 = 0x5a3b_1e50_7700_0001;
const DISTRIBUTIONS: [&str; 5] = ["uniform", "gaussian", "zero", "bucket-sorted", "duplicates"];
/// Samples each rank contributes (at most its key count).
const OVERSAMPLE: usize = 64;

/// splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(mix(seed) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// This rank's `n` keys of distribution `dist`.
fn generate(dist: &str, n: usize, rank: usize, ranks: usize) -> Vec<u64> {
    let d = DISTRIBUTIONS.iter().position(|&x| x == dist).unwrap_or(0) as u64;
    let mut rng = Rng::new(SEED ^ (d << 40) ^ rank as u64);
    match dist {
        "uniform" => (0..n).map(|_| rng.next()).collect(),
        "gaussian" => (0..n)
            .map(|_| {
                // Box-Muller: mean 2^63, standard deviation 2^59
                let (u1, u2) = (rng.unit(), rng.unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let (mean, sd) = ((1u64 << 63) as f64, (1u64 << 59) as f64);
                (mean + z * sd) as u64
            })
            .collect(),
        "zero" => vec![0; n],
        "bucket-sorted" => {
            // n / ranks keys from each destination's share of the key space,
            // one group after the other
            let width = (1u128 << 64) / ranks as u128;
            (0..n)
                .map(|i| {
                    let bucket = (i * ranks / n.max(1)) as u128;
                    (bucket * width + rng.next() as u128 % width) as u64
                })
                .collect()
        }
        _ => {
            // duplicates: 7 distinct values, the same set on every rank
            let values: Vec<u64> = (0..7).map(|k| mix(SEED ^ 0xd0d0 ^ k)).collect();
            (0..n).map(|_| values[(rng.next() % 7) as usize]).collect()
        }
    }
}

/// Count, wrapping sum and wrapping sum of hashes (allreduce Sum), xor
/// (allreduce BitXor) of every key in the job.
fn fingerprint(pg: &Pgas, keys: &[u64]) -> Result<[u64; 4]> {
    let mut sums = [keys.len() as u64, 0, 0];
    let mut x = [0u64];
    for &k in keys {
        sums[1] = sums[1].wrapping_add(k);
        sums[2] = sums[2].wrapping_add(mix(k ^ 0x1234_5678));
        x[0] ^= k;
    }
    pg.allreduce(&mut sums, Op::Sum)?;
    pg.allreduce(&mut x, Op::BitXor)?;
    Ok([sums[0], sums[1], sums[2], x[0]])
}

/// The job's symmetric state, allocated once and reused by every run.
struct Arrays {
    recv: SymArray<u64>,
    fill: SymArray<u64>,
    samples: SymArray<u64>,
    info: SymArray<u64>,
}

struct Outcome {
    ok: bool,
    largest: u64,
    total: u64,
    secs: f64,
}

/// Collective: sort one distribution and check the result.
fn sort_one(pg: &Pgas, a: &mut Arrays, dist: &str, n: usize, oversample: usize) -> Result<Outcome> {
    let (me, ranks) = (pg.rank(), pg.size());
    let mut keys = generate(dist, n, me, ranks);
    let before = fingerprint(pg, &keys)?;
    a.fill.local().set(0, 0);
    pg.barrier()?;
    let t0 = Instant::now();

    // 1-2. local sort; samples into rank 0's array
    keys.sort_unstable();
    let sample: Vec<u64> = (0..oversample)
        .map(|k| keys[(2 * k + 1) * n / (2 * oversample)])
        .collect();
    pg.put(a.samples.at(0, me * oversample), &sample)?;
    pg.sync()?;
    pg.barrier()?;

    // 3. splitters
    let mut splitters = vec![u64::MAX; ranks - 1];
    if me == 0 && oversample > 0 {
        let mut all = a.samples.local().slice(..ranks * oversample).to_vec();
        all.sort_unstable();
        for (j, s) in splitters.iter_mut().enumerate() {
            *s = all[(j + 1) * oversample];
        }
    }
    pg.broadcast(0, &mut splitters)?;

    // 4. destination runs (keys <= splitters[j] and > splitters[j - 1] go
    // to rank j) and room for them at their destinations
    let mut bounds = Vec::with_capacity(ranks + 1);
    bounds.push(0);
    for &s in &splitters {
        bounds.push(keys.partition_point(|&k| k <= s));
    }
    bounds.push(n);
    let mut at = vec![0u64; ranks];
    for j in 0..ranks {
        let len = (bounds[j + 1] - bounds[j]) as u64;
        if len > 0 {
            at[j] = pg.fetch_add(a.fill.ptr(j), len)?;
        }
    }

    // 5. move the keys: stores, then one collective completion
    for j in 0..ranks {
        let run = &keys[bounds[j]..bounds[j + 1]];
        if !run.is_empty() {
            pg.store(a.recv.at(j, at[j] as usize), run)?;
        }
    }
    pg.all_store_sync()?;

    // 6. local sort of what arrived
    let count = a.fill.local().get(0) as usize;
    // SAFETY: every store into `recv` has landed (all_store_sync) and the
    // next ones come after the barrier at the start of the next sort; no
    // rank reads another's `recv` (the checks read `info`). So until this
    // function returns nobody else touches these bytes, and this slice is
    // the only access to them.
    let mine: &mut [u64] = unsafe { a.recv.local().slice(..count).as_mut_slice() };
    mine.sort_unstable();
    pg.barrier()?;
    let secs = t0.elapsed().as_secs_f64();

    // Checks.
    let mut problems = Vec::new();
    let mine: &[u64] = mine;
    if let Some(i) = mine.windows(2).position(|w| w[0] > w[1]) {
        problems.push(format!("keys {i} and {} out of order", i + 1));
    }
    let lo = if me == 0 {
        None
    } else {
        Some(splitters[me - 1])
    };
    let hi = splitters.get(me).copied().unwrap_or(u64::MAX);
    if let Some(k) = mine.iter().find(|&&k| lo.is_some_and(|l| k <= l) || k > hi) {
        problems.push(format!("key {k:#x} outside this rank's splitter range"));
    }
    let (min, max) = (
        mine.first().copied().unwrap_or(0),
        mine.last().copied().unwrap_or(0),
    );
    a.info.local().copy_from(&[count as u64, min, max]);
    pg.barrier()?;
    if count > 0 {
        for q in me + 1..ranks {
            let mut rec = [0u64; 3];
            pg.read_slice(a.info.ptr(q), &mut rec)?;
            if rec[0] > 0 {
                if max > rec[1] {
                    problems.push(format!(
                        "largest key {max:#x} > smallest key {:#x} of rank {q}",
                        rec[1]
                    ));
                }
                break;
            }
        }
    }
    let after = fingerprint(pg, mine)?;
    if after != before {
        problems.push(format!(
            "count/checksums changed: before {before:x?}, after {after:x?}"
        ));
    }
    for p in &problems {
        eprintln!("sample_sort {dist}: rank {me}: {p}");
    }
    let mut agg = [problems.is_empty() as u64, count as u64];
    let mut largest = [count as u64];
    pg.allreduce(&mut agg, Op::Min)?;
    // (the allreduces also order every read of the records before the next
    // run rewrites them)
    pg.allreduce(&mut largest, Op::Max)?;
    Ok(Outcome {
        ok: agg[0] == 1,
        largest: largest[0],
        total: before[0],
        secs,
    })
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("sample_sort: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<bool> {
    let mut args = std::env::args().skip(1).peekable();
    let n: usize = match args.peek() {
        Some(s) if s.chars().all(|c| c.is_ascii_digit()) => {
            let s = args.next().expect("peeked");
            s.parse()
                .map_err(|_| Error::usage(format!("bad key count {s:?}")))?
        }
        _ => 100_000,
    };
    let mut dists: Vec<&str> = Vec::new();
    for a in args {
        match DISTRIBUTIONS.iter().find(|&&d| d == a) {
            Some(d) => dists.push(d),
            None => {
                return Err(Error::usage(format!(
                    "unknown distribution {a:?}; usage: sample_sort [KEYS_PER_RANK] [{}]...",
                    DISTRIBUTIONS.join("|")
                )))
            }
        }
    }
    if dists.is_empty() {
        dists = DISTRIBUTIONS.to_vec();
    }

    let pg = Pgas::attach()?;
    let ranks = pg.size();
    let oversample = OVERSAMPLE.min(n);
    // Skew: any rank may receive every key of the job.
    let mut arrays = Arrays {
        recv: pg.alloc_sym(ranks * n.max(1))?,
        fill: pg.alloc_sym(1)?,
        samples: pg.alloc_sym((ranks * oversample).max(1))?,
        info: pg.alloc_sym(3)?,
    };
    let mut all_ok = true;
    if pg.rank() == 0 {
        println!(
            "sample_sort: {ranks} ranks x {n} keys, {oversample} samples per rank, {:?} path",
            pg.rma_path()
        );
    }
    for dist in &dists {
        let o = sort_one(&pg, &mut arrays, dist, n, oversample)?;
        all_ok &= o.ok;
        if pg.rank() == 0 {
            let avg = o.total as f64 / ranks as f64;
            println!(
                "sample_sort {dist:<13} {} keys in {:7.1} ms, largest rank holds {} ({:.2}x average): {}",
                o.total,
                o.secs * 1e3,
                o.largest,
                if avg > 0.0 { o.largest as f64 / avg } else { 0.0 },
                if o.ok { "sorted" } else { "FAILED" }
            );
        }
    }
    if pg.rank() == 0 {
        if all_ok {
            println!(
                "sample_sort OK: {} distributions sorted and verified",
                dists.len()
            );
        } else {
            println!("sample_sort FAILED");
        }
    }
    pg.finish()?;
    Ok(all_ok)
}
