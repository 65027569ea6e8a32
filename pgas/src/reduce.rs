//! Reduction operators for `reduce` / `allreduce`.

use bytemuck::Pod;

/// A reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise xor (integers only).
    BitXor,
}

/// An element type reductions work on.
pub trait Reduce: Pod {
    /// `a op b`, or `None` if `op` does not apply to this type.
    fn combine(op: Op, a: Self, b: Self) -> Option<Self>;
}

macro_rules! int_reduce {
    ($($t:ty),*) => {$(
        impl Reduce for $t {
            fn combine(op: Op, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    Op::BitAnd => a & b,
                    Op::BitOr => a | b,
                    Op::BitXor => a ^ b,
                })
            }
        }
    )*};
}
int_reduce!(u8, u16, u32, u64, i8, i16, i32, i64, usize, isize);

macro_rules! float_reduce {
    ($($t:ty),*) => {$(
        impl Reduce for $t {
            fn combine(op: Op, a: Self, b: Self) -> Option<Self> {
                match op {
                    Op::Sum => Some(a + b),
                    Op::Prod => Some(a * b),
                    Op::Min => Some(a.min(b)),
                    Op::Max => Some(a.max(b)),
                    _ => None,
                }
            }
        }
    )*};
}
float_reduce!(f32, f64);
