//! Heap reassembly with bounded memory: packets in any order, at most
//! [`Limits::max_heaps`] heaps in flight (the oldest is given up as
//! incomplete when a new one arrives), each at most
//! [`Limits::max_heap_bytes`] long with at most [`Limits::max_items`]
//! items and [`Limits::max_fragments`] disjoint received ranges, and all
//! of them together holding at most [`Limits::max_bytes_in_flight`]. A
//! heap's buffer grows with the highest byte received, not with the length
//! its first packet states, so a few datagrams cannot make the reassembler
//! hold every heap's full length; one that would pass the bound gives up
//! the oldest other heaps first (reported [`Incomplete`]). A heap is
//! delivered only when every byte of its stated length arrived exactly
//! once; one that cannot be is reported [`Incomplete`], never delivered.

use crate::wire::{self, ItemPointer, Packet, PacketError};
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

/// The bounds of a [`Reassembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Heaps being reassembled at once.
    pub max_heaps: usize,
    /// Bytes of one heap's payload.
    pub max_heap_bytes: usize,
    /// Item pointers of one heap (the heap fields included).
    pub max_items: usize,
    /// Disjoint byte ranges received of one heap (adjacent ones merge).
    pub max_fragments: usize,
    /// Bytes held by all heaps in flight together (raised to
    /// `max_heap_bytes` if below, so one heap always fits).
    pub max_bytes_in_flight: usize,
}

impl Default for Limits {
    /// 8 heaps of at most 64 MiB, 1024 items, 8192 fragments, 128 MiB
    /// held in all.
    fn default() -> Limits {
        Limits {
            max_heaps: 8,
            max_heap_bytes: 64 << 20,
            max_items: 1024,
            max_fragments: 8192,
            max_bytes_in_flight: 128 << 20,
        }
    }
}

/// An item's value in a heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// The 48 bits of the item pointer.
    Immediate(u64),
    /// These bytes of the heap's payload.
    Addressed(Range<usize>),
}

/// One item of a complete heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Item id.
    pub id: u16,
    /// Its value.
    pub value: Value,
}

/// A complete heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heap {
    /// Heap counter.
    pub cnt: u64,
    /// Items other than the heap fields (ids 1 to 4) and padding (id 0),
    /// in the order of their pointers.
    pub items: Vec<Item>,
    /// The payload (the heap length's bytes).
    pub payload: Vec<u8>,
}

impl Heap {
    /// The first item with this id.
    pub fn item(&self, id: u16) -> Option<&Item> {
        self.items.iter().find(|i| i.id == id)
    }

    /// An addressed item's bytes (`None` for an immediate).
    pub fn bytes(&self, item: &Item) -> Option<&[u8]> {
        match &item.value {
            Value::Addressed(r) => self.payload.get(r.clone()),
            Value::Immediate(_) => None,
        }
    }

    /// The stream control value this heap carries, if any.
    pub fn control(&self) -> Option<u64> {
        match self.item(wire::STREAM_CTRL_ID)?.value {
            Value::Immediate(v) => Some(v),
            Value::Addressed(ref r) => self.payload.get(r.clone()).map(wire::be_u64),
        }
    }
}

/// A heap given up: evicted by a newer one, or flushed at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incomplete {
    /// Heap counter.
    pub cnt: u64,
    /// Payload bytes received.
    pub received: usize,
    /// The heap length stated, if any packet did.
    pub length: Option<u64>,
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Not a valid packet.
    Malformed(PacketError),
    /// A heap length other than an earlier packet of its heap stated, or
    /// one below the bytes already received.
    LengthMismatch,
    /// Past [`Limits::max_heap_bytes`].
    TooLarge,
    /// Past [`Limits::max_items`] or [`Limits::max_fragments`].
    TooManyParts,
    /// Bytes of the heap received before (a duplicate or an overlap), or
    /// a packet of a heap already delivered.
    Duplicate,
    /// A heap whose items point outside its payload (the heap is dropped).
    BadHeap,
}

impl fmt::Display for Drop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drop::Malformed(e) => write!(f, "{e}"),
            Drop::LengthMismatch => f.write_str("heap length differs between packets"),
            Drop::TooLarge => f.write_str("heap larger than the limit"),
            Drop::TooManyParts => f.write_str("too many items or fragments"),
            Drop::Duplicate => f.write_str("duplicate packet"),
            Drop::BadHeap => f.write_str("items outside the heap"),
        }
    }
}

/// What one packet did.
#[derive(Debug, Default)]
pub struct Pushed {
    /// The heap it completed.
    pub complete: Option<Heap>,
    /// The heaps it evicted (the oldest in flight, to make room for a new
    /// heap or for its bytes), oldest first.
    pub evicted: Vec<Incomplete>,
    /// Why it was dropped, if it was.
    pub dropped: Option<Drop>,
}

/// Counters of a [`Reassembler`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams pushed.
    pub packets: u64,
    /// Not SPEAD-64-48 heap packets.
    pub malformed: u64,
    /// Dropped as duplicates or overlaps.
    pub duplicates: u64,
    /// Dropped for a limit or a lying length.
    pub refused: u64,
    /// Heaps delivered.
    pub heaps: u64,
    /// Heaps given up (evicted or flushed) or dropped as bad.
    pub incomplete: u64,
}

struct Partial {
    cnt: u64,
    length: Option<usize>,
    payload: Vec<u8>,
    /// Disjoint, sorted, merged received ranges.
    frags: Vec<Range<usize>>,
    received: usize,
    /// (payload offset of its packet, order in the packet, pointer)
    pointers: Vec<(usize, usize, ItemPointer)>,
}

/// Heap counters remembered as delivered (late duplicates dropped).
const DONE_MEMORY: usize = 64;

/// Sans-I/O heap reassembly: push datagrams, get complete heaps.
pub struct Reassembler {
    limits: Limits,
    heaps: VecDeque<Partial>,
    /// Sum of the heaps' buffer capacities.
    held: usize,
    done: VecDeque<u64>,
    stats: Stats,
}

impl Reassembler {
    /// A reassembler under these limits (each at least 1).
    pub fn new(limits: Limits) -> Reassembler {
        let limits = Limits {
            max_heaps: limits.max_heaps.max(1),
            max_heap_bytes: limits.max_heap_bytes,
            max_items: limits.max_items.max(1),
            max_fragments: limits.max_fragments.max(1),
            max_bytes_in_flight: limits.max_bytes_in_flight.max(limits.max_heap_bytes),
        };
        Reassembler {
            limits,
            heaps: VecDeque::with_capacity(limits.max_heaps),
            held: 0,
            done: VecDeque::with_capacity(DONE_MEMORY),
            stats: Stats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Heaps in flight.
    pub fn in_flight(&self) -> usize {
        self.heaps.len()
    }

    /// Bytes the heaps in flight hold (at most
    /// [`Limits::max_bytes_in_flight`]).
    pub fn bytes_in_flight(&self) -> usize {
        self.held
    }

    /// Give up the heap at `i` (reported in `out`).
    fn evict(&mut self, i: usize, out: &mut Pushed) {
        if let Some(old) = self.heaps.remove(i) {
            self.held -= old.payload.capacity();
            self.stats.incomplete += 1;
            out.evicted.push(incomplete(&old));
        }
    }

    /// Take one datagram.
    pub fn push(&mut self, datagram: &[u8]) -> Pushed {
        self.stats.packets += 1;
        let mut out = Pushed::default();
        let p = match wire::decode_packet(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.stats.malformed += 1;
                out.dropped = Some(Drop::Malformed(e));
                return out;
            }
        };
        if let Err(d) = self.take(p, &mut out) {
            match d {
                Drop::Duplicate => self.stats.duplicates += 1,
                Drop::BadHeap => self.stats.incomplete += 1,
                _ => self.stats.refused += 1,
            }
            out.dropped = Some(d);
        }
        out
    }

    /// Give up every heap in flight (at a stream stop, or the end).
    pub fn flush(&mut self) -> Vec<Incomplete> {
        let v: Vec<Incomplete> = self.heaps.drain(..).map(|h| incomplete(&h)).collect();
        self.held = 0;
        self.stats.incomplete += v.len() as u64;
        v
    }

    fn take(&mut self, p: Packet<'_>, out: &mut Pushed) -> Result<(), Drop> {
        let lim = self.limits;
        let offset = usize::try_from(p.payload_offset).map_err(|_| Drop::TooLarge)?;
        let end = offset + p.payload.len(); // both below 2^48 + a datagram
        let length = match p.heap_length {
            Some(l) => Some(usize::try_from(l).map_err(|_| Drop::TooLarge)?),
            None => None,
        };
        if end > lim.max_heap_bytes || length.is_some_and(|l| l > lim.max_heap_bytes) {
            return Err(Drop::TooLarge);
        }
        if self.done.contains(&p.heap_cnt) {
            return Err(Drop::Duplicate);
        }
        let idx = match self.heaps.iter().position(|h| h.cnt == p.heap_cnt) {
            Some(i) => i,
            None => {
                if self.heaps.len() >= lim.max_heaps {
                    self.evict(0, out);
                }
                self.heaps.push_back(Partial {
                    cnt: p.heap_cnt,
                    length: None,
                    payload: Vec::new(),
                    frags: Vec::new(),
                    received: 0,
                    pointers: Vec::new(),
                });
                self.heaps.len() - 1
            }
        };
        let mut idx = idx;
        let h = &mut self.heaps[idx];
        if let Some(l) = length {
            match h.length {
                Some(old) if old != l => return Err(Drop::LengthMismatch),
                _ if h.payload.len() > l => return Err(Drop::LengthMismatch),
                _ => h.length = Some(l),
            }
        }
        if h.length.is_some_and(|l| end > l) {
            return Err(Drop::LengthMismatch);
        }
        // the range must be new: find where it goes among the fragments
        let at = h.frags.partition_point(|r| r.end <= offset);
        if !p.payload.is_empty() && h.frags.get(at).is_some_and(|r| r.start < end) {
            return Err(Drop::Duplicate);
        }
        let n_ptrs = p
            .pointers()
            .filter(|q| q.id > wire::PAYLOAD_LENGTH_ID)
            .count();
        if h.pointers.len() + n_ptrs > lim.max_items {
            return Err(Drop::TooManyParts);
        }
        if !p.payload.is_empty() && h.payload.len() < end {
            // grow to `end` only (doubling, never past the heap's length
            // or the largest heap), within the bytes all heaps may hold:
            // older heaps are given up first
            let cap = h.payload.capacity();
            let limit = h.length.unwrap_or(lim.max_heap_bytes).max(end);
            let target = cap.saturating_mul(2).max(end).min(limit);
            if target > cap {
                while self.held - cap + target > lim.max_bytes_in_flight {
                    let Some(j) = (0..self.heaps.len()).find(|&j| j != idx) else {
                        break; // cannot happen: one heap fits the bound
                    };
                    self.evict(j, out);
                    if j < idx {
                        idx -= 1;
                    }
                }
            }
        }
        let h = &mut self.heaps[idx];
        if !p.payload.is_empty() {
            let merge_left = at > 0 && h.frags[at - 1].end == offset;
            let merge_right = h.frags.get(at).is_some_and(|r| r.start == end);
            if !merge_left && !merge_right && h.frags.len() >= lim.max_fragments {
                return Err(Drop::TooManyParts);
            }
            match (merge_left, merge_right) {
                (true, true) => {
                    let r = h.frags.remove(at);
                    h.frags[at - 1].end = r.end;
                }
                (true, false) => h.frags[at - 1].end = end,
                (false, true) => h.frags[at].start = offset,
                (false, false) => h.frags.insert(at, offset..end),
            }
            if h.payload.len() < end {
                let cap = h.payload.capacity();
                let limit = h.length.unwrap_or(lim.max_heap_bytes).max(end);
                let target = cap.saturating_mul(2).max(end).min(limit);
                h.payload.reserve_exact(target - h.payload.len());
                h.payload.resize(end, 0);
                self.held = self.held - cap + h.payload.capacity();
            }
            h.payload[offset..end].copy_from_slice(p.payload);
            h.received += p.payload.len();
        }
        for (i, q) in p.pointers().enumerate() {
            if q.id > wire::PAYLOAD_LENGTH_ID {
                h.pointers.push((offset, i, q));
            }
        }
        let Some(l) = h.length else { return Ok(()) };
        if h.received != l {
            return Ok(());
        }
        let h = self.heaps.remove(idx).expect("index found above");
        self.held -= h.payload.capacity();
        if self.done.len() == DONE_MEMORY {
            self.done.pop_front();
        }
        self.done.push_back(h.cnt);
        match finish(h) {
            Some(heap) => {
                self.stats.heaps += 1;
                out.complete = Some(heap);
                Ok(())
            }
            None => Err(Drop::BadHeap),
        }
    }
}

fn incomplete(h: &Partial) -> Incomplete {
    Incomplete {
        cnt: h.cnt,
        received: h.received,
        length: h.length.map(|l| l as u64),
    }
}

/// Items of a complete heap: an addressed item runs from its address to
/// the next addressed item's (in pointer order, as spead2 reads them),
/// the last to the heap's end; addresses must not decrease.
fn finish(mut h: Partial) -> Option<Heap> {
    let len = h.payload.len();
    h.pointers.sort_by_key(|&(off, i, _)| (off, i));
    let addressed: Vec<usize> = h
        .pointers
        .iter()
        .filter(|(_, _, q)| !q.immediate)
        .map(|(_, _, q)| usize::try_from(q.value).unwrap_or(usize::MAX))
        .collect();
    let mut ends = addressed.iter().skip(1).copied().chain([len]);
    let mut items = Vec::with_capacity(h.pointers.len());
    for &(_, _, q) in &h.pointers {
        let value = if q.immediate {
            Value::Immediate(q.value)
        } else {
            let a = usize::try_from(q.value).ok()?;
            let end = ends.next()?;
            if a > end || end > len {
                return None;
            }
            Value::Addressed(a..end)
        };
        if q.id != wire::NULL_ID {
            items.push(Item { id: q.id, value });
        }
    }
    Some(Heap {
        cnt: h.cnt,
        items,
        payload: h.payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{encode_heap, HeapItem, ItemValue};

    fn packets(cnt: u64, items: &[HeapItem<'_>], max: usize) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        encode_heap(cnt, items, max, &mut v).unwrap();
        v
    }

    fn sample() -> Vec<u8> {
        (0..1000u32).map(|i| (i * 7) as u8).collect()
    }

    #[test]
    fn in_order_and_reversed() {
        let data = sample();
        let items = [
            HeapItem::new(0x1600, ItemValue::Immediate(42)),
            HeapItem::new(0x1800, ItemValue::Bytes(&data)),
        ];
        for reverse in [false, true] {
            let mut ps = packets(5, &items, 200);
            assert!(ps.len() > 4);
            if reverse {
                ps.reverse();
            }
            let mut r = Reassembler::new(Limits::default());
            let n = ps.len();
            for (i, p) in ps.iter().enumerate() {
                let out = r.push(p);
                assert!(out.dropped.is_none());
                assert_eq!(out.complete.is_some(), i == n - 1);
                if let Some(h) = out.complete {
                    assert_eq!(h.cnt, 5);
                    assert_eq!(h.item(0x1600).unwrap().value, Value::Immediate(42));
                    assert_eq!(h.bytes(h.item(0x1800).unwrap()).unwrap(), &data[..]);
                }
            }
            assert_eq!(r.stats().heaps, 1);
        }
    }

    #[test]
    fn missing_packet_is_incomplete_never_delivered() {
        let data = sample();
        let items = [HeapItem::new(0x1800, ItemValue::Bytes(&data))];
        let ps = packets(1, &items, 200);
        let lim = Limits {
            max_heaps: 2,
            ..Limits::default()
        };
        let mut r = Reassembler::new(lim);
        for (i, p) in ps.iter().enumerate() {
            if i != 2 {
                assert!(r.push(p).complete.is_none());
            }
        }
        // two newer heaps evict it
        for cnt in [2, 3] {
            let out = r.push(&packets(cnt, &items, 200)[0]);
            if cnt == 3 {
                assert_eq!(out.evicted.len(), 1);
                let e = &out.evicted[0];
                assert_eq!(e.cnt, 1);
                assert_eq!(e.length, Some(1000));
                assert!(e.received < 1000);
            }
        }
        assert_eq!(r.flush().len(), 2);
        assert_eq!(r.stats().heaps, 0);
        assert_eq!(r.stats().incomplete, 3);
    }

    #[test]
    fn duplicates_and_overlaps_dropped() {
        let data = sample();
        let items = [HeapItem::new(0x1800, ItemValue::Bytes(&data))];
        let ps = packets(1, &items, 200);
        let mut r = Reassembler::new(Limits::default());
        r.push(&ps[0]);
        assert_eq!(r.push(&ps[0]).dropped, Some(Drop::Duplicate));
        for p in &ps[1..] {
            r.push(p);
        }
        assert_eq!(r.stats().heaps, 1);
        // a late duplicate of a delivered heap
        assert_eq!(r.push(&ps[1]).dropped, Some(Drop::Duplicate));
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn lying_lengths_and_limits() {
        let data = sample();
        let items = [HeapItem::new(0x1800, ItemValue::Bytes(&data))];
        let ps = packets(1, &items, 200);
        let lim = Limits {
            max_heap_bytes: 999,
            ..Limits::default()
        };
        let mut r = Reassembler::new(lim);
        assert_eq!(r.push(&ps[0]).dropped, Some(Drop::TooLarge));
        // the same heap counter, another length
        let mut r = Reassembler::new(Limits::default());
        r.push(&ps[0]);
        let other = packets(1, &items[..0], 200);
        assert_eq!(r.push(&other[0]).dropped, Some(Drop::LengthMismatch));
        // a huge stated length is refused before any allocation
        let mut d = ps[0].clone();
        d[8 + 8 + 2..8 + 16].copy_from_slice(&[0xff; 6]);
        assert_eq!(r.push(&d).dropped, Some(Drop::TooLarge));
        // fragments bound
        let lim = Limits {
            max_fragments: 2,
            ..Limits::default()
        };
        let mut r = Reassembler::new(lim);
        let small = packets(9, &items, 100);
        r.push(&small[0]);
        r.push(&small[2]);
        assert_eq!(r.push(&small[4]).dropped, Some(Drop::TooManyParts));
        // items bound
        let many: Vec<HeapItem<'_>> = (0..20)
            .map(|i| HeapItem::new(0x2000 + i, ItemValue::Immediate(1)))
            .collect();
        let lim = Limits {
            max_items: 10,
            ..Limits::default()
        };
        let mut r = Reassembler::new(lim);
        assert_eq!(
            r.push(&packets(1, &many, 1500)[0]).dropped,
            Some(Drop::TooManyParts)
        );
    }

    #[test]
    fn items_outside_the_heap_drop_it() {
        // one addressed item pointing past the 4-byte heap
        let mut d = Vec::new();
        wire::put_header(&mut d, 5);
        for (id, imm, v) in [(1u16, true, 1u64), (2, true, 4), (3, true, 0), (4, true, 4)] {
            wire::put_pointer(
                &mut d,
                ItemPointer {
                    id,
                    immediate: imm,
                    value: v,
                },
            );
        }
        wire::put_pointer(
            &mut d,
            ItemPointer {
                id: 0x1800,
                immediate: false,
                value: 5,
            },
        );
        d.extend_from_slice(&[1, 2, 3, 4]);
        let mut r = Reassembler::new(Limits::default());
        assert_eq!(r.push(&d).dropped, Some(Drop::BadHeap));
        assert_eq!(r.stats().incomplete, 1);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut r = Reassembler::new(Limits {
            max_heaps: 3,
            max_heap_bytes: 4096,
            ..Limits::default()
        });
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let rounds = if cfg!(miri) { 50 } else { 5000 };
        for i in 0..rounds {
            let n = (i * 13) % 300;
            let mut d: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            // half of them look like SPEAD-64-48 headers
            if d.len() >= 8 && i % 2 == 0 {
                d[..4].copy_from_slice(&[0x53, 4, 2, 6]);
                d[6] = 0;
                d[7] = (n / 8 / 2) as u8;
            }
            let _ = r.push(&d);
            assert!(r.in_flight() <= 3);
        }
    }

    /// A raw packet: heap `cnt` stating `length`, carrying `payload` at
    /// `offset` (the sender's own word for each field, none checked here).
    fn raw_packet(cnt: u64, length: u64, offset: u64, payload: &[u8]) -> Vec<u8> {
        let imm = |id: u16, v: u64| ((1u64 << 63) | (u64::from(id) << 48) | v).to_be_bytes();
        let mut v = vec![wire::MAGIC, wire::VERSION, 2, 6, 0, 0, 0, 4];
        v.extend(imm(wire::HEAP_CNT_ID, cnt));
        v.extend(imm(wire::HEAP_LENGTH_ID, length));
        v.extend(imm(wire::PAYLOAD_OFFSET_ID, offset));
        v.extend(imm(wire::PAYLOAD_LENGTH_ID, payload.len() as u64));
        v.extend_from_slice(payload);
        v
    }

    fn bytes_held(r: &Reassembler) -> usize {
        r.heaps.iter().map(|h| h.payload.capacity()).sum()
    }

    /// Datagrams that each state the largest heap length must not make the
    /// reassembler hold a heap's length apiece: what it holds follows the
    /// bytes that arrived (here 8 x 1000), and whatever the offsets, all
    /// heaps in flight together stay within `max_bytes_in_flight`.
    #[test]
    fn fixes_few_datagrams_cannot_commit_every_heaps_length() {
        let lim = Limits::default();
        let big = lim.max_heap_bytes as u64;
        let mut r = Reassembler::new(lim);
        for cnt in 1..=8 {
            let out = r.push(&raw_packet(cnt, big, 0, &[7; 1000]));
            assert!(out.dropped.is_none(), "{:?}", out.dropped);
        }
        assert_eq!(r.in_flight(), 8);
        assert!(
            bytes_held(&r) <= 8 * 4096,
            "8 datagrams of 1000 B made the reassembler hold {} bytes",
            bytes_held(&r)
        );
        assert_eq!(bytes_held(&r), r.bytes_in_flight());
        // at the end of each stated length: every heap would need all of it
        // (smaller limits of the same shape, so Miri runs it too; smaller
        // still under Miri, which took 84 s at 64 KiB)
        let heap = if cfg!(miri) { 16 << 10 } else { 64 << 10 };
        let lim = Limits {
            max_heap_bytes: heap,
            max_bytes_in_flight: 2 * heap,
            ..lim
        };
        let big = lim.max_heap_bytes as u64;
        let mut r = Reassembler::new(lim);
        for cnt in 1..=8 {
            r.push(&raw_packet(cnt, big, big - 1000, &[7; 1000]));
            assert!(
                bytes_held(&r) <= lim.max_bytes_in_flight,
                "after {cnt} datagrams the reassembler holds {} bytes (bound {})",
                bytes_held(&r),
                lim.max_bytes_in_flight
            );
            assert_eq!(bytes_held(&r), r.bytes_in_flight());
        }
        assert!(r.stats().incomplete >= 6, "{:?}", r.stats());
        // a heap that fits still completes after the attack
        let data = sample();
        let items = [HeapItem::new(0x1800, ItemValue::Bytes(&data))];
        let done = packets(99, &items, 200)
            .iter()
            .filter_map(|p| r.push(p).complete)
            .count();
        assert_eq!(done, 1);
    }
}
