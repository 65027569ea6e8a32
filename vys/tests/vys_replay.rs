//! Replayed and forged signal datagrams (issue 24, items 1 and 6): a
//! consumer delivers each spectrum of a producer instance at most once
//! however often its signals come again, and counts the duplicates; random
//! datagrams on the group are garbage, never a version alarm, while an
//! authentic signal of another version is still reported.
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, ConsumerStats, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::transport::SignalSender;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5a; 32];

fn group(n: u16) -> SocketAddrV4 {
    let port = 33_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 81, n as u8 + 1), port)
}

fn product(s: u16) -> ProductId {
    ProductId {
        stations: [s, s + 1],
        spectral_window: 0,
        stokes: 0,
    }
}

/// Write one checkable spectrum of each of 6 products at time `t`.
fn write_round(p: &mut Producer, t: u64) {
    let mut d = vec![0u8; 1024];
    for s in 0..6 {
        let pr = product(s);
        checkable::fill((pr.stations, 0, 0), t, &mut d);
        p.write(pr, &d, t).unwrap();
    }
}

/// Take messages until a valid spectrum with timestamp `until` came
/// (then shut down, and on to END): valid spectra by (producer, seq).
fn collect(c: &Consumer, until: u64) -> (HashMap<(u64, u64), u64>, ConsumerStats) {
    let mut seen = HashMap::new();
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "no END");
        match c
            .recv(Duration::from_secs(10))
            .expect("a message within 10 s")
        {
            Message::Valid(s) => {
                let p = &s.product;
                assert!(checkable::matches(
                    (p.stations, p.spectral_window, p.stokes),
                    s.info.timestamp,
                    s.data()
                ));
                *seen.entry((p.producer, s.info.seq)).or_insert(0) += 1;
                if s.info.timestamp == until {
                    c.shutdown();
                }
            }
            Message::End { stats, .. } => return (seen, stats),
            _ => {}
        }
    }
}

/// Inject `b`, waiting while the injector's queue is full.
fn inject(c: &Consumer, b: &[u8]) {
    let inj = c.injector();
    let t0 = Instant::now();
    while !inj.inject(b) {
        assert!(t0.elapsed() < Duration::from_secs(10), "injector stuck");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The same signal datagrams fed to a consumer four times over (the
/// originals, then three replays of all of them): every spectrum is
/// delivered once, and the replays are counted.
#[test]
fn signals_fed_again_deliver_every_spectrum_once() {
    let mut pc = ProducerConfig::new(KEY, group(0), Ipv4Addr::LOCALHOST, 1024);
    pc.group = None;
    pc.queue_signals = true;
    pc.slots = 4096;
    pc.spectra_per_signal = 4;
    let mut p = Producer::new(pc).unwrap();
    let c = Consumer::start(ConsumerConfig::without_multicast(KEY), |_, _, pass| {
        pass.fill(true)
    })
    .unwrap();
    for t in 1..=100 {
        write_round(&mut p, t);
    }
    p.flush().unwrap();
    let recorded = p.take_signals();
    for _ in 0..4 {
        for b in &recorded {
            inject(&c, b);
        }
    }
    // one more spectrum, after the replays: once it is in, all are
    write_round(&mut p, 101);
    p.flush().unwrap();
    let last = p.take_signals();
    for b in &last {
        inject(&c, b);
    }
    let (seen, stats) = collect(&c, 101);
    let dups: u64 = seen.values().map(|n| n - 1).sum();
    println!(
        "{} signals fed 4 times: {} spectra valid, {} distinct, {dups} duplicates delivered; \
         {stats:?}",
        recorded.len(),
        stats.valid,
        seen.len()
    );
    assert_eq!(seen.len(), 606, "every spectrum delivered");
    assert_eq!(dups, 0, "spectra delivered more than once");
    assert_eq!(stats.replays, 3 * recorded.len() as u64, "replays counted");
    assert_eq!(
        stats.signals,
        (recorded.len() + last.len()) as u64,
        "{stats:?}"
    );
}

/// Item 6: 20 000 random datagrams sent to the group raise no version
/// alarm (they are counted as garbage); an authentic signal of another
/// version (version 1, from the golden test of that version) is still
/// reported as one.
#[test]
fn random_datagrams_are_garbage_not_version_alarms() {
    let g = group(1);
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.queue_len = 1 << 16;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let tx = SignalSender::new(g, Ipv4Addr::LOCALHOST, [0; 32]).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let n = 20_000;
    for i in 0..n {
        let len = 1 + (next() % 1500) as usize;
        let b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        tx.send_bytes(&b).unwrap();
        if i % 500 == 499 {
            // paced (the consumer's socket queue holds some 4 MB)
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    tx.send_bytes(&version_1_signal()).unwrap();
    // a real spectrum last: once it is in, everything before is
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, 1024);
    pc.slots = 64;
    let mut p = Producer::new(pc).unwrap();
    write_round(&mut p, 7);
    p.flush().unwrap();
    let (mut alarms, mut versions, mut garbage) = (0u64, Vec::new(), 0u64);
    let t0 = Instant::now();
    let stats = loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "no END");
        match c
            .recv(Duration::from_secs(10))
            .expect("a message within 10 s")
        {
            Message::Valid(_) => c.shutdown(),
            Message::VersionMismatch { version } => {
                alarms += 1;
                if versions.len() < 5 {
                    versions.push(version);
                }
            }
            Message::SignalReceiveFailure { count, .. } => garbage += count,
            Message::End { stats, .. } => break stats,
            _ => {}
        }
    };
    println!(
        "{n} random datagrams: {alarms} version alarms (first {versions:?}), {garbage} garbage; \
         {stats:?}"
    );
    assert_eq!(stats.signals_lost, 0, "the test lost datagrams: {stats:?}");
    assert_eq!(alarms, 1, "version alarms: first {versions:?}");
    assert_eq!(versions, [1], "the authentic version-1 signal");
    assert_eq!(stats.bad_signals, n, "{stats:?}");
}

/// A version-1 signal signed with `KEY`: the bytes of version 1's golden
/// test (64-byte header, two entries, tag).
fn version_1_signal() -> Vec<u8> {
    let hex = "0100010200040000\
               0807060504030201\
               00000000000000000000ffff0ae7070b\
               921003001100050002000000\
               00000000\
               efbeadde00000000\
               0020000000000000\
               0010000000000000\
               0068e5cf8b010000\
               2900000000000000\
               cdab000000000000\
               0030000000000000\
               f469e5cf8b010000\
               2a00000000000000\
               3412000000000000\
               1f01f455f31ed5b539fb2c8baf42307f";
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}
