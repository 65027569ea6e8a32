//! The masked and vector waits on signal words as futures (issue 25:
//! non-blocking waits register wakers, no spinning):
//! `Signals::wait_until_{all,any,some}_masked_async`,
//! `Signals::wait_until_{all,any,some}_vector_async` (words by index) and
//! `Pgas::wait_until_{all,any,some}_vector_async` (words by global
//! pointer), beside their blocking forms (`signal_vector.rs`).
//!
//! Each builds the same entry list as its blocking form (the same
//! argument checks: a mask or compare values of the wrong length, an
//! index out of range, a pointer that is not this rank's signal word; the
//! error is the future's output at its first poll) and waits as the set
//! waits do (`signal_async::poll_words`: one endpoint poll per poll of
//! the future, then the task's waker waits with the rank's doorbell
//! bridge). As in the blocking forms, an empty or fully masked list is
//! satisfied at the first poll.
//!
//! The pointer forms borrow only the [`Pgas`], not the [`Signals`] array,
//! so the array can be freed while one is pending: each poll checks again,
//! under the signal registry's read lock, that every pointer is still a
//! word of the signal array it named when the future was built (its range
//! registered with the same generation, `signal_word::Registry`;
//! `signal_vector::satisfied_registered`) and ends the future with a "not
//! a signal word" error naming the rank once one is not, rather than
//! reading memory `alloc_sym` may have handed out again, or the words of a
//! new signal array `alloc_signals` placed at the same offset.

use crate::context::{Inner, Pgas};
use crate::ptr::GlobalPtr;
use crate::signal::Signals;
use crate::signal_async::poll_words;
use crate::signal_vector::{look, Entry, Mode, Values};
use crate::signal_word::Cmp;
use splitrt_am::{Error, Result, TrafficKey};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What a wait's positions (in the caller's list) become as its output.
type Finish<T> = fn(Vec<usize>) -> T;

/// A pending masked or vector wait on this rank's signal words
/// ([`Signals::wait_until_all_masked_async`] and the other `_masked_async`
/// and `_vector_async` forms, on [`Signals`] and on [`Pgas`]). It resolves
/// to what the blocking form returns: `()` for `_all`, the position in
/// the caller's list of the first word that held (or `None` when none is
/// waited on) for `_any`, the positions of all that held for `_some`.
/// Dropping it stops waiting.
pub struct SignalWaitVector<'a, T> {
    /// The words to wait on, or why there are none (reported at the first
    /// poll; `None` once reported or resolved).
    entries: std::result::Result<Vec<Entry<'a>>, Option<Error>>,
    inner: &'a Inner,
    call: &'static str,
    cmp: Cmp,
    mode: Mode,
    finish: Finish<T>,
    key: Option<TrafficKey>,
}

fn unit(_: Vec<usize>) {}

fn first(hits: Vec<usize>) -> Option<usize> {
    hits.first().copied()
}

fn each(hits: Vec<usize>) -> Vec<usize> {
    hits
}

/// The three conditions and their outputs.
const ALL: (Mode, Finish<()>) = (Mode::All, unit);
const ANY: (Mode, Finish<Option<usize>>) = (Mode::Any, first);
const SOME: (Mode, Finish<Vec<usize>>) = (Mode::Some, each);

impl<'a, T> SignalWaitVector<'a, T> {
    fn new(
        inner: &'a Inner,
        call: &'static str,
        entries: Result<Vec<Entry<'a>>>,
        cmp: Cmp,
        mode: Mode,
        finish: Finish<T>,
    ) -> Self {
        SignalWaitVector {
            entries: entries.map_err(Some),
            inner,
            call,
            cmp,
            mode,
            finish,
            key: None,
        }
    }
}

impl<T> Future for SignalWaitVector<'_, T> {
    type Output = Result<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let entries = match &mut this.entries {
            Ok(e) => e,
            Err(e) => {
                let e = e
                    .take()
                    .unwrap_or_else(|| Error::usage("SignalWaitVector polled after completion"));
                return Poll::Ready(Err(e));
            }
        };
        let (cmp, mode, inner, call) = (this.cmp, this.mode, this.inner, this.call);
        // (a word whose array was freed while this future waited: an error)
        let r = poll_words(inner, &mut this.key, cx, || {
            look(inner, call, entries, cmp, mode, "this future")
        });
        match r {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.entries = Err(None);
                Poll::Ready(r.and_then(|r| r.map(this.finish)))
            }
        }
    }
}

impl<T> Drop for SignalWaitVector<'_, T> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.inner.ep.forget_traffic_wake(&k);
        }
    }
}

impl<T> std::fmt::Debug for SignalWaitVector<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words = self.entries.as_ref().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("SignalWaitVector")
            .field("words", &words)
            .field("cmp", &self.cmp)
            .field("mode", &self.mode.name())
            .finish()
    }
}

impl Signals {
    fn vector_async<T>(
        &self,
        call: &'static str,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: Values<'_>,
        (mode, finish): (Mode, Finish<T>),
    ) -> SignalWaitVector<'_, T> {
        let entries = self.entries(call, which, status, values);
        SignalWaitVector::new(&self.pg.inner, call, entries, cmp, mode, finish)
    }

    /// [`wait_until_all_masked`](Self::wait_until_all_masked) as a future:
    /// resolves once every word of `which` whose `status` entry is `false`
    /// satisfies `cmp value` (at its first poll when every entry is
    /// set). Waits without spinning, as
    /// [`wait_until_all_async`](Self::wait_until_all_async) does. A
    /// `status` of the wrong length or an index out of range is an error
    /// naming the rank, the future's output.
    pub fn wait_until_all_masked_async(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitVector<'_, ()> {
        let call = "Signals::wait_until_all_masked_async";
        let v = Values::One(value);
        self.vector_async(call, which, Some(status), cmp, v, ALL)
    }

    /// [`wait_until_any_masked`](Self::wait_until_any_masked) as a future:
    /// resolves to the **position in `which`** of the first unmasked word
    /// that satisfies `cmp value`, or `None` when every entry is masked
    /// out. Waits without spinning; errors as
    /// [`wait_until_all_masked_async`](Self::wait_until_all_masked_async).
    ///
    /// ```no_run
    /// # async fn f(sigs: &splitrt_pgas::Signals) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// let which: Vec<usize> = (0..sigs.len()).collect();
    /// let mut done = vec![false; which.len()];
    /// while let Some(i) = sigs.wait_until_any_masked_async(&which, &done, Cmp::Ne, 0).await? {
    ///     done[i] = true; // a position in `which` (here also the word)
    ///     // ... consume the data word i announced
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_until_any_masked_async(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitVector<'_, Option<usize>> {
        let call = "Signals::wait_until_any_masked_async";
        let v = Values::One(value);
        self.vector_async(call, which, Some(status), cmp, v, ANY)
    }

    /// [`wait_until_some_masked`](Self::wait_until_some_masked) as a
    /// future: resolves to the positions in `which` of all unmasked words
    /// that satisfy `cmp value` at the poll that found at least one, in
    /// order (none when every entry is masked out). Waits without
    /// spinning; errors as
    /// [`wait_until_all_masked_async`](Self::wait_until_all_masked_async).
    pub fn wait_until_some_masked_async(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> SignalWaitVector<'_, Vec<usize>> {
        let call = "Signals::wait_until_some_masked_async";
        let v = Values::One(value);
        self.vector_async(call, which, Some(status), cmp, v, SOME)
    }

    /// [`wait_until_all_vector`](Self::wait_until_all_vector) as a future:
    /// resolves once each word `which[k]` (status unset) satisfies `cmp
    /// values[k]` (at its first poll for an empty or fully masked list).
    /// Waits without spinning. `values` (and `status`) of the wrong
    /// length or an index out of range is an error naming the rank, the
    /// future's output.
    ///
    /// ```no_run
    /// # async fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// // word p counts the blocks rank p sent me; rank p sends p + 1
    /// let counts = pg.alloc_signals(pg.size())?;
    /// let which: Vec<usize> = (0..pg.size()).collect();
    /// let expect: Vec<u64> = (1..=pg.size() as u64).collect();
    /// counts.wait_until_all_vector_async(&which, None, Cmp::Ge, &expect).await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_until_all_vector_async(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, ()> {
        let call = "Signals::wait_until_all_vector_async";
        let v = Values::Each(values);
        self.vector_async(call, which, status, cmp, v, ALL)
    }

    /// [`wait_until_any_vector`](Self::wait_until_any_vector) as a future:
    /// resolves to the position in `which` of the first word `which[k]`
    /// (status unset) that satisfies `cmp values[k]`, or `None` for an
    /// empty or fully masked list. Waits without spinning; errors as
    /// [`wait_until_all_vector_async`](Self::wait_until_all_vector_async).
    pub fn wait_until_any_vector_async(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, Option<usize>> {
        let call = "Signals::wait_until_any_vector_async";
        let v = Values::Each(values);
        self.vector_async(call, which, status, cmp, v, ANY)
    }

    /// [`wait_until_some_vector`](Self::wait_until_some_vector) as a
    /// future: resolves to the positions in `which` of all words (status
    /// unset) that satisfy their compare value at the poll that found at
    /// least one, in order (none for an empty or fully masked list). Waits
    /// without spinning; errors as
    /// [`wait_until_all_vector_async`](Self::wait_until_all_vector_async).
    pub fn wait_until_some_vector_async(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, Vec<usize>> {
        let call = "Signals::wait_until_some_vector_async";
        let v = Values::Each(values);
        self.vector_async(call, which, status, cmp, v, SOME)
    }
}

impl Pgas {
    fn vector_async<T>(
        &self,
        call: &'static str,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
        (mode, finish): (Mode, Finish<T>),
    ) -> SignalWaitVector<'_, T> {
        let entries = self.sig_entries(call, sigs, status, values);
        SignalWaitVector::new(&self.inner, call, entries, cmp, mode, finish)
    }

    /// [`wait_until_all_vector`](Self::wait_until_all_vector) (words by
    /// global pointer) as a future: resolves once each of this rank's
    /// signal words `sigs[k]` (status unset) satisfies `cmp values[k]`.
    /// Waits without spinning (see [`Signals::wait_until_all_async`]). A
    /// pointer that is not a signal word of this rank, or `values` /
    /// `status` of the wrong length, is an error naming the rank, the
    /// future's output; so is a word whose array is freed
    /// ([`free_signals`](Self::free_signals)) after the future was made,
    /// even when a new signal array has taken its offset since (found at
    /// its next poll, before the freed memory is read).
    ///
    /// ```no_run
    /// # async fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// let (a, b) = (pg.alloc_signals(1)?, pg.alloc_signals(1)?);
    /// let me = pg.rank();
    /// pg.wait_until_all_vector_async(&[a.at(me, 0), b.at(me, 0)], None, Cmp::Ge, &[1, 2])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_until_all_vector_async(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, ()> {
        let call = "Pgas::wait_until_all_vector_async";
        self.vector_async(call, sigs, status, cmp, values, ALL)
    }

    /// [`wait_until_any_vector`](Self::wait_until_any_vector) as a future:
    /// resolves to the position in `sigs` of the first word (status unset)
    /// that satisfies `cmp values[k]`, or `None` for an empty or fully
    /// masked list. Errors as
    /// [`wait_until_all_vector_async`](Self::wait_until_all_vector_async).
    pub fn wait_until_any_vector_async(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, Option<usize>> {
        let call = "Pgas::wait_until_any_vector_async";
        self.vector_async(call, sigs, status, cmp, values, ANY)
    }

    /// [`wait_until_some_vector`](Self::wait_until_some_vector) as a
    /// future: resolves to the positions in `sigs` of all words (status
    /// unset) that satisfy their compare value at the poll that found at
    /// least one, in order (none for an empty or fully masked list).
    /// Errors as
    /// [`wait_until_all_vector_async`](Self::wait_until_all_vector_async).
    pub fn wait_until_some_vector_async(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> SignalWaitVector<'_, Vec<usize>> {
        let call = "Pgas::wait_until_some_vector_async";
        self.vector_async(call, sigs, status, cmp, values, SOME)
    }
}
