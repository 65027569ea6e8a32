//! A destination's lone call without its outbox's lock: the `rpc:short`
//! words of a call made while nothing else is buffered for that rank,
//! kept in a cell of atomics until the call is sent (by its own wait, a
//! flush, or a second call to the rank, which moves it into the outbox as
//! a record so both go as one batch). A call waited on at once is stored
//! and taken with a few atomic operations, and sent as an AM Short; the
//! outbox's lock is taken only when calls queue up.

use crate::fast::FAST_WORDS;
use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};

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

    /// Under the destination's outbox lock, for a call that joins the
    /// buffer: mark the buffer `queued`, then take the call kept alone (if
    /// any) to be written into it. In this order, a wait that then misses
    /// its lone call in the cell and takes the lock (after this move)
    /// finds it in the buffer.
    #[inline]
    pub(crate) fn take_to_outbox(&self) -> Option<[u64; FAST_WORDS]> {
        self.queued.store(true, Ordering::Release);
        self.take(None)
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

#[cfg(all(test, not(loom)))]
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

/// loom model of the cell against a second call moving it into the
/// outbox (`RUSTFLAGS="--cfg loom" cargo test -p splitrt-rpc --release
/// --lib loom`): the outbox a loom mutex around the records' call ids.
#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// Thread B makes a second call to the rank while call 7 is kept
    /// alone: under the outbox lock it moves call 7 into the buffer
    /// (`Client::enqueue_slow`). Call 7's wait (`RpcFuture`'s flush, the
    /// blocking wait) takes it from the cell, else takes the outbox lock
    /// (`Client::flush_after_lone`) and sends the buffer: call 7 is sent
    /// in every interleaving (before the fix, the move marked `queued`
    /// after taking the call, and the wait took the lock only when
    /// `queued` said so: call 7 was left in the buffer, its wait hung).
    #[test]
    fn loom_a_lone_call_moved_into_the_outbox_is_sent_by_its_wait() {
        loom::model(|| {
            let l = Arc::new(Lone::default());
            let outbox = Arc::new(Mutex::new(Vec::<u64>::new()));
            assert!(l.put(&[7, 0, 0, 0]));
            let (l2, o2) = (l.clone(), outbox.clone());
            let t = thread::spawn(move || {
                let mut o = o2.lock().unwrap();
                if let Some(w) = l2.take_to_outbox() {
                    o.push(w[0]);
                }
                o.push(8);
            });
            let mut sent = Vec::new();
            match l.take(Some(7)) {
                Some(w) => sent.push(w[0]),
                None => sent.extend(outbox.lock().unwrap().drain(..)),
            }
            t.join().unwrap();
            assert!(sent.contains(&7), "call 7 left unsent: {sent:?}");
            assert!(l.queued.load(Ordering::Acquire));
        });
    }
}
