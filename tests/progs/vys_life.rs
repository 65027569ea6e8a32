//! t_vys_life: the two sides of tests/cluster.rs's vys lifecycle test
//! across hosts (issue 27, part 1).
//!
//!     t_vys_life produce GROUP INTERFACE KEY_FILE ID
//!     t_vys_life consume GROUP INTERFACE KEY_FILE DURATION_S SILENCE_S
//!
//! `produce`: a producer with id ID (hex), digest `none`, 4 products of
//! 1 KiB checkable spectra every 5 ms, heartbeats every 200 ms, whose
//! timestamps start at its start time in µs (so two instances never write
//! the same bytes for the same slot); prints `ready instance=I` and runs
//! until killed (60 s at most).
//!
//! `consume`: a consumer of everything, printing `ready`, then one line per
//! event: `first_valid instance=I after_signal_ms=T` (from the instance's
//! first signal to its first valid spectrum), `gone instance=I unix_ms=T
//! silent_ms=S`, and at the end `instance I valid=.. wrong=..
//! read_failures=.. dropped_in_flight=..` per instance (reads failed
//! because the instance was replaced or went silent are
//! `dropped_in_flight`, the others `read_failures`) and `t_vys_life: valid=.. wrong=..
//! read_failures=.. starved=.. restarts=.. producers_gone=..`.

use splitrt::vys::checkable;
use splitrt::vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt::vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt::vys::signal::DigestKind;
use splitrt::vys::stream_key;
use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BYTES: usize = 1024;

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn produce(group: SocketAddrV4, iface: Ipv4Addr, key: [u8; 32], id: u64) {
    let mut cfg = ProducerConfig::new(key, group, iface, BYTES);
    cfg.id = Some(id);
    cfg.digest = DigestKind::None;
    cfg.slots = 4096;
    cfg.spectra_per_signal = 1;
    cfg.heartbeat = Some(Duration::from_millis(200));
    let mut p = Producer::new(cfg).expect("producer");
    println!("ready instance={:x}", p.instance());
    std::io::stdout().flush().unwrap();
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let mut d = vec![0u8; BYTES];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(60) {
        n += 1;
        for a in 0..4u16 {
            let pr = ProductId {
                stations: [a, a + 1],
                spectral_window: 0,
                stokes: 0,
            };
            checkable::fill((pr.stations, 0, 0), base + n, &mut d);
            p.write(pr, &d, base + n).expect("write");
        }
        let due = start + Duration::from_millis(5 * n);
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
}

#[derive(Default)]
struct PerInstance {
    valid: u64,
    wrong: u64,
    read_failures: u64,
    /// Reads failed because the instance's route was dropped (it was
    /// replaced or went silent): the reads in flight when it died.
    dropped: u64,
    first_valid: bool,
}

fn consume(group: SocketAddrV4, iface: Ipv4Addr, key: [u8; 32], duration: f64, silence: f64) {
    let mut cfg = ConsumerConfig::new(key, group, iface);
    cfg.producer_silence = Duration::from_secs_f64(silence);
    cfg.max_spectrum_bytes = BYTES;
    // when each instance's first signal came
    let first: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let f = first.clone();
    let c = Consumer::start(cfg, move |p, _, pass| {
        f.lock()
            .unwrap()
            .entry(p.instance)
            .or_insert_with(Instant::now);
        pass.fill(true)
    })
    .expect("consumer");
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut per: HashMap<u64, PerInstance> = HashMap::new();
    let until = Instant::now() + Duration::from_secs_f64(duration);
    let mut asked = false;
    loop {
        if !asked && Instant::now() >= until {
            c.shutdown();
            asked = true;
        }
        match c.recv(Duration::from_millis(50)) {
            Some(Message::Valid(s)) => {
                let i = per.entry(s.product.instance).or_default();
                if checkable::matches((s.product.stations, 0, 0), s.info.timestamp, s.data()) {
                    i.valid += 1;
                } else {
                    i.wrong += 1;
                }
                if !i.first_valid {
                    i.first_valid = true;
                    let t0 = first.lock().unwrap().get(&s.product.instance).copied();
                    let ms = t0.map_or(-1.0, |t| t.elapsed().as_secs_f64() * 1e3);
                    println!(
                        "first_valid instance={:x} after_signal_ms={ms:.1}",
                        s.product.instance
                    );
                }
            }
            Some(Message::ReadFailure { product, error, .. }) => {
                let i = per.entry(product.instance).or_default();
                if error.contains(" restarted: ") || error.contains(" gone: ") {
                    i.dropped += 1;
                } else {
                    if i.read_failures < 3 {
                        eprintln!("read failure of instance {:x}: {error}", product.instance);
                    }
                    i.read_failures += 1;
                }
            }
            Some(Message::ProducerGone {
                instance,
                silent_for,
                ..
            }) => println!(
                "gone instance={instance:x} unix_ms={} silent_ms={}",
                unix_ms(),
                silent_for.as_millis()
            ),
            Some(Message::End { stats, .. }) => {
                let (mut valid, mut wrong, mut failures) = (0, 0, 0);
                for (k, i) in &per {
                    println!(
                        "instance {k:x} valid={} wrong={} read_failures={} dropped_in_flight={}",
                        i.valid, i.wrong, i.read_failures, i.dropped
                    );
                    valid += i.valid;
                    wrong += i.wrong;
                    failures += i.read_failures;
                }
                println!(
                    "t_vys_life: valid={valid} wrong={wrong} read_failures={failures} starved={} \
                     restarts={} producers_gone={}",
                    stats.starved, stats.restarts, stats.producers_gone
                );
                return;
            }
            Some(m) => eprintln!("{m}"),
            None => {}
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let usage = "usage: t_vys_life produce|consume GROUP INTERFACE KEY_FILE ...";
    assert!(a.len() >= 6, "{usage}");
    let group: SocketAddrV4 = a[2].parse().expect("GROUP");
    let iface: Ipv4Addr = a[3].parse().expect("INTERFACE");
    let key = stream_key::from_file_or_env(Some(Path::new(&a[4]))).expect("key");
    match a[1].as_str() {
        "produce" => produce(
            group,
            iface,
            key,
            u64::from_str_radix(&a[5], 16).expect("ID"),
        ),
        "consume" => consume(
            group,
            iface,
            key,
            a[5].parse().expect("DURATION_S"),
            a.get(6).map_or(1.0, |s| s.parse().expect("SILENCE_S")),
        ),
        _ => panic!("{usage}"),
    }
}
