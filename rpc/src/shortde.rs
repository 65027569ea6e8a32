//! Small values read back from postcard's bytes without postcard's
//! deserializer: a serde [`Deserializer`] over a borrowed slice for the
//! shapes [`shortser`](crate::shortser) writes (integers up to 64 bits,
//! `bool`, floats, `()`, `Option`, tuples, structs, newtypes).
//!
//! It only ever says yes when postcard would give the same value from
//! the same bytes: anything else (another shape, an over-long or
//! out-of-range varint, a tag that is not 0 or 1, bytes left over, bytes
//! missing) is `None`, and the caller decodes with postcard as before (so
//! its errors, and their messages, are postcard's).

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use std::fmt;

/// The value `bytes` hold (all of them), or `None`: decode with postcard.
#[inline]
pub(crate) fn decode<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Option<T> {
    let mut d = Dec { b: bytes, at: 0 };
    let v = T::deserialize(&mut d).ok()?;
    (d.at == bytes.len()).then_some(v)
}

/// Not decoded here (any reason).
#[derive(Debug)]
pub(crate) struct No;

impl fmt::Display for No {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to postcard")
    }
}

impl std::error::Error for No {}

impl de::Error for No {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        No
    }
}

/// The reader: `b[at..]` is still to read.
pub(crate) struct Dec<'de> {
    b: &'de [u8],
    at: usize,
}

impl<'de> Dec<'de> {
    #[inline]
    fn byte(&mut self) -> Result<u8, No> {
        let b = *self.b.get(self.at).ok_or(No)?;
        self.at += 1;
        Ok(b)
    }

    /// A varint of at most `max` bytes whose value is at most `top`.
    #[inline]
    fn varint(&mut self, max: usize, top: u64) -> Result<u64, No> {
        let mut v = 0u64;
        for i in 0..max {
            let b = self.byte()?;
            // the tenth byte of a u64 carries its top bit only
            if i == 9 && b > 1 {
                return Err(No);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return if v <= top { Ok(v) } else { Err(No) };
            }
        }
        Err(No)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], No> {
        let end = self.at.checked_add(N).ok_or(No)?;
        let a = self.b.get(self.at..end).ok_or(No)?;
        self.at = end;
        a.try_into().map_err(|_| No)
    }
}

/// Zigzag back to a signed value.
#[inline]
fn unzig(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Elements of a tuple or struct, `left` still to come.
struct Seq<'a, 'de> {
    d: &'a mut Dec<'de>,
    left: usize,
}

impl<'de> SeqAccess<'de> for Seq<'_, 'de> {
    type Error = No;
    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, No> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.d).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

macro_rules! no {
    ($($f:ident),*) => {
        $(fn $f<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, No> {
            Err(No)
        })*
    };
}

/// The varint integers: `$f` reads a varint of at most `$max` bytes and
/// value `$top` and hands `$conv` of it to the visitor's `$visit`.
macro_rules! varints {
    ($($f:ident => $visit:ident: $max:expr, $top:expr, $conv:expr);*) => {
        $(#[inline]
        fn $f<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
            #[allow(clippy::redundant_closure_call)]
            v.$visit(($conv)(self.varint($max, $top)?))
        })*
    };
}

impl<'de> Deserializer<'de> for &mut Dec<'de> {
    type Error = No;

    no!(
        deserialize_any,
        deserialize_i128,
        deserialize_u128,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any
    );

    #[inline]
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        match self.byte()? {
            0 => v.visit_bool(false),
            1 => v.visit_bool(true),
            _ => Err(No),
        }
    }
    #[inline]
    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        v.visit_i8(self.byte()? as i8)
    }
    varints!(
        deserialize_i16 => visit_i16: 3, u64::from(u16::MAX), |x| unzig(x) as i16;
        deserialize_i32 => visit_i32: 5, u64::from(u32::MAX), |x| unzig(x) as i32;
        deserialize_i64 => visit_i64: 10, u64::MAX, unzig;
        deserialize_u16 => visit_u16: 3, u64::from(u16::MAX), |x| x as u16;
        deserialize_u32 => visit_u32: 5, u64::from(u32::MAX), |x| x as u32;
        deserialize_u64 => visit_u64: 10, u64::MAX, |x| x
    );
    #[inline]
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        v.visit_u8(self.byte()?)
    }
    #[inline]
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        v.visit_f32(f32::from_le_bytes(self.array()?))
    }
    #[inline]
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        v.visit_f64(f64::from_le_bytes(self.array()?))
    }
    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        match self.byte()? {
            0 => v.visit_none(),
            1 => v.visit_some(self),
            _ => Err(No),
        }
    }
    #[inline]
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, No> {
        v.visit_unit()
    }
    #[inline]
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, No> {
        v.visit_unit()
    }
    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, No> {
        v.visit_newtype_struct(self)
    }
    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, No> {
        v.visit_seq(Seq { d: self, left: len })
    }
    #[inline]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, No> {
        v.visit_seq(Seq { d: self, left: len })
    }
    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, No> {
        v.visit_seq(Seq {
            d: self,
            left: fields.len(),
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _v: V,
    ) -> Result<V::Value, No> {
        Err(No)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Point {
        x: i32,
        y: u16,
        on: bool,
        z: Option<i16>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Id(u64);

    /// Whenever `decode` gives a value from `b`, postcard gives the same
    /// from all of `b`; `must` says it must decode here.
    fn agrees<T>(b: &[u8], must: bool)
    where
        T: for<'a> Deserialize<'a> + PartialEq + fmt::Debug,
    {
        match decode::<T>(b) {
            Some(v) => {
                let (p, rest) = postcard::take_from_bytes::<T>(b).expect("postcard decodes it");
                assert!(rest.is_empty(), "{b:?}");
                assert_eq!(v, p, "{b:?}");
            }
            None => assert!(
                !must,
                "{b:?} should decode as {}",
                std::any::type_name::<T>()
            ),
        }
    }

    #[test]
    fn rpcrt4_short_decoder_agrees_with_postcard() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for sh in 0..64 {
            let v = next() >> sh;
            let p = Point {
                x: v as i32,
                y: (v >> 20) as u16,
                on: v & 1 == 0,
                z: (v & 2 == 0).then_some(v as i16),
            };
            agrees::<u64>(&postcard::to_allocvec(&v).unwrap(), true);
            agrees::<i64>(&postcard::to_allocvec(&(v as i64)).unwrap(), true);
            agrees::<(u32, i8)>(&postcard::to_allocvec(&(v as u32, v as i8)).unwrap(), true);
            agrees::<f64>(&postcard::to_allocvec(&(v as f64)).unwrap(), true);
            agrees::<f32>(&postcard::to_allocvec(&(v as f32)).unwrap(), true);
            agrees::<Point>(&postcard::to_allocvec(&p).unwrap(), true);
            agrees::<Id>(&postcard::to_allocvec(&Id(v)).unwrap(), true);
            agrees::<()>(&postcard::to_allocvec(&()).unwrap(), true);
        }
        // garbage: never a value postcard would not give
        for n in 0..4000 {
            let b: Vec<u8> = (0..n % 13).map(|_| next() as u8).collect();
            agrees::<u64>(&b, false);
            agrees::<u16>(&b, false);
            agrees::<i32>(&b, false);
            agrees::<bool>(&b, false);
            agrees::<Option<u8>>(&b, false);
            agrees::<Point>(&b, false);
            agrees::<(u8, u32)>(&b, false);
        }
        // over-long and out-of-range varints, bytes left over: postcard's
        assert_eq!(decode::<u64>(&[0xff; 10]), None);
        assert_eq!(decode::<u16>(&[0xff, 0xff, 0x07]), None);
        assert_eq!(decode::<u64>(&[1, 2]), None);
        assert_eq!(decode::<u64>(&[]), None);
        assert_eq!(decode::<String>(&[1, b'a']), None);
        assert_eq!(decode::<u64>(&[0xac, 0x02]), Some(300));
        // a padded varint: whatever postcard makes of it
        agrees::<u64>(&[0x80, 0x00], false);
        agrees::<u16>(&[0x80, 0x80, 0x00], false);
        agrees::<u32>(&[0xff, 0xff, 0xff, 0xff, 0x0f], true);
        agrees::<u32>(&[0xff, 0xff, 0xff, 0xff, 0x1f], false);
    }
}
