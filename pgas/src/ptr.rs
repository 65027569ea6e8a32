//! Global pointers: (rank, offset in that rank's segment). Never a raw
//! address; valid on every rank of the job.

use bytemuck::Pod;
use std::fmt;
use std::marker::PhantomData;

/// A typed location in some rank's segment.
///
/// ```
/// use splitrt_pgas::GlobalPtr;
/// let p: GlobalPtr<u64> = GlobalPtr::new(3, 4096);
/// let q = p.add(2);
/// assert_eq!((q.rank(), q.offset()), (3, 4096 + 16));
/// assert_eq!(q.byte_distance(p), 16);
/// ```
pub struct GlobalPtr<T> {
    // full width: a rank is never truncated into another valid one
    rank: usize,
    offset: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GlobalPtr<T> {}
impl<T> PartialEq for GlobalPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.rank == o.rank && self.offset == o.offset
    }
}
impl<T> Eq for GlobalPtr<T> {}
impl<T> std::hash::Hash for GlobalPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.rank, self.offset).hash(h)
    }
}
impl<T> fmt::Debug for GlobalPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GlobalPtr({}:{:#x})", self.rank, self.offset)
    }
}

impl<T: Pod> GlobalPtr<T> {
    /// A pointer to byte `offset` of `rank`'s segment. Nothing is checked
    /// here; every access checks the rank, bounds and alignment at the
    /// caller.
    pub fn new(rank: usize, offset: u64) -> Self {
        GlobalPtr {
            rank,
            offset,
            _t: PhantomData,
        }
    }

    /// The owning rank.
    pub fn rank(self) -> usize {
        self.rank
    }

    /// Byte offset in the owner's segment.
    pub fn offset(self) -> u64 {
        self.offset
    }

    /// `n` elements further. Named like `<*const T>::add`, which it
    /// mirrors. Arithmetic that overflows never wraps onto a valid
    /// location: the result points past every segment, so any access
    /// through it is refused as out of bounds.
    ///
    /// ```
    /// use splitrt_pgas::GlobalPtr;
    /// let p: GlobalPtr<u64> = GlobalPtr::new(0, 8);
    /// assert_eq!(p.add(usize::MAX).offset(), u64::MAX);
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: usize) -> Self {
        let off = (n as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .and_then(|b| self.offset.checked_add(b))
            .unwrap_or(u64::MAX);
        GlobalPtr::new(self.rank(), off)
    }

    /// Byte distance from `base` (same rank assumed).
    pub fn byte_distance(self, base: Self) -> u64 {
        self.offset.wrapping_sub(base.offset)
    }

    /// The same location seen as another element type.
    pub fn cast<U: Pod>(self) -> GlobalPtr<U> {
        GlobalPtr::new(self.rank(), self.offset)
    }

    /// The same offset on another rank (symmetric allocations).
    pub fn on(self, rank: usize) -> Self {
        GlobalPtr::new(rank, self.offset)
    }
}
