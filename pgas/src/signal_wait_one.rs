//! The blocking wait on one signal word named by a global pointer
//! (`Pgas::signal_wait_until`). It borrows no `Signals`, so another thread
//! may free the word's array while it waits: the wait ends with an error
//! naming the rank once it is freed, never reading the freed word.
//!
//! The word's mapping is kept by the context this wait borrows (`&self`:
//! the endpoint owns the segment's mapping until the context goes), so
//! only its allocation can change. The wait takes what it needs once,
//! before its loop: the word, its array's generation and the registry's
//! removal count (`one_entry`); it looks once under the lock
//! (`look_one`: a word that already holds ends the call there), and only
//! then takes a look slot in the registry (`Registry::looker`, which costs
//! an `Arc` and two mutex acquisitions). Each round then reads the word without the
//! registry's lock while the count stays where it was
//! (`Looker::if_unchanged`; `Registry::remove` waits for a read in
//! progress before the array's memory is freed), and looks the array up
//! under the lock only after a removal, as the vector forms' pointer waits
//! do on every round (`signal_vector.rs`). Measured in session 13 with
//! callgrind (see ARCHITECTURE.md): the look went from the read lock's
//! acquire and release and the range lookup to two stores, a fence and
//! two loads.

use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::signal_vector::{describe_one, look_one, look_one_since, one_entry, one_seen};
use crate::signal_word::Cmp;
use splitrt_am::{Error, Result};

impl Pgas {
    /// Wait until this rank's signal word `sig` satisfies `cmp value`
    /// (OpenSHMEM `shmem_signal_wait_until`), for a word named by a
    /// global pointer: it must be this rank's and a signal word, else an
    /// error. Returns the value that satisfied it. ([`Signals::wait_until`](crate::Signals::wait_until)
    /// and its `_any` / `_all` / `_some` forms wait by index.)
    pub fn signal_wait_until(&self, sig: GlobalPtr<u64>, cmp: Cmp, value: u64) -> Result<u64> {
        let i = &self.inner;
        i.check_signal(sig, "Pgas::signal_wait_until")?;
        if sig.rank() != i.rank {
            return Err(i.err(
                Error::usage(format!(
                    "Pgas::signal_wait_until: {sig:?} is rank {}'s word; a rank waits only on \
                     its own signal words",
                    sig.rank()
                )),
                sig.rank(),
            ));
        }
        // one entry from a global pointer, and a look slot, once: each
        // round reads the word without the registry lock while no array
        // was freed, and checks under the lock after a free (another
        // thread may free this one meanwhile: see the module docs)
        let call = "Pgas::signal_wait_until";
        let e = one_entry(i, sig, value);
        // one look under the lock first: a word already satisfied (or an
        // array already freed) ends the call without a look slot (its
        // Arc, two registry mutex acquisitions, a push and a retain)
        if let Some(r) = look_one(i, call, &e, cmp) {
            return r;
        }
        let looker = i.st.signals.looker();
        let since = std::cell::Cell::new(one_seen(&e));
        let got = std::cell::Cell::new(Ok(0));
        let what = || describe_one(i, call, &e, cmp);
        i.wait_through(&what, || {
            match look_one_since(i, call, &e, cmp, &looker, &since) {
                Some(r) => {
                    got.set(r);
                    true
                }
                None => false,
            }
        })?;
        got.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal_word::Looker;
    use std::cell::Cell;

    use crate::test_rank::one_rank_over_model as one_rank;

    /// The round's look before session 13 (under the registry's lock).
    #[inline(never)]
    fn rounds_locked(pg: &Pgas, e: &crate::signal_vector::Entry<'_>, n: usize) -> usize {
        (0..n)
            .filter(|_| look_one(&pg.inner, "t", e, Cmp::Ge).is_some())
            .count()
    }

    /// The round's look now (lock-free while no array is freed).
    #[inline(never)]
    fn rounds_lock_free(
        pg: &Pgas,
        e: &crate::signal_vector::Entry<'_>,
        looker: &Looker<'_>,
        since: &Cell<u64>,
        n: usize,
    ) -> usize {
        (0..n)
            .filter(|_| look_one_since(&pg.inner, "t", e, Cmp::Ge, looker, since).is_some())
            .count()
    }

    /// `n` calls of `signal_wait_until` on a word that already holds
    /// (in a function of its own, for callgrind).
    #[inline(never)]
    fn satisfied_calls(pg: &Pgas, ptr: GlobalPtr<u64>, n: usize) -> usize {
        (0..n)
            .filter(|_| pg.signal_wait_until(ptr, Cmp::Ge, 3).is_ok())
            .count()
    }

    /// A wait on a word that already holds, or on a freed array's word,
    /// ends without taking a look slot (session 13 took one on every
    /// call: an Arc, two registry mutex acquisitions, a push and a
    /// retain). With `SPLITRT_SATISFIED_CALLS=N` it makes N such calls in
    /// a function of its own, for callgrind (see ARCHITECTURE.md,
    /// "signal_wait_until").
    #[test]
    #[cfg_attr(
        miri,
        ignore = "attaches a verbs-model endpoint (a bootstrap and its threads)"
    )]
    fn signal_wait_a_satisfied_word_takes_no_look_slot() {
        let pg = one_rank("sigsat");
        let sigs = pg.alloc_signals(4).unwrap();
        let ptr = sigs.at(0, 1);
        pg.inner
            .signal_word(ptr.offset())
            .store(3, std::sync::atomic::Ordering::Release);
        let n: usize = std::env::var("SPLITRT_SATISFIED_CALLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        let before = pg.inner.st.signals.slots_taken();
        assert_eq!(satisfied_calls(&pg, ptr, n), n);
        assert_eq!(pg.signal_wait_until(ptr, Cmp::Eq, 3).unwrap(), 3);
        assert_eq!(
            pg.inner.st.signals.slots_taken(),
            before,
            "a satisfied wait took a look slot"
        );
        pg.free_signals(sigs).unwrap();
        let err = pg.signal_wait_until(ptr, Cmp::Ge, 3).unwrap_err();
        assert!(err.to_string().contains("signal word"), "{err}");
        assert_eq!(pg.inner.st.signals.slots_taken(), before);
        pg.finish().unwrap();
    }

    /// Both looks agree round by round: unsatisfied, satisfied, after
    /// another array's free (the new look takes the lock once and goes
    /// on), and after the word's own array's free (both end the wait with
    /// the error). With `SPLITRT_LOOK_ROUNDS=N` each look also runs N
    /// unsatisfied rounds in a function of its own, for callgrind (see
    /// ARCHITECTURE.md, "signal_wait_until").
    #[test]
    #[cfg_attr(
        miri,
        ignore = "attaches a verbs-model endpoint (a bootstrap and its threads)"
    )]
    fn signal_wait_the_lock_free_look_agrees_with_the_locked_one() {
        let pg = one_rank("sigwait");
        let other = pg.alloc_signals(4).unwrap();
        let sigs = pg.alloc_signals(4).unwrap();
        let ptr = sigs.at(0, 2);
        let e = one_entry(&pg.inner, ptr, 5);
        let looker = pg.inner.st.signals.looker();
        let since = Cell::new(one_seen(&e));
        let n: usize = std::env::var("SPLITRT_LOOK_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        assert_eq!(rounds_locked(&pg, &e, n), 0);
        assert_eq!(rounds_lock_free(&pg, &e, &looker, &since, n), 0);
        // the rounds read without the lock: none took it, and the count
        // they hold is the registry's, so a look through the slot goes on
        let reg = &pg.inner.st.signals;
        let locked = reg.locked_looks();
        assert_eq!(rounds_lock_free(&pg, &e, &looker, &since, 3), 0);
        assert_eq!(reg.locked_looks(), locked, "the rounds took the lock");
        let lock_free = |since: &Cell<u64>| looker.if_unchanged(since.get(), || ()).is_some();
        assert!(lock_free(&since));
        let word = pg.inner.signal_word(ptr.offset());
        word.store(6, std::sync::atomic::Ordering::Release);
        let new = |since: &Cell<u64>| look_one_since(&pg.inner, "t", &e, Cmp::Ge, &looker, since);
        let old = || look_one(&pg.inner, "t", &e, Cmp::Ge);
        assert!(matches!(old(), Some(Ok(6))) && matches!(new(&since), Some(Ok(6))));
        // another array freed: the count moves, the word is still one
        let before = since.get();
        pg.free_signals(other).unwrap();
        assert!(
            !lock_free(&since),
            "a look after a free went without the lock"
        );
        let locked = reg.locked_looks();
        assert!(matches!(new(&since), Some(Ok(6))));
        assert_eq!(reg.locked_looks(), locked + 1, "the look after the free");
        assert_ne!(since.get(), before, "the new count is taken");
        // the lock once, then lock-free again
        assert!(lock_free(&since), "the look after the free did not move on");
        assert!(matches!(new(&since), Some(Ok(6))));
        assert!(matches!(new(&since), Some(Ok(6))));
        assert_eq!(reg.locked_looks(), locked + 1, "lock-free again");
        assert!(matches!(old(), Some(Ok(6))));
        // this array freed: both end with the error, reading nothing
        pg.free_signals(sigs).unwrap();
        let why = |r: Option<Result<u64>>| match r {
            Some(Err(e)) => e.to_string(),
            other => format!("{other:?}"),
        };
        assert!(why(old()).contains("freed"));
        assert!(why(new(&since)).contains("freed"), "{}", why(new(&since)));
        drop(looker);
        pg.finish().unwrap();
    }
}
