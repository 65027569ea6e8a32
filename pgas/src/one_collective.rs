//! One collective at a time per rank. `Pgas` is `Send + Sync`, but a
//! rank's collectives (barriers, broadcast, reductions, `alloc_sym`,
//! `freeze`, ...) share its barrier epochs and its scratch block: two
//! threads of one rank inside collectives at once would mix their steps
//! (a double arrival at a barrier, one reduction's data in another's
//! scratch). The rank's [`CollectiveSlot`] is taken on entry; a second
//! thread is refused with an error instead, and the owning thread may
//! nest (a freeze runs an allreduce and barriers).

use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    /// Its address names this thread while it lives (never 0).
    static TOKEN: u8 = const { 0 };
}

/// This thread's token.
fn me() -> usize {
    TOKEN.with(|t| t as *const u8 as usize)
}

/// Which thread of the rank is inside a collective (0: none).
#[derive(Debug, Default)]
pub(crate) struct CollectiveSlot(AtomicUsize);

/// Held while this thread is inside a collective; gives the slot back on
/// drop (a nested entry gives nothing back).
pub(crate) struct Entered<'a>(Option<&'a AtomicUsize>);

impl CollectiveSlot {
    /// Enter a collective on this thread: `Err` if another thread of the
    /// rank is inside one.
    pub(crate) fn enter(&self) -> Result<Entered<'_>, ()> {
        let me = me();
        // Acquire: this thread sees what the last collective's thread did
        // to the shared collective state before it gave the slot back.
        match self
            .0
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(Entered(Some(&self.0))),
            Err(owner) if owner == me => Ok(Entered(None)),
            Err(_) => Err(()),
        }
    }

    /// Whether a thread is inside a collective (for tests: see
    /// `Pgas::collective_in_progress`).
    #[cfg(feature = "test-doubles")]
    pub(crate) fn is_held(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            // Release: pairs with the next entry's Acquire.
            slot.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_second_thread_is_refused_and_the_owner_may_nest() {
        let slot = Arc::new(CollectiveSlot::default());
        let outer = slot.enter().expect("free");
        let inner = slot.enter().expect("the owner nests");
        let s = slot.clone();
        let other = std::thread::spawn(move || s.enter().is_err())
            .join()
            .unwrap();
        assert!(other, "another thread got in while the slot was held");
        drop(inner);
        // the nested exit gave nothing back
        let s = slot.clone();
        assert!(std::thread::spawn(move || s.enter().is_err())
            .join()
            .unwrap());
        drop(outer);
        let s = slot.clone();
        assert!(std::thread::spawn(move || s.enter().is_ok())
            .join()
            .unwrap());
    }
}
