//! A destination's lone call without its outbox's lock: the `rpc:short`
//! words of a call made while nothing else is buffered for that rank,
//! kept in a cell of atomics until the call is sent (by its own wait, a
//! flush, or a second call to the rank, which moves it into the outbox as
//! a record so both go as one batch). A call waited on at once is stored
//! and taken with a few atomic operations, and sent as an AM Short; the
//! outbox's lock is taken only when calls queue up.

use crate::fast::FAST_WORDS;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

const EMPTY: u8 = 0;
/// A thread writes or reads the words.
const BUSY: u8 = 1;
const FULL: u8 = 2;

/// One destination's lone-call cell.
#[derive(Default)]
pub(crate) struct Lone {
    state: AtomicU8,
    words: [AtomicU64; FAST_WORDS],
    /// The destination's outbox holds records (stored under its lock):
    /// a call then joins them instead of going alone.
    pub queued: AtomicBool,
    /// Calls sent from this cell (each alone, in one `rpc:short`).
    pub sent: AtomicU64,
}

impl Lone {
    /// Keep `w` (an `rpc:short`'s words, the call id first) if the
    /// destination has nothing buffered: false if it has.
    #[inline]
    pub(crate) fn put(&self, w: &[u64; FAST_WORDS]) -> bool {
        if self.queued.load(Ordering::Acquire)
            || self
                .state
                .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        for (a, &v) in self.words.iter().zip(w) {
            a.store(v, Ordering::Relaxed);
        }
        self.state.store(FULL, Ordering::Release);
        true
    }

    /// Take the words kept (with `call`: only if that call's words are
    /// there, though another's that replaced them meanwhile may come out:
    /// sending those is a flush, harmless). `None` when empty, or while
    /// another thread writes or takes them (a call not yet kept, or sent
    /// by that thread).
    #[inline]
    pub(crate) fn take(&self, call: Option<u64>) -> Option<[u64; FAST_WORDS]> {
        if self.state.load(Ordering::Relaxed) != FULL
            || call.is_some_and(|c| self.words[0].load(Ordering::Relaxed) != c)
            || self
                .state
                .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        let w = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
        self.state.store(EMPTY, Ordering::Release);
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_keeps_one_call_and_gives_it_once() {
        let l = Lone::default();
        assert!(l.put(&[7, 1, 2, 3]));
        assert!(!l.put(&[8, 1, 2, 3]), "a second call does not go alone");
        assert_eq!(l.take(Some(8)), None);
        assert_eq!(l.take(Some(7)), Some([7, 1, 2, 3]));
        assert_eq!(l.take(None), None);
        l.queued.store(true, Ordering::Release);
        assert!(!l.put(&[9, 0, 0, 0]), "calls queued: it joins them");
        l.queued.store(false, Ordering::Release);
        assert!(l.put(&[9, 0, 0, 0]));
        assert_eq!(l.take(None), Some([9, 0, 0, 0]));
    }

    #[test]
    fn lone_words_are_taken_by_one_of_two_threads() {
        for _ in 0..200 {
            let l = std::sync::Arc::new(Lone::default());
            assert!(l.put(&[5, 6, 7, 8]));
            let l2 = l.clone();
            let t = std::thread::spawn(move || l2.take(None));
            let a = l.take(None);
            let b = t.join().unwrap();
            assert!(a.is_some() ^ b.is_some());
            assert_eq!(a.or(b), Some([5, 6, 7, 8]));
        }
    }
}
