//! A sender that waits for its acknowledgements (`sync` / `quiet` over
//! UDP: the driver's `quiesced`) gets them at once, not after the
//! receiver's delayed-acknowledgement timer (issue 25: a strided put +
//! sync is one datagram, which the receiver acknowledged only after
//! `ack_delay`, 50 µs, while the sender waited). Sans I/O: two
//! protocol instances and hand-carried datagrams.
use splitrt_runtime::fabric::frames::OutMsg;
use splitrt_runtime::fabric::udp::proto::{Proto, ProtoConfig, Sent};

const KEY: [u8; 32] = [9; 32];

fn pair() -> (Proto, Proto) {
    let cfg = ProtoConfig::default();
    (Proto::new(0, 2, cfg, KEY, 0), Proto::new(1, 2, cfg, KEY, 0))
}

fn send(p: &mut Proto, now: u64, payload: &[u8]) {
    let m = OutMsg {
        tag: 1,
        words: &[1, 2],
        payload,
        deposit: None,
    };
    assert_eq!(
        p.send(now, 1, 0, &m, 0),
        Sent::Upto(payload.len()),
        "taken whole"
    );
}

fn transmit(p: &mut Proto, now: u64) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    p.poll_transmit(now, true, &mut |_, d| v.push(d.to_vec()));
    v
}

/// Deliver `ds` to `p` at `now`, then what `p` sends back at `now`.
fn deliver(p: &mut Proto, now: u64, ds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    for d in ds {
        if let Some(b) = p.handle_datagram(now, d) {
            p.recycle(b);
        }
    }
    while let Some((_, d)) = p.next_ready(0) {
        p.recycle(d);
    }
    transmit(p, now)
}

#[test]
fn a_waiting_sender_is_acknowledged_without_the_ack_delay() {
    let (mut a, mut b) = pair();
    let delay = a.config().ack_delay;
    let t0 = 1_000_000;
    send(&mut a, t0, &[5u8; 4000]);
    let mut out = transmit(&mut a, t0);
    assert_eq!(out.len(), 1, "one data datagram");
    // `sync`: about to wait for the acknowledgement
    a.urge_acks();
    out.extend(transmit(&mut a, t0));
    let back = deliver(&mut b, t0 + 5_000, out);
    assert!(
        !back.is_empty(),
        "the receiver keeps its acknowledgement for the delayed-ack timer \
         ({} µs) while the sender waits",
        delay / 1000
    );
    deliver(&mut a, t0 + 10_000, back);
    assert!(a.quiesced(), "acknowledged within 10 µs of simulated time");
}

#[test]
fn the_tail_datagram_carries_the_question_when_data_waits() {
    // the wait starts before the data left (coalesced behind a datagram in
    // flight): the last datagram asks, no extra ping
    let (mut a, mut b) = pair();
    let t0 = 1_000_000;
    send(&mut a, t0, &[1u8; 100]);
    let first = transmit(&mut a, t0);
    let back = deliver(&mut b, t0 + 1_000, first);
    assert!(back.is_empty(), "one datagram: the acknowledgement waits");
    // a second message while the first is unacknowledged: coalesced
    send(&mut a, t0 + 2_000, &[2u8; 100]);
    // the delayed acknowledgement of the first reaches the sender, whose
    // open datagram then leaves alone, asking for its acknowledgement
    // (the first was handed up: its acknowledgement waited twice the delay)
    let t1 = t0 + 1_000 + 2 * b.config().ack_delay;
    b.handle_timeout(t1);
    let ack = transmit(&mut b, t1);
    assert_eq!(ack.len(), 1, "the delayed acknowledgement");
    a.urge_acks();
    let out = deliver(&mut a, t1 + 1_000, ack);
    assert_eq!(out.len(), 1, "the coalesced datagram alone, no ping");
    let back = deliver(&mut b, t1 + 2_000, out);
    assert_eq!(back.len(), 1, "one immediate acknowledgement");
    deliver(&mut a, t1 + 3_000, back);
    assert!(a.quiesced());
}

#[test]
fn a_polling_wait_asks_once_per_datagram() {
    let (mut a, _b) = pair();
    let t0 = 1_000_000;
    send(&mut a, t0, &[5u8; 100]);
    assert_eq!(transmit(&mut a, t0).len(), 1);
    let mut extra = 0;
    for i in 0..1000 {
        a.urge_acks();
        extra += transmit(&mut a, t0 + i).len();
    }
    assert_eq!(extra, 1, "one ping for a thousand polls of the wait");
    // nothing unacknowledged: nothing to ask
    let (mut c, _) = pair();
    c.urge_acks();
    assert!(transmit(&mut c, t0).is_empty());
}

#[test]
fn a_reply_made_after_the_ack_delay_carries_the_acknowledgement() {
    // a request whose handler takes longer than `ack_delay` (a 64 KB
    // strided put's scatter and tag): the receiver's delayed
    // acknowledgement left alone just before the reply that carries it,
    // one datagram more per round trip on the critical path
    let (mut a, mut b) = pair();
    let delay = b.config().ack_delay;
    let t0 = 1_000_000;
    send(&mut a, t0, &[5u8; 4000]);
    let out = transmit(&mut a, t0);
    let t1 = t0 + 1_000;
    for d in out {
        if let Some(x) = b.handle_datagram(t1, d) {
            b.recycle(x);
        }
    }
    assert!(transmit(&mut b, t1).is_empty(), "the acknowledgement waits");
    // the upper layer takes the request and works on it
    let (_, d) = b.next_ready(0).expect("the request");
    b.recycle(d);
    let t2 = t1 + delay + delay / 2;
    b.handle_timeout(t2);
    let early = transmit(&mut b, t2);
    // the reply, which carries the acknowledgement
    let m = OutMsg {
        tag: 2,
        words: &[3],
        payload: &[],
        deposit: None,
    };
    assert_eq!(b.send(t2, 0, 1, &m, 0), Sent::Upto(0), "taken whole");
    let reply = transmit(&mut b, t2);
    assert_eq!(
        early.len(),
        0,
        "a lone acknowledgement left before the reply while the request was \
         being handled"
    );
    assert_eq!(reply.len(), 1);
    deliver(&mut a, t2 + 1_000, reply);
    assert!(a.quiesced(), "the reply acknowledged the request");
    // and a request nobody answers is still acknowledged, within two delays
    send(&mut a, t2 + 2_000, &[6u8; 100]);
    let out = transmit(&mut a, t2 + 2_000);
    let t3 = t2 + 3_000;
    for d in out {
        if let Some(x) = b.handle_datagram(t3, d) {
            b.recycle(x);
        }
    }
    let (_, d) = b.next_ready(0).expect("the second request");
    b.recycle(d);
    let mut acked_at = None;
    for k in 1..=40 {
        let t = t3 + k * delay / 10;
        b.handle_timeout(t);
        if !transmit(&mut b, t).is_empty() {
            acked_at = Some(t - t3);
            break;
        }
    }
    let after = acked_at.expect("acknowledged within four delays");
    assert!(after <= 2 * delay, "acknowledged {after} ns after arrival");
}
