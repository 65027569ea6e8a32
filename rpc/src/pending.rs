//! The caller's table of calls in flight: one slot per call, named on the
//! wire by a call id (generation in the high 32 bits, slot index in the
//! low 32), so a late or forged result for a reused slot is ignored.
//! Bounded: at most [`MAX_OUTSTANDING`] calls whose futures live.

use crate::fast::FAST_BYTES;
use crate::wire::Status;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

/// Most calls whose futures are alive at once (per [`Rpc`](crate::Rpc)).
pub const MAX_OUTSTANDING: usize = 1 << 16;

/// A result's bytes: small ones (most results) without an allocation.
pub(crate) enum Bytes {
    /// At most [`INLINE`] bytes.
    Inline(u8, [u8; INLINE]),
    /// Longer.
    Heap(Vec<u8>),
    /// The result of an `rpc:short_result` (its words' bytes as they
    /// came, the first `len` meant: no copy of a variable length).
    Short(u8, [u8; FAST_BYTES]),
}

/// Bytes a result keeps inline.
const INLINE: usize = 32;

impl Bytes {
    fn of(b: &[u8]) -> Bytes {
        if b.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..b.len()].copy_from_slice(b);
            Bytes::Inline(b.len() as u8, a)
        } else {
            Bytes::Heap(b.to_vec())
        }
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline(n, a) => &a[..*n as usize],
            Bytes::Heap(v) => v,
            Bytes::Short(n, a) => &a[..usize::from(*n).min(FAST_BYTES)],
        }
    }
}

/// Where a call is.
enum State {
    /// Buffered or sent, no result yet.
    Waiting,
    /// The target holds the result for a fetch.
    Held,
    /// The result (or what went wrong) arrived.
    Done(Status, Bytes),
    /// Its future was dropped; the slot is freed when the result arrives
    /// (never, if the target died: one slot lost).
    Abandoned,
}

struct Slot {
    gen: u32,
    state: Option<State>,
    waker: Option<Waker>,
}

/// What [`Slots::poll`] found.
pub(crate) enum Polled {
    /// Nothing yet (the waker, if given, is registered).
    Waiting,
    /// The target holds the result: fetch it (the slot waits again).
    Held,
    /// The result, and the slot is free again.
    Done(Status, Bytes),
}

/// The slots (behind the caller's lock).
#[derive(Default)]
pub(crate) struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slots {
    /// A fresh call id, or `None` when [`MAX_OUTSTANDING`] calls live.
    pub(crate) fn alloc(&mut self) -> Option<u64> {
        let i = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_OUTSTANDING => {
                self.slots.push(Slot {
                    gen: 0,
                    state: None,
                    waker: None,
                });
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let s = &mut self.slots[i as usize];
        s.state = Some(State::Waiting);
        Some(u64::from(s.gen) << 32 | u64::from(i))
    }

    fn get(&mut self, call: u64) -> Option<&mut Slot> {
        let s = self.slots.get_mut((call & 0xffff_ffff) as usize)?;
        (s.gen == (call >> 32) as u32 && s.state.is_some()).then_some(s)
    }

    fn release(&mut self, call: u64) {
        let i = (call & 0xffff_ffff) as u32;
        if let Some(s) = self.get(call) {
            s.state = None;
            s.waker = None;
            s.gen = s.gen.wrapping_add(1);
            self.free.push(i);
        }
    }

    /// A result arrived for `call` (from the target; ignored unless the
    /// call waits for one). Returns the waker to wake after the lock.
    pub(crate) fn complete(&mut self, call: u64, status: Status, bytes: &[u8]) -> Option<Waker> {
        self.complete_as(call, status, || Bytes::of(bytes))
    }

    /// [`complete`](Self::complete) with the bytes made by `bytes` (only
    /// when they are kept).
    #[inline]
    pub(crate) fn complete_as(
        &mut self,
        call: u64,
        status: Status,
        bytes: impl FnOnce() -> Bytes,
    ) -> Option<Waker> {
        let s = self.get(call)?;
        match s.state {
            Some(State::Waiting) => {}
            Some(State::Abandoned) if status != Status::Held => {
                self.release(call);
                return None;
            }
            _ => return None,
        }
        s.state = Some(match status {
            Status::Held => State::Held,
            _ => State::Done(status, bytes()),
        });
        s.waker.take()
    }

    #[cfg(test)]
    /// Whether `call` has something for its waiter (a result, or a held
    /// result to fetch); an unknown call id counts as ready (its waiter
    /// finds out in [`poll`](Self::poll)).
    pub(crate) fn ready(&mut self, call: u64) -> bool {
        !matches!(
            self.get(call).and_then(|s| s.state.as_ref()),
            Some(State::Waiting)
        )
    }

    /// Take `call`'s result if it arrived (freeing the slot), else
    /// register `waker`.
    pub(crate) fn poll(&mut self, call: u64, waker: Option<&Waker>) -> Polled {
        let Some(s) = self.get(call) else {
            return Polled::Done(Status::Unknown, Bytes::of(b"the call is not in flight"));
        };
        match s.state.take() {
            Some(State::Done(st, bytes)) => {
                // released here (as `release`, the state already taken)
                s.waker = None;
                s.gen = s.gen.wrapping_add(1);
                self.free.push((call & 0xffff_ffff) as u32);
                Polled::Done(st, bytes)
            }
            Some(State::Held) => {
                s.state = Some(State::Waiting);
                Polled::Held
            }
            other => {
                s.state = other;
                if let Some(w) = waker {
                    if !s.waker.as_ref().is_some_and(|old| old.will_wake(w)) {
                        s.waker = Some(w.clone());
                    }
                }
                Polled::Waiting
            }
        }
    }

    /// The future of `call` is gone: free its slot now if its result is
    /// in (or will never come), else when it comes.
    pub(crate) fn abandon(&mut self, call: u64) {
        let Some(s) = self.get(call) else { return };
        match s.state {
            Some(State::Waiting) => {
                s.state = Some(State::Abandoned);
                s.waker = None;
            }
            _ => self.release(call),
        }
    }

    /// Calls whose futures live.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// The slots behind their lock, and a count of the results that arrived,
/// readable without the lock: a waiter checks the slot again only when
/// the count moved (one atomic load per spin instead of a lock).
#[derive(Default)]
pub(crate) struct Pending {
    slots: parking_lot::Mutex<Slots>,
    /// Results (and held notices) stored, bumped under the lock.
    arrived: AtomicU64,
}

impl Pending {
    /// The slots.
    #[inline]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, Slots> {
        self.slots.lock()
    }

    /// Results stored so far: if it did not move since a check of a slot
    /// found it waiting, the slot still waits.
    #[inline]
    pub(crate) fn arrived(&self) -> u64 {
        self.arrived.load(Ordering::Acquire)
    }

    /// [`Slots::complete`] under the lock, counted; the waker to wake.
    #[inline]
    pub(crate) fn complete(&self, call: u64, status: Status, bytes: &[u8]) -> Option<Waker> {
        let mut s = self.slots.lock();
        let w = s.complete(call, status, bytes);
        self.bump();
        w
    }

    /// [`complete`](Self::complete) for an `rpc:short_result`: the bytes
    /// of its words, `len` of them meant (at most [`FAST_BYTES`]).
    #[inline]
    pub(crate) fn complete_short(
        &self,
        call: u64,
        status: Status,
        bytes: [u8; FAST_BYTES],
        len: usize,
    ) -> Option<Waker> {
        let mut s = self.slots.lock();
        let w = s.complete_as(call, status, || {
            Bytes::Short(len.min(FAST_BYTES) as u8, bytes)
        });
        self.bump();
        w
    }

    /// Count results stored by [`Slots::complete`]: call it holding the
    /// lock, after them (so a load and a store, no read-modify-write:
    /// every writer holds the lock).
    #[inline]
    pub(crate) fn bump(&self) {
        let n = self.arrived.load(Ordering::Relaxed);
        self.arrived.store(n.wrapping_add(1), Ordering::Release);
    }

    /// [`Slots::poll`] (no waker) under the lock, only when results
    /// arrived since `*seen` (updated when still waiting).
    #[inline]
    pub(crate) fn poll_if_arrived(&self, call: u64, seen: &mut u64) -> Polled {
        let now = self.arrived();
        if now == *seen {
            return Polled::Waiting;
        }
        let p = self.slots.lock().poll(call, None);
        if let Polled::Waiting = p {
            *seen = now;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_with_a_new_generation() {
        let mut s = Slots::default();
        let a = s.alloc().unwrap();
        assert!(s.complete(a, Status::Ok, b"x").is_none());
        assert!(matches!(s.poll(a, None), Polled::Done(Status::Ok, ref b) if b.as_slice() == b"x"));
        let b = s.alloc().unwrap();
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff);
        assert_ne!(a, b);
        // a late result for the old call id is ignored
        s.complete(a, Status::Ok, b"late");
        assert!(matches!(s.poll(b, None), Polled::Waiting));
        assert_eq!(s.live(), 1);
    }

    #[test]
    fn abandoned_slots_free_when_their_result_comes() {
        let mut s = Slots::default();
        let a = s.alloc().unwrap();
        s.abandon(a);
        assert_eq!(s.live(), 1);
        s.complete(a, Status::Ok, b"");
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn held_then_done() {
        let mut s = Slots::default();
        let a = s.alloc().unwrap();
        s.complete(a, Status::Held, b"");
        assert!(s.ready(a));
        assert!(matches!(s.poll(a, None), Polled::Held));
        assert!(!s.ready(a));
        s.complete(a, Status::Ok, b"v");
        assert!(matches!(s.poll(a, None), Polled::Done(Status::Ok, _)));
    }

    #[test]
    fn bounded() {
        let mut s = Slots::default();
        for _ in 0..MAX_OUTSTANDING {
            s.alloc().unwrap();
        }
        assert!(s.alloc().is_none());
    }
}
