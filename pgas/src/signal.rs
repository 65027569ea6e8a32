//! Signals (OpenSHMEM 1.5 `shmem_put_signal`, `shmem_signal_add / set /
//! fetch`, `shmem_wait_until{,_any,_all,_some}`): a put whose data is
//! followed at the target by an update of a signal word, and waits on
//! this rank's signal words.
//!
//! A signal word is a `u64` of a symmetric array of them
//! ([`Pgas::alloc_signals`], a [`Signals`]); every rank knows which
//! ranges hold signal words, so a signal or a wait aimed at any other
//! address is an error at the caller (and refused by the target).
//!
//! **Ordering.** The signal of a [`put_signal`](Pgas::put_signal) is
//! updated after its data has landed, on every path: through a mapped
//! segment (shm, native path) the copy comes first and the word is
//! updated with release ordering; over messages (the AM path, UDP, the
//! native path over ibverbs) data and signal travel as one Long whose
//! handler updates the word after the deposit. A waiter that sees the
//! signal (an acquire load) sees the data. A plain
//! [`signal_add`](Pgas::signal_add) / [`signal_set`](Pgas::signal_set) is
//! ordered after nothing: `sync` before it to publish earlier puts.
//!
//! **Waiting.** The waits poll the endpoint and sleep on the rank's
//! doorbell as every splitrt wait does (spin, yield, then sleep: 8 ranks
//! on 2 cores progress); a wait that sees nothing for
//! `SPLITRT_HANG_REPORT` seconds reports the word, the comparison and
//! the value it holds. [`Signals::wait_until_async`] is a future that
//! registers a waker and costs no CPU while it is pending. The
//! `_all / _any / _some` waits also come with a status mask (entries set
//! are skipped) and with a compare value per word
//! ([`Signals::wait_until_all_vector`] and its kin, by global pointer
//! [`Pgas::wait_until_all_vector`]), waiting the same way.
//!
//! **Split-C's `store` and `store_sync`** are the same machinery with a
//! fixed word: every segment's first 8 bytes count the bytes stored into
//! the rank; a `store` of `n` bytes is a put whose signal adds `n` to
//! that word, and `store_sync(n)` waits until the word reaches what was
//! already accounted for plus `n` (`Cmp::Ge`). They stay as they are;
//! signals are the general form (any number of words, set or add, any
//! comparison, waits on several words).

use crate::arrays::SymArray;
use crate::context::{Inner, Pgas};
use crate::ptr::GlobalPtr;
use crate::signal_word::{Cmp, SignalOp};
use bytemuck::Pod;
use splitrt_am::{Error, ErrorKind, Payload, Result, TrafficKey};
use splitrt_runtime::memmove::memmove;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// A symmetric array of signal words: `len` `u64`s at the same offset on
/// every rank, the only addresses signals and signal waits accept.
/// Allocated (zeroed) and freed collectively ([`Pgas::alloc_signals`],
/// [`Pgas::free_signals`]).
///
/// ```no_run
/// use splitrt_pgas::{Cmp, Pgas, SignalOp};
/// # fn main() -> splitrt_am::Result<()> {
/// let pg = Pgas::attach()?;
/// let (me, n) = (pg.rank(), pg.size());
/// let data = pg.alloc_sym::<f64>(1024)?;
/// let ready = pg.alloc_signals(1)?;
/// let right = (me + 1) % n;
/// // my block to my right neighbour, then its flag: one operation
/// pg.put_signal(data.ptr(right), &[me as f64; 1024], ready.at(right, 0), SignalOp::Set, 1)?;
/// // my left neighbour's block is here once my flag is set
/// ready.wait_until(0, Cmp::Eq, 1)?;
/// assert_eq!(data.local().get(0), ((me + n - 1) % n) as f64);
/// pg.finish()
/// # }
/// ```
pub struct Signals {
    arr: SymArray<u64>,
    pub(crate) pg: Pgas,
}

impl Signals {
    /// Signal word `i` on `rank` (for [`Pgas::put_signal`],
    /// [`Pgas::signal_add`], [`Pgas::signal_set`], [`Pgas::signal_fetch`]).
    pub fn at(&self, rank: usize, i: usize) -> GlobalPtr<u64> {
        self.arr.at(rank, i)
    }

    /// Signal words per rank.
    pub fn len(&self) -> usize {
        self.arr.len()
    }

    /// Whether the array has no words.
    pub fn is_empty(&self) -> bool {
        self.arr.is_empty()
    }

    /// This rank's word `i`, or an error naming the index.
    pub(crate) fn word(&self, i: usize, what: &str) -> Result<&AtomicU64> {
        if i >= self.len() {
            return Err(Error::usage(format!(
                "{what}: signal index {i} is out of range (the array has {} words)",
                self.len()
            ))
            .at_rank(self.pg.rank()));
        }
        Ok(self
            .pg
            .inner
            .signal_word(self.at(self.pg.rank(), i).offset()))
    }

    /// Read this rank's signal word `i` (OpenSHMEM `shmem_signal_fetch`):
    /// an acquire load, so the data of every put_signal that set it is
    /// visible.
    pub fn fetch(&self, i: usize) -> Result<u64> {
        Ok(self.word(i, "Signals::fetch")?.load(Ordering::Acquire))
    }

    /// Set this rank's signal word `i` (to reset it before the next
    /// round; peers' signals may race with it as with any write).
    pub fn set(&self, i: usize, value: u64) -> Result<()> {
        self.word(i, "Signals::set")?
            .store(value, Ordering::Release);
        Ok(())
    }

    /// Wait until this rank's word `i` satisfies `cmp value`
    /// (OpenSHMEM `shmem_signal_wait_until` / `shmem_wait_until`); returns
    /// the value that satisfied it.
    pub fn wait_until(&self, i: usize, cmp: Cmp, value: u64) -> Result<u64> {
        let w = self.word(i, "Signals::wait_until")?;
        let seen = std::cell::Cell::new(0);
        let what = || self.describe("wait_until", &[i], cmp, value);
        self.pg.inner.wait_through(&what, || {
            seen.set(w.load(Ordering::Acquire));
            cmp.holds(seen.get(), value)
        })?;
        Ok(seen.get())
    }

    /// Wait until any of this rank's words `which` satisfies `cmp value`
    /// (OpenSHMEM `shmem_wait_until_any`); returns its index (the first
    /// of `which` that did). `which` must not be empty.
    pub fn wait_until_any(&self, which: &[usize], cmp: Cmp, value: u64) -> Result<usize> {
        let words = self.words(which, "Signals::wait_until_any")?;
        let hit = std::cell::Cell::new(0);
        let what = || self.describe("wait_until_any", which, cmp, value);
        self.pg.inner.wait_through(&what, || {
            match words
                .iter()
                .position(|w| cmp.holds(w.load(Ordering::Acquire), value))
            {
                Some(k) => {
                    hit.set(which[k]);
                    true
                }
                None => false,
            }
        })?;
        Ok(hit.get())
    }

    /// Wait until every one of this rank's words `which` satisfies `cmp
    /// value` (OpenSHMEM `shmem_wait_until_all`; an empty `which` returns
    /// at once).
    pub fn wait_until_all(&self, which: &[usize], cmp: Cmp, value: u64) -> Result<()> {
        let words = match which {
            [] => return Ok(()),
            _ => self.words(which, "Signals::wait_until_all")?,
        };
        let what = || self.describe("wait_until_all", which, cmp, value);
        self.pg.inner.wait_through(&what, || {
            words
                .iter()
                .all(|w| cmp.holds(w.load(Ordering::Acquire), value))
        })
    }

    /// Wait until at least one of this rank's words `which` satisfies
    /// `cmp value` (OpenSHMEM `shmem_wait_until_some`); returns the
    /// indices of all that did at that moment, in the order of `which`.
    /// `which` must not be empty.
    pub fn wait_until_some(&self, which: &[usize], cmp: Cmp, value: u64) -> Result<Vec<usize>> {
        let words = self.words(which, "Signals::wait_until_some")?;
        let mut hits = Vec::new();
        let what = || self.describe("wait_until_some", which, cmp, value);
        self.pg.inner.wait_through(&what, || {
            hits = which
                .iter()
                .zip(&words)
                .filter(|(_, w)| cmp.holds(w.load(Ordering::Acquire), value))
                .map(|(&i, _)| i)
                .collect();
            !hits.is_empty()
        })?;
        Ok(hits)
    }

    /// [`wait_until`](Self::wait_until) as a future: each poll polls the
    /// endpoint once, and while the word does not satisfy `cmp value`
    /// leaves the task's waker with the rank's doorbell bridge (woken
    /// when traffic or a direct write may have arrived), so a pending
    /// wait costs no CPU. Resolves to the value that satisfied it, or an
    /// error if the job failed.
    ///
    /// ```no_run
    /// # async fn f(pg: &splitrt_pgas::Pgas, s: &splitrt_pgas::Signals) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// let v = s.wait_until_async(0, Cmp::Ge, 3).await?;
    /// # let _ = (pg, v); Ok(()) }
    /// ```
    pub fn wait_until_async(&self, i: usize, cmp: Cmp, value: u64) -> SignalWait<'_> {
        SignalWait {
            word: self.word(i, "Signals::wait_until_async").map_err(Some),
            inner: &self.pg.inner,
            cmp,
            value,
            key: None,
        }
    }

    fn words(&self, which: &[usize], what: &str) -> Result<Vec<&AtomicU64>> {
        if which.is_empty() {
            return Err(Error::usage(format!(
                "{what}: no signal words to wait for (an empty index list never satisfies it)"
            ))
            .at_rank(self.pg.rank()));
        }
        which.iter().map(|&i| self.word(i, what)).collect()
    }

    /// What a wait awaits, for the hang report.
    fn describe(&self, call: &str, which: &[usize], cmp: Cmp, value: u64) -> String {
        let me = self.pg.rank();
        let held: Vec<String> = which
            .iter()
            .take(8)
            .map(|&i| {
                let v = self.word(i, "").map_or(0, |w| w.load(Ordering::Acquire));
                format!("[{i}] at {:?} holds {v}", self.at(me, i))
            })
            .collect();
        let more = if which.len() > 8 { ", ..." } else { "" };
        format!(
            "in Signals::{call}(word {} {value}) on rank {me}: {}{more}",
            cmp.symbol(),
            held.join(", ")
        )
    }
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals")
            .field("ptr", &self.arr.ptr(self.arr.rank()))
            .field("len", &self.len())
            .finish()
    }
}

/// A pending [`Signals::wait_until_async`]. Dropping it stops waiting.
pub struct SignalWait<'a> {
    /// The word, or why there is none (reported at the first poll).
    word: std::result::Result<&'a AtomicU64, Option<Error>>,
    inner: &'a Inner,
    cmp: Cmp,
    value: u64,
    key: Option<TrafficKey>,
}

impl SignalWait<'_> {
    fn end(&mut self, r: Result<u64>) -> Poll<Result<u64>> {
        if let Some(k) = self.key.take() {
            self.inner.ep.forget_traffic_wake(&k);
        }
        Poll::Ready(r)
    }
}

impl Future for SignalWait<'_> {
    type Output = Result<u64>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let w = match &mut this.word {
            Ok(w) => *w,
            Err(e) => {
                let e = e
                    .take()
                    .unwrap_or_else(|| Error::usage("SignalWait polled after completion"));
                return this.end(Err(e));
            }
        };
        let ep = &this.inner.ep;
        // the doorbell's count before the look at the word
        let seq = ep.traffic_seq();
        if let Err(e) = ep.poll() {
            // the job failed, or polling is refused here: end; else a
            // malformed unrelated message: ride it out
            if matches!(
                e.kind(),
                ErrorKind::PeerFailed(_) | ErrorKind::Timeout(_) | ErrorKind::Usage(_)
            ) {
                return this.end(Err(e));
            }
        }
        let v = w.load(Ordering::Acquire);
        if this.cmp.holds(v, this.value) {
            return this.end(Ok(v));
        }
        if ep.peer_failed() {
            let e = ep.failure().unwrap_or_else(|| {
                Error::protocol("the job failed while waiting for a signal")
                    .at_rank(this.inner.rank)
            });
            return this.end(Err(e));
        }
        let k = this.key.get_or_insert_with(|| ep.traffic_key());
        if let Err(e) = ep.wake_on_traffic_since(k, cx.waker(), seq) {
            return this.end(Err(e));
        }
        // a signal that landed between the check and the registration
        let v = w.load(Ordering::Acquire);
        if this.cmp.holds(v, this.value) {
            return this.end(Ok(v));
        }
        Poll::Pending
    }
}

impl Drop for SignalWait<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.inner.ep.forget_traffic_wake(&k);
        }
    }
}

impl Inner {
    /// This rank's signal word at segment offset `off`.
    pub(crate) fn signal_word(&self, off: u64) -> &AtomicU64 {
        let seg = self.st.seg();
        debug_assert!(off.is_multiple_of(8) && off + 8 <= seg.len() as u64);
        // SAFETY: `off` is a word of a signal array of this rank's segment
        // (the callers take it from a `Signals` or check it against the
        // registry): inside the segment, 8-aligned in a page-aligned
        // mapping, which the endpoint in `self` keeps mapped while the
        // returned reference (bounded by `&self`) lives; signal words are
        // touched only by atomics.
        unsafe { &*(seg.base().wrapping_add(off as usize) as *const AtomicU64) }
    }

    /// Check that `sig` names a signal word of a rank of the job.
    pub(crate) fn check_signal(&self, sig: GlobalPtr<u64>, what: &str) -> Result<()> {
        self.check_bytes(sig.rank(), sig.offset(), 8, 8)?;
        if !self.st.signals.is_word(sig.offset()) {
            return Err(self.err(
                Error::usage(format!(
                    "{what}: {sig:?} is not a signal word (signal words are the u64s of an \
                     array from Pgas::alloc_signals)"
                )),
                sig.rank(),
            ));
        }
        Ok(())
    }

    /// Update `sig` by `op`, `value`: through the mapped segment (then
    /// wake its owner) or by a request to its owner (complete at `sync`).
    pub(crate) fn signal(&self, sig: GlobalPtr<u64>, op: SignalOp, value: u64) -> Result<()> {
        let (rank, off) = (sig.rank(), sig.offset());
        if let Some(seg) = self.native(rank) {
            // SAFETY: `check_signal` passed: [off, off + 8) is an 8-aligned
            // signal word inside `rank`'s segment, mapped by the fabric that
            // the endpoint in `self` owns; signal words are touched only by
            // atomics.
            let w = unsafe { &*(seg.base().wrapping_add(off as usize) as *const AtomicU64) };
            op.apply(w, value);
            // it may sleep waiting for this word, or have a future that
            // just looked at it (counted: see `wake_on_traffic_since`)
            // SAFETY: `seg` is from this Inner's direct table, whose
            // endpoint owns the fabric that handed it out.
            unsafe { seg.wake_owner_counted() };
            return Ok(());
        }
        self.issued.add_puts(1);
        let books = self.st.peer_puts.get();
        books.inspect(|b| b.issue(rank));
        let r = self.ep.request(
            rank,
            self.h.signal.signal,
            &[op.code(), off, value],
            Payload::None,
        );
        if r.is_err() {
            // never sent: no reply to wait for
            books.inspect(|b| b.complete(rank));
            self.st.puts_done.fetch_add(1, Ordering::Release);
        }
        r.map_err(|e| e.at_rank(self.rank))
    }
}

impl Pgas {
    /// Collective: `n` signal words per rank, zeroed, at the same offset on
    /// every rank (a symmetric allocation, see
    /// [`alloc_sym`](Self::alloc_sym)). Only words of such arrays are
    /// accepted by signals and signal waits.
    pub fn alloc_signals(&self, n: usize) -> Result<Signals> {
        let arr = self.alloc_sym::<u64>(n)?;
        let off = arr.ptr(self.rank()).offset();
        if !self.inner.st.signals.add(off, n as u64 * 8) {
            let _ = self.free_sym(arr);
            return Err(Error::usage(format!(
                "Pgas::alloc_signals: more than {} signal arrays at once",
                crate::signal_word::MAX_SIGNAL_ARRAYS
            ))
            .at_rank(self.rank()));
        }
        // every rank knows the words before any rank signals into them
        if let Err(e) = self.barrier() {
            self.inner.st.signals.remove(off);
            return Err(e);
        }
        Ok(Signals {
            arr,
            pg: self.clone(),
        })
    }

    /// Collective: free a signal array. Every signal into it must have
    /// completed (the signalling ranks' `sync`) before any rank calls this.
    pub fn free_signals(&self, s: Signals) -> Result<()> {
        self.barrier()?;
        self.inner
            .st
            .signals
            .remove(s.arr.ptr(self.rank()).offset());
        self.free_sym(s.arr)
    }

    /// Start `*dst := src`, then update the signal word `sig` by `op`,
    /// `value` at the same rank once the data has landed (OpenSHMEM
    /// `shmem_put_signal`): a rank that sees the signal sees the data.
    /// Split-phase like [`put`](Self::put): `src` is copied now, and the
    /// operation is complete (data and signal) at [`sync`](Self::sync).
    ///
    /// `sig` must be a word of a [`Signals`] array on `dst`'s rank.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::{Cmp, SignalOp};
    /// let halo = pg.alloc_sym::<f64>(64)?;
    /// let arrived = pg.alloc_signals(1)?;
    /// let n = pg.size();
    /// for peer in (0..n).filter(|&p| p != pg.rank()) {
    ///     pg.put_signal(halo.ptr(peer), &[1.0; 64], arrived.at(peer, 0), SignalOp::Add, 1)?;
    /// }
    /// arrived.wait_until(0, Cmp::Ge, n as u64 - 1)?; // every peer's data is here
    /// # Ok(()) }
    /// ```
    pub fn put_signal<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        src: &[T],
        sig: GlobalPtr<u64>,
        op: SignalOp,
        value: u64,
    ) -> Result<()> {
        let i = &self.inner;
        // announced across the frozen check and the copy (see `Pgas::freeze`)
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { splitrt_am::writing() };
        i.check_write(dst, src.len(), "a put_signal")?;
        i.check_signal(sig, "Pgas::put_signal")?;
        let rank = dst.rank();
        if sig.rank() != rank {
            return Err(i.err(
                Error::usage(format!(
                    "Pgas::put_signal: the data goes to rank {rank} but the signal {sig:?} \
                     to rank {} (both go to one rank)",
                    sig.rank()
                )),
                rank,
            ));
        }
        let bytes: &[u8] = bytemuck::cast_slice(src);
        if bytes.is_empty() {
            return i.signal(sig, op, value);
        }
        if let Some(seg) = i.native(rank) {
            // SAFETY: the destination range was checked against the
            // peer's segment; the source may be a slice of our own
            // segment, so this is a memmove.
            unsafe {
                memmove(
                    bytes.as_ptr(),
                    seg.base().wrapping_add(dst.offset() as usize),
                    bytes.len(),
                )
            };
            // the signal after the data, with release ordering
            return i.signal(sig, op, value);
        }
        if let Some(r) = i.put_signal_direct(rank, dst.offset(), bytes, sig, op, value) {
            // RDMA write, then the signal message after it (`signal_rdma.rs`)
            return r;
        }
        // One Long: deposited, then the handler updates the signal.
        i.issued.add_puts(1);
        let books = i.st.peer_puts.get();
        books.inspect(|b| b.issue(rank));
        let r = i.ep.request(
            rank,
            i.h.signal.put_signal,
            &[op.code(), sig.offset(), value],
            Payload::Long {
                data: bytes,
                offset: dst.offset(),
            },
        );
        if r.is_err() {
            // never sent: no reply to wait for
            books.inspect(|b| b.complete(rank));
            i.st.puts_done.fetch_add(1, Ordering::Release);
        }
        r.map_err(|e| e.at_rank(i.rank))
    }

    /// Update the signal word `sig` (any rank's) by `op`, `value`
    /// (OpenSHMEM `shmem_signal_add` / `shmem_signal_set`); complete at
    /// [`sync`](Self::sync). Not ordered after earlier puts: `sync` first,
    /// or use [`put_signal`](Self::put_signal).
    pub fn signal(&self, sig: GlobalPtr<u64>, op: SignalOp, value: u64) -> Result<()> {
        self.inner.check_signal(sig, "Pgas::signal")?;
        self.inner.signal(sig, op, value)
    }

    /// `signal(sig, SignalOp::Add, value)` (OpenSHMEM `shmem_signal_add`).
    pub fn signal_add(&self, sig: GlobalPtr<u64>, value: u64) -> Result<()> {
        self.signal(sig, SignalOp::Add, value)
    }

    /// `signal(sig, SignalOp::Set, value)` (OpenSHMEM `shmem_signal_set`).
    pub fn signal_set(&self, sig: GlobalPtr<u64>, value: u64) -> Result<()> {
        self.signal(sig, SignalOp::Set, value)
    }

    /// Read the signal word `sig` of any rank (OpenSHMEM
    /// `shmem_signal_fetch` reads only the caller's; here a peer's word is
    /// read by a remote atomic load).
    pub fn signal_fetch(&self, sig: GlobalPtr<u64>) -> Result<u64> {
        let i = &self.inner;
        i.check_signal(sig, "Pgas::signal_fetch")?;
        if sig.rank() == i.rank {
            return Ok(i.signal_word(sig.offset()).load(Ordering::Acquire));
        }
        self.atomic().load(sig)
    }

    /// Test hook (`test-doubles`): send `rank`'s signal handler a raw,
    /// unchecked request `[op, off, value]`, as a broken or hostile peer
    /// could (complete at `sync`, which reports the refusal). The handler
    /// must refuse bad ones with a status, never panic.
    #[cfg(feature = "test-doubles")]
    #[doc(hidden)]
    pub fn raw_signal_for_tests(&self, rank: usize, args: [u64; 3]) -> Result<()> {
        let i = &self.inner;
        i.issued.add_puts(1);
        let books = i.st.peer_puts.get();
        books.inspect(|b| b.issue(rank));
        let r = i.ep.request(rank, i.h.signal.signal, &args, Payload::None);
        if r.is_err() {
            books.inspect(|b| b.complete(rank));
            i.st.puts_done.fetch_add(1, Ordering::Release);
        }
        r
    }
}
