//! The caller's table of calls in flight: one slot per call, named on the
//! wire by a call id (generation in the high 32 bits, slot index in the
//! low 32), so a late or forged result for a reused slot is ignored.
//! Bounded: at most [`MAX_OUTSTANDING`] calls whose futures live.
//!
//! No lock: each slot is a [`Slot`] (an atomic state word, the result in
//! place, a waker register), allocated in chunks as calls need them, and
//! the free ones are on a lock-free stack.

use crate::fast::FAST_BYTES;
use crate::slot::{Completed, FreeStack, Kept, Slot, Taken};
use crate::wire::Status;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
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
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline(n, a) => &a[..*n as usize],
            Bytes::Heap(v) => v,
            Bytes::Short(n, a) => &a[..usize::from(*n).min(FAST_BYTES)],
        }
    }
}

/// What [`Pending::poll`] found.
pub(crate) enum Polled<R> {
    /// Nothing yet (the waker, if given, is registered).
    Waiting,
    /// The target holds the result: fetch it (the slot waits again).
    Held,
    /// What the reader made of the result; the slot is free again.
    Done(R),
}

/// Slots per chunk (a chunk is allocated when a call first needs it).
const CHUNK: usize = 256;

/// A slot's result: the status and the bytes, kept in place.
pub(crate) struct Res {
    status: Status,
    bytes: Bytes,
}

impl Default for Res {
    fn default() -> Self {
        Res {
            status: Status::Unknown,
            bytes: Bytes::Short(0, [0; FAST_BYTES]),
        }
    }
}

impl Kept for Res {
    #[inline]
    fn clear(&mut self) {
        if let Bytes::Heap(_) = self.bytes {
            self.bytes = Bytes::Short(0, [0; FAST_BYTES]);
        }
    }
}

/// [`CHUNK`] slots, allocated when a call first needs one of them.
type Chunk = OnceLock<Box<[Slot<Res>]>>;

/// The slots of the calls in flight.
pub(crate) struct Pending {
    chunks: Box<[Chunk]>,
    free: FreeStack,
    /// The slot freed last (index + 1; 0 for none), outside the stack: a
    /// call waited on before the next is made takes it back with one
    /// exchange, no stack operation.
    hot: AtomicU32,
    /// Slots handed out so far (the first `fresh` exist), at most
    /// [`MAX_OUTSTANDING`].
    fresh: AtomicU32,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            chunks: (0..MAX_OUTSTANDING / CHUNK)
                .map(|_| OnceLock::new())
                .collect(),
            free: FreeStack::default(),
            hot: AtomicU32::new(0),
            fresh: AtomicU32::new(0),
        }
    }
}

impl Pending {
    #[inline]
    fn slot(&self, i: u32) -> Option<&Slot<Res>> {
        let i = i as usize;
        self.chunks.get(i / CHUNK)?.get()?.get(i % CHUNK)
    }

    /// The slot of call id `call`, and its index.
    #[inline]
    fn slot_of(&self, call: u64) -> Option<(u32, &Slot<Res>)> {
        let i = call as u32;
        Some((i, self.slot(i)?))
    }

    /// Slot `i` is free (its state stored `FREE`): keep it as the hot
    /// one, the one kept before goes on the stack.
    #[inline]
    fn release(&self, i: u32) {
        // AcqRel: the slot's FREE state goes with it to the next taker
        let old = self.hot.swap(i + 1, Ordering::AcqRel);
        if let Some(o) = old.checked_sub(1) {
            if let Some(os) = self.slot(o) {
                self.free.push(o, os);
            }
        }
    }

    /// A fresh call id, or `None` when [`MAX_OUTSTANDING`] calls live.
    #[inline(always)] // one call site, on every call's path
    pub(crate) fn alloc(&self) -> Option<u64> {
        if let Some(h) = self.hot.swap(0, Ordering::AcqRel).checked_sub(1) {
            if let Some(s) = self.slot(h) {
                return Some(s.start(h));
            }
        }
        if let Some((i, s)) = self.free.pop(|i| self.slot(i)) {
            return Some(s.start(i));
        }
        // a slot never used yet
        let mut i = self.fresh.load(Ordering::Relaxed);
        loop {
            if i as usize >= MAX_OUTSTANDING {
                return None;
            }
            match self
                .fresh
                .compare_exchange_weak(i, i + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => i = now,
            }
        }
        let chunk = self.chunks[i as usize / CHUNK]
            .get_or_init(|| (0..CHUNK).map(|_| Slot::default()).collect());
        Some(chunk[i as usize % CHUNK].start(i))
    }

    /// A result arrived for `call` (from the target; ignored unless the
    /// call waits for one). Returns the waker to wake.
    #[inline]
    pub(crate) fn complete(&self, call: u64, status: Status, bytes: &[u8]) -> Option<Waker> {
        self.complete_as(call, status, || Bytes::of(bytes))
    }

    /// [`complete`](Self::complete) with the bytes made by `bytes` (only
    /// when they are kept).
    #[inline]
    pub(crate) fn complete_as(
        &self,
        call: u64,
        status: Status,
        bytes: impl FnOnce() -> Bytes,
    ) -> Option<Waker> {
        let (i, s) = self.slot_of(call)?;
        let write = |r: &mut Res| {
            r.status = status;
            r.bytes = bytes();
        };
        match s.complete(call, status == Status::Held, write) {
            Completed::Stored(w) => w,
            Completed::Freed => {
                self.release(i);
                None
            }
            Completed::Ignored => None,
        }
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
        self.complete_as(call, status, || {
            Bytes::Short(len.min(FAST_BYTES) as u8, bytes)
        })
    }

    /// The slot of `call`, for a waiter to look at its state word again
    /// and again ([`Slot::ready`]) without looking it up each time.
    #[inline]
    pub(crate) fn watch(&self, call: u64) -> Option<&Slot<Res>> {
        self.slot(call as u32)
    }

    #[cfg(test)]
    /// Whether `call` has something for its waiter (a result, or a held
    /// result to fetch); an unknown call id counts as ready (its waiter
    /// finds out in [`poll`](Self::poll)).
    pub(crate) fn ready(&self, call: u64) -> bool {
        self.slot_of(call).is_none_or(|(_, s)| s.ready(call))
    }

    /// Read `call`'s result with `read` where it lies if it arrived
    /// (freeing the slot), else register `waker`. Only the call's owner
    /// (its future) polls it.
    #[inline]
    pub(crate) fn poll<R>(
        &self,
        call: u64,
        waker: Option<&Waker>,
        read: impl FnOnce(Status, &[u8]) -> R,
    ) -> Polled<R> {
        let Some((i, s)) = self.slot_of(call) else {
            return Polled::Done(not_in_flight(read));
        };
        let read = |r: Option<&Res>| match r {
            Some(r) => read(r.status, r.bytes.as_slice()),
            None => not_in_flight(read),
        };
        match s.poll(call, waker, read) {
            Taken::Waiting => Polled::Waiting,
            Taken::Held => Polled::Held,
            Taken::Done(v) => {
                self.release(i);
                Polled::Done(v)
            }
            Taken::Unknown(v) => Polled::Done(v),
        }
    }

    /// The future of `call` is gone: free its slot now if its result is
    /// in (or will never come), else when it comes.
    pub(crate) fn abandon(&self, call: u64) {
        if let Some((i, s)) = self.slot_of(call) {
            if s.abandon(call) {
                self.release(i);
            }
        }
    }

    /// Calls whose futures live (or whose results are still to come).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        (0..self.fresh.load(Ordering::Relaxed))
            .filter(|&i| self.slot(i).is_some_and(|s| s.busy()))
            .count()
    }
}

#[cold]
fn not_in_flight<R>(read: impl FnOnce(Status, &[u8]) -> R) -> R {
    read(Status::Unknown, b"the call is not in flight")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(st: Status, b: &[u8]) -> (Status, Vec<u8>) {
        (st, b.to_vec())
    }

    #[test]
    fn slots_are_reused_with_a_new_generation() {
        let s = Pending::default();
        let a = s.alloc().unwrap();
        assert!(s.complete(a, Status::Ok, b"x").is_none());
        assert!(matches!(s.poll(a, None, both), Polled::Done((Status::Ok, ref b)) if b == b"x"));
        let b = s.alloc().unwrap();
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff);
        assert_ne!(a, b);
        // a late result for the old call id is ignored
        s.complete(a, Status::Ok, b"late");
        assert!(matches!(s.poll(b, None, both), Polled::Waiting));
        assert_eq!(s.live(), 1);
    }

    #[test]
    fn abandoned_slots_free_when_their_result_comes() {
        let s = Pending::default();
        let a = s.alloc().unwrap();
        s.abandon(a);
        assert_eq!(s.live(), 1);
        s.complete(a, Status::Ok, b"");
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn held_then_done() {
        let s = Pending::default();
        let a = s.alloc().unwrap();
        s.complete(a, Status::Held, b"");
        assert!(s.ready(a));
        assert!(matches!(s.poll(a, None, both), Polled::Held));
        assert!(!s.ready(a));
        s.complete(a, Status::Ok, b"v");
        assert!(matches!(
            s.poll(a, None, both),
            Polled::Done((Status::Ok, _))
        ));
    }

    #[test]
    fn bounded() {
        let s = Pending::default();
        for _ in 0..MAX_OUTSTANDING {
            s.alloc().unwrap();
        }
        assert!(s.alloc().is_none());
    }
}
