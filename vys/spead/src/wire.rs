//! SPEAD-64-48 packets: the 8-byte header, item pointers, and the
//! checked decode of one datagram (no allocation, no panic on any input).
//!
//! A packet is, all big-endian: magic `0x53`, version 4, the item pointer
//! width in bytes (2: 64 bits less the 48 heap address bits), the heap
//! address width in bytes (6), two reserved bytes, the number of item
//! pointers (u16); then that many 64-bit item pointers; then the payload.
//! An item pointer is one bit "immediate", a 15-bit item id and 48 bits of
//! value (immediate) or heap address (addressed). Every heap packet
//! carries the heap counter, the payload offset and the payload length
//! as immediates, and usually the heap length.

use std::fmt;

/// First byte of every packet.
pub const MAGIC: u8 = 0x53;
/// Protocol version.
pub const VERSION: u8 = 4;
/// Heap address bits of this flavour (spead2's default, SPEAD-64-48).
pub const HEAP_ADDRESS_BITS: u32 = 48;
/// Item pointer width in bytes, as the header states it.
pub const ITEM_POINTER_WIDTH: u8 = 2;
/// Heap address width in bytes, as the header states it.
pub const HEAP_ADDRESS_WIDTH: u8 = 6;
/// Bytes of the packet header.
pub const HEADER_BYTES: usize = 8;
/// Bytes of one item pointer.
pub const POINTER_BYTES: usize = 8;
/// The largest value or address an item pointer carries.
pub const ADDRESS_MASK: u64 = (1 << HEAP_ADDRESS_BITS) - 1;
/// The largest item id.
pub const MAX_ID: u16 = 0x7fff;

/// Item id: padding (ignored).
pub const NULL_ID: u16 = 0x00;
/// Item id: the heap counter (immediate).
pub const HEAP_CNT_ID: u16 = 0x01;
/// Item id: the heap length in bytes (immediate).
pub const HEAP_LENGTH_ID: u16 = 0x02;
/// Item id: this packet's payload offset in the heap (immediate).
pub const PAYLOAD_OFFSET_ID: u16 = 0x03;
/// Item id: this packet's payload length (immediate).
pub const PAYLOAD_LENGTH_ID: u16 = 0x04;
/// Item id: an item descriptor (addressed; its value is one packet).
pub const DESCRIPTOR_ID: u16 = 0x05;
/// Item id: stream control (immediate, one of the `CTRL_*` values).
pub const STREAM_CTRL_ID: u16 = 0x06;
/// Descriptor item: the described item's name.
pub const DESCRIPTOR_NAME_ID: u16 = 0x10;
/// Descriptor item: its description.
pub const DESCRIPTOR_DESCRIPTION_ID: u16 = 0x11;
/// Descriptor item: its shape.
pub const DESCRIPTOR_SHAPE_ID: u16 = 0x12;
/// Descriptor item: its format (SPEAD field codes and bit lengths).
pub const DESCRIPTOR_FORMAT_ID: u16 = 0x13;
/// Descriptor item: the described item's id.
pub const DESCRIPTOR_ID_ID: u16 = 0x14;
/// Descriptor item: a numpy header (spead2's extension; instead of a format).
pub const DESCRIPTOR_DTYPE_ID: u16 = 0x15;

/// Stream control: the stream starts.
pub const CTRL_STREAM_START: u64 = 0;
/// Stream control: descriptors are sent again.
pub const CTRL_DESCRIPTOR_REISSUE: u64 = 1;
/// Stream control: the stream stops (spead2's `get_end`).
pub const CTRL_STREAM_STOP: u64 = 2;
/// Stream control: descriptors changed.
pub const CTRL_DESCRIPTOR_UPDATE: u64 = 3;

/// One item pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemPointer {
    /// Item id (15 bits).
    pub id: u16,
    /// The value is in the pointer itself (else it is a heap address).
    pub immediate: bool,
    /// The 48-bit value or address.
    pub value: u64,
}

impl ItemPointer {
    /// The pointer in its 64 bits.
    pub fn from_raw(raw: u64) -> ItemPointer {
        ItemPointer {
            id: ((raw >> HEAP_ADDRESS_BITS) & u64::from(MAX_ID)) as u16,
            immediate: raw >> 63 == 1,
            value: raw & ADDRESS_MASK,
        }
    }

    /// Its 64 bits (the id and the value are masked to their widths).
    pub fn to_raw(self) -> u64 {
        (u64::from(self.immediate) << 63)
            | ((u64::from(self.id) & u64::from(MAX_ID)) << HEAP_ADDRESS_BITS)
            | (self.value & ADDRESS_MASK)
    }
}

/// Why a datagram is not a SPEAD-64-48 heap packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// Shorter than the header, or than the item pointers it announces.
    Truncated,
    /// Not `0x53`.
    Magic,
    /// Not version 4.
    Version,
    /// Another flavour (not 48 heap address bits).
    Flavour,
    /// A heap counter, payload offset or payload length missing or not immediate.
    MissingField,
    /// One of those fields given twice, with different values.
    ConflictingField,
    /// The payload length passes the datagram's end.
    PayloadPastEnd,
    /// The payload passes the heap length it states.
    PayloadPastHeap,
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PacketError::Truncated => "truncated packet",
            PacketError::Magic => "not a SPEAD packet (magic)",
            PacketError::Version => "not SPEAD version 4",
            PacketError::Flavour => "not SPEAD-64-48",
            PacketError::MissingField => "heap counter, payload offset or length missing",
            PacketError::ConflictingField => "a heap field given twice",
            PacketError::PayloadPastEnd => "payload length past the datagram",
            PacketError::PayloadPastHeap => "payload past the heap length",
        })
    }
}

impl std::error::Error for PacketError {}

/// One decoded packet, borrowing the datagram.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// Heap counter.
    pub heap_cnt: u64,
    /// Heap length, if the packet states it.
    pub heap_length: Option<u64>,
    /// Offset of this payload in the heap.
    pub payload_offset: u64,
    /// The payload.
    pub payload: &'a [u8],
    pointers: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Every item pointer of the packet, the heap fields (ids 1 to 4)
    /// included, in order.
    pub fn pointers(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        self.pointers
            .chunks_exact(POINTER_BYTES)
            .map(|c| ItemPointer::from_raw(be_u64(c)))
    }

    /// Number of item pointers.
    pub fn pointer_count(&self) -> usize {
        self.pointers.len() / POINTER_BYTES
    }
}

/// Big-endian value of up to 8 bytes (more: the last 8).
pub fn be_u64(b: &[u8]) -> u64 {
    let b = &b[b.len().saturating_sub(8)..];
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

fn set(field: &mut Option<u64>, v: u64) -> Result<(), PacketError> {
    match *field {
        Some(old) if old != v => Err(PacketError::ConflictingField),
        _ => {
            *field = Some(v);
            Ok(())
        }
    }
}

/// Decode one datagram. Every length is checked before use; bytes after
/// the stated payload are ignored.
pub fn decode_packet(d: &[u8]) -> Result<Packet<'_>, PacketError> {
    if d.len() < HEADER_BYTES {
        return Err(PacketError::Truncated);
    }
    if d[0] != MAGIC {
        return Err(PacketError::Magic);
    }
    if d[1] != VERSION {
        return Err(PacketError::Version);
    }
    if d[2] != ITEM_POINTER_WIDTH || d[3] != HEAP_ADDRESS_WIDTH {
        return Err(PacketError::Flavour);
    }
    let n = usize::from(u16::from_be_bytes([d[6], d[7]]));
    let end = HEADER_BYTES + n * POINTER_BYTES;
    if d.len() < end {
        return Err(PacketError::Truncated);
    }
    let pointers = &d[HEADER_BYTES..end];
    let (mut cnt, mut len, mut off, mut plen) = (None, None, None, None);
    for c in pointers.chunks_exact(POINTER_BYTES) {
        let p = ItemPointer::from_raw(be_u64(c));
        let field = match p.id {
            HEAP_CNT_ID => &mut cnt,
            HEAP_LENGTH_ID => &mut len,
            PAYLOAD_OFFSET_ID => &mut off,
            PAYLOAD_LENGTH_ID => &mut plen,
            _ => continue,
        };
        if !p.immediate {
            return Err(PacketError::MissingField);
        }
        set(field, p.value)?;
    }
    let (Some(heap_cnt), Some(payload_offset), Some(plen)) = (cnt, off, plen) else {
        return Err(PacketError::MissingField);
    };
    let rest = &d[end..];
    let plen = usize::try_from(plen).map_err(|_| PacketError::PayloadPastEnd)?;
    if plen > rest.len() {
        return Err(PacketError::PayloadPastEnd);
    }
    if let Some(l) = len {
        if payload_offset
            .checked_add(plen as u64)
            .is_none_or(|e| e > l)
        {
            return Err(PacketError::PayloadPastHeap);
        }
    }
    Ok(Packet {
        heap_cnt,
        heap_length: len,
        payload_offset,
        payload: &rest[..plen],
        pointers,
    })
}

/// Write a packet header announcing `pointers` item pointers.
pub fn put_header(out: &mut Vec<u8>, pointers: u16) {
    out.extend_from_slice(&[MAGIC, VERSION, ITEM_POINTER_WIDTH, HEAP_ADDRESS_WIDTH, 0, 0]);
    out.extend_from_slice(&pointers.to_be_bytes());
}

/// Write one item pointer.
pub fn put_pointer(out: &mut Vec<u8>, p: ItemPointer) {
    out.extend_from_slice(&p.to_raw().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(ptrs: &[ItemPointer], payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_header(&mut v, ptrs.len() as u16);
        for p in ptrs {
            put_pointer(&mut v, *p);
        }
        v.extend_from_slice(payload);
        v
    }

    fn imm(id: u16, value: u64) -> ItemPointer {
        ItemPointer {
            id,
            immediate: true,
            value,
        }
    }

    #[test]
    fn pointer_bits() {
        // spead2's own encoding of an immediate 0x1600 = 0x0102030405
        let raw = 0x9600_0001_0203_0405u64;
        let p = ItemPointer::from_raw(raw);
        assert_eq!(p, imm(0x1600, 0x01_0203_0405));
        assert_eq!(p.to_raw(), raw);
    }

    #[test]
    fn good_packet() {
        let d = packet(
            &[
                imm(HEAP_CNT_ID, 7),
                imm(HEAP_LENGTH_ID, 10),
                imm(PAYLOAD_OFFSET_ID, 4),
                imm(PAYLOAD_LENGTH_ID, 3),
            ],
            &[1, 2, 3, 99],
        );
        let p = decode_packet(&d).unwrap();
        assert_eq!(
            (p.heap_cnt, p.heap_length, p.payload_offset),
            (7, Some(10), 4)
        );
        assert_eq!(p.payload, &[1, 2, 3]);
        assert_eq!(p.pointer_count(), 4);
    }

    #[test]
    fn hostile_packets() {
        let base = [
            imm(HEAP_CNT_ID, 7),
            imm(HEAP_LENGTH_ID, 10),
            imm(PAYLOAD_OFFSET_ID, 0),
            imm(PAYLOAD_LENGTH_ID, 3),
        ];
        let good = packet(&base, &[1, 2, 3]);
        // every truncation
        for n in 0..good.len() {
            assert!(decode_packet(&good[..n]).is_err(), "{n}");
        }
        let mut d = good.clone();
        d[0] = 0x54;
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::Magic);
        let mut d = good.clone();
        d[1] = 3;
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::Version);
        let mut d = good.clone();
        d[3] = 5;
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::Flavour);
        // pointer count far past the end
        let mut d = good.clone();
        d[6] = 0xff;
        d[7] = 0xff;
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::Truncated);
        // payload length lies
        let d = packet(
            &[
                base[0],
                base[1],
                base[2],
                imm(PAYLOAD_LENGTH_ID, ADDRESS_MASK),
            ],
            &[1, 2, 3],
        );
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::PayloadPastEnd);
        // payload past the heap length (offset near the top: no overflow)
        let d = packet(
            &[
                base[0],
                base[1],
                imm(PAYLOAD_OFFSET_ID, ADDRESS_MASK),
                base[3],
            ],
            &[1, 2, 3],
        );
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::PayloadPastHeap);
        // conflicting and missing fields
        let d = packet(
            &[base[0], imm(HEAP_CNT_ID, 8), base[2], base[3]],
            &[1, 2, 3],
        );
        assert_eq!(
            decode_packet(&d).unwrap_err(),
            PacketError::ConflictingField
        );
        let d = packet(&[base[0], base[1], base[3]], &[1, 2, 3]);
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::MissingField);
        let mut addressed = base[0];
        addressed.immediate = false;
        let d = packet(&[addressed, base[1], base[2], base[3]], &[1, 2, 3]);
        assert_eq!(decode_packet(&d).unwrap_err(), PacketError::MissingField);
    }
}
