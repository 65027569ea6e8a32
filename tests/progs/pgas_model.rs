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
