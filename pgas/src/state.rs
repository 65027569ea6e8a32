//! State shared between a rank's PGAS calls and its reserved AM handlers.

use crate::coll::Coll;
use parking_lot::Mutex;
use splitrt_runtime::fabric::SegmentRef;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A destination buffer of an AM-path get, kept alive by its owner (a scope
/// or a `Get` handle) until `remaining` reaches zero.
pub(crate) struct Dest {
    pub ptr: *mut u8,
    pub len: usize,
    pub remaining: usize,
    /// Bytes the replies carried so far: at completion they must be `len`
    /// (a short reply left part of the buffer unwritten).
    pub got: usize,
    pub error: Option<String>,
    /// The owner gave up (the job failed) and released the buffer: late
    /// replies are dropped, and the slot is freed by the last one, so the
    /// index is never reused while a reply for it may still arrive.
    pub cancelled: bool,
    /// The task awaiting this get as a future (`Get` / `GetInto`), woken
    /// by the reply handler that completes the slot.
    pub waker: Option<std::task::Waker>,
}

impl Dest {
    /// The last reply from `src` arrived: unless an error is recorded
    /// already, every byte asked for must have come (a short reply would
    /// leave part of the caller's buffer as it was, handed out as data).
    pub fn check_complete(&mut self, src: usize) {
        if self.error.is_none() && self.got != self.len {
            self.error = Some(format!(
                "rank {src}'s get replies carried {} of the {} bytes asked for",
                self.got, self.len
            ));
        }
    }

    /// Remember `w` as the task to wake at completion, replacing a waker
    /// of another task (a future moved to another task, or polled with a
    /// new waker); the same task's waker is kept, no clone. Returns the
    /// replaced waker, for the caller to drop once it has unlocked the
    /// slot table (a waker's drop runs executor code).
    #[must_use = "drop the replaced waker after unlocking"]
    pub fn set_waker(&mut self, w: &std::task::Waker) -> Option<std::task::Waker> {
        match &self.waker {
            Some(old) if old.will_wake(w) => None,
            _ => self.waker.replace(w.clone()),
        }
    }
}

// SAFETY: `ptr` is only dereferenced by the reply handler, under the slots
// lock, while the owner keeps the buffer alive (it waits for `remaining == 0`
// before releasing it, also on unwinding).
unsafe impl Send for Dest {}

/// Slot table: small integers on the wire instead of addresses.
pub(crate) struct Slots<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i).and_then(Option::as_mut)
    }
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.items.get_mut(i)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
}

/// The outcome of an AM-path atomic.
pub(crate) enum AtomicSlot {
    Waiting,
    Done(u64),
    Failed(String),
    /// The caller gave up; the reply frees the slot.
    Cancelled,
}

#[derive(Default)]
pub(crate) struct State {
    pub rank: OnceLock<usize>,
    pub seg: OnceLock<SegmentRef>,
    pub gets_done: AtomicU64,
    pub puts_done: AtomicU64,
    pub dests: Mutex<Slots<Dest>>,
    pub atomics: Mutex<Slots<AtomicSlot>>,
    /// Barrier arrivals counted at rank 0, by epoch parity.
    pub arrivals: [AtomicU64; 2],
    /// Who arrived in which collective, by epoch parity (rank 0 only).
    pub arrived: Mutex<[Arrived; 2]>,
    /// Two ranks met in different collectives: why.
    pub mismatch: Mutex<Option<String>>,
    pub has_mismatch_flag: std::sync::atomic::AtomicBool,
    /// Ranks in the job.
    pub size: OnceLock<usize>,
    /// Highest barrier epoch released.
    pub released: AtomicU64,
    /// all_store_sync: reports received and bytes announced, by epoch parity.
    pub store_reports: [AtomicU64; 2],
    pub store_expected: [AtomicU64; 2],
    /// Failures reported by peers' handlers, returned by the next sync.
    pub errors: Mutex<Vec<String>>,
    /// Whether `errors` may be non-empty (spares `sync` the lock).
    pub has_errors: std::sync::atomic::AtomicBool,
    /// Puts issued to and acknowledged by each peer (`Pgas::quiet_peer`);
    /// set at attach, once the job's size is known.
    pub peer_puts: OnceLock<crate::peer_books::PeerBooks>,
    /// Which segment ranges hold signal words (`Pgas::alloc_signals`).
    pub signals: crate::signal_word::Registry,
    /// The world barrier's host reports and form (`world_barrier.rs`).
    pub world_bar: crate::world_barrier_state::Shared,
}

/// The arrivals of one barrier epoch at rank 0.
#[derive(Default)]
pub(crate) struct Arrived {
    /// Collective code of the first arrival (0: none yet).
    kind: u64,
    first: usize,
    ranks: Vec<bool>,
}

impl State {
    pub fn size(&self) -> usize {
        self.size.get().copied().unwrap_or(1)
    }

    /// Rank `src` entered barrier `epoch` of collective `kind` (a `Coll`
    /// code). A kind other than the first arrival's is a mismatch.
    pub fn arrive(&self, epoch: u64, kind: u64, src: usize, size: usize) {
        let p = (epoch % 2) as usize;
        let mut a = self.arrived.lock();
        let slot = &mut a[p];
        if slot.ranks.len() != size {
            slot.ranks = vec![false; size];
        }
        let name = |k: u64| Coll::from_code(k).map_or("an unknown collective", Coll::name);
        if slot.kind == 0 {
            slot.kind = kind;
            slot.first = src;
        } else if slot.kind != kind || slot.ranks.get(src).copied().unwrap_or(true) {
            let why = format!(
                "collective mismatch: rank {src} is in {} #{epoch} while rank {} is in {} #{epoch} \
                 (every rank must call the same collectives in the same order)",
                name(kind),
                slot.first,
                name(slot.kind)
            );
            self.mismatch.lock().get_or_insert(why);
            self.has_mismatch_flag.store(true, Ordering::Release);
        }
        if let Some(r) = slot.ranks.get_mut(src) {
            *r = true;
        }
        self.arrivals[p].fetch_add(1, Ordering::AcqRel);
    }

    pub fn has_mismatch(&self) -> bool {
        self.has_mismatch_flag.load(Ordering::Acquire)
    }

    pub fn mismatch(&self) -> Option<String> {
        if !self.has_mismatch() {
            return None;
        }
        self.mismatch.lock().clone()
    }

    /// Ranks that have not arrived in the barrier of parity `p`.
    pub fn missing(&self, p: usize, size: usize) -> Vec<usize> {
        let a = self.arrived.lock();
        (0..size)
            .filter(|&r| !a[p].ranks.get(r).copied().unwrap_or(false))
            .collect()
    }

    /// The barrier of parity `p` is released: clear it for epoch + 2.
    pub fn reset_arrivals(&self, p: usize) {
        let mut a = self.arrived.lock();
        a[p].kind = 0;
        a[p].ranks.iter_mut().for_each(|r| *r = false);
        self.arrivals[p].store(0, Ordering::Release);
    }

    pub fn seg(&self) -> SegmentRef {
        *self
            .seg
            .get()
            .expect("segment set at attach, before any poll")
    }

    /// The counter of bytes stored into this rank, at segment offset 0.
    pub fn stored(&self) -> &AtomicU64 {
        // SAFETY: the local segment, taken from the endpoint that owns the
        // fabric; this State is used only by that endpoint's handlers and
        // the Pgas holding it, never after it is gone.
        unsafe { stored_counter(self.seg()) }
    }

    pub fn fail(&self, why: String) {
        let mut e = self.errors.lock();
        if e.len() < 16 {
            e.push(why);
        }
        self.has_errors.store(true, Ordering::Release);
    }
}

/// The stored-bytes counter of a segment (its first 8 bytes, reserved).
///
/// # Safety
/// `seg` is a segment of the endpoint's fabric (page aligned, at least
/// 4 KiB), and the caller keeps that fabric (the `Pgas` or the endpoint)
/// alive for as long as it uses the returned reference (`'a` is unbounded).
pub(crate) unsafe fn stored_counter<'a>(seg: SegmentRef) -> &'a AtomicU64 {
    // SAFETY: the segment is page aligned and at least 4 KiB (this
    // function's contract); its first RESERVED_BYTES belong to splitrt
    // (user accesses there are refused), only atomics touch this word, and
    // the caller keeps the mapping alive for 'a.
    unsafe { &*(seg.base() as *const AtomicU64) }
}

/// Monotonic counters of issued operations, compared with the handler
/// side's completion counters.
#[derive(Default)]
pub(crate) struct Issued {
    pub gets: AtomicU64,
    pub puts: AtomicU64,
}

impl Issued {
    pub fn add_gets(&self, n: u64) {
        self.gets.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_puts(&self, n: u64) {
        self.puts.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A get's slot keeps one waker: the same task's is kept (no clone),
    /// another task's replaces it, so the task that polled last is woken.
    /// Replies that carried fewer bytes than the get asked for complete
    /// it with an error naming the rank, not with part of the buffer as
    /// it was (found in review).
    #[test]
    fn a_get_whose_replies_fall_short_is_an_error() {
        let mut d = Dest {
            ptr: std::ptr::null_mut(),
            len: 16,
            remaining: 0,
            got: 8,
            error: None,
            cancelled: false,
            waker: None,
        };
        d.check_complete(3);
        let e = d.error.clone().expect("short replies are an error");
        assert!(e.contains("rank 3") && e.contains("8 of the 16"), "{e}");
        d.error = Some("refused".into());
        d.check_complete(3);
        assert_eq!(d.error.as_deref(), Some("refused"), "the first error stays");
        let mut full = Dest {
            got: 16,
            error: None,
            ..d
        };
        full.check_complete(3);
        assert!(full.error.is_none());
    }

    #[test]
    fn a_slot_keeps_the_waker_of_the_task_that_polled_last() {
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let mut d = Dest {
            ptr: std::ptr::null_mut(),
            len: 0,
            remaining: 1,
            got: 0,
            error: None,
            cancelled: false,
            waker: None,
        };
        assert!(d.set_waker(&wa).is_none());
        assert!(d.set_waker(&wa.clone()).is_none());
        assert_eq!(
            Arc::strong_count(&a),
            3,
            "one clone kept (a, wa, the slot's)"
        );
        let old = d.set_waker(&wb);
        assert_eq!(Arc::strong_count(&a), 3, "a's waker handed back");
        drop(old);
        assert_eq!(Arc::strong_count(&a), 2, "a's waker replaced");
        d.waker.take().expect("b's waker").wake();
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert_eq!(a.0.load(Ordering::SeqCst), 0);
    }
}
