//! The `OFFER` and the `DATA` replies share the reply stream, and the
//! protocol may take only part of a message when its window fills
//! (`Sent::Upto(k)`, `k` short of the payload): the rest must follow from
//! `k` before anything else starts on the stream, or the consumer's
//! reassembly is left half done and the next message misparsed. Sans
//! I/O: [`send_stream`] into a session's protocol, carried in memory to a
//! consumer's end with a window forced to two datagrams.

use super::*;
use crate::rdma_export::RingOffer;
use crate::session_pair::{self, carry, receive, Got};
use splitrt_runtime::fabric::frames::FRAME_HEADER;

fn session(proto: Proto) -> Session {
    Session {
        consumer_nonce: [0; 32],
        welcome: [0; handshake::WELCOME_LEN],
        proto,
        reasm: Reassembler::default(),
        replies: VecDeque::new(),
        queued_bytes: 0,
        deferred: VecDeque::new(),
        confirmed: true,
        last: 0,
        qp: None,
        asked_rdma: true,
        offer: None,
    }
}

/// A slot of `len` bytes, its bytes a function of `id`.
fn slot(id: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 7 + id * 31) as u8).collect()
}

/// Queue reply `id` (a slot of `len` bytes landing at `landing`).
fn queue(s: &mut Session, id: u64, landing: u64, len: usize) {
    s.queued_bytes += len;
    s.replies.push_back(Reply {
        id,
        status: STATUS_OK,
        landing,
        slot: slot(id, len),
        from: 0,
    });
}

fn offer_bytes() -> Vec<u8> {
    RingOffer {
        qp: QpEndpoint {
            lid: 5,
            qpn: 0x0102_0304,
            psn: 0x00aa_bbcc,
            gid: [0x42; 16],
        },
        addr: 1 << 20,
        len: 1 << 16,
        rkey: 0xdead_beef,
    }
    .encode()
    .to_vec()
}

/// Landing bytes of the consumer (four places of 2 KiB).
const PLACE: u64 = 2048;

/// Serve the stream to the end until it is all taken and carried (a
/// bounded number of rounds); what the consumer reassembled, its landing
/// bytes, and the first reassembly error.
fn run(s: &mut Session, c: &mut Proto) -> (Vec<Got>, Vec<u8>, Result<(), String>) {
    let mut spare = ReplyBuffers::new(4, 1 << 20);
    let (mut reasm, mut seg, mut got) = (
        Reassembler::default(),
        vec![0u8; 4 * PLACE as usize],
        Vec::new(),
    );
    let mut now = 1_000_000;
    for _ in 0..50 {
        now += 1_000_000;
        assert!(!send_stream(s, now, &mut spare), "the consumer is alive");
        carry(now, &mut s.proto, c);
        if let Err(e) = receive(
            c,
            1,
            crate::read_proto::MAX_CONTROL,
            &mut reasm,
            &mut seg,
            &mut got,
        ) {
            return (got, seg, Err(e));
        }
        carry(now, c, &mut s.proto);
    }
    assert!(s.offer.is_none() && s.replies.is_empty(), "all taken");
    (got, seg, Ok(()))
}

fn data(id: u64, landing: u64, len: usize) -> Got {
    Got {
        tag: T_DATA,
        words: vec![id, STATUS_OK],
        payload: Vec::new(),
        deposit: Some((landing, len)),
    }
}

fn offer_got() -> Got {
    Got {
        tag: T_OFFER,
        words: vec![STATUS_OK],
        payload: offer_bytes(),
        deposit: None,
    }
}

fn check_landed(seg: &[u8], id: u64, landing: u64, len: usize) {
    let at = landing as usize;
    assert_eq!(
        seg[at..at + len],
        slot(id, len)[..],
        "reply {id} landed whole"
    );
}

/// The offer straddles the last datagram the window allows: the protocol
/// takes its first bytes only. The rest follows once the window opens,
/// before the reply queued behind it.
#[test]
#[cfg_attr(miri, ignore = "protocol round trips with MACs: slow under Miri")]
fn an_offer_cut_by_the_window_is_finished_before_the_next_reply() {
    let (p, mut c) = session_pair::ends(session_pair::config(2));
    let mut s = session(p);
    let max_body = s.proto.max_body();
    // reply 1 leaves at once in datagram 1 (idle stream); reply 2 fills
    // datagram 2 but for 40 bytes, room for the offer's frame header, its
    // word and 8 of its 46 payload bytes
    let len2 = max_body - 40 - FRAME_HEADER - 16;
    queue(&mut s, 1, 0, 16);
    queue(&mut s, 2, PLACE, len2);
    let mut spare = ReplyBuffers::new(4, 1 << 20);
    assert!(!send_stream(&mut s, 1_000, &mut spare));
    assert!(s.replies.is_empty());
    s.offer = Some(Offer {
        status: STATUS_OK,
        payload: offer_bytes(),
        from: 0,
    });
    queue(&mut s, 3, 2 * PLACE, 300);
    assert!(!send_stream(&mut s, 1_000, &mut spare));
    // the window (two datagrams) is full behind the offer's first bytes
    // (Upto(8) of its 46)
    assert_eq!(s.proto.credits(1, 1).0, 0, "the window is full");
    assert_eq!(
        s.offer.as_ref().map(|o| o.from),
        Some(8),
        "the offer was cut"
    );
    replies_then_offer_then_reply_3(&mut s, &mut c, len2);
}

/// The offer is made while a reply is cut by the window: the reply's
/// rest goes first, then the offer, then the replies behind it.
#[test]
#[cfg_attr(miri, ignore = "protocol round trips with MACs: slow under Miri")]
fn an_offer_waits_for_the_reply_the_window_cut() {
    let (p, mut c) = session_pair::ends(session_pair::config(2));
    let mut s = session(p);
    let max_body = s.proto.max_body();
    let len2 = max_body + 100;
    queue(&mut s, 1, 0, 16);
    queue(&mut s, 2, PLACE, len2);
    let mut spare = ReplyBuffers::new(4, 1 << 20);
    assert!(!send_stream(&mut s, 1_000, &mut spare));
    let cut = s.replies.front().map(|r| r.from);
    assert!(
        cut.is_some_and(|k| k > 0 && k < len2),
        "reply 2 cut: {cut:?}"
    );
    s.offer = Some(Offer {
        status: STATUS_OK,
        payload: offer_bytes(),
        from: 0,
    });
    queue(&mut s, 3, 2 * PLACE, 300);
    replies_then_offer_then_reply_3(&mut s, &mut c, len2);
}

/// Run the session to the end: the consumer must get replies 1 (16 B at
/// 0) and 2 (`len2` B at `PLACE`), then the offer, then reply 3 (300 B at
/// `2 * PLACE`), each reply landed whole.
fn replies_then_offer_then_reply_3(s: &mut Session, c: &mut Proto, len2: usize) {
    let (got, seg, r) = run(s, c);
    assert_eq!(r, Ok(()), "the consumer's reassembly");
    assert_eq!(
        got,
        [
            data(1, 0, 16),
            data(2, PLACE, len2),
            offer_got(),
            data(3, 2 * PLACE, 300)
        ]
    );
    check_landed(&seg, 1, 0, 16);
    check_landed(&seg, 2, PLACE, len2);
    check_landed(&seg, 3, 2 * PLACE, 300);
}
