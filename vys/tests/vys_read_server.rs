//! The producer's read server under attack: garbage, forged protocol
//! datagrams, a flood of handshakes, a stranger's handshake. It drops and
//! counts what is not authentic, keeps its sessions bounded, never
//! panics, and a real consumer is still served.
use splitrt_vys::export::ExportedRing;
use splitrt_vys::handshake;
use splitrt_vys::read_client::{ReadResult, RemoteRing};
use splitrt_vys::read_server::{ReadServer, MAX_SESSIONS};
use splitrt_vys::ring::{check_slot, slot_bytes, write_slot, ReadOutcome};
use splitrt_vys::signal::DigestKind;
use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x77; 32];

fn read_one(server: std::net::SocketAddr, key: &[u8; 32]) -> std::io::Result<ReadOutcome> {
    let bytes = 2048;
    let mut r = RemoteRing::connect(
        server,
        key,
        4,
        slot_bytes(bytes),
        Duration::from_secs(2),
        Duration::from_millis(600),
        None,
        splitrt_vys::read_proto::DEFAULT_DATAGRAM,
    )?;
    let info = splitrt_vys::signal::SpectrumInfo {
        offset: slot_bytes(bytes) as u64,
        timestamp: 5,
        seq: 2,
        digest: DigestKind::Xxh3.of(&vec![2u8; bytes]),
    };
    r.read(
        info.offset,
        slot_bytes(bytes),
        info.seq,
        vec![0u8; slot_bytes(bytes)],
    )
    .map_err(|_| std::io::Error::other("no read slot"))?;
    let mut done = Vec::new();
    let t = Instant::now();
    while done.is_empty() && t.elapsed() < Duration::from_secs(5) {
        r.progress(&mut done);
        std::thread::sleep(Duration::from_micros(200));
    }
    let d = done
        .pop()
        .ok_or_else(|| std::io::Error::other("no answer"))?;
    match d.result {
        ReadResult::Slot => Ok(check_slot(
            &d.buf[..slot_bytes(bytes)],
            bytes,
            &info,
            DigestKind::Xxh3,
        )),
        ReadResult::Overwritten => Ok(ReadOutcome::Overwritten),
        ReadResult::Failed(e) => Err(std::io::Error::other(e)),
    }
}

fn server() -> ReadServer {
    let bytes = 2048;
    let ring = Arc::new(ExportedRing::new(4 * slot_bytes(bytes)).unwrap());
    for seq in 1..=2u64 {
        write_slot(
            ring.words(),
            bytes,
            4,
            seq,
            &vec![seq as u8; bytes],
            seq + 3,
            DigestKind::Xxh3,
        );
    }
    ReadServer::start(
        "127.0.0.1:0".parse().unwrap(),
        ring,
        9,
        1,
        KEY,
        None,
        splitrt_vys::read_proto::DEFAULT_DATAGRAM,
    )
    .unwrap()
}

#[test]
fn garbage_and_forgeries_are_dropped_and_a_real_consumer_is_served() {
    let s = server();
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        let len = (next() % 1600) as usize;
        let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        match i % 4 {
            // the fabric protocol's magic and version, random rest
            0 if len >= 4 => d[..3].copy_from_slice(&[0x53, 0x55, 1]),
            // a HELLO's magic and length with a bad tag
            1 => {
                d.resize(handshake::HELLO_LEN, 0);
                d[..4].copy_from_slice(&[0x56, 0x48, 1, 0]);
            }
            _ => {}
        }
        let _ = a.send_to(&d, s.addr());
    }
    // the server takes its socket's datagrams in order: by the time it
    // answers this consumer it has dealt with all of the above
    assert_eq!(read_one(s.addr(), &KEY).unwrap(), ReadOutcome::Valid);
    let st = s.stats();
    assert!(st.dropped.load(Ordering::Relaxed) > 10_000, "{st:?}");
    assert_eq!(st.sessions.load(Ordering::Relaxed), 1, "{st:?}");
}

#[test]
fn a_handshake_flood_is_bounded_and_does_not_lock_out_a_consumer() {
    let s = server();
    // replayed HELLOs (valid tags: an insider's, or a captured one) from
    // many addresses: sessions nobody can use
    let h = handshake::hello(
        &KEY,
        &handshake::Hello {
            consumer_nonce: [3u8; 32],
            rdma: false,
            datagram: splitrt_vys::read_proto::DEFAULT_DATAGRAM as u32,
        },
    );
    let socks: Vec<UdpSocket> = (0..3 * MAX_SESSIONS)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for so in &socks {
        so.send_to(&h, s.addr()).unwrap();
    }
    assert_eq!(read_one(s.addr(), &KEY).unwrap(), ReadOutcome::Valid);
    let st = s.stats();
    let opened = st.sessions.load(Ordering::Relaxed);
    let closed = st.closed.load(Ordering::Relaxed);
    assert!(opened - closed <= MAX_SESSIONS as u64, "{st:?}");
}

#[test]
fn a_stranger_gets_no_session() {
    let s = server();
    let t = Instant::now();
    let e = read_one(s.addr(), &[1u8; 32]).unwrap_err();
    assert!(e.to_string().contains("did not answer"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!(s.stats().sessions.load(Ordering::Relaxed), 0);
}

/// A read server that holds the stream key but misbehaves after the
/// handshake: `Silent` never answers, `OutsideLanding` answers with a
/// deposit outside the consumer's buffers, `WrongId` answers a read the
/// consumer never asked for, `RdmaSilent` offers RDMA reads in its
/// `WELCOME` and never answers the consumer's queue pair. Runs until
/// `stop` is set (10 s at most).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rogue {
    Silent,
    OutsideLanding,
    WrongId,
    RdmaSilent,
}

fn rogue_server(
    mode: Rogue,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    use splitrt_runtime::fabric::frames::{OutMsg, Reassembler};
    use splitrt_runtime::fabric::udp::proto::Proto;
    use splitrt_runtime::fabric::udp::wire::{HEADER, TAG};
    use splitrt_vys::read_proto::{session_config, STATUS_OK, T_DATA};
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        sock.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut buf = vec![0u8; 65_536];
        let t0 = Instant::now();
        let mut session: Option<(std::net::SocketAddr, Proto, Reassembler)> = None;
        while !stop.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(10) {
            let now = t0.elapsed().as_nanos() as u64;
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                if let Some(h) = handshake::read_hello(&KEY, &buf[..n]) {
                    let cn = h.consumer_nonce;
                    let sn = [9u8; 32];
                    let w = handshake::Welcome {
                        server_nonce: sn,
                        producer: 9,
                        instance: 1,
                        ring_bytes: 1 << 20,
                        rdma: mode == Rogue::RdmaSilent,
                        datagram: h.datagram,
                    };
                    sock.send_to(&handshake::welcome(&KEY, &cn, &w), from)
                        .unwrap();
                    let k = handshake::session_key(&KEY, &cn, &sn);
                    session = Some((
                        from,
                        Proto::new(0, 2, session_config(), k, now),
                        Reassembler::default(),
                    ));
                } else if let Some((_, p, _)) = session.as_mut() {
                    let _ = p.handle_datagram(now, buf[..n].to_vec());
                }
            }
            let Some((to, p, r)) = session.as_mut() else {
                continue;
            };
            while let Some((_, d)) = p.next_ready(0) {
                let mut reads = Vec::new();
                let _ = r.feed(
                    1,
                    &d[HEADER..d.len() - TAG],
                    64,
                    &mut Vec::new(),
                    &mut |m| {
                        if m.words.len() == 5 {
                            reads.push([m.words[0], m.words[2], m.words[3]]);
                        }
                    },
                );
                for [id, stride, landing] in reads {
                    let slot = vec![0u8; stride as usize];
                    let (id, deposit) = match mode {
                        Rogue::Silent | Rogue::RdmaSilent => continue,
                        Rogue::OutsideLanding => (id, landing + (1 << 40)),
                        Rogue::WrongId => (id ^ 0xdead_0000, landing),
                    };
                    let m = OutMsg {
                        tag: T_DATA,
                        words: &[id, STATUS_OK],
                        payload: &slot,
                        deposit: Some(deposit),
                    };
                    let _ = p.send(now, 1, 1, &m, 0);
                }
            }
            if now >= p.poll_timeout() {
                p.handle_timeout(now);
            }
            p.poll_transmit(now, true, &mut |_, b| {
                let _ = sock.send_to(b, *to);
            });
        }
    });
    (addr, t)
}

/// Against each rogue server, the consumer's read fails with a reason
/// (no hang, no panic, no write outside its buffers): a silent one by the
/// read timeout, one depositing outside the landing area at once (the
/// session is failed as malformed), one answering another read id by the
/// timeout.
#[test]
fn a_misbehaving_read_server_fails_reads_cleanly() {
    for (mode, want) in [
        (Rogue::Silent, "no answer"),
        (Rogue::OutsideLanding, "malformed reply"),
        (Rogue::WrongId, "no answer"),
    ] {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (addr, server) = rogue_server(mode, stop.clone());
        let bytes = 2048;
        let mut r = RemoteRing::connect(
            addr,
            &KEY,
            4,
            slot_bytes(bytes),
            Duration::from_millis(400),
            Duration::from_millis(600),
            None,
            splitrt_vys::read_proto::DEFAULT_DATAGRAM,
        )
        .unwrap();
        r.read(0, slot_bytes(bytes), 1, vec![0u8; slot_bytes(bytes)])
            .unwrap();
        let mut done = Vec::new();
        let t = Instant::now();
        while done.is_empty() && t.elapsed() < Duration::from_secs(3) {
            r.progress(&mut done);
            std::thread::sleep(Duration::from_millis(1));
        }
        let d = done
            .pop()
            .unwrap_or_else(|| panic!("{mode:?}: the read never ended"));
        match d.result {
            ReadResult::Failed(e) => assert!(e.contains(want), "{mode:?}: {e}"),
            other => panic!("{mode:?}: {other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{mode:?}: {:?}",
            t.elapsed()
        );
        assert_eq!(
            r.room(),
            if matches!(mode, Rogue::OutsideLanding) {
                0
            } else {
                4
            }
        );
        stop.store(true, Ordering::Release);
        server.join().unwrap();
    }
}

/// A read server that offers RDMA reads and never answers the consumer's
/// queue pair: the session is given up within the connect wait, saying
/// so (a queue pair it might still make would never be used), instead of
/// being kept with a request half done.
#[test]
fn an_rdma_offer_that_never_comes_fails_the_connect_in_time() {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr, server) = rogue_server(Rogue::RdmaSilent, stop.clone());
    let ep = splitrt_runtime::fabric::rdma::verbs::QpEndpoint {
        lid: 1,
        qpn: 2,
        psn: 3,
        gid: [0; 16],
    };
    let t = Instant::now();
    let r = RemoteRing::connect(
        addr,
        &KEY,
        4,
        4096,
        Duration::from_millis(400),
        Duration::from_millis(600),
        Some(ep),
        splitrt_vys::read_proto::DEFAULT_DATAGRAM,
    );
    let e = r.err().expect("no offer came");
    assert!(e.to_string().contains("offered no RDMA reads"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    stop.store(true, Ordering::Release);
    server.join().unwrap();
}
