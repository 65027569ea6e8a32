//! Strided and indexed one-sided transfers (GASNet-EX VIS, UPC++
//! `rput_strided` / `rget_strided`, OpenSHMEM `iput` / `ibput`): many runs
//! of elements in one call, blocking or in a [`Scope`].
//!
//! Every byte range is checked at the caller before anything is sent or
//! written: the local side against the caller's slice, the remote side
//! against the target's segment (an out-of-range run is an error naming
//! the target rank, and nothing is written), the destination side for
//! overlap. On the native path (a mapped segment) the runs are copied
//! directly. On the AM path (udp, ibverbs, `SPLITRT_RMA=am`) a transfer
//! travels as one Medium request per `Endpoint::max_medium` bytes (header
//! and data): a compact shape header (a few words, whatever the number of
//! runs) for a strided transfer, a list of runs for an indexed one; a
//! handler on the target unpacks it (a put) or packs the runs into the
//! reply (a get). See `strided_shape.rs` for the wire format.

use crate::context::{Inner, Pgas};
use crate::ptr::GlobalPtr;
use crate::rma::Scope;
use crate::state::Dest;
use crate::strided_shape::{
    chunk_bytes, encode, for_each_pair, merge, plan, with_run_len, Chunk, Layout, RunList, MAX_DIMS,
};
use bytemuck::Pod;
use splitrt_am::{Error, Payload, Result};
use splitrt_runtime::memmove::memmove;
use std::sync::atomic::Ordering;

/// The shape of a strided transfer: `run` contiguous elements per run,
/// and `counts[d]` runs along dimension `d` (dimension 0 varies fastest),
/// at most [`MAX_DIMS`] dimensions. Each side of a transfer places the
/// runs with its own strides (in elements, one per dimension): run
/// `(i0, i1, ..)` starts at element `i0 * strides[0] + i1 * strides[1] +
/// ..` from that side's base. A dimension of count 0 makes the transfer
/// a no-op; no dimensions at all is one run.
///
/// As UPC++'s `rput_strided(src, src_strides, dst, dst_strides, elemsz,
/// extents)` with `elemsz = run * size_of::<T>()` and strides in elements.
///
/// ```
/// use splitrt_pgas::Shape;
/// // 1000 runs of 8 u64 (64 B): every other 64 B of a 128 kB block
/// let s = Shape::new(8, &[1000]).unwrap();
/// assert_eq!((s.runs(), s.elements()), (1000, 8000));
/// assert!(Shape::new(1, &[1; 9]).is_err()); // too many dimensions
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    run: usize,
    nd: usize,
    counts: [usize; MAX_DIMS],
}

impl Shape {
    /// A shape of `run` elements per run and `counts` runs per dimension
    /// (dimension 0 fastest); an error past [`MAX_DIMS`] dimensions.
    pub fn new(run: usize, counts: &[usize]) -> Result<Shape> {
        if counts.len() > MAX_DIMS {
            return Err(Error::usage(format!(
                "a strided shape of {} dimensions: at most {MAX_DIMS}",
                counts.len()
            )));
        }
        let mut c = [1; MAX_DIMS];
        c[..counts.len()].copy_from_slice(counts);
        Ok(Shape {
            run,
            nd: counts.len(),
            counts: c,
        })
    }

    /// Elements per run.
    pub fn run(&self) -> usize {
        self.run
    }

    /// Runs per dimension.
    pub fn counts(&self) -> &[usize] {
        &self.counts[..self.nd]
    }

    /// Dimensions.
    pub fn dims(&self) -> usize {
        self.nd
    }

    /// Runs in the shape (saturating).
    pub fn runs(&self) -> usize {
        self.counts()
            .iter()
            .try_fold(1usize, |a, &c| a.checked_mul(c))
            .unwrap_or(usize::MAX)
    }

    /// Elements in the shape (saturating).
    pub fn elements(&self) -> usize {
        self.runs().saturating_mul(self.run)
    }

    /// The face `axis = index` of a 3-D array of `dims` elements (C
    /// order: `dims[2]` varies fastest; element `(i, j, k)` at
    /// `(i * dims[1] + j) * dims[2] + k`): its first element's index, its
    /// shape and its strides. `None` if `axis > 2` or `index` is out of
    /// the array.
    pub fn face_3d(
        dims: [usize; 3],
        axis: usize,
        index: usize,
    ) -> Option<(usize, Shape, [usize; 2])> {
        if axis > 2 || index >= dims[axis] {
            return None;
        }
        let plane = dims[1].checked_mul(dims[2])?;
        let (first, run, count, stride) = match axis {
            // a plane: one contiguous run
            0 => (index.checked_mul(plane)?, plane, 1, 0),
            // rows i of dims[2] elements, one per i
            1 => (index * dims[2], dims[2], dims[0], plane),
            // single elements: dims[1] of them per i, stride dims[2]
            _ => (index, 1, dims[1], dims[2]),
        };
        let (counts, strides) = match axis {
            0 => ([1, 1], [0, 0]),
            1 => ([count, 1], [stride, 0]),
            _ => ([count, dims[0]], [stride, plane]),
        };
        let _ = count;
        let s = Shape::new(run, &counts).ok()?;
        Some((first, s, strides))
    }
}

/// One side of a transfer, owned, in bytes.
enum Side {
    Strided { layout: Layout, base: u64 },
    Indexed(Vec<(u64, u64)>),
}

impl Side {
    fn list(&self) -> RunList<'_> {
        match self {
            Side::Strided { layout, base } => RunList::Strided {
                layout: *layout,
                base: *base,
            },
            Side::Indexed(v) => RunList::Indexed(v),
        }
    }
}

/// A checked transfer: its target, its two sides and its bytes (0: a no-op).
/// Two strided sides have one shape (the same `run`, `nd` and `counts`:
/// `check_strided` builds both from one [`Shape`]), so run `i` of one side
/// is run `i` of the other: `put_xfer` packs a message's local runs by its
/// remote runs' indices.
struct Xfer {
    rank: usize,
    local: Side,
    remote: Side,
    bytes: u64,
}

fn layout_of<T: Pod>(shape: &Shape, strides: &[usize]) -> Option<Layout> {
    let sz = std::mem::size_of::<T>() as u64;
    let run = (shape.run as u64).checked_mul(sz)?;
    let nd = shape.nd;
    if strides.len() != nd {
        return None;
    }
    let (mut c, mut s) = ([0u64; MAX_DIMS], [0u64; MAX_DIMS]);
    for (d, (c, s)) in c.iter_mut().zip(s.iter_mut()).take(nd).enumerate() {
        *c = shape.counts[d] as u64;
        *s = (strides[d] as u64).checked_mul(sz)?;
    }
    Layout::new(run, &c[..nd], &s[..nd])
}

/// Copy every run of a native transfer: `copy(local, remote, len)`; two
/// strided sides (one shape) take the tight pair loop, others the merge.
fn each_piece(local: &Side, remote: &Side, mut copy: impl FnMut(u64, u64, u64)) {
    match (local, remote) {
        (Side::Strided { layout: l, .. }, Side::Strided { layout: r, base }) => {
            let run = l.run;
            for_each_pair(l, r, |a, b| copy(a, base.wrapping_add(b), run));
        }
        _ => {
            for (l, r, n) in merge(local.list().iter(), remote.list().iter()) {
                copy(l, r, n);
            }
        }
    }
}

impl Inner {
    fn vis_usage(&self, rank: usize, what: &str, why: String) -> Error {
        self.err(Error::usage(format!("{what}: {why}")), rank)
    }

    /// Check a strided transfer between `local` (a slice of `local_len`
    /// elements) and `remote`; `put`: the remote side is written.
    #[allow(clippy::too_many_arguments)]
    fn check_strided<T: Pod>(
        &self,
        what: &str,
        remote: GlobalPtr<T>,
        remote_strides: &[usize],
        local_len: usize,
        local_strides: &[usize],
        shape: &Shape,
        put: bool,
    ) -> Result<Xfer> {
        let rank = remote.rank();
        let align = std::mem::align_of::<T>() as u64;
        // the rank exists (and the base is sane) before anything else
        self.check_bytes(rank, remote.offset(), 0, align)?;
        for (side, s) in [("remote", remote_strides), ("local", local_strides)] {
            if s.len() != shape.dims() {
                return Err(self.vis_usage(
                    rank,
                    what,
                    format!(
                        "inconsistent strides: the shape has {} dimension(s), the {side} \
                         strides {}",
                        shape.dims(),
                        s.len()
                    ),
                ));
            }
        }
        let too_large = || self.vis_usage(rank, what, "the shape's size overflows".into());
        let (Some(rl), Some(ll)) = (
            layout_of::<T>(shape, remote_strides),
            layout_of::<T>(shape, local_strides),
        ) else {
            return Err(too_large());
        };
        let bytes = rl.bytes().ok_or_else(too_large)?;
        let empty = Xfer {
            rank,
            local: Side::Indexed(Vec::new()),
            remote: Side::Indexed(Vec::new()),
            bytes: 0,
        };
        if bytes == 0 {
            return Ok(empty);
        }
        let (rspan, lspan) = (
            rl.span().ok_or_else(too_large)?,
            ll.span().ok_or_else(too_large)?,
        );
        let have = (local_len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        if lspan > have {
            return Err(self.vis_usage(
                rank,
                what,
                format!(
                    "the local side reaches byte {lspan} of a slice of {have} B (shape and \
                     strides do not fit the slice)"
                ),
            ));
        }
        self.check_bytes(rank, remote.offset(), rspan, align)?;
        let (dst, side) = if put { (&rl, "remote") } else { (&ll, "local") };
        if !dst.disjoint() {
            return Err(self.vis_usage(
                rank,
                what,
                format!(
                    "the {side} (destination) strides make runs overlap (each stride, sorted, \
                     must be at least the extent of the dimensions below it)"
                ),
            ));
        }
        let x = Xfer {
            rank,
            local: Side::Strided {
                layout: ll,
                base: 0,
            },
            remote: Side::Strided {
                layout: rl,
                base: remote.offset(),
            },
            bytes,
        };
        if put {
            self.check_frozen(what, &x)?;
        }
        Ok(x)
    }

    /// Check an indexed transfer: runs are (element offset, elements).
    fn check_indexed<T: Pod>(
        &self,
        what: &str,
        remote: GlobalPtr<T>,
        remote_runs: &[(usize, usize)],
        local_len: usize,
        local_runs: &[(usize, usize)],
        put: bool,
    ) -> Result<Xfer> {
        let rank = remote.rank();
        let sz = std::mem::size_of::<T>() as u64;
        let align = std::mem::align_of::<T>() as u64;
        self.check_bytes(rank, remote.offset(), 0, align)?;
        let too_large = || self.vis_usage(rank, what, "a run's size overflows".into());
        let to_bytes = |runs: &[(usize, usize)], base: u64| -> Result<Vec<(u64, u64)>> {
            let mut v = Vec::with_capacity(runs.len());
            for &(o, n) in runs {
                if n == 0 {
                    continue;
                }
                let o = (o as u64)
                    .checked_mul(sz)
                    .and_then(|o| o.checked_add(base))
                    .ok_or_else(too_large)?;
                let n = (n as u64).checked_mul(sz).ok_or_else(too_large)?;
                v.push((o, n));
            }
            Ok(v)
        };
        let (rv, lv) = (
            to_bytes(remote_runs, remote.offset())?,
            to_bytes(local_runs, 0)?,
        );
        let (rl, ll) = (RunList::Indexed(&rv), RunList::Indexed(&lv));
        let (rb, lb) = (
            rl.bytes().ok_or_else(too_large)?,
            ll.bytes().ok_or_else(too_large)?,
        );
        if rb != lb {
            return Err(self.vis_usage(
                rank,
                what,
                format!(
                    "the remote runs hold {} element(s), the local runs {}",
                    rb / sz.max(1),
                    lb / sz.max(1)
                ),
            ));
        }
        let have = (local_len as u64).saturating_mul(sz);
        if let Some(&(o, n)) = lv.iter().find(|&&(o, n)| o.saturating_add(n) > have) {
            return Err(self.vis_usage(
                rank,
                what,
                format!(
                    "the local run of {} element(s) at element {} ends past the slice of {} \
                     element(s)",
                    n / sz.max(1),
                    o / sz.max(1),
                    local_len
                ),
            ));
        }
        for &(o, n) in &rv {
            self.check_bytes(rank, o, n, align)?;
        }
        let (dst, side) = if put { (&rl, "remote") } else { (&ll, "local") };
        if !dst.disjoint() {
            return Err(self.vis_usage(
                rank,
                what,
                format!("two {side} (destination) runs overlap"),
            ));
        }
        let x = Xfer {
            rank,
            local: Side::Indexed(lv),
            remote: Side::Indexed(rv),
            bytes: rb,
        };
        if put {
            self.check_frozen(what, &x)?;
        }
        Ok(x)
    }

    /// Refuse a put any of whose remote runs touches a frozen array.
    fn check_frozen(&self, what: &str, x: &Xfer) -> Result<()> {
        if self.frozen_ranges.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        for (o, n) in x.remote.list().iter() {
            if let Some(r) = self.ep.frozen_segment_range(o, n) {
                return Err(self.vis_usage(
                    x.rank,
                    what,
                    format!(
                        "the run of {n} B at {}:{o:#x} touches bytes {:#x}..{:#x}, a frozen \
                         array (read-only until Pgas::thaw)",
                        x.rank, r.start, r.end
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Issue a checked put of `src` (the local side's slice, in bytes):
    /// copied now on the native path, else sent; complete at `sync`.
    fn put_xfer(&self, x: &Xfer, src: &[u8]) -> Result<()> {
        if x.bytes == 0 {
            return Ok(());
        }
        let (local, remote) = (x.local.list(), x.remote.list());
        if let Some(seg) = self.native(x.rank) {
            each_piece(&x.local, &x.remote, |l, r, n| {
                let from = &src[l as usize..(l + n) as usize];
                // SAFETY: [r, r + n) lies in the peer's segment (every
                // remote run was checked against it); `from` is the
                // caller's slice (perhaps in our own segment: memmove).
                unsafe {
                    memmove(
                        from.as_ptr(),
                        seg.base().wrapping_add(r as usize),
                        n as usize,
                    )
                };
            });
            // SAFETY: `seg` is from this Inner's direct table; the
            // endpoint in `self` owns the fabric that handed it out.
            unsafe { seg.wake_owner() };
            return Ok(());
        }
        // the whole packed stream: for RDMA, and for messages whose data
        // is not a strided slice of the local side (made only if needed)
        let pack_all = || {
            let mut stream = Vec::with_capacity(x.bytes as usize);
            for (o, n) in local.iter() {
                stream.extend_from_slice(&src[o as usize..(o + n) as usize]);
            }
            stream
        };
        if let Some(r) = self.put_runs_direct(x.rank, &remote, pack_all) {
            // RDMA writes, one per run (`strided_rdma.rs`)
            return r;
        }
        let budget = self.ep.max_medium(x.rank)?;
        let run = match &x.remote {
            Side::Strided { layout, .. } => layout.run,
            Side::Indexed(_) => 0,
        };
        if let (Side::Strided { layout: l, .. }, Side::Strided { layout: r, .. }) =
            (&x.local, &x.remote)
        {
            debug_assert_eq!(
                (l.run, l.nd, l.counts),
                (r.run, r.nd, r.counts),
                "the two sides of a strided transfer have one shape (`Xfer`)"
            );
        }
        let mut stream: Option<Vec<u8>> = None;
        let mut msg = Vec::with_capacity(budget);
        let mut at = 0usize;
        for c in plan(&remote, budget, true) {
            msg.clear();
            encode(&mut msg, &remote, &c);
            let n = chunk_bytes(&c, run) as usize;
            match (&x.local, &c) {
                // runs first.. of one shape on both sides (`Xfer`): the
                // local runs of the message's remote runs, packed
                // straight into it
                (Side::Strided { layout, .. }, Chunk::Strided { first, n: runs }) => {
                    pack_runs(&mut msg, src, layout, *first, *runs)
                }
                _ => {
                    let s = stream.get_or_insert_with(pack_all);
                    msg.extend_from_slice(&s[at..at + n]);
                }
            }
            at += n;
            self.issued.add_puts(1);
            let books = self.st.peer_puts.get();
            books.inspect(|b| b.issue(x.rank));
            let r = self
                .ep
                .request(x.rank, self.h.vis.put, &[], Payload::Medium(&msg));
            if let Err(e) = r {
                // never sent: no reply to wait for
                books.inspect(|b| b.complete(x.rank));
                self.st.puts_done.fetch_add(1, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Start a checked get into the local side of `dst` (bytes). Native:
    /// copied now, `None`. AM: the data lands packed in `staged` (of
    /// `x.bytes`); the returned slot completes when it has; then
    /// [`scatter`] it.
    fn get_xfer(&self, x: &Xfer, dst: &mut [u8], staged: &mut Vec<u8>) -> Result<Option<usize>> {
        if x.bytes == 0 {
            return Ok(None);
        }
        let remote = x.remote.list();
        if let Some(seg) = self.native(x.rank) {
            each_piece(&x.local, &x.remote, |l, r, n| {
                let to = &mut dst[l as usize..(l + n) as usize];
                // SAFETY: [r, r + n) lies in the peer's segment (checked);
                // `to` is the caller's buffer (perhaps in our own
                // segment: memmove).
                unsafe {
                    memmove(
                        seg.base().wrapping_add(r as usize),
                        to.as_mut_ptr(),
                        n as usize,
                    )
                };
            });
            return Ok(None);
        }
        *staged = vec![0u8; x.bytes as usize];
        if let Some(r) = self.get_runs_direct(x.rank, &remote, staged) {
            // RDMA reads, one per run (`strided_rdma.rs`): done now
            r?;
            scatter(&x.local, staged, dst);
            return Ok(None);
        }
        let budget = self.ep.max_medium(x.rank)?;
        let chunks = plan(&remote, budget, false);
        let run = match &x.remote {
            Side::Strided { layout, .. } => layout.run,
            Side::Indexed(_) => 0,
        };
        let slot = self.st.dests.lock().insert(Dest {
            ptr: staged.as_mut_ptr(),
            len: staged.len(),
            remaining: chunks.len(),
            got: 0,
            error: None,
            cancelled: false,
            waker: None,
        });
        self.issued.add_gets(chunks.len() as u64);
        let mut msg = Vec::new();
        let mut at = 0u64;
        for (i, c) in chunks.iter().enumerate() {
            msg.clear();
            encode(&mut msg, &remote, c);
            let r = self.ep.request(
                x.rank,
                self.h.vis.get,
                &[slot as u64, at],
                Payload::Medium(&msg),
            );
            if let Err(e) = r {
                // never sent: account for the rest so waits end
                let left = chunks.len() - i;
                if let Some(d) = self.st.dests.lock().get_mut(slot) {
                    d.remaining -= left;
                }
                self.st.gets_done.fetch_add(left as u64, Ordering::Release);
                self.wait_slots(&[slot]).ok();
                return Err(e);
            }
            at += chunk_bytes(c, run);
        }
        Ok(Some(slot))
    }
}

/// Append runs `first .. first + n` of the local strided side `l` of
/// `src` to `out`, in walk order: a message's data packed straight from
/// the caller's slice (no intermediate stream, no zeroing first; a tight
/// loop, and short runs copied inline, not by a call into libc per run).
/// The caller checked what [`Layout::for_each_run`] needs, and that every
/// run lies in `src` (a run that does not panics on the slice index).
fn pack_runs(out: &mut Vec<u8>, src: &[u8], l: &Layout, first: u64, n: u64) {
    let need = (l.run as usize)
        .checked_mul(n as usize)
        .expect("a message's runs fit in memory");
    out.reserve(need);
    let start = out.len();
    // the one check of the room, before the loop: `for_each_run` calls
    // its closure at most `n` times (its counted loop), each run writes
    // `run` bytes right after the last, so `done <= need <= room` always
    assert!(out.capacity() - start >= need);
    let mut done = 0usize;
    let to = out.as_mut_ptr().wrapping_add(start);
    with_run_len!(l.run, RUN => l.for_each_run(first, n, |o| {
        let run = RUN as usize;
        let from = &src[o as usize..o as usize + run];
        // SAFETY: `from` is readable for `run` bytes (a slice of that
        // length); `to + done .. + run` lies in `out`'s spare capacity:
        // this is at most the `n`-th call (`Layout::for_each_run`'s
        // contract), so `done + run <= need`, checked against the
        // capacity before the loop; nothing else borrows that capacity
        // meanwhile (`out` is borrowed mutably here); the two never
        // overlap.
        unsafe { memmove(from.as_ptr(), to.wrapping_add(done), run) };
        done += run;
    }));
    debug_assert_eq!(done, need, "for_each_run visits the n runs");
    // SAFETY: the loop initialised `start .. start + done`, one run after
    // the other, within the capacity (`done <= need`, above).
    unsafe { out.set_len(start + done) };
}

/// Unpack a get's packed stream into the local side of `dst`.
fn scatter(local: &Side, staged: &[u8], dst: &mut [u8]) {
    let mut at = 0usize;
    for (o, n) in local.list().iter() {
        let (o, n) = (o as usize, n as usize);
        dst[o..o + n].copy_from_slice(&staged[at..at + n]);
        at += n;
    }
}

impl Pgas {
    /// Start a strided put (`*dst := src` run by run; split-phase as
    /// [`put`](Pgas::put): the source is copied now, the put is complete
    /// at [`sync`](Pgas::sync)). Run `(i0, i1, ..)` of `shape` is read at
    /// element `Σ i_d * src_strides[d]` of `src` and written at element
    /// `Σ i_d * dst_strides[d]` from `dst`.
    ///
    /// Everything is checked first (nothing is written on an error): the
    /// strides' lengths against the shape's dimensions, the source side
    /// against `src`, every byte of the destination against the target's
    /// segment (an error naming the rank), and the destination for
    /// overlap (sorted by stride, each stride must be at least the extent
    /// of the dimensions below it). Over messages the whole put travels
    /// as one request per `Endpoint::max_medium` bytes.
    ///
    /// ```no_run
    /// # use splitrt_pgas::{Pgas, Shape};
    /// # fn f(pg: &Pgas) -> splitrt_am::Result<()> {
    /// let a = pg.alloc_sym::<u64>(16 * 1000)?;
    /// let src = vec![7u64; 8 * 1000];
    /// // 1000 runs of 8 u64, every 16 u64 at the neighbour, packed here
    /// let shape = Shape::new(8, &[1000])?;
    /// let right = (pg.rank() + 1) % pg.size();
    /// pg.put_strided(a.ptr(right), &[16], &src, &[8], &shape)?;
    /// pg.sync()?;
    /// # Ok(()) }
    /// ```
    pub fn put_strided<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_strides: &[usize],
        src: &[T],
        src_strides: &[usize],
        shape: &Shape,
    ) -> Result<()> {
        self.inner
            .put_strided(dst, dst_strides, src, src_strides, shape)
    }

    /// Blocking strided get (`dst := *src` run by run; the mirror of
    /// [`put_strided`](Pgas::put_strided), checked the same way, the
    /// local `dst` being the destination). Over messages one request per
    /// `Endpoint::max_medium` bytes of data; the data returns packed and
    /// is unpacked here.
    pub fn get_strided<T: Pod>(
        &self,
        src: GlobalPtr<T>,
        src_strides: &[usize],
        dst: &mut [T],
        dst_strides: &[usize],
        shape: &Shape,
    ) -> Result<()> {
        let i = &self.inner;
        let x = i.check_strided(
            "a strided get",
            src,
            src_strides,
            dst.len(),
            dst_strides,
            shape,
            false,
        )?;
        i.get_now(&x, bytemuck::cast_slice_mut(dst))
    }

    /// Start an indexed put (GASNet-EX VIS "indexed"): the local runs
    /// `src_runs` of `src` (element offset, elements), in order, are
    /// written into the remote runs `dst_runs` (element offset from `dst`,
    /// elements), in order; both lists hold the same number of elements,
    /// runs of either list may differ in length, empty runs are skipped.
    /// Split-phase as [`put`](Pgas::put); checked as
    /// [`put_strided`](Pgas::put_strided) (remote runs must not overlap).
    ///
    /// ```no_run
    /// # use splitrt_pgas::Pgas;
    /// # fn f(pg: &Pgas) -> splitrt_am::Result<()> {
    /// let a = pg.alloc_sym::<f64>(1024)?;
    /// let src = [1.0, 2.0, 3.0, 4.0, 5.0];
    /// // elements 0..2 to 10..12, 2..5 to 100..103 on rank 0
    /// pg.put_indexed(a.ptr(0), &[(10, 2), (100, 3)], &src, &[(0, 5)])?;
    /// pg.sync()?;
    /// # Ok(()) }
    /// ```
    pub fn put_indexed<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_runs: &[(usize, usize)],
        src: &[T],
        src_runs: &[(usize, usize)],
    ) -> Result<()> {
        self.inner.put_indexed(dst, dst_runs, src, src_runs)
    }

    /// Blocking indexed get: the remote runs `src_runs` (element offset
    /// from `src`, elements) into the local runs `dst_runs` of `dst`, in
    /// order (the mirror of [`put_indexed`](Pgas::put_indexed); local runs
    /// must not overlap).
    pub fn get_indexed<T: Pod>(
        &self,
        src: GlobalPtr<T>,
        src_runs: &[(usize, usize)],
        dst: &mut [T],
        dst_runs: &[(usize, usize)],
    ) -> Result<()> {
        let i = &self.inner;
        let x = i.check_indexed("an indexed get", src, src_runs, dst.len(), dst_runs, false)?;
        i.get_now(&x, bytemuck::cast_slice_mut(dst))
    }

    /// Start putting the face `axis = src_index` of the 3-D array `src`
    /// (dimensions `dims`, C order: `dims[2]` varies fastest) into the
    /// face `axis = dst_index` of the array of the same dimensions at
    /// `dst` (a halo exchange). Split-phase as [`put`](Pgas::put). A face
    /// of axis 0 is one run, of axis 1 `dims[0]` runs of `dims[2]`
    /// elements, of axis 2 `dims[0] * dims[1]` single elements: over
    /// messages one request per `Endpoint::max_medium` bytes either way.
    ///
    /// ```no_run
    /// # use splitrt_pgas::Pgas;
    /// # fn f(pg: &Pgas) -> splitrt_am::Result<()> {
    /// let dims = [34, 34, 34]; // 32^3 with one ghost layer each side
    /// let u = pg.alloc_sym::<f64>(dims.iter().product())?;
    /// let mine = vec![0.0f64; dims.iter().product()];
    /// let right = (pg.rank() + 1) % pg.size();
    /// // my last interior plane along axis 2 -> right's low ghost plane
    /// pg.put_face_3d(u.ptr(right), &mine, dims, 2, 32, 0)?;
    /// pg.sync()?;
    /// # Ok(()) }
    /// ```
    pub fn put_face_3d<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        src: &[T],
        dims: [usize; 3],
        axis: usize,
        src_index: usize,
        dst_index: usize,
    ) -> Result<()> {
        let (s, d, shape, strides) =
            self.inner
                .faces(dst.rank(), dims, axis, src_index, dst_index)?;
        let src = src.get(s..).unwrap_or(&[]);
        self.put_strided(dst.add(d), &strides, src, &strides, &shape)
    }

    /// Blocking get of the face `axis = src_index` of the 3-D array at
    /// `src` into the face `axis = dst_index` of `dst` (the mirror of
    /// [`put_face_3d`](Pgas::put_face_3d)).
    pub fn get_face_3d<T: Pod>(
        &self,
        src: GlobalPtr<T>,
        dst: &mut [T],
        dims: [usize; 3],
        axis: usize,
        src_index: usize,
        dst_index: usize,
    ) -> Result<()> {
        let (s, d, shape, strides) =
            self.inner
                .faces(src.rank(), dims, axis, src_index, dst_index)?;
        let n = dst.len();
        let dst = dst.get_mut(d.min(n)..).unwrap_or_default();
        self.get_strided(src.add(s), &strides, dst, &strides, &shape)
    }
}

impl Inner {
    fn put_strided<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_strides: &[usize],
        src: &[T],
        src_strides: &[usize],
        shape: &Shape,
    ) -> Result<()> {
        splitrt_am::while_writing(|| {
            let x = self.check_strided(
                "a strided put",
                dst,
                dst_strides,
                src.len(),
                src_strides,
                shape,
                true,
            )?;
            self.put_xfer(&x, bytemuck::cast_slice(src))
        })
    }

    fn put_indexed<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_runs: &[(usize, usize)],
        src: &[T],
        src_runs: &[(usize, usize)],
    ) -> Result<()> {
        splitrt_am::while_writing(|| {
            let x =
                self.check_indexed("an indexed put", dst, dst_runs, src.len(), src_runs, true)?;
            self.put_xfer(&x, bytemuck::cast_slice(src))
        })
    }

    /// A checked get, waited for and unpacked.
    fn get_now(&self, x: &Xfer, dst: &mut [u8]) -> Result<()> {
        let mut staged = Vec::new();
        if let Some(slot) = self.get_xfer(x, dst, &mut staged)? {
            self.wait_slots(&[slot])?;
            scatter(&x.local, &staged, dst);
        }
        Ok(())
    }

    /// The two faces of a face transfer: (source first element, destination
    /// first element, shape, strides), or a usage error.
    fn faces(
        &self,
        rank: usize,
        dims: [usize; 3],
        axis: usize,
        src_index: usize,
        dst_index: usize,
    ) -> Result<(usize, usize, Shape, [usize; 2])> {
        let bad = || {
            self.vis_usage(
                rank,
                "a 3-D face transfer",
                format!(
                    "no face {axis} = {src_index} -> {dst_index} in an array of {dims:?} \
                     (axis 0, 1 or 2, indices below its dimension)"
                ),
            )
        };
        let (s, shape, strides) = Shape::face_3d(dims, axis, src_index).ok_or_else(bad)?;
        let (d, _, _) = Shape::face_3d(dims, axis, dst_index).ok_or_else(bad)?;
        Ok((s, d, shape, strides))
    }
}

impl<'env> Scope<'env> {
    /// Start a strided put (as [`Pgas::put_strided`]; complete when the
    /// scope ends).
    pub fn put_strided<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_strides: &[usize],
        src: &[T],
        src_strides: &[usize],
        shape: &Shape,
    ) -> Result<()> {
        self.inner()
            .put_strided(dst, dst_strides, src, src_strides, shape)
    }

    /// Start a strided get (as [`Pgas::get_strided`]); `dst` holds the
    /// data once the scope ends.
    pub fn get_strided<T: Pod>(
        &self,
        src: GlobalPtr<T>,
        src_strides: &[usize],
        dst: &'env mut [T],
        dst_strides: &[usize],
        shape: &Shape,
    ) -> Result<()> {
        let x = self.inner().check_strided(
            "a strided get",
            src,
            src_strides,
            dst.len(),
            dst_strides,
            shape,
            false,
        )?;
        self.start_get_xfer(x, bytemuck::cast_slice_mut(dst))
    }

    /// Start an indexed put (as [`Pgas::put_indexed`]; complete when the
    /// scope ends).
    pub fn put_indexed<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        dst_runs: &[(usize, usize)],
        src: &[T],
        src_runs: &[(usize, usize)],
    ) -> Result<()> {
        self.inner().put_indexed(dst, dst_runs, src, src_runs)
    }

    /// Start an indexed get (as [`Pgas::get_indexed`]); `dst` holds the
    /// data once the scope ends.
    pub fn get_indexed<T: Pod>(
        &self,
        src: GlobalPtr<T>,
        src_runs: &[(usize, usize)],
        dst: &'env mut [T],
        dst_runs: &[(usize, usize)],
    ) -> Result<()> {
        let x = self.inner().check_indexed(
            "an indexed get",
            src,
            src_runs,
            dst.len(),
            dst_runs,
            false,
        )?;
        self.start_get_xfer(x, bytemuck::cast_slice_mut(dst))
    }

    /// Start putting a face of a 3-D array (as [`Pgas::put_face_3d`];
    /// complete when the scope ends).
    pub fn put_face_3d<T: Pod>(
        &self,
        dst: GlobalPtr<T>,
        src: &[T],
        dims: [usize; 3],
        axis: usize,
        src_index: usize,
        dst_index: usize,
    ) -> Result<()> {
        let (s, d, shape, strides) =
            self.inner()
                .faces(dst.rank(), dims, axis, src_index, dst_index)?;
        let src = src.get(s..).unwrap_or(&[]);
        self.put_strided(dst.add(d), &strides, src, &strides, &shape)
    }

    fn start_get_xfer(&self, x: Xfer, dst: &'env mut [u8]) -> Result<()> {
        let mut staged = Vec::new();
        if let Some(slot) = self.inner().get_xfer(&x, dst, &mut staged)? {
            // the staged buffer's heap block (where replies land) does not
            // move with the Vec; the scope waits for the slot before it
            // runs (or drops) this
            self.defer(slot, Box::new(move || scatter(&x.local, &staged, dst)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packing straight into a message gives the bytes of the runs in
    /// walk order after what the message held (its header), for every
    /// first run and count, 0- to 3-D (rows cut anywhere), for each
    /// constant run length of `with_run_len!` and others.
    #[test]
    fn strided_pack_runs_matches_the_walker() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + i / 256) as u8).collect();
        let lay = |run: u64, c: &[u64], s: &[u64]| Layout::new(run, c, s).unwrap();
        for l in [
            lay(8, &[3, 2, 2], &[16, 100, 1000]),
            lay(64, &[5], &[128]),
            lay(16, &[3, 2], &[16, 64]),
            lay(32, &[4], &[40]),
            lay(128, &[2, 2], &[128, 512]),
            lay(3, &[4, 3], &[5, 40]),
            lay(200, &[2, 2], &[300, 1000]),
            lay(4, &[], &[]),
        ] {
            let runs = l.runs().unwrap();
            for first in 0..runs {
                for n in 0..=runs - first {
                    let mut want = vec![9u8; 11];
                    for o in l.walk(first, n) {
                        let o = o as usize;
                        want.extend_from_slice(&src[o..o + l.run as usize]);
                    }
                    let mut got = vec![9u8; 11];
                    pack_runs(&mut got, &src, &l, first, n);
                    assert_eq!(got, want, "{l:?} first {first} n {n}");
                }
            }
        }
    }
}
