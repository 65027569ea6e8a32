//! Remote atomics: [`Pgas::atomic`] hands out an [`Atomics`] whose named
//! methods are the operations of GASNet-EX atomic domains and OpenSHMEM
//! (fetching ones return the old value; non-fetching ones are
//! split-phase, complete at [`Pgas::sync`]). `Pgas::fetch_add`, `swap`
//! and `compare_swap` are shorthands for the `Atomics` methods.

use crate::atomic::{apply_atomic, AtomicInt, AtomicOp, AtomicWord, Code, NO_FETCH};
use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::state::AtomicSlot;
use splitrt_am::{Error, Payload, Result};
use std::sync::atomic::Ordering;

impl Pgas {
    /// The remote atomic operations (see [`Atomics`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let counter = pg.alloc_sym::<u64>(1)?;
    /// let old = pg.atomic().fetch_add(counter.ptr(0), 1)?;
    /// pg.atomic().max(counter.ptr(0), 100)?; // non-fetching: done at sync
    /// pg.sync()?;
    /// # let _ = old; Ok(()) }
    /// ```
    pub fn atomic(&self) -> Atomics<'_> {
        Atomics { pg: self }
    }

    /// The one engine under every atomic: checks, then the native atomic
    /// or a request to the owner. `fetch`: wait for the old value (else a
    /// non-fetching op over the AM path returns at once, `Ok(None)`,
    /// complete at `sync`).
    fn atomic_op<T: AtomicWord>(
        &self,
        p: GlobalPtr<T>,
        op: AtomicOp,
        fetch: bool,
    ) -> Result<Option<T>> {
        let i = &self.inner;
        // announced across the frozen check and the native update or the
        // request (see `Pgas::freeze`)
        // SAFETY: the guard lives in this frame and drops before it returns.
        let writing = unsafe { splitrt_am::writing() };
        i.check_write(p, 1, "an atomic")?;
        let (rank, off) = (p.rank(), p.offset());
        if let Some(seg) = i.native(rank) {
            // SAFETY: `i.check` passed (bounds and alignment in `rank`'s
            // segment); `seg` is from `i`'s direct table, whose endpoint
            // (alive in `i`) owns the fabric.
            let old = unsafe { apply_atomic(seg, off, T::WIDTH, op) }.expect("width is 4 or 8");
            if op.code != Code::Load {
                // it may sleep waiting for this word
                // SAFETY: `seg` is from `i`'s direct table; `i`'s endpoint
                // owns the fabric that handed it out.
                unsafe { seg.wake_owner() };
            }
            return Ok(Some(T::from_bits(old)));
        }
        let (code, a, b) = op.encode();
        if !fetch {
            i.issued.add_puts(1);
            let books = i.st.peer_puts.get();
            books.inspect(|b| b.issue(rank));
            let args = [NO_FETCH, code, T::WIDTH, off, a, b];
            let sent = i.ep.request(rank, i.h.atomic, &args, Payload::None);
            if sent.is_err() {
                // never sent: no reply to wait for
                books.inspect(|b| b.complete(rank));
                i.st.puts_done.fetch_add(1, Ordering::Release);
            }
            return sent.map(|()| None);
        }
        self.am_fetch(rank, [code, T::WIDTH, off, a, b], writing)
            .map(|v| Some(T::from_bits(v)))
    }

    /// A fetching atomic over the AM path: send `[code, width, off, a, b]`
    /// to `rank`'s atomic handler and wait for the old value (or its
    /// refusal). The caller checked the operands (or is the test hook);
    /// `writing`, its announcement of a write (see `Pgas::freeze`), is
    /// dropped once the request is sent.
    fn am_fetch<W>(&self, rank: usize, args: [u64; 5], writing: W) -> Result<u64> {
        let i = &self.inner;
        let slot = i.st.atomics.lock().insert(AtomicSlot::Waiting);
        let [code, width, off, a, b] = args;
        let sent = i.ep.request(
            rank,
            i.h.atomic,
            &[slot as u64, code, width, off, a, b],
            Payload::None,
        );
        drop(writing);
        let was_sent = sent.is_ok();
        let waited = sent.and_then(|()| {
            i.wait_through(
                &|| format!("for the answer to an atomic on rank {rank}"),
                || !matches!(i.st.atomics.lock().get_mut(slot), Some(AtomicSlot::Waiting)),
            )
        });
        let outcome = {
            let mut a = i.st.atomics.lock();
            if was_sent && waited.is_err() && matches!(a.get_mut(slot), Some(AtomicSlot::Waiting)) {
                // a reply may still come: it frees the slot, not a reuse
                *a.get_mut(slot).expect("present") = AtomicSlot::Cancelled;
                None
            } else {
                a.remove(slot)
            }
        };
        waited?;
        match outcome {
            Some(AtomicSlot::Done(v)) => Ok(v),
            Some(AtomicSlot::Failed(why)) => {
                Err(Error::protocol(why).at_rank(i.rank).with_peer(rank))
            }
            _ => Err(Error::protocol("atomic reply lost")
                .at_rank(i.rank)
                .with_peer(rank)),
        }
    }

    /// Test hook (`test-doubles`): send `rank`'s atomic handler a raw,
    /// unchecked request `[code, width, off, a, b]`, as a broken or
    /// hostile peer could, and wait for its answer. The handler must
    /// refuse bad ones with a status, never panic.
    #[cfg(feature = "test-doubles")]
    #[doc(hidden)]
    pub fn raw_atomic_for_tests(&self, rank: usize, args: [u64; 5]) -> Result<u64> {
        self.am_fetch(rank, args, ())
    }

    /// A fetching atomic: the old value.
    fn fetching<T: AtomicWord>(&self, p: GlobalPtr<T>, code: Code, a: T, b: T) -> Result<T> {
        let old = self.atomic_op(p, AtomicOp::of(code, a, b), true)?;
        Ok(old.expect("a fetching atomic returns the old value"))
    }

    /// A non-fetching atomic.
    fn non_fetching<T: AtomicWord>(&self, p: GlobalPtr<T>, code: Code, a: T) -> Result<()> {
        self.atomic_op(p, AtomicOp::of(code, a, T::zeroed()), false)
            .map(|_| ())
    }

    /// `*p += v` atomically at the owner; returns the previous value.
    /// Shorthand for [`Atomics::fetch_add`] (integers).
    pub fn fetch_add<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.fetching(p, Code::Add, v, T::zeroed())
    }

    /// `*p = v` atomically; returns the previous value. Shorthand for
    /// [`Atomics::swap`].
    pub fn swap<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.fetching(p, Code::Swap, v, T::zeroed())
    }

    /// If `*p == current` set it to `new`; returns the previous value either
    /// way (success iff it equals `current`). Shorthand for
    /// [`Atomics::compare_swap`].
    pub fn compare_swap<T: AtomicInt>(&self, p: GlobalPtr<T>, current: T, new: T) -> Result<T> {
        self.fetching(p, Code::CompareSwap, current, new)
    }
}

/// Remote atomic operations on 32- and 64-bit words (from
/// [`Pgas::atomic`]): the set of GASNet-EX atomic domains and OpenSHMEM.
///
/// * Integers ([`AtomicInt`]: `u32`, `i32`, `u64`, `i64`): load, store,
///   swap, compare-swap, add, sub, inc, dec, and, or, xor, min, max; min
///   and max compare signed or unsigned by type; add, sub, inc and dec
///   wrap.
/// * Floats ([`AtomicFloat`](crate::AtomicFloat): `f32`, `f64`): load, store, swap,
///   compare-swap (on the bits: `-0.0 != 0.0`, a NaN equals itself), add,
///   min, max. Min and max are Rust's `f64::min` / `f64::max` (IEEE
///   754-2008 minNum / maxNum): a NaN operand leaves the word as it is, a
///   NaN word takes the operand; `min(0.0, -0.0)` may give either zero.
///   They, and add, are a compare-and-swap loop on the bits.
///
/// Every `fetch_*` method (and `load`, `swap`, `compare_swap`) returns the
/// previous value once the operation is done. The others return nothing:
/// on a mapped segment (shared memory, native path) they are done on
/// return; over the AM path they are split-phase, like a put: the request
/// goes out and the call returns, the owner's reply (a status, no value)
/// is counted, and [`Pgas::sync`] waits for it and reports a refusal.
/// They save the caller a round trip, not the reply: `sync` needs it.
///
/// Every path applies the same operation to the same word atomically
/// (native: a hardware atomic on the mapped word; AM path, also over
/// RDMA, whose fabric has no atomics: the owner's hardware atomic in a
/// handler), so ranks using either path and local atomics on the word
/// (through its [`LocalView`](crate::LocalView)'s pointer) all agree.
///
/// Errors: a pointer out of the segment, misaligned, into splitrt's
/// reserved area or a frozen array, or to a rank that does not exist is
/// refused at the caller, naming the rank and the cause.
#[derive(Clone, Copy)]
pub struct Atomics<'a> {
    pg: &'a Pgas,
}

impl Atomics<'_> {
    /// Atomic read of `*p`.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<f64>) -> splitrt_am::Result<()> {
    /// let x: f64 = pg.atomic().load(p)?;
    /// # let _ = x; Ok(()) }
    /// ```
    pub fn load<T: AtomicWord>(&self, p: GlobalPtr<T>) -> Result<T> {
        self.pg.fetching(p, Code::Load, T::zeroed(), T::zeroed())
    }

    /// Atomic `*p = v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u32>) -> splitrt_am::Result<()> {
    /// pg.atomic().store(p, 7)?;
    /// pg.sync()?;
    /// # Ok(()) }
    /// ```
    pub fn store<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Store, v)
    }

    /// Atomic `*p = v`; returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<i64>) -> splitrt_am::Result<()> {
    /// let old = pg.atomic().swap(p, -1)?;
    /// # let _ = old; Ok(()) }
    /// ```
    pub fn swap<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Swap, v, T::zeroed())
    }

    /// If `*p == current` (bitwise) set it to `new`; returns the previous
    /// value either way (success iff its bits equal `current`'s).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// let won = pg.atomic().compare_swap(p, 0, 1)? == 0; // a lock taken
    /// # let _ = won; Ok(()) }
    /// ```
    pub fn compare_swap<T: AtomicWord>(&self, p: GlobalPtr<T>, current: T, new: T) -> Result<T> {
        self.pg.fetching(p, Code::CompareSwap, current, new)
    }

    /// `*p += v` (integers wrap; floats round as `+` does); returns the
    /// previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<f64>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_add(p, 0.5)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_add<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Add, v, T::zeroed())
    }

    /// `*p += v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// pg.atomic().add(p, 3)?;
    /// pg.sync()?;
    /// # Ok(()) }
    /// ```
    pub fn add<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Add, v)
    }

    /// `*p = min(*p, v)` (signed or unsigned by type; floats as
    /// `f64::min`); returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<i32>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_min(p, -5)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_min<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Min, v, T::zeroed())
    }

    /// `*p = min(*p, v)` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<f32>) -> splitrt_am::Result<()> {
    /// pg.atomic().min(p, 0.25)?;
    /// # Ok(()) }
    /// ```
    pub fn min<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Min, v)
    }

    /// `*p = max(*p, v)` (signed or unsigned by type; floats as
    /// `f64::max`); returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u32>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_max(p, 10)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_max<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Max, v, T::zeroed())
    }

    /// `*p = max(*p, v)` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<f64>) -> splitrt_am::Result<()> {
    /// pg.atomic().max(p, 2.5)?;
    /// # Ok(()) }
    /// ```
    pub fn max<T: AtomicWord>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Max, v)
    }
}

/// Integer-only operations (bitwise, subtract, increment, decrement).
impl Atomics<'_> {
    /// `*p -= v` (wrapping); returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<i64>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_sub(p, 2)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_sub<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Sub, v, T::zeroed())
    }

    /// `*p -= v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// pg.atomic().sub(p, 2)?;
    /// # Ok(()) }
    /// ```
    pub fn sub<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Sub, v)
    }

    /// `*p += 1` (wrapping); returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// let ticket = pg.atomic().fetch_inc(p)?;
    /// # let _ = ticket; Ok(()) }
    /// ```
    pub fn fetch_inc<T: AtomicInt>(&self, p: GlobalPtr<T>) -> Result<T> {
        self.pg.fetching(p, Code::Add, T::from_bits(1), T::zeroed())
    }

    /// `*p += 1` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u32>) -> splitrt_am::Result<()> {
    /// pg.atomic().inc(p)?;
    /// # Ok(()) }
    /// ```
    pub fn inc<T: AtomicInt>(&self, p: GlobalPtr<T>) -> Result<()> {
        self.pg.non_fetching(p, Code::Add, T::from_bits(1))
    }

    /// `*p -= 1` (wrapping); returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<i32>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_dec(p)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_dec<T: AtomicInt>(&self, p: GlobalPtr<T>) -> Result<T> {
        self.pg.fetching(p, Code::Sub, T::from_bits(1), T::zeroed())
    }

    /// `*p -= 1` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<i32>) -> splitrt_am::Result<()> {
    /// pg.atomic().dec(p)?;
    /// # Ok(()) }
    /// ```
    pub fn dec<T: AtomicInt>(&self, p: GlobalPtr<T>) -> Result<()> {
        self.pg.non_fetching(p, Code::Sub, T::from_bits(1))
    }

    /// `*p &= v`; returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_and(p, !1)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_and<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::And, v, T::zeroed())
    }

    /// `*p &= v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// pg.atomic().and(p, 0xff)?;
    /// # Ok(()) }
    /// ```
    pub fn and<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::And, v)
    }

    /// `*p |= v`; returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u32>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_or(p, 1 << 3)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_or<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Or, v, T::zeroed())
    }

    /// `*p |= v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u32>) -> splitrt_am::Result<()> {
    /// pg.atomic().or(p, 1 << 3)?;
    /// # Ok(()) }
    /// ```
    pub fn or<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Or, v)
    }

    /// `*p ^= v`; returns the previous value.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// let before = pg.atomic().fetch_xor(p, 0b101)?;
    /// # let _ = before; Ok(()) }
    /// ```
    pub fn fetch_xor<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.pg.fetching(p, Code::Xor, v, T::zeroed())
    }

    /// `*p ^= v` (non-fetching: complete at [`Pgas::sync`]).
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, p: splitrt_pgas::GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// pg.atomic().xor(p, 0b101)?;
    /// # Ok(()) }
    /// ```
    pub fn xor<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        self.pg.non_fetching(p, Code::Xor, v)
    }
}
