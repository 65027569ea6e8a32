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
use crate::ptr::GlobalPtr;
use crate::state::{stored_counter, Dest};
use bytemuck::Pod;
use parking_lot::Mutex;
use splitrt_am::{Payload, Result};
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
            unsafe { memmove(seg.base().add(off as usize), dst, len) };
            return Ok(None);
        }
        if self.path == RmaPath::Native {
            // SAFETY: the caller keeps `dst` alive and unaliased for `len`
            // bytes until the get completes, which a direct get does here.
            let d = unsafe { std::slice::from_raw_parts_mut(dst, len) };
            if let Some(r) = self.ep.rma().get_direct(rank, off, d) {
                return r.map(|()| None);
            }
        }
        let chunk = self.ep.max_medium(rank)?;
        let chunks = len.div_ceil(chunk);
        let slot = self.st.dests.lock().insert(Dest {
            ptr: dst,
            len,
            remaining: chunks,
            error: None,
            cancelled: false,
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
        let mut first = None;
        let mut d = st.dests.lock();
        for &s in slots {
            match d.get_mut(s) {
                Some(dest) if dest.remaining > 0 => {
                    dest.cancelled = true;
                    dest.ptr = std::ptr::null_mut();
                }
                Some(_) => {
                    if let Some(e) = d.remove(s).and_then(|dest| dest.error) {
                        first.get_or_insert(e);
                    }
                }
                None => {}
            }
        }
        drop(d);
        waited?;
        match first {
            Some(e) => Err(splitrt_am::Error::protocol(e).at_rank(self.rank)),
            None => Ok(()),
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
            let fabric = self.ep.rma();
            // small: copied out now, complete by the next sync
            if let Some(r) = fabric.put_direct_nb(rank, off, src) {
                self.direct_puts.store(true, Ordering::Relaxed);
                return r;
            }
            if let Some(r) = fabric.put_direct(rank, off, src) {
                return r;
            }
        }
        self.issued.add_puts(1);
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
            self.st.puts_done.fetch_add(1, Ordering::Release);
        }
        r
    }

    pub(crate) fn store_bytes(&self, rank: usize, off: u64, src: &[u8]) -> Result<()> {
        self.sent_bytes[rank].fetch_add(src.len() as u64, Ordering::Relaxed);
        if let Some(seg) = self.native(rank) {
            // SAFETY: destination range checked against the peer's segment.
            unsafe { memmove(src.as_ptr(), seg.base().add(off as usize), src.len()) };
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
        if let Some(seg) = self.native_checked(dst.rank(), dst.offset(), bytes.len() as u64, align)
        {
            put_native(seg, dst.offset(), bytes);
            return Ok(());
        }
        self.put_slow(dst, src)
    }

    /// [`put`](Self::put) past its inlined fast path (which took every
    /// native access that passes the checks): the checks again (an error
    /// names what is wrong), then the message path.
    #[cold]
    #[inline(never)]
    fn put_slow<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.check(dst, src.len())?;
        self.put_bytes(dst.rank(), dst.offset(), bytemuck::cast_slice(src))
    }

    /// Checked typed store: the one entry point of `Pgas::store` and `Scope::store`.
    pub(crate) fn store<T: Pod>(&self, dst: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.check(dst, src.len())?;
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
    unsafe { memmove(src.as_ptr(), seg.base().add(off as usize), src.len()) };
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
    _buffers: PhantomData<&'env mut ()>,
}

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
            unsafe { memmove(seg.base().add(off as usize), bytes.as_mut_ptr(), len) };
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
        self.inner.wait_slots(&slots)
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
        })
    }

    /// Start fetching `dst.len()` elements at `src` into the caller's
    /// buffer `dst`; the returned handle borrows it until
    /// [`wait`](GetInto::wait) (or drop, which waits too).
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
                    seg.base().add(src.offset() as usize),
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
            })),
        })
    }

    /// Start `*dst := src` (split-phase: copied now, complete at [`sync`]).
    ///
    /// [`sync`]: Pgas::sync
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
            // SAFETY: source range checked against the peer's segment;
            // `bytes` is the caller's buffer (maybe in our own segment:
            // memmove).
            unsafe {
                let from = seg.base().add(src.offset() as usize);
                memmove(from, bytes.as_mut_ptr(), bytes.len());
            }
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
        if let Some(seg) = inner.native_checked(dst.rank(), dst.offset(), bytes.len() as u64, align)
        {
            // A native put is complete at the target once the copy returns:
            // no need to wait for this rank's other operations.
            put_native(seg, dst.offset(), bytes);
            std::sync::atomic::fence(Ordering::Release);
            return inner.take_errors();
        }
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
/// data, or `.await` it (it polls the endpoint; any executor works).
/// Dropping it early waits for the data first.
pub struct Get<T: Pod> {
    pg: Pgas,
    buf: Option<Vec<T>>,
    slot: Option<usize>,
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
/// [`wait`](GetInto::wait) for the data, or `.await` it. Dropping it
/// early waits for the data first.
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

impl Future for GetInto<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.is_done() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match this.pending.take() {
            None => Poll::Ready(Ok(())),
            Some(p) => Poll::Ready(Self::finish(*p)),
        }
    }
}

impl Drop for GetInto<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(p) = self.pending.as_mut() {
            if let Some(s) = p.slot.take() {
                let _ = p.inner.wait_slots(&[s]);
            }
        }
    }
}

// The data lives in the Vec's heap block, which never moves: pinning the
// handle guarantees nothing we need.
impl<T: Pod> Unpin for Get<T> {}

impl<T: Pod> Future for Get<T> {
    type Output = Result<Vec<T>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.is_done() {
            // Progress is driven by polling; ask to be polled again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if let Some(s) = this.slot.take() {
            if let Err(e) = this.pg.inner.wait_slots(&[s]) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(this.buf.take().expect("polled after completion")))
    }
}

impl<T: Pod> Drop for Get<T> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            let _ = self.pg.inner.wait_slots(&[s]);
        }
    }
}
