//! PGAS operations against a sequential model, on whichever path the job
//! uses (`SPLITRT_RMA=native|am`).
//!
//! * Random sequences (seeded per rank) of put batches + sync, scoped get
//!   batches, owned `Get` handles, blocking read/write, and stores. Each rank
//!   writes only its own slice of every rank's array, so its model is exact;
//!   every get is compared with it.
//! * store_sync byte counting: each rank stores a known number of bytes into
//!   its right neighbour, which store_syncs exactly that many and then sees
//!   the data; all_store_sync at every round's end.
//! * Atomics under contention: every rank fetch-adds a shared 64- and 32-bit
//!   counter; the final counts are exact and every returned old value is
//!   unique. CAS loops and swap too.
//! * Bad global pointers: out of bounds, misaligned, reserved area, unknown
//!   rank, each an error at the caller with the target's memory unchanged.
//!
//! Usage: t_pgas_model [ROUNDS] [OPS]    (exit 0 = every check passed)

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::pgas::{Dist, GlobalPtr, Op, Pgas};
use splitrt::{Error, ErrorKind};

const K: usize = 512; // slots per writer in every rank's array

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_pgas_model: {e}");
        std::process::exit(1);
    }
}

fn fail(msg: String) -> Error {
    Error::usage(msg)
}

fn run() -> splitrt::Result<()> {
    let mut a = std::env::args().skip(1);
    let rounds: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(4);
    let ops: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    run_on(rounds, ops, Pgas::attach()?)
}

/// The checks on an attached context (`tests/verbs_model.rs` runs them on
/// ranks attached over the verbs model).
pub fn run_on(rounds: usize, ops: usize, pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((me as u64 + 1) * 0x1234_5678_9abc_def1));

    let arr = pg.alloc_sym::<u64>(n * K)?;
    let stores = pg.alloc_sym::<u64>(n * K)?;
    // model[t][k]: what this rank last wrote at arr[t][me*K + k]
    let mut model = vec![vec![0u64; K]; n];
    let mut store_model = vec![vec![0u64; K]; n];
    let slot = |t: usize, k: usize| arr_ptr(&pg, &arr, t, me * K + k);
    let mut checked = 0usize;

    for round in 0..rounds {
        for _ in 0..ops {
            let t = rng.below(n);
            let k = rng.below(K);
            let len = 1 + rng.below((K - k).min(64));
            match rng.below(6) {
                0 => {
                    // put batch
                    for _ in 0..1 + rng.below(4) {
                        let (t, k) = (rng.below(n), rng.below(K));
                        let len = 1 + rng.below((K - k).min(64));
                        let v: Vec<u64> = (0..len).map(|_| rng.next()).collect();
                        pg.put(slot(t, k), &v)?;
                        model[t][k..k + len].copy_from_slice(&v);
                    }
                    pg.sync()?;
                }
                1 => {
                    // scoped gets, several in flight
                    let (t2, k2) = (rng.below(n), rng.below(K));
                    let len2 = 1 + rng.below((K - k2).min(64));
                    let (mut x, mut y) = (vec![0u64; len], vec![0u64; len2]);
                    pg.scope(|s| {
                        s.get(slot(t, k), &mut x)?;
                        s.get(slot(t2, k2), &mut y)
                    })?;
                    expect(&x, &model[t][k..k + len], "scoped get", t)?;
                    expect(&y, &model[t2][k2..k2 + len2], "scoped get", t2)?;
                    checked += len + len2;
                }
                2 => {
                    // owned handles, waited in reverse order
                    let h1 = pg.get(slot(t, k), len)?;
                    let h2 = pg.get(slot(t, 0), K)?;
                    // and gets into caller buffers, one of them leaked
                    let (t2, k2) = (rng.below(n), rng.below(K));
                    let len2 = 1 + rng.below((K - k2).min(64));
                    let (mut x, mut y) = (vec![0u64; len2], vec![!0u64; K]);
                    let hx = pg.get_into(slot(t2, k2), &mut x)?;
                    let hy = pg.get_into(slot(t, 0), &mut y)?;
                    if rng.below(8) == 0 {
                        std::mem::forget(hy); // its reply must land in its own staging
                        y.fill(!0);
                    } else {
                        hy.wait()?;
                        expect(&y, &model[t], "get_into", t)?;
                    }
                    hx.wait()?;
                    expect(&x, &model[t2][k2..k2 + len2], "get_into", t2)?;
                    expect(&h2.wait()?, &model[t], "owned get", t)?;
                    expect(&h1.wait()?, &model[t][k..k + len], "owned get", t)?;
                    checked += len + K + len2;
                }
                3 => {
                    let v = rng.next();
                    pg.write(slot(t, k), v)?;
                    model[t][k] = v;
                    let r = pg.read(slot(t, k))?;
                    expect(&[r], &[v], "read after write", t)?;
                    checked += 1;
                }
                4 => {
                    let v: Vec<u64> = (0..len).map(|_| rng.next()).collect();
                    pg.store(arr_ptr(&pg, &stores, t, me * K + k), &v)?;
                    store_model[t][k..k + len].copy_from_slice(&v);
                }
                _ => {
                    if t == me {
                        // local view agrees with the model
                        let local = arr.local().slice(me * K..me * K + K).to_vec();
                        expect(&local, &model[me], "local view", me)?;
                        checked += K;
                    }
                }
            }
        }
        // store_sync byte counting with the right neighbour
        let right = (me + 1) % n;
        let left = (me + n - 1) % n;
        let words = 1 + round % 7;
        let msg: Vec<u64> = (0..words as u64)
            .map(|w| ((me as u64) << 32) | (round as u64 * 100 + w))
            .collect();
        pg.store(arr_ptr(&pg, &stores, right, me * K + K - words), &msg)?;
        store_model[right][K - words..].copy_from_slice(&msg);
        pg.all_store_sync()?;
        // every writer's stores have landed here: check what the left
        // neighbour sent (known), and let each writer verify its own stores
        let from_left = &stores
            .local()
            .slice(left * K + K - words..left * K + K)
            .to_vec();
        let want: Vec<u64> = (0..words as u64)
            .map(|w| ((left as u64) << 32) | (round as u64 * 100 + w))
            .collect();
        expect(from_left, &want, "store after all_store_sync", me)?;
        for (t, m) in store_model.iter().enumerate() {
            let got = pg.get(arr_ptr(&pg, &stores, t, me * K), K)?.wait()?;
            expect(&got, m, "stored data", t)?;
            checked += K;
        }
        pg.barrier()?;
    }

    // store_sync alone: right neighbour stores exactly 3 words, we wait for 24 B.
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    pg.barrier()?;
    pg.store(arr_ptr(&pg, &stores, right, me * K), &[7u64, 8, me as u64])?;
    pg.store_sync(24)?;
    let got = &stores.local().slice(left * K..left * K + 3).to_vec();
    expect(got, &[7, 8, left as u64], "store_sync", left)?;
    pg.all_store_sync()?; // balances the books for the store above

    // Atomics under contention.
    const M: u64 = 300;
    let c64 = pg.alloc_sym::<u64>(1)?;
    let c32 = pg.alloc_sym::<u32>(1)?;
    let cas = pg.alloc_sym::<u64>(1)?;
    let marks = pg.spread::<u64>(n * M as usize, Dist::Cyclic)?;
    let target = c64.ptr(0);
    for _ in 0..M {
        let old = pg.fetch_add(target, 1)?;
        pg.put(marks.ptr(old as usize), &[1 + old])?;
        pg.fetch_add(c32.ptr(n - 1), 2u32)?;
    }
    // CAS loop and swap on rank (n-1)'s word
    let cas_target = cas.ptr(n - 1);
    for _ in 0..50 {
        loop {
            let cur = pg.read(cas_target)?;
            if pg.compare_swap(cas_target, cur, cur + 3)? == cur {
                break;
            }
        }
    }
    pg.sync()?;
    pg.barrier()?;
    if me == 0 {
        let total = pg.read(target)?;
        if total != n as u64 * M {
            return Err(fail(format!(
                "fetch_add counter {total}, expected {}",
                n as u64 * M
            )));
        }
    }
    if me == n - 1 {
        let c = pg.read(c32.ptr(n - 1))?;
        if c != 2 * n as u32 * M as u32 {
            return Err(fail(format!(
                "32-bit counter {c}, expected {}",
                2 * n as u32 * M as u32
            )));
        }
        let expect_cas = 150 * n as u64;
        let c = pg.read(cas_target)?;
        if c != expect_cas {
            return Err(fail(format!("CAS counter {c}, expected {expect_cas}")));
        }
        let old = pg.swap(cas_target, 5)?;
        if old != expect_cas || pg.read(cas_target)? != 5 {
            return Err(fail("swap returned the wrong value".into()));
        }
    }
    for (k, m) in marks.local().iter().enumerate() {
        let g = marks.global_index(me, k) as u64;
        if m != g + 1 {
            return Err(fail(format!(
                "fetch_add old value {g} returned {} times",
                if m == 0 { 0 } else { 2 }
            )));
        }
    }

    atomics_conformance(&pg)?;

    // Bad global pointers: errors at the caller, target unchanged.
    pg.barrier()?;
    let before = pg.get(arr.ptr(right), n * K)?.wait()?;
    let seg = pg.endpoint().segment_len() as u64;
    let cases: Vec<(&str, GlobalPtr<u64>)> = vec![
        ("past the end", GlobalPtr::new(right, seg - 8).add(1)),
        ("straddling the end", GlobalPtr::new(right, seg - 8)),
        ("misaligned", arr.ptr(right).cast::<u8>().add(4).cast()),
        ("reserved area", GlobalPtr::new(right, 0)),
        ("no such rank", GlobalPtr::new(n, arr.ptr(0).offset())),
    ];
    for (what, p) in cases {
        let len = if what == "straddling the end" { 2 } else { 1 };
        let e1 = pg.put(p, &vec![0xdead_beefu64; len]).err();
        let e2 = pg.get(p, len).err();
        let e3 = pg.store(p, &vec![1u64; len]).err();
        // one element at seg - 8 is in bounds: test the atomic one further
        let pa = if len == 2 { p.add(1) } else { p };
        let e4 = pg.fetch_add(pa, 1).err();
        for e in [e1, e2, e3, e4] {
            let Some(e) = e else {
                return Err(fail(format!("{what}: an access was accepted")));
            };
            let right_kind = match what {
                "past the end" | "straddling the end" => {
                    matches!(e.kind(), ErrorKind::OutOfBounds { .. })
                }
                _ => matches!(e.kind(), ErrorKind::Usage(_)),
            };
            if !right_kind || e.rank() != Some(me) {
                return Err(fail(format!("{what}: unexpected error {e}")));
            }
        }
    }
    pg.barrier()?;
    let after = pg.get(arr.ptr(right), n * K)?.wait()?;
    expect(&after, &before, "memory after refused accesses", right)?;
    arr.local().set(0, arr.local().get(0)); // a view is usable alongside

    // Collectives.
    let mut v = [me as u64 + 1, 10 * me as u64];
    pg.allreduce(&mut v, Op::Sum)?;
    let s: u64 = (1..=n as u64).sum();
    let s10: u64 = (0..n as u64).map(|r| 10 * r).sum();
    expect(&v, &[s, s10], "allreduce sum", me)?;
    let mut f = [me as f64 * 0.5];
    pg.allreduce(&mut f, Op::Max)?;
    if f[0] != (n - 1) as f64 * 0.5 {
        return Err(fail("allreduce max".into()));
    }
    let mut big: Vec<u32> = (0..100_000u32).map(|i| i ^ me as u32).collect();
    pg.reduce(n - 1, &mut big, Op::BitXor)?;
    if me == n - 1 {
        let x = (0..n as u32).fold(0, |a, r| a ^ r);
        let ok = big
            .iter()
            .enumerate()
            .all(|(i, &b)| b == if n % 2 == 1 { i as u32 ^ x } else { x });
        if !ok {
            return Err(fail("reduce bitxor over several scratch chunks".into()));
        }
    }
    let mut bc: Vec<u8> = if me == 0 {
        (0..700_000).map(|i| (i % 251) as u8).collect()
    } else {
        vec![0; 700_000]
    };
    pg.broadcast(0, &mut bc)?;
    if bc.iter().enumerate().any(|(i, &b)| b != (i % 251) as u8) {
        return Err(fail("broadcast over several scratch chunks".into()));
    }
    pg.barrier_notify()?;
    pg.barrier_wait()?;

    println!(
        "pgas model ok ({:?} path): {checked} elements checked",
        pg.rma_path()
    );
    pg.finish()
}

fn arr_ptr<T: splitrt::pgas::Pod>(
    _pg: &Pgas,
    a: &splitrt::pgas::SymArray<T>,
    rank: usize,
    i: usize,
) -> GlobalPtr<T> {
    a.at(rank, i)
}

fn expect(got: &[u64], want: &[u64], what: &str, t: usize) -> splitrt::Result<()> {
    if got != want {
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(fail(format!(
            "{what} from rank {t}: element {i} is {:#x}, model says {:#x}",
            got.get(i).copied().unwrap_or(0),
            want.get(i).copied().unwrap_or(0)
        )));
    }
    Ok(())
}

/// Atomics conformance: every operation of [`splitrt::pgas::Atomics`] on
/// every type, under contention from all ranks, checked against a
/// sequential model (final values; fetched values where they determine
/// atomicity), with the owner mixing local hardware atomics on its view
/// with the ranks' remote ones on the same word, signed vs unsigned
/// min/max, float add/min/max with NaN and signed zeros, and refused bad
/// pointers (misaligned, out of range, reserved, frozen) naming the rank.
pub fn atomics_conformance(pg: &Pgas) -> splitrt::Result<()> {
    let n = pg.size();
    // per rank per phase; fewer on many ranks (CI time)
    let m: u64 = if n > 4 { 24 } else { 48 };
    int_suite::<u64>(pg, 0, false, m)?;
    int_suite::<i64>(pg, 1, true, m)?;
    int_suite::<u32>(pg, 2, false, m)?;
    int_suite::<i32>(pg, 3, true, m)?;
    float_suite::<f64>(pg, 0, m)?;
    float_suite::<f32>(pg, 1, m)?;
    bad_atomics(pg)?;
    Ok(())
}

fn check(ok: bool, what: impl FnOnce() -> String) -> splitrt::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(fail(what()))
    }
}

/// Sum and sum of squares of `olds` over all ranks equal those of
/// 0..total: with every rank's values strictly increasing, the fetched
/// values are (with overwhelming likelihood exactly) 0..total once each.
fn fetched_once_each(pg: &Pgas, olds: &[u64], total: u64, what: &str) -> splitrt::Result<()> {
    let mut s = [
        olds.iter().sum::<u64>(),
        olds.iter().map(|x| x * x).sum::<u64>(),
    ];
    pg.allreduce(&mut s, Op::Sum)?;
    let want = [
        (0..total).sum::<u64>(),
        (0..total).map(|x| x * x).sum::<u64>(),
    ];
    check(s == want && olds.windows(2).all(|w| w[0] < w[1]), || {
        format!("{what}: fetched values {s:?} are not 0..{total} once each ({want:?})")
    })
}

fn int_suite<T>(pg: &Pgas, t: usize, signed: bool, m: u64) -> splitrt::Result<()>
where
    T: splitrt::pgas::AtomicInt + PartialEq + std::fmt::Debug,
{
    let (me, n) = (pg.rank(), pg.size());
    let name = std::any::type_name::<T>();
    let bits = T::WIDTH * 8;
    let mask = if bits == 32 {
        u32::MAX as u64
    } else {
        u64::MAX
    };
    let v = |x: u64| T::from_bits(x & mask);
    let neg = |x: u64| T::from_bits(x.wrapping_neg() & mask);
    let at = pg.atomic();
    // words at `owner`: 0 fetch_add, 1 mixed arithmetic, 2 xor, 3 or/and,
    // 4 max, 5 min, 8 + r: rank r's own word
    let words = pg.alloc_sym::<T>(8 + n)?;
    let owner = (t + n - 1) % n;
    let w = |i: usize| words.at(owner, i);
    let total = n as u64 * m;
    if me == owner {
        at.store(w(1), v(1000))?;
        at.store(w(5), if signed { v(0) } else { v(mask) })?;
        pg.sync()?;
    }
    pg.barrier()?;

    // fetch_add(1): the fetched values are 0..n*m once each
    let mut olds = Vec::new();
    for _ in 0..m {
        olds.push(at.fetch_add(w(0), v(1))?.to_bits());
    }
    fetched_once_each(pg, &olds, total, &format!("{name} fetch_add"))?;

    // mixed arithmetic, fetching and not; the owner also adds 7 per step
    // through a hardware atomic on its local view of the same word
    let mut xor_acc = 0u64;
    let mut max_olds = Vec::new();
    for k in 0..m {
        match k % 8 {
            0 => at.inc(w(1))?,
            1 => {
                let _ = at.fetch_inc(w(1))?;
            }
            2 => at.dec(w(1))?,
            3 => {
                let _ = at.fetch_dec(w(1))?;
            }
            4 => at.add(w(1), v(5))?,
            5 => {
                let _ = at.fetch_add(w(1), v(5))?;
            }
            6 => at.sub(w(1), v(3))?,
            _ => {
                let _ = at.fetch_sub(w(1), v(3))?;
            }
        }
        if me == owner {
            local_add(&words, 1, 7);
        }
        // and every rank adds 2 through the owner's AM handler, whichever
        // path the job uses (on the native path: AM and native atomics on
        // one word); 0 is the add code, kind 1 signed, 0 unsigned
        let kind = u64::from(signed) << 8;
        pg.raw_atomic_for_tests(owner, [kind, T::WIDTH, w(1).offset(), 2, 0])?;
        let pat = (me as u64 + 1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(k as u32)
            & mask;
        xor_acc ^= pat;
        if k % 2 == 0 {
            at.xor(w(2), v(pat))?;
        } else {
            let _ = at.fetch_xor(w(2), v(pat))?;
        }
        // max: values me*m + k in a rank-dependent order; min: their
        // negatives (signed) or mask - them (unsigned)
        let x = me as u64 * m + (k * 7 + me as u64) % m;
        let lo = if signed { neg(x + 1) } else { v(mask - x) };
        if k % 2 == 0 {
            max_olds.push(at.fetch_max(w(4), v(x))?.to_bits());
            let _ = at.fetch_min(w(5), lo)?;
        } else {
            at.max(w(4), v(x))?;
            at.min(w(5), lo)?;
        }
    }
    // or / and: bit (me % (bits/2)) set, then the high half's bit cleared
    let bit = 1u64 << (me as u64 % (bits / 2));
    let high = bit << (bits / 2);
    let old = at.fetch_or(w(3), v(bit | high))?.to_bits();
    check(old & high == 0 || n as u64 > bits / 2, || {
        format!("{name} fetch_or: own bit {high:#x} already set in {old:#x}")
    })?;
    pg.sync()?;
    pg.barrier()?;
    let old = at.fetch_and(w(3), v(!high))?.to_bits();
    check(old & bit != 0, || {
        format!("{name} fetch_and: own bit {bit:#x} missing in {old:#x}")
    })?;
    at.or(w(3), v(bit))?;
    at.and(w(3), v(mask))?;
    check(
        max_olds.windows(2).all(|p| le(p[0], p[1], signed, bits)),
        || format!("{name} fetch_max: fetched values decrease {max_olds:?}"),
    )?;
    let mut x = [xor_acc];
    pg.allreduce(&mut x, Op::BitXor)?;

    // own word: load, store, swap, compare-swap; signed vs unsigned min/max
    let mine = words.at(owner, 8 + me);
    at.store(mine, v(5))?;
    pg.sync()?;
    check(at.load(mine)? == v(5), || {
        format!("{name} load after store")
    })?;
    check(at.swap(mine, v(9))? == v(5), || format!("{name} swap"))?;
    check(at.compare_swap(mine, v(9), v(11))? == v(9), || {
        format!("{name} compare_swap (match)")
    })?;
    check(at.compare_swap(mine, v(9), v(13))? == v(11), || {
        format!("{name} compare_swap (no match)")
    })?;
    // -1 is all ones: smaller than 11 signed, larger unsigned
    at.min(mine, v(mask))?;
    pg.sync()?;
    let want = if signed { v(mask) } else { v(11) };
    check(at.load(mine)? == want, || {
        format!("{name} min(11, all ones) signed={signed}")
    })?;
    check(at.fetch_max(mine, v(3))? == want, || {
        format!("{name} fetch_max old")
    })?;
    check(at.load(mine)? == v(if signed { 3 } else { 11 }), || {
        format!("{name} max(all ones or 11, 3) signed={signed}")
    })?;
    pg.sync()?;
    pg.barrier()?;

    if me == owner {
        let got = |i| at.load(w(i)).map(|x| x.to_bits());
        let c0 = got(0)?;
        check(c0 == total & mask, || {
            format!("{name} counter {c0}, want {total}")
        })?;
        let per_rank: u64 = (0..m)
            .map(|k| match k % 8 {
                0 | 1 => 1u64,
                2 | 3 => 1u64.wrapping_neg(),
                4 | 5 => 5,
                _ => 3u64.wrapping_neg(),
            })
            .fold(0, u64::wrapping_add);
        let want =
            (1000 + 7 * m).wrapping_add(per_rank.wrapping_add(2 * m).wrapping_mul(n as u64)) & mask;
        let c1 = got(1)?;
        check(c1 == want, || {
            format!("{name} mixed native + remote arithmetic {c1}, want {want}")
        })?;
        let c2 = got(2)?;
        check(c2 == x[0] & mask, || {
            format!("{name} xor {c2:#x}, want {:#x}", x[0])
        })?;
        let all_bits = (0..n as u64).fold(0, |a, r| a | 1 << (r % (bits / 2)));
        let c3 = got(3)?;
        check(c3 == all_bits, || {
            format!("{name} or/and {c3:#x}, want {all_bits:#x}")
        })?;
        let c4 = got(4)?;
        check(c4 == total - 1, || {
            format!("{name} max {c4}, want {}", total - 1)
        })?;
        let want_min = if signed {
            total.wrapping_neg() & mask
        } else {
            mask - (total - 1)
        };
        let c5 = got(5)?;
        check(c5 == want_min, || {
            format!("{name} min {c5:#x}, want {want_min:#x}")
        })?;
    }
    pg.barrier()
}

/// a <= b as `bits`-wide integers, signed or not.
fn le(a: u64, b: u64, signed: bool, bits: u64) -> bool {
    if !signed {
        return a <= b;
    }
    let s = |x: u64| ((x << (64 - bits)) as i64) >> (64 - bits);
    s(a) <= s(b)
}

/// A hardware fetch-add of `v` on element `i` of this rank's own part of
/// `words`, through its local view (not through splitrt's atomics).
fn local_add<T: splitrt::pgas::AtomicInt>(words: &splitrt::pgas::SymArray<T>, i: usize, v: u64) {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    let view = words.local();
    assert!(i < view.len());
    // SAFETY: an in-bounds element of this rank's mapped segment.
    let p = unsafe { view.as_ptr().add(i) };
    if T::WIDTH == 8 {
        // SAFETY: `p` is an 8-aligned element of the segment, alive while
        // `words` is; every access to it is atomic (splitrt's and ours).
        let a = unsafe { &*(p as *const AtomicU64) };
        a.fetch_add(v, Ordering::AcqRel);
    } else {
        // SAFETY: as above, a 4-aligned 32-bit element.
        let a = unsafe { &*(p as *const AtomicU32) };
        a.fetch_add(v as u32, Ordering::AcqRel);
    }
}

fn float_suite<T>(pg: &Pgas, t: usize, m: u64) -> splitrt::Result<()>
where
    T: splitrt::pgas::AtomicFloat + PartialEq + PartialOrd + std::fmt::Debug + Into<f64>,
{
    let (me, n) = (pg.rank(), pg.size());
    let name = std::any::type_name::<T>();
    let at = pg.atomic();
    let f = |x: f64| -> T {
        // exact for the small halves used here
        if T::WIDTH == 4 {
            T::from_bits((x as f32).to_bits() as u64)
        } else {
            T::from_bits(x.to_bits())
        }
    };
    let words = pg.alloc_sym::<T>(4 + n)?;
    let owner = t % n;
    let w = |i: usize| words.at(owner, i);
    let total = n as u64 * m;
    if me == owner {
        at.store(w(2), f(f64::INFINITY))?;
        at.store(w(1), f(f64::NEG_INFINITY))?;
        pg.sync()?;
    }
    pg.barrier()?;
    // fetch_add(0.5): the fetched values are 0, 0.5, ... once each
    let mut olds = Vec::new();
    for k in 0..m {
        let x = me as u64 * m + (k * 5 + me as u64) % m;
        if k % 2 == 0 {
            olds.push((at.fetch_add(w(0), f(0.5))?.into() * 2.0) as u64);
            let _ = at.fetch_max(w(1), f(x as f64))?;
            at.min(w(2), f(-(x as f64)))?;
        } else {
            at.add(w(0), f(0.5))?;
            at.max(w(1), f(x as f64))?;
            let _ = at.fetch_min(w(2), f(-(x as f64)))?;
        }
    }
    pg.sync()?;
    pg.barrier()?;
    let mut s = [olds.iter().sum::<u64>(), olds.len() as u64];
    pg.allreduce(&mut s, Op::Sum)?;
    check(
        s[1] == total / 2
            && olds.iter().all(|&o| o < total)
            && olds.windows(2).all(|w| w[0] < w[1]),
        || format!("{name} fetch_add: {} fetched values", s[1]),
    )?;
    // own word: NaN and signed zeros follow f64::min / max
    let mine = words.at(owner, 4 + me);
    at.store(mine, f(f64::NAN))?;
    pg.sync()?;
    check(at.fetch_min(mine, f(2.0))?.into().is_nan(), || {
        format!("{name} NaN in the word")
    })?;
    check(at.load(mine)? == f(2.0), || {
        format!("{name} min(NaN, 2) is 2")
    })?;
    at.max(mine, f(f64::NAN))?;
    pg.sync()?;
    check(at.load(mine)? == f(2.0), || {
        format!("{name} max(2, NaN) is 2")
    })?;
    at.store(mine, f(0.0))?;
    at.min(mine, f(-0.0))?;
    pg.sync()?;
    check(at.load(mine)?.into() == 0.0, || {
        format!("{name} min(0, -0) is a zero")
    })?;
    check(at.compare_swap(mine, f(1.0), f(3.0))?.into() == 0.0, || {
        format!("{name} compare_swap (no match)")
    })?;
    let z = at.load(mine)?;
    check(at.compare_swap(mine, z, f(3.0))? == z, || {
        format!("{name} compare_swap (match, on the bits)")
    })?;
    check(at.swap(mine, f(1.5))? == f(3.0), || format!("{name} swap"))?;
    pg.barrier()?;
    if me == owner {
        let sum = at.load(w(0))?.into();
        check(sum == total as f64 * 0.5, || {
            format!("{name} sum {sum}, want {}", total as f64 * 0.5)
        })?;
        let mx = at.load(w(1))?.into();
        check(mx == (total - 1) as f64, || format!("{name} max {mx}"))?;
        let mn = at.load(w(2))?.into();
        check(mn == -((total - 1) as f64), || format!("{name} min {mn}"))?;
    }
    pg.barrier()
}

/// Refused atomics: misaligned, out of range, reserved area, no such
/// rank, frozen, for fetching and non-fetching forms; each an error at
/// the caller naming it, the word unchanged. Then forged requests (an
/// unknown operation, a bad width, address or a frozen word) straight to
/// the handler, as a broken peer could send: refused with the cause.
fn bad_atomics(pg: &Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let at = pg.atomic();
    let right = (me + 1) % n;
    let a = pg.alloc_sym::<u64>(2)?;
    let seg = pg.endpoint().segment_len() as u64;
    let cases: Vec<(&str, GlobalPtr<u64>)> = vec![
        ("past the end", GlobalPtr::new(right, seg)),
        ("misaligned", a.ptr(right).cast::<u8>().add(4).cast()),
        ("reserved area", GlobalPtr::new(right, 8)),
        ("no such rank", GlobalPtr::new(n, a.ptr(0).offset())),
    ];
    for (what, p) in cases {
        let p32: GlobalPtr<u32> = p.cast::<u8>().add(2).cast();
        let p32 = if what == "past the end" || what == "reserved area" {
            p.cast()
        } else {
            p32
        };
        let errs = [
            at.fetch_xor(p, 1).err(),
            at.xor(p, 1).err(),
            at.load(p).err(),
            at.fetch_add(p.cast::<f64>(), 1.0).err(),
            at.min(p32, 1u32).err(),
        ];
        for e in errs {
            let Some(e) = e else {
                return Err(fail(format!("atomic, {what}: accepted")));
            };
            check(e.rank() == Some(me), || format!("atomic, {what}: {e}"))?;
        }
    }
    // what a broken or hostile peer could send the atomic handler: each
    // refused with its cause, naming the refusing rank; it survives
    let off = a.ptr(right).offset();
    let forged: [(&str, [u64; 5], &str); 9] = [
        ("unknown code", [0xff, 8, off, 1, 0], "unknown operation"),
        ("huge code", [u64::MAX, 8, off, 1, 0], "unknown operation"),
        ("unknown kind", [7 << 8, 8, off, 1, 0], "unknown operation"),
        (
            "xor on a float",
            [4 | 2 << 8, 8, off, 1, 0],
            "unknown operation",
        ),
        ("width 3", [0, 3, off, 1, 0], "width is not 4 or 8"),
        ("width 16", [0, 16, off, 1, 0], "width is not 4 or 8"),
        ("misaligned", [0, 8, off + 4, 1, 0], "misaligned"),
        ("reserved area", [0, 8, 8, 1, 0], "reserved first bytes"),
        ("past the end", [0, 8, u64::MAX - 3, 1, 0], "out of range"),
    ];
    for (what, args, cause) in forged {
        let r = pg.raw_atomic_for_tests(right, args);
        let Err(e) = r else {
            return Err(fail(format!("forged atomic, {what}: accepted ({r:?})")));
        };
        let msg = e.to_string();
        check(
            msg.contains(cause) && msg.contains(&format!("rank {right} refused")),
            || format!("forged atomic, {what}: {msg}"),
        )?;
    }
    let frozen = pg.freeze(a)?;
    let r = pg.raw_atomic_for_tests(right, [0, 8, frozen.ptr(right).offset(), 1, 0]);
    check(
        r.as_ref()
            .is_err_and(|e| e.to_string().contains("frozen array")),
        || format!("forged atomic into a frozen array: {r:?}"),
    )?;
    for e in [
        at.fetch_add(frozen.ptr(right), 1).err(),
        at.max(frozen.ptr(right), 1).err(),
    ] {
        let Some(e) = e else {
            return Err(fail("atomic into a frozen array: accepted".into()));
        };
        check(
            e.to_string().contains("frozen") && e.rank() == Some(me),
            || format!("atomic into a frozen array: {e}"),
        )?;
    }
    let a = pg.thaw(frozen)?;
    pg.sync()?;
    pg.barrier()?;
    check(at.load(a.ptr(right))? == 0, || {
        "a refused atomic changed memory".into()
    })?;
    pg.barrier()
}
