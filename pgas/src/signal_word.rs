//! Signal words, below the API: the comparisons of a wait, the updates of
//! a signal, and the registry of the symmetric ranges that hold signal
//! words (shared by the caller's checks and the reserved handlers, which
//! refuse a signal into any other address).

use parking_lot::{Mutex, RwLock};
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The look protocol's atomics (the look slots, the removal count, their
/// fences) and the removal's yield: loom's in the unit tests under
/// `--cfg loom`, so its model (`loom_model` below) checks the real
/// [`Looker::if_unchanged`] and [`Registry::remove`].
#[cfg(all(test, loom))]
mod sync {
    pub(super) use loom::sync::atomic::{fence, AtomicBool, AtomicU64};
    pub(super) use loom::thread::yield_now;
}
#[cfg(not(all(test, loom)))]
mod sync {
    pub(super) use std::sync::atomic::{fence, AtomicBool, AtomicU64};
    pub(super) use std::thread::yield_now;
}
use sync::{fence, AtomicBool};

/// How a wait compares a signal word with a value (OpenSHMEM's
/// `SHMEM_CMP_*`): the wait ends once `word <cmp> value` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `word == value`
    Eq,
    /// `word != value`
    Ne,
    /// `word > value`
    Gt,
    /// `word >= value`
    Ge,
    /// `word < value`
    Lt,
    /// `word <= value`
    Le,
}

impl Cmp {
    /// Whether `word <self> value` holds.
    ///
    /// ```
    /// use splitrt_pgas::Cmp;
    /// assert!(Cmp::Ge.holds(5, 5) && !Cmp::Gt.holds(5, 5) && Cmp::Ne.holds(4, 5));
    /// ```
    #[inline]
    pub fn holds(self, word: u64, value: u64) -> bool {
        match self {
            Cmp::Eq => word == value,
            Cmp::Ne => word != value,
            Cmp::Gt => word > value,
            Cmp::Ge => word >= value,
            Cmp::Lt => word < value,
            Cmp::Le => word <= value,
        }
    }

    /// The operator, for messages (`">="`).
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
        }
    }
}

/// How a signal updates its word (OpenSHMEM's `SHMEM_SIGNAL_SET` /
/// `SHMEM_SIGNAL_ADD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignalOp {
    /// The word becomes the value.
    Set,
    /// The value is added to the word (wrapping).
    Add,
}

impl SignalOp {
    /// The code on the wire.
    pub(crate) fn code(self) -> u64 {
        match self {
            SignalOp::Set => 1,
            SignalOp::Add => 2,
        }
    }

    /// From a code on the wire (a peer's: anything may arrive).
    pub(crate) fn decode(c: u64) -> Option<SignalOp> {
        match c {
            1 => Some(SignalOp::Set),
            2 => Some(SignalOp::Add),
            _ => None,
        }
    }

    /// Apply to `word`, with release ordering: whoever sees the new value
    /// (an acquire load) sees every write this thread made before, such
    /// as a put's data.
    #[inline]
    pub(crate) fn apply(self, word: &AtomicU64, value: u64) {
        match self {
            SignalOp::Set => word.store(value, Ordering::Release),
            SignalOp::Add => {
                word.fetch_add(value, Ordering::AcqRel);
            }
        }
    }
}

/// Most signal arrays a job may hold at once (every one is a symmetric
/// allocation; the bound keeps the registry's scans short).
pub(crate) const MAX_SIGNAL_ARRAYS: usize = 1024;

/// The segment ranges (offset, bytes) that hold signal words: the same on
/// every rank (the arrays are symmetric), so a sender checks its target
/// against its own copy and the target checks again.
///
/// Each range carries a generation (from a counter that every `add`
/// bumps, starting at 1), so a range freed and another registered at the
/// same offset are told apart: the pointer forms' futures record the
/// generation of each word's range when they are built
/// ([`generation`](Registry::generation)) and check it again at each poll
/// ([`with_words`](Registry::with_words)).
#[derive(Default)]
pub(crate) struct Registry {
    /// (offset, bytes, generation) of each registered range.
    ranges: RwLock<Vec<(u64, u64, u64)>>,
    /// The last generation handed out (0: none yet).
    last_gen: std::sync::atomic::AtomicU64,
    /// How many ranges were removed so far (bumped under the write lock):
    /// a wait whose entries were made at the same count need not look
    /// their ranges up again ([`removals`](Registry::removals)).
    removals: sync::AtomicU64,
    /// The look slots of the waits that read words without the lock
    /// ([`Looker`]): each is true while its wait reads a word, and
    /// [`remove`](Registry::remove) waits for every one to be false.
    lookers: Mutex<Vec<Arc<AtomicBool>>>,
    /// How many look slots were ever taken (for the tests that check a
    /// wait takes none when it need not).
    #[cfg(test)]
    slots_taken: AtomicU64,
    /// How many looks took the read lock
    /// ([`with_words_since`](Self::with_words_since)), for the tests that
    /// check a wait reads without it.
    #[cfg(test)]
    locked_looks: AtomicU64,
}

impl Registry {
    /// Record `bytes` of signal words at `off`; false if the registry is
    /// full.
    pub fn add(&self, off: u64, bytes: u64) -> bool {
        let mut r = self.ranges.write();
        if r.len() >= MAX_SIGNAL_ARRAYS {
            return false;
        }
        let generation = self.last_gen.fetch_add(1, Ordering::Relaxed) + 1;
        r.push((off, bytes, generation));
        true
    }

    /// Forget the range at `off`. Returns once no [`Looker`] may still
    /// read a word of it: a look that began before the count moved is
    /// waited for (a few loads: a look never sleeps; the wait spins a
    /// little, then yields its thread), every later one
    /// sees the count moved and reads nothing. So the caller may free the
    /// range's memory when this returns.
    pub fn remove(&self, off: u64) {
        let mut r = self.ranges.write();
        r.retain(|&(o, _, _)| o != off);
        self.removals.fetch_add(1, Ordering::Relaxed);
        drop(r);
        // pairs with the fence in `Looker::if_unchanged` (a store-load
        // order on each side): either that look's load of the count sees
        // this removal, or the load of its slot below sees the look
        fence(Ordering::SeqCst);
        for slot in self.lookers.lock().iter() {
            wait_clear(slot, sync::yield_now);
        }
    }

    /// A look slot for a wait that reads words without the registry's
    /// lock while no range is removed ([`Looker::if_unchanged`]): taken
    /// once, before the wait's loop (one lock), given back when dropped.
    pub fn looker(&self) -> Looker<'_> {
        let slot = Arc::new(AtomicBool::new(false));
        self.lookers.lock().push(slot.clone());
        #[cfg(test)]
        self.slots_taken.fetch_add(1, Ordering::Relaxed);
        Looker {
            reg: self,
            slot,
            _one_thread: PhantomData,
        }
    }

    /// How many look slots were ever taken ([`looker`](Self::looker)).
    #[cfg(test)]
    pub fn slots_taken(&self) -> u64 {
        self.slots_taken.load(Ordering::Relaxed)
    }

    /// How many looks took the read lock
    /// ([`with_words_since`](Self::with_words_since)).
    #[cfg(test)]
    pub fn locked_looks(&self) -> u64 {
        self.locked_looks.load(Ordering::Relaxed)
    }

    /// How many ranges were removed so far. Read before recording a
    /// word's [`generation`](Self::generation): while
    /// [`with_words`](Self::with_words) still finds the same count, no
    /// range was removed since, so every word recorded then is still
    /// registered with that generation (a cheap check in place of one
    /// range lookup per word on every polling round).
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Whether `off` is a signal word: 8-aligned, inside a registered range.
    pub fn is_word(&self, off: u64) -> bool {
        off.is_multiple_of(8)
            && self
                .ranges
                .read()
                .iter()
                .any(|&(o, b, _)| off >= o && off - o < b)
    }

    /// The generation of the registered range that holds the signal word
    /// at `off`, or `None` when `off` is not a signal word.
    pub fn generation(&self, off: u64) -> Option<u64> {
        let r = self.ranges.read();
        word_generation(&r, off)
    }

    /// Run `f` under the registry's read lock, handing it the lookup
    /// "the generation of the range that holds the signal word `off`, if
    /// any" ([`generation`](Self::generation) on the locked ranges). A
    /// word `f` finds registered with the generation it recorded is still
    /// a word of the same array, and its memory allocated, until `f`
    /// returns: `Pgas::free_signals` removes the range under the write
    /// lock before it frees the memory, and a new array at the same
    /// offset has a new generation. `f` must not call back into the
    /// registry (the lock is not reentrant).
    pub fn with_words<R>(&self, f: impl FnOnce(&dyn Fn(u64) -> Option<u64>) -> R) -> R {
        self.with_words_since(|gen_of, _| f(gen_of))
    }

    /// [`with_words`](Self::with_words), also handing `f` the
    /// [`removals`](Self::removals) count read under the lock.
    pub fn with_words_since<R>(&self, f: impl FnOnce(&dyn Fn(u64) -> Option<u64>, u64) -> R) -> R {
        let r = self.ranges.read();
        #[cfg(test)]
        self.locked_looks.fetch_add(1, Ordering::Relaxed);
        let gen_of = |off: u64| word_generation(&r, off);
        // removals are counted under the write lock: stable while read here
        f(&gen_of, self.removals.load(Ordering::Relaxed))
    }
}

/// A wait's look slot in the [`Registry`] (from
/// [`Registry::looker`]): lets the wait read a word it recorded, while no
/// range was removed since, without the registry's lock; every removal
/// waits for a look in progress (see [`Registry::remove`]).
///
/// Not `Sync`: its one slot says whether *a* look is in progress, so two
/// threads looking through one `Looker` at once would let the first to
/// finish clear the slot while the other still reads, and a removal would
/// then free memory under that read. `Send` (a wait may move it).
pub(crate) struct Looker<'a> {
    reg: &'a Registry,
    slot: Arc<AtomicBool>,
    /// Makes `Looker` `!Sync` (and keeps it `Send`): one thread looks at
    /// a time.
    _one_thread: PhantomData<Cell<()>>,
}

// one slot, one thread at a time (see `Looker`)
static_assertions::assert_not_impl_any!(Looker<'static>: Sync);
static_assertions::assert_impl_all!(Looker<'static>: Send);

impl Looker<'_> {
    /// `Some(f())` if the registry's removal count is still `seen`, else
    /// `None` (some range went: the caller looks its words up under the
    /// lock, [`Registry::with_words_since`]). While `f` runs no range is
    /// removed (a removal waits for it), so a word `f` reads that was
    /// registered at count `seen` is still a word of the same array and
    /// its memory allocated. `f` must not call into the registry and
    /// must not block (a removal waits until it returns: a short spin, then
    /// yielding its thread).
    #[inline]
    pub(crate) fn if_unchanged<R>(&self, seen: u64, f: impl FnOnce() -> R) -> Option<R> {
        self.slot.store(true, Ordering::Relaxed);
        // pairs with the fence in `Registry::remove` (see there)
        fence(Ordering::SeqCst);
        let r = (self.reg.removals.load(Ordering::Relaxed) == seen).then(f);
        // release: a removal that sees false sees this look finished
        self.slot.store(false, Ordering::Release);
        r
    }
}

impl Drop for Looker<'_> {
    fn drop(&mut self) {
        self.reg
            .lookers
            .lock()
            .retain(|s| !Arc::ptr_eq(s, &self.slot));
    }
}

/// Spins of a removal waiting for a look before it starts to yield its
/// thread (a look is a few loads, but its thread may be preempted in it).
/// None in the loom model, where only a yield lets the look go on.
const SPINS_BEFORE_YIELD: u32 = if cfg!(all(test, loom)) { 0 } else { 64 };

/// Wait until the look slot `slot` is clear: spin a little, then call
/// `pause` (`std::thread::yield_now`) between looks, so a removal waiting
/// (with the `lookers` mutex held) for a preempted look gives its core
/// back. The acquire load: the look's word load happens before the free.
fn wait_clear(slot: &AtomicBool, mut pause: impl FnMut()) {
    let mut spins = 0;
    while slot.load(Ordering::Acquire) {
        if spins < SPINS_BEFORE_YIELD {
            spins += 1;
            std::hint::spin_loop();
        } else {
            pause();
        }
    }
}

/// The generation of the range in `ranges` holding the signal word `off`.
fn word_generation(ranges: &[(u64, u64, u64)], off: u64) -> Option<u64> {
    if !off.is_multiple_of(8) {
        return None;
    }
    ranges
        .iter()
        .find(|&&(o, b, _)| off >= o && off - o < b)
        .map(|&(_, _, g)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The removal count that lets a pointer wait skip its range lookups
    /// moves on every removal, and `with_words_since` sees it.
    #[test]
    fn defects2_registry_counts_removals() {
        let r = Registry::default();
        assert!(r.add(0x1000, 64) && r.add(0x2000, 64));
        let before = r.removals();
        assert_eq!(r.with_words_since(|_, n| n), before);
        r.remove(0x1000);
        assert_eq!(r.removals(), before + 1);
        assert_eq!(
            r.with_words_since(|gen_of, n| (gen_of(0x1000), n)),
            (None, before + 1)
        );
    }

    /// A look slot's read runs only while no range was removed since the
    /// count it was given, and a removal waits for a read in progress
    /// before it returns (so before the caller frees the memory).
    #[test]
    #[cfg_attr(miri, ignore = "two threads and a 50 ms pause")]
    fn signal_wait_a_removal_waits_for_a_lock_free_look() {
        use std::sync::atomic::AtomicBool;
        let r = Registry::default();
        assert!(r.add(0x1000, 64));
        let seen = r.removals();
        let (inside, finished) = (AtomicBool::new(false), AtomicBool::new(false));
        let looker = r.looker();
        std::thread::scope(|s| {
            // the looker moves to the looking thread and comes back (it
            // is not Sync: one thread looks through it at a time)
            let (inside, finished) = (&inside, &finished);
            let look = s.spawn(move || {
                let got = looker.if_unchanged(seen, || {
                    inside.store(true, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    finished.store(true, Ordering::SeqCst);
                });
                (got, looker)
            });
            while !inside.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            r.remove(0x1000);
            assert!(
                finished.load(Ordering::SeqCst),
                "remove returned while a look was reading"
            );
            let (got, looker) = look.join().unwrap();
            assert_eq!(got, Some(()));
            // the count moved: no more reads without the lock
            assert_eq!(looker.if_unchanged(seen, || ()), None);
            assert_eq!(looker.if_unchanged(r.removals(), || 7), Some(7));
            drop(looker);
        });
        // the slot was given back
        assert!(r.lookers.lock().is_empty());
    }

    /// A removal waiting for a look spins `SPINS_BEFORE_YIELD` times,
    /// then yields between looks (it does not spin on with the `lookers`
    /// mutex held), and returns once the slot is clear.
    #[test]
    fn signal_wait_a_removal_yields_while_a_look_lasts() {
        let slot = AtomicBool::new(true);
        let mut pauses = 0;
        wait_clear(&slot, || {
            pauses += 1;
            if pauses == 3 {
                slot.store(false, Ordering::Release);
            }
        });
        assert_eq!(pauses, 3);
        // a clear slot: no pause at all
        wait_clear(&slot, || panic!("paused on a clear slot"));
    }

    #[test]
    fn signals_registry_and_comparisons() {
        let r = Registry::default();
        assert!(r.add(0x1000, 64));
        assert!(r.is_word(0x1000) && r.is_word(0x1038));
        assert!(!r.is_word(0x1040) && !r.is_word(0x1004) && !r.is_word(0xff8));
        let g = r.generation(0x1008).expect("registered");
        assert_eq!(r.with_words(|gen_of| gen_of(0x1008)), Some(g));
        r.remove(0x1000);
        assert!(!r.is_word(0x1000));
        assert_eq!(r.generation(0x1008), None);
        // a new range at the same offset is another generation
        assert!(r.add(0x1000, 64));
        assert!(r.generation(0x1008).is_some_and(|n| n != g));
        r.remove(0x1000);
        for c in [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le] {
            let want = match c.symbol() {
                "==" => [false, true, false],
                "!=" => [true, false, true],
                ">" => [false, false, true],
                ">=" => [false, true, true],
                "<" => [true, false, false],
                _ => [true, true, false],
            };
            assert_eq!([c.holds(4, 5), c.holds(5, 5), c.holds(6, 5)], want, "{c:?}");
        }
        assert_eq!(SignalOp::decode(SignalOp::Add.code()), Some(SignalOp::Add));
        assert_eq!(SignalOp::decode(0), None);
        let w = AtomicU64::new(u64::MAX);
        SignalOp::Add.apply(&w, 2);
        assert_eq!(w.load(Ordering::Relaxed), 1, "wraps");
        SignalOp::Set.apply(&w, 9);
        assert_eq!(w.load(Ordering::Relaxed), 9);
    }
}

/// The loom model of the lock-free look (`RUSTFLAGS="--cfg loom" cargo
/// test -p splitrt-pgas --release --lib loom`): the real
/// [`Looker::if_unchanged`] and [`Registry::remove`] over loom's atomics,
/// fences and yield. The signal word's memory is a loom cell that the
/// removing thread frees (writes) as soon as `remove` returns, as
/// `Pgas::free_signals` does: a look that could still be reading it then
/// is a race loom reports (weakening the look's fence or its release of
/// the slot makes this model fail).
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::cell::UnsafeCell;

    #[test]
    fn loom_a_removal_waits_for_a_look_in_progress() {
        loom::model(|| {
            // 'static for the looking thread (one small leak a run)
            let reg: &'static Registry = Box::leak(Box::default());
            assert!(reg.add(0x1000, 64));
            let word = Arc::new(UnsafeCell::new(7u64));
            let seen = reg.removals();
            let looker = reg.looker();
            let w = word.clone();
            let look = loom::thread::spawn(move || {
                let got = looker.if_unchanged(seen, || {
                    // SAFETY: what the model checks: no removal returns
                    // (and frees the word) while this look reads it.
                    w.with(|p| unsafe { *p })
                });
                // the looker goes back to be dropped after the join: its
                // drop takes the `lookers` lock, a lock loom cannot see
                (got, looker)
            });
            reg.remove(0x1000);
            // the caller frees the range's memory once `remove` returned
            // SAFETY: what the model checks (see above).
            word.with_mut(|p| unsafe { *p = 0 });
            let (got, looker) = look.join().unwrap();
            assert!(got.is_none() || got == Some(7), "a look read {got:?}");
            // a look after the removal reads nothing
            assert_eq!(looker.if_unchanged(seen, || ()), None);
            drop(looker);
        });
    }
}
