//! The full tag's precondition (`fulltag`): a sender never seals two
//! different datagrams with the same identifying bytes (the first 56 of
//! the header, which hold sender, receiver and datagram number). Here two
//! ranks exchange messages of every size over a network that loses and
//! duplicates datagrams, so data is retransmitted (by timeout and fast
//! retransmit) and controls and keepalives go out between; every datagram
//! either rank seals is recorded.

use super::{Proto, ProtoConfig};
use crate::fabric::frames::OutMsg;
use std::collections::HashMap;

/// One step of the network: both ranks run their timers and transmit
/// (every datagram recorded in `sealed`); `dt` later the datagrams arrive,
/// every 5th lost and every 7th delivered twice; both take what is ready.
fn step(p: &mut [Proto; 2], now: &mut u64, dt: u64, drop: &mut u64, sealed: &mut Vec<Vec<u8>>) {
    let mut wire: Vec<(usize, Vec<u8>)> = Vec::new();
    for (me, q) in p.iter_mut().enumerate() {
        q.handle_timeout(*now);
        q.poll_transmit(*now, true, &mut |_, d| {
            sealed.push(d.to_vec());
            wire.push((1 - me, d.to_vec()));
        });
    }
    *now += dt;
    for (to, d) in wire {
        *drop += 1;
        if drop.is_multiple_of(5) {
            continue;
        }
        if drop.is_multiple_of(7) {
            if let Some(b) = p[to].handle_datagram(*now, d.clone()) {
                p[to].recycle(b);
            }
        }
        if let Some(b) = p[to].handle_datagram(*now, d) {
            p[to].recycle(b);
        }
    }
    for q in p.iter_mut() {
        for st in 0..2 {
            while q.next_ready(st).is_some() {}
        }
    }
}

/// Every datagram the two ranks sealed (in order), and rank 0's
/// retransmission count.
fn exchange(rounds: u64) -> (Vec<Vec<u8>>, u64) {
    let cfg = ProtoConfig {
        mtu: 1472,
        window: 8,
        ..ProtoConfig::default()
    };
    let mut p = [
        Proto::new(0, 2, cfg, [5; 32], 0),
        Proto::new(1, 2, cfg, [5; 32], 0),
    ];
    let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let mut sealed = Vec::new();
    let mut now = 1_000_000u64;
    let mut drop = 0u64;
    for r in 0..rounds {
        // a message each way, sizes from a few bytes to several datagrams
        for (me, stream) in [(0usize, 0usize), (1, 1)] {
            // under Miri fewer and smaller messages (still several datagrams)
            let most = if cfg!(miri) {
                1600
            } else {
                payload.len() as u64
            };
            let len = ((r * 997 + me as u64 * 331) % most) as usize;
            let m = OutMsg {
                tag: 1,
                words: &[r, me as u64],
                payload: &payload[..len],
                deposit: None,
            };
            let mut from = 0;
            for _ in 0..16 {
                match p[me].send(now, 1 - me as u32, stream, &m, from) {
                    super::Sent::Upto(n) if n == len => break,
                    super::Sent::Upto(n) => from = n,
                    _ => break,
                }
                // what leaves here is lost on the way (but recorded)
                p[me].poll_transmit(now, false, &mut |_, d| sealed.push(d.to_vec()));
            }
        }
        // a few steps of the network
        for _ in 0..4 {
            step(&mut p, &mut now, 300_000, &mut drop, &mut sealed);
        }
    }
    // then time for retransmission timeouts, until both are done
    for _ in 0..40 {
        step(&mut p, &mut now, 3_000_000, &mut drop, &mut sealed);
        if p.iter().all(|q| q.quiesced()) {
            break;
        }
    }
    let retx = p[0].stats().retransmits + p[1].stats().retransmits;
    (sealed, retx)
}

#[test]
fn mac_no_two_datagrams_share_identifying_bytes() {
    let (sealed, retx) = exchange(if cfg!(miri) { 3 } else { 300 });
    assert!(retx > 0, "the test did not retransmit");
    let mut seen: HashMap<[u8; 56], usize> = HashMap::new();
    for (i, d) in sealed.iter().enumerate() {
        let mut id = [0u8; 56];
        id.copy_from_slice(&d[..56]);
        // (src, dst, pn) never repeats, so neither do the 56 bytes
        if let Some(j) = seen.insert(id, i) {
            panic!("datagrams {j} and {i} share their identifying bytes");
        }
    }
    let mut pns: HashMap<(u32, u32, u64), usize> = HashMap::new();
    for d in &sealed {
        let src = u32::from_le_bytes(d[8..12].try_into().unwrap());
        let dst = u32::from_le_bytes(d[12..16].try_into().unwrap());
        let pn = u64::from_le_bytes(d[48..56].try_into().unwrap());
        assert_ne!(pn, 0);
        *pns.entry((src, dst, pn)).or_default() += 1;
    }
    assert_eq!(pns.len(), sealed.len(), "a datagram number was reused");
}
