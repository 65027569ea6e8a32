//! Cross-host speed (issue 27 part 6): batched reads (`READV`) served and
//! validated like single ones, a malformed batch ending only its own
//! session, and a read server of several threads serving several
//! consumers at once.
use splitrt_runtime::fabric::frames::OutMsg;
use splitrt_runtime::fabric::udp::proto::{Proto, Sent};
use splitrt_vys::export::ExportedRing;
use splitrt_vys::handshake;
use splitrt_vys::read_batch::{self, MAX_BATCH, T_READV};
use splitrt_vys::read_client::{Done, ReadResult, RemoteRing};
use splitrt_vys::read_proto::{self, DEFAULT_DATAGRAM};
use splitrt_vys::read_server::ReadServer;
use splitrt_vys::ring::{check_slot, slot_bytes, write_slot, ReadOutcome};
use splitrt_vys::signal::{DigestKind, SpectrumInfo};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5e; 32];
const BYTES: usize = 4096;
const SLOTS: usize = 256;

/// A ring of `SLOTS` slots, slot `i` holding sequence id `i + 1`.
fn ring() -> Arc<ExportedRing> {
    let ring = Arc::new(ExportedRing::new(SLOTS * slot_bytes(BYTES)).unwrap());
    for seq in 1..=SLOTS as u64 {
        write_slot(
            ring.words(),
            BYTES,
            SLOTS,
            seq,
            &vec![seq as u8; BYTES],
            seq * 10,
            DigestKind::Xxh3,
        );
    }
    ring
}

fn info(seq: u64) -> SpectrumInfo {
    SpectrumInfo {
        offset: (seq - 1) * slot_bytes(BYTES) as u64,
        timestamp: seq * 10,
        seq,
        digest: DigestKind::Xxh3.of(&vec![seq as u8; BYTES]),
    }
}

fn connect(addr: SocketAddr, places: usize, datagram: usize) -> RemoteRing {
    RemoteRing::connect(
        addr,
        &KEY,
        places,
        slot_bytes(BYTES),
        Duration::from_secs(5),
        Duration::from_secs(3),
        None,
        datagram,
    )
    .unwrap()
}

/// Queue reads of every slot (as many at once as there are places), wait
/// for all; the number of valid spectra.
fn read_all(r: &mut RemoteRing) -> usize {
    let mut next = 1u64;
    let mut valid = 0;
    let mut finished = 0;
    let mut asked = std::collections::HashMap::new();
    let mut done: Vec<Done> = Vec::new();
    let t = Instant::now();
    while finished < SLOTS && t.elapsed() < Duration::from_secs(20) {
        while next <= SLOTS as u64 && r.room() > 0 {
            let i = info(next);
            let id = r
                .read(
                    i.offset,
                    slot_bytes(BYTES),
                    i.seq,
                    vec![0; slot_bytes(BYTES)],
                )
                .unwrap();
            asked.insert(id, i);
            next += 1;
        }
        let mut p = libc::pollfd {
            fd: r.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, 5) };
        r.progress(&mut done);
        for d in done.drain(..) {
            finished += 1;
            let i = asked.remove(&d.id).expect("a read asked for");
            match d.result {
                ReadResult::Slot => {
                    let o = check_slot(&d.buf[..slot_bytes(BYTES)], BYTES, &i, DigestKind::Xxh3);
                    assert_eq!(o, ReadOutcome::Valid, "seq {}", i.seq);
                    valid += 1;
                }
                other => panic!("read of seq {} ended {other:?}", i.seq),
            }
        }
    }
    valid
}

#[test]
fn vysspeed_batched_reads_are_served_and_validated() {
    let s = ReadServer::start(
        "127.0.0.1:0".parse().unwrap(),
        ring(),
        3,
        1,
        KEY,
        None,
        DEFAULT_DATAGRAM,
    )
    .unwrap();
    // 128 places: the consumer queues more reads than one READV carries;
    // with small datagrams a READV also spans frames
    for datagram in [DEFAULT_DATAGRAM, read_proto::DATAGRAM_1500, 600] {
        let mut r = connect(s.addr(), 2 * MAX_BATCH, datagram);
        assert_eq!(read_all(&mut r), SLOTS, "datagram {datagram}");
    }
    let st = s.stats();
    assert_eq!(st.reads.load(Ordering::Relaxed), 3 * SLOTS as u64, "{st:?}");
    assert_eq!(st.closed.load(Ordering::Relaxed), 0, "{st:?}");
}

/// A session opened by hand (holding the key), to send what a real
/// consumer never does.
fn raw_session(addr: SocketAddr) -> (UdpSocket, Proto, Instant) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let cn = handshake::nonce().unwrap();
    let hello = handshake::hello(
        &KEY,
        &handshake::Hello {
            consumer_nonce: cn,
            rdma: false,
            datagram: DEFAULT_DATAGRAM as u32,
        },
    );
    sock.send(&hello).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let n = sock.recv(&mut buf).unwrap();
    let w = handshake::read_welcome(&KEY, &cn, &buf[..n]).expect("a welcome");
    let skey = handshake::session_key(&KEY, &cn, &w.server_nonce);
    let t0 = Instant::now();
    let proto = Proto::new(
        1,
        2,
        read_proto::session_config_for(w.datagram as usize),
        skey,
        0,
    );
    (sock, proto, t0)
}

#[test]
fn vysspeed_malformed_batches_end_their_session_only() {
    let s = ReadServer::start(
        "127.0.0.1:0".parse().unwrap(),
        ring(),
        3,
        1,
        KEY,
        None,
        DEFAULT_DATAGRAM,
    )
    .unwrap();
    let mut entries = Vec::new();
    read_batch::encode(&[[1, 0, slot_bytes(BYTES) as u64, 0, 1]], &mut entries);
    let too_many = vec![0u8; (MAX_BATCH + 1) * read_batch::ENTRY_BYTES];
    // (count word, payload): none, too many, a count the payload belies,
    // a payload of a partial entry
    let bad: [(&[u64], &[u8]); 5] = [
        (&[0], &[]),
        (&[MAX_BATCH as u64 + 1], &too_many),
        (&[2], &entries),
        (&[1], &entries[..39]),
        (&[], &entries),
    ];
    for (i, (words, payload)) in bad.iter().enumerate() {
        let (sock, mut proto, t0) = raw_session(s.addr());
        let now = t0.elapsed().as_nanos() as u64;
        let m = OutMsg {
            tag: T_READV,
            words,
            payload,
            deposit: None,
        };
        assert_eq!(proto.send(now, 0, 0, &m, 0), Sent::Upto(payload.len()));
        proto.poll_transmit(now, true, &mut |_, b| {
            sock.send(b).unwrap();
        });
        // the server ends that session (and only that one)
        let t = Instant::now();
        while s.stats().closed.load(Ordering::Relaxed) < i as u64 + 1 {
            assert!(t.elapsed() < Duration::from_secs(5), "case {i} not closed");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // a real consumer is served after all of them
    let mut r = connect(s.addr(), MAX_BATCH, DEFAULT_DATAGRAM);
    assert_eq!(read_all(&mut r), SLOTS);
    assert_eq!(s.stats().closed.load(Ordering::Relaxed), bad.len() as u64);
}

#[test]
fn vysspeed_several_threads_serve_several_consumers() {
    let s = ReadServer::start_threads(
        "127.0.0.1:0".parse().unwrap(),
        ring(),
        3,
        1,
        KEY,
        None,
        read_proto::DATAGRAM_1500,
        4,
    )
    .unwrap();
    let addr = s.addr();
    let consumers: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut r = connect(addr, MAX_BATCH, DEFAULT_DATAGRAM);
                read_all(&mut r)
            })
        })
        .collect();
    for c in consumers {
        assert_eq!(c.join().unwrap(), SLOTS);
    }
    let st = s.stats();
    assert_eq!(st.sessions.load(Ordering::Relaxed), 6, "{st:?}");
    assert_eq!(st.reads.load(Ordering::Relaxed), 6 * SLOTS as u64, "{st:?}");
    assert!(st.largest_datagram.load(Ordering::Relaxed) <= read_proto::DATAGRAM_1500 as u64);
}

/// One datagram may ask for far more reads than the server's reply queue
/// holds (64): the server copies a slot only when its reply has room, so
/// what one consumer makes it hold stays bounded. Before, every read of
/// the datagram was copied at once (1,280 slot copies queued).
#[test]
fn fixes_one_datagram_cannot_queue_more_than_the_bound() {
    let s = ReadServer::start(
        "127.0.0.1:0".parse().unwrap(),
        ring(),
        3,
        1,
        KEY,
        None,
        DEFAULT_DATAGRAM,
    )
    .unwrap();
    let (sock, mut proto, t0) = raw_session(s.addr());
    let stride = slot_bytes(BYTES) as u64;
    // 20 READVs of 64 reads each, sent before one transmit
    let mut payloads = Vec::new();
    for b in 0..20u64 {
        let reads: Vec<[u64; 5]> = (0..MAX_BATCH as u64)
            .map(|k| {
                let i = (b * MAX_BATCH as u64 + k) % SLOTS as u64;
                [b * 1000 + k, i * stride, stride, 0, i + 1]
            })
            .collect();
        let mut p = Vec::new();
        read_batch::encode(&reads, &mut p);
        payloads.push(p);
    }
    let now = t0.elapsed().as_nanos() as u64;
    let count = [MAX_BATCH as u64];
    for p in &payloads {
        let m = OutMsg {
            tag: T_READV,
            words: &count,
            payload: p,
            deposit: None,
        };
        assert_eq!(proto.send(now, 0, 0, &m, 0), Sent::Upto(p.len()));
    }
    proto.poll_transmit(now, true, &mut |_, b| {
        sock.send(b).unwrap();
    });
    // the server serves the first room-full (this consumer acks nothing)
    let t = Instant::now();
    while s.stats().reads.load(Ordering::Relaxed) < 64 {
        assert!(t.elapsed() < Duration::from_secs(5), "no reads served");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(200));
    let peak = s.stats().queued_peak.load(Ordering::Relaxed);
    assert!(
        peak <= 64,
        "one session held {peak} replies (slot copies) queued at once (bound 64)"
    );
}
