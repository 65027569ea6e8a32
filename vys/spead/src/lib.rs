//! # splitrt-vys-spead — a SPEAD bridge for vys
//!
//! SPEAD is the streaming protocol of MeerKAT and SKA correlators (spead2
//! is its reference implementation). This crate reads and writes its
//! SPEAD-64-48 flavour (spead2's default) without I/O of its own, and its
//! `vys-spead` command bridges SPEAD and vys both ways (docs/vys-spead.md):
//!
//! * [`wire`]: packets and item pointers, decoded with every length
//!   checked;
//! * [`heap`]: heap reassembly from packets in any order, bounded in
//!   heaps, bytes, items and fragments; an incomplete heap is reported,
//!   never delivered;
//! * [`descriptor`]: item descriptors (name, description, shape, format
//!   or numpy header), as spead2 sends and expects them;
//! * [`encode`]: heaps into packets, stream control heaps;
//! * [`xeng`]: MeerKAT X-engine style heaps into vys spectra;
//! * [`described`]: a vys stream description as SPEAD items.
//!
//! ```
//! use splitrt_vys_spead::encode::{encode_heap, HeapItem, ItemValue};
//! use splitrt_vys_spead::heap::{Limits, Reassembler};
//! let data = vec![7u8; 3000];
//! let items = [HeapItem::new(0x1600, ItemValue::Immediate(42)),
//!              HeapItem::new(0x1800, ItemValue::Bytes(&data))];
//! let mut packets = Vec::new();
//! encode_heap(1, &items, 1472, &mut packets).unwrap();
//! let mut r = Reassembler::new(Limits::default());
//! let heap = packets.iter().rev().find_map(|p| r.push(p).complete).unwrap();
//! assert_eq!(heap.bytes(heap.item(0x1800).unwrap()).unwrap(), &data[..]);
//! ```
#![warn(missing_docs)]

pub mod described;
pub mod descriptor;
pub mod encode;
pub mod heap;
pub mod wire;
pub mod xeng;
