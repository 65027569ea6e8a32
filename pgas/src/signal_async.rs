//! The set waits on signal words as futures (issue 25: non-blocking waits
//! register wakers, no spinning): [`Signals::wait_until_any_async`],
//! [`Signals::wait_until_all_async`] and [`Signals::wait_until_some_async`],
//! beside the single-word [`Signals::wait_until_async`] (`signal.rs`),
//! and waiting the same way: each poll polls the endpoint once, checks
//! the words, and while they do not satisfy the wait leaves the task's
//! waker with the rank's doorbell bridge, which wakes it when traffic (a
//! `put_signal` / `signal_add` / `signal_set` from any rank, over any
//! fabric) or a direct write into the segment (the native path on shared
//! memory, this rank's own signals) may have changed a word. A pending
//! wait costs no CPU; dropping it stops waiting.

use crate::context::Inner;
use crate::signal::Signals;
use crate::signal_word::Cmp;
use splitrt_am::{Error, ErrorKind, Result, TrafficKey};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// What a set wait resolves to once its words satisfy it (`None`: not
/// yet): given the indices, the words and the comparison.
type Check<T> = fn(&[usize], &[&AtomicU64], Cmp, u64) -> Option<T>;

/// A pending [`Signals::wait_until_any_async`] (resolves to the index
/// that satisfied it), [`Signals::wait_until_all_async`] (to `()`) or
/// [`Signals::wait_until_some_async`] (to the indices that did). Dropping
/// it stops waiting.
pub struct SignalWaitSet<'a, T> {
    /// The words' indices and the words, or why there are none (reported
    /// at the first poll).
    which: Vec<usize>,
    words: std::result::Result<Vec<&'a AtomicU64>, Option<Error>>,
    check: Check<T>,
    inner: &'a Inner,
    cmp: Cmp,
    value: u64,
    key: Option<TrafficKey>,
}

fn any(which: &[usize], words: &[&AtomicU64], cmp: Cmp, value: u64) -> Option<usize> {
    words
        .iter()
        .position(|w| cmp.holds(w.load(Ordering::Acquire), value))
        .map(|k| which[k])
}

fn all(_: &[usize], words: &[&AtomicU64], cmp: Cmp, value: u64) -> Option<()> {
    words
        .iter()
        .all(|w| cmp.holds(w.load(Ordering::Acquire), value))
        .then_some(())
}

fn some(which: &[usize], words: &[&AtomicU64], cmp: Cmp, value: u64) -> Option<Vec<usize>> {
    let hits: Vec<usize> = which
        .iter()
        .zip(words)
        .filter(|(_, w)| cmp.holds(w.load(Ordering::Acquire), value))
        .map(|(&i, _)| i)
        .collect();
    (!hits.is_empty()).then_some(hits)
}

impl Signals {
    /// [`wait_until_any`](Self::wait_until_any) as a future (OpenSHMEM
    /// `shmem_wait_until_any` without blocking the thread): resolves to
    /// the index of the first of `which` whose word satisfies `cmp value`.
    /// While none does, the task's waker waits with the rank's doorbell
    /// bridge (no spinning; see the module docs). `which` must not be
    /// empty (an error at the first poll).
    ///
    /// ```no_run
    /// # async fn f(s: &splitrt_pgas::Signals) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// // whichever of words 0 and 1 is set first
    /// let i = s.wait_until_any_async(&[0, 1], Cmp::Ne, 0).await?;
    /// # let _ = i; Ok(()) }
    /// ```
    pub fn wait_until_any_async(
        &self,
        which: &[usize],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitSet<'_, usize> {
        self.set_wait(which, cmp, value, "Signals::wait_until_any_async", any)
    }

    /// [`wait_until_all`](Self::wait_until_all) as a future (OpenSHMEM
    /// `shmem_wait_until_all`): resolves once every word of `which`
    /// satisfies `cmp value` (at once for an empty `which`). Waits
    /// without spinning (see the module docs).
    ///
    /// ```no_run
    /// # async fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// let from = pg.alloc_signals(pg.size())?; // word p: set by rank p
    /// // ... every rank signals from.at(r, me) ...
    /// let everyone: Vec<usize> = (0..pg.size()).collect();
    /// from.wait_until_all_async(&everyone, Cmp::Eq, 1).await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_until_all_async(
        &self,
        which: &[usize],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitSet<'_, ()> {
        self.set_wait(which, cmp, value, "Signals::wait_until_all_async", all)
    }

    /// [`wait_until_some`](Self::wait_until_some) as a future (OpenSHMEM
    /// `shmem_wait_until_some`): resolves to the indices of `which`
    /// (in its order) whose words satisfy `cmp value` at the poll that
    /// found at least one. Waits without spinning (see the module docs).
    /// `which` must not be empty (an error at the first poll).
    ///
    /// ```no_run
    /// # async fn f(s: &splitrt_pgas::Signals) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// for i in s.wait_until_some_async(&[0, 1, 2, 3], Cmp::Ge, 1).await? {
    ///     s.set(i, 0)?; // handle block i, then re-arm its word
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_until_some_async(
        &self,
        which: &[usize],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitSet<'_, Vec<usize>> {
        self.set_wait(which, cmp, value, "Signals::wait_until_some_async", some)
    }

    fn set_wait<T>(
        &self,
        which: &[usize],
        cmp: Cmp,
        value: u64,
        what: &str,
        check: Check<T>,
    ) -> SignalWaitSet<'_, T> {
        let words = if which.is_empty() && check(&[], &[], cmp, value).is_none() {
            Err(Some(
                Error::usage(format!(
                    "{what}: no signal words to wait for (an empty index list never \
                     satisfies it)"
                ))
                .at_rank(self.pg.rank()),
            ))
        } else {
            which
                .iter()
                .map(|&i| self.word(i, what))
                .collect::<Result<Vec<_>>>()
                .map_err(Some)
        };
        SignalWaitSet {
            which: which.to_vec(),
            words,
            check,
            inner: &self.pg.inner,
            cmp,
            value,
            key: None,
        }
    }
}

impl<T> SignalWaitSet<'_, T> {
    fn end(&mut self, r: Result<T>) -> Poll<Result<T>> {
        if let Some(k) = self.key.take() {
            self.inner.ep.forget_traffic_wake(&k);
        }
        Poll::Ready(r)
    }
}

impl<T> Future for SignalWaitSet<'_, T> {
    type Output = Result<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let words = match &mut this.words {
            Ok(w) => std::mem::take(w),
            Err(e) => {
                let e = e
                    .take()
                    .unwrap_or_else(|| Error::usage("SignalWaitSet polled after completion"));
                return this.end(Err(e));
            }
        };
        let r = this.step(&words, cx);
        this.words = match r {
            Poll::Ready(_) => Err(None),
            Poll::Pending => Ok(words),
        };
        r
    }
}

impl<T> SignalWaitSet<'_, T> {
    /// One poll with the words taken out of `self` (see
    /// `SignalWait::poll`, which this follows).
    fn step(&mut self, words: &[&AtomicU64], cx: &mut Context<'_>) -> Poll<Result<T>> {
        let (which, check, cmp, value) = (&self.which, self.check, self.cmp, self.value);
        poll_words(self.inner, &mut self.key, cx, || {
            check(which, words, cmp, value)
        })
    }
}

/// One poll of a wait on this rank's signal words, shared by the set
/// waits and the masked and vector waits (`signal_vector_async.rs`):
/// read the doorbell's count, poll the endpoint once, `check` the words;
/// while they do not satisfy it, leave the task's waker with the rank's
/// doorbell bridge under `key` (made at the first pending poll) and look
/// once more (a signal that landed between the look and the
/// registration). Ready: `key`'s registration is withdrawn.
pub(crate) fn poll_words<T>(
    inner: &Inner,
    key: &mut Option<TrafficKey>,
    cx: &mut Context<'_>,
    mut check: impl FnMut() -> Option<T>,
) -> Poll<Result<T>> {
    let end = |key: &mut Option<TrafficKey>, r: Result<T>| {
        if let Some(k) = key.take() {
            inner.ep.forget_traffic_wake(&k);
        }
        Poll::Ready(r)
    };
    let ep = &inner.ep;
    // the doorbell's count before the look at the words
    let seq = ep.traffic_seq();
    if let Err(e) = ep.poll() {
        // the job failed, or polling is refused here: end; else a
        // malformed unrelated message: ride it out
        if matches!(
            e.kind(),
            ErrorKind::PeerFailed(_) | ErrorKind::Timeout(_) | ErrorKind::Usage(_)
        ) {
            return end(key, Err(e));
        }
    }
    if let Some(t) = check() {
        return end(key, Ok(t));
    }
    if ep.peer_failed() {
        let e = ep.failure().unwrap_or_else(|| {
            Error::protocol("the job failed while waiting for signals").at_rank(inner.rank)
        });
        return end(key, Err(e));
    }
    let k = key.get_or_insert_with(|| ep.traffic_key());
    if let Err(e) = ep.wake_on_traffic_since(k, cx.waker(), seq) {
        return end(key, Err(e));
    }
    // a signal that landed between the check and the registration
    if let Some(t) = check() {
        return end(key, Ok(t));
    }
    Poll::Pending
}

impl<T> Drop for SignalWaitSet<'_, T> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.inner.ep.forget_traffic_wake(&k);
        }
    }
}

impl<T> std::fmt::Debug for SignalWaitSet<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalWaitSet")
            .field("which", &self.which)
            .field("cmp", &self.cmp)
            .field("value", &self.value)
            .finish()
    }
}
