//! Remote atomics on 32- and 64-bit integers (signed and unsigned) and
//! floats: the operations of GASNet-EX atomic domains and OpenSHMEM.
//! Native: a hardware atomic (or, for floats, a compare-and-swap loop on
//! the bits) on the peer's mapped segment. AM path: the owner applies the
//! same operation to its own segment in a handler, so both paths agree with
//! each other and with local atomics on the same word.

use bytemuck::Pod;
use splitrt_runtime::fabric::SegmentRef;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

/// A value remote atomics work on: a 32- or 64-bit integer or float.
pub trait AtomicWord: Pod + sealed::Sealed {
    /// Width in bytes (4 or 8).
    const WIDTH: u64;
    /// How the bits are read (for min, max and add).
    #[doc(hidden)]
    const KIND: NumKind;
    /// Bits, zero-extended.
    fn to_bits(self) -> u64;
    /// From (truncated) bits.
    fn from_bits(b: u64) -> Self;
}

/// An integer type remote atomics work on (`u32`, `i32`, `u64`, `i64`):
/// every operation, min and max signed or unsigned by type.
pub trait AtomicInt: AtomicWord {}

/// A float type remote atomics work on (`f32`, `f64`): add, min, max,
/// load, store, swap and compare-swap (on the bits).
pub trait AtomicFloat: AtomicWord {}

/// How an atomic word's bits are read.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumKind {
    /// Unsigned integer.
    Unsigned = 0,
    /// Two's complement integer.
    Signed = 1,
    /// IEEE 754 float.
    Float = 2,
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! atomic_int {
    ($t:ty, $u:ty, $w:expr, $k:ident) => {
        impl sealed::Sealed for $t {}
        impl AtomicWord for $t {
            const WIDTH: u64 = $w;
            const KIND: NumKind = NumKind::$k;
            fn to_bits(self) -> u64 {
                self as $u as u64
            }
            fn from_bits(b: u64) -> Self {
                b as $u as $t
            }
        }
        impl AtomicInt for $t {}
    };
}
atomic_int!(u32, u32, 4, Unsigned);
atomic_int!(i32, u32, 4, Signed);
atomic_int!(u64, u64, 8, Unsigned);
atomic_int!(i64, u64, 8, Signed);

macro_rules! atomic_float {
    ($t:ty, $u:ty, $w:expr) => {
        impl sealed::Sealed for $t {}
        impl AtomicWord for $t {
            const WIDTH: u64 = $w;
            const KIND: NumKind = NumKind::Float;
            fn to_bits(self) -> u64 {
                <$t>::to_bits(self) as u64
            }
            fn from_bits(b: u64) -> Self {
                <$t>::from_bits(b as $u)
            }
        }
        impl AtomicFloat for $t {}
    };
}
atomic_float!(f32, u32, 4);
atomic_float!(f64, u64, 8);

/// The reply slot of a non-fetching atomic over the AM path: the reply
/// carries only a status and is counted for `sync`, as a put's is.
pub(crate) const NO_FETCH: u64 = u64::MAX;

/// Operation codes (the wire's and the model's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Add = 0,
    Sub = 1,
    And = 2,
    Or = 3,
    Xor = 4,
    Min = 5,
    Max = 6,
    Load = 7,
    Store = 8,
    Swap = 9,
    CompareSwap = 10,
}

const CODES: [Code; 11] = [
    Code::Add,
    Code::Sub,
    Code::And,
    Code::Or,
    Code::Xor,
    Code::Min,
    Code::Max,
    Code::Load,
    Code::Store,
    Code::Swap,
    Code::CompareSwap,
];

/// One atomic operation on raw bits: what, on which kind of number, with
/// operands `a` (and `b`: the new value of a compare-swap, `a` its
/// expected one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicOp {
    pub code: Code,
    pub kind: NumKind,
    pub a: u64,
    pub b: u64,
}

impl AtomicOp {
    /// An operation on values of type `T`.
    pub fn of<T: AtomicWord>(code: Code, a: T, b: T) -> Self {
        AtomicOp {
            code,
            kind: T::KIND,
            a: a.to_bits(),
            b: b.to_bits(),
        }
    }

    /// (opcode, a, b) for the wire: the code in the low byte, the kind
    /// in the next.
    pub fn encode(self) -> (u64, u64, u64) {
        (self.code as u64 | (self.kind as u64) << 8, self.a, self.b)
    }

    /// A peer's (opcode, a, b); `None`: no such operation (an unknown
    /// code or kind, or a bitwise / subtract operation on a float).
    pub fn decode(op: u64, a: u64, b: u64) -> Option<Self> {
        let code = *CODES.get(usize::try_from(op & 0xff).ok()?)?;
        let kind = match op >> 8 {
            0 => NumKind::Unsigned,
            1 => NumKind::Signed,
            2 => NumKind::Float,
            _ => return None,
        };
        let float_ok = !matches!(code, Code::Sub | Code::And | Code::Or | Code::Xor);
        (kind != NumKind::Float || float_ok).then_some(AtomicOp { code, kind, a, b })
    }

    /// The new value of a word holding `old` (`width` 4 or 8), as the
    /// operation computes it; `None`: leave the word alone (a load, or a
    /// compare-swap that does not match). The one definition of every
    /// operation's result; hardware atomics must agree with it.
    pub fn next(self, old: u64, width: u64) -> Option<u64> {
        let mask = if width == 4 {
            u32::MAX as u64
        } else {
            u64::MAX
        };
        let (a, old) = (self.a & mask, old & mask);
        let signed = |x: u64| {
            if width == 4 {
                x as u32 as i32 as i64
            } else {
                x as i64
            }
        };
        let float = |x: u64| {
            if width == 4 {
                f32::from_bits(x as u32) as f64
            } else {
                f64::from_bits(x)
            }
        };
        let unfloat = |x: f64| {
            if width == 4 {
                (x as f32).to_bits() as u64
            } else {
                x.to_bits()
            }
        };
        let v = match (self.code, self.kind) {
            (Code::Load, _) => return None,
            (Code::CompareSwap, _) => return (old == a).then_some(self.b & mask),
            (Code::Store | Code::Swap, _) => a,
            (Code::Add, NumKind::Float) if width == 4 => {
                (f32::from_bits(old as u32) + f32::from_bits(a as u32)).to_bits() as u64
            }
            (Code::Add, NumKind::Float) => (f64::from_bits(old) + f64::from_bits(a)).to_bits(),
            (Code::Add, _) => old.wrapping_add(a),
            (Code::Sub, _) => old.wrapping_sub(a),
            (Code::And, _) => old & a,
            (Code::Or, _) => old | a,
            (Code::Xor, _) => old ^ a,
            (Code::Min, NumKind::Unsigned) => old.min(a),
            (Code::Max, NumKind::Unsigned) => old.max(a),
            (Code::Min, NumKind::Signed) => signed(old).min(signed(a)) as u64,
            (Code::Max, NumKind::Signed) => signed(old).max(signed(a)) as u64,
            // f64::min / max on the widened value: exact for f32 (every
            // f32 is an f64, and the result is one of the operands)
            (Code::Min, NumKind::Float) => unfloat(float(old).min(float(a))),
            (Code::Max, NumKind::Float) => unfloat(float(old).max(float(a))),
        };
        Some(v & mask)
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
    // SAFETY: the caller checked that [off, off + width) lies in the mapped
    // segment (this function's contract): an in-bounds offset.
    let p = unsafe { seg.base().add(off as usize) };
    match width {
        // SAFETY: p..p + 8 lies in the mapped segment, alive meanwhile,
        // and off is a multiple of 8 (this function's contract).
        8 => Some(unsafe { apply_word::<AtomicU64>(p, op) }),
        // SAFETY: as for 8, with a width and alignment of 4.
        4 => Some(unsafe { apply_word::<AtomicU32>(p, op) }),
        _ => None,
    }
}

const O: Ordering = Ordering::AcqRel;

/// A compare-and-swap loop applying `op` (the operations without a
/// hardware instruction: floats, and any other through [`AtomicOp::next`]).
fn cas_loop(
    load: impl Fn() -> u64,
    cas: impl Fn(u64, u64) -> Result<u64, u64>,
    op: AtomicOp,
    width: u64,
) -> u64 {
    let mut old = load();
    loop {
        let Some(new) = op.next(old, width) else {
            return old;
        };
        if new == old {
            // nothing changes (a min already smaller): a load
            return old;
        }
        match cas(old, new) {
            Ok(_) => return old,
            Err(now) => old = now,
        }
    }
}

/// The hardware atomics of one word width, on zero-extended `u64`
/// operands (truncated to the width) and results: `AtomicU32` and
/// `AtomicU64`, their signed min / max through the signed atomic of the
/// same width over the same word.
trait HwWord {
    /// Width in bytes.
    const WIDTH: u64;
    fn load(&self) -> u64;
    fn swap(&self, v: u64) -> u64;
    fn compare_swap(&self, old: u64, new: u64) -> u64;
    fn compare_swap_weak(&self, old: u64, new: u64) -> Result<u64, u64>;
    fn add(&self, v: u64) -> u64;
    fn sub(&self, v: u64) -> u64;
    fn and(&self, v: u64) -> u64;
    fn or(&self, v: u64) -> u64;
    fn xor(&self, v: u64) -> u64;
    fn min(&self, v: u64) -> u64;
    fn max(&self, v: u64) -> u64;
    fn signed_min(&self, v: u64) -> u64;
    fn signed_max(&self, v: u64) -> u64;
}

macro_rules! hw_word {
    ($a:ty, $s:ty, $u:ty, $i:ty, $w:expr) => {
        impl HwWord for $a {
            const WIDTH: u64 = $w;
            fn load(&self) -> u64 {
                <$a>::load(self, Ordering::Acquire) as u64
            }
            fn swap(&self, v: u64) -> u64 {
                <$a>::swap(self, v as $u, O) as u64
            }
            fn compare_swap(&self, old: u64, new: u64) -> u64 {
                self.compare_exchange(old as $u, new as $u, O, Ordering::Acquire)
                    .unwrap_or_else(|x| x) as u64
            }
            fn compare_swap_weak(&self, old: u64, new: u64) -> Result<u64, u64> {
                self.compare_exchange_weak(old as $u, new as $u, O, Ordering::Acquire)
                    .map(|x| x as u64)
                    .map_err(|x| x as u64)
            }
            hw_word!(@fetch $u; add fetch_add, sub fetch_sub, and fetch_and, or fetch_or,
                xor fetch_xor, min fetch_min, max fetch_max);
            fn signed_min(&self, v: u64) -> u64 {
                self.signed().fetch_min(v as $u as $i, O) as $u as u64
            }
            fn signed_max(&self, v: u64) -> u64 {
                self.signed().fetch_max(v as $u as $i, O) as $u as u64
            }
        }
        impl SignedTwin for $a {
            type Signed = $s;
            fn signed(&self) -> &$s {
                // SAFETY: the same word, the same width: the signed and
                // unsigned atomics of a width share a layout.
                unsafe { &*(self as *const $a as *const $s) }
            }
        }
    };
    // the read-modify-writes with a hardware instruction: `$m(v)` is
    // `$f(v truncated)`, zero-extended
    (@fetch $u:ty; $($m:ident $f:ident),*) => {
        $(fn $m(&self, v: u64) -> u64 {
            self.$f(v as $u, O) as u64
        })*
    };
}

/// The signed atomic over the same word (for signed min / max).
trait SignedTwin {
    /// `AtomicI32` / `AtomicI64`.
    type Signed;
    fn signed(&self) -> &Self::Signed;
}

hw_word!(AtomicU64, AtomicI64, u64, i64, 8);
hw_word!(AtomicU32, AtomicI32, u32, i32, 4);

/// [`apply_atomic`] on a word of `A::WIDTH` bytes (operands truncated to
/// it); returns the previous value, zero-extended.
///
/// # Safety
/// `p` is valid for `A::WIDTH` bytes, aligned to it, and every access to
/// the word by splitrt is atomic while it is used here.
unsafe fn apply_word<A: HwWord>(p: *mut u8, op: AtomicOp) -> u64 {
    // SAFETY: valid and aligned for the width (this function's contract),
    // which is the atomic's size and alignment.
    let a = unsafe { &*(p as *const A) };
    let v = op.a;
    match (op.code, op.kind) {
        (Code::Load, _) => a.load(),
        (Code::Store | Code::Swap, _) => a.swap(v),
        (Code::CompareSwap, _) => a.compare_swap(v, op.b),
        (Code::Add, NumKind::Unsigned | NumKind::Signed) => a.add(v),
        (Code::Sub, _) => a.sub(v),
        (Code::And, _) => a.and(v),
        (Code::Or, _) => a.or(v),
        (Code::Xor, _) => a.xor(v),
        (Code::Min, NumKind::Unsigned) => a.min(v),
        (Code::Max, NumKind::Unsigned) => a.max(v),
        (Code::Min, NumKind::Signed) => a.signed_min(v),
        (Code::Max, NumKind::Signed) => a.signed_max(v),
        (Code::Add | Code::Min | Code::Max, NumKind::Float) => cas_loop(
            || a.load(),
            |old, new| a.compare_swap_weak(old, new),
            op,
            A::WIDTH,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation through the hardware path agrees with the model
    /// ([`AtomicOp::next`]), on both widths and all kinds.
    #[test]
    #[cfg(target_endian = "little")]
    fn hardware_agrees_with_the_model() {
        let vals64: [u64; 6] = [0, 1, 5, u64::MAX, 1 << 63, 0x8000_0001];
        let floats: [f64; 7] = [0.0, -0.0, 1.5, -2.25, f64::NAN, f64::INFINITY, 1e300];
        for kind in [NumKind::Unsigned, NumKind::Signed, NumKind::Float] {
            for code in CODES {
                let Some(_) = AtomicOp::decode(code as u64 | (kind as u64) << 8, 0, 0) else {
                    continue;
                };
                for width in [4u64, 8] {
                    let vals: Vec<u64> = if kind == NumKind::Float {
                        floats
                            .iter()
                            .map(|&f| {
                                if width == 4 {
                                    (f as f32).to_bits() as u64
                                } else {
                                    f.to_bits()
                                }
                            })
                            .collect()
                    } else {
                        vals64.to_vec()
                    };
                    for &old in &vals {
                        for &a in &vals {
                            let op = AtomicOp {
                                code,
                                kind,
                                a,
                                b: 7,
                            };
                            let mask = if width == 4 { u32::MAX as u64 } else { !0 };
                            let mut word = [old & mask];
                            let p = word.as_mut_ptr() as *mut u8;
                            // little-endian: the low half is the 32-bit word
                            let got_old = if width == 4 {
                                // SAFETY: `word` is 8 bytes, 8-aligned,
                                // only touched here.
                                unsafe { apply_word::<AtomicU32>(p, op) }
                            } else {
                                // SAFETY: as above.
                                unsafe { apply_word::<AtomicU64>(p, op) }
                            };
                            let now = if width == 4 { word[0] & mask } else { word[0] };
                            let want = op.next(old & mask, width).unwrap_or(old & mask);
                            assert_eq!(got_old, old & mask, "{op:?} w{width}");
                            // A NaN result's sign and payload are not
                            // specified by Rust (Miri picks them at
                            // random): any NaN equals any NaN; everything
                            // else compares by bits.
                            let is_nan = |b: u64| {
                                kind == NumKind::Float
                                    && if width == 4 {
                                        f32::from_bits(b as u32).is_nan()
                                    } else {
                                        f64::from_bits(b).is_nan()
                                    }
                            };
                            // min / max of +0.0 and -0.0 may give either
                            // zero (as f32::min / f64::min do).
                            let is_zero = |b: u64| {
                                kind == NumKind::Float
                                    && matches!(op.code, Code::Min | Code::Max)
                                    && if width == 4 {
                                        f32::from_bits(b as u32) == 0.0
                                    } else {
                                        f64::from_bits(b) == 0.0
                                    }
                            };
                            let same =
                                (is_nan(now) && is_nan(want)) || (is_zero(now) && is_zero(want));
                            if !same {
                                assert_eq!(now, want, "{op:?} w{width} old {old:#x}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn decode_refuses_unknown_codes_and_bitwise_floats() {
        assert!(AtomicOp::decode(11, 0, 0).is_none());
        assert!(AtomicOp::decode(0xff, 0, 0).is_none());
        assert!(AtomicOp::decode(3 << 8, 0, 0).is_none());
        assert!(AtomicOp::decode(Code::Xor as u64 | 2 << 8, 0, 0).is_none());
        assert!(AtomicOp::decode(Code::Sub as u64 | 2 << 8, 0, 0).is_none());
        assert!(AtomicOp::decode(u64::MAX, 0, 0).is_none());
        let op = AtomicOp::of(Code::Max, -3i64, 0);
        let (c, a, b) = op.encode();
        assert_eq!(AtomicOp::decode(c, a, b), Some(op));
    }

    #[test]
    fn float_min_max_follow_rust() {
        let op = |code, a: f64| AtomicOp::of(code, a, 0.0);
        let nan = f64::NAN.to_bits();
        // NaN in the word: the operand wins; NaN operand: the word stays
        assert_eq!(op(Code::Min, 2.0).next(nan, 8), Some(2f64.to_bits()));
        assert_eq!(
            op(Code::Max, f64::NAN).next(3f64.to_bits(), 8),
            Some(3f64.to_bits())
        );
        assert_eq!(
            AtomicOp::of(Code::Min, -1f32, 0.0).next(2f32.to_bits() as u64, 4),
            Some((-1f32).to_bits() as u64)
        );
    }
}
