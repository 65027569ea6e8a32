//! The queue pair (`RDMA`) and the reads (`READ`, `READV`) share the
//! request stream, and the protocol may take only part of a message when
//! its window fills (`Sent::Upto(k)`, `k` short of the payload): the rest
//! must follow from `k` before anything else starts on the stream, or the
//! server's reassembly is left half done and the next message misparsed
//! (the server then ends the session). Sans I/O: the session's protocol
//! driven by [`RemoteRing::send_requests`] and carried in memory to a
//! server's end, with a window forced to two datagrams; the socket is
//! never used.

use super::*;
use crate::session_pair::{self, carry, receive, Got};
use splitrt_runtime::fabric::frames::FRAME_HEADER;

/// A session (its socket bound on the loopback and never used) over
/// `proto`, with 64 landing places of 64 bytes.
fn ring(proto: Proto) -> RemoteRing {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
    RemoteRing {
        sock,
        proto,
        reasm: Reassembler::default(),
        landing: Landing {
            stride: 64,
            places: (0..64).map(|_| None).collect(),
            free: (0..64).rev().collect(),
        },
        unsent: VecDeque::new(),
        batch: None,
        next_id: 1,
        got: Vec::new(),
        late_check: Instant::now(),
        t0: Instant::now(),
        read_timeout: Duration::from_secs(60),
        failed: None,
        rbuf: Vec::new(),
        producer: 1,
        instance: 1,
        datagram: read_proto::MIN_DATAGRAM,
        ring_bytes: 1 << 16,
        offer: None,
        rdma: Asking::No,
    }
}

fn qp() -> QpEndpoint {
    QpEndpoint {
        lid: 9,
        qpn: 0x00ab_cdef,
        psn: 0x0012_3456,
        gid: [0x17; 16],
    }
}

/// Queue `n` reads; their requests as the server should decode them.
fn reads(r: &mut RemoteRing, n: usize) -> Vec<[u64; 5]> {
    (0..n as u64)
        .map(|i| {
            let id = r.read(i * 64, 64, 100 + i, vec![0; 64]).expect("a place");
            let place = id & ((1 << PLACE_BITS) - 1);
            [id, i * 64, 64, place * 64, 100 + i]
        })
        .collect()
}

/// Drive the stream until it is all taken and carried (a bounded number
/// of rounds); what the server's end reassembled, and the first
/// reassembly error.
fn run(r: &mut RemoteRing, server: &mut Proto) -> (Vec<Got>, Result<(), String>) {
    let (mut reasm, mut seg, mut got) = (Reassembler::default(), Vec::new(), Vec::new());
    let mut now = 1_000_000;
    for _ in 0..50 {
        now += 1_000_000;
        r.send_requests(now);
        assert_eq!(r.failed, None);
        carry(now, &mut r.proto, server);
        if let Err(e) = receive(
            server,
            0,
            crate::read_server::MAX_REQUEST,
            &mut reasm,
            &mut seg,
            &mut got,
        ) {
            return (got, Err(e));
        }
        carry(now, server, &mut r.proto);
    }
    assert!(r.unsent.is_empty() && r.batch.is_none(), "all taken");
    assert_eq!(r.rdma, Asking::Sent);
    (got, Ok(()))
}

/// The requests of the `READ`s and `READV`s among `got`, in order.
fn requests(got: &[Got]) -> Vec<[u64; 5]> {
    let mut out = Vec::new();
    for g in got {
        if g.tag == T_READ {
            out.push(g.words.clone().try_into().expect("five words"));
        } else if g.tag == T_READV {
            assert!(read_batch::decode(&g.words, &g.payload, &mut out));
        }
    }
    out
}

fn qp_got() -> Got {
    Got {
        tag: T_RDMA,
        words: Vec::new(),
        payload: qp().encode().to_vec(),
        deposit: None,
    }
}

fn filler(len: usize) -> Got {
    Got {
        tag: 99,
        words: Vec::new(),
        payload: vec![0x66; len],
        deposit: None,
    }
}

/// The queue pair straddles the last datagram the window allows: the
/// protocol takes its first bytes only. The rest follows once the window
/// opens, before the read queued behind it.
#[test]
#[cfg_attr(miri, ignore = "a socket, and protocol round trips with MACs")]
fn a_queue_pair_cut_by_the_window_is_finished_before_the_reads() {
    let (mut server, c) = session_pair::ends(session_pair::config(2));
    let mut r = ring(c);
    // earlier messages on the stream: the first leaves at once in
    // datagram 1 (idle stream), the second fills datagram 2 but for 40
    // bytes, room for the queue pair's frame header and 16 of its 26 bytes
    let len2 = r.proto.max_body() - 40 - FRAME_HEADER;
    for len in [8, len2] {
        let p = vec![0x66; len];
        let m = OutMsg {
            tag: 99,
            words: &[],
            payload: &p,
            deposit: None,
        };
        assert_eq!(r.proto.send(1_000, 0, 0, &m, 0), Sent::Upto(len));
    }
    r.rdma = Asking::Send(qp(), 0);
    r.send_requests(1_000);
    // the window (two datagrams) is full behind the queue pair's first
    // bytes (Upto(16) of its 26)
    assert_eq!(r.proto.credits(0, 0).0, 0, "the window is full");
    assert_eq!(r.rdma, Asking::Send(qp(), 16), "the queue pair was cut");
    let want = reads(&mut r, 1);
    let (got, res) = run(&mut r, &mut server);
    assert_eq!(res, Ok(()), "the server's reassembly");
    assert_eq!(got[..3], [filler(8), filler(len2), qp_got()]);
    assert_eq!(requests(&got[3..]), want);
}

/// The queue pair is to be sent while a `READV` is cut by the window:
/// the `READV`'s rest goes first, then the queue pair, then the reads
/// behind it.
#[test]
#[cfg_attr(miri, ignore = "a socket, and protocol round trips with MACs")]
fn a_queue_pair_waits_for_the_readv_the_window_cut() {
    let (mut server, c) = session_pair::ends(session_pair::config(2));
    let mut r = ring(c);
    // a lone READ leaves at once in datagram 1; a READV of 16 (640 B of
    // entries) fills datagram 2 and is cut there
    let mut want = reads(&mut r, 1);
    r.send_requests(1_000);
    want.extend(reads(&mut r, 16));
    r.send_requests(1_000);
    let cut = r.batch.as_ref().map(|b| b.from);
    assert!(
        cut.is_some_and(|k| k > 0 && k < 640),
        "the READV cut: {cut:?}"
    );
    r.rdma = Asking::Send(qp(), 0);
    want.extend(reads(&mut r, 2));
    let (got, res) = run(&mut r, &mut server);
    assert_eq!(res, Ok(()), "the server's reassembly");
    let at = got
        .iter()
        .position(|g| g.tag == T_RDMA)
        .expect("the queue pair");
    assert_eq!(got[at], qp_got());
    assert_eq!(got.iter().filter(|g| g.tag == T_RDMA).count(), 1);
    assert_eq!(requests(&got[..at]), want[..17]);
    assert_eq!(requests(&got[at + 1..]), want[17..]);
}

/// Review of session 14: the connect's wait for the RDMA offer names why
/// it ended. A session that failed meanwhile (the server dead, or its
/// answer malformed) says so with the cause, whether the queue pair was
/// cut or whole; before, a cut queue pair always blamed a shut window and
/// an unsent one returned a session that had already failed.
#[test]
fn the_offer_wait_names_a_failed_session() {
    let wait = Duration::from_secs(2);
    let at = "127.0.0.1:9";
    for rdma in [Asking::Send(qp(), 7), Asking::Send(qp(), 0), Asking::Sent] {
        let e = offer_outcome(&rdma, Some("the read server stopped answering"), at, wait)
            .expect("a failed session is an error");
        let e = e.to_string();
        assert!(e.contains("the read server stopped answering"), "{e}");
        assert!(e.contains(at) && !e.contains("window"), "{e}");
    }
    // without a failure: the cut queue pair and the missing offer are
    // named as before, and an unsent or answered one goes on
    let e = offer_outcome(&Asking::Send(qp(), 7), None, at, wait).expect("cut");
    assert!(e.to_string().contains("could not be sent whole"), "{e}");
    let e = offer_outcome(&Asking::Sent, None, at, wait).expect("no offer");
    assert!(e.to_string().contains("offered no RDMA reads"), "{e}");
    for rdma in [Asking::Send(qp(), 0), Asking::No, Asking::Answered] {
        assert!(offer_outcome(&rdma, None, at, wait).is_none());
    }
    // a failure once RDMA was answered or never asked is the reads' to
    // report (every read fails with it)
    for rdma in [Asking::No, Asking::Answered] {
        assert!(offer_outcome(&rdma, Some("x"), at, wait).is_none());
    }
}
