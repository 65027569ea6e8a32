//! Rows a consumer's caller offers for valid spectra to land in: the
//! consumer's thread reads (and validates) a spectrum of this host's
//! producers straight into the next free row instead of a pool buffer, so
//! a batch of spectra is filled without a second copy
//! ([`Consumer::recv_into`](super::consumer::Consumer::recv_into)).
//!
//! Soundness rests on one mutex: the consumer's thread writes a row only
//! while it holds it (the row after the filled ones), the caller copies
//! a spectrum it took from the queue only into a row it claimed under it
//! (counted filled at once, so the consumer's thread never writes it),
//! and the offer is withdrawn under it before the caller's borrow of the
//! rows ends ([`Offer`]'s drop), so no write can reach the rows after
//! the call returns. The consumer's thread never waits for the caller:
//! it lands a spectrum only if it gets the lock at once, else delivers it
//! the usual way; the caller holds the lock only to claim rows and to
//! start waiting. A row counts as
//! filled only once its spectrum validated; a row a failed validation
//! wrote is the next landing's, and zeroed if it is still the first free
//! row when the offer ends: the caller never holds bytes that failed
//! validation in a row it is told is filled, nor in the one after.
//! Generic over the record kept per row, so it does not name the
//! consumer that uses it.

use super::ring::ReadOutcome;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The rows on offer: `cap` rows of `bytes` bytes from `ptr`.
#[derive(Clone, Copy)]
struct Rows {
    ptr: *mut u8,
    cap: usize,
    bytes: usize,
}

// SAFETY: the pointer is used only under `Landing::state`'s mutex, by
// whichever thread holds it, while the offer that made it lives (see the
// module's rules); the memory is plain bytes.
unsafe impl Send for Rows {}

impl Rows {
    /// Where row `i` starts (a pointer only: using it is the caller's
    /// business).
    fn at(&self, i: usize) -> *mut u8 {
        self.ptr.wrapping_add(i * self.bytes)
    }
}

struct State<R> {
    /// The rows on offer, if any.
    rows: Option<Rows>,
    /// Rows filled (their spectra valid).
    filled: usize,
    /// Rows filled from the queue by the caller (the rest landed).
    copied: usize,
    /// Row `filled` holds bytes of a spectrum that failed validation.
    dirty: bool,
    /// One record per filled row, in row order.
    records: Vec<R>,
}

/// Where valid spectra may land (one per consumer, shared by its thread
/// and the callers).
pub(crate) struct Landing<R> {
    state: Mutex<State<R>>,
    cv: Condvar,
    /// Rows are on offer (a hint read without the lock, so that a
    /// consumer nobody offers rows to pays one load per spectrum).
    offered: AtomicBool,
    /// One offer at a time.
    one: Mutex<()>,
}

impl<R> Default for Landing<R> {
    fn default() -> Self {
        Landing {
            state: Mutex::new(State {
                rows: None,
                filled: 0,
                copied: 0,
                dirty: false,
                records: Vec::new(),
            }),
            cv: Condvar::new(),
            offered: AtomicBool::new(false),
            one: Mutex::new(()),
        }
    }
}

impl<R> Landing<R> {
    /// The consumer's thread: land one valid-to-be spectrum of `bytes`
    /// bytes if rows of that size are on offer with one free and `may()`
    /// (asked under the lock: nothing the caller must take first is
    /// queued). `read` fills the row and validates it; `record` is kept
    /// with a valid one. `None`: not landed (deliver it the usual way);
    /// else the outcome of `read` (a row counts only if `Valid`).
    pub(crate) fn land(
        &self,
        bytes: usize,
        may: impl FnOnce() -> bool,
        read: impl FnOnce(&mut [u8]) -> ReadOutcome,
        record: impl FnOnce() -> R,
    ) -> Option<ReadOutcome> {
        if !self.offered.load(Ordering::Relaxed) {
            return None;
        }
        // the caller holds the lock only briefly; but never wait for it
        let mut g = self.state.try_lock()?;
        let rows = g.rows?;
        if rows.bytes != bytes || g.filled >= rows.cap || !may() {
            return None;
        }
        // SAFETY: row `filled` < `cap` of the offered rows: in bounds of
        // the caller's `&mut [u8]`, which its `Offer` borrows until the
        // offer is withdrawn under this lock (held here); only the lock's
        // holder touches the rows.
        let row = unsafe { std::slice::from_raw_parts_mut(rows.at(g.filled), bytes) };
        // dirty until the read proves valid: a `read` that panics part-way
        // leaves the row to be zeroed at withdrawal too
        g.dirty = true;
        let o = read(row);
        if o == ReadOutcome::Valid {
            g.records.push(record());
            g.filled += 1;
            g.dirty = false;
            if g.filled == rows.cap {
                self.cv.notify_all();
            }
        }
        Some(o)
    }

    /// The consumer's thread queued messages: wake a caller waiting on
    /// its offer so it takes them.
    pub(crate) fn wake(&self) {
        if self.offered.load(Ordering::Relaxed) {
            // the lock orders this after the caller's look at the queue
            let _g = self.state.lock();
            self.cv.notify_all();
        }
    }

    /// Offer `rows` (whole rows of `bytes` bytes; a shorter tail is not
    /// used) until the returned [`Offer`] is finished or dropped. Waits
    /// for another caller's offer to end first.
    ///
    /// # Safety
    /// The returned [`Offer`] must be finished or dropped, never leaked
    /// (`mem::forget`, a cycle): only its `Drop` withdraws the rows, and a
    /// leaked offer would let the consumer's thread write into `rows`
    /// after their borrow ended (as with the old `thread::scoped`).
    pub(crate) unsafe fn offer<'a>(&'a self, rows: &'a mut [u8], bytes: usize) -> Offer<'a, R> {
        let one = self.one.lock();
        let cap = rows.len().checked_div(bytes).unwrap_or(0);
        let r = Rows {
            ptr: rows.as_mut_ptr(),
            cap,
            bytes,
        };
        {
            let mut g = self.state.lock();
            g.rows = Some(r);
            g.filled = 0;
            g.copied = 0;
            g.dirty = false;
            g.records.clear();
        }
        self.offered.store(true, Ordering::Relaxed);
        Offer {
            landing: self,
            _one: one,
            rows: r,
            _rows: PhantomData,
        }
    }
}

/// Rows on offer; withdrawn when dropped (or [`Offer::finish`]ed).
pub(crate) struct Offer<'a, R> {
    landing: &'a Landing<R>,
    _one: MutexGuard<'a, ()>,
    rows: Rows,
    /// The rows stay borrowed while they are on offer.
    _rows: PhantomData<&'a mut [u8]>,
}

/// A row the caller claimed (its index).
pub(crate) struct Claim(usize);

/// An offer's state, locked: the consumer's thread lands nothing
/// meanwhile.
pub(crate) struct Locked<'o, R> {
    g: MutexGuard<'o, State<R>>,
    cv: &'o Condvar,
}

impl<'a, R> Offer<'a, R> {
    /// Lock the offer's state.
    pub(crate) fn lock(&self) -> Locked<'_, R> {
        Locked {
            g: self.landing.state.lock(),
            cv: &self.landing.cv,
        }
    }

    /// Copy `data` into the row `claim` names (the lock not held: the row
    /// is this caller's alone).
    pub(crate) fn fill(&self, claim: Claim, data: &[u8]) {
        debug_assert_eq!(data.len(), self.rows.bytes);
        let n = data.len().min(self.rows.bytes);
        // SAFETY: row `claim.0` < `cap` of the rows this offer borrows
        // (claimed by `Locked::claim`, bounds checked there), counted as
        // filled at its claim so the consumer's thread, which writes only
        // the row after the filled ones, never touches it; `n` bytes fit
        // a row and `data` is another allocation (the caller's spectrum).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.rows.at(claim.0), n) };
    }

    /// Withdraw the rows: append the filled rows' records to `out`;
    /// (filled, of which copied by the caller).
    pub(crate) fn finish(self, out: &mut Vec<R>) -> (usize, usize) {
        let mut g = self.landing.state.lock();
        withdraw(&mut g, &self.landing.offered);
        out.append(&mut g.records);
        (g.filled, g.copied)
    }
}

/// End the offer (under the lock): no row is written after this; a first
/// free row a failed validation wrote is zeroed.
fn withdraw<R>(g: &mut State<R>, offered: &AtomicBool) {
    let Some(rows) = g.rows.take() else { return };
    offered.store(false, Ordering::Relaxed);
    if g.dirty && g.filled < rows.cap {
        // SAFETY: as in `Landing::land`: a row of the offered rows, still
        // borrowed by the offer being ended, under the lock.
        unsafe { std::ptr::write_bytes(rows.at(g.filled), 0, rows.bytes) };
        g.dirty = false;
    }
}

impl<R> Drop for Offer<'_, R> {
    fn drop(&mut self) {
        withdraw(&mut self.landing.state.lock(), &self.landing.offered);
    }
}

impl<R> Locked<'_, R> {
    /// Every row is filled.
    pub(crate) fn full(&self) -> bool {
        self.g.rows.is_none_or(|r| self.g.filled >= r.cap)
    }

    /// Claim the next free row for a valid spectrum of `bytes` bytes the
    /// caller took (to copy with [`Offer::fill`], before the offer ends);
    /// `None` (nothing done) if it is not of the rows' size or none is
    /// free.
    pub(crate) fn claim(&mut self, bytes: usize, record: R) -> Option<Claim> {
        let rows = self.g.rows?;
        if bytes != rows.bytes || self.g.filled >= rows.cap {
            return None;
        }
        let k = self.g.filled;
        self.g.records.push(record);
        self.g.filled += 1;
        self.g.copied += 1;
        // a row a failed validation wrote is the caller's now: overwritten
        self.g.dirty = false;
        Some(Claim(k))
    }

    /// Wait (the lock released) until woken or `until`.
    pub(crate) fn wait_until(&mut self, until: Instant) {
        let _ = self.cv.wait_until(&mut self.g, until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A "consumer thread" lands rows (valid ones filled with their
    /// number, every third one failing after writing junk) while the
    /// caller claims and fills rows of its own: every filled row holds
    /// its record's number, the first free row no junk, and nothing is
    /// written after the offer ends (Miri checks the accesses).
    #[test]
    fn rows_landed_and_claimed_hold_their_records_and_nothing_after_the_offer() {
        let bytes = 16;
        let rounds = if cfg!(miri) { 3 } else { 200 };
        let landing: Arc<Landing<u64>> = Arc::new(Landing::default());
        let stop = Arc::new(AtomicBool::new(false));
        let l = landing.clone();
        let s = stop.clone();
        let worker = std::thread::spawn(move || {
            let mut k = 1_000u64;
            let mut landed = 0u64;
            while !s.load(Ordering::Relaxed) {
                k += 1;
                let bad = k.is_multiple_of(3);
                let o = l.land(
                    bytes,
                    || true,
                    |row| {
                        if bad {
                            row.fill(0xee);
                            ReadOutcome::Overwritten
                        } else {
                            row.fill(k as u8);
                            ReadOutcome::Valid
                        }
                    },
                    || k,
                );
                landed += u64::from(o == Some(ReadOutcome::Valid));
                std::thread::yield_now();
            }
            landed
        });
        let (mut total, mut claims) = (0u64, 0u64);
        for r in 0..rounds {
            let mut rows = vec![0x55u8; 8 * bytes];
            let mut records = Vec::new();
            {
                // SAFETY: the offer is a local of this block, dropped at
                // its end (never leaked).
                let offer = unsafe { landing.offer(&mut rows, bytes) };
                let claim = offer.lock().claim(bytes, r);
                let claimed = claim.is_some();
                if let Some(c) = claim {
                    offer.fill(c, &[r as u8; 16]);
                    claims += 1;
                }
                let until = Instant::now() + Duration::from_millis(if cfg!(miri) { 1 } else { 2 });
                let mut g = offer.lock();
                while !g.full() && Instant::now() < until {
                    g.wait_until(until);
                }
                drop(g);
                let (filled, copied) = offer.finish(&mut records);
                assert_eq!((filled, copied), (records.len(), usize::from(claimed)));
            }
            // the offer is over: whatever the worker does now, not here
            let snapshot = rows.clone();
            std::thread::yield_now();
            assert_eq!(rows, snapshot);
            for (i, k) in records.iter().enumerate() {
                assert!(rows[i * bytes..(i + 1) * bytes]
                    .iter()
                    .all(|&b| b == *k as u8));
            }
            if let Some(free) = rows.get(records.len() * bytes..(records.len() + 1) * bytes) {
                assert!(free.iter().all(|&b| b == 0x55) || free.iter().all(|&b| b == 0));
            }
            total += records.len() as u64;
        }
        stop.store(true, Ordering::Relaxed);
        let landed = worker.join().unwrap();
        assert!(claims > 0 && total >= claims, "{total} {claims}");
        assert_eq!(
            landed,
            total - claims,
            "every valid landing in a row handed out"
        );
        // no rows on offer: nothing lands
        assert_eq!(landing.land(bytes, || true, |_| unreachable!(), || 0), None);
    }
}
