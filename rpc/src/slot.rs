//! One call's result slot without a lock, and the stack of free slots.
//!
//! A slot is an atomic state word (generation in the high 32 bits, the
//! phase in the low bits), the result kept in place (written by the one
//! completer that moved the slot from `WAITING` to `WRITING`, read by the
//! future's owner after it saw `DONE`), and an [`AtomicWaker`] for a
//! future that is `.await`ed. The generation is the call id's high half:
//! a late or forged result for a reused slot finds another generation and
//! is ignored.
//!
//! Phases and who moves them (every move a compare-exchange of the whole
//! word, so a stale generation never matches):
//!
//! * `FREE` -> `WAITING`: the allocator (the call);
//! * `WAITING` -> `WRITING` -> `DONE`: the completer (a result came);
//!   `WAITING` -> `HELD` (the target holds the result) -> `WAITING`: the
//!   completer, then the owner (who fetches it);
//! * `DONE` -> `FREE` (generation + 1): the owner, taking the result;
//! * `WAITING` -> `ABANDONED` -> `FREE`: the owner dropped its future, the
//!   completer frees the slot when the result comes; a drop during
//!   `WRITING` sets [`GONE`] and the completer frees the slot instead of
//!   publishing `DONE` (nobody waits for the writer).
//!
//! An owner that polls with a waker registers it, then sets [`REG`] (a
//! read-modify-write that returns the phase it looks at); a completer
//! that publishes `DONE` after that sees the flag and wakes the waker, one
//! that published it before is seen by the owner. Without the flag (a
//! blocking wait) the completer touches no waker.
//!
//! Both the real build and the loom model (`--cfg loom`, `models` below)
//! run this code: only the atomics, the cell and the waker come from
//! [`crate::sync`].

use crate::sync::{AtomicU32, AtomicU64, AtomicWaker, Ordering, UnsafeCell};
use std::task::Waker;

/// No call (on the free stack, or never used).
pub(crate) const FREE: u64 = 0;
/// A call waits for its result.
pub(crate) const WAITING: u64 = 1;
/// The target holds the result for a fetch.
pub(crate) const HELD: u64 = 2;
/// A completer writes the result.
pub(crate) const WRITING: u64 = 3;
/// The result is in.
pub(crate) const DONE: u64 = 4;
/// The future was dropped while the call waited.
pub(crate) const ABANDONED: u64 = 5;
/// Set on `WRITING` by a drop meanwhile: the writer frees the slot.
pub(crate) const GONE: u64 = 8;
/// Set by an owner that registered a waker (`.await`): only then does a
/// completer take it (a waited call's completion does no waker work).
pub(crate) const REG: u64 = 16;

const PHASE: u64 = 7;

#[inline]
fn word(gen: u32, phase: u64) -> u64 {
    u64::from(gen) << 32 | phase
}

#[inline]
fn gen_of(v: u64) -> u32 {
    (v >> 32) as u32
}

/// What a completion did.
#[derive(Debug)]
pub(crate) enum Completed {
    /// Stored (or a held notice): wake the waker, if any.
    Stored(Option<Waker>),
    /// The future was gone: the slot is free now (push it on the free stack).
    Freed,
    /// Not for a call that waits (late, duplicate or forged): nothing done.
    Ignored,
}

/// A result kept in a slot, in place: written by the completer, read by
/// the owner where it lies (no move out), then cleared.
pub(crate) trait Kept: Default {
    /// Drop what it holds on the heap, if anything (cheap otherwise).
    fn clear(&mut self);
}

impl Kept for u64 {
    fn clear(&mut self) {}
}

/// What the owner's poll found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken<T> {
    /// Nothing yet (the waker, if given, is registered).
    Waiting,
    /// The target holds the result: fetch it (the slot waits again).
    Held,
    /// What the owner's reader made of the result; the slot is free
    /// (push it on the free stack).
    Done(T),
    /// The call id is not in flight here: what the reader made of that
    /// (given no result).
    Unknown(T),
}

/// One call's slot.
pub(crate) struct Slot<T> {
    state: AtomicU64,
    /// The next slot on the free stack (index + 1; 0 for none).
    next: AtomicU32,
    result: UnsafeCell<T>,
    waker: AtomicWaker,
}

impl<T: Kept> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            state: AtomicU64::new(FREE),
            next: AtomicU32::new(0),
            result: UnsafeCell::new(T::default()),
            waker: AtomicWaker::new(),
        }
    }
}

// SAFETY: `result` is written only by the one thread that moved the state
// word to `WRITING` (a compare-exchange), and read or cleared only by the
// one owner after an Acquire load saw `DONE` (published with Release), or
// by the writer itself (`GONE`); every other field is atomic. So the cell
// is never accessed by two threads at once, and `T: Send` is enough for it
// to move between them.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T: Kept> Slot<T> {
    /// A slot just taken off the free stack (or never used) starts call
    /// `index` of its current generation: returns the call id.
    pub(crate) fn start(&self, index: u32) -> u64 {
        // Only the allocator holds a free slot: a plain store. Release: a
        // completer that learns the id (through the AM layer) sees WAITING.
        let gen = gen_of(self.state.load(Ordering::Relaxed));
        self.state.store(word(gen, WAITING), Ordering::Release);
        u64::from(gen) << 32 | u64::from(index)
    }

    /// A result for `call` came (`held`: the target holds it). `write`
    /// writes it in place, called only when the result is kept.
    #[inline]
    pub(crate) fn complete(&self, call: u64, held: bool, write: impl FnOnce(&mut T)) -> Completed {
        let gen = gen_of(call);
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if gen_of(cur) != gen {
                return Completed::Ignored;
            }
            let reg = cur & REG;
            let next = match cur & (PHASE | GONE) {
                WAITING if held => word(gen, HELD) | reg,
                WAITING => word(gen, WRITING) | reg,
                ABANDONED if !held => word(gen.wrapping_add(1), FREE),
                _ => return Completed::Ignored,
            };
            match self
                .state
                .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => match next & PHASE {
                    HELD => return Completed::Stored(self.waker_if(reg)),
                    FREE => return Completed::Freed,
                    _ => break,
                },
                Err(now) => cur = now,
            }
        }
        self.result.with_mut(|p| {
            // SAFETY: this thread moved the slot to WRITING: nobody else
            // touches the cell until it publishes DONE (or frees the slot).
            write(unsafe { &mut *p })
        });
        // WRITING -> DONE, keeping the flags the owner set meanwhile
        let was = self.state.fetch_add(DONE - WRITING, Ordering::AcqRel);
        if was & GONE == 0 {
            return Completed::Stored(self.waker_if(was & REG));
        }
        // the owner dropped its future meanwhile: the result is nobody's;
        // free the slot
        self.result.with_mut(|p| {
            // SAFETY: still this thread's: the owner marked it GONE and
            // left, nobody else reads a slot that is not its call's.
            unsafe { (*p).clear() }
        });
        self.state
            .store(word(gen.wrapping_add(1), FREE), Ordering::Release);
        Completed::Freed
    }

    /// The waker, if the owner registered one (`reg`: [`REG`] was set).
    #[inline]
    fn waker_if(&self, reg: u64) -> Option<Waker> {
        if reg == 0 {
            return None;
        }
        self.waker.take()
    }

    /// The owner of `call` looks for its result, and has it read by `read`
    /// in place (`None`: the call is not in flight); with `waker`,
    /// registers it when the result is not in.
    #[inline]
    pub(crate) fn poll<R>(
        &self,
        call: u64,
        waker: Option<&Waker>,
        read: impl FnOnce(Option<&T>) -> R,
    ) -> Taken<R> {
        let gen = gen_of(call);
        let cur = self.state.load(Ordering::Acquire);
        if gen_of(cur) != gen {
            return Taken::Unknown(read(None));
        }
        match cur & PHASE {
            DONE => return Taken::Done(self.take(gen, read)),
            HELD => return self.unhold(gen),
            WAITING | WRITING => {}
            _ => return Taken::Unknown(read(None)),
        }
        let Some(w) = waker else {
            return Taken::Waiting;
        };
        // register, then flag it and look again: a completer that
        // publishes after the flag wakes this waker; one before, the look
        // sees (only the owner frees its slot: the generation stays)
        self.waker.register(w);
        let cur = self.state.fetch_or(REG, Ordering::AcqRel);
        match cur & PHASE {
            DONE => {
                drop(self.waker.take());
                Taken::Done(self.take(gen, read))
            }
            HELD => self.unhold(gen),
            _ => Taken::Waiting,
        }
    }

    /// Whether `call` has something for its owner (a result, a held
    /// notice, or it is not in flight): one load.
    #[inline]
    pub(crate) fn ready(&self, call: u64) -> bool {
        let cur = self.state.load(Ordering::Acquire);
        gen_of(cur) != gen_of(call) || !matches!(cur & PHASE, WAITING | WRITING)
    }

    /// Whether a call is in this slot.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> bool {
        self.state.load(Ordering::Acquire) & PHASE != FREE
    }

    fn unhold<R>(&self, gen: u32) -> Taken<R> {
        // only the owner moves a slot out of HELD (and registers again
        // when it polls with a waker)
        self.state.store(word(gen, WAITING), Ordering::Release);
        Taken::Held
    }

    /// Read the result of a slot seen `DONE` (by its owner) with `read`,
    /// clear it and free the slot.
    #[inline]
    fn take<R>(&self, gen: u32, read: impl FnOnce(Option<&T>) -> R) -> R {
        let r = self.result.with_mut(|p| {
            // SAFETY: DONE was published (Release) after the write and
            // seen (Acquire) by the owner, the only one to touch it now.
            let v = unsafe { &mut *p };
            let r = read(Some(v));
            v.clear();
            r
        });
        self.state
            .store(word(gen.wrapping_add(1), FREE), Ordering::Release);
        r
    }

    /// The owner of `call` drops its future: returns whether the slot is
    /// free now (push it); else the completer frees it when the result
    /// comes (never, if the target died: one slot lost).
    pub(crate) fn abandon(&self, call: u64) -> bool {
        let gen = gen_of(call);
        let mut cur = self.state.load(Ordering::Acquire);
        // Its own waker, if it registered one: taken now, while the slot
        // is still this call's (only its owner, this thread, gives it up
        // below). Taken after the exchange, it could be the waker of the
        // next call in the slot (freed by the completer meanwhile), which
        // would then never be woken.
        if gen_of(cur) == gen {
            drop(self.waker_if(cur & REG));
        }
        loop {
            if gen_of(cur) != gen {
                return false;
            }
            let next = match cur & (PHASE | GONE) {
                WAITING => word(gen, ABANDONED),
                WRITING => cur | GONE,
                HELD => word(gen.wrapping_add(1), FREE),
                DONE => {
                    // its own waker first: once `take` frees the slot,
                    // the waker there may be the next call's
                    drop(self.waker_if(cur & REG));
                    self.take(gen, |_| ());
                    return true;
                }
                _ => return false,
            };
            match self
                .state
                .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next & PHASE == FREE,
                Err(now) => cur = now,
            }
        }
    }
}

/// Free slots, as a stack of indices linked through [`Slot`]'s `next`: a
/// tagged head (tag in the high 32 bits, index + 1 in the low 32) so a pop
/// that read a stale `next` fails its compare-exchange (no ABA).
#[derive(Default)]
pub(crate) struct FreeStack {
    head: AtomicU64,
}

impl FreeStack {
    /// Push slot `index` (free: its state stored `FREE` before).
    pub(crate) fn push<T>(&self, index: u32, slot: &Slot<T>) {
        let mut cur = self.head.load(Ordering::Relaxed);
        loop {
            slot.next.store(cur as u32, Ordering::Relaxed);
            let new = (cur >> 32).wrapping_add(1) << 32 | u64::from(index + 1);
            match self
                .head
                .compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Pop a free slot: its index and the slot; `slot(i)` is slot `i`
    /// (pushed before).
    pub(crate) fn pop<'a, T: 'a>(
        &self,
        slot: impl Fn(u32) -> Option<&'a Slot<T>>,
    ) -> Option<(u32, &'a Slot<T>)> {
        let mut cur = self.head.load(Ordering::Acquire);
        loop {
            let top = cur as u32;
            if top == 0 {
                return None;
            }
            // a stale `next` (the slot popped and pushed meanwhile) comes
            // with a changed tag: the exchange below fails
            let s = slot(top - 1)?;
            let next = s.next.load(Ordering::Relaxed);
            let new = (cur >> 32).wrapping_add(1) << 32 | u64::from(next);
            match self
                .head
                .compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Some((top - 1, s)),
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    impl Kept for Vec<u8> {
        fn clear(&mut self) {
            *self = Vec::new();
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Every transition once, on one thread (small enough for Miri:
    /// `cargo +nightly miri test -p splitrt-rpc --lib slot`).
    #[test]
    fn slot_phases_in_order_and_late_results_ignored() {
        let s = Slot::<Vec<u8>>::default();
        let a = s.start(3);
        assert_eq!(a, 3);
        assert_eq!(s.poll(a, None, |v| v.cloned()), Taken::Waiting);
        let n = Arc::new(Count(AtomicUsize::new(0)));
        let w = Waker::from(n.clone());
        assert_eq!(s.poll(a, Some(&w), |v| v.cloned()), Taken::Waiting);
        match s.complete(a, false, |v| *v = b"abc".to_vec()) {
            Completed::Stored(Some(w)) => w.wake(),
            other => panic!("{other:?}"),
        }
        assert_eq!(n.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(matches!(
            s.complete(a, false, |v| *v = b"dup".to_vec()),
            Completed::Ignored
        ));
        assert_eq!(
            s.poll(a, None, |v| v.cloned()),
            Taken::Done(Some(b"abc".to_vec()))
        );
        assert_eq!(s.poll(a, None, |v| v.cloned()), Taken::Unknown(None));
        // the next call in the slot: another id; the old one is ignored
        let b = s.start(3);
        assert_ne!(a, b);
        assert!(matches!(
            s.complete(a, false, |v| *v = b"late".to_vec()),
            Completed::Ignored
        ));
        assert!(matches!(
            s.complete(b, true, |_| ()),
            Completed::Stored(None)
        ));
        assert!(s.ready(b));
        assert_eq!(s.poll(b, None, |v| v.cloned()), Taken::Held);
        assert!(!s.ready(b));
        // dropped while waiting: freed by its result, which is dropped
        assert!(!s.abandon(b));
        assert!(s.busy());
        assert!(matches!(
            s.complete(b, false, |v| *v = b"x".to_vec()),
            Completed::Freed
        ));
        assert!(!s.busy());
        // dropped with the result in: freed at once
        let c = s.start(3);
        s.complete(c, false, |v| *v = vec![1; 100]);
        assert!(s.abandon(c));
        assert!(!s.busy());
    }

    #[test]
    fn free_stack_pops_what_was_pushed() {
        let slots: Vec<Slot<u64>> = (0..4).map(|_| Slot::default()).collect();
        let f = FreeStack::default();
        let get = |i: u32| slots.get(i as usize);
        assert_eq!(f.pop(get).map(|p| p.0), None);
        for i in [0, 2, 3] {
            f.push(i, &slots[i as usize]);
        }
        assert_eq!(f.pop(get).map(|p| p.0), Some(3));
        assert_eq!(f.pop(get).map(|p| p.0), Some(2));
        f.push(1, &slots[1]);
        assert_eq!(f.pop(get).map(|p| p.0), Some(1));
        assert_eq!(f.pop(get).map(|p| p.0), Some(0));
        assert_eq!(f.pop(get).map(|p| p.0), None);
    }
}

/// loom models of the slot (`RUSTFLAGS="--cfg loom" cargo test -p
/// splitrt-rpc --release --lib loom`): the real code above over loom's
/// atomics, cell and a waker stand-in with [`AtomicWaker`]'s contract.
#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A completer against the owner polling with a waker: the owner
    /// either takes the result or is woken (never left asleep), and takes
    /// exactly what was written.
    #[test]
    fn loom_result_is_taken_or_its_waker_woken() {
        loom::model(|| {
            let s = Arc::new(Slot::<u64>::default());
            let call = s.start(0);
            let s2 = s.clone();
            let t = thread::spawn(move || match s2.complete(call, false, |v| *v = 42) {
                Completed::Stored(w) => {
                    if let Some(w) = w {
                        w.wake();
                    }
                }
                other => panic!("{other:?}"),
            });
            let flag = std::sync::Arc::new(Flag(false.into()));
            let w = Waker::from(flag.clone());
            let first = s.poll(call, Some(&w), |v| v.cloned());
            t.join().unwrap();
            match first {
                Taken::Done(v) => assert_eq!(v, Some(42)),
                Taken::Waiting => {
                    assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
                    assert_eq!(s.poll(call, None, |v| v.cloned()), Taken::Done(Some(42)));
                }
                other => panic!("{other:?}"),
            }
            assert!(!s.busy());
        });
    }

    /// A drop racing a completion: the slot is freed exactly once (by one
    /// side), the result dropped.
    #[test]
    fn loom_abandon_racing_a_result_frees_once() {
        loom::model(|| {
            let s = Arc::new(Slot::<u64>::default());
            let call = s.start(0);
            let s2 = s.clone();
            let t = thread::spawn(move || {
                matches!(s2.complete(call, false, |v| *v = 7), Completed::Freed)
            });
            let by_owner = s.abandon(call);
            let by_completer = t.join().unwrap();
            assert!(by_owner ^ by_completer, "{by_owner} {by_completer}");
            assert!(!s.busy());
        });
    }

    /// An owner that awaited (its waker registered) drops its future
    /// while a completer frees the slot and a second call takes it and
    /// awaits: the first owner must not take (and drop) the second
    /// owner's waker, so the second call's completion wakes it.
    #[test]
    fn loom_abandon_leaves_the_next_owners_waker_alone() {
        loom::model(|| {
            let s = Arc::new(Slot::<u64>::default());
            let c1 = s.start(0);
            let f1 = std::sync::Arc::new(Flag(false.into()));
            let w1 = Waker::from(f1.clone());
            assert_eq!(s.poll(c1, Some(&w1), |v| v.cloned()), Taken::Waiting);
            let s2 = s.clone();
            let f2 = std::sync::Arc::new(Flag(false.into()));
            let f2c = f2.clone();
            // the completer of call 1, then (the slot freed) the owner of
            // call 2 in the same slot, awaiting
            let t = thread::spawn(move || match s2.complete(c1, false, |v| *v = 1) {
                Completed::Freed => {
                    let c2 = s2.start(0);
                    let w2 = Waker::from(f2c);
                    assert_eq!(s2.poll(c2, Some(&w2), |v| v.cloned()), Taken::Waiting);
                    Some(c2)
                }
                Completed::Stored(w) => {
                    if let Some(w) = w {
                        w.wake();
                    }
                    None
                }
                Completed::Ignored => None,
            });
            let by_owner = s.abandon(c1);
            let c2 = t.join().unwrap();
            if let Some(c2) = c2 {
                assert!(!by_owner);
                // call 2's result: its owner is woken
                if let Completed::Stored(Some(w)) = s.complete(c2, false, |v| *v = 2) {
                    w.wake();
                }
                assert!(
                    f2.0.load(std::sync::atomic::Ordering::SeqCst),
                    "the second owner was never woken"
                );
                assert_eq!(s.poll(c2, None, |v| v.cloned()), Taken::Done(Some(2)));
            }
            assert!(!s.busy());
        });
    }

    /// Two threads freeing and taking slots through the stack: no slot is
    /// popped twice.
    #[test]
    fn loom_free_stack_hands_out_each_slot_once() {
        loom::model(|| {
            let slots: Arc<Vec<Slot<u64>>> = Arc::new((0..2).map(|_| Slot::default()).collect());
            let f = Arc::new(FreeStack::default());
            f.push(0, &slots[0]);
            f.push(1, &slots[1]);
            let (s2, f2) = (slots.clone(), f.clone());
            let t = thread::spawn(move || {
                let got = f2.pop(|i| s2.get(i as usize)).map(|p| p.0);
                if let Some(i) = got {
                    f2.push(i, &s2[i as usize]);
                }
                got
            });
            let a = f.pop(|i| slots.get(i as usize)).map(|p| p.0);
            let b = f.pop(|i| slots.get(i as usize)).map(|p| p.0);
            let other = t.join().unwrap();
            assert!(a.is_some());
            assert_ne!(a, b);
            let _ = other;
            let c = f.pop(|i| slots.get(i as usize)).map(|p| p.0);
            // both slots out in the end (the other thread gave its back)
            let mut out: Vec<_> = [a, b, c].into_iter().flatten().collect();
            out.sort_unstable();
            out.dedup();
            assert_eq!(out.len(), 2, "{a:?} {b:?} {c:?}");
        });
    }
}
