//! Unsplit replies (session 13, get over UDP): a Medium whose frame fills
//! a whole datagram body (`max_body - FRAME_HEADER - 8 * words` payload
//! bytes, the size a get's chunks take) leaves as one datagram, at once,
//! whatever was sent on the stream before it.

use super::{Proto, ProtoConfig, Sent};
use crate::fabric::frames::{OutMsg, FRAME_HEADER};


/// A small datagram size keeps the tests cheap (also under Miri).
fn proto() -> Proto {
    let cfg = ProtoConfig {
        mtu: 1472,
        window: 16,
        ..ProtoConfig::default()
    };
    Proto::new(0, 2, cfg, [3; 32], 0)
}

/// Queue `len` payload bytes with `words` argument words to rank 1 on
/// the reply stream, whole.
fn send(p: &mut Proto, len: usize, words: &[u64]) {
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let m = OutMsg {
        tag: 7,
        words,
        payload: &payload,
        deposit: None,
    };
    assert_eq!(p.send(1_000, 1, 1, &m, 0), Sent::Upto(len), "{len} B");
}

/// The datagrams handed out by one transmit pass.
fn out(p: &mut Proto, flush: bool) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    p.poll_transmit(1_000, flush, &mut |_, d| v.push(d.to_vec()));
    v
}

/// Finding 1: a datagram filled exactly (by an unsplit reply) leaves at
/// once. Before, it stayed open until the next send or the poll's flush:
/// per step `[1, 0, 1, 1]` (the second reply left with the third send,
/// the third with the flush).
#[test]
fn full_datagram_leaves_at_once() {
    let mut p = proto();
    let words = [1u64, 2, 3];
    let unsplit = p.max_body() - FRAME_HEADER - 8 * words.len();
    let mut per_step = Vec::new();
    for _ in 0..3 {
        send(&mut p, unsplit, &words);
        per_step.push(out(&mut p, false).len());
    }
    per_step.push(out(&mut p, true).len());
    assert_eq!(per_step, [1, 1, 1, 0]);
}
