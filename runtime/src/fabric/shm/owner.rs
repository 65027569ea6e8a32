//! Lock-free access for a rank that promised to call splitrt from one
//! thread only (`SPLITRT_THREADS=single`, as MPI_THREAD_FUNNELED or a
//! GASNet-EX SEQ build): its sends and polls take no lock, so its hot path
//! has no atomic read-modify-write (each a locked instruction; Short and
//! small-Medium floods went 13-21% faster, round trips did not move
//! measurably). The promise is
//! checked, not trusted: every entry compares the calling thread with the
//! one that attached, and a call from another thread is refused with an
//! error instead of racing.

use crate::{Error, Result};
use parking_lot::{Mutex, MutexGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// State behind a lock that a single-threaded rank's owner thread enters
/// without it. `busy` stands in for the lock on that thread (plain loads
/// and stores, no read-modify-write): a nested entry (a handler polling
/// the channel being polled) is refused as a held lock would refuse it,
/// so two `&mut` never exist at once.
pub(crate) struct Guarded<T> {
    lock: Mutex<T>,
    busy: AtomicBool,
}

impl<T> Guarded<T> {
    pub(crate) fn new(v: T) -> Self {
        Guarded {
            lock: Mutex::new(v),
            busy: AtomicBool::new(false),
        }
    }

    /// Through the lock, whatever the thread mode (tests).
    #[cfg(test)]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.lock.lock()
    }
}

/// An address unique to the calling thread while it lives.
#[inline(always)]
fn this_thread() -> usize {
    thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| m as *const u8 as usize)
}

/// Which thread may use the fabric's rings without locks, if one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner(Option<usize>);

impl Owner {
    /// Any thread, through the locks (the default).
    pub(crate) fn any() -> Owner {
        Owner(None)
    }

    /// Only the calling thread, without locks.
    pub(crate) fn this_thread() -> Owner {
        Owner(Some(this_thread()))
    }

    /// Whether the calling thread may call: any thread without an owner,
    /// else the owner only.
    #[inline]
    pub(crate) fn allows_this_thread(&self) -> Result<()> {
        if self.0.is_none() || self.is_current() {
            Ok(())
        } else {
            Err(Self::wrong_thread())
        }
    }

    /// Whether the calling thread is the owner (always false without one).
    #[inline]
    fn is_current(&self) -> bool {
        self.0 == Some(this_thread())
    }

    /// `Ok` on the owner thread; the error a caller on another thread gets.
    #[inline]
    fn check(&self) -> Result<()> {
        if self.is_current() {
            Ok(())
        } else {
            Err(Self::wrong_thread())
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong_thread() -> Error {
        Error::usage(
            "splitrt was called from a thread other than the one that attached the \
             endpoint, but SPLITRT_THREADS=single promised one thread; unset it (or set \
             SPLITRT_THREADS=multiple) to call from several threads",
        )
    }

    /// Exclusive access to `g`: its lock when any thread may call; on the
    /// owner thread of a single-threaded rank, no lock at all. Entering
    /// one that this thread is already in is refused (a lock would
    /// deadlock).
    #[inline(always)]
    pub(crate) fn lock<'a, T>(&self, g: &'a Guarded<T>) -> Result<Access<'a, T>> {
        if self.0.is_none() {
            return Ok(Access::Locked(g.lock.lock()));
        }
        self.check()?;
        Self::enter(g).ok_or_else(Self::entered_twice)
    }

    #[cold]
    #[inline(never)]
    fn entered_twice() -> Error {
        Error::protocol("shm ring state entered twice by one thread")
    }

    /// As [`lock`](Self::lock), but `None` if it is held (by another
    /// thread, or by this one further up the stack) or, single-threaded,
    /// if the caller is not the owner.
    #[inline]
    pub(crate) fn try_lock<'a, T>(&self, g: &'a Guarded<T>) -> Option<Access<'a, T>> {
        if self.0.is_none() {
            return g.lock.try_lock().map(Access::Locked);
        }
        self.check().ok()?;
        Self::enter(g)
    }

    /// The owner thread's entry (the caller checked the thread).
    #[inline]
    fn enter<T>(g: &Guarded<T>) -> Option<Access<'_, T>> {
        if g.busy.load(Ordering::Relaxed) {
            return None;
        }
        g.busy.store(true, Ordering::Relaxed);
        // SAFETY: only the owner thread gets here (the caller checked), and
        // `busy` was clear: no other reference to the state exists on this
        // thread (the flag is cleared when the last one drops), and no
        // other thread reaches the state of a single-threaded rank (every
        // entry checks the thread). The lock itself is never taken.
        Some(Access::Owned(unsafe { &mut *g.lock.data_ptr() }, &g.busy))
    }
}

/// Exclusive access from [`Owner::lock`] / [`Owner::try_lock`].
pub(crate) enum Access<'a, T> {
    /// Through the lock.
    Locked(MutexGuard<'a, T>),
    /// The owner thread's, without a lock (the flag is cleared on drop).
    Owned(&'a mut T, &'a AtomicBool),
}

impl<T> Drop for Access<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Access::Owned(_, busy) = self {
            busy.store(false, Ordering::Relaxed);
        }
    }
}

impl<T> Deref for Access<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            Access::Locked(g) => g,
            Access::Owned(r, _) => r,
        }
    }
}

impl<T> DerefMut for Access<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match self {
            Access::Locked(g) => g,
            Access::Owned(r, _) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_thread_gets_in_without_the_lock() {
        let g = Guarded::new(5);
        let owner = Owner::this_thread();
        assert!(matches!(owner.lock(&g).unwrap(), Access::Owned(..)));
        *owner.lock(&g).unwrap() += 1;
        {
            // nested on the owner thread: refused, as a held lock
            let _outer = owner.lock(&g).unwrap();
            assert!(owner.try_lock(&g).is_none());
            assert!(owner.lock(&g).is_err());
        }
        assert!(owner.try_lock(&g).is_some(), "released on drop");
        std::thread::scope(|s| {
            s.spawn(|| {
                let e = owner.lock(&g).err().expect("another thread is refused");
                assert!(e.to_string().contains("SPLITRT_THREADS=single"), "{e}");
                assert!(owner.try_lock(&g).is_none());
            });
        });
        let any = Owner::any();
        assert!(matches!(any.lock(&g).unwrap(), Access::Locked(_)));
        assert_eq!(*any.lock(&g).unwrap(), 6);
    }
}
