//! vys end to end on loopback: a producer and consumers through the
//! library APIs, reads through the same-host mapping and through the
//! producer's read server, filters, checkable data, and the lapping test.
mod common;
use common::drain;
use splitrt_runtime::fabric::rdma::model::ModelNetwork;
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::rdma_device::RdmaDevice;
use splitrt_vys::signal::DigestKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x42; 32];

fn group(n: u16) -> SocketAddrV4 {
    let port = 30_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 78, n as u8 + 1), port)
}

fn products() -> Vec<ProductId> {
    let mut v = Vec::new();
    for a in 0..3u16 {
        for spw in 0..2u16 {
            for stokes in 0..2u16 {
                v.push(ProductId {
                    stations: [a, a + 1],
                    spectral_window: spw,
                    stokes,
                });
            }
        }
    }
    v
}

/// Write `rounds` spectra of every product, checkable.
fn produce(p: &mut Producer, bytes: usize, rounds: u64) {
    let mut d = vec![0u8; bytes];
    for t in 1..=rounds {
        for pr in products() {
            checkable::fill((pr.stations, pr.spectral_window, pr.stokes), t, &mut d);
            p.write(pr, &d, t).unwrap();
        }
    }
    p.flush().unwrap();
}

fn run(local: bool, n: u16) {
    let bytes = 8192;
    let g = group(n);
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, bytes);
    pc.slots = 4096;
    pc.digest = DigestKind::Crc32c;
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.local_reads = local;
    // the producer writes all its rounds at once (its ring populated, at
    // memory speed): room for every chosen spectrum's read, so none is
    // starved (a burst beyond this is reported as starvation, by design)
    cc.max_outstanding_reads = 1024;
    let want = |id: &ProductId| id.spectral_window == 1 && id.stokes == 0;
    let c = Consumer::start(cc, move |p, _, pass| {
        pass.fill(p.spectral_window == 1 && p.stokes == 0)
    })
    .unwrap();
    let rounds = 200;
    produce(&mut p, bytes, rounds);
    let (valid, stats) = drain(&c, want, rounds * 3);
    println!("local={local}: {valid} valid, {stats:?}");
    assert_eq!(valid, rounds * 3, "every chosen spectrum, valid");
    assert_eq!(
        stats.verification_failures + stats.read_failures + stats.starved,
        0
    );
    if local {
        assert_eq!(stats.local_reads, valid);
    } else {
        assert_eq!(stats.remote_reads, valid);
        assert!(
            p.server()
                .unwrap()
                .stats()
                .reads
                .load(std::sync::atomic::Ordering::Relaxed)
                >= valid
        );
    }
}

#[test]
fn a_consumer_on_the_same_host_reads_the_mapping() {
    run(true, 0);
}

#[test]
fn a_consumer_reads_through_the_producers_read_server() {
    run(false, 1);
}

/// How the lapping test's consumer reads.
#[derive(Clone, Debug)]
enum Reads {
    /// The ring's mapping.
    Local,
    /// The producer's read server.
    Remote,
    /// RDMA reads over the verbs model (the test double: producer and
    /// consumer share this process and the model network).
    Rdma(RdmaDevice),
}

/// A producer lapping its consumer on a tiny ring, flat out, checkable:
/// every spectrum delivered as valid has exactly its content; the rest are
/// verification failures. Returns (valid, overwritten, written).
fn lap(reads: Reads, digest: DigestKind, total: u64, n: u16) -> (u64, u64, u64) {
    let how = format!("{reads:?}");
    let local = matches!(reads, Reads::Local);
    let rdma = match reads {
        Reads::Rdma(d) => Some(d),
        _ => None,
    };
    let bytes = 512;
    let g = group(n);
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, bytes);
    pc.slots = 8;
    pc.spectra_per_signal = 4;
    pc.digest = digest;
    pc.rdma = rdma.clone();
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.local_reads = local;
    cc.max_spectrum_bytes = bytes;
    cc.queue_len = 1 << 16;
    cc.rdma = rdma;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    // the newest spectrum the consumer has an outcome for
    let seen = Arc::new(AtomicU64::new(0));
    let seen_w = seen.clone();
    let writer = std::thread::spawn(move || {
        let pr = ProductId {
            stations: [1, 1],
            spectral_window: 0,
            stokes: 0,
        };
        let mut d = vec![0u8; bytes];
        for t in 1..=total {
            checkable::fill((pr.stations, 0, 0), t, &mut d);
            p.write(pr, &d, t).unwrap();
            if t % 65_536 == 0 {
                // Now and then the writer waits until the consumer has
                // the spectrum it just wrote (flat out on 2 CPUs nearly
                // every read may be lapped): that one is read at rest,
                // so some reads are valid whatever the scheduling. At
                // most 1 s (the consumer may have starved it).
                p.flush().unwrap();
                let until = Instant::now() + Duration::from_secs(1);
                while seen_w.load(Ordering::Relaxed) < t && Instant::now() < until {
                    std::thread::yield_now();
                }
            }
        }
        p.flush().unwrap();
        p // kept alive (serving reads) until the consumer has ended
    });
    let (mut valid, mut overwritten, mut other) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    let mut asked = false;
    let stats = loop {
        assert!(t.elapsed() < Duration::from_secs(120), "no END");
        if !asked && writer.is_finished() {
            c.shutdown();
            asked = true;
        }
        match c.recv(Duration::from_millis(100)) {
            Some(Message::Valid(s)) => {
                assert!(
                    checkable::matches(([1, 1], 0, 0), s.info.timestamp, s.data()),
                    "a torn spectrum delivered as valid: t={} ({how}, {digest:?})",
                    s.info.timestamp
                );
                seen.fetch_max(s.info.timestamp, Ordering::Relaxed);
                valid += 1;
            }
            Some(Message::VerificationFailure { info, .. }) => {
                seen.fetch_max(info.timestamp, Ordering::Relaxed);
                overwritten += 1;
            }
            Some(Message::End { stats, .. }) => break stats,
            Some(_) => other += 1,
            None => {}
        }
    };
    let written = writer.join().unwrap().stats().spectra;
    println!(
        "lapping {how} {digest:?}: written {written}, signals {} (lost {}), chosen {}, \
         valid {valid}, overwritten {overwritten}, other messages {other} (starved {}), \
         torn accepted 0",
        stats.signals, stats.signals_lost, stats.chosen, stats.starved
    );
    assert_eq!(valid, stats.valid);
    assert!(stats.queue_dropped == 0, "{stats:?}");
    assert_eq!(overwritten, stats.verification_failures);
    // every chosen spectrum got exactly one outcome
    assert_eq!(
        stats.chosen,
        stats.valid + stats.verification_failures + stats.read_failures + stats.starved,
        "{stats:?}"
    );
    assert_eq!(stats.read_failures, 0, "{stats:?}");
    (valid, overwritten, written)
}

#[test]
fn lapping_producer_no_torn_spectrum_is_valid_local_digest_none() {
    let (valid, overwritten, written) = lap(Reads::Local, DigestKind::None, 2_000_000, 2);
    assert_eq!(written, 2_000_000);
    assert!(
        valid > 0 && overwritten > 0,
        "valid {valid}, overwritten {overwritten}"
    );
}

#[test]
fn lapping_producer_no_torn_spectrum_is_valid_local_crc32c() {
    let (valid, overwritten, _) = lap(Reads::Local, DigestKind::Crc32c, 1_000_000, 3);
    assert!(
        valid > 0 && overwritten > 0,
        "valid {valid}, overwritten {overwritten}"
    );
}

#[test]
fn lapping_producer_no_torn_spectrum_is_valid_remote_digest_none() {
    let (valid, overwritten, _) = lap(Reads::Remote, DigestKind::None, 1_000_000, 4);
    assert!(
        valid > 0 && overwritten > 0,
        "valid {valid}, overwritten {overwritten}"
    );
}

/// The same over RDMA reads (the verbs model, which also runs an unfenced
/// read before the one ahead of it: a reader without its fences fails
/// here).
#[test]
fn lapping_producer_no_torn_spectrum_is_valid_rdma_digest_none() {
    let net = ModelNetwork::new(11);
    let rdma = Reads::Rdma(RdmaDevice::verbs_model(net.clone()));
    let (valid, overwritten, _) = lap(rdma, DigestKind::None, 300_000, 5);
    assert!(
        valid > 0 && overwritten > 0,
        "valid {valid}, overwritten {overwritten}"
    );
    assert!(net.stats().reads >= 3 * valid, "three reads per spectrum");
}

/// Sign `b` with `KEY` (its last bytes become the tag over the rest).
fn sign(b: &mut [u8]) {
    use splitrt_vys::signal::SIGNAL_TAG;
    let end = b.len() - SIGNAL_TAG;
    let t = blake3::keyed_hash(&KEY, &b[..end]);
    b[end..].copy_from_slice(&t.as_bytes()[..SIGNAL_TAG]);
}

/// Another version, another stream's key, garbage, and a signal signed
/// with the key that points outside the producer's ring: each reported
/// (version mismatch, signal receive failure, read failure), nothing
/// read outside the ring, and the consumer goes on delivering.
#[test]
fn bad_signals_are_reported_and_dropped_and_nothing_outside_the_ring_is_read() {
    use splitrt_vys::signal::SpectrumInfo;
    use splitrt_vys::transport::SignalSender;
    for (local, n) in [(true, 5u16), (false, 6)] {
        let bytes = 1024;
        let g = group(n);
        let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, bytes);
        pc.slots = 64;
        let mut p = Producer::new(pc).unwrap();
        let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
        cc.local_reads = local;
        let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
        let pr = ProductId {
            stations: [0, 1],
            spectral_window: 0,
            stokes: 0,
        };
        let mut d = vec![0u8; bytes];
        // a first good spectrum (connects the consumer to the producer)
        checkable::fill((pr.stations, 0, 0), 1, &mut d);
        let good = p.write(pr, &d, 1).unwrap();
        p.flush().unwrap();
        let tx = SignalSender::new(g, Ipv4Addr::LOCALHOST, KEY).unwrap();
        let stranger = SignalSender::new(g, Ipv4Addr::LOCALHOST, [1; 32]).unwrap();
        let ring = 64 * splitrt_vys::ring::slot_bytes(bytes) as u64;
        let mut outside = |offset| {
            p.signal(
                pr,
                vec![SpectrumInfo {
                    offset,
                    timestamp: 9,
                    seq: 9,
                    digest: 0,
                }],
            )
        };
        for off in [ring, ring + 8, u64::MAX - 7, 3] {
            tx.send(&outside(off)).unwrap(); // signed, but not a slot
        }
        stranger.send(&p.signal(pr, vec![good])).unwrap();
        let mut v = p.signal(pr, vec![good]).encode(&KEY);
        v[0] = 7;
        tx.send_bytes(&v).unwrap(); // claims version 7, not signed: foreign
        sign(&mut v);
        tx.send_bytes(&v).unwrap(); // an authentic signal of version 7
        tx.send_bytes(&[0xff; 3]).unwrap(); // garbage, not "version 0xffff"
        tx.send_bytes(&[1, 0, 0]).unwrap();
        // and the stream goes on
        checkable::fill((pr.stations, 0, 0), 2, &mut d);
        p.write(pr, &d, 2).unwrap();
        p.flush().unwrap();
        // all of it goes through one loopback queue in this order; once the
        // ten outcomes are in, shut down (anything more would show below)
        let (mut valid, mut read_failures, mut version, mut bad) = (0, 0, 0, 0);
        loop {
            if valid + read_failures + version + bad == 11 {
                c.shutdown();
            }
            match c.recv(Duration::from_secs(10)).expect("END") {
                Message::Valid(s) => {
                    assert!(checkable::matches(
                        (pr.stations, 0, 0),
                        s.info.timestamp,
                        s.data()
                    ));
                    valid += 1;
                }
                Message::ReadFailure { error, .. } => {
                    read_failures += 1;
                    assert!(error.contains("not a slot"), "{error}");
                }
                Message::VersionMismatch { version: 7 } => version += 1,
                Message::SignalReceiveFailure { count, .. } => bad += count,
                Message::End { .. } => break,
                m => panic!("unexpected {m}"),
            }
        }
        assert_eq!(
            (valid, read_failures, version, bad),
            (2, 4, 1, 4),
            "local={local}"
        );
        if !local {
            let s = p.server().unwrap().stats();
            assert_eq!(s.refused.load(std::sync::atomic::Ordering::Relaxed), 4);
        }
    }
}

/// What comes through a consumer's injector (an AM handler's payloads) is
/// checked like a datagram from the group: garbage, oversize, another
/// key and another version are reported and dropped; a real signal of an
/// unreachable producer gives a read failure, not a hang.
#[test]
fn injected_signals_are_checked_like_datagrams() {
    use splitrt_vys::signal::{Signal, SpectrumInfo};
    let c = Consumer::start(ConsumerConfig::without_multicast(KEY), |_, _, pass| {
        pass.fill(true)
    })
    .unwrap();
    let inj = c.injector();
    let sig = Signal {
        digest: DigestKind::None,
        channels: 1,
        producer: 0xfeed,
        address: "127.0.0.1:9".parse().unwrap(),
        stations: [0, 0],
        spectral_window: 0,
        stokes: 0,
        config: 0,
        spectrum_bytes: 8,
        instance: 1,
        started: 1,
        sequence: 1,
        description_epoch: 0,
        description: None,
        entries: vec![SpectrumInfo {
            offset: 0,
            timestamp: 1,
            seq: 1,
            digest: 0,
        }],
    };
    let mut version = sig.encode(&KEY);
    version[0] = 1;
    sign(&mut version);
    assert!(inj.inject(&[]));
    assert!(inj.inject(&[0x01, 0x00, 0x55]));
    let mut big = vec![0x5a; 60_000];
    big[..2].copy_from_slice(&[1, 0]); // this version, then nonsense
    assert!(inj.inject(&big));
    assert!(inj.inject(&sig.encode(&[3; 32])));
    assert!(inj.inject(&version));
    assert!(inj.inject(&sig.encode(&KEY)));
    let (mut bad, mut versions, mut failures) = (0, 0, 0);
    loop {
        match c.recv(Duration::from_secs(10)).expect("END") {
            Message::SignalReceiveFailure { count, .. } => bad += count,
            Message::VersionMismatch { version: 1 } => versions += 1,
            Message::ReadFailure { error, .. } => {
                assert!(error.contains("unreachable"), "{error}");
                failures += 1;
            }
            Message::End { .. } => break,
            m => panic!("unexpected {m}"),
        }
        if bad + versions + failures == 6 {
            c.shutdown();
        }
    }
    assert_eq!((bad, versions, failures), (4, 1, 1));
}
