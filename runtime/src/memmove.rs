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
    // SAFETY: every access lies in the first `len` bytes of `src` or
    // `dst` (the caller's promise; `ends` gets `size_of::<T>() <= len`).
    unsafe {
        // Few branches on every path: a chain of compares (one per size
        // class, smallest first) cost 256 B copies twice libc's time on
        // the 2026-11-26 EPYC, in same-process A/B runs; past 128 B it is
        // one compare and libc's own copy.
        if len > 128 {
            std::ptr::copy(src, dst, len)
        } else if len >= 16 {
            if len > 64 {
                ends::<[u128; 4]>(src, dst, len)
            } else if len > 32 {
                ends::<[u128; 2]>(src, dst, len)
            } else {
                ends::<u128>(src, dst, len)
            }
        } else if len >= 8 {
            ends::<u64>(src, dst, len)
        } else if len >= 4 {
            ends::<u32>(src, dst, len)
        } else if len >= 2 {
            ends::<u16>(src, dst, len)
        } else if len == 1 {
            *dst = *src
        }
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
    let last = len - std::mem::size_of::<T>();
    // SAFETY: both `T`s lie in the first `len` bytes (size_of::<T>() <=
    // len); unaligned accesses use read_unaligned / write_unaligned.
    unsafe {
        let (a, b) = (
            (src as *const T).read_unaligned(),
            (src.add(last) as *const T).read_unaligned(),
        );
        (dst as *mut T).write_unaligned(a);
        (dst.add(last) as *mut T).write_unaligned(b);
    }
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
                    // SAFETY: from/to + len < 200, inside each vector.
                    unsafe {
                        memmove(a.as_ptr().add(from), a.as_mut_ptr().add(to), len);
                        std::ptr::copy(b.as_ptr().add(from), b.as_mut_ptr().add(to), len);
                    }
                    assert_eq!(a, b, "len {len} from {from} to {to}");
                }
            }
        }
    }
}
