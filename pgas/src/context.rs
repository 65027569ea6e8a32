//! The PGAS context of one rank: attach, bounds and alignment checks, the
//! heap, completion (`sync`, `store_sync`, `all_store_sync`) and finish.

use crate::coll::Coll;
use crate::handlers::{self, Handlers};
use crate::heap::{Heap, RESERVED_BYTES, SCRATCH, USER_BASE};
use crate::ptr::GlobalPtr;
use crate::shm_barrier::ShmBarrier;
use crate::state::{Issued, State};
use bytemuck::Pod;
use parking_lot::Mutex;
use splitrt_am::{Endpoint, EndpointBuilder, Error, ErrorKind, LocalView, Payload, Result};
use splitrt_runtime::config::RmaPath;
use splitrt_runtime::fabric::SegmentRef;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A rank's handle on the global address space. Cheap to clone,
/// `Send + Sync`.
///
/// ```no_run
/// use splitrt_pgas::{Op, Pgas};
/// # fn main() -> splitrt_am::Result<()> {
/// let pg = Pgas::attach()?;
/// let counts = pg.alloc_sym::<u64>(1)?;              // same offset on every rank
/// let right = counts.ptr((pg.rank() + 1) % pg.size());
/// pg.put(right, &[pg.rank() as u64])?;                 // split-phase
/// pg.sync()?;                                          // my puts are done
/// pg.barrier()?;                                       // everyone's are
/// let mut total = [counts.local().get(0)];
/// pg.allreduce(&mut total, Op::Sum)?;
/// pg.finish()
/// # }
/// ```
#[derive(Clone)]
pub struct Pgas {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ep: Endpoint,
    pub st: Arc<State>,
    pub h: Handlers,
    pub path: RmaPath,
    pub rank: usize,
    pub size: usize,
    /// Every rank's segment when one-sided accesses to it are loads and
    /// stores (native path, mapped here), else an empty one (null base,
    /// length 0: no range passes). The fast path's one load finds the
    /// base, the length and the doorbell; no path or presence test.
    pub direct: Box<[SegmentRef]>,
    /// Arrays frozen now (`Pgas::freeze`): while 0, as nearly always, the
    /// write fast paths pay this one load; otherwise writes take the
    /// checked path, which asks the endpoint's frozen ranges.
    pub frozen_ranges: AtomicUsize,
    /// The barrier through shared memory, when every rank's segment is
    /// mapped here and the path is native (else barriers are AMs to rank 0).
    pub shm_barrier: Option<ShmBarrier>,
    pub seg_lens: Vec<u64>,
    pub heap: Mutex<Heap>,
    pub scratch: u64,
    pub issued: Issued,
    /// Puts were issued that the fabric completes only at a quiet (RDMA
    /// writes from a bounce buffer): `sync` waits for them. Set once,
    /// never cleared, so no thread's `sync` can skip another's puts.
    pub direct_puts: AtomicBool,
    /// Bytes this rank stored into each rank since the last all_store_sync.
    pub sent_bytes: Vec<AtomicU64>,
    /// Stored bytes already accounted for by store_sync.
    pub consumed: AtomicU64,
    /// Stored-bytes counter value every all_store_sync so far accounted for.
    pub all_synced: AtomicU64,
    pub notified: AtomicU64,
    /// The collective of the barrier notified last (a `Coll` code).
    pub notified_kind: AtomicU64,
    pub waited: AtomicU64,
    /// The last barrier wait returned an error before its barrier completed.
    pub wait_failed: std::sync::atomic::AtomicBool,
    /// The thread of this rank inside a collective, if any (one at a time).
    pub one_collective: crate::one_collective::CollectiveSlot,
    pub store_epoch: AtomicU64,
    /// Team collectives' messages that arrived (see `team_mail.rs`).
    pub team_mail: Arc<crate::team_mail::Mailbox>,
    /// The reserved handler of team messages.
    pub team_h: splitrt_am::RequestHandler,
    /// Split teams' shared-memory blocks this rank holds (`team_area.rs`).
    pub team_areas: Arc<crate::team_area::Retired>,
    /// The world team's two descriptions, made once here (see
    /// `team_core.rs`): `[Pgas::world's, the world collectives']`.
    pub world_teams: [Arc<crate::team_core::TeamInner>; 2],
    /// The world barrier's hierarchical form (`world_barrier.rs`).
    pub world_hier: crate::world_barrier_state::WorldHier,
}

impl Pgas {
    /// Join the job with only splitrt's own handlers registered.
    pub fn attach() -> Result<Pgas> {
        Self::attach_with(EndpointBuilder::new())
    }

    /// Join the job with the user's AM handlers registered in `b` as well
    /// (splitrt's reserved ids never collide with them).
    pub fn attach_with(b: EndpointBuilder) -> Result<Pgas> {
        Self::attach_by(b, EndpointBuilder::attach)
    }

    /// **Test double.** [`attach_with`](Self::attach_with) as rank
    /// `job.rank` of a job whose ranks are threads of this process, on the
    /// ibverbs fabric over the verbs model (see
    /// [`EndpointBuilder::attach_over_verbs_model`]): the PGAS layer over
    /// ibverbs (get/put by RDMA read/write) runs in `cargo test` without
    /// RDMA hardware. Only with the cargo feature `test-doubles`.
    #[cfg(feature = "test-doubles")]
    pub fn attach_over_verbs_model(
        b: EndpointBuilder,
        job: splitrt_runtime::job::JobInfo,
        config: splitrt_runtime::config::Config,
        dev: splitrt_runtime::fabric::rdma::model::ModelDevice,
    ) -> Result<Pgas> {
        Self::attach_by(b, move |b| b.attach_over_verbs_model(job, config, dev))
    }

    fn attach_by(
        mut b: EndpointBuilder,
        attach: impl FnOnce(EndpointBuilder) -> Result<splitrt_am::Endpoint>,
    ) -> Result<Pgas> {
        let st = Arc::new(State::default());
        let h = handlers::register(&mut b, &st)?;
        let team_mail = Arc::new(crate::team_mail::Mailbox::default());
        let team_h = crate::team_mail::register(&mut b, &team_mail)?;
        let ep = attach(b)?;
        let (rank, size) = (ep.rank(), ep.size());
        let fabric = ep.rma();
        let _ = st.seg.set(fabric.local_segment());
        let _ = st.rank.set(rank);
        let _ = st.size.set(size);
        let _ = st.peer_puts.set(crate::peer_books::PeerBooks::new(size));
        let path = ep.config().rma;
        // Peers' segments mapped here, if the fabric can load and store
        // (else every access takes the one-sided or the message path).
        let segs: Vec<Option<SegmentRef>> = match fabric.load_store() {
            Some(mapped) => (0..size).map(|r| mapped.peer_segment(r)).collect(),
            None => vec![None; size],
        };
        let seg_lens: Vec<u64> = (0..size).map(|r| fabric.segment_len(r) as u64).collect();
        let direct = (0..size)
            .map(|r| match (path, segs[r]) {
                (RmaPath::Native, Some(s)) => s.shortened(seg_lens[r] as usize),
                _ => SegmentRef::empty(),
            })
            .collect();
        let shm_barrier = match path {
            RmaPath::Native => ShmBarrier::new(&segs, rank),
            RmaPath::Am => None,
        };
        let world_hier = crate::world_barrier_state::WorldHier::new(&segs, rank, path);
        world_hier.hand_host_to(&st.world_bar, rank);
        let mut heap = Heap::new(seg_lens[rank]);
        let scratch = heap.alloc_sym(SCRATCH).map_err(|e| e.at_rank(rank))?;
        // the user range starts past it (`USER_BASE`, checked by every access)
        debug_assert_eq!(scratch + SCRATCH, USER_BASE);
        // user Long payloads must not land on splitrt's counters or scratch
        ep.reserve_segment_range(0, RESERVED_BYTES)?;
        ep.reserve_segment_range(scratch, SCRATCH)?;
        Ok(Pgas {
            inner: Arc::new(Inner {
                ep,
                st,
                h,
                path,
                rank,
                size,
                direct,
                frozen_ranges: AtomicUsize::new(0),
                shm_barrier,
                seg_lens,
                heap: Mutex::new(heap),
                scratch,
                issued: Issued::default(),
                direct_puts: AtomicBool::new(false),
                sent_bytes: (0..size).map(|_| AtomicU64::new(0)).collect(),
                consumed: AtomicU64::new(0),
                all_synced: AtomicU64::new(0),
                notified: AtomicU64::new(0),
                notified_kind: AtomicU64::new(0),
                waited: AtomicU64::new(0),
                wait_failed: Default::default(),
                one_collective: Default::default(),
                store_epoch: AtomicU64::new(0),
                world_teams: crate::team_core::world_teams(rank, size, &team_mail.world),
                team_mail,
                team_h,
                team_areas: Default::default(),
                world_hier,
            }),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// How one-sided accesses travel in this job.
    pub fn rma_path(&self) -> RmaPath {
        self.inner.path
    }

    /// The Active Messages endpoint underneath (for user handlers).
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.ep
    }

    /// Whether `p` lives in this rank's segment.
    pub fn is_local<T: Pod>(&self, p: GlobalPtr<T>) -> bool {
        p.rank() == self.inner.rank
    }

    /// Allocate `n` elements in this rank's own segment (not collective).
    /// The block is an owning handle: its [`view`](LocalBlock::view)
    /// borrows it, and [`free_local`](Self::free_local) consumes it, so no
    /// view outlives the block (whose bytes a later allocation, perhaps a
    /// symmetric array that gets frozen, may reuse).
    pub fn alloc_local<T: Pod>(&self, n: usize) -> Result<LocalBlock<T>> {
        let bytes = (n as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::usage("allocation size overflows").at_rank(self.rank()))?;
        let off = self
            .inner
            .heap
            .lock()
            .alloc_local(bytes)
            .map_err(|e| e.at_rank(self.rank()))?;
        let at = self.inner.st.seg().base().wrapping_add(off as usize);
        // the heap hands out 64 B-aligned blocks inside the mapped segment,
        // whose base is not null
        let base = NonNull::new(at.cast::<T>()).expect("segment base is not null");
        Ok(LocalBlock {
            _mapping: self.inner.ep.clone(),
            ptr: GlobalPtr::new(self.rank(), off),
            len: n,
            base,
        })
    }

    /// Free a block from [`alloc_local`](Self::alloc_local). It consumes
    /// the block, so no view of it survives:
    ///
    /// ```compile_fail,E0505
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let b = pg.alloc_local::<u64>(4)?;
    /// let v = b.view();
    /// pg.free_local(b)?;                   // moves `b` while `v` borrows it
    /// let a = pg.freeze(pg.alloc_sym::<u64>(4)?)?; // may reuse the bytes
    /// v.set(0, 7);                         // would write under a &[u64]
    /// # Ok(()) }
    /// ```
    pub fn free_local<T: Pod>(&self, b: LocalBlock<T>) -> Result<()> {
        let me = self.rank();
        let base = self.inner.st.seg().base();
        if b.ptr.rank() != me
            || b.base.as_ptr().cast::<u8>() != base.wrapping_add(b.ptr.offset() as usize)
        {
            return Err(Error::usage(format!(
                "{:?} was not allocated by this rank's Pgas (rank {me})",
                b.ptr
            ))
            .at_rank(me));
        }
        self.inner
            .heap
            .lock()
            .free_local(b.ptr.offset())
            .map_err(|e| e.at_rank(me))
    }

    /// Wait until every get and put this rank issued has completed (puts
    /// are visible at their targets). Reports failures peers sent back.
    #[inline(always)]
    pub fn sync(&self) -> Result<()> {
        let i = &self.inner;
        let st = &i.st;
        // Fast path, inlined: nothing outstanding, no direct network puts
        // to quiet, no failure reported: the fence and nothing else.
        let (g, p) = (
            i.issued.gets.load(Ordering::Relaxed),
            i.issued.puts.load(Ordering::Relaxed),
        );
        if !i.direct_puts.load(Ordering::Relaxed)
            && st.gets_done.load(Ordering::Acquire) >= g
            && st.puts_done.load(Ordering::Acquire) >= p
        {
            crate::full_fence::full_fence();
            if !st.has_errors.load(Ordering::Acquire) {
                return Ok(());
            }
        }
        self.sync_slow(g, p)
    }

    /// [`sync`](Self::sync) when something is outstanding or to report:
    /// wait for `g` gets and `p` puts (the counts issued when it was
    /// called).
    #[cold]
    #[inline(never)]
    fn sync_slow(&self, g: u64, p: u64) -> Result<()> {
        let i = &self.inner;
        let st = &i.st;
        if i.direct_puts.load(Ordering::Relaxed) {
            i.ep.rma().quiet().map_err(|e| e.at_rank(i.rank))?;
        }
        let done = || {
            st.gets_done.load(Ordering::Acquire) >= g && st.puts_done.load(Ordering::Acquire) >= p
        };
        if done() {
            // nothing outstanding: no waiting machinery
            crate::full_fence::full_fence();
            return i.take_errors();
        }
        let what = || {
            format!(
                "in Pgas::sync for {} get(s) and {} put(s) still unacknowledged",
                g.saturating_sub(st.gets_done.load(Ordering::Acquire)),
                p.saturating_sub(st.puts_done.load(Ordering::Acquire))
            )
        };
        i.wait_through(&what, done)?;
        crate::full_fence::full_fence();
        i.take_errors()
    }

    /// Wait until `bytes` more bytes have been stored into this rank (by
    /// any ranks), then account for them.
    pub fn store_sync(&self, bytes: u64) -> Result<()> {
        let i = &self.inner;
        let stored = i.st.stored();
        let base = i.consumed.load(Ordering::Relaxed);
        let what = || {
            format!(
                "in Pgas::store_sync({bytes}): {} B stored into this rank so far",
                stored.load(Ordering::Acquire).wrapping_sub(base)
            )
        };
        i.ep.wait_until_described(&what, || {
            stored.load(Ordering::Acquire).wrapping_sub(base) >= bytes
        })?;
        i.consumed.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Collective: wait until every store issued by any rank before this
    /// call has landed, everywhere. Bytes it covers no longer count for a
    /// later `store_sync`.
    pub fn all_store_sync(&self) -> Result<()> {
        let _one = self.enter_collective("Pgas::all_store_sync")?;
        let i = &self.inner;
        let e = i.store_epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let p = (e % 2) as usize;
        for r in 0..i.size {
            let bytes = i.sent_bytes[r].swap(0, Ordering::Relaxed);
            i.ep.request(r, i.h.store_count, &[e, bytes], Payload::None)?;
        }
        let st = &i.st;
        let n = i.size as u64;
        let what = || {
            format!(
                "in Pgas::all_store_sync #{e}: {} of {n} ranks have sent their byte counts",
                st.store_reports[p].load(Ordering::Acquire)
            )
        };
        i.ep.wait_until_described(&what, || st.store_reports[p].load(Ordering::Acquire) == n)?;
        let expected = st.store_expected[p].swap(0, Ordering::AcqRel);
        st.store_reports[p].store(0, Ordering::Release);
        // Every byte announced so far must have landed, whether or not a
        // store_sync already waited for some of it.
        let target = i.all_synced.load(Ordering::Relaxed) + expected;
        let stored = st.stored();
        let what = || {
            format!(
                "in Pgas::all_store_sync #{e}: {} of {target} announced bytes have landed",
                stored.load(Ordering::Acquire)
            )
        };
        i.ep.wait_until_described(&what, || stored.load(Ordering::Acquire) >= target)?;
        i.all_synced.store(target, Ordering::Relaxed);
        i.consumed.fetch_max(target, Ordering::Relaxed);
        self.barrier_of(Coll::AllStoreSync)
    }

    /// Leave the job: complete outstanding operations (team requests
    /// still pending, dropped ones included), exit barrier.
    pub fn finish(self) -> Result<()> {
        // dropped team requests finish their part first (`team_nb.rs`)
        self.inner.team_mail.finish_background(self.endpoint())?;
        self.sync()?;
        self.barrier_of(Coll::Finish)?;
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner.ep.finish(),
            // other clones still alive: the last drop finishes the endpoint
            Err(_) => Ok(()),
        }
    }
}

impl Inner {
    pub(crate) fn err(&self, e: Error, peer: usize) -> Error {
        e.at_rank(self.rank).with_peer(peer)
    }

    /// Bounds, alignment and reserved-area check of `n` elements at `p`.
    pub(crate) fn check<T: Pod>(&self, p: GlobalPtr<T>, n: usize) -> Result<()> {
        let bytes = (n as u64).checked_mul(std::mem::size_of::<T>() as u64);
        self.check_bytes(
            p.rank(),
            p.offset(),
            bytes.unwrap_or(u64::MAX),
            std::mem::align_of::<T>() as u64,
        )
    }

    /// [`check`](Self::check) for a write (put, store, atomic): also
    /// refused into a frozen array.
    pub(crate) fn check_write<T: Pod>(&self, p: GlobalPtr<T>, n: usize, what: &str) -> Result<()> {
        self.check(p, n)?;
        if self.frozen_ranges.load(Ordering::Relaxed) != 0 {
            let bytes = n as u64 * std::mem::size_of::<T>() as u64; // checked above
            if let Some(r) = self.ep.frozen_segment_range(p.offset(), bytes) {
                return Err(self.frozen_error(what, p.rank(), p.offset(), bytes, r));
            }
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn frozen_error(
        &self,
        what: &str,
        rank: usize,
        off: u64,
        bytes: u64,
        r: std::ops::Range<u64>,
    ) -> Error {
        self.err(
            Error::usage(format!(
                "{what} of {bytes} B at {rank}:{off:#x} refused: bytes {:#x}..{:#x} are a frozen \
                 array on every rank (read-only until Pgas::thaw)",
                r.start, r.end
            )),
            rank,
        )
    }

    /// Check a global access: the rank exists, the range is outside the
    /// reserved first bytes and inside the target's segment, and `off` is
    /// aligned to `align` (a power of two). The fast path is a few
    /// compares; the message is built only on failure.
    #[inline]
    pub(crate) fn check_bytes(&self, rank: usize, off: u64, bytes: u64, align: u64) -> Result<()> {
        if rank < self.size && self.range_ok(rank, off, bytes, align) {
            Ok(())
        } else {
            Err(self.check_failed(rank, off, bytes, align))
        }
    }

    /// The range part of [`check_bytes`](Self::check_bytes), for a rank
    /// that exists (see [`range_fits`]).
    #[inline(always)]
    fn range_ok(&self, rank: usize, off: u64, bytes: u64, align: u64) -> bool {
        range_fits(off, bytes, align, self.seg_lens[rank])
    }

    #[cold]
    #[inline(never)]
    fn check_failed(&self, rank: usize, off: u64, bytes: u64, align: u64) -> Error {
        if rank >= self.size {
            return self.err(
                Error::usage(format!(
                    "rank {rank} does not exist in a job of {} ranks",
                    self.size
                )),
                rank,
            );
        }
        if off < USER_BASE {
            return self.err(
                Error::usage(format!(
                    "global pointer {rank}:{off:#x} points into splitrt's reserved first \
                     {USER_BASE:#x} B (its counters, barrier words and collective scratch)"
                )),
                rank,
            );
        }
        let len = self.seg_lens[rank];
        if off.checked_add(bytes).is_none_or(|e| e > len) {
            return self.err(
                Error::new(ErrorKind::OutOfBounds {
                    offset: off,
                    len: bytes,
                    segment_len: len,
                }),
                rank,
            );
        }
        self.err(
            Error::usage(format!(
                "global pointer {rank}:{off:#x} is not aligned to {align} B"
            )),
            rank,
        )
    }

    /// Wait for `cond`, riding out non-fatal errors (a malformed unrelated
    /// message) so this rank's own replies still land; a failed peer ends
    /// the wait. Returns the first non-fatal error once `cond` holds.
    pub(crate) fn wait_through(
        &self,
        what: &dyn Fn() -> String,
        mut cond: impl FnMut() -> bool,
    ) -> Result<()> {
        let mut first = None;
        loop {
            match self.ep.wait_until_described(what, &mut cond) {
                Ok(()) => return first.map_or(Ok(()), Err),
                // a failed peer, or a hang report that ended the job
                Err(e) if matches!(e.kind(), ErrorKind::PeerFailed(_) | ErrorKind::Timeout(_)) => {
                    return Err(e)
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
    }

    #[inline]
    pub(crate) fn take_errors(&self) -> Result<()> {
        if !self.st.has_errors.load(Ordering::Acquire) {
            return Ok(());
        }
        self.take_errors_slow()
    }

    #[cold]
    #[inline(never)]
    fn take_errors_slow(&self) -> Result<()> {
        // A failure recorded after this store sets the flag again.
        self.st.has_errors.store(false, Ordering::Release);
        let mut e = self.st.errors.lock();
        if e.is_empty() {
            return Ok(());
        }
        let why = e.join("; ");
        e.clear();
        Err(Error::protocol(why).at_rank(self.rank))
    }

    /// `rank`'s segment if an access of `bytes` at `off` aligned to `align`
    /// is a native one that passes every check of
    /// [`check_bytes`](Self::check_bytes); `None` otherwise (a bad access
    /// or a message path: the caller's slow path checks again and says
    /// which). The fast path of put / get (blocking, `get_into`, in a
    /// scope), inlined into the caller: a handful of compares and no call.
    #[inline(always)]
    pub(crate) fn native_checked(
        &self,
        rank: usize,
        off: u64,
        bytes: u64,
        align: u64,
    ) -> Option<SegmentRef> {
        let seg = *self.direct.get(rank)?;
        range_fits(off, bytes, align, seg.len() as u64).then_some(seg)
    }

    /// [`native_checked`](Self::native_checked) for a write: also `None`
    /// while any array is frozen (the checked path then refuses a write
    /// into one). One load and compare more than a read, 0 in the common
    /// case.
    #[inline(always)]
    pub(crate) fn native_checked_write(
        &self,
        rank: usize,
        off: u64,
        bytes: u64,
        align: u64,
    ) -> Option<SegmentRef> {
        if self.frozen_ranges.load(Ordering::Relaxed) != 0 {
            return None;
        }
        self.native_checked(rank, off, bytes, align)
    }

    /// `rank`'s segment if one-sided accesses to it are plain loads and
    /// stores (native path, and mapped here: a rank of this host);
    /// `None` means the AM path.
    #[inline]
    pub(crate) fn native(&self, rank: usize) -> Option<SegmentRef> {
        let seg = self.direct[rank];
        (!seg.base().is_null()).then_some(seg)
    }
}

/// Whether `bytes` at segment offset `off` lie past splitrt's reserved
/// bytes and scratch ([`USER_BASE`]) and inside a segment of `len` bytes, with `off` aligned to
/// `align` (a power of two): the one range predicate of the checked and
/// the inlined paths.
#[inline(always)]
fn range_fits(off: u64, bytes: u64, align: u64, len: u64) -> bool {
    debug_assert!(align.is_power_of_two());
    off >= USER_BASE && off.checked_add(bytes).is_some_and(|e| e <= len) && off & (align - 1) == 0
}

/// A block of this rank's local heap ([`Pgas::alloc_local`]): `len`
/// elements of `T` in this rank's own segment, which any rank may put
/// into, store into or update atomically through [`ptr`](Self::ptr).
///
/// This rank reads and writes it through a [`LocalView`] that borrows the
/// block ([`view`](Self::view)); [`Pgas::free_local`] consumes the block,
/// so no view outlives it. Dropping the block without freeing it leaks
/// the bytes (they stay allocated). The handle keeps the segment mapped.
pub struct LocalBlock<T: Pod> {
    /// Keeps the segment mapped while the block (and any view) lives.
    _mapping: Endpoint,
    ptr: GlobalPtr<T>,
    len: usize,
    base: NonNull<T>,
}

// SAFETY: the handle is a global pointer, a length and a pointer into this
// rank's segment, which `_mapping` keeps mapped; every access through it
// is by a `LocalView` (atomic), so moving or sharing it across threads
// creates no data race.
unsafe impl<T: Pod + Send> Send for LocalBlock<T> {}
// SAFETY: as above; `&LocalBlock` hands out only views.
unsafe impl<T: Pod + Send> Sync for LocalBlock<T> {}

impl<T: Pod> LocalBlock<T> {
    /// The block's first element, for puts, gets, stores and atomics from
    /// any rank.
    pub fn ptr(&self) -> GlobalPtr<T> {
        self.ptr
    }

    /// Element `i` of the block (not checked here: accesses check bounds).
    pub fn at(&self, i: usize) -> GlobalPtr<T> {
        self.ptr.add(i)
    }

    /// Elements in the block.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block as a view (element `get` / `set`, copies, iteration, the
    /// `unsafe` slices for kernels); it borrows the block, so it ends
    /// before [`Pgas::free_local`]. Other ranks and threads may write the
    /// block while the view lives; the view reads what they wrote.
    pub fn view(&self) -> LocalView<'_, T> {
        // SAFETY: the block holds `len` elements of T at `base` in this
        // rank's segment (allocated 64 B-aligned by the local heap), which
        // `_mapping` keeps mapped while `self` (borrowed by the view)
        // lives; the bytes stay allocated to this block until
        // `free_local` consumes it, which the borrow forbids while the
        // view lives; no symmetric array (so no frozen one) overlaps a
        // block in use; splitrt makes no reference to these bytes.
        unsafe { LocalView::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl<T: Pod> std::fmt::Debug for LocalBlock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBlock")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
