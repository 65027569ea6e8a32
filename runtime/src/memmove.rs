//! A copy with `memmove` semantics for the hot paths' small copies (a
//! native put or get, whose buffer may be a slice of a segment it also
//! reads; a Short or small Medium into a ring cell), with up to 128 bytes
//! done inline. A call into libc's `memmove` for 8 bytes cost about 25
//! instructions (call, PLT, size dispatch), also for 0 bytes; two
//! overlapping unaligned loads and two stores of `n` bytes each cover
//! every length from `n` to `2n` (of 16, 32 and 64 bytes, as 16-byte
//! moves, for 16-128 bytes). The size classes are a short tree, not a
//! chain of compares: with one compare per class, smallest first, a
//! 256 B copy (libc's, after the chain) took 11-13 ns against 5-6 ns for
//! the same libc call alone, measured in one process on the EPYC of
//! 2026-11-26; with the tree both take 4.6-5.5 ns.

/// Copy `len` bytes from `src` to `dst`; the ranges may overlap.
///
/// ```
/// let (a, mut b) = ([1u8, 2, 3], [0u8; 3]);
/// // SAFETY: both arrays hold 3 bytes.
/// unsafe { splitrt_runtime::memmove::memmove(a.as_ptr(), b.as_mut_ptr(), 3) };
/// assert_eq!(b, a);
/// ```
///
/// # Safety
/// As `std::ptr::copy`: `src` readable and `dst` writable for `len`
/// bytes.
#[inline(always)]
pub unsafe fn memmove(src: *const u8, dst: *mut u8, len: usize) {
    // Few branches on every path: a chain of compares (one per size
    // class, smallest first) cost 256 B copies twice libc's time on the
    // 2026-11-26 EPYC, in same-process A/B runs; past 128 B it is one
    // compare and libc's own copy. In every arm below `src` is readable
    // and `dst` writable for `len` bytes: this function's `# Safety`
    // contract, kept by the caller.
    if len > 128 {
        // SAFETY: `std::ptr::copy` needs exactly that contract (it
        // allows overlap); u8 needs no alignment.
        unsafe { std::ptr::copy(src, dst, len) }
    } else if len >= 16 {
        if len > 64 {
            // SAFETY: the contract, and `size_of::<[u128; 4]>() == 64 <
            // len`, which is what `ends` adds.
            unsafe { ends::<[u128; 4]>(src, dst, len) }
        } else if len > 32 {
            // SAFETY: the contract, and `size_of::<[u128; 2]>() == 32 <
            // len`.
            unsafe { ends::<[u128; 2]>(src, dst, len) }
        } else {
            // SAFETY: the contract, and `size_of::<u128>() == 16 <= len`.
            unsafe { ends::<u128>(src, dst, len) }
        }
    } else if len >= 8 {
        // SAFETY: the contract, and `size_of::<u64>() == 8 <= len`.
        unsafe { ends::<u64>(src, dst, len) }
    } else if len >= 4 {
        // SAFETY: the contract, and `size_of::<u32>() == 4 <= len`.
        unsafe { ends::<u32>(src, dst, len) }
    } else if len >= 2 {
        // SAFETY: the contract, and `size_of::<u16>() == 2 <= len`.
        unsafe { ends::<u16>(src, dst, len) }
    } else if len == 1 {
        // SAFETY: `len == 1`, so the contract makes `*src` readable and
        // `*dst` writable; a u8 needs no alignment. The value is read
        // before it is written, so overlap (src == dst) is harmless.
        let byte = unsafe { *src };
        // SAFETY: as above, `dst` is writable for this one byte.
        unsafe { *dst = byte }
    }
}

/// Copy `len` bytes as two `T`s, the first and the last (overlapping when
/// `len < 2 * size_of::<T>()`): both loads come before either store, so
/// overlapping ranges copy as memmove does.
///
/// # Safety
/// As [`memmove`], and `size_of::<T>() <= len`.
#[inline(always)]
unsafe fn ends<T: Copy>(src: *const u8, dst: *mut u8, len: usize) {
    // `last + size_of::<T>() == len`: the second `T` ends where the range
    // does (no underflow: `size_of::<T>() <= len`, this function's
    // contract). Unaligned accesses use read_unaligned / write_unaligned,
    // so `T`'s alignment is never needed.
    let last = len - std::mem::size_of::<T>();
    // SAFETY: the first `T` of `src` is bytes `0..size_of::<T>()`, within
    // the `len` readable bytes the caller promises (`size_of::<T>() <=
    // len`).
    let a = unsafe { (src as *const T).read_unaligned() };
    // SAFETY: `last <= len`, so `src + last` stays inside (or one past)
    // the caller's readable range: an in-bounds offset.
    let src_last = unsafe { src.add(last) };
    // SAFETY: bytes `last..len` of `src`, inside the readable range.
    let b = unsafe { (src_last as *const T).read_unaligned() };
    // SAFETY: bytes `0..size_of::<T>()` of `dst`, inside the `len`
    // writable bytes the caller promises. Both loads are done, so an
    // overlap with `src` cannot change what is copied.
    unsafe { (dst as *mut T).write_unaligned(a) };
    // SAFETY: `last <= len`, an in-bounds offset into the caller's
    // writable range.
    let dst_last = unsafe { dst.add(last) };
    // SAFETY: bytes `last..len` of `dst`, inside the writable range.
    unsafe { (dst_last as *mut T).write_unaligned(b) };
}

#[cfg(test)]
mod tests {
    use super::memmove;

    /// Every length up to 140 at every pair of offsets, overlapping both
    /// ways, against `std::ptr::copy`. (Under Miri, which interprets
    /// every byte, 3 offsets of different residues mod 8 each way.)
    #[test]
    fn same_as_ptr_copy() {
        let offsets: Vec<usize> = if cfg!(miri) {
            vec![0, 3, 13]
        } else {
            (0..24).collect()
        };
        let init: Vec<u8> = (0..200u8).map(|i| i.wrapping_mul(37)).collect();
        for len in 0..140 {
            for &from in &offsets {
                for &to in &offsets {
                    let (mut a, mut b) = (init.clone(), init.clone());
                    // `from`/`to` + `len` < 24 + 140 < 200: every range
                    // below lies inside its 200-byte vector. The pointers
                    // come from `Vec::as_ptr`/`as_mut_ptr`, which make no
                    // reference, so both may alias (as Miri checks).
                    // SAFETY: `from < 200`: an in-bounds offset into `a`.
                    let a_src = unsafe { a.as_ptr().add(from) };
                    // SAFETY: `to < 200`: an in-bounds offset into `a`.
                    let a_dst = unsafe { a.as_mut_ptr().add(to) };
                    // SAFETY: `len` bytes from each lie inside `a`.
                    unsafe { memmove(a_src, a_dst, len) };
                    // SAFETY: `from < 200`: an in-bounds offset into `b`.
                    let b_src = unsafe { b.as_ptr().add(from) };
                    // SAFETY: `to < 200`: an in-bounds offset into `b`.
                    let b_dst = unsafe { b.as_mut_ptr().add(to) };
                    // SAFETY: `len` bytes from each lie inside `b`.
                    unsafe { std::ptr::copy(b_src, b_dst, len) };
                    assert_eq!(a, b, "len {len} from {from} to {to}");
                }
            }
        }
    }
}
