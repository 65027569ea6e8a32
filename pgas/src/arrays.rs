//! Collective allocations: symmetric arrays (same offset, same length on
//! every rank) and spread arrays distributed block-wise or cyclically.

use crate::coll::Coll;
use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::reduce::Op;
use bytemuck::Pod;
use splitrt_am::{Endpoint, Error, LocalView, Result};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

/// `len` elements at the same offset on every rank.
///
/// This rank's part is read and written through a [`LocalView`]
/// ([`local`](Self::local)): never a `&[T]`, since puts, stores, atomics
/// and Long deposits from any rank may write it while a reference would
/// live. For a plain `&[T]`, [`Pgas::freeze`] the array. The handle keeps
/// the rank's segment mapped (it holds the endpoint), so it stays usable
/// after the `Pgas` handles are gone.
pub struct SymArray<T: Pod> {
    /// Keeps the segment mapped while this handle (and any view of it)
    /// lives: the mapping is dropped with the last endpoint handle.
    _mapping: Endpoint,
    rank: usize,
    off: u64,
    len: usize,
    base: NonNull<T>,
}

// SAFETY: the handle is an offset, a length and a pointer into this rank's
// segment, which `_mapping` keeps mapped; every access through it is by a
// `LocalView` (atomic) or under the `unsafe` contract of `as_slice`, so
// moving or sharing the handle across threads creates no data race.
unsafe impl<T: Pod + Send> Send for SymArray<T> {}
// SAFETY: as above; `&SymArray` hands out only views.
unsafe impl<T: Pod + Send> Sync for SymArray<T> {}

impl<T: Pod> SymArray<T> {
    /// The array's first element on `rank`.
    pub fn ptr(&self, rank: usize) -> GlobalPtr<T> {
        GlobalPtr::new(rank, self.off)
    }

    /// Element `i` on `rank`.
    pub fn at(&self, rank: usize, i: usize) -> GlobalPtr<T> {
        self.ptr(rank).add(i)
    }

    /// Elements per rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This rank's part as a view: element `get` / `set`, `copy_to`,
    /// `copy_from`, `iter`, and the `unsafe` slices for kernels.
    ///
    /// ```compile_fail,E0308
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let a = pg.alloc_sym::<u64>(4)?;
    /// let s: &[u64] = a.local();      // a view, not a slice
    /// # Ok(()) }
    /// ```
    ///
    /// ```compile_fail,E0599
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let mut a = pg.alloc_sym::<u64>(4)?;
    /// let p = a.at(pg.rank(), 0);
    /// let m = a.local_mut();          // no `&mut [T]` from safe code
    /// pg.write(p, 7)?;
    /// let stale = m[0];
    /// # Ok(()) }
    /// ```
    pub fn local(&self) -> LocalView<'_, T> {
        // SAFETY: the block was allocated for `len` elements of T in our
        // own segment (aligned to 64 B), which `_mapping` keeps mapped while
        // `self` (borrowed by the view) lives; splitrt makes no reference
        // to these bytes (see `FrozenArray` for the one that does, over an
        // array no view can reach).
        unsafe { LocalView::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    /// The rank that allocated this handle.
    pub fn rank(&self) -> usize {
        self.rank
    }

    fn bytes(&self) -> u64 {
        (self.len * std::mem::size_of::<T>()) as u64
    }
}

/// A symmetric array frozen read-only on every rank ([`Pgas::freeze`]):
/// every put, store, atomic and Long into it is refused at the sender,
/// on every path, so this rank's part is a plain `&[T]`
/// ([`local`](Self::local)). [`Pgas::thaw`] makes it writable again.
///
/// Dropping it without thawing leaves the range frozen (and allocated).
pub struct FrozenArray<T: Pod> {
    arr: SymArray<T>,
}

impl<T: Pod> FrozenArray<T> {
    /// The array's first element on `rank` (for gets).
    pub fn ptr(&self, rank: usize) -> GlobalPtr<T> {
        self.arr.ptr(rank)
    }

    /// Element `i` on `rank` (for gets).
    pub fn at(&self, rank: usize, i: usize) -> GlobalPtr<T> {
        self.arr.at(rank, i)
    }

    /// Elements per rank.
    pub fn len(&self) -> usize {
        self.arr.len
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.arr.len == 0
    }

    /// This rank's part, a plain slice. It borrows the frozen handle, so
    /// it cannot outlive the thaw:
    ///
    /// ```compile_fail,E0505
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let f = pg.freeze(pg.alloc_sym::<u64>(4)?)?;
    /// let s: &[u64] = f.local();
    /// let a = pg.thaw(f)?;            // moves `f` while `s` borrows it
    /// a.local().set(0, 1);
    /// let stale = s[0];
    /// # Ok(()) }
    /// ```
    pub fn local(&self) -> &[T] {
        // SAFETY: nothing writes these bytes while the array is frozen:
        // every rank froze the same range (agreed in `Pgas::freeze`), and
        // refuses puts, stores, atomics (both paths), one-sided puts and
        // Longs into it at the sender; before the freeze's barrier every
        // rank waited for the writes its threads had begun before the
        // mark and for its Longs in flight; the atomic handler checks
        // under its announcement; a user Long handler is not run on it;
        // `write_segment` refuses it; `thaw` unfreezes only after a
        // barrier every rank passes having given its handle up; no view of it exists (the `SymArray` was consumed,
        // and a `LocalBlock`'s view ends before its block is freed, so none
        // reaches bytes a later symmetric array reuses). The
        // bytes stay mapped while `self` (holding the endpoint) lives.
        unsafe { std::slice::from_raw_parts(self.arr.base.as_ptr(), self.arr.len) }
    }

    /// The rank that allocated this handle.
    pub fn rank(&self) -> usize {
        self.arr.rank
    }
}

/// How a spread array's indices map to ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    /// Contiguous blocks of `ceil(n / ranks)` elements per rank.
    Block,
    /// Element `i` on rank `i % ranks`.
    Cyclic,
}

/// A distributed array of `len` elements over all ranks.
///
/// ```no_run
/// # use splitrt_pgas::{Pgas, Dist};
/// # fn f(pg: &Pgas) -> splitrt_am::Result<()> {
/// let a = pg.spread::<u32>(1000, Dist::Cyclic)?;
/// let mine = a.local();                      // local part, a view
/// for k in 0..mine.len() {
///     mine.set(k, k as u32);
/// }
/// let (rank, idx) = a.owner(999);            // where element 999 lives
/// let x = pg.read(a.ptr(999))?;              // fetch it from there
/// # Ok(()) }
/// ```
pub struct SpreadArray<T: Pod> {
    arr: SymArray<T>,
    len: usize,
    dist: Dist,
    per: usize,
    ranks: usize,
}

impl<T: Pod> SpreadArray<T> {
    /// Total elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The distribution.
    pub fn dist(&self) -> Dist {
        self.dist
    }

    /// (rank, local index) of global index `i`.
    pub fn owner(&self, i: usize) -> (usize, usize) {
        match self.dist {
            Dist::Block => (i / self.per, i % self.per),
            Dist::Cyclic => (i % self.ranks, i / self.ranks),
        }
    }

    /// Global pointer to element `i` (not checked against `len`; accesses
    /// are checked against the segment).
    pub fn ptr(&self, i: usize) -> GlobalPtr<T> {
        let (r, k) = self.owner(i);
        self.arr.at(r, k)
    }

    /// Elements stored on `rank`.
    pub fn len_on(&self, rank: usize) -> usize {
        match self.dist {
            Dist::Block => self.len.saturating_sub(rank * self.per).min(self.per),
            Dist::Cyclic => (self.len + self.ranks - 1 - rank.min(self.ranks)) / self.ranks,
        }
    }

    /// Global index of local element `k` on `rank`.
    pub fn global_index(&self, rank: usize, k: usize) -> usize {
        match self.dist {
            Dist::Block => rank * self.per + k,
            Dist::Cyclic => k * self.ranks + rank,
        }
    }

    /// This rank's elements, as a view (see [`SymArray::local`]).
    pub fn local(&self) -> LocalView<'_, T> {
        self.arr.local().slice(..self.len_on(self.arr.rank()))
    }

    /// The symmetric block underneath (capacity per rank).
    pub fn blocks(&self) -> &SymArray<T> {
        &self.arr
    }

    /// The length and distribution, kept by the frozen form.
    fn shape(&self) -> Shape {
        Shape {
            len: self.len,
            dist: self.dist,
            per: self.per,
            ranks: self.ranks,
        }
    }
}

/// A spread array's shape, kept while it is frozen.
#[derive(Clone, Copy)]
struct Shape {
    len: usize,
    dist: Dist,
    per: usize,
    ranks: usize,
}

/// A [`SpreadArray`] frozen read-only on every rank
/// ([`Pgas::freeze_spread`]): this rank's elements are a plain `&[T]`.
pub struct FrozenSpread<T: Pod> {
    arr: FrozenArray<T>,
    shape: Shape,
}

impl<T: Pod> FrozenSpread<T> {
    /// Total elements.
    pub fn len(&self) -> usize {
        self.shape.len
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.shape.len == 0
    }

    /// Global pointer to element `i` (for gets).
    pub fn ptr(&self, i: usize) -> GlobalPtr<T> {
        let (r, k) = match self.shape.dist {
            Dist::Block => (i / self.shape.per, i % self.shape.per),
            Dist::Cyclic => (i % self.shape.ranks, i / self.shape.ranks),
        };
        self.arr.at(r, k)
    }

    /// This rank's elements, a plain slice (see [`FrozenArray::local`]).
    pub fn local(&self) -> &[T] {
        let s = self.shape;
        let rank = self.arr.rank();
        let n = match s.dist {
            Dist::Block => s.len.saturating_sub(rank * s.per).min(s.per),
            Dist::Cyclic => (s.len + s.ranks - 1 - rank.min(s.ranks)) / s.ranks,
        };
        &self.arr.local()[..n]
    }
}

impl Pgas {
    /// Collective: `n` zeroed elements per rank at the same offset on every
    /// rank. Every rank must make the same allocations in the same order;
    /// a mismatch is an error on every rank.
    pub fn alloc_sym<T: Pod>(&self, n: usize) -> Result<SymArray<T>> {
        let _one = self.enter_collective("Pgas::alloc_sym")?;
        let i = &self.inner;
        let bytes = (n as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::usage("allocation size overflows").at_rank(i.rank))?;
        let res = i.heap.lock().alloc_sym(bytes);
        // Agree on the outcome: every rank must get the same offset.
        let mine = match &res {
            Ok(off) => [*off, bytes],
            Err(_) => [u64::MAX, bytes],
        };
        let (mut lo, mut hi) = (mine, mine);
        self.allreduce(&mut lo, Op::Min)?;
        self.allreduce(&mut hi, Op::Max)?;
        let off = res.map_err(|e| e.at_rank(i.rank))?;
        if lo != hi {
            let _ = i.heap.lock().free_sym(off);
            return Err(Error::usage(format!(
                "collective allocation differs across ranks (offsets {:#x}..{:#x}, sizes {}..{} B): every rank must allocate the same in the same order",
                lo[0], hi[0], lo[1], hi[1]
            ))
            .at_rank(i.rank));
        }
        let p = i.st.seg().base().wrapping_add(off as usize);
        // SAFETY: [off, off + bytes) was just allocated in our own mapped
        // segment; no rank writes a block before the barrier below, and no
        // reference to it exists.
        unsafe { std::ptr::write_bytes(p, 0, bytes as usize) };
        // SAFETY: an address inside the mapped segment is not null (and it
        // is 64-byte aligned, so aligned for T).
        let base = unsafe { NonNull::new_unchecked(p.cast::<T>()) };
        self.barrier_of(Coll::AllocSym)?; // nobody writes into a block before its owner zeroed it
        Ok(SymArray {
            _mapping: i.ep.clone(),
            rank: i.rank,
            off,
            len: n,
            base,
        })
    }

    /// Collective: free a symmetric array (space returns in stack order).
    pub fn free_sym<T: Pod>(&self, a: SymArray<T>) -> Result<()> {
        let _one = self.enter_collective("Pgas::free_sym")?;
        self.barrier_of(Coll::FreeSym)?;
        self.inner
            .heap
            .lock()
            .free_sym(a.off)
            .map_err(|e| e.at_rank(self.rank()))
    }

    /// Collective: freeze `a` read-only on every rank, for a plain `&[T]`
    /// ([`FrozenArray::local`]). Every rank passes the same array (checked:
    /// a mismatch is an error on every rank). From the call on, this
    /// rank refuses its own puts, stores, atomics and Longs into the
    /// array's range on any rank, with an error naming the range and the
    /// target; then it completes its puts and waits, with everyone, until
    /// every store into the array has landed (`all_store_sync`), so the
    /// contents are final on return.
    ///
    /// A write another thread (of any rank) began before the freeze
    /// finishes before it returns; one begun after it is refused. Only
    /// this protocol may freeze and thaw a range: the endpoint's
    /// `freeze_segment_range` / `thaw_segment_range` are `unsafe`, so
    /// thawing under a live slice does not compile in safe code:
    ///
    /// ```compile_fail,E0133
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let me = pg.rank();
    /// let f = pg.freeze(pg.alloc_sym::<u64>(4)?)?;
    /// let s: &[u64] = f.local();
    /// let off = f.ptr(me).offset();
    /// pg.endpoint().thaw_segment_range(off, 32)?; // not the protocol
    /// pg.write(f.at(me, 0), 7)?;
    /// let stale = s[0];
    /// # Ok(()) }
    /// ```
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let a = pg.alloc_sym::<f64>(1000)?;
    /// a.local().fill(1.0);
    /// let f = pg.freeze(a)?;
    /// let s: f64 = f.local().iter().sum();          // a plain &[f64]
    /// assert!(pg.put(f.at(0, 0), &[2.0]).is_err()); // refused
    /// let a = pg.thaw(f)?;                          // writable again
    /// # Ok(()) }
    /// ```
    pub fn freeze<T: Pod>(&self, a: SymArray<T>) -> Result<FrozenArray<T>> {
        let _one = self.enter_collective("Pgas::freeze")?;
        let i = &self.inner;
        // Every rank can freeze (the kernel's barrier, not inside a write),
        // or every rank fails, agreed with the range.
        let can = splitrt_am::can_freeze();
        self.agree_on(a.off, a.bytes(), "Pgas::freeze", can)?;
        // Mark first (the fast paths step aside), then the endpoint's range,
        // whose freeze waits for every write another thread of this
        // process began before the marks (they announce themselves across
        // check and write: `splitrt_am::writing`) and for this rank's Longs
        // in flight to land.
        i.frozen_ranges.fetch_add(1, Ordering::SeqCst);
        // SAFETY: this is the freeze protocol: every rank freezes the same
        // range (agreed just above) before the barrier below, after which
        // `FrozenArray::local` hands out slices; `thaw` unfreezes only
        // between two barriers, once every rank has given its handle up.
        if let Err(e) = unsafe { i.ep.freeze_segment_range(a.off, a.bytes()) } {
            i.frozen_ranges.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        // Everything written into the array before the freeze lands now:
        // this rank's puts (sync), every rank's stores (all_store_sync,
        // which ends in a barrier every rank enters after freezing).
        self.sync()?;
        self.all_store_sync()?;
        self.barrier_of(Coll::Freeze)?;
        // Past the barrier every rank's Longs into the range have been
        // acknowledged here; feed those still waiting in the receive
        // windows, then seal: a deposit that comes later is refused as it
        // is written (UDP writes at poll time).
        // Once this rank has entered the barrier, other ranks may hold
        // slices of their part already: whatever fails from here on (the
        // barrier, the seal) leaves the range frozen on this rank (the
        // fast paths keep stepping aside: `frozen_ranges` stays counted),
        // so none of its puts lands under those slices; the job is
        // failing anyway. Only a failure before the barrier unfreezes.
        // SAFETY: the freeze protocol: after the barrier, before any slice
        // of the range is handed out.
        unsafe { i.ep.seal_segment_range(a.off, a.bytes()) }?;
        Ok(FrozenArray { arr: a })
    }

    /// Collective: make a frozen array writable again. Every rank passes
    /// the same array; no rank writes into it before every rank has given
    /// up its frozen handle (a barrier).
    pub fn thaw<T: Pod>(&self, f: FrozenArray<T>) -> Result<SymArray<T>> {
        let _one = self.enter_collective("Pgas::thaw")?;
        let i = &self.inner;
        let a = f.arr;
        // This rank's handle, and so every `&[T]` of its part, is gone:
        // deposits may land here again (a rank that thaws before this one
        // may write into it before the barrier below ends).
        // SAFETY: the freeze protocol's thaw, for this rank's own slices.
        unsafe { i.ep.unseal_segment_range(a.off, a.bytes()) }?;
        self.agree_on(a.off, a.bytes(), "Pgas::thaw", Ok(()))?;
        // Past this barrier every rank has given up its frozen handle, so
        // no `&[T]` of the array is left anywhere: only then may any rank
        // (any of its threads) write into it again.
        self.barrier_of(Coll::Thaw)?;
        // SAFETY: the freeze protocol's thaw: every rank is past the
        // barrier above, so no slice of the range lives.
        unsafe { i.ep.thaw_segment_range(a.off, a.bytes()) }?;
        i.frozen_ranges.fetch_sub(1, Ordering::SeqCst);
        // Past this one every rank has thawed the range, so no write that
        // follows the thaw is refused by a target that has not thawed yet.
        self.barrier_of(Coll::Thaw)?;
        Ok(a)
    }

    /// Collective: [`freeze`](Self::freeze) a spread array.
    pub fn freeze_spread<T: Pod>(&self, a: SpreadArray<T>) -> Result<FrozenSpread<T>> {
        let shape = a.shape();
        Ok(FrozenSpread {
            arr: self.freeze(a.arr)?,
            shape,
        })
    }

    /// Collective: [`thaw`](Self::thaw) a frozen spread array.
    pub fn thaw_spread<T: Pod>(&self, f: FrozenSpread<T>) -> Result<SpreadArray<T>> {
        let Shape {
            len,
            dist,
            per,
            ranks,
        } = f.shape;
        Ok(SpreadArray {
            arr: self.thaw(f.arr)?,
            len,
            dist,
            per,
            ranks,
        })
    }

    /// Every rank passes the same (offset, bytes) and every rank `can`,
    /// or every rank fails.
    fn agree_on(&self, off: u64, bytes: u64, what: &str, can: Result<()>) -> Result<()> {
        // min of (x, !x) gives the minimum and the maximum in one allreduce
        let mut v = [off, bytes, !off, !bytes, u64::from(can.is_ok())];
        self.allreduce(&mut v, Op::Min)?;
        if v[4] == 0 {
            return Err(match can {
                Err(e) => e.at_rank(self.rank()),
                Ok(()) => Error::usage(format!(
                    "{what}: another rank cannot freeze (it says why); no rank froze"
                ))
                .at_rank(self.rank()),
            });
        }
        // and the agreed array is this rank's own (min == max == mine): a
        // rank never goes on with an array other ranks did not pass
        if v[0] != !v[2] || v[1] != !v[3] || v[0] != off || v[1] != bytes {
            return Err(Error::usage(format!(
                "{what} of different arrays across ranks (offsets {:#x}..{:#x}, sizes {}..{} B): \
                 every rank must pass the same array",
                v[0], !v[2], v[1], !v[3]
            ))
            .at_rank(self.rank()));
        }
        Ok(())
    }

    /// Collective: a spread array of `n` zeroed elements.
    pub fn spread<T: Pod>(&self, n: usize, dist: Dist) -> Result<SpreadArray<T>> {
        let ranks = self.size();
        let per = n.div_ceil(ranks).max(1);
        Ok(SpreadArray {
            arr: self.alloc_sym(per)?,
            len: n,
            dist,
            per,
            ranks,
        })
    }
}
