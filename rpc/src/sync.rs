//! The atomics, cell and waker register of the lock-free result slot
//! (`slot.rs`) and the lone-call cell (`lone.rs`): the standard ones and [`atomic_waker::AtomicWaker`], or
//! loom's under `--cfg loom` (its model checker sees every access).

#[cfg(not(loom))]
pub(crate) use atomic_waker::AtomicWaker;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// `std`'s cell with loom's access-by-closure interface.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `v`.
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    /// Run `f` on a pointer to the value (the caller's protocol makes the
    /// access exclusive).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A stand-in with [`atomic_waker::AtomicWaker`]'s contract for the loom
/// model (a waker registered before a `take` is returned by it; one
/// registered after a `take` is seen by the registrant's next look at the
/// state), behind loom's mutex.
#[cfg(loom)]
#[derive(Default)]
pub(crate) struct AtomicWaker(loom::sync::Mutex<Option<std::task::Waker>>);

#[cfg(loom)]
impl AtomicWaker {
    /// No waker.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Keep `w` (replacing any other).
    pub(crate) fn register(&self, w: &std::task::Waker) {
        *self.0.lock().unwrap() = Some(w.clone());
    }

    /// The waker kept, if any (removed).
    pub(crate) fn take(&self) -> Option<std::task::Waker> {
        self.0.lock().unwrap().take()
    }
}
