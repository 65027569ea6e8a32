//! NAS Parallel Benchmarks IS (integer sort), classes S, W and A, on
//! splitrt's PGAS layer.
//!
//! # The benchmark
//!
//! IS ranks `2^n` integer keys drawn from NPB's generator (`randlc`,
//! `a = 1220703125`, seed `314159265`; each key is `MAX_KEY/4` times the sum
//! of four consecutive numbers of the sequence, so keys are roughly
//! Gaussian). Each of the 10 timed iterations changes two keys, ranks all
//! keys with a bucket sort and checks the ranks of five test keys against
//! NPB's published values (partial verification, `test_index_array` /
//! `test_rank_array` with the per-class iteration offsets of NPB's `is.c`).
//! After the timed loop the keys of the last ranking are placed in sorted
//! order and checked to be sorted, globally (full verification).
//!
//! | class | keys   | max key | buckets |
//! |-------|--------|---------|---------|
//! | S     | 2^16   | 2^11    | 2^9     |
//! | W     | 2^20   | 2^16    | 2^10    |
//! | A     | 2^23   | 2^19    | 2^10    |
//!
//! # Mapping to PGAS (the NPB-MPI algorithm, with one-sided communication)
//!
//! * Keys: rank `r` owns the block `[r*ceil(N/P), ...)` of the global key
//!   sequence and generates it itself, jumping the generator ahead by
//!   `4 * first_index` steps, so the global sequence is NPB's for any
//!   number of ranks (1..8; not only powers of two as in NPB-MPI). Keys
//!   live in ordinary `Vec`s: nobody else reads them.
//! * Each iteration: local bucket counts (plus the values of the test keys
//!   this rank owns, hidden in the same array as NPB-MPI does) are summed
//!   with `pg.allreduce(.., Op::Sum)`. Buckets are then assigned to ranks
//!   in contiguous runs of about `N/P` keys (NPB-MPI's rule).
//! * The all-to-all: every rank stores its row of send counts into every
//!   rank's symmetric `P x P` count matrix (`pg.store` + `pg.all_store_sync`,
//!   an allgather), so each sender knows where its keys go in each
//!   receiver's buffer; then it stores its keys straight into the
//!   receivers' symmetric receive buffers (`pg.store` again) and a second
//!   `pg.all_store_sync` completes the exchange.
//! * Each rank counts and ranks the keys of its bucket range; the ranks of
//!   the test keys add the number of smaller keys held by lower ranks.
//! * Full verification: every rank sorts its last received keys, checks
//!   them, publishes (count, first, last) in a symmetric array and reads
//!   everyone's with `s.get` in a `pg.scope` to check the order across rank
//!   boundaries. Verification counts and the time (max over ranks) are
//!   combined with `pg.allreduce`; every rank exits 1 when verification
//!   fails.
//!
//! Only the receive buffers, the count matrix and the edge triple live in
//! the segment: class A on one rank needs 32 MiB of it, which the default
//! 64 MiB segment holds (no `SPLITRT_SEGMENT_SIZE` needed).
//!
//! # Running
//!
//! ```text
//! cargo build --release --examples --bins
//! target/release/splitrt-run -n 4 target/release/examples/npb_is A
//! target/release/splitrt-run -n 4 --rma am target/release/examples/npb_is S
//! target/release/examples/npb_is W          # a 1-rank job
//! ```

#[path = "npb_common/mod.rs"]
mod npb_common;

use npb_common::{class_arg, print_results, rma_name, skip_ahead, vranlc, Results, AMULT, SEED};
use splitrt::pgas::{Op, Pgas, SymArray};
use std::time::Instant;

const MAX_ITERATIONS: usize = 10;
const TEST_ARRAY_SIZE: usize = 5;

/// One problem class (values from NPB's `is.c`).
struct Class {
    letter: char,
    total_keys_log2: u32,
    max_key_log2: u32,
    buckets_log2: u32,
    test_index: [usize; TEST_ARRAY_SIZE],
    test_rank: [i64; TEST_ARRAY_SIZE],
}

const CLASSES: [Class; 3] = [
    Class {
        letter: 'S',
        total_keys_log2: 16,
        max_key_log2: 11,
        buckets_log2: 9,
        test_index: [48427, 17148, 23627, 62548, 4431],
        test_rank: [0, 18, 346, 64917, 65463],
    },
    Class {
        letter: 'W',
        total_keys_log2: 20,
        max_key_log2: 16,
        buckets_log2: 10,
        test_index: [357773, 934767, 875723, 898999, 404505],
        test_rank: [1249, 11698, 1039987, 1043896, 1048018],
    },
    Class {
        letter: 'A',
        total_keys_log2: 23,
        max_key_log2: 19,
        buckets_log2: 10,
        test_index: [2112377, 662041, 5336171, 3642833, 4250760],
        test_rank: [104, 17523, 123928, 8288932, 8388264],
    },
];

impl Class {
    /// The rank test key `i` must have in `iteration` (NPB's per-class
    /// shifts: the two keys changed every iteration move the others).
    fn expected_rank(&self, i: usize, iteration: usize) -> i64 {
        let (r, it) = (self.test_rank[i], iteration as i64);
        match self.letter {
            'S' if i <= 2 => r + it,
            'S' => r - it,
            'W' if i < 2 => r + it - 2,
            'W' => r - it,
            'A' if i <= 2 => r + it - 1,
            'A' => r - (it - 1),
            _ => unreachable!("class checked at start"),
        }
    }
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("npb_is: {e}");
            std::process::exit(1);
        }
    }
}

/// This rank's state across iterations.
struct Sorter<'a> {
    pg: &'a Pgas,
    class: &'a Class,
    me: usize,
    np: usize,
    total: usize,
    max_key: usize,
    nb: usize,
    shift: u32,
    /// Global index of this rank's first key and keys per rank (block).
    first: usize,
    per: usize,
    keys: Vec<i32>,
    /// Keys grouped by bucket (NPB's key_buff1).
    bucketed: Vec<i32>,
    /// Per-key counts, then ranks, of this rank's key range.
    counts: Vec<u32>,
    /// Everyone's send counts: row s = what rank s sends to each rank.
    matrix: SymArray<u64>,
    /// Keys other ranks send here (NPB's key_buff2).
    recv: SymArray<i32>,
    /// Keys received in the last iteration and the first key they cover.
    received: usize,
    min_key: usize,
}

impl Sorter<'_> {
    /// One ranking of all keys (NPB's `rank(iteration)`); returns how many
    /// of this rank's partial-verification tests passed.
    fn rank(&mut self, iteration: usize) -> splitrt::Result<usize> {
        let (me, np, nb, shift) = (self.me, self.np, self.nb, self.shift);
        // Iteration alteration of keys (global indices 1..=20: rank 0).
        if me == 0 {
            self.keys[iteration] = iteration as i32;
            self.keys[iteration + MAX_ITERATIONS] = (self.max_key - iteration) as i32;
        }

        // Local bucket sizes; the test keys this rank owns go on top.
        let mut sizes = vec![0i64; nb + TEST_ARRAY_SIZE];
        for (i, &t) in self.class.test_index.iter().enumerate() {
            if t / self.per == me {
                sizes[nb + i] = self.keys[t - self.first] as i64;
            }
        }
        for &k in &self.keys {
            sizes[(k >> shift) as usize] += 1;
        }
        // Sort into buckets.
        let mut ptrs = vec![0usize; nb + 1];
        for b in 0..nb {
            ptrs[b + 1] = ptrs[b] + sizes[b] as usize;
        }
        let starts = ptrs.clone();
        for &k in &self.keys {
            let b = (k >> shift) as usize;
            self.bucketed[ptrs[b]] = k;
            ptrs[b] += 1;
        }
        let local = sizes[..nb].to_vec();

        // Global bucket sizes and the test keys' values.
        let mut totals = sizes;
        self.pg.allreduce(&mut totals, Op::Sum)?;

        // Buckets go to ranks in contiguous runs: rank j's run ends with
        // the bucket where the running total reaches (j+1) * N / P.
        let mut runs = vec![(nb, nb); np];
        let (mut acc, mut j, mut start) = (0usize, 0usize, 0usize);
        for (b, &t) in totals[..nb].iter().enumerate() {
            acc += t as usize;
            if j < np && acc * np >= (j + 1) * self.total {
                runs[j] = (start, b + 1);
                start = b + 1;
                j += 1;
            }
        }
        let send: Vec<u64> = runs
            .iter()
            .map(|&(lo, hi)| local[lo..hi].iter().sum::<i64>() as u64)
            .collect();

        // Allgather of the send counts into everyone's matrix.
        for t in 0..np {
            self.pg.store(self.matrix.at(t, me * np), &send)?;
        }
        self.pg.all_store_sync()?;
        let m = self.matrix.local().to_vec();
        let incoming = |j: usize| (0..np).map(|s| m[s * np + j]).sum::<u64>() as usize;
        let received = incoming(me);

        // Every rank computes the same need, so a reallocation (collective)
        // happens on all ranks together.
        let need = (0..np).map(incoming).max().unwrap_or(0);
        if need > self.recv.len() {
            let bigger = self.pg.alloc_sym::<i32>(need + need / 8)?;
            self.pg
                .free_sym(std::mem::replace(&mut self.recv, bigger))?;
        }

        // Store my keys into each receiver's buffer, after the keys of
        // lower-ranked senders.
        for (j, &(lo, _)) in runs.iter().enumerate() {
            let n = send[j] as usize;
            if n == 0 {
                continue;
            }
            let displ = (0..me).map(|s| m[s * np + j]).sum::<u64>() as usize;
            let from = starts[lo];
            self.pg
                .store(self.recv.at(j, displ), &self.bucketed[from..from + n])?;
        }
        self.pg.all_store_sync()?;

        // Rank the keys of my bucket run.
        let (lo, hi) = runs[me];
        self.min_key = lo << shift;
        let range = (hi - lo) << shift;
        self.received = received;
        let counts = &mut self.counts[..range];
        counts.fill(0);
        // SAFETY: every key has landed (all_store_sync above) and the next
        // stores into `recv` come after the next iteration's first
        // all_store_sync, which this rank enters only after ranking; no
        // view of `recv` writes meanwhile.
        let keys = unsafe { self.recv.local().slice(..received).as_slice() };
        for &k in keys {
            counts[k as usize - self.min_key] += 1;
        }
        for i in 1..range {
            counts[i] += counts[i - 1];
        }
        let expected: i64 = totals[lo..hi].iter().sum();
        if expected as usize != received {
            return Err(splitrt::Error::usage(format!(
                "rank {me}: received {received} keys, bucket totals say {expected}"
            )));
        }
        // Keys on lower ranks are all smaller than mine.
        let lesser: i64 = totals[..lo].iter().sum();

        // Partial verification for the test keys in my range.
        let mut passed = 0;
        for i in 0..TEST_ARRAY_SIZE {
            let k = totals[nb + i] as usize;
            if range == 0 || k < self.min_key || k >= self.min_key + range {
                continue;
            }
            let below = if k > self.min_key {
                counts[k - 1 - self.min_key] as i64
            } else {
                0
            };
            let key_rank = below + lesser;
            let want = self.class.expected_rank(i, iteration);
            if key_rank == want {
                passed += 1;
            } else {
                println!(
                    "Failed partial verification: iteration {iteration}, processor {me}, test key {i}, key rank {key_rank} (expected {want})"
                );
            }
        }
        Ok(passed)
    }

    /// NPB's `full_verify`: sort the last iteration's keys with their
    /// ranks and check the order, locally and across rank boundaries.
    /// Returns (passed, keys out of order).
    fn full_verify(&mut self) -> splitrt::Result<(bool, u64)> {
        let n = self.received;
        let keys = self.recv.local().slice(..n).to_vec();
        let mut sorted = vec![0i32; n];
        for &k in &keys {
            let c = &mut self.counts[k as usize - self.min_key];
            *c -= 1;
            sorted[*c as usize] = k;
        }
        let mut bad = sorted.windows(2).filter(|w| w[0] > w[1]).count() as u64;

        // (count, first, last) of every rank.
        let edge = self.pg.alloc_sym::<i64>(3)?;
        edge.local().copy_from(&[
            n as i64,
            sorted.first().copied().unwrap_or(0) as i64,
            sorted.last().copied().unwrap_or(0) as i64,
        ]);
        self.pg.barrier()?;
        let mut all = vec![0i64; 3 * self.np];
        self.pg.scope(|s| {
            for (r, dst) in all.chunks_mut(3).enumerate() {
                s.get(edge.ptr(r), dst)?;
            }
            Ok(())
        })?;
        // The largest key of the nearest lower rank holding keys must not
        // exceed my smallest.
        if n > 0 {
            let prev = all[..3 * self.me]
                .chunks(3)
                .rev()
                .find(|e| e[0] > 0)
                .map(|e| e[2]);
            if prev.is_some_and(|p| p > sorted[0] as i64) {
                bad += 1;
            }
        }
        let held: i64 = all.chunks(3).map(|e| e[0]).sum();
        if held as usize != self.total {
            bad += 1;
        }
        if bad != 0 {
            println!(
                "Processor {}:  Full_verify: number of keys out of sort: {bad}",
                self.me
            );
        }
        Ok((bad == 0, bad))
    }
}

fn run() -> splitrt::Result<bool> {
    let letter = class_arg("npb_is", &['S', 'W', 'A'])?;
    let class = CLASSES
        .iter()
        .find(|c| c.letter == letter)
        .expect("class_arg checked the letter");
    let pg = Pgas::attach()?;
    let (me, np) = (pg.rank(), pg.size());
    let total = 1usize << class.total_keys_log2;
    let max_key = 1usize << class.max_key_log2;
    let nb = 1usize << class.buckets_log2;
    let shift = class.max_key_log2 - class.buckets_log2;
    let per = total.div_ceil(np);
    if per <= 2 * MAX_ITERATIONS {
        return Err(splitrt::Error::usage(format!(
            "npb_is: {np} ranks is too many for class {letter}"
        )));
    }
    let first = (me * per).min(total);
    let last = (first + per).min(total);

    if me == 0 {
        println!();
        println!();
        println!(" NAS Parallel Benchmarks 3.4 (splitrt PGAS port) -- IS Benchmark");
        println!();
        println!(" Size:  {total}  (class {letter})");
        println!(" Iterations:   {MAX_ITERATIONS}");
        println!(" Number of processes:     {np}");
        println!(" RMA path:   {}", rma_name(&pg));
    }

    // Keys first..last of NPB's sequence: four generator steps per key.
    let mut seed = skip_ahead(SEED, AMULT, 4 * first as u64);
    let k = (max_key / 4) as f64;
    let mut r4 = [0.0f64; 4];
    let keys: Vec<i32> = (first..last)
        .map(|_| {
            vranlc(&mut seed, AMULT, &mut r4);
            let x = r4[0] + r4[1] + r4[2] + r4[3];
            (k * x) as i32
        })
        .collect();

    // A receiving rank gets about N/P keys plus part of one bucket; the
    // capacity grows (collectively) if some iteration needs more.
    let cap = total.min(per + 4 * total / nb + 64);
    let mut s = Sorter {
        pg: &pg,
        class,
        me,
        np,
        total,
        max_key,
        nb,
        shift,
        first,
        per,
        bucketed: vec![0; keys.len()],
        keys,
        counts: vec![0; max_key],
        matrix: pg.alloc_sym::<u64>(np * np)?,
        recv: pg.alloc_sym::<i32>(cap)?,
        received: 0,
        min_key: 0,
    };

    // One untimed iteration (NPB does the same), then the timed loop.
    s.rank(1)?;
    pg.barrier()?;
    if me == 0 && letter != 'S' {
        println!();
        println!("   iteration");
    }
    let mut passed = 0usize;
    let t0 = Instant::now();
    for it in 1..=MAX_ITERATIONS {
        if me == 0 && letter != 'S' {
            println!("        {it}");
        }
        passed += s.rank(it)?;
    }
    let mut time = [t0.elapsed().as_secs_f64()];
    pg.allreduce(&mut time, Op::Max)?;

    let (full_ok, bad) = s.full_verify()?;
    let mut sums = [passed as u64, full_ok as u64, bad];
    pg.allreduce(&mut sums, Op::Sum)?;
    let [partial, full, out_of_sort] = sums;
    let verified = partial == (TEST_ARRAY_SIZE * MAX_ITERATIONS) as u64 && full == np as u64;

    if me == 0 {
        println!();
        println!(
            " Partial verification: {partial} of {} test key ranks correct",
            TEST_ARRAY_SIZE * MAX_ITERATIONS
        );
        println!(
            " Full verification: {full} of {np} processes sorted, {out_of_sort} keys out of sort"
        );
        print_results(&Results {
            name: "IS",
            class: letter,
            size: total as u64,
            iterations: MAX_ITERATIONS,
            seconds: time[0],
            procs: np,
            mops: 1e-6 * (MAX_ITERATIONS * total) as f64 / time[0],
            optype: "keys ranked",
            verified,
            rma: rma_name(&pg),
        });
    }
    pg.finish()?;
    Ok(verified)
}
