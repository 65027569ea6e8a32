//! Self-describing spectra (issue 27, part 5), producer -> consumer on one
//! host: the description a producer starts with reaches a consumer before
//! the spectra it describes, a change mid-stream is a
//! `DescriptionChanged` before the spectra of the new epoch, every
//! spectrum names its description's epoch, and a consumer that joins late
//! learns the description in force (from a busy producer's periodic
//! description signals, and from an idle one's heartbeats).
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::described::Described;
use splitrt_vys::description::*;
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::signal::{SIGNAL_ENTRY, SIGNAL_HEADER, SIGNAL_TAG};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5d; 32];
const BYTES: usize = 1024;
const PRODUCT: ProductId = ProductId {
    stations: [1, 2],
    spectral_window: 0,
    stokes: 0,
};

fn group(n: u16) -> SocketAddrV4 {
    let port = 41_000 + ((std::process::id() as u16 % 5_000) * 3 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 28, n as u8 + 1), port)
}

fn description(name: &str, first_hz: f64) -> StreamDescription {
    StreamDescription {
        data_type: DataType::Complex64,
        channels: (BYTES / 8) as u32,
        frequencies: Frequencies::Linear {
            first_hz,
            width_hz: 250e3,
        },
        polarizations: vec![Polarization::RR, Polarization::LL],
        baseband: 1,
        subband: 4,
        config_name: name.into(),
        time_epoch: TimeEpoch::Unix,
        time_unit: TimeUnit::Nanoseconds,
        integration_ns: 1_000_000,
    }
}

fn write(p: &mut Producer, t: u64) {
    let mut d = vec![0u8; BYTES];
    checkable::fill((PRODUCT.stations, 0, 0), t, &mut d);
    p.write(PRODUCT, &d, t).unwrap();
}

/// What one consumer saw: per valid spectrum the epoch it names and the
/// epoch [`Consumer::description`] had when it came; the description
/// changes in order.
#[derive(Default)]
struct Seen {
    valid: Vec<(u32, Option<u32>)>,
    /// The configuration name of the description each spectrum carries.
    names: Vec<Option<String>>,
    changes: Vec<Described>,
}

impl Seen {
    /// Take messages for at most `d` or until `done` says enough.
    fn take(&mut self, c: &Consumer, producer: u64, d: Duration, done: impl Fn(&Seen) -> bool) {
        let until = Instant::now() + d;
        while !done(self) && Instant::now() < until {
            match c.recv(Duration::from_millis(50)) {
                Some(Message::Valid(s)) => {
                    assert!(checkable::matches(
                        (s.product.stations, 0, 0),
                        s.info.timestamp,
                        s.data()
                    ));
                    let known = c.description(producer).map(|k| k.epoch);
                    self.valid.push((s.product.description_epoch, known));
                    let d = s.product.description.as_ref();
                    self.names.push(d.map(|d| d.config_name.clone()));
                }
                Some(Message::DescriptionChanged {
                    producer: p,
                    described,
                }) => {
                    assert_eq!(p, producer);
                    self.changes.push(described);
                }
                Some(m @ (Message::ReadFailure { .. } | Message::VerificationFailure { .. })) => {
                    panic!("{m}")
                }
                _ => {}
            }
        }
    }
}

/// At start, on change, and for a consumer joining late, busy or idle.
#[test]
fn vysdesc_start_change_and_late_joiners() {
    let g = group(0);
    let start = |g| {
        let cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
        Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap()
    };
    let early = start(g);
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, BYTES);
    pc.spectra_per_signal = 4;
    pc.description = Some(description("first", 1.0e9));
    pc.description_every = Duration::from_millis(200);
    pc.heartbeat = Some(Duration::from_millis(100));
    let mut p = Producer::new(pc).unwrap();
    let id = p.id();
    assert_eq!(p.description().map(|(e, _)| e), Some(1));
    for t in 1..=20 {
        write(&mut p, t);
    }
    p.flush().unwrap();
    let mut a = Seen::default();
    a.take(&early, id, Duration::from_secs(10), |s| s.valid.len() >= 20);
    // at start: the description came first, spectra name its epoch
    assert_eq!(a.changes.len(), 1, "one description at start");
    assert_eq!(a.changes[0].epoch, 1);
    assert_eq!(a.changes[0].instance, p.instance());
    assert_eq!(*a.changes[0].description, description("first", 1.0e9));
    assert_eq!(a.valid.len(), 20);
    assert!(a.valid.iter().all(|v| *v == (1, Some(1))), "{:?}", a.valid);

    // a change mid-stream: spectra of epoch 2 come after its message
    assert_eq!(p.set_description(description("second", 2.0e9)).unwrap(), 2);
    for t in 21..=40 {
        write(&mut p, t);
    }
    p.flush().unwrap();
    a.take(&early, id, Duration::from_secs(10), |s| s.valid.len() >= 40);
    assert_eq!(a.valid.len(), 40);
    assert!(
        a.valid[20..].iter().all(|v| *v == (2, Some(2))),
        "{:?}",
        a.valid
    );
    // each spectrum carries its own epoch's description
    let (first, second) = (Some("first".to_string()), Some("second".to_string()));
    assert!(a.names[..20].iter().all(|n| *n == first), "{:?}", a.names);
    assert!(a.names[20..].iter().all(|n| *n == second), "{:?}", a.names);
    let epochs: Vec<u32> = a.changes.iter().map(|d| d.epoch).collect();
    assert_eq!(
        epochs,
        [1, 2],
        "each epoch said once (periodic repeats are not news)"
    );
    assert_eq!(*a.changes[1].description, description("second", 2.0e9));
    let d = early.description(id).unwrap();
    assert_eq!(
        (d.epoch, d.description.frequency(2)),
        (2, Some(2.0e9 + 500e3))
    );

    // a consumer joining a busy producer: the periodic description
    let busy = start(g);
    let mut b = Seen::default();
    let until = Instant::now() + Duration::from_secs(10);
    let mut t = 41;
    while b.changes.is_empty() && Instant::now() < until {
        write(&mut p, t);
        t += 1;
        b.take(&busy, id, Duration::from_millis(5), |s| {
            !s.changes.is_empty()
        });
    }
    assert_eq!(b.changes.len(), 1, "a late joiner learns the description");
    assert_eq!(b.changes[0].epoch, 2);
    assert_eq!(*b.changes[0].description, description("second", 2.0e9));

    // a consumer joining an idle producer: its heartbeats carry it
    p.flush().unwrap();
    let idle = start(g);
    let mut c = Seen::default();
    c.take(&idle, id, Duration::from_secs(10), |s| {
        !s.changes.is_empty()
    });
    assert_eq!(c.changes.len(), 1, "an idle producer's heartbeat describes");
    assert_eq!(c.changes[0].epoch, 2);
    assert!(c.valid.is_empty());
    assert!(p.stats().descriptions >= 2);
    for x in [&early, &busy, &idle] {
        x.shutdown();
        let mut end = None;
        while let Some(m) = x.recv(Duration::from_secs(5)) {
            if let Message::End { stats, .. } = m {
                end = Some(stats);
            }
        }
        let s = end.expect("END");
        assert_eq!(s.bad_signals, 0);
        assert_eq!(s.version_mismatches, 0);
    }
}

/// A description that does not fit its bounds is refused where it is
/// set (nothing sent, the epoch unchanged); an ordinary signal did not
/// grow: the epoch sits in bytes that were reserved.
#[test]
fn vysdesc_refused_when_set_and_signal_size() {
    let mut pc = ProducerConfig::new(KEY, group(1), Ipv4Addr::LOCALHOST, BYTES);
    pc.group = None;
    pc.queue_signals = true;
    pc.heartbeat = None;
    let mut too_many = description("x", 1.0);
    too_many.channels = (MAX_LISTED_CHANNELS + 1) as u32;
    too_many.frequencies = Frequencies::Listed(vec![1.0; MAX_LISTED_CHANNELS + 1]);
    let mut bad = pc.clone();
    bad.description = Some(too_many.clone());
    assert!(Producer::new(bad).is_err());
    let mut p = Producer::new(pc).unwrap();
    let e = p.set_description(too_many).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(p.description().is_none());
    assert!(p.take_signals().is_empty(), "nothing sent");
    assert_eq!(p.set_description(description("ok", 1.0)).unwrap(), 1);
    let sent = p.take_signals();
    assert_eq!(sent.len(), 1, "the description at once");
    write(&mut p, 1);
    p.flush().unwrap();
    let sent = p.take_signals();
    assert_eq!(
        sent[0].len(),
        SIGNAL_HEADER + SIGNAL_ENTRY + SIGNAL_TAG,
        "one spectrum's signal, as before descriptions"
    );
    assert_eq!(&sent[0][44..48], &1u32.to_le_bytes());
}
