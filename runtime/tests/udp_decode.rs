//! Arbitrary bytes into the UDP fabric's decoders: never a panic, never a
//! write outside the segment, nothing acted on without the job's tag.
use proptest::prelude::*;
use splitrt_runtime::fabric::frames::Reassembler;
use splitrt_runtime::fabric::udp::proto::{Proto, ProtoConfig};
use splitrt_runtime::fabric::udp::wire::{Header, Mac, HEADER, TAG};

const KEY: [u8; 32] = [42; 32];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Unauthenticated bytes are dropped and counted, whatever they are.
    #[test]
    fn stranger_bytes_are_dropped(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut p = Proto::new(0, 4, ProtoConfig::default(), KEY, 0);
        let back = p.handle_datagram(1, bytes);
        prop_assert!(back.is_some());
        prop_assert_eq!(p.stats().received, 0);
        prop_assert_eq!(p.stats().bad_tag, 1);
    }

    /// Authentic datagrams with arbitrary headers and bodies: no panic,
    /// and a data datagram's frames never write outside the segment.
    #[test]
    fn authentic_garbage_is_contained(
        kind in 0u8..4, src in 0u32..6, dst in 0u32..2, seq in any::<u32>(),
        cum in any::<u32>(), sack in any::<u32>(), win in any::<u16>(),
        body in proptest::collection::vec(any::<u8>(), 0..3000),
    ) {
        let mut d = vec![0u8; HEADER + body.len() + TAG];
        Header {
            kind, flags: 0, body_len: body.len() as u16, src, dst, seq,
            acks: [splitrt_runtime::fabric::udp::wire::Ack { cum, sack, win }; 2], ts: seq, echo: cum,
        }.write(&mut d);
        d[HEADER..HEADER + body.len()].copy_from_slice(&body);
        Mac::new(KEY).seal(&mut d);
        let mut p = Proto::new(0, 4, ProtoConfig::default(), KEY, 0);
        if let Some(b) = p.handle_datagram(1, d) { p.recycle(b); }
        p.handle_timeout(10_000_000);
        p.poll_transmit(10_000_000, true, &mut |_, _| {});
        for st in 0..2 {
            while let Some((from, d)) = p.next_ready(st) {
                let mut seg = vec![0u8; 1024];
                let mut r = Reassembler::default();
                let _ = r.feed(from as usize, &d[HEADER..d.len() - TAG], 512, &mut seg, &mut |m| {
                    assert!(m.payload.len() <= 1024);
                });
                p.recycle(d);
            }
        }
    }

    /// Frame bodies of arbitrary bytes: an error or deliveries, no panic.
    #[test]
    fn arbitrary_frames(body in proptest::collection::vec(any::<u8>(), 0..4000)) {
        let mut seg = vec![0u8; 4096];
        let mut r = Reassembler::default();
        let _ = r.feed(1, &body, 1000, &mut seg, &mut |m| {
            assert!(m.payload.len() <= 4096);
        });
    }
}
