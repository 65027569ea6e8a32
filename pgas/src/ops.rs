//! Remote atomics as `Pgas` methods (blocking: they return the old value).

use crate::atomic::{apply_atomic, AtomicInt, AtomicOp};
use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::state::AtomicSlot;
use splitrt_am::{Error, Payload, Result};

impl Pgas {
    fn atomic<T: AtomicInt>(&self, p: GlobalPtr<T>, op: AtomicOp) -> Result<T> {
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
            // it may sleep waiting for this word
            // SAFETY: `seg` is from `i`'s direct table; `i`'s endpoint owns
            // the fabric that handed it out.
            unsafe { seg.wake_owner() };
            return Ok(T::from_bits(old));
        }
        let slot = i.st.atomics.lock().insert(AtomicSlot::Waiting);
        let (code, a, b) = op.encode();
        let sent = i.ep.request(
            rank,
            i.h.atomic,
            &[slot as u64, code, T::WIDTH, off, a, b],
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
            Some(AtomicSlot::Done(v)) => Ok(T::from_bits(v)),
            Some(AtomicSlot::Failed(why)) => {
                Err(Error::protocol(why).at_rank(i.rank).with_peer(rank))
            }
            _ => Err(Error::protocol("atomic reply lost")
                .at_rank(i.rank)
                .with_peer(rank)),
        }
    }

    /// `*p += v` atomically at the owner; returns the previous value.
    pub fn fetch_add<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.atomic(p, AtomicOp::FetchAdd(v.to_bits()))
    }

    /// `*p = v` atomically; returns the previous value.
    pub fn swap<T: AtomicInt>(&self, p: GlobalPtr<T>, v: T) -> Result<T> {
        self.atomic(p, AtomicOp::Swap(v.to_bits()))
    }

    /// If `*p == current` set it to `new`; returns the previous value either
    /// way (success iff it equals `current`).
    pub fn compare_swap<T: AtomicInt>(&self, p: GlobalPtr<T>, current: T, new: T) -> Result<T> {
        self.atomic(
            p,
            AtomicOp::CompareSwap {
                current: current.to_bits(),
                new: new.to_bits(),
            },
        )
    }
}
