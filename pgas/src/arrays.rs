//! Collective allocations: symmetric arrays (same offset, same length on
//! every rank) and spread arrays distributed block-wise or cyclically.

use crate::collectives::Coll;
use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::reduce::Op;
use bytemuck::Pod;
use splitrt_am::{Error, Result};
use std::marker::PhantomData;

/// `len` elements at the same offset on every rank.
pub struct SymArray<T: Pod> {
    rank: usize,
    off: u64,
    len: usize,
    base: *mut T,
    _t: PhantomData<T>,
}

// SAFETY: the array is plain data in this rank's segment, which lives as
// long as the job; `local_mut` needs `&mut self`, so Rust's aliasing rules
// hold among this process's threads.
unsafe impl<T: Pod + Send> Send for SymArray<T> {}
// SAFETY: as above; shared access only hands out `&[T]`.
unsafe impl<T: Pod + Sync> Sync for SymArray<T> {}

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

    /// This rank's part, read in place (see [`Pgas::local_slice`]).
    pub fn local(&self) -> &[T] {
        // SAFETY: the block was allocated for `len` elements of T in our own
        // segment (aligned to 64 B) and lives as long as the job.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// This rank's part, writable in place.
    pub fn local_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `local`; `&mut self` makes this the only Rust
        // reference into the block in this process.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// The rank that allocated this handle.
    pub fn rank(&self) -> usize {
        self.rank
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
/// let mut a = pg.spread::<u32>(1000, Dist::Cyclic)?;
/// for (k, v) in a.local_mut().iter_mut().enumerate() {
///     *v = k as u32;                         // local part
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

    /// This rank's elements, in place.
    pub fn local(&self) -> &[T] {
        &self.arr.local()[..self.len_on(self.arr.rank())]
    }

    /// This rank's elements, writable in place.
    pub fn local_mut(&mut self) -> &mut [T] {
        let n = self.len_on(self.arr.rank());
        &mut self.arr.local_mut()[..n]
    }

    /// The symmetric block underneath (capacity per rank).
    pub fn blocks(&self) -> &SymArray<T> {
        &self.arr
    }
}

impl Pgas {
    /// Collective: `n` zeroed elements per rank at the same offset on every
    /// rank. Every rank must make the same allocations in the same order;
    /// a mismatch is an error on every rank.
    pub fn alloc_sym<T: Pod>(&self, n: usize) -> Result<SymArray<T>> {
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
        let seg = i.st.seg();
        // SAFETY: [off, off + bytes) was just allocated in our own segment.
        let base = unsafe {
            let p = seg.base().add(off as usize);
            std::ptr::write_bytes(p, 0, bytes as usize);
            p as *mut T
        };
        self.barrier_of(Coll::AllocSym)?; // nobody writes into a block before its owner zeroed it
        Ok(SymArray {
            rank: i.rank,
            off,
            len: n,
            base,
            _t: PhantomData,
        })
    }

    /// Collective: free a symmetric array (space returns in stack order).
    pub fn free_sym<T: Pod>(&self, a: SymArray<T>) -> Result<()> {
        self.barrier_of(Coll::FreeSym)?;
        self.inner
            .heap
            .lock()
            .free_sym(a.off)
            .map_err(|e| e.at_rank(self.rank()))
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
