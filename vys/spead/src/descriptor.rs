//! Item descriptors, as spead2 sends and expects them: the value of an
//! item with id [`wire::DESCRIPTOR_ID`] is one complete SPEAD packet
//! whose items are the described item's id (immediate), name,
//! description, format, shape and, for a numpy dtype, a numpy header
//! (addressed). A shape dimension is 7 bytes (a flag byte, bit 0 set for
//! a variable dimension, then 48 bits of size); a format field is 3
//! bytes (a type code, then 16 bits of bit length: the item pointer
//! width).

use crate::encode::{encode_heap, HeapItem, ItemValue};
use crate::wire::{self, ItemPointer};
use std::fmt;

/// Bytes of one shape dimension.
pub const SHAPE_DIM_BYTES: usize = 1 + wire::HEAP_ADDRESS_WIDTH as usize;
/// Bytes of one format field.
pub const FORMAT_FIELD_BYTES: usize = 1 + wire::ITEM_POINTER_WIDTH as usize;
/// The longest name, description or numpy header accepted.
pub const MAX_TEXT: usize = 4096;
/// The most dimensions or format fields accepted.
pub const MAX_FIELDS: usize = 32;

/// An item's descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The described item's id.
    pub id: u16,
    /// Its name (spead2's `ItemGroup` key).
    pub name: String,
    /// Its description.
    pub description: String,
    /// Dimensions (`None`: variable).
    pub shape: Vec<Option<u64>>,
    /// SPEAD format fields: type code (`u`, `i`, `f`, `c`, `b`) and bits
    /// (at most 65535).
    pub format: Vec<(u8, u32)>,
    /// A numpy header (`{'descr': '<i4', 'fortran_order': False, 'shape': (4,)}`),
    /// spead2's alternative to `format`.
    pub numpy_header: Option<String>,
}

/// Why a descriptor could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DescriptorError {
    /// Its packet is not a valid packet.
    Packet(wire::PacketError),
    /// Not the whole descriptor in its one packet.
    NotOnePacket,
    /// No id item.
    NoId,
    /// An item points outside the packet's payload.
    BadAddress,
    /// A shape or format of a length that is not a whole number of fields,
    /// or more than [`MAX_FIELDS`] of them.
    BadFields,
    /// Text that is not ASCII, or longer than [`MAX_TEXT`].
    BadText,
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescriptorError::Packet(e) => write!(f, "descriptor packet: {e}"),
            DescriptorError::NotOnePacket => f.write_str("descriptor not one whole packet"),
            DescriptorError::NoId => f.write_str("descriptor without an item id"),
            DescriptorError::BadAddress => f.write_str("descriptor item outside its payload"),
            DescriptorError::BadFields => f.write_str("descriptor shape or format malformed"),
            DescriptorError::BadText => f.write_str("descriptor text not ASCII or too long"),
        }
    }
}

impl std::error::Error for DescriptorError {}

fn text(b: &[u8]) -> Result<String, DescriptorError> {
    if b.len() > MAX_TEXT || !b.is_ascii() {
        return Err(DescriptorError::BadText);
    }
    Ok(String::from_utf8_lossy(b).into_owned())
}

impl Descriptor {
    /// The descriptor's packet (the value of a [`wire::DESCRIPTOR_ID`] item).
    pub fn encode(&self) -> Vec<u8> {
        let mut shape = Vec::with_capacity(self.shape.len() * SHAPE_DIM_BYTES);
        for d in &self.shape {
            shape.push(u8::from(d.is_none()));
            shape.extend_from_slice(&d.unwrap_or(0).to_be_bytes()[2..]);
        }
        let mut format = Vec::with_capacity(self.format.len() * FORMAT_FIELD_BYTES);
        for &(code, bits) in &self.format {
            format.push(code);
            format.extend_from_slice(&bits.min(u32::from(u16::MAX)).to_be_bytes()[2..]);
        }
        let mut items = vec![
            HeapItem::new(
                wire::DESCRIPTOR_ID_ID,
                ItemValue::Immediate(u64::from(self.id)),
            ),
            HeapItem::new(
                wire::DESCRIPTOR_NAME_ID,
                ItemValue::Bytes(self.name.as_bytes()),
            ),
            HeapItem::new(
                wire::DESCRIPTOR_DESCRIPTION_ID,
                ItemValue::Bytes(self.description.as_bytes()),
            ),
            HeapItem::new(wire::DESCRIPTOR_FORMAT_ID, ItemValue::Bytes(&format)),
            HeapItem::new(wire::DESCRIPTOR_SHAPE_ID, ItemValue::Bytes(&shape)),
        ];
        if let Some(h) = &self.numpy_header {
            items.push(HeapItem::new(
                wire::DESCRIPTOR_DTYPE_ID,
                ItemValue::Bytes(h.as_bytes()),
            ));
        }
        let mut out = Vec::with_capacity(1);
        // one packet: the whole heap fits any size given here
        encode_heap(1, &items, usize::MAX >> 1, &mut out).expect("descriptor within bounds");
        out.pop().expect("one packet")
    }

    /// Decode a descriptor's packet; every length checked.
    pub fn decode(b: &[u8]) -> Result<Descriptor, DescriptorError> {
        let p = wire::decode_packet(b).map_err(DescriptorError::Packet)?;
        if p.payload_offset != 0 || p.heap_length.is_some_and(|l| l != p.payload.len() as u64) {
            return Err(DescriptorError::NotOnePacket);
        }
        let payload = p.payload;
        let ptrs: Vec<ItemPointer> = p.pointers().collect();
        // an addressed item runs to the next addressed item's address
        // (pointer order), the last to the payload's end
        let addressed: Vec<u64> = ptrs
            .iter()
            .filter(|q| !q.immediate)
            .map(|q| q.value)
            .collect();
        let mut k = 0;
        let spans: Vec<(u64, u64)> = ptrs
            .iter()
            .map(|q| {
                if q.immediate {
                    return (0, 0);
                }
                k += 1;
                let end = addressed.get(k).copied();
                (q.value, end.unwrap_or(payload.len() as u64))
            })
            .collect();
        let bytes = |(a, end): (u64, u64)| -> Result<&[u8], DescriptorError> {
            let a = usize::try_from(a).map_err(|_| DescriptorError::BadAddress)?;
            let end = usize::try_from(end).map_err(|_| DescriptorError::BadAddress)?;
            payload.get(a..end).ok_or(DescriptorError::BadAddress)
        };
        let mut d = Descriptor {
            id: 0,
            name: String::new(),
            description: String::new(),
            shape: Vec::new(),
            format: Vec::new(),
            numpy_header: None,
        };
        let mut id = None;
        for (q, &span) in ptrs.iter().zip(&spans) {
            match q.id {
                wire::DESCRIPTOR_ID_ID => {
                    let v = if q.immediate {
                        q.value
                    } else {
                        wire::be_u64(bytes(span)?)
                    };
                    id = Some(u16::try_from(v).map_err(|_| DescriptorError::NoId)?);
                }
                wire::DESCRIPTOR_NAME_ID if !q.immediate => d.name = text(bytes(span)?)?,
                wire::DESCRIPTOR_DESCRIPTION_ID if !q.immediate => {
                    d.description = text(bytes(span)?)?
                }
                wire::DESCRIPTOR_DTYPE_ID if !q.immediate => {
                    let b = bytes(span)?;
                    if !b.is_empty() {
                        d.numpy_header = Some(text(b)?);
                    }
                }
                wire::DESCRIPTOR_SHAPE_ID if !q.immediate => {
                    let b = bytes(span)?;
                    if b.len() % SHAPE_DIM_BYTES != 0 || b.len() / SHAPE_DIM_BYTES > MAX_FIELDS {
                        return Err(DescriptorError::BadFields);
                    }
                    d.shape = b
                        .chunks_exact(SHAPE_DIM_BYTES)
                        .map(|c| (c[0] & 1 == 0).then(|| wire::be_u64(&c[1..])))
                        .collect();
                }
                wire::DESCRIPTOR_FORMAT_ID if !q.immediate => {
                    let b = bytes(span)?;
                    if b.len() % FORMAT_FIELD_BYTES != 0
                        || b.len() / FORMAT_FIELD_BYTES > MAX_FIELDS
                    {
                        return Err(DescriptorError::BadFields);
                    }
                    d.format = b
                        .chunks_exact(FORMAT_FIELD_BYTES)
                        .map(|c| (c[0], wire::be_u64(&c[1..]) as u32))
                        .collect();
                }
                _ => {}
            }
        }
        d.id = id.ok_or(DescriptorError::NoId)?;
        Ok(d)
    }

    /// The numpy header's dtype, order and shape, if there is one and it
    /// is a simple dtype (`'<i4'`, `'<c8'`, ...).
    pub fn numpy(&self) -> Option<NumpyHeader> {
        NumpyHeader::parse(self.numpy_header.as_deref()?)
    }
}

/// The three fields of a simple numpy header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumpyHeader {
    /// The dtype string (`<i4`, `>u8`, `<c8`, `|u1`).
    pub descr: String,
    /// Fortran order.
    pub fortran_order: bool,
    /// Dimensions.
    pub shape: Vec<u64>,
}

impl NumpyHeader {
    /// Parse `{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3)}`
    /// (keys in any order; a structured dtype is refused).
    pub fn parse(h: &str) -> Option<NumpyHeader> {
        if h.len() > MAX_TEXT {
            return None;
        }
        let after = |key: &str| -> Option<&str> {
            let i = h.find(key)?;
            let rest = h[i + key.len()..].trim_start();
            Some(rest.strip_prefix(':')?.trim_start())
        };
        let d = after("'descr'")?;
        let q = d.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let d = &d[1..];
        let descr = d[..d.find(q)?].to_string();
        let fo = after("'fortran_order'")?;
        let fortran_order = if fo.starts_with("True") {
            true
        } else if fo.starts_with("False") {
            false
        } else {
            return None;
        };
        let s = after("'shape'")?.strip_prefix('(')?;
        let s = &s[..s.find(')')?];
        let shape = s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| x.trim_end_matches('L').parse::<u64>().ok())
            .collect::<Option<Vec<u64>>>()?;
        if shape.len() > MAX_FIELDS {
            return None;
        }
        Some(NumpyHeader {
            descr,
            fortran_order,
            shape,
        })
    }

    /// The header spead2 writes for a C-order array.
    pub fn format(descr: &str, shape: &[u64]) -> String {
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        let tuple = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // spead2 4.5.1's descriptors (captured from `send.BytesStream`): a
    // u48 scalar by format, an int32 [2, 3, 2] array by numpy dtype.
    const TIMESTAMP: &str = "53040206000000098001000000000001800200000000000e8003000000000000800400000000000e801400000000160000100000000000000011000000000009001300000000000b001200000000000e74696d657374616d707473750030";
    const XENG: &str = "530402060000000a8001000000000001800200000000005c8003000000000000800400000000005c801400000000180000100000000000000011000000000008001300000000000b001200000000000b001500000000002078656e675f7261777669730000000000000200000000000003000000000000027b276465736372273a20273c6934272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c20332c2032297d";

    #[test]
    fn decodes_spead2s_descriptors() {
        let t = Descriptor::decode(&unhex(TIMESTAMP)).unwrap();
        assert_eq!(t.id, 0x1600);
        assert_eq!(
            (t.name.as_str(), t.description.as_str()),
            ("timestamp", "ts")
        );
        assert_eq!(t.format, vec![(b'u', 48)]);
        assert!(t.shape.is_empty() && t.numpy_header.is_none());
        let x = Descriptor::decode(&unhex(XENG)).unwrap();
        assert_eq!((x.id, x.name.as_str()), (0x1800, "xeng_raw"));
        assert_eq!(x.shape, vec![Some(2), Some(3), Some(2)]);
        let n = x.numpy().unwrap();
        assert_eq!(n.descr, "<i4");
        assert!(!n.fortran_order);
        assert_eq!(n.shape, vec![2, 3, 2]);
    }

    #[test]
    fn encodes_as_spead2_does() {
        for hex in [TIMESTAMP, XENG] {
            let d = Descriptor::decode(&unhex(hex)).unwrap();
            assert_eq!(d.encode(), unhex(hex), "{}", d.name);
        }
        assert_eq!(
            NumpyHeader::format("<i4", &[2, 3, 2]),
            "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 2)}"
        );
        assert_eq!(
            NumpyHeader::format("<c8", &[4]),
            "{'descr': '<c8', 'fortran_order': False, 'shape': (4,)}"
        );
    }

    #[test]
    fn hostile_descriptors() {
        let good = unhex(XENG);
        for n in 0..good.len() {
            assert!(Descriptor::decode(&good[..n]).is_err(), "{n}");
        }
        // every single-byte corruption: an error or a descriptor, never a panic
        for i in 0..good.len() {
            let mut d = good.clone();
            d[i] ^= 0xa5;
            let _ = Descriptor::decode(&d);
        }
        assert!(NumpyHeader::parse(
            "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': ()}"
        )
        .is_none());
        assert!(
            NumpyHeader::parse("{'descr': '<i4', 'fortran_order': Nope, 'shape': ()}").is_none()
        );
        assert!(NumpyHeader::parse("{'descr").is_none());
        assert_eq!(
            NumpyHeader::parse("{'shape': (), 'descr': \"<u8\", 'fortran_order': True}").unwrap(),
            NumpyHeader {
                descr: "<u8".into(),
                fortran_order: true,
                shape: vec![]
            }
        );
    }
}
