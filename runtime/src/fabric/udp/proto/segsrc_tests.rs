//! A Medium from the segment (`PayloadSrc::Segment`, the get's reply over
//! UDP) cut by a window of 2 mid-message, every datagram the sender
//! transmits in an odd round of the test's loop dropped (first
//! transmissions and retransmissions alike; those of even rounds are
//! delivered, so retransmissions carry the message through), and the
//! segment overwritten right after each range was framed: the
//! receiver must still get the bytes as they were when framed (the copy
//! is taken once, at framing; a retransmission resends that copy, never
//! the segment's bytes of the moment). The reviewer's test of h14-bounce
//! (review item 4).

use super::{Proto, ProtoConfig, Sent};
use crate::fabric::frames::{PayloadSrc, Reassembler, SrcMsg};
use crate::fabric::udp::wire::{HEADER, TAG};
use crate::fabric::{SegmentBytes, SegmentRef};

#[test]
fn rv_segment_source_cut_by_window_and_retransmitted_keeps_framed_bytes() {
    let cfg = ProtoConfig {
        mtu: 1472,
        window: 2,
        ..ProtoConfig::default()
    };
    let mut a = Proto::new(0, 2, cfg, [9; 32], 0);
    let mut b = Proto::new(1, 2, cfg, [9; 32], 0);
    let pattern = |i: usize| (i.wrapping_mul(131) ^ (i >> 8)) as u8;
    // Miri runs one smaller case, still cut by the window (every
    // datagram is sealed and checked: keyed hashing is slow there)
    const SEG: usize = if cfg!(miri) { 4000 } else { 20_000 };
    let cases: &[(usize, usize)] = if cfg!(miri) {
        &[(100, 3000)]
    } else {
        &[(100, 6000), (7, 1400), (9000, 10_000)]
    };
    let mut seg: Vec<u8> = (0..SEG).map(pattern).collect();
    let base = seg.as_mut_ptr();
    // SAFETY: `seg` outlives every use; written only through `base`.
    let r = unsafe { SegmentRef::new(base, SEG) };
    for &(off, len) in cases {
        for i in 0..SEG {
            // SAFETY: inside `seg`: restore the pattern
            unsafe { base.wrapping_add(i).write(pattern(i)) };
        }
        // SAFETY: as above.
        let src = unsafe { SegmentBytes::new(r, off, len) }.unwrap();
        let words = [42u64];
        let m = SrcMsg {
            tag: 3,
            words: &words,
            payload: PayloadSrc::Segment(src),
            deposit: None,
        };
        let mut now = 1_000_000_000u64;
        let mut from = 0;
        let mut cuts = Vec::new();
        let mut reasm = Reassembler::default();
        let mut sink: Vec<u8> = vec![0; 16];
        let mut got: Option<Vec<u8>> = None;
        let mut round = 0u64;
        let mut dropped = 0;
        for _ in 0..20_000 {
            if from < len {
                match a.send_src(now, 1, 0, &m, from) {
                    Sent::Upto(e) => {
                        for i in off + from..off + e {
                            // SAFETY: inside `seg`; a writer after framing
                            unsafe { base.wrapping_add(i).write(!pattern(i)) };
                        }
                        cuts.push(e);
                        from = e;
                    }
                    Sent::NoRoom => {}
                    Sent::Dead => panic!("dead"),
                }
            }
            a.handle_timeout(now);
            let mut out = Vec::new();
            a.poll_transmit(now, true, &mut |_, d| out.push(d.to_vec()));
            round += 1;
            if round % 2 == 1 {
                dropped += out.len();
            } else {
                for d in out {
                    if let Some(back) = b.handle_datagram_at(now, now, d) {
                        b.recycle(back);
                    }
                }
            }
            while let Some((_, d)) = b.next_ready(0) {
                reasm
                    .feed(
                        0,
                        &d[HEADER..d.len() - TAG],
                        1 << 20,
                        &mut sink,
                        &mut |dl| got = Some(dl.payload.to_vec()),
                    )
                    .unwrap();
                b.recycle(d);
            }
            b.handle_timeout(now);
            let mut acks = Vec::new();
            b.poll_transmit(now, true, &mut |_, d| acks.push(d.to_vec()));
            for d in acks {
                if let Some(back) = a.handle_datagram_at(now, now, d) {
                    a.recycle(back);
                }
            }
            if got.is_some() && from == len && a.quiesced() {
                break;
            }
            now += 20_000_000;
        }
        let got = got.expect("delivered");
        assert!(cuts.len() > 1 || len <= 2800, "cut by the window: {cuts:?}");
        assert!(dropped > 0);
        assert_eq!(got.len(), len);
        for (i, &x) in got.iter().enumerate() {
            assert_eq!(
                x,
                pattern(off + i),
                "byte {i} of {len} at {off}, cuts {cuts:?}"
            );
        }
    }
    drop(seg);
}
