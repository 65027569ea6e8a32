//! Remote atomics on 32- and 64-bit integers: fetch-add, swap,
//! compare-and-swap. Native: a hardware atomic on the peer's mapped
//! segment. AM path: the owner applies the same hardware atomic to its own
//! segment in a handler, so both paths agree with each other and with local
//! atomics on the same word.

use bytemuck::Pod;
use splitrt_runtime::fabric::SegmentRef;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An integer type remote atomics work on.
pub trait AtomicInt: Pod + sealed::Sealed {
    /// Width in bytes (4 or 8).
    const WIDTH: u64;
    /// Bits, zero-extended.
    fn to_bits(self) -> u64;
    /// From (truncated) bits.
    fn from_bits(b: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! atomic_int {
    ($t:ty, $u:ty, $w:expr) => {
        impl sealed::Sealed for $t {}
        impl AtomicInt for $t {
            const WIDTH: u64 = $w;
            fn to_bits(self) -> u64 {
                self as $u as u64
            }
            fn from_bits(b: u64) -> Self {
                b as $u as $t
            }
        }
    };
}
atomic_int!(u32, u32, 4);
atomic_int!(i32, u32, 4);
atomic_int!(u64, u64, 8);
atomic_int!(i64, u64, 8);

/// One atomic operation on raw bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    FetchAdd(u64),
    Swap(u64),
    CompareSwap { current: u64, new: u64 },
}

impl AtomicOp {
    /// (opcode, a, b) for the wire.
    pub fn encode(self) -> (u64, u64, u64) {
        match self {
            AtomicOp::FetchAdd(v) => (0, v, 0),
            AtomicOp::Swap(v) => (1, v, 0),
            AtomicOp::CompareSwap { current, new } => (2, current, new),
        }
    }
    pub fn decode(op: u64, a: u64, b: u64) -> Option<Self> {
        match op {
            0 => Some(AtomicOp::FetchAdd(a)),
            1 => Some(AtomicOp::Swap(a)),
            2 => Some(AtomicOp::CompareSwap { current: a, new: b }),
            _ => None,
        }
    }
}

/// Apply `op` at `off` of `seg`; returns the previous value, or None for an
/// unsupported width.
///
/// # Safety
/// `[off, off + width)` lies in `seg`, `off` is a multiple of `width`, and
/// the fabric that handed out `seg` is alive (the caller holds its `Pgas`
/// or endpoint).
pub(crate) unsafe fn apply_atomic(
    seg: SegmentRef,
    off: u64,
    width: u64,
    op: AtomicOp,
) -> Option<u64> {
    const O: Ordering = Ordering::AcqRel;
    // SAFETY: the caller checked that [off, off + width) lies in the mapped
    // segment (this function's contract): an in-bounds offset.
    let p = unsafe { seg.base().add(off as usize) };
    match width {
        8 => {
            // SAFETY: p..p + 8 lies in the mapped segment, alive
            // meanwhile, and off is a multiple of 8, so the cast is
            // aligned (this function's contract); every access to this
            // word by splitrt is atomic.
            let a = unsafe { &*(p as *const AtomicU64) };
            Some(match op {
                AtomicOp::FetchAdd(v) => a.fetch_add(v, O),
                AtomicOp::Swap(v) => a.swap(v, O),
                AtomicOp::CompareSwap { current, new } => a
                    .compare_exchange(current, new, O, Ordering::Acquire)
                    .unwrap_or_else(|x| x),
            })
        }
        4 => {
            // SAFETY: as for 8 above, with a width and alignment of 4.
            let a = unsafe { &*(p as *const AtomicU32) };
            Some(match op {
                AtomicOp::FetchAdd(v) => a.fetch_add(v as u32, O),
                AtomicOp::Swap(v) => a.swap(v as u32, O),
                AtomicOp::CompareSwap { current, new } => a
                    .compare_exchange(current as u32, new as u32, O, Ordering::Acquire)
                    .unwrap_or_else(|x| x),
            } as u64)
        }
        _ => None,
    }
}
