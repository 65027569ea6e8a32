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
            acks: [splitrt_runtime::fabric::udp::wire::Ack { cum, sack, win }; 2], ts: seq, echo: cum, hold: 0, pn: 1,
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

/// A stranger's datagram with a plausible header (right magic, version,
/// length, addressee and sender) but no key is dropped on the cheap path,
/// before the full tag; so is one for another rank.
#[test]
fn plausible_garbage_is_rejected_before_the_full_tag() {
    let mut p = Proto::new(0, 2, ProtoConfig::default(), KEY, 0);
    for (src, dst) in [(1, 0), (0, 1), (7, 0)] {
        let mut d = vec![0x5a; 65_507];
        Header {
            kind: 0,
            body_len: (d.len() - HEADER - TAG) as u16,
            src,
            dst,
            pn: 1,
            ..Header::default()
        }
        .write(&mut d);
        // the header alone (what a driver under a flood peeks) tells
        assert!(!p.screen(&d[..HEADER], d.len()));
        let back = p.handle_datagram(1, d);
        assert!(back.is_some());
    }
    assert_eq!(p.stats().bad_tag, 6, "{:?}", p.stats());
    assert_eq!(p.stats().early_rejects, 6, "{:?}", p.stats());
    assert_eq!(p.stats().received, 0);
}

/// An authentic datagram replayed is acted on once: the copies are
/// counted as replays and neither keep the sender alive nor draw an
/// acknowledgement.
#[test]
fn a_replayed_datagram_is_acted_on_once() {
    let cfg = ProtoConfig {
        keepalive: 1_000_000_000,
        peer_timeout: 3_000_000_000,
        ..ProtoConfig::default()
    };
    let mut a = Proto::new(0, 2, cfg, KEY, 0);
    let mut b = Proto::new(1, 2, cfg, KEY, 0);
    // b sends one message to a, a takes it and acknowledges
    let m = splitrt_runtime::fabric::frames::OutMsg {
        tag: 1,
        words: &[7],
        payload: &[],
        deposit: None,
    };
    b.send(0, 0, 0, &m, 0);
    let mut captured = Vec::new();
    b.poll_transmit(0, true, &mut |_, d| captured.push(d.to_vec()));
    assert_eq!(captured.len(), 1);
    // an authentic header passes the screen
    assert!(a.screen(&captured[0][..HEADER], captured[0].len()));
    a.send(0, 1, 0, &m, 0); // a talks to b too: b is an active peer
    a.poll_transmit(0, true, &mut |_, _| {});
    assert!(a.handle_datagram(1_000, captured[0].clone()).is_none());
    assert_eq!(a.stats().received, 1);
    a.handle_timeout(100_000);
    a.poll_transmit(100_000, true, &mut |_, _| {}); // its real acknowledgement
                                                    // b dies; an attacker replays its datagram every 100 ms
    let mut dead_at = None;
    let mut t = 1_000;
    while t < 10_000_000_000 && dead_at.is_none() {
        t += 100_000_000;
        if let Some(back) = a.handle_datagram(t, captured[0].clone()) {
            a.recycle(back);
        }
        let mut acks = 0;
        a.poll_transmit(t, true, &mut |_, d| {
            // a's retransmissions and keepalives (F_ACK_NOW) may go out;
            // an acknowledgement (a control without it) of the replay not
            acks += (d[3] == 2 && d[4] & 1 == 0) as u32;
        });
        assert_eq!(acks, 0, "a replay drew an acknowledgement at {t} ns");
        a.handle_timeout(t);
        if let Some(e) = a.poll_event() {
            dead_at = Some((t, e));
        }
    }
    let (t, e) = dead_at.expect("b declared dead despite the replays");
    assert!(
        t <= 3_000_000_000 + 1_000_000_000 + 200_000_000,
        "{t} ns: {e:?}"
    );
    assert!(a.stats().replays >= 20, "{:?}", a.stats());
    assert_eq!(a.stats().received, 1, "{:?}", a.stats());
}
