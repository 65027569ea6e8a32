//! The consumer's message queue: bounded, filled in batches by the
//! consumer's thread (one lock and at most one wake-up per batch), emptied
//! a message at a time by the application.
//!
//! Two classes of messages. **Data** (a spectrum and the outcome of its
//! read, a bad signal) fill the queue up to its bound; past it they are
//! dropped and counted per kind, and the counts arrive in an alert
//! ([`Alert::queue_alert`]: the consumer's `Message::QueueAlert`).
//! **Reports** (loss reports, the alert itself, news of producers) are
//! never dropped for data: [`RESERVE`] more places are kept for them
//! alone, and once those are full too a report that counts something
//! (starvation, lost signals, the alert) is folded into the newest queued
//! report of its kind, so its count still arrives. Only a report that
//! cannot be folded and finds the reserve full as well (the application
//! took none of the last [`RESERVE`] reports) is dropped, and counted in
//! the alert under its kind. The last message (the consumer's `End`)
//! always gets in, after the alert of whatever is still unreported.
//! Generic over the message type, so the queue does not name the
//! consumer that uses it.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Places kept for reports beyond the queue's bound.
pub(crate) const RESERVE: usize = 1024;

/// Kinds of messages a queue counts when it drops them (the kinds of
/// [`Alert::class`] below it; the rest are counts, never dropped).
pub(crate) const KINDS: usize = 8;

/// What the queue needs to know of a message.
pub(crate) trait Alert: Sized {
    /// The message reporting messages lost to a full queue, `dropped[k]`
    /// of kind `k` (as [`Alert::class`] numbers them).
    fn queue_alert(dropped: [u64; KINDS]) -> Self;
    /// The message's class: `Ok(kind)` for data (dropped when the queue
    /// is full), `Err(kind)` for a report (kept in the reserve).
    fn class(&self) -> Result<usize, usize>;
    /// Whether the message is a count that [`Alert::fold`] can add to
    /// another of its kind.
    fn folds(&self) -> bool;
    /// Fold `later` (a report of the same kind) into `self`, if the two
    /// are counts of one thing: `None` if folded, else `later` back.
    fn fold(&mut self, later: Self) -> Option<Self>;
}

struct Inner<M> {
    q: VecDeque<M>,
    /// Data messages in `q`.
    data: usize,
    /// The application waits in `pop`.
    waiting: bool,
    /// END is in: nothing more comes.
    closed: bool,
    /// Dropped and not yet reported in an alert, per kind.
    unreported: [u64; KINDS],
}

/// A bounded queue of consumer messages.
pub(crate) struct MessageQueue<M> {
    inner: Mutex<Inner<M>>,
    cv: Condvar,
    cap: usize,
}

impl<M: Alert> Inner<M> {
    /// Put report `m` in: in the reserve, else folded into the newest
    /// queued report of its kind, else (a count, none of its kind queued)
    /// past the reserve, where later counts of its kind fold into it (one
    /// place per kind of count at most); `Err(m)` for an event report
    /// that finds the reserve full.
    fn report(&mut self, m: M, cap: usize) -> Result<(), M> {
        if self.q.len() < cap + RESERVE {
            self.q.push_back(m);
            return Ok(());
        }
        let kind = m.class().err();
        match self.q.iter().rposition(|x| x.class().err() == kind) {
            Some(i) => self.q[i].fold(m).map_or(Ok(()), Err),
            None if m.folds() => {
                self.q.push_back(m);
                Ok(())
            }
            None => Err(m),
        }
    }

    /// The alert of what was dropped since the last one, if anything was:
    /// folded into the newest message if that is an alert, else put in as
    /// a report (alerts fold, so it always gets in).
    fn alert(&mut self, cap: usize) {
        if self.unreported == [0; KINDS] {
            return;
        }
        let a = M::queue_alert(std::mem::take(&mut self.unreported));
        let a = match self.q.back_mut() {
            Some(last) if last.class().err() == a.class().err() => match last.fold(a) {
                None => return,
                Some(a) => a,
            },
            _ => a,
        };
        if let Err(a) = self.report(a, cap) {
            // alerts fold: not reached; the counts are kept regardless
            self.q.push_back(a);
        }
    }
}

impl<M: Alert> MessageQueue<M> {
    /// A queue of at most `cap` data messages (and [`RESERVE`] reports
    /// more).
    pub(crate) fn new(cap: usize) -> MessageQueue<M> {
        MessageQueue {
            inner: Mutex::new(Inner {
                q: VecDeque::with_capacity(cap.min(1 << 16)),
                data: 0,
                waiting: false,
                closed: false,
                unreported: [0; KINDS],
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
                match m.class() {
                    Ok(kind) => {
                        if g.data < self.cap && g.q.len() < self.cap + RESERVE {
                            g.data += 1;
                            g.q.push_back(m);
                        } else {
                            g.unreported[kind.min(KINDS - 1)] += 1;
                            rejected.push(m);
                        }
                    }
                    Err(kind) => {
                        if let Err(m) = g.report(m, self.cap) {
                            g.unreported[kind.min(KINDS - 1)] += 1;
                            rejected.push(m);
                        }
                    }
                }
            }
            g.alert(self.cap);
            wake = g.waiting;
        }
        if wake {
            self.cv.notify_one();
        }
        rejected.len() as u64
    }

    /// Whether data messages are queued (the application has not taken
    /// them yet).
    pub(crate) fn has_data(&self) -> bool {
        self.inner.lock().data > 0
    }

    /// Append the last message (always taken, bound or not), after the
    /// alert of whatever is still unreported.
    pub(crate) fn push_last(&self, m: M) {
        {
            let mut g = self.inner.lock();
            if g.unreported != [0; KINDS] {
                let a = M::queue_alert(std::mem::take(&mut g.unreported));
                g.q.push_back(a);
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
                if m.class().is_ok() {
                    g.data -= 1;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Data of kind 0, a count report of kind 1 (folds), an event report
    /// of kind 2 (does not), the alert (kind 3, folds).
    #[derive(Debug, PartialEq)]
    enum T {
        Data(u32),
        Count(u64),
        Event(u32),
        Alert([u64; KINDS]),
    }

    impl Alert for T {
        fn queue_alert(d: [u64; KINDS]) -> T {
            T::Alert(d)
        }
        fn class(&self) -> Result<usize, usize> {
            match self {
                T::Data(_) => Ok(0),
                T::Count(_) => Err(1),
                T::Event(_) => Err(2),
                T::Alert(_) => Err(3),
            }
        }
        fn folds(&self) -> bool {
            matches!(self, T::Count(_) | T::Alert(_))
        }
        fn fold(&mut self, later: T) -> Option<T> {
            match (self, later) {
                (T::Count(a), T::Count(b)) => {
                    *a += b;
                    None
                }
                (T::Alert(a), T::Alert(b)) => {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                    None
                }
                (_, l) => Some(l),
            }
        }
    }

    fn drain(q: &MessageQueue<T>) -> Vec<T> {
        std::iter::from_fn(|| q.pop(Duration::ZERO)).collect()
    }

    #[test]
    fn data_is_dropped_reports_are_not_and_the_alert_says_what_was_dropped() {
        let q = MessageQueue::new(4);
        let mut b: Vec<T> = (0..10).map(T::Data).collect();
        b.push(T::Count(5));
        b.push(T::Event(1));
        assert_eq!(q.push(&mut b), 6);
        let mut b = vec![T::Data(10), T::Count(2)];
        assert_eq!(q.push(&mut b), 1);
        let got = drain(&q);
        let mut dropped = [0; KINDS];
        dropped[0] = 6;
        let mut more = [0; KINDS];
        more[0] = 1;
        assert_eq!(
            got,
            vec![
                T::Data(0),
                T::Data(1),
                T::Data(2),
                T::Data(3),
                T::Count(5),
                T::Event(1),
                T::Alert(dropped),
                T::Count(2),
                T::Alert(more),
            ]
        );
    }

    #[test]
    fn past_the_reserve_counts_fold_events_are_counted_as_dropped() {
        let q = MessageQueue::new(1);
        let mut b: Vec<T> = vec![T::Data(0)];
        b.extend((0..RESERVE as u32).map(T::Event));
        assert_eq!(q.push(&mut b), 0);
        // the reserve is full: the first count goes past it and the next
        // folds into it; events and data are dropped and counted
        let mut b = vec![T::Count(2), T::Event(9), T::Count(3), T::Data(1)];
        assert_eq!(q.push(&mut b), 2);
        let mut b = vec![T::Count(4), T::Event(10)];
        assert_eq!(q.push(&mut b), 1);
        q.push_last(T::Event(99));
        let got = drain(&q);
        assert_eq!(got.len(), 1 + RESERVE + 3, "{:?}", &got[RESERVE..]);
        assert_eq!(got[RESERVE + 1], T::Count(9), "2 + 3 + 4: no count lost");
        let mut dropped = [0; KINDS];
        dropped[0] = 1;
        dropped[2] = 2;
        assert_eq!(got[RESERVE + 2], T::Alert(dropped));
        assert_eq!(got[RESERVE + 3], T::Event(99), "the last message last");
    }
}
