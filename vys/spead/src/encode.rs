//! Heaps into packets, as spead2 sends them: every packet carries the
//! heap counter, heap length, payload offset and payload length; the
//! first also carries every item pointer (immediates in the pointer,
//! addressed items at their offset in the payload, in the order given).

use crate::wire::{self, ItemPointer};
use std::fmt;

/// An item's value to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemValue<'a> {
    /// At most 48 bits, in the item pointer.
    Immediate(u64),
    /// Bytes in the heap's payload.
    Bytes(&'a [u8]),
}

/// One item to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapItem<'a> {
    /// Item id (at most 0x7fff).
    pub id: u16,
    /// Its value.
    pub value: ItemValue<'a>,
}

impl<'a> HeapItem<'a> {
    /// An item.
    pub fn new(id: u16, value: ItemValue<'a>) -> HeapItem<'a> {
        HeapItem { id, value }
    }
}

/// Why a heap cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// An id above 0x7fff, an immediate or heap counter above 48 bits.
    OutOfRange,
    /// The heap is 2^48 bytes or more.
    TooLarge,
    /// The packet size leaves no room for the item pointers and a byte.
    PacketTooSmall,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EncodeError::OutOfRange => "item id, immediate or heap counter out of range",
            EncodeError::TooLarge => "heap too large",
            EncodeError::PacketTooSmall => "packet size too small for the item pointers",
        })
    }
}

impl std::error::Error for EncodeError {}

fn imm(id: u16, value: u64) -> ItemPointer {
    ItemPointer {
        id,
        immediate: true,
        value,
    }
}

/// Append the packets of heap `cnt` holding `items` to `out`, none
/// longer than `max_packet` bytes.
pub fn encode_heap(
    cnt: u64,
    items: &[HeapItem<'_>],
    max_packet: usize,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), EncodeError> {
    if cnt > wire::ADDRESS_MASK {
        return Err(EncodeError::OutOfRange);
    }
    let mut pointers = Vec::with_capacity(items.len());
    let mut length = 0usize;
    for it in items {
        if it.id > wire::MAX_ID {
            return Err(EncodeError::OutOfRange);
        }
        match it.value {
            ItemValue::Immediate(v) => {
                if v > wire::ADDRESS_MASK {
                    return Err(EncodeError::OutOfRange);
                }
                pointers.push(imm(it.id, v));
            }
            ItemValue::Bytes(b) => {
                pointers.push(ItemPointer {
                    id: it.id,
                    immediate: false,
                    value: length as u64,
                });
                length = length.checked_add(b.len()).ok_or(EncodeError::TooLarge)?;
            }
        }
    }
    if length as u64 > wire::ADDRESS_MASK {
        return Err(EncodeError::TooLarge);
    }
    let fixed = wire::HEADER_BYTES + 4 * wire::POINTER_BYTES;
    let first_room = max_packet
        .checked_sub(fixed + pointers.len() * wire::POINTER_BYTES)
        .filter(|&r| r > 0 || length == 0)
        .ok_or(EncodeError::PacketTooSmall)?;
    let room = max_packet - fixed;
    // the payload, gathered lazily: (item index, offset in it)
    let mut payload_items = items.iter().filter_map(|i| match i.value {
        ItemValue::Bytes(b) => Some(b),
        ItemValue::Immediate(_) => None,
    });
    let mut cur: &[u8] = &[];
    let mut offset = 0usize;
    let mut first = true;
    while first || offset < length {
        let take = (length - offset).min(if first { first_room } else { room });
        let extra = if first { pointers.len() } else { 0 };
        let mut p = Vec::with_capacity(fixed + extra * wire::POINTER_BYTES + take);
        wire::put_header(&mut p, (4 + extra) as u16);
        wire::put_pointer(&mut p, imm(wire::HEAP_CNT_ID, cnt));
        wire::put_pointer(&mut p, imm(wire::HEAP_LENGTH_ID, length as u64));
        wire::put_pointer(&mut p, imm(wire::PAYLOAD_OFFSET_ID, offset as u64));
        wire::put_pointer(&mut p, imm(wire::PAYLOAD_LENGTH_ID, take as u64));
        if first {
            for q in &pointers {
                wire::put_pointer(&mut p, *q);
            }
        }
        let mut left = take;
        while left > 0 {
            while cur.is_empty() {
                cur = payload_items.next().expect("payload bytes counted above");
            }
            let n = cur.len().min(left);
            p.extend_from_slice(&cur[..n]);
            cur = &cur[n..];
            left -= n;
        }
        offset += take;
        first = false;
        out.push(p);
    }
    Ok(())
}

/// Append the packets of a stream control heap (`wire::CTRL_*`), shaped
/// as spead2's: the control item and one byte of padding.
pub fn encode_control(
    cnt: u64,
    control: u64,
    max_packet: usize,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), EncodeError> {
    let items = [
        HeapItem::new(wire::STREAM_CTRL_ID, ItemValue::Immediate(control)),
        HeapItem::new(wire::NULL_ID, ItemValue::Bytes(&[0])),
    ];
    encode_heap(cnt, &items, max_packet, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_spead2s_stop_heap() {
        // spead2 4.5.1's `ItemGroup.get_end()` sent as heap 2 (captured)
        let spead2 = "530402060000000680010000000000028002000000000001800300000000000080040000000000018006000000000002000000000000000000";
        let mut v = Vec::new();
        encode_control(2, wire::CTRL_STREAM_STOP, 1472, &mut v).unwrap();
        let hex: String = v[0].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(v.len(), 1);
        assert_eq!(hex, spead2);
    }

    #[test]
    fn bounds() {
        let mut v = Vec::new();
        let big = HeapItem::new(0x8000, ItemValue::Immediate(0));
        assert_eq!(
            encode_heap(1, &[big], 1472, &mut v),
            Err(EncodeError::OutOfRange)
        );
        let imm = HeapItem::new(0x1000, ItemValue::Immediate(1 << 48));
        assert_eq!(
            encode_heap(1, &[imm], 1472, &mut v),
            Err(EncodeError::OutOfRange)
        );
        let b = HeapItem::new(0x1000, ItemValue::Bytes(&[1]));
        assert_eq!(
            encode_heap(1, &[b], 48, &mut v),
            Err(EncodeError::PacketTooSmall)
        );
        assert!(v.is_empty());
        encode_heap(1, &[b], 49, &mut v).unwrap();
        assert_eq!(v.len(), 1);
    }
}
