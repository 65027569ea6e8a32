//! State shared between a rank's PGAS calls and its reserved AM handlers.

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
    pub error: Option<String>,
    /// The owner gave up (the job failed) and released the buffer: late
    /// replies are dropped, and the slot is freed by the last one, so the
    /// index is never reused while a reply for it may still arrive.
    pub cancelled: bool,
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
    /// Highest barrier epoch released.
    pub released: AtomicU64,
    /// all_store_sync: reports received and bytes announced, by epoch parity.
    pub store_reports: [AtomicU64; 2],
    pub store_expected: [AtomicU64; 2],
    /// Failures reported by peers' handlers, returned by the next sync.
    pub errors: Mutex<Vec<String>>,
    /// Whether `errors` may be non-empty (spares `sync` the lock).
    pub has_errors: std::sync::atomic::AtomicBool,
}

impl State {
    pub fn seg(&self) -> SegmentRef {
        *self
            .seg
            .get()
            .expect("segment set at attach, before any poll")
    }

    /// The counter of bytes stored into this rank, at segment offset 0.
    pub fn stored(&self) -> &AtomicU64 {
        stored_counter(self.seg())
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
/// Callers hold the `Pgas` (and so the mapping) for as long as they use it.
pub(crate) fn stored_counter<'a>(seg: SegmentRef) -> &'a AtomicU64 {
    // SAFETY: every segment is page aligned, at least 4 KiB, and its first
    // RESERVED_BYTES belong to splitrt (user accesses there are refused);
    // the mapping is owned by the endpoint, which outlives every caller (the
    // Pgas context and its handlers), and only atomics touch this word.
    unsafe { &*(seg.base as *const AtomicU64) }
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
