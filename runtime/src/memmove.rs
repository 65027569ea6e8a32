//! A copy with `memmove` semantics for the hot paths' small copies (a
//! native put or get, whose buffer may be a slice of a segment it also
//! reads; a Short or small Medium into a ring cell), with up to 16 bytes
//! done inline. A call into libc's `memmove` for 8 bytes cost about 25
//! instructions (call, PLT, size dispatch), also for 0 bytes; two
//! overlapping unaligned loads and two stores cover every length from
//! `n/2` to `n`.

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
    // SAFETY (all arms): every access lies in the first `len` bytes of
    // `src` or `dst` (the caller's promise), unaligned accesses are
    // `read_unaligned` / `write_unaligned`, and both loads come before
    // either store, so overlapping ranges copy as memmove does.
    unsafe {
        match len {
            0 => {}
            1 => *dst = *src,
            8 => (dst as *mut u64).write_unaligned((src as *const u64).read_unaligned()),
            2..=3 => {
                let (a, b) = (
                    (src as *const u16).read_unaligned(),
                    (src.add(len - 2) as *const u16).read_unaligned(),
                );
                (dst as *mut u16).write_unaligned(a);
                (dst.add(len - 2) as *mut u16).write_unaligned(b);
            }
            4..=7 => {
                let (a, b) = (
                    (src as *const u32).read_unaligned(),
                    (src.add(len - 4) as *const u32).read_unaligned(),
                );
                (dst as *mut u32).write_unaligned(a);
                (dst.add(len - 4) as *mut u32).write_unaligned(b);
            }
            9..=16 => {
                let (a, b) = (
                    (src as *const u64).read_unaligned(),
                    (src.add(len - 8) as *const u64).read_unaligned(),
                );
                (dst as *mut u64).write_unaligned(a);
                (dst.add(len - 8) as *mut u64).write_unaligned(b);
            }
            _ => std::ptr::copy(src, dst, len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::memmove;

    /// Every length up to 40 at every pair of offsets, overlapping both
    /// ways, against `std::ptr::copy`.
    #[test]
    fn same_as_ptr_copy() {
        for len in 0..40 {
            for from in 0..24 {
                for to in 0..24 {
                    let init: Vec<u8> = (0..80u8).map(|i| i.wrapping_mul(37)).collect();
                    let (mut a, mut b) = (init.clone(), init);
                    // SAFETY: from/to + len < 80, inside each vector.
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
