//! Property tests of the codec: any heap encoded into packets of any
//! size, delivered in any order with duplicates, reassembles to the same
//! items; any descriptor round-trips; any mangled packet is an error or a
//! heap, never a panic, and never a heap delivered with missing bytes.

use proptest::prelude::*;
use splitrt_vys_spead::descriptor::Descriptor;
use splitrt_vys_spead::encode::{encode_heap, HeapItem, ItemValue};
use splitrt_vys_spead::heap::{Limits, Reassembler, Value};

fn items() -> impl Strategy<Value = Vec<(u16, Result<u64, Vec<u8>>)>> {
    prop::collection::vec(
        (
            0x10u16..0x7fff,
            prop_oneof![
                (0u64..(1 << 48)).prop_map(Ok),
                prop::collection::vec(any::<u8>(), 0..600).prop_map(Err),
            ],
        ),
        0..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    #[test]
    fn heap_round_trip(
        cnt in 0u64..(1 << 48),
        its in items(),
        max in 100usize..1600,
        order in prop::collection::vec(any::<u32>(), 64),
        dup in any::<u8>(),
    ) {
        let items: Vec<HeapItem<'_>> = its
            .iter()
            .map(|(id, v)| HeapItem::new(*id, match v {
                Ok(x) => ItemValue::Immediate(*x),
                Err(b) => ItemValue::Bytes(b),
            }))
            .collect();
        let mut packets = Vec::new();
        if encode_heap(cnt, &items, max, &mut packets).is_err() {
            // only when the pointers do not fit the first packet
            prop_assert!(max < 8 + 8 * (4 + items.len()) + 1);
            return Ok(());
        }
        let n = packets.len();
        // a permutation from `order`, then one duplicate
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by_key(|&i| order[i % order.len()].wrapping_mul(i as u32 + 1));
        idx.insert(usize::from(dup) % (n + 1), usize::from(dup) % n);
        let mut r = Reassembler::new(Limits::default());
        let mut got = None;
        for &i in &idx {
            let out = r.push(&packets[i]);
            prop_assert!(out.evicted.is_empty());
            if let Some(h) = out.complete {
                prop_assert!(got.is_none());
                got = Some(h);
            }
        }
        let h = got.expect("complete");
        prop_assert_eq!(h.cnt, cnt);
        prop_assert_eq!(h.items.len(), items.len());
        for (it, want) in h.items.iter().zip(&its) {
            prop_assert_eq!(it.id, want.0);
            match (&it.value, &want.1) {
                (Value::Immediate(v), Ok(w)) => prop_assert_eq!(v, w),
                (Value::Addressed(_), Err(w)) => prop_assert_eq!(h.bytes(it).unwrap(), &w[..]),
                _ => prop_assert!(false, "kind changed"),
            }
        }
    }

    #[test]
    fn descriptor_round_trip(
        id in 0u16..0x8000,
        name in "[a-z_]{0,20}",
        description in "[ -~]{0,80}",
        shape in prop::collection::vec(prop::option::of(0u64..(1 << 48)), 0..6),
        format in prop::collection::vec((prop::sample::select(b"uifcb".to_vec()), 1u32..65536), 0..4),
        numpy in prop::option::of("[ -~]{1,60}"),
    ) {
        let d = Descriptor { id, name, description, shape, format, numpy_header: numpy };
        prop_assert_eq!(Descriptor::decode(&d.encode()).unwrap(), d);
    }

    #[test]
    fn mangled_packets_never_deliver_a_short_heap(
        data in prop::collection::vec(any::<u8>(), 1..3000),
        cut in any::<u16>(),
        flips in prop::collection::vec((any::<u16>(), any::<u8>()), 0..6),
    ) {
        let items = [HeapItem::new(0x1800, ItemValue::Bytes(&data))];
        let mut packets = Vec::new();
        encode_heap(9, &items, 400, &mut packets).unwrap();
        let mut r = Reassembler::new(Limits { max_heaps: 2, max_heap_bytes: 1 << 16, ..Limits::default() });
        // drop one packet (if several), mangle the others
        let skip = if packets.len() > 1 { usize::from(cut) % packets.len() } else { usize::MAX };
        for (i, p) in packets.iter_mut().enumerate() {
            if i == skip {
                continue;
            }
            for &(at, x) in &flips {
                let at = usize::from(at) % p.len();
                // leave the heap counter alone: a changed one is another heap
                if !(8..16).contains(&at) {
                    p[at] ^= x;
                }
            }
            if let Some(h) = r.push(p).complete {
                prop_assert_eq!(h.payload.len(), data.len().min(h.payload.len()));
                // a complete heap has every byte its length states
                prop_assert!(skip == usize::MAX || flips.iter().any(|&(_, x)| x != 0));
            }
        }
    }
}
