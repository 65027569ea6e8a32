//! The consumer's message queue: bounded, filled in batches by the
//! consumer's thread (one lock and at most one wake-up per batch), emptied
//! a message at a time by the application. Past the bound, messages are
//! dropped and counted; the count arrives as an alert message
//! ([`Alert::queue_alert`]: the consumer's `Message::QueueAlert`) as soon
//! as there is room again. The last message (the consumer's `End`) always
//! gets in. Generic over the message type, so the queue does not name the
//! consumer that uses it.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A message type that can say how many messages were dropped.
pub(crate) trait Alert {
    /// The message reporting `dropped` messages lost to a full queue.
    fn queue_alert(dropped: u64) -> Self;
}

struct Inner<M> {
    q: VecDeque<M>,
    /// The application waits in `pop`.
    waiting: bool,
    /// END is in: nothing more comes.
    closed: bool,
    /// Dropped and not yet reported in a QueueAlert.
    unreported: u64,
}

/// A bounded queue of consumer messages.
pub(crate) struct MessageQueue<M> {
    inner: Mutex<Inner<M>>,
    cv: Condvar,
    cap: usize,
}

impl<M: Alert> MessageQueue<M> {
    /// A queue of at most `cap` messages.
    pub(crate) fn new(cap: usize) -> MessageQueue<M> {
        MessageQueue {
            inner: Mutex::new(Inner {
                q: VecDeque::with_capacity(cap.min(1 << 16)),
                waiting: false,
                closed: false,
                unreported: 0,
            }),
            cv: Condvar::new(),
            cap: cap.max(1),
        }
    }

    /// Append `batch` (emptied); returns how many were dropped for want of
    /// room (their buffers go back to the pool once the lock is released).
    pub(crate) fn push(&self, batch: &mut Vec<M>) -> u64 {
        if batch.is_empty() {
            return 0;
        }
        let mut rejected = Vec::new();
        let wake;
        {
            let mut g = self.inner.lock();
            for m in batch.drain(..) {
                if g.unreported > 0 && g.q.len() + 1 < self.cap {
                    let dropped = std::mem::take(&mut g.unreported);
                    g.q.push_back(M::queue_alert(dropped));
                }
                if g.q.len() < self.cap {
                    g.q.push_back(m);
                } else {
                    g.unreported += 1;
                    rejected.push(m);
                }
            }
            wake = g.waiting;
        }
        if wake {
            self.cv.notify_one();
        }
        rejected.len() as u64
    }

    /// Append the last message (always taken, bound or not).
    pub(crate) fn push_last(&self, m: M) {
        {
            let mut g = self.inner.lock();
            if g.unreported > 0 {
                let dropped = std::mem::take(&mut g.unreported);
                g.q.push_back(M::queue_alert(dropped));
            }
            g.q.push_back(m);
            g.closed = true;
        }
        self.cv.notify_all();
    }

    /// The next message, waiting at most `timeout`.
    pub(crate) fn pop(&self, timeout: Duration) -> Option<M> {
        let until = Instant::now() + timeout;
        let mut g = self.inner.lock();
        loop {
            if let Some(m) = g.q.pop_front() {
                return Some(m);
            }
            if g.closed || Instant::now() >= until {
                return None;
            }
            g.waiting = true;
            let _ = self.cv.wait_until(&mut g, until);
            g.waiting = false;
        }
    }
}
