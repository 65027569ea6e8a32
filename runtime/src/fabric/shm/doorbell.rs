//! A rank's doorbell: how a rank with nothing to do sleeps in the kernel
//! until a peer on its host gives it something, instead of waking on a
//! timer.
//!
//! Two 32-bit words on their own cache line of the rank's file header
//! ([`DOORBELL_OFF`]): `sleepers` counts the rank's threads asleep (or
//! about to be) on it, `bell` is a sequence number they sleep on with a
//! shared futex (`FUTEX_WAIT` on the mapped word, so processes share it).
//!
//! A sleeper announces itself (`sleepers += 1`), reads `bell`, looks once
//! more for work, and only then waits for `bell` to change. Whoever makes
//! work for the rank (a message in one of its rings, room in a ring it is
//! sending into, a native put / store / atomic into its segment) reads
//! `sleepers` after publishing, and only if it is non-zero bumps `bell` and
//! wakes the sleepers: the common case costs the waker one load of a line
//! that stays in its cache.
//!
//! The waker's load is not fenced against its publish (a fence per message
//! would cost more than it saves), so in a window of a few nanoseconds a
//! wake-up can be missed; every wait is therefore bounded
//! ([`WAIT_LIMIT`]), which also lets a sleeping rank notice a failed job.
//! The words are in a file peers can write: a hostile or broken peer can
//! cause spurious wake-ups or missed ones (bounded by the limit), nothing
//! else.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The doorbell's orderings, shared with its loom model (`super::models`,
/// `--cfg loom`): weakening one here makes the model fail.
pub(crate) mod order {
    use std::sync::atomic::Ordering;
    /// A waker's look at `sleepers` after publishing (unfenced: see the
    /// module docs).
    pub(crate) const LOOK: Ordering = Ordering::Relaxed;
    /// A waker's bump of `bell`.
    pub(crate) const BUMP: Ordering = Ordering::SeqCst;
    /// A sleeper's announcement (`sleepers += 1`).
    pub(crate) const ANNOUNCE: Ordering = Ordering::SeqCst;
    /// A sleeper's read of `bell` before its last look for work.
    pub(crate) const SNAPSHOT: Ordering = Ordering::SeqCst;
}

/// Offset of the doorbell in a rank's file (the header's second cache line).
pub const DOORBELL_OFF: usize = 64;

/// The longest one wait sleeps without a ring (a missed wake-up costs at
/// most this; a sleeping rank checks for a failed job this often).
pub const WAIT_LIMIT: Duration = Duration::from_millis(2);

/// The doorbell words (in shared memory; see the module docs).
#[repr(C, align(64))]
pub struct Doorbell {
    /// Bumped by every ring; sleepers wait for it to change.
    pub bell: AtomicU32,
    /// Threads of the owner asleep on `bell`, or about to be.
    pub sleepers: AtomicU32,
}

static_assertions::const_assert!(std::mem::size_of::<Doorbell>() <= 64);

impl Doorbell {
    /// Wake the owner's sleepers, if there are any. Call after publishing
    /// the work they should see.
    #[inline]
    pub fn ring(&self) {
        if self.sleepers.load(order::LOOK) != 0 {
            self.ring_slow();
        }
    }

    /// The ring count now. A waiter that reads it before it looks at
    /// memory peers write directly, and sleeps only while the count is
    /// still this, misses no [`ring_counted`](Self::ring_counted) made
    /// after its look (the doorbell bridge's signal futures).
    pub fn seq(&self) -> u32 {
        self.bell.load(Ordering::SeqCst)
    }

    /// [`ring`](Self::ring) that counts even when nobody sleeps: for a
    /// write a waiter that is not asleep yet must still notice (a signal
    /// word written straight into the owner's segment), at the cost of
    /// one atomic add on the doorbell's line.
    pub fn ring_counted(&self) {
        self.bell.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            // SAFETY: as in `ring_slow`.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.bell.as_ptr(),
                    libc::FUTEX_WAKE,
                    i32::MAX,
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<u32>(),
                    0u32,
                );
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn ring_slow(&self) {
        self.bell.fetch_add(1, order::BUMP);
        // SAFETY: `bell` is a valid, aligned u32 in a shared mapping that
        // outlives this call; FUTEX_WAKE only reads the address.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.bell.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Sleep until rung or `limit` (at most [`WAIT_LIMIT`]) passed, unless
    /// `has_work()` (checked after announcing the sleep) finds work.
    /// Returns whether it slept and was rung (not timed out).
    pub fn wait(&self, limit: Duration, has_work: impl FnOnce() -> bool) -> bool {
        self.wait_capped(limit.min(WAIT_LIMIT), has_work)
    }

    fn wait_capped(&self, limit: Duration, has_work: impl FnOnce() -> bool) -> bool {
        self.sleepers.fetch_add(1, order::ANNOUNCE);
        let seq = self.bell.load(order::SNAPSHOT);
        let slept = !has_work();
        if slept {
            let ts = libc::timespec {
                tv_sec: limit.as_secs() as libc::time_t,
                tv_nsec: limit.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as in `ring_slow`; FUTEX_WAIT reads `bell` and sleeps
            // only while it still equals `seq`, at most `ts` (relative).
            // Any result (woken, timed out, value changed, interrupted)
            // just ends the wait.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.bell.as_ptr(),
                    libc::FUTEX_WAIT,
                    seq,
                    &ts as *const libc::timespec,
                    std::ptr::null::<u32>(),
                    0u32,
                );
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        slept && self.bell.load(Ordering::Relaxed) != seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    fn bell() -> Arc<Doorbell> {
        Arc::new(Doorbell {
            bell: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        })
    }

    #[test]
    fn work_found_after_announcing_means_no_sleep() {
        let b = bell();
        assert!(!b.wait(Duration::from_secs(1), || true));
        assert_eq!(b.sleepers.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_unrung_wait_ends_at_the_limit() {
        let b = bell();
        let t = Instant::now();
        // slept, but timed out: not rung
        assert!(!b.wait(Duration::from_secs(5), || false));
        let e = t.elapsed();
        assert!(e >= WAIT_LIMIT && e < Duration::from_secs(2), "{e:?}");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "timing: under isolation Miri's clock advances with the instructions run, so the sleeper's time limit can pass before the ring (the protocol itself has a loom model)"
    )]
    fn a_ring_wakes_a_sleeper_and_costs_nothing_without_one() {
        let b = bell();
        b.ring();
        assert_eq!(b.bell.load(Ordering::Relaxed), 0, "no sleeper: no bump");
        // A sleeper with a 60 s limit: only a ring can end its wait soon.
        for _ in 0..20 {
            let b2 = b.clone();
            let t = std::thread::spawn(move || b2.wait_capped(Duration::from_secs(60), || false));
            let start = Instant::now();
            while b.sleepers.load(Ordering::SeqCst) == 0 {
                assert!(start.elapsed() < Duration::from_secs(10), "never slept");
                std::thread::yield_now();
            }
            // rung until it returns (a ring between its announce and its
            // futex call changes `bell`, so the futex returns at once)
            while !t.is_finished() {
                assert!(start.elapsed() < Duration::from_secs(10), "not woken");
                b.ring();
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(t.join().unwrap(), "a ring ended the wait");
        }
    }
}
