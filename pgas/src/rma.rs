//! Split-phase one-sided access: `get` (l := r), `put` (r := l), `store`
//! (r :- l). Native path: a copy through the peer's mapped segment,
//! complete at once. AM path: request/reply messages, complete when the
//! reply arrives (stores are reply-free and counted at the target).
//!
//! Buffer lifetimes are safe without `unsafe`: a get writes either into a
//! buffer borrowed by a [`Scope`] (which waits for its gets before it
//! returns, also when unwinding) or into a buffer owned by a [`Get`] handle.
//! Puts and stores copy their source at issue.

use crate::context::{Inner, Pgas};
use crate::handlers::GET_REPLY_ARGS;
use crate::ptr::GlobalPtr;
use crate::state::{stored_counter, Dest};
use bytemuck::Pod;
use parking_lot::Mutex;
use splitrt_am::{ErrorKind, Payload, Result, TrafficKey};
use splitrt_runtime::config::RmaPath;
use splitrt_runtime::fabric::SegmentRef;
use splitrt_runtime::memmove::memmove;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

impl Inner {
    /// Start fetching `len` bytes at (rank, off) into `dst`; returns the AM
    /// slot to wait for, if any. The caller checked the range (see
    /// [`Inner::check`]) and keeps `dst` alive until then.
    pub(crate) fn start_get(
        &self,
        rank: usize,
        off: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<usize>> {
        if len == 0 {
            return Ok(None);
        }
        if let Some(seg) = self.native(rank) {
            // SAFETY: the source range was checked against the peer's
            // segment; the destination is the caller's live buffer of `len`
            // bytes. The two may overlap (a local get into a slice of our own
            // segment), so this is a memmove.
            unsafe { memmove(seg.base().wrapping_add(off as usize), dst, len) };
            return Ok(None);
        }
        if self.path == RmaPath::Native {
            if let Some(one) = self.ep.rma().one_sided() {
                // SAFETY: the caller keeps `dst` alive and unaliased for
                // `len` bytes until the get completes, which a one-sided
                // get does here.
                let d = unsafe { std::slice::from_raw_parts_mut(dst, len) };
                return one.get(rank, off, d).map(|()| None);
            }
        }
        // one reply per chunk; a get larger than one Medium is cut into
        // chunks that arrive in one piece (over UDP one datagram:
        // delivered from its receive buffer, not copied into a reassembly
        // buffer first; docs/networking.md, "Where bulk transfer's time
        // goes", session 13) unless that bound is under half a Medium
        // (see `get_chunk`); the reply's 3 arguments (slot, offset,
        // status) ride in it
        let chunk = crate::get_chunk::get_chunk(
            len,
            self.ep.max_medium(rank)?,
            self.ep.max_medium_unsplit(rank, GET_REPLY_ARGS)?,
        );
        let chunks = len.div_ceil(chunk);
        let slot = self.st.dests.lock().insert(Dest {
            ptr: dst,
            len,
            remaining: chunks,
            got: 0,
            error: None,
            cancelled: false,
            waker: None,
        });
        self.issued.add_gets(chunks as u64);
        for c in 0..chunks {
            let at = c * chunk;
            let n = chunk.min(len - at);
            let args = [slot as u64, at as u64, off + at as u64, n as u64];
            if let Err(e) = self.ep.request(rank, self.h.get, &args, Payload::None) {
                // never sent: account for the rest so waits end
                let mut d = self.st.dests.lock();
                if let Some(d) = d.get_mut(slot) {
                    d.remaining -= chunks - c;
                }
                self.st
                    .gets_done
                    .fetch_add((chunks - c) as u64, Ordering::Release);
                self.wait_slots(&[slot]).ok();
                return Err(e);
            }
        }
        Ok(Some(slot))
    }

    /// Whether the get awaiting `slot` has all its data (polls once);
    /// `None`: nothing awaited.
    pub(crate) fn slot_done(&self, slot: Option<usize>) -> bool {
        match slot {
            None => true,
            Some(s) => {
                let _ = self.ep.poll();
                self.st.dests.lock().items_remaining(s) == 0
            }
        }
    }

    /// Wait for AM get slots, release them, report the first failure. If
    /// the job fails first, the slots still awaiting replies are cancelled
    /// (late replies are dropped, never written into the released buffer).
    pub(crate) fn wait_slots(&self, slots: &[usize]) -> Result<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let st = &self.st;
        let what = || format!("for the data of {} get(s) sent by the AM path", slots.len());
        let waited = self.wait_through(&what, || {
            let mut d = st.dests.lock();
            slots.iter().all(|&s| d.items_remaining(s) == 0)
        });
        let first = self.release_slots(slots);
        waited?;
        match first {
            Some(e) => Err(splitrt_am::Error::protocol(e).at_rank(self.rank)),
            None => Ok(()),
        }
    }

    /// Release the slots of gets that are over: complete ones are freed
    /// (the first error a reply reported is returned), incomplete ones
    /// cancelled (late replies are dropped and the last one frees the
    /// slot; the owner may release the buffer now: the reply handler
    /// writes only under the slot table's lock, and only into a slot not
    /// cancelled). A slot that is gone is a broken invariant (its buffer
    /// was never written): reported as an error.
    fn release_slots(&self, slots: &[usize]) -> Option<String> {
        let mut first = None;
        // wakers and freed slots, dropped after unlocking (a waker's drop
        // runs executor code)
        let mut garbage = Vec::new();
        let mut d = self.st.dests.lock();
        for &s in slots {
            match d.get_mut(s) {
                Some(dest) if dest.remaining > 0 => {
                    dest.cancelled = true;
                    dest.ptr = std::ptr::null_mut();
                    garbage.push((dest.waker.take(), None));
                }
                Some(_) => {
                    let dest = d.remove(s);
                    if let Some(e) = dest.as_ref().and_then(|dest| dest.error.clone()) {
                        first.get_or_insert(e);
                    }
                    garbage.push((None, dest));
                }
                None => {
                    first.get_or_insert(format!(
                        "the reply slot {s} of a get is gone (a broken invariant): \
                         its data never arrived"
                    ));
                }
            }
        }
        drop(d);
        drop(garbage);
        first
    }

    /// A future's poll of the AM get awaiting `slot`: poll the endpoint
    /// once (so handlers run), then `Ready` with the get's outcome (the
    /// slot released) if its replies all landed or the job failed, else
    /// `Pending` with the task's waker stored in the slot (the reply
    /// handler that completes it wakes it) and registered with the
    /// endpoint's doorbell bridge (woken when traffic may have arrived, so
    /// the task polls again even if no other thread polls). Never wakes
    /// the task itself: a pending get costs no CPU while nothing arrives.
    ///
    /// `deferred` keeps a non-fatal error a poll met (a malformed message
    /// from some rank), reported when the get completes, as
    /// [`wait_slots`](Self::wait_slots) rides such errors out.
    pub(crate) fn poll_slot(
        &self,
        slot: usize,
        key: &mut Option<TrafficKey>,
        deferred: &mut Option<splitrt_am::Error>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        let polled = self.ep.poll();
        let over = match polled {
            // the job failed (the bridge fires at once while it stays
            // failed: registering again would spin)
            Ok(_) => self.ep.peer_failed(),
            Err(e) => {
                // the job failed, or polling is refused here (in a
                // handler, after finish): end the get; else ride it out
                let fatal = matches!(e.kind(), ErrorKind::PeerFailed(_) | ErrorKind::Timeout(_))
                    || matches!(e.kind(), ErrorKind::Usage(_));
                deferred.get_or_insert(e);
                fatal
            }
        };
        let replaced = {
            let mut d = self.st.dests.lock();
            match d.get_mut(slot) {
                Some(dest) if dest.remaining > 0 && !over => dest.set_waker(cx.waker()),
                // complete, ended, or gone (end_slot reports a gone slot)
                _ => {
                    drop(d);
                    return Poll::Ready(self.end_slot(slot, key, deferred.take()));
                }
            }
        };
        drop(replaced);
        // Registered in the slot under the lock the handler completes it
        // under: a reply after the poll above wakes this task.
        let k = key.get_or_insert_with(|| self.ep.traffic_key());
        if let Err(e) = self.ep.wake_on_traffic_as(k, cx.waker()) {
            return Poll::Ready(self.end_slot(slot, key, Some(e)));
        }
        Poll::Pending
    }

    /// A handle is dropped: cancel its get's slot if it is still pending
    /// (late replies are counted for `sync` and dropped; the buffer may be
    /// freed at once) and take back its bridge waker. Never waits.
    #[inline]
    pub(crate) fn cancel_slot(&self, slot: Option<usize>, key: Option<TrafficKey>) {
        if let Some(s) = slot {
            let _ = self.release_slots(&[s]);
        }
        if let Some(k) = key {
            self.ep.forget_traffic_wake(&k);
        }
    }

    /// A future's get is over (complete, or ended by `err`): release its
    /// slot and report the first error.
    fn end_slot(
        &self,
        slot: usize,
        key: &mut Option<TrafficKey>,
        err: Option<splitrt_am::Error>,
    ) -> Result<()> {
        if let Some(k) = key.take() {
            self.ep.forget_traffic_wake(&k);
        }
        let failed = self.ep.peer_failed();
        let reply_err = self.release_slots(&[slot]);
        if failed {
            if let Some(e) = self.ep.failure() {
                return Err(e.at_rank(self.rank));
            }
        }
        match (err, reply_err) {
            (Some(e), _) => Err(e),
            (None, Some(e)) => Err(splitrt_am::Error::protocol(e).at_rank(self.rank)),
            (None, None) => Ok(()),
        }
    }

    pub(crate) fn put_bytes(&self, rank: usize, off: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        if let Some(seg) = self.native(rank) {
            put_native(seg, off, src);
            return Ok(());
        }
        if self.path == RmaPath::Native {
            if let Some(one) = self.ep.rma().one_sided() {
                // small: copied out now, complete by the next sync
                let nb = one.put_nb(rank, off, src);
                if !matches!(nb, Ok(false)) {
                    self.direct_puts.store(true, Ordering::Relaxed);
                    return nb.map(|_| ());
                }
                return one.put(rank, off, src);
            }
        }
        self.issued.add_puts(1);
        let books = self.st.peer_puts.get();
        books.inspect(|b| b.issue(rank));
        let r = self.ep.request(
            rank,
            self.h.put,
            &[],
            Payload::Long {
                data: src,
                offset: off,
            },
        );
        if r.is_err() {
            books.inspect(|b| b.complete(rank));
            self.st.puts_done.fetch_add(1, Ordering::Release);
        }
        r
    }

    pub(crate) fn store_bytes(&self, rank: usize, off: u64, src: &[u8]) -> Result<()> {
        self.sent_bytes[rank].fetch_add(src.len() as u64, Ordering::Relaxed);
        if let Some(seg) = self.native(rank) {
            // SAFETY: destination range checked against the peer's segment.
            unsafe {
                memmove(
                    src.as_ptr(),
                    seg.base().wrapping_add(off as usize),
                    src.len(),
                )
            };
            // Release: the data is visible before the count that announces it.
            // SAFETY: `seg` is from this Inner's direct table (the endpoint's
            // fabric, alive as long as `self`); the reference ends here.
            unsafe { stored_counter(seg) }.fetch_add(src.len() as u64, Ordering::Release);
            // it may sleep in store_sync
            // SAFETY: `seg` is from this Inner's direct table; the endpoint
            // in `self` owns the fabric that handed it out.
            unsafe { seg.wake_owner() };
            return Ok(());
        }
        self.ep.request(
            rank,
            self.h.store,
            &[],
            Payload::Long {
                data: src,
                offset: off,
            },
        )
    }

    /// Checked typed put: the one entry point of `Pgas::put` and `Scope::put`.
    #[inline(always)]
    pub(crate) fn put<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let align = std::mem::align_of::<T>() as u64;
        let len = bytes.len() as u64;
        // announced across the frozen check and the copy (see `Pgas::freeze`)
        // SAFETY: the guard lives in this frame and drops before it
        // returns; no other leaf guard is alive on this thread (the copy
        // runs nothing else).
        let writing = unsafe { splitrt_am::writing_leaf() };
        if let Some(seg) = self.native_checked_write(dst.rank(), dst.offset(), len, align) {
            put_native(seg, dst.offset(), bytes);
            return Ok(());
        }
        drop(writing);
        self.put_slow(dst, src)
    }

    /// [`put`](Self::put) past its inlined fast path (which took every
    /// native access that passes the checks): the checks again (an error
    /// names what is wrong), then the message path.
    #[cold]
    #[inline(never)]
    fn put_slow<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        splitrt_am::while_writing(|| {
            self.check_write(dst, src.len(), "a put")?;
            self.put_bytes(dst.rank(), dst.offset(), bytemuck::cast_slice(src))
        })
    }

    /// Checked typed store: the one entry point of `Pgas::store` and `Scope::store`.
    pub(crate) fn store<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { splitrt_am::writing() };
        self.check_write(dst, src.len(), "a store")?;
        self.store_bytes(dst.rank(), dst.offset(), bytemuck::cast_slice(src))
    }

    /// Blocking get of raw bytes (checked by the caller; collectives use it
    /// on their own scratch block).
    pub(crate) fn get_blocking(&self, rank: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        match self.start_get(rank, off, dst.as_mut_ptr(), dst.len())? {
            Some(slot) => self.wait_slots(&[slot]),
            None => Ok(()),
        }
    }
}

/// A put into a mapped segment: copy, then wake its owner (it may sleep
/// waiting for this data). The caller checked the range.
#[inline]
fn put_native(seg: SegmentRef, off: u64, src: &[u8]) {
    // SAFETY: the destination range was checked against the segment; the
    // source may be a slice of our own segment, so this is a memmove.
    unsafe {
        memmove(
            src.as_ptr(),
            seg.base().wrapping_add(off as usize),
            src.len(),
        )
    };
    // SAFETY: `seg` comes from the direct table of a live Pgas (the
    // caller's), whose endpoint owns the fabric that handed it out.
    unsafe { seg.wake_owner() };
}

impl crate::state::Slots<Dest> {
    /// Replies still missing for slot `s` (0 if the slot is gone).
    pub(crate) fn items_remaining(&mut self, s: usize) -> usize {
        self.get_mut(s).map_or(0, |d| d.remaining)
    }
}

/// A split-phase region: gets write into buffers borrowed for `'env`, and
/// the region waits for all of them (and for this rank's puts) before
/// [`Pgas::scope`] returns.
pub struct Scope<'env> {
    inner: &'env Inner,
    slots: Mutex<Vec<usize>>,
    /// Whether `slots` was ever pushed to: a scope of native accesses only
    /// ends without taking the lock (two locked instructions, half of a
    /// one-put scope's cost).
    any_slots: AtomicBool,
    /// Invariant in `'env` (as `std::thread::Scope` is): a covariant
    /// scope coerces to a shorter lifetime, and a buffer local to the
    /// closure would be accepted by [`get`](Self::get) and written by a
    /// reply after it was freed (`tests/ui/scope_*.rs`).
    _buffers: PhantomData<&'env mut &'env ()>,
    /// Work to do once the gets have landed: a strided or indexed get
    /// over messages unpacks its staged data into the caller's buffer
    /// (dropped unrun if the gets failed). Taken by `finish` after the
    /// wait, so a staging buffer outlives its slot.
    after: Mutex<Vec<Deferred<'env>>>,
}

/// See `Scope::after`.
pub(crate) type Deferred<'env> = Box<dyn FnOnce() + Send + 'env>;

impl<'env> Scope<'env> {
    /// Start `dst := *src` for `dst.len()` elements; `dst` is valid once the
    /// scope ends.
    #[inline(always)]
    pub fn get<T: Pod>(&self, src: GlobalPtr<T>, dst: &'env mut [T]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let align = std::mem::align_of::<T>() as u64;
        let (rank, off, len) = (src.rank(), src.offset(), bytes.len());
        if let Some(seg) = self.inner.native_checked(rank, off, len as u64, align) {
            // SAFETY: the source range passed the checks against the
            // peer's segment; `bytes` is the caller's buffer (maybe in our
            // own segment: memmove). Done now: nothing to wait for.
            unsafe {
                memmove(
                    seg.base().wrapping_add(off as usize),
                    bytes.as_mut_ptr(),
                    len,
                )
            };
            return Ok(());
        }
        self.get_slow(src, dst)
    }

    /// [`get`](Self::get) past its inlined fast path.
    #[cold]
    #[inline(never)]
    fn get_slow<T: Pod>(&self, src: GlobalPtr<T>, dst: &'env mut [T]) -> Result<()> {
        self.inner.check(src, dst.len())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        if let Some(s) =
            self.inner
                .start_get(src.rank(), src.offset(), bytes.as_mut_ptr(), bytes.len())?
        {
            self.slots.lock().push(s);
            self.any_slots.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Start `*dst := src` (copied now; complete when the scope ends).
    /// Returns once `src` may be reused (local completion); visible at
    /// the target when the scope ends, or after
    /// [`Pgas::quiet_peer`]`(dst.rank())` (remote completion).
    #[inline(always)]
    pub fn put<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.inner.put(dst, src)
    }

    /// Store (`*dst :- src`): no acknowledgement to this rank; the target
    /// learns of it through `store_sync` / `all_store_sync`.
    pub fn store<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.inner.store(dst, src)
    }

    fn finish(&self) -> Result<()> {
        // Relaxed: every get of the scope was started by code that
        // returned before this (the closure and whatever it joined).
        if !self.any_slots.load(Ordering::Relaxed) {
            return Ok(());
        }
        let slots = std::mem::take(&mut *self.slots.lock());
        let waited = self.inner.wait_slots(&slots);
        let after = std::mem::take(&mut *self.after.lock());
        if waited.is_ok() {
            after.into_iter().for_each(|f| f());
        }
        waited
    }

    /// Wait for the get awaiting `slot` when the scope ends, then run
    /// `then` (if the gets succeeded; else drop it).
    pub(crate) fn defer(&self, slot: usize, then: Deferred<'env>) {
        self.slots.lock().push(slot);
        self.after.lock().push(then);
        self.any_slots.store(true, Ordering::Relaxed);
    }

    /// The rank's PGAS state.
    pub(crate) fn inner(&self) -> &'env Inner {
        self.inner
    }
}

/// Waits for the scope's gets even when the closure panics, so no reply
/// ever writes into a buffer that is gone.
struct ScopeGuard<'a, 'env>(&'a Scope<'env>);
impl Drop for ScopeGuard<'_, '_> {
    fn drop(&mut self) {
        let _ = self.0.finish();
    }
}

impl Pgas {
    /// Run `f` with a split-phase [`Scope`]; when it returns, every get it
    /// started has landed and every put this rank issued is complete.
    ///
    /// ```no_run
    /// # use splitrt_pgas::{Pgas, GlobalPtr};
    /// # fn f(pg: &Pgas, a: GlobalPtr<f64>, b: GlobalPtr<f64>) -> splitrt_am::Result<()> {
    /// let (mut x, mut y) = (vec![0.0; 100], vec![0.0; 100]);
    /// pg.scope(|s| {
    ///     s.get(a, &mut x)?;   // both gets in flight at once
    ///     s.get(b, &mut y)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, R>(&'env self, f: impl FnOnce(&Scope<'env>) -> Result<R>) -> Result<R> {
        let scope = Scope {
            inner: &self.inner,
            slots: Mutex::new(Vec::new()),
            any_slots: AtomicBool::new(false),
            _buffers: PhantomData,
            after: Mutex::new(Vec::new()),
        };
        let guard = ScopeGuard(&scope);
        let r = f(&scope);
        std::mem::forget(guard);
        let done = scope.finish();
        let r = r?;
        done?;
        self.sync()?;
        Ok(r)
    }

    /// Start fetching `n` elements at `src` into a buffer the returned
    /// handle owns.
    pub fn get<T: Pod>(&self, src: GlobalPtr<T>, n: usize) -> Result<Get<T>> {
        self.inner.check(src, n)?;
        let mut buf = vec![T::zeroed(); n];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        let slot =
            self.inner
                .start_get(src.rank(), src.offset(), bytes.as_mut_ptr(), bytes.len())?;
        Ok(Get {
            pg: self.clone(),
            buf: Some(buf),
            slot,
            key: None,
            deferred: None,
        })
    }

    /// Start fetching `dst.len()` elements at `src` into the caller's
    /// buffer `dst`; the returned handle borrows it until
    /// [`wait`](GetInto::wait) (or drop, which cancels the get).
    ///
    /// Over a mapped segment (shm, native path) the copy is done before this
    /// returns and the handle costs nothing. Over the AM path the data lands
    /// in a staging buffer the handle owns and `wait` copies it into `dst`:
    /// a handle that is leaked (`mem::forget`) can then never write into a
    /// buffer that is gone. For zero-copy gets over the network use
    /// [`scope`](Pgas::scope).
    ///
    /// ```no_run
    /// # use splitrt_pgas::{Pgas, GlobalPtr};
    /// # fn f(pg: &Pgas, a: GlobalPtr<u64>, b: GlobalPtr<u64>) -> splitrt_am::Result<()> {
    /// let (mut x, mut y) = ([0u64; 8], [0u64; 8]);
    /// let hx = pg.get_into(a, &mut x)?;
    /// let hy = pg.get_into(b, &mut y)?; // both in flight
    /// hx.wait()?;
    /// hy.wait()?;
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn get_into<'a, T: Pod>(
        &'a self,
        src: GlobalPtr<T>,
        dst: &'a mut [T],
    ) -> Result<GetInto<'a>> {
        let inner = &self.inner;
        let align = std::mem::align_of::<T>() as u64;
        let len = std::mem::size_of_val(dst) as u64;
        if let Some(seg) = inner.native_checked(src.rank(), src.offset(), len, align) {
            let dst: &'a mut [u8] = bytemuck::cast_slice_mut(dst);
            // Complete at issue: nothing can write into `dst` later.
            // SAFETY: the source range passed the checks against the peer's
            // segment; `dst` is the caller's buffer. They may overlap (a
            // slice of our own segment): memmove.
            unsafe {
                memmove(
                    seg.base().wrapping_add(src.offset() as usize),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
            return Ok(GetInto { pending: None });
        }
        self.get_into_slow(src, dst)
    }

    /// [`get_into`](Self::get_into) past its inlined fast path (which
    /// took every native access that passes the checks): the checks again,
    /// then the message path.
    #[cold]
    #[inline(never)]
    fn get_into_slow<'a, T: Pod>(
        &'a self,
        src: GlobalPtr<T>,
        dst: &'a mut [T],
    ) -> Result<GetInto<'a>> {
        let inner = &self.inner;
        inner.check(src, dst.len())?;
        let dst: &'a mut [u8] = bytemuck::cast_slice_mut(dst);
        let (rank, off) = (src.rank(), src.offset());
        let mut staged = vec![0u8; dst.len()];
        let slot = inner.start_get(rank, off, staged.as_mut_ptr(), staged.len())?;
        Ok(GetInto {
            pending: Some(Box::new(Staged {
                inner,
                dst,
                staged,
                slot,
                key: None,
                deferred: None,
            })),
        })
    }

    /// Start `*dst := src` (split-phase: copied now, complete at [`sync`]).
    ///
    /// Returns once `src` may be reused (local completion); the data is
    /// visible at the target (remote completion) after [`sync`] or
    /// [`quiet_peer`]`(dst.rank())`, on every fabric and both RMA paths
    /// (a mapped segment's put is visible at once). [`write_slice`] does
    /// both in one call.
    ///
    /// [`sync`]: Pgas::sync
    /// [`quiet_peer`]: Pgas::quiet_peer
    /// [`write_slice`]: Pgas::write_slice
    #[inline(always)]
    pub fn put<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.inner.put(dst, src)
    }

    /// Store `*dst :- src`: no acknowledgement; the target waits for it with
    /// [`store_sync`](Pgas::store_sync) or everyone with
    /// [`all_store_sync`](Pgas::all_store_sync).
    pub fn store<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.inner.store(dst, src)
    }

    /// Blocking read of one element.
    pub fn read<T: Pod>(&self, src: GlobalPtr<T>) -> Result<T> {
        let mut v = [T::zeroed()];
        self.read_slice(src, &mut v)?;
        Ok(v[0])
    }

    /// Blocking read of `dst.len()` elements.
    #[inline(always)]
    pub fn read_slice<T: Pod>(&self, src: GlobalPtr<T>, dst: &mut [T]) -> Result<()> {
        let inner = &self.inner;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let len = bytes.len() as u64;
        let align = std::mem::align_of::<T>() as u64;
        if let Some(seg) = inner.native_checked(src.rank(), src.offset(), len, align) {
            let from = seg.base().wrapping_add(src.offset() as usize);
            // SAFETY: source range checked against the peer's segment;
            // `bytes` is the caller's buffer (maybe in our own segment:
            // memmove).
            unsafe { memmove(from, bytes.as_mut_ptr(), bytes.len()) };
            return Ok(());
        }
        self.read_slice_slow(src, dst)
    }

    /// [`read_slice`](Self::read_slice) when its inlined fast path (every
    /// native access that passes the checks) did not apply: the checks
    /// again (an error names what is wrong), then the message path.
    #[cold]
    #[inline(never)]
    fn read_slice_slow<T: Pod>(&self, src: GlobalPtr<T>, dst: &mut [T]) -> Result<()> {
        let inner = &self.inner;
        inner.check(src, dst.len())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        inner.get_blocking(src.rank(), src.offset(), bytes)
    }

    /// Blocking write of one element (complete at the target on return).
    pub fn write<T: Pod>(&self, dst: GlobalPtr<T>, v: T) -> Result<()> {
        self.write_slice(dst, &[v])
    }

    /// Blocking write of a slice (complete at the target on return).
    #[inline(always)]
    pub fn write_slice<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        let inner = &self.inner;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let align = std::mem::align_of::<T>() as u64;
        let len = bytes.len() as u64;
        // announced across the frozen check and the copy (see `Pgas::freeze`)
        // SAFETY: the guard lives in this frame and drops before it
        // returns; no other leaf guard is alive on this thread (the copy
        // runs nothing else).
        let writing = unsafe { splitrt_am::writing_leaf() };
        if let Some(seg) = inner.native_checked_write(dst.rank(), dst.offset(), len, align) {
            // A native put is complete at the target once the copy returns:
            // no need to wait for this rank's other operations.
            put_native(seg, dst.offset(), bytes);
            drop(writing);
            std::sync::atomic::fence(Ordering::Release);
            return inner.take_errors();
        }
        drop(writing);
        self.write_slice_slow(dst, src)
    }

    /// [`write_slice`](Self::write_slice) when its inlined fast path
    /// (every native access that passes the checks) did not apply: a put
    /// over messages (which checks again and names an error) and a `sync`.
    #[cold]
    #[inline(never)]
    fn write_slice_slow<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.put(dst, src)?;
        self.sync()
    }
}

/// An in-flight get into a buffer it owns. [`wait`](Get::wait) for the
/// data, or `.await` it. Dropping it early cancels the get (no wait).
///
/// As a future it never wakes itself: each poll polls the endpoint once
/// and, while the data is missing, leaves the task's waker with the get's
/// reply slot (the reply handler that completes the get wakes it, on
/// whichever thread polls) and with the rank's doorbell bridge (woken
/// when traffic may have arrived, so the task polls again even if no
/// thread polls the endpoint); see [`Endpoint::wake_on_traffic`]. A get
/// complete at issue (a mapped segment) is ready at the first poll. Any
/// executor works; a pending get costs no CPU while nothing arrives.
///
/// [`Endpoint::wake_on_traffic`]: splitrt_am::Endpoint::wake_on_traffic
pub struct Get<T: Pod> {
    pg: Pgas,
    buf: Option<Vec<T>>,
    slot: Option<usize>,
    /// The future's registration with the doorbell bridge, while pending.
    key: Option<TrafficKey>,
    /// A non-fatal error met while polling as a future, reported at the end.
    deferred: Option<splitrt_am::Error>,
}

impl<T: Pod> Get<T> {
    /// Whether the data has arrived (polls once).
    pub fn is_done(&self) -> bool {
        self.pg.inner.slot_done(self.slot)
    }

    /// Wait for the data.
    pub fn wait(mut self) -> Result<Vec<T>> {
        if let Some(s) = self.slot.take() {
            self.pg.inner.wait_slots(&[s])?;
        }
        Ok(self.buf.take().expect("buffer present until taken"))
    }
}

/// An in-flight get into a caller's buffer (see [`Pgas::get_into`]).
/// [`wait`](GetInto::wait) for the data, or `.await` it (a future that
/// sleeps while the data is missing, as [`Get`] is). Dropping it early
/// cancels the get (no wait; the buffer keeps what it held).
pub struct GetInto<'a> {
    /// `None`: the data is in the caller's buffer already. One pointer
    /// in all (an array of handles costs what GASNet-EX's events do:
    /// testsmall's GetNB row touches 8 B per handle, not 16).
    pending: Option<Box<Staged<'a>>>,
}

static_assertions::assert_eq_size!(GetInto<'static>, usize);

/// A get over messages: the reply lands in `staged` (heap, so it stays
/// valid if the handle leaks), copied into `dst` once it is complete.
struct Staged<'a> {
    inner: &'a Inner,
    dst: &'a mut [u8],
    staged: Vec<u8>,
    slot: Option<usize>,
    /// The future's registration with the doorbell bridge, while pending.
    key: Option<TrafficKey>,
    /// A non-fatal error met while polling as a future (see [`Get`]).
    deferred: Option<splitrt_am::Error>,
}

impl GetInto<'_> {
    /// Whether the data has arrived (polls once).
    pub fn is_done(&self) -> bool {
        self.pending
            .as_ref()
            .is_none_or(|p| p.inner.slot_done(p.slot))
    }

    /// Wait for the data; it is in the caller's buffer on `Ok`.
    #[inline]
    pub fn wait(mut self) -> Result<()> {
        match self.pending.take() {
            None => Ok(()),
            Some(p) => Self::finish(*p),
        }
    }

    #[cold]
    fn finish(mut p: Staged<'_>) -> Result<()> {
        if let Some(s) = p.slot.take() {
            p.inner.wait_slots(&[s])?;
        }
        p.dst.copy_from_slice(&p.staged);
        Ok(())
    }
}

/// Polled as [`Get`] is: never wakes itself (see there).
impl Future for GetInto<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(p) = this.pending.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        if let Some(s) = p.slot {
            match p.inner.poll_slot(s, &mut p.key, &mut p.deferred, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    p.slot = None; // released by poll_slot
                    if let Err(e) = r {
                        this.pending = None;
                        return Poll::Ready(Err(e));
                    }
                }
            }
        }
        let p = this.pending.take().expect("checked above");
        Poll::Ready(Self::finish(*p))
    }
}

/// Dropping a pending handle (a timeout or `select!` gave up on it)
/// cancels the get without waiting: the staged buffer is freed at once,
/// late replies are dropped (and counted, so [`Pgas::sync`] still waits
/// for them), `dst` is left as it was.
impl Drop for Staged<'_> {
    fn drop(&mut self) {
        self.inner.cancel_slot(self.slot.take(), self.key.take());
    }
}

// The data lives in the Vec's heap block, which never moves: pinning the
// handle guarantees nothing we need.
impl<T: Pod> Unpin for Get<T> {}

impl<T: Pod> Future for Get<T> {
    type Output = Result<Vec<T>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(s) = this.slot {
            match this
                .pg
                .inner
                .poll_slot(s, &mut this.key, &mut this.deferred, cx)
            {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    this.slot = None; // released by poll_slot
                    r?;
                }
            }
        }
        Poll::Ready(Ok(this.buf.take().expect("polled after completion")))
    }
}

/// Dropping a pending handle cancels the get without waiting (as for
/// [`GetInto`]): its buffer is freed at once, late replies are dropped
/// (and counted for [`Pgas::sync`]).
impl<T: Pod> Drop for Get<T> {
    fn drop(&mut self) {
        self.pg.inner.cancel_slot(self.slot.take(), self.key.take());
    }
}
