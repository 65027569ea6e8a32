//! loom models of the shared-memory fabric's lock-free protocols
//! (`RUSTFLAGS="--cfg loom" cargo test -p splitrt-runtime --release --lib
//! loom`). The real code works on raw memory of a mapped file, which loom
//! cannot watch; each model restates a protocol over loom's atomics and
//! cells with the real code's ordering constants (`ring::order`,
//! `doorbell::order`), so weakening an ordering there fails a model here.

use super::doorbell::order as bell_order;
use super::ring::order;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;

/// A ring of `len` one-word cells as `ring.rs` runs it: sequence words
/// (cell `n % len` holds packet `n` once its word is `n + 1`), the cells,
/// and the consumer's published tail.
struct Ring {
    seq: Vec<AtomicU64>,
    cells: Vec<UnsafeCell<u64>>,
    tail: AtomicU64,
    len: u64,
}

impl Ring {
    fn new(len: u64) -> Ring {
        Ring {
            seq: (0..len).map(|_| AtomicU64::new(0)).collect(),
            cells: (0..len).map(|_| UnsafeCell::new(0)).collect(),
            tail: AtomicU64::new(0),
            len,
        }
    }
}

/// The producer's side (`ring::Producer`): head and cached tail.
struct Producer {
    ring: Arc<Ring>,
    head: u64,
    cached_tail: u64,
}

impl Producer {
    /// `has_room`, `write`, `publish`: false when the ring is full.
    fn push(&mut self, v: u64) -> bool {
        let r = &self.ring;
        if self.head - self.cached_tail >= r.len {
            self.cached_tail = r.tail.load(order::READ_CREDIT);
            if self.head - self.cached_tail >= r.len {
                return false;
            }
        }
        let i = (self.head % r.len) as usize;
        // loom checks that this write happens after every read of the cell
        // by the consumer (the credit return orders them)
        r.cells[i].with_mut(|p| {
            // SAFETY: loom's cell; loom itself reports a concurrent access.
            unsafe { *p = v }
        });
        r.seq[i].store(self.head + 1, order::PUBLISH);
        self.head += 1;
        true
    }
}

/// The consumer's side (`ring::Consumer`): `peek`, use in place, `release`.
fn pop(r: &Ring, tail: &mut u64) -> Option<u64> {
    let i = (*tail % r.len) as usize;
    if r.seq[i].load(order::OBSERVE) != *tail + 1 {
        return None;
    }
    // loom checks that this read happens after the producer's write
    let v = r.cells[i].with(|p| {
        // SAFETY: loom's cell; loom itself reports a concurrent access.
        unsafe { *p }
    });
    *tail += 1;
    r.tail.store(*tail, order::RETURN_CREDIT);
    Some(v)
}

/// Run a producer of `n` values into a ring of `len` cells against a
/// consumer; every value arrives, in order, with its contents.
fn ring_model(len: u64, n: u64) {
    loom::model(move || {
        let ring = Arc::new(Ring::new(len));
        let mut p = Producer {
            ring: ring.clone(),
            head: 0,
            cached_tail: 0,
        };
        let t = loom::thread::spawn(move || {
            for v in 1..=n {
                while !p.push(v * 11) {
                    loom::thread::yield_now();
                }
            }
        });
        let mut tail = 0;
        let mut got = Vec::new();
        while (got.len() as u64) < n {
            match pop(&ring, &mut tail) {
                Some(v) => got.push(v),
                None => loom::thread::yield_now(),
            }
        }
        t.join().unwrap();
        assert_eq!(got, (1..=n).map(|v| v * 11).collect::<Vec<_>>());
    });
}

/// Publish / consume: a consumer that sees a cell's sequence word sees
/// the cell's contents (fails if `order::PUBLISH` or `order::OBSERVE` is
/// weakened to `Relaxed`: a causality violation on the cell).
#[test]
fn loom_ring_publish_then_consume() {
    ring_model(4, 2);
}

/// The credit return: a producer reuses a cell only after the consumer's
/// read of it (a 2-cell ring, 3 packets: the third reuses cell 0; fails if
/// `order::RETURN_CREDIT` or `order::READ_CREDIT` is weakened to
/// `Relaxed`).
#[test]
fn loom_ring_credit_return() {
    ring_model(2, 3);
}

/// The doorbell (`doorbell.rs`): a waker publishes work, then looks at
/// `sleepers` and bumps `bell` only if someone sleeps; a sleeper announces
/// itself, reads `bell`, looks for work once more and waits on the futex
/// while `bell` still holds what it read. A futex wait compares and sleeps
/// atomically and a wake after the bump ends it, so the sleeper is woken by
/// the bell exactly when the bump came after its read of `bell`.
///
/// What the code guarantees, checked here over every interleaving: a
/// waker that sees the sleeper never loses it (either the sleeper finds
/// the work or its wait ends at the bell). Fails if `bell_order::BUMP` or
/// `bell_order::SNAPSHOT` is weakened to `Relaxed`.
///
/// What it does not: the waker's look is unfenced (`bell_order::LOOK`),
/// so it can miss a sleeper that is about to find no work (store
/// buffering); then only the bounded wait (`WAIT_LIMIT`, 2 ms) ends the
/// sleep. The model shows that outcome is reachable, which is why every
/// wait is bounded.
#[test]
fn loom_doorbell_a_seen_sleeper_is_never_lost() {
    use std::sync::atomic::AtomicUsize as StdCount;
    static MISSED: StdCount = StdCount::new(0);
    loom::model(|| {
        let work = Arc::new(AtomicU64::new(0));
        let sleepers = Arc::new(AtomicU32::new(0));
        let bell = Arc::new(AtomicU32::new(0));
        let (w, s, b) = (work.clone(), sleepers.clone(), bell.clone());
        let waker = loom::thread::spawn(move || {
            // a packet in the sleeper's ring (the ring's publish), then
            // `Doorbell::ring`
            w.store(1, order::PUBLISH);
            if s.load(bell_order::LOOK) != 0 {
                b.fetch_add(1, bell_order::BUMP);
                return true;
            }
            false
        });
        // `Doorbell::wait_capped`
        sleepers.fetch_add(1, bell_order::ANNOUNCE);
        let seq = bell.load(bell_order::SNAPSHOT);
        let found_work = work.load(order::OBSERVE) != 0;
        let rung = waker.join().unwrap();
        let woken_by_the_bell = bell.load(Ordering::Relaxed) != seq;
        let asleep_until_the_limit = !found_work && !woken_by_the_bell;
        assert!(
            !(rung && asleep_until_the_limit),
            "the waker saw the sleeper, yet it sleeps until the limit"
        );
        if asleep_until_the_limit {
            MISSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        MISSED.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the unfenced look never missed a sleeper: the model no longer explores store buffering"
    );
}
