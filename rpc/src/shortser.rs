//! Postcard's bytes of a small value written straight into a Short's
//! words: a serde [`Serializer`](serde::Serializer) for the fast path's
//! [`Stack`] that makes exactly the bytes
//! `postcard::to_slice` makes, for the shapes small arguments and results
//! have (integers, `bool`, floats, `()`, `Option`, tuples, structs,
//! newtypes, unit and newtype enum variants), with no flavor between the
//! value and the words (postcard's serializer writes a varint into a
//! buffer, then hands it to the flavor a slice at a time).
//!
//! Anything else (strings, sequences, maps, other enum variants) is
//! [`Unsupported`](Why::Unsupported) and [`encode_small`] encodes it
//! with postcard through the [`Stack`] flavor as before; a value
//! longer than [`FAST_BYTES`] is
//! [`Full`](Why::Full) (it takes the buffered path). serde stays the
//! contract: the target decodes these bytes with postcard.

use crate::fast::{Stack, FAST_BYTES};
use serde::ser::{self, Impossible, Serialize};
use std::fmt;

/// Why a value was not encoded here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// A shape this serializer leaves to postcard.
    Unsupported,
    /// Longer than a Short carries.
    Full,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::Unsupported => "a shape the Short encoder leaves to postcard",
            Why::Full => "longer than a Short carries",
        })
    }
}

impl std::error::Error for Why {}

impl ser::Error for Why {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Why::Unsupported
    }
}

/// The value's postcard bytes into `st` (from empty): `Err` leaves `st`
/// to be reset by the caller.
#[inline]
pub(crate) fn encode<T: Serialize + ?Sized>(v: &T, st: &mut Stack) -> Result<(), Why> {
    v.serialize(Enc(st))
}

/// Encode `v` into `st` (empty) if its postcard bytes fit a Short: with
/// this module's serializer for the shapes it knows,
/// else with postcard through the [`Stack`] flavor. False (and `st`
/// empty) if they do not fit, or `v` does not encode.
#[inline]
pub(crate) fn encode_small<T: serde::Serialize + ?Sized>(v: &T, st: &mut Stack) -> bool {
    match encode(v, st) {
        Ok(()) => true,
        Err(why) => {
            *st = Stack::default();
            why == Why::Unsupported
                && (postcard::serialize_with_flavor(v, &mut *st).is_ok() || {
                    *st = Stack::default();
                    false
                })
        }
    }
}

/// Postcard of an unsupported shape.
type No = Impossible<(), Why>;

/// The serializer: writes into the borrowed [`Stack`].
pub(crate) struct Enc<'a>(&'a mut Stack);

impl Enc<'_> {
    #[inline]
    fn byte(&mut self, b: u8) -> Result<(), Why> {
        let at = self.0.len;
        if at >= FAST_BYTES {
            return Err(Why::Full);
        }
        self.0.words[(at / 8) & 1] |= u64::from(b) << (8 * (at % 8));
        self.0.len = at + 1;
        Ok(())
    }

    /// Postcard's varint (LEB128, low groups first).
    #[inline]
    fn varint(&mut self, mut v: u128) -> Result<(), Why> {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80)?;
            v >>= 7;
        }
        self.byte(v as u8)
    }

    /// A varint of at most 64 bits (no 128-bit shifts on the common path).
    #[inline]
    fn varint64(&mut self, mut v: u64) -> Result<(), Why> {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80)?;
            v >>= 7;
        }
        self.byte(v as u8)
    }

    #[inline]
    fn bytes(&mut self, b: &[u8]) -> Result<(), Why> {
        b.iter().try_for_each(|&x| self.byte(x))
    }
}

/// Signed integers up to 64 bits: zigzag (`(v << 1) ^ (v >> bits-1)`,
/// as the unsigned type of the width), then a varint.
macro_rules! zigzag {
    ($($f:ident: $t:ty as $u:ty),*) => {
        $(#[inline]
        fn $f(mut self, v: $t) -> Result<(), Why> {
            self.varint64(((v << 1) ^ (v >> (<$t>::BITS - 1))) as $u as u64)
        })*
    };
}

/// Unsigned integers of 16 to 64 bits: a varint.
macro_rules! unsigned {
    ($($f:ident: $t:ty),*) => {
        $(#[inline]
        fn $f(mut self, v: $t) -> Result<(), Why> {
            self.varint64(v as u64)
        })*
    };
}

impl<'a> ser::Serializer for Enc<'a> {
    type Ok = ();
    type Error = Why;
    type SerializeSeq = No;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = No;
    type SerializeMap = No;
    type SerializeStruct = Self;
    type SerializeStructVariant = No;

    #[inline]
    fn serialize_bool(mut self, v: bool) -> Result<(), Why> {
        self.byte(u8::from(v))
    }
    #[inline]
    fn serialize_i8(mut self, v: i8) -> Result<(), Why> {
        self.byte(v as u8)
    }
    zigzag!(serialize_i16: i16 as u16, serialize_i32: i32 as u32, serialize_i64: i64 as u64);
    #[inline]
    fn serialize_i128(mut self, v: i128) -> Result<(), Why> {
        self.varint(((v << 1) ^ (v >> 127)) as u128)
    }
    #[inline]
    fn serialize_u8(mut self, v: u8) -> Result<(), Why> {
        self.byte(v)
    }
    unsigned!(serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);
    #[inline]
    fn serialize_u128(mut self, v: u128) -> Result<(), Why> {
        self.varint(v)
    }
    #[inline]
    fn serialize_f32(mut self, v: f32) -> Result<(), Why> {
        self.bytes(&v.to_le_bytes())
    }
    #[inline]
    fn serialize_f64(mut self, v: f64) -> Result<(), Why> {
        self.bytes(&v.to_le_bytes())
    }
    fn serialize_char(self, _v: char) -> Result<(), Why> {
        Err(Why::Unsupported)
    }
    fn serialize_str(self, _v: &str) -> Result<(), Why> {
        Err(Why::Unsupported)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Why> {
        Err(Why::Unsupported)
    }
    #[inline]
    fn serialize_none(mut self) -> Result<(), Why> {
        self.byte(0)
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(mut self, value: &T) -> Result<(), Why> {
        self.byte(1)?;
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Result<(), Why> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Why> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_variant(
        mut self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
    ) -> Result<(), Why> {
        self.varint64(u64::from(index))
    }
    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Why> {
        value.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<(), Why> {
        self.varint64(u64::from(index))?;
        value.serialize(self)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<No, Why> {
        Err(Why::Unsupported)
    }
    #[inline]
    fn serialize_tuple(self, _len: usize) -> Result<Self, Why> {
        Ok(self)
    }
    #[inline]
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, Why> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<No, Why> {
        Err(Why::Unsupported)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<No, Why> {
        Err(Why::Unsupported)
    }
    #[inline]
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, Why> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<No, Why> {
        Err(Why::Unsupported)
    }
    fn collect_str<T: fmt::Display + ?Sized>(self, _value: &T) -> Result<(), Why> {
        Err(Why::Unsupported)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

impl ser::SerializeTuple for Enc<'_> {
    type Ok = ();
    type Error = Why;
    #[inline]
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Why> {
        value.serialize(Enc(self.0))
    }
    #[inline]
    fn end(self) -> Result<(), Why> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Enc<'_> {
    type Ok = ();
    type Error = Why;
    #[inline]
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Why> {
        value.serialize(Enc(self.0))
    }
    #[inline]
    fn end(self) -> Result<(), Why> {
        Ok(())
    }
}

impl ser::SerializeStruct for Enc<'_> {
    type Ok = ();
    type Error = Why;
    #[inline]
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Why> {
        value.serialize(Enc(self.0))
    }
    #[inline]
    fn end(self) -> Result<(), Why> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// The bytes `encode` made, or why not.
    fn ours<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, Why> {
        let mut st = Stack::default();
        encode(v, &mut st)?;
        let mut b = [0u8; FAST_BYTES];
        b[..8].copy_from_slice(&st.words[0].to_le_bytes());
        b[8..].copy_from_slice(&st.words[1].to_le_bytes());
        Ok(b[..st.len].to_vec())
    }

    /// `encode` makes postcard's bytes, or says `Full` exactly when
    /// postcard's are longer than a Short carries.
    fn same<T: Serialize + ?Sized + fmt::Debug>(v: &T) {
        let want = postcard::to_allocvec(v).unwrap();
        match ours(v) {
            Ok(got) => assert_eq!(got, want, "{v:?}"),
            Err(Why::Full) => assert!(want.len() > FAST_BYTES, "{v:?}"),
            Err(Why::Unsupported) => panic!("{v:?} should be supported"),
        }
    }

    #[derive(Serialize, Debug)]
    struct Point {
        x: i32,
        y: u16,
        on: bool,
    }

    #[derive(Serialize, Debug)]
    struct Id(u64);

    #[derive(Serialize, Debug)]
    struct Unit;

    #[derive(Serialize, Debug)]
    enum E {
        A,
        B(u32),
        C,
    }

    #[test]
    fn rpcrt4_short_encoder_makes_postcards_bytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for sh in 0..64 {
            let v = next() >> sh;
            same(&v);
            same(&(v as i64));
            same(&(v as u32));
            same(&(v as i32));
            same(&(v as u16));
            same(&(v as i16));
            same(&(v as u8));
            same(&(v as i8));
            same(&(u128::from(v) << 64 | u128::from(next())));
            same(&(-(v as i128)));
            same(&(v as f64));
            same(&(v as f32));
            same(&(v, v >> 32));
            same(&Some(v as u32));
            same(&None::<u64>);
            same(&Point {
                x: v as i32,
                y: (v >> 40) as u16,
                on: v & 1 == 1,
            });
            same(&Id(v));
            same(&E::B(v as u32));
        }
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            same(&v);
            same(&(v as i64));
            same(&(v as i64).wrapping_neg());
        }
        same(&());
        same(&Unit);
        same(&E::A);
        same(&E::C);
        same(&true);
        same(&(1u8, (2u16, 3u32), [4u8; 2].map(u64::from).len() as u64));
    }

    #[test]
    fn rpcrt4_short_encoder_leaves_other_shapes_to_postcard() {
        assert_eq!(ours("ab"), Err(Why::Unsupported));
        assert_eq!(ours(&'x'), Err(Why::Unsupported));
        assert_eq!(ours(&vec![1u8]), Err(Why::Unsupported));
        assert_eq!(ours(&[1u8, 2]), Ok(vec![1, 2]), "an array is a tuple");
        assert_eq!(ours(&[7u64; 3]), Ok(vec![7; 3]));
        assert_eq!(ours(&[u64::MAX; 2]), Err(Why::Full));
        let m: std::collections::BTreeMap<u8, u8> = [(1, 2)].into();
        assert_eq!(ours(&m), Err(Why::Unsupported));
    }
}
