//! [`LocalView`]: a cell-typed view of memory that others may write while
//! the view lives — a rank's own segment, which native puts, stores,
//! atomics, Long deposits, handlers, other threads and other ranks write
//! at any time.
//!
//! A `&[T]` over such bytes would promise the compiler that nothing writes
//! them while it lives (`noalias readonly`), and LLVM folds a second read
//! of an element into the first across a put that changed it. A view
//! promises nothing of the kind: it is to the segment what
//! `&[AtomicU64]` is to an array of words. Every element is read and
//! written with relaxed atomic operations of the widest width the
//! element's size and alignment allow (8-byte words as `AtomicU64`, a
//! plain `mov` on x86-64; down to byte-wise `AtomicU8` for a `[u8; 3]`),
//! so a concurrent write by a view yields a value some writer wrote (per
//! atomic unit).
//!
//! Two cases remain races under Rust's memory model within one process
//! (see `docs/safety.md`, "What remains outside the reference model"):
//! the runtime's own copies into a segment (a put, store, Long deposit or
//! `write_segment` is a non-atomic `memmove`, and a local get reads with
//! one) on another thread, and mixed-size atomics, a view of `u64` over
//! bytes another thread updates as `u32` (or a `u8` view over a `u64`
//! array). No reference is involved, so the compiler has no aliasing
//! promise to exploit, and the hardware reads or writes each aligned word
//! whole; but the model does not define them. Keep such accesses to
//! separate phases.
//!
//! For vectorised kernels, [`as_slice`](LocalView::as_slice) and
//! [`as_mut_slice`](LocalView::as_mut_slice) hand out plain slices under
//! a written contract (`unsafe`).
//!
//! ```
//! use splitrt_runtime::view::LocalView;
//! let mut words = [0u64; 4];
//! let v = LocalView::from_mut_slice(&mut words);
//! v.set(1, 5);
//! v.slice(2..).fill(9);
//! assert_eq!(v.iter().collect::<Vec<_>>(), [0, 5, 9, 9]);
//! let mut out = [0u64; 4];
//! v.copy_to(&mut out);
//! assert_eq!(out, [0, 5, 9, 9]);
//! ```

use bytemuck::Pod;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// `len` elements of `T` in memory that other writers may change while
/// the view lives; read and written by value through relaxed atomics.
///
/// `Copy`: a view is a pointer and a length, borrowed for `'a` from what
/// keeps the memory mapped (a symmetric array, the PGAS context, a
/// handler's message). Element access through `&self`, as with
/// [`Cell`](std::cell::Cell) or `&[AtomicU64]`. Indexing out of range
/// panics, as slice indexing does.
pub struct LocalView<'a, T> {
    ptr: NonNull<T>,
    len: usize,
    /// Borrowed like a slice of cells: invariant in nothing it need not be,
    /// and never `&T`.
    _cells: PhantomData<&'a [std::cell::UnsafeCell<T>]>,
}

impl<T> Clone for LocalView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for LocalView<'_, T> {}

// SAFETY: a view only moves `T` values in and out by atomic copies (no
// `&T` is ever made), so sharing or sending it across threads is sound
// whenever `T` values may move between threads; the memory stays valid for
// `'a` by the constructor's contract, whichever thread uses it.
unsafe impl<T: Send> Send for LocalView<'_, T> {}
// SAFETY: as for `Send`: concurrent uses through `&LocalView` are atomic
// accesses, never a data race.
unsafe impl<T: Send> Sync for LocalView<'_, T> {}

impl<'a, T: Pod> LocalView<'a, T> {
    /// A view of `len` elements at `ptr`.
    ///
    /// # Safety
    ///
    /// * `ptr` is non-null, aligned for `T` and valid for reads and writes
    ///   of `len` elements for all of `'a` (the memory stays mapped);
    /// * during `'a` no Rust reference (`&T`, `&[T]`, `&mut [T]`, of any
    ///   type) to any of these bytes is used, in any thread of this
    ///   process: they are accessed only through views, atomics, raw
    ///   pointer copies of the runtime, or by other processes.
    pub unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
        debug_assert!(!ptr.is_null() && ptr.align_offset(std::mem::align_of::<T>()) == 0);
        LocalView {
            // SAFETY: non-null by this function's contract.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            len,
            _cells: PhantomData,
        }
    }

    /// A view of a slice this view borrows exclusively (like
    /// [`Cell::from_mut`](std::cell::Cell::from_mut)): for tests, and for
    /// code written once for views and plain buffers alike.
    pub fn from_mut_slice(s: &'a mut [T]) -> Self {
        let len = s.len();
        // SAFETY: the exclusive borrow for 'a means nothing else touches
        // these bytes while the view lives; the pointer comes from a live
        // slice, so it is non-null, aligned and valid for `len` elements.
        unsafe { Self::from_raw_parts(s.as_mut_ptr(), len) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address (never to be turned into a reference
    /// outside the contract of [`as_slice`](Self::as_slice)).
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Element `i`, read now.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        self.check(i);
        // SAFETY: i < len, so the element lies in the view, which the
        // constructor's contract keeps valid and free of references.
        unsafe { load(self.at(i)) }
    }

    /// Write `v` into element `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    #[inline]
    pub fn set(&self, i: usize, v: T) {
        self.check(i);
        // SAFETY: as in `get`.
        unsafe { store(self.at(i), v) }
    }

    /// Copy every element into `dst`.
    ///
    /// # Panics
    ///
    /// If `dst.len() != len()` (as `<[T]>::copy_from_slice` does).
    pub fn copy_to(&self, dst: &mut [T]) {
        assert_eq!(
            dst.len(),
            self.len,
            "LocalView::copy_to: destination of {} elements for a view of {}",
            dst.len(),
            self.len
        );
        let bytes = std::mem::size_of_val(dst);
        // SAFETY: the view's bytes are valid (constructor's contract);
        // `dst` is an exclusive borrow of as many bytes, which cannot lie
        // in the view (no reference to the view's bytes exists).
        unsafe { copy_out::<T>(self.ptr.as_ptr().cast(), dst.as_mut_ptr().cast(), bytes) }
    }

    /// Copy `src` into the view's elements.
    ///
    /// # Panics
    ///
    /// If `src.len() != len()`.
    pub fn copy_from(&self, src: &[T]) {
        assert_eq!(
            src.len(),
            self.len,
            "LocalView::copy_from: source of {} elements for a view of {}",
            src.len(),
            self.len
        );
        let bytes = std::mem::size_of_val(src);
        // SAFETY: as in `copy_to`, the other way round.
        unsafe { copy_in::<T>(src.as_ptr().cast(), self.ptr.as_ptr().cast(), bytes) }
    }

    /// Write `v` into every element (from a small pattern buffer when the
    /// view is long).
    pub fn fill(&self, v: T) {
        const PATTERN: usize = 512;
        if self.len <= PATTERN {
            for i in 0..self.len {
                // SAFETY: i < len, as in `set`.
                unsafe { store(self.at(i), v) }
            }
            return;
        }
        let pattern = [v; PATTERN];
        let mut at = 0;
        while at < self.len {
            let n = PATTERN.min(self.len - at);
            self.slice(at..at + n).copy_from(&pattern[..n]);
            at += n;
        }
    }

    /// The elements, copied out now.
    pub fn to_vec(&self) -> Vec<T> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to(&mut v);
        v
    }

    /// The elements by value, each read when the iterator reaches it.
    pub fn iter(&self) -> Iter<'a, T> {
        Iter {
            view: *self,
            front: 0,
            back: self.len,
        }
    }

    /// The sub-view over `range` (as slice indexing: panics if it is out
    /// of order or past the end).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> LocalView<'a, T> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.checked_add(1).expect("range start overflows"),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1).expect("range end overflows"),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        assert!(
            start <= end && end <= self.len,
            "LocalView::slice: range {start}..{end} of a view of {} elements",
            self.len
        );
        LocalView {
            // SAFETY: start <= len, so the pointer stays in (or one past)
            // the view's allocation, which does not wrap to null.
            ptr: unsafe { NonNull::new_unchecked(self.at(start)) },
            len: end - start,
            _cells: PhantomData,
        }
    }

    /// The view as a plain slice, for vectorised read-only kernels.
    ///
    /// # Safety
    ///
    /// While the returned slice (or anything derived from it) is used, **no
    /// rank, no thread and no handler writes any of these bytes**: no put,
    /// store, atomic or Long deposit targets them (from any rank), no
    /// `set` / `copy_from` / `fill` through any view of them and no
    /// `write_segment` runs. In a PGAS program this holds between two
    /// synchronisation points (barriers, `all_store_sync`) at which every
    /// writer of the range is known to be done, or for a frozen array.
    /// Breaking it is undefined behaviour: the compiler may assume the
    /// bytes do not change and reuse values read earlier.
    pub unsafe fn as_slice(&self) -> &'a [T] {
        // SAFETY: valid, aligned elements (constructor's contract); the
        // caller promises no writer for the slice's life.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The view as a plain mutable slice, for vectorised kernels that
    /// write this rank's data.
    ///
    /// # Safety
    ///
    /// While the returned slice is used, **no rank, no thread and no
    /// handler reads or writes any of these bytes** other than through
    /// it (no get from another rank, no put, store, atomic or Long
    /// deposit, no access through any view of them), and no other Rust
    /// reference to them exists (in particular no second `as_mut_slice`
    /// or `as_slice` of an overlapping view). Between synchronisation
    /// points in which this rank alone touches its own data, that holds.
    #[allow(clippy::mut_from_ref)] // the view is a cell; exclusivity is the caller's contract
    pub unsafe fn as_mut_slice(&self) -> &'a mut [T] {
        // SAFETY: valid, aligned elements (constructor's contract); the
        // caller promises exclusive access for the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Element `i`'s address (computed without `unsafe`: dereferenced only
    /// for `i < len`).
    #[inline(always)]
    fn at(&self, i: usize) -> *mut T {
        self.ptr.as_ptr().wrapping_add(i)
    }

    #[inline(always)]
    fn check(&self, i: usize) {
        if i >= self.len {
            out_of_range(i, self.len)
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn out_of_range(i: usize, len: usize) -> ! {
    panic!("LocalView index {i} out of range for a view of {len} elements")
}

impl<T: Pod + fmt::Debug> fmt::Debug for LocalView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, T: Pod> IntoIterator for LocalView<'a, T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// The elements of a [`LocalView`] by value.
#[derive(Clone)]
pub struct Iter<'a, T> {
    view: LocalView<'a, T>,
    front: usize,
    back: usize,
}

impl<T: Pod> Iterator for Iter<'_, T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.front == self.back {
            return None;
        }
        // SAFETY: front < back <= len: an element of the view.
        let v = unsafe { load(self.view.at(self.front)) };
        self.front += 1;
        Some(v)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
    /// Skips without reading the skipped elements (`step_by` relies on it).
    #[inline]
    fn nth(&mut self, n: usize) -> Option<T> {
        self.front = self.front.saturating_add(n).min(self.back);
        self.next()
    }
    fn count(self) -> usize {
        self.back - self.front
    }
    fn last(mut self) -> Option<T> {
        self.next_back()
    }
}

impl<T: Pod> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<T> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        // SAFETY: front <= back < len: an element of the view.
        Some(unsafe { load(self.view.at(self.back)) })
    }
}

impl<T: Pod> ExactSizeIterator for Iter<'_, T> {}
impl<T: Pod> std::iter::FusedIterator for Iter<'_, T> {}

/// The atomic unit an element of `T` is accessed in: the widest of 8, 4, 2
/// and 1 bytes that divides both its size and its alignment.
const fn unit<T>() -> usize {
    let (s, a) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
    if s % 8 == 0 && a >= 8 {
        8
    } else if s % 4 == 0 && a >= 4 {
        4
    } else if s % 2 == 0 && a >= 2 {
        2
    } else {
        1
    }
}

/// Read one element in atomic units of [`unit::<T>()`](unit()).
///
/// # Safety
///
/// `p` is aligned for `T`, valid for reads, and no reference to its bytes
/// is in use (see [`LocalView::from_raw_parts`]).
#[inline(always)]
unsafe fn load<T: Pod>(p: *const T) -> T {
    let mut out = T::zeroed();
    let dst: *mut T = &mut out;
    let n = std::mem::size_of::<T>();
    macro_rules! units {
        ($a:ty, $u:ty) => {
            for k in 0..n / std::mem::size_of::<$u>() {
                // SAFETY: `p` is aligned for T, whose alignment is at least
                // the unit's (see `unit`), and unit k lies inside the
                // element; only atomics touch it here.
                let w = unsafe { <$a>::from_ptr(p.cast::<$u>().cast_mut().add(k)) }.load(Relaxed);
                // SAFETY: `out` is a local T, aligned like `p`; unit k lies
                // inside it.
                unsafe { dst.cast::<$u>().add(k).write(w) };
            }
        };
    }
    match unit::<T>() {
        8 => units!(AtomicU64, u64),
        4 => units!(AtomicU32, u32),
        2 => units!(AtomicU16, u16),
        _ => units!(AtomicU8, u8),
    }
    out
}

/// Write one element in atomic units of [`unit::<T>()`](unit()).
///
/// # Safety
///
/// `p` is aligned for `T`, valid for writes, and no reference to its bytes
/// is in use (see [`LocalView::from_raw_parts`]).
#[inline(always)]
unsafe fn store<T: Pod>(p: *mut T, v: T) {
    let src: *const T = &v;
    let n = std::mem::size_of::<T>();
    macro_rules! units {
        ($a:ty, $u:ty) => {
            for k in 0..n / std::mem::size_of::<$u>() {
                // SAFETY: `v` is a local T; unit k lies inside it, aligned.
                let w = unsafe { src.cast::<$u>().add(k).read() };
                // SAFETY: as in `load`: aligned unit inside the element,
                // touched only by atomics.
                unsafe { <$a>::from_ptr(p.cast::<$u>().add(k)) }.store(w, Relaxed);
            }
        };
    }
    match unit::<T>() {
        8 => units!(AtomicU64, u64),
        4 => units!(AtomicU32, u32),
        2 => units!(AtomicU16, u16),
        _ => units!(AtomicU8, u8),
    }
}

/// Copy `n` bytes of `T` elements out of shared memory at `src` into a
/// private buffer at `dst`, in `T`'s units (see [`unit()`]): the same
/// atomic accesses as [`LocalView::get`], only many. Never wider: Rust
/// does not allow racing atomic accesses of different sizes to the same
/// bytes, and a `set` on another thread may race with this copy.
///
/// # Safety
///
/// `src` is aligned for `T` and valid for reads of `n` bytes (a multiple
/// of `T`'s size) touched by no reference in use; `dst` is valid for
/// writes of `n` bytes and does not overlap `src`.
unsafe fn copy_out<T>(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the whole range, from a T-aligned start, a multiple of
    // T's size (so of its unit) long: the contract of `copy_units_out`.
    unsafe { copy_units_out::<T>(src, dst, 0, n) }
}

/// Bytes `from..to` of [`copy_out`] in `T`'s units.
///
/// # Safety
///
/// As for [`copy_out`], and `src + from` is aligned to `unit::<T>()`, and
/// `to - from` is a multiple of it.
#[inline(always)]
unsafe fn copy_units_out<T>(src: *const u8, dst: *mut u8, from: usize, to: usize) {
    macro_rules! units {
        ($a:ty, $u:ty) => {
            let mut k = from;
            while k < to {
                // SAFETY: an aligned unit inside both ranges (contract).
                let v = unsafe { <$a>::from_ptr(src.add(k).cast::<$u>().cast_mut()) }.load(Relaxed);
                // SAFETY: inside `dst`, maybe unaligned.
                unsafe { dst.add(k).cast::<$u>().write_unaligned(v) };
                k += std::mem::size_of::<$u>();
            }
        };
    }
    match unit::<T>() {
        8 => {
            units!(AtomicU64, u64);
        }
        4 => {
            units!(AtomicU32, u32);
        }
        2 => {
            units!(AtomicU16, u16);
        }
        _ => {
            units!(AtomicU8, u8);
        }
    }
}

/// Copy `n` bytes of `T` elements from a private buffer at `src` into
/// shared memory at `dst`, in `T`'s units: the mirror of [`copy_out`].
///
/// # Safety
///
/// `dst` is aligned for `T` and valid for writes of `n` bytes (a multiple
/// of `T`'s size) touched by no reference in use; `src` is valid for reads
/// of `n` bytes and does not overlap `dst`.
unsafe fn copy_in<T>(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: as in `copy_out`, for `dst`.
    unsafe { copy_units_in::<T>(src, dst, 0, n) }
}

/// Bytes `from..to` of [`copy_in`] in `T`'s units.
///
/// # Safety
///
/// As for [`copy_in`], and `dst + from` is aligned to `unit::<T>()`, and
/// `to - from` is a multiple of it.
#[inline(always)]
unsafe fn copy_units_in<T>(src: *const u8, dst: *mut u8, from: usize, to: usize) {
    macro_rules! units {
        ($a:ty, $u:ty) => {
            let mut k = from;
            while k < to {
                // SAFETY: inside `src`, maybe unaligned.
                let v = unsafe { src.add(k).cast::<$u>().read_unaligned() };
                // SAFETY: an aligned unit inside both ranges (contract).
                unsafe { <$a>::from_ptr(dst.add(k).cast::<$u>()) }.store(v, Relaxed);
                k += std::mem::size_of::<$u>();
            }
        };
    }
    match unit::<T>() {
        8 => {
            units!(AtomicU64, u64);
        }
        4 => {
            units!(AtomicU32, u32);
        }
        2 => {
            units!(AtomicU16, u16);
        }
        _ => {
            units!(AtomicU8, u8);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Over plain heap buffers: no process, no socket; runs under Miri.
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Zeroable, bytemuck::Pod)]
    #[repr(C)]
    struct Rgb([u8; 3]);

    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Zeroable, bytemuck::Pod)]
    #[repr(C, align(16))]
    struct Wide {
        a: u64,
        b: u32,
        c: u16,
        d: [u8; 2],
    }

    fn roundtrip<T: Pod + PartialEq + fmt::Debug>(vals: &[T]) {
        let mut buf = vec![T::zeroed(); vals.len()];
        let v = LocalView::from_mut_slice(&mut buf);
        assert_eq!(v.len(), vals.len());
        for (i, &x) in vals.iter().enumerate() {
            v.set(i, x);
        }
        for (i, &x) in vals.iter().enumerate() {
            assert_eq!(v.get(i), x, "element {i}");
        }
        assert_eq!(v.iter().collect::<Vec<_>>(), vals);
        assert_eq!(v.iter().rev().collect::<Vec<_>>(), {
            let mut r = vals.to_vec();
            r.reverse();
            r
        });
        let mut out = vec![T::zeroed(); vals.len()];
        v.copy_to(&mut out);
        assert_eq!(out, vals);
        v.fill(T::zeroed());
        assert!(v.iter().all(|x| x == T::zeroed()));
        v.copy_from(vals);
        assert_eq!(v.to_vec(), vals);
        assert_eq!(buf, vals);
    }

    #[test]
    fn every_pod_width() {
        assert_eq!((unit::<u8>(), unit::<u16>(), unit::<u32>()), (1, 2, 4));
        assert_eq!((unit::<u64>(), unit::<f64>(), unit::<Rgb>()), (8, 8, 1));
        assert_eq!(
            (unit::<[u32; 3]>(), unit::<Wide>(), unit::<[u16; 3]>()),
            (4, 8, 2)
        );
        roundtrip(&[1u8, 2, 255, 0, 7]);
        roundtrip(&[1u16, 65535, 3]);
        roundtrip(&[1u32, u32::MAX, 3, 9]);
        roundtrip(&[1u64, u64::MAX, 1 << 40]);
        roundtrip(&[1.5f64, -0.0, f64::MAX]);
        roundtrip(&[-1i32, i32::MIN]);
        roundtrip(&[Rgb([1, 2, 3]), Rgb([4, 5, 6])]);
        roundtrip(&[[1u32, 2, 3], [4, 5, 6]]);
        roundtrip(&[[1u16, 2, 3], [4, 5, 6]]);
        roundtrip(&[
            Wide {
                a: 1,
                b: 2,
                c: 3,
                d: [4, 5],
            },
            Wide {
                a: u64::MAX,
                b: 7,
                c: 8,
                d: [9, 10],
            },
        ]);
        roundtrip::<u64>(&[]);
    }

    #[test]
    fn bytes_at_every_alignment_and_length() {
        // byte views start anywhere (a Long payload at an odd offset)
        let mut buf: Vec<u8> = (0..64u8).collect();
        for start in 0..9 {
            for len in 0..(40 - start) {
                let v = LocalView::from_mut_slice(&mut buf).slice(start..start + len);
                let mut out = vec![0u8; len];
                v.copy_to(&mut out);
                let want: Vec<u8> = (start as u8..(start + len) as u8).collect();
                assert_eq!(out, want, "copy_to at {start}, {len} B");
                let new: Vec<u8> = want.iter().map(|b| b ^ 0xa5).collect();
                v.copy_from(&new);
                assert_eq!(v.to_vec(), new, "copy_from at {start}, {len} B");
                v.copy_from(&want);
            }
        }
        assert_eq!(buf, (0..64u8).collect::<Vec<_>>());
    }

    #[test]
    fn unaligned_destination_buffers() {
        // copy_to / copy_from with buffers at odd addresses: the unit
        // stores into them are unaligned
        let mut bytes = [0u8; 25];
        let v8 = LocalView::from_mut_slice(&mut bytes[..]);
        v8.slice(1..).copy_from(&[7u8; 24]);
        let mut back = [0u8; 26];
        v8.slice(1..).copy_to(&mut back[2..]);
        assert_eq!(back[..2], [0, 0]);
        assert!(back[2..].iter().all(|&b| b == 7));
        assert_eq!(bytes[0], 0);
    }

    #[test]
    fn sub_views_and_ranges() {
        let mut big = vec![0u16; 1500];
        let w = LocalView::from_mut_slice(&mut big);
        w.slice(1..1499).fill(7);
        assert_eq!(
            (w.get(0), w.get(1), w.get(1000), w.get(1498), w.get(1499)),
            (0, 7, 7, 7, 0)
        );
        let mut buf = [0u32; 10];
        let v = LocalView::from_mut_slice(&mut buf);
        v.slice(2..5).fill(1);
        v.slice(..=1).fill(2);
        v.slice(8..).fill(3);
        assert_eq!(v.to_vec(), [2, 2, 1, 1, 1, 0, 0, 0, 3, 3]);
        assert_eq!(v.slice(3..3).len(), 0);
        assert!(v.slice(10..).is_empty());
        assert_eq!(v.slice(1..4).iter().len(), 3);
        assert_eq!(v.iter().step_by(4).collect::<Vec<_>>(), [2, 1, 3]);
        assert_eq!(v.iter().nth(2), Some(1));
        assert_eq!(v.iter().nth(10), None);
        assert_eq!((v.iter().count(), v.iter().last()), (10, Some(3)));
        assert_eq!(format!("{:?}", v.slice(..3)), "[2, 2, 1]");
        let w = v; // Copy
        w.set(9, 4);
        assert_eq!(v.get(9), 4);
        assert_eq!(v.into_iter().sum::<u32>(), 2 + 2 + 3 + 3 + 4);
    }

    #[test]
    #[should_panic(expected = "index 4 out of range")]
    fn index_out_of_range_panics() {
        let mut buf = [0u8; 4];
        LocalView::from_mut_slice(&mut buf).get(4);
    }

    #[test]
    #[should_panic(expected = "range 2..5")]
    fn slice_out_of_range_panics() {
        let mut buf = [0u8; 4];
        LocalView::from_mut_slice(&mut buf).slice(2..5);
    }

    #[test]
    #[should_panic(expected = "destination of 3 elements")]
    fn copy_to_length_mismatch_panics() {
        let mut buf = [0u8; 4];
        LocalView::from_mut_slice(&mut buf).copy_to(&mut [0u8; 3]);
    }

    #[test]
    fn shared_between_threads() {
        // set and get through `&LocalView` from two threads: atomic, so no
        // data race (Miri checks this)
        let mut buf = [0u64; 8];
        let v = LocalView::from_mut_slice(&mut buf);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..8 {
                    v.set(i, i as u64 + 1);
                }
            });
            s.spawn(|| {
                for i in 0..8 {
                    let x = v.get(i);
                    assert!(x == 0 || x == i as u64 + 1);
                }
            });
        });
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn unsafe_slices_under_their_contract() {
        let mut buf = [1u16, 2, 3, 4];
        let v = LocalView::from_mut_slice(&mut buf);
        {
            // SAFETY: nothing else touches `buf` while `m` lives.
            let m = unsafe { v.as_mut_slice() };
            m.iter_mut().for_each(|x| *x *= 10);
        }
        // SAFETY: no writer while `s` lives.
        let s = unsafe { v.as_slice() };
        assert_eq!(s, [10, 20, 30, 40]);
    }
}
