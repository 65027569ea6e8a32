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
    send_to(p, len, words, None)
}

/// [`send`] with a deposit offset (a Long) or none (a Medium).
fn send_to(p: &mut Proto, len: usize, words: &[u64], deposit: Option<u64>) {
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let m = OutMsg {
        tag: 7,
        words,
        payload: &payload,
        deposit,
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

/// The frames of datagram `d` (body in the clear): for each, whether it
/// holds a whole message (`FIRST | LAST`) and its payload bytes.
fn frames_of(d: &[u8]) -> Vec<(bool, usize)> {
    use crate::fabric::frames::{F_FIRST, F_LAST};
    use crate::fabric::udp::wire::{HEADER, TAG};
    let body = &d[HEADER..d.len() - TAG];
    let mut v = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let f = &body[at..];
        let flags = f[0];
        let nwords = if flags & F_FIRST != 0 {
            f[1] as usize
        } else {
            0
        };
        let len = u32::from_le_bytes(f[4..8].try_into().unwrap()) as usize;
        v.push((flags & (F_FIRST | F_LAST) == F_FIRST | F_LAST, len));
        at += FRAME_HEADER + 8 * nwords + len;
    }
    assert_eq!(at, body.len(), "frames fill the body");
    v
}

/// Finding 2: after a small message on the reply stream (a get's 157 B
/// tail, a put's ack) the next unsplit reply was cut across two
/// datagrams (the rest of the open one and a fresh one) and reassembled,
/// and every later one in the burst too. Now the open datagram is sealed
/// first: every unsplit reply is one whole frame; the small ones still
/// travel as whole frames. Before: two of the three unsplit replies split.
#[test]
fn unsplit_reply_after_small_one_stays_whole() {
    let mut p = proto();
    let words = [1u64, 2, 3];
    let unsplit = p.max_body() - FRAME_HEADER - 8 * words.len();
    let mut sent = Vec::new();
    for len in [unsplit, 157, unsplit, 157, unsplit] {
        send(&mut p, len, &words);
        sent.extend(out(&mut p, false));
    }
    sent.extend(out(&mut p, true));
    let frames: Vec<(bool, usize)> = sent.iter().flat_map(|d| frames_of(d)).collect();
    let split: Vec<usize> = frames
        .iter()
        .filter(|(whole, _)| !whole)
        .map(|&(_, n)| n)
        .collect();
    assert!(
        split.is_empty(),
        "split frames of {split:?} B in {frames:?}"
    );
    let whole_unsplit = frames.iter().filter(|&&(_, n)| n == unsplit).count();
    assert_eq!(whole_unsplit, 3, "{frames:?}");
    assert_eq!(frames.len(), 5, "{frames:?}");
}

/// Review of h13-bulkfix, finding 1: only a Medium that nearly fills a
/// datagram is moved to a fresh one. Mid-size messages (here 700 B in a
/// 1,392 B body) and Longs keep filling the open datagram, split across
/// two where they must: 20 of them take 12 datagrams (the first leaves
/// alone at once, Nagle's rule on an idle stream; the other 19 fill 11),
/// as before the unsplit rule. (With the first version of the rule,
/// which sealed early for any message that fits a datagram: 20 each.)
#[test]
fn mid_size_messages_and_longs_keep_filling_datagrams() {
    for deposit in [None, Some(0)] {
        let mut p = proto();
        let mut sent = Vec::new();
        for _ in 0..20 {
            send_to(&mut p, 700, &[], deposit);
            sent.extend(out(&mut p, false));
        }
        sent.extend(out(&mut p, true));
        assert!(
            sent.len() <= 12,
            "{} datagrams for 20 x 700 B (deposit {deposit:?})",
            sent.len()
        );
    }
}
