//! vys end to end with reads by RDMA: producers and consumers through the
//! library APIs, signals by multicast on loopback, the read session's
//! handshake over real UDP sockets, and the reads themselves over the
//! verbs model (a named test double of RC queue pairs: this machine has
//! no RDMA device, so producer and consumer share one process and one
//! model network). The real device path is tested here only as far as it
//! can run: asking for it fails at start, saying what is missing.

mod common;
use common::drain;
use splitrt_runtime::fabric::rdma::model::ModelNetwork;
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::handshake;
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::rdma_device::RdmaDevice;
use splitrt_vys::signal::DigestKind;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5a; 32];

fn group(n: u16) -> SocketAddrV4 {
    let port = 36_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 79, n as u8 + 1), port)
}

fn product(spw: u16) -> ProductId {
    ProductId {
        stations: [3, 4],
        spectral_window: spw,
        stokes: 0,
    }
}

fn producer(n: u16, bytes: usize, slots: usize, rdma: Option<RdmaDevice>) -> Producer {
    let mut pc = ProducerConfig::new(KEY, group(n), Ipv4Addr::LOCALHOST, bytes);
    pc.slots = slots;
    pc.digest = DigestKind::None;
    pc.spectra_per_signal = 4;
    pc.rdma = rdma;
    Producer::new(pc).unwrap()
}

fn consumer_config(n: u16, bytes: usize, rdma: Option<RdmaDevice>) -> ConsumerConfig {
    let mut cc = ConsumerConfig::new(KEY, group(n), Ipv4Addr::LOCALHOST);
    // across hosts, as far as the consumer can tell
    cc.local_reads = false;
    cc.max_spectrum_bytes = bytes;
    cc.queue_len = 1 << 16;
    // a read for every spectrum the tests write at once (a burst beyond
    // the reads allowed outstanding is starvation, by design)
    cc.max_outstanding_reads = 1024;
    cc.rdma = rdma;
    cc
}

/// Write `rounds` checkable spectra of spectral windows 0 and 1.
fn produce(p: &mut Producer, bytes: usize, rounds: u64) {
    let mut d = vec![0u8; bytes];
    for t in 1..=rounds {
        for spw in 0..2 {
            let pr = product(spw);
            checkable::fill((pr.stations, spw, 0), t, &mut d);
            p.write(pr, &d, t).unwrap();
        }
    }
    p.flush().unwrap();
}

#[test]
fn a_consumer_reads_by_rdma_what_its_filter_chose_and_the_producer_serves_no_read() {
    let net = ModelNetwork::new(5);
    let bytes = 4096;
    let mut p = producer(0, bytes, 1024, Some(RdmaDevice::verbs_model(net.clone())));
    let cc = consumer_config(0, bytes, Some(RdmaDevice::verbs_model(net.clone())));
    let c = Consumer::start(cc, |p, _, pass| pass.fill(p.spectral_window == 1)).unwrap();
    let rounds = 300;
    produce(&mut p, bytes, rounds);
    let (valid, stats) = drain(&c, |id| id.spectral_window == 1, rounds);
    println!("{valid} valid, {stats:?}, model {:?}", net.stats());
    assert_eq!(valid, rounds, "every chosen spectrum, valid");
    assert_eq!(stats.rdma_reads, valid);
    assert_eq!(stats.remote_reads + stats.local_reads, 0);
    assert_eq!(
        stats.verification_failures + stats.read_failures + stats.starved,
        0
    );
    let server = p.server().unwrap().stats();
    assert_eq!(
        server.reads.load(Ordering::Relaxed),
        0,
        "no read by the server"
    );
    assert_eq!(server.rdma_sessions.load(Ordering::Relaxed), 1);
    assert_eq!(
        net.stats().reads,
        3 * valid,
        "tail, body and head per spectrum"
    );
}

/// A consumer that goes away: the producer's queue pair for it is
/// destroyed once its session falls silent, and a consumer that comes
/// later is served.
#[test]
fn a_consumer_that_goes_away_leaves_no_queue_pair_behind() {
    let net = ModelNetwork::new(7);
    let bytes = 1024;
    let mut p = producer(2, bytes, 256, Some(RdmaDevice::verbs_model(net.clone())));
    for round in 0..2 {
        let cc = consumer_config(2, bytes, Some(RdmaDevice::verbs_model(net.clone())));
        let c = Consumer::start(cc, |p, _, pass| pass.fill(p.spectral_window == 1)).unwrap();
        produce(&mut p, bytes, 50);
        let (valid, stats) = drain(&c, |id| id.spectral_window == 1, 50);
        assert_eq!((valid, stats.rdma_reads), (50, 50), "round {round}");
        let open = p
            .server()
            .unwrap()
            .stats()
            .rdma_open
            .load(Ordering::Relaxed);
        assert_eq!(open, 1, "round {round}: the producer's queue pair for it");
        drop(c);
        // the consumer's side is gone with it; the producer's when the
        // session's peer timeout (5 s) passes
        let t = Instant::now();
        while net.live_qps() > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the producer kept the queue pair of a consumer that left"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let s = p.server().unwrap().stats();
        assert_eq!(s.rdma_open.load(Ordering::Relaxed), 0);
        assert_eq!(s.rdma_sessions.load(Ordering::Relaxed), round + 1);
    }
}

/// A consumer with RDMA and a producer without: read through the read
/// server, and the consumer's unused queue pair is destroyed.
#[test]
fn a_producer_without_rdma_is_read_through_its_read_server() {
    let net = ModelNetwork::new(9);
    let bytes = 2048;
    let mut p = producer(3, bytes, 1024, None);
    let cc = consumer_config(3, bytes, Some(RdmaDevice::verbs_model(net.clone())));
    let c = Consumer::start(cc, |p, _, pass| pass.fill(p.spectral_window == 1)).unwrap();
    produce(&mut p, bytes, 100);
    let (valid, stats) = drain(&c, |id| id.spectral_window == 1, 100);
    assert_eq!(valid, 100);
    assert_eq!((stats.remote_reads, stats.rdma_reads), (100, 0));
    assert_eq!(net.live_qps(), 0);
}

/// A captured `HELLO` replayed from new addresses (or one under another
/// key) gets no queue pair: queue pairs are made only for a consumer that
/// proved the session key inside the session.
#[test]
fn a_replayed_hello_gets_no_queue_pair() {
    let net = ModelNetwork::new(13);
    let p = producer(5, 512, 16, Some(RdmaDevice::verbs_model(net.clone())));
    let socks: Vec<UdpSocket> = (0..10)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let captured = handshake::hello(
        &KEY,
        &handshake::Hello {
            consumer_nonce: [1; 32],
            rdma: true,
            datagram: splitrt_vys::read_proto::DEFAULT_DATAGRAM as u32,
        },
    );
    let foreign = handshake::hello(
        &[0x11; 32],
        &handshake::Hello {
            consumer_nonce: [2; 32],
            rdma: true,
            datagram: splitrt_vys::read_proto::DEFAULT_DATAGRAM as u32,
        },
    );
    let mut answered = 0;
    for so in &socks {
        so.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        so.send_to(&captured, p.address()).unwrap();
        so.send_to(&foreign, p.address()).unwrap();
        // what a stranger can send inside the session: not authentic
        so.send_to(&[0u8; 200], p.address()).unwrap();
        let mut b = [0u8; 2048];
        if let Ok(n) = so.recv(&mut b) {
            assert_eq!(n, handshake::WELCOME_LEN, "only the WELCOME comes back");
            answered += 1;
        }
    }
    assert_eq!(
        answered, 10,
        "each replay is welcomed (a session nobody can use)"
    );
    std::thread::sleep(Duration::from_millis(100));
    let s = p.server().unwrap().stats();
    assert_eq!(s.rdma_sessions.load(Ordering::Relaxed), 0);
    assert_eq!(net.live_qps(), 0, "no queue pair for a replay");
}

/// A consumer that got a queue pair the honest way cannot write the
/// producer's ring: the ring and the queue pair allow remote reads only.
#[test]
fn a_consumer_cannot_write_the_producers_ring() {
    use splitrt_runtime::fabric::rdma::verbs::{
        Access, Completion, Op, QpCaps, QpId, SendWr, Verbs, WcKind, WcStatus,
    };
    use splitrt_vys::read_client::RemoteRing;
    let net = ModelNetwork::new(15);
    let bytes = 512;
    let mut p = producer(4, bytes, 256, Some(RdmaDevice::verbs_model(net.clone())));
    produce(&mut p, bytes, 4);
    let mut dev = net.device("evil");
    let qp = dev
        .create_qp(QpCaps {
            send_depth: 4,
            recv_depth: 1,
            max_inline: 0,
            remote: Access::Local,
        })
        .unwrap();
    let ring = RemoteRing::connect(
        p.address(),
        &KEY,
        4,
        4096,
        Duration::from_secs(2),
        Duration::from_secs(2),
        Some(dev.endpoint(qp)),
        splitrt_vys::read_proto::DEFAULT_DATAGRAM,
    )
    .unwrap();
    let offer = ring.offer.expect("an offer for a holder of the key");
    dev.connect(qp, &offer.qp).unwrap();
    let mut evil = vec![0xffu8; 64];
    // SAFETY: `evil` stays allocated until after the region is
    // deregistered below, and is not touched while requests run.
    let local = unsafe { dev.register(evil.as_mut_ptr(), evil.len(), Access::Local) }.unwrap();
    let try_op = |dev: &mut splitrt_runtime::fabric::rdma::model::ModelDevice, op: Op| {
        let wr = SendWr {
            wr_id: 1,
            op,
            sge: local.sge(local.addr, 64),
            inline: false,
            fence: false,
        };
        // SAFETY: the local side is `evil`, registered above, untouched
        // until this request's completion is polled below.
        unsafe { dev.post_send(qp, &wr) }.unwrap();
        let mut c = [Completion {
            wr_id: 0,
            qp: QpId(0),
            kind: WcKind::Send,
            status: WcStatus::Success,
            len: 0,
        }; 4];
        let t = Instant::now();
        loop {
            if dev.poll(&mut c).unwrap() > 0 {
                return c[0].status;
            }
            assert!(t.elapsed() < Duration::from_secs(5));
        }
    };
    let st = try_op(
        &mut dev,
        Op::Write {
            raddr: offer.addr,
            rkey: offer.rkey,
        },
    );
    assert_eq!(st, WcStatus::RemoteAccess, "an RDMA write into the ring");
    assert_eq!(net.stats().writes, 0);
    // registered memory stays mapped until deregistered
    dev.deregister(&local).unwrap();
    drop(evil);
    // the spectra are untouched: a consumer still reads them all
    let c = Consumer::start(consumer_config(4, bytes, None), |p, _, pass| {
        pass.fill(p.spectral_window == 1)
    })
    .unwrap();
    produce(&mut p, bytes, 20);
    let (valid, _) = drain(&c, |id| id.spectral_window == 1, 20);
    assert_eq!(valid, 20);
}

/// On this machine (no RDMA device; maybe no `ibverbs` feature) asking
/// for RDMA reads fails at start on both sides, saying what is missing
/// and how to do without.
#[test]
fn rdma_without_a_device_fails_at_start_saying_why() {
    let cc = consumer_config(6, 512, Some(RdmaDevice::hardware()));
    let e = Consumer::start(cc, |_, _, pass| pass.fill(true))
        .err()
        .expect("no RDMA device here");
    let m = e.to_string();
    println!("{m}");
    assert!(
        m.contains("vys consumer: RDMA reads need the RDMA device"),
        "{m}"
    );
    assert!(
        m.contains("no RDMA device found") || m.contains("--features ibverbs"),
        "{m}"
    );
    assert!(m.contains("leave `rdma` unset"), "{m}");
    let mut pc = ProducerConfig::new(KEY, group(6), Ipv4Addr::LOCALHOST, 512);
    pc.rdma = Some(RdmaDevice::hardware());
    let e = Producer::new(pc).err().expect("no RDMA device here");
    assert!(
        e.to_string().contains("vys producer: RDMA reads need"),
        "{e}"
    );
}

/// A producer that goes away while a consumer reads it by RDMA: the
/// consumer's reads fail (reported, never taken as valid), nothing hangs,
/// and END still comes last.
#[test]
fn a_producer_that_goes_away_fails_the_reads_of_it_and_nothing_hangs() {
    let net = ModelNetwork::new(17);
    let bytes = 1024;
    let mut pc = ProducerConfig::new(KEY, group(7), Ipv4Addr::LOCALHOST, bytes);
    pc.group = None;
    pc.queue_signals = true;
    pc.spectra_per_signal = 1;
    pc.digest = DigestKind::None;
    pc.rdma = Some(RdmaDevice::verbs_model(net.clone()));
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::without_multicast(KEY);
    cc.local_reads = false;
    cc.max_spectrum_bytes = bytes;
    cc.rdma = Some(RdmaDevice::verbs_model(net.clone()));
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let inject = c.injector();
    let mut d = vec![0u8; bytes];
    let mut write = |p: &mut Producer, t: u64| {
        checkable::fill(([3, 4], 0, 0), t, &mut d);
        p.write(product(0), &d, t).unwrap();
    };
    for t in 1..=20 {
        write(&mut p, t);
    }
    p.flush().unwrap();
    for s in p.take_signals() {
        assert!(inject.inject(&s));
    }
    let mut valid = 0;
    let t = Instant::now();
    while valid < 20 {
        assert!(t.elapsed() < Duration::from_secs(30), "{valid} of 20");
        if let Some(Message::Valid(_)) = c.recv(Duration::from_secs(5)) {
            valid += 1;
        }
    }
    for t in 21..=40 {
        write(&mut p, t);
    }
    p.flush().unwrap();
    let late = p.take_signals();
    drop(p);
    for s in late {
        assert!(inject.inject(&s));
    }
    let mut failed = 0;
    let t = Instant::now();
    let stats = loop {
        assert!(t.elapsed() < Duration::from_secs(30), "no END");
        match c.recv(Duration::from_secs(5)) {
            Some(Message::Valid(s)) => panic!("valid after the producer left: {:?}", s.info),
            Some(Message::ReadFailure { error, .. }) => {
                if failed == 0 {
                    println!("first failure: {error}");
                }
                failed += 1;
                if failed == 20 {
                    c.shutdown();
                }
            }
            Some(Message::End { stats, .. }) => break stats,
            Some(m) => println!("{m}"),
            None => panic!("no message for 5 s ({failed} of 20 failures)"),
        }
    };
    assert_eq!((stats.valid, stats.read_failures), (20, 20), "{stats:?}");
}

/// A consumer that holds the key but sends a malformed queue pair (wrong
/// length), or asks twice: its session is closed, no queue pair is left,
/// and the server goes on serving others.
#[test]
fn a_malformed_or_repeated_rdma_request_closes_the_session() {
    use splitrt_runtime::fabric::frames::OutMsg;
    use splitrt_runtime::fabric::rdma::verbs::{Access, QpCaps, Verbs};
    use splitrt_runtime::fabric::udp::proto::Proto;
    use splitrt_vys::read_proto::{session_config, T_RDMA};
    let net = ModelNetwork::new(19);
    let p = producer(7, 512, 16, Some(RdmaDevice::verbs_model(net.clone())));
    let server = p.server().unwrap().stats();
    let mut dev = net.device("rogue");
    let qp = dev
        .create_qp(QpCaps {
            send_depth: 4,
            recv_depth: 1,
            max_inline: 0,
            remote: Access::Local,
        })
        .unwrap();
    let good = dev.endpoint(qp).encode();
    // (payloads of the RDMA messages each session sends, then whether a
    // queue pair may be left for it)
    let cases: [(&[&[u8]], usize); 2] = [(&[&good[..3]], 0), (&[&good, &good], 0)];
    for (i, (payloads, qps_left)) in cases.iter().enumerate() {
        let closed = server.closed.load(Ordering::Relaxed);
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(p.address()).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let cn = [i as u8 + 1; 32];
        let hello = handshake::Hello {
            consumer_nonce: cn,
            rdma: true,
            datagram: splitrt_vys::read_proto::DEFAULT_DATAGRAM as u32,
        };
        sock.send(&handshake::hello(&KEY, &hello)).unwrap();
        let mut b = vec![0u8; 65_536];
        let n = sock.recv(&mut b).unwrap();
        let w = handshake::read_welcome(&KEY, &cn, &b[..n]).expect("welcome");
        assert!(w.rdma, "RDMA reads offered");
        let t0 = Instant::now();
        let key = handshake::session_key(&KEY, &cn, &w.server_nonce);
        let mut proto = Proto::new(1, 2, session_config(), key, 0);
        for pl in payloads.iter() {
            let m = OutMsg {
                tag: T_RDMA,
                words: &[],
                payload: pl,
                deposit: None,
            };
            proto.send(t0.elapsed().as_nanos() as u64, 0, 0, &m, 0);
        }
        // move datagrams until the server closes the session (5 s at most)
        while server.closed.load(Ordering::Relaxed) == closed {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "case {i}: session kept"
            );
            let now = t0.elapsed().as_nanos() as u64;
            proto.poll_transmit(now, true, &mut |_, d| {
                let _ = sock.send(d);
            });
            if let Ok(n) = sock.recv(&mut b) {
                let mut d = proto.buffer();
                d.extend_from_slice(&b[..n]);
                let _ = proto.handle_datagram(now, d);
            }
            if now >= proto.poll_timeout() {
                proto.handle_timeout(now);
            }
        }
        assert_eq!(
            server.rdma_open.load(Ordering::Relaxed) as usize,
            *qps_left,
            "case {i}"
        );
    }
    // only the rogue's own queue pair is left
    assert_eq!(net.live_qps(), 1);
    // a well-behaved consumer is still served
    let mut p = p;
    let c = Consumer::start(
        consumer_config(7, 512, Some(RdmaDevice::verbs_model(net.clone()))),
        |p, _, pass| pass.fill(p.spectral_window == 1),
    )
    .unwrap();
    produce(&mut p, 512, 5);
    let (valid, stats) = drain(&c, |id| id.spectral_window == 1, 5);
    assert_eq!((valid, stats.rdma_reads), (5, 5));
}
