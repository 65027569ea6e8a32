//! Producer lifecycle (issue 27, part 1): a producer restarted with the
//! same id is a new producer (its spectra are read from its own ring or
//! session only, never the dead instance's, with digest `none`), a killed
//! producer is reported gone after the configured silence, and the rings
//! of gone producers are unmapped (mapped bytes stay under the bound).
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::signal::DigestKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x27; 32];
const BYTES: usize = 1024;

fn group(n: u16) -> SocketAddrV4 {
    let port = 36_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 27, n as u8 + 1), port)
}

fn products() -> Vec<ProductId> {
    (0..4u16)
        .map(|a| ProductId {
            stations: [a, a + 1],
            spectral_window: 0,
            stokes: 0,
        })
        .collect()
}

fn producer(g: SocketAddrV4, id: u64, slots: usize) -> Producer {
    producer_with(g, id, slots, DigestKind::None)
}

fn producer_with(g: SocketAddrV4, id: u64, slots: usize, digest: DigestKind) -> Producer {
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, BYTES);
    pc.slots = slots;
    pc.digest = digest;
    pc.id = Some(id);
    pc.heartbeat = Some(Duration::from_millis(100));
    Producer::new(pc).unwrap()
}

/// One round: a checkable spectrum of every product at `t`, flushed.
fn round(p: &mut Producer, t: u64) {
    let mut d = vec![0u8; BYTES];
    for pr in products() {
        checkable::fill((pr.stations, pr.spectral_window, pr.stokes), t, &mut d);
        p.write(pr, &d, t).unwrap();
    }
    p.flush().unwrap();
}

/// What the test's receiving thread saw: (when, timestamp, right bytes)
/// per valid spectrum, and every other message's text.
struct Seen {
    valid: Vec<(Instant, u64, bool)>,
    other: Vec<(Instant, String)>,
    /// `ProducerGone`: when, which producer.
    gone: Vec<(Instant, u64)>,
    /// `MappedBytesLimit` messages.
    limits: usize,
}

/// The receiving thread: set `stop` to shut its consumer down, then join.
struct Receiver {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

impl Receiver {
    fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap()
    }
}

/// Take the consumer's messages on a thread until END.
fn receive(c: Consumer) -> Receiver {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut seen = Seen {
            valid: Vec::new(),
            other: Vec::new(),
            gone: Vec::new(),
            limits: 0,
        };
        let t0 = Instant::now();
        let mut asked = false;
        loop {
            assert!(t0.elapsed() < Duration::from_secs(60), "no END");
            if !asked && st.load(Ordering::Acquire) {
                c.shutdown();
                asked = true;
            }
            match c.recv(Duration::from_millis(100)) {
                Some(Message::Valid(s)) => {
                    let p = &s.product;
                    let ok = checkable::matches(
                        (p.stations, p.spectral_window, p.stokes),
                        s.info.timestamp,
                        s.data(),
                    );
                    seen.valid.push((Instant::now(), s.info.timestamp, ok));
                }
                Some(Message::End { .. }) => return seen,
                Some(Message::ProducerGone { producer, .. }) => {
                    seen.gone.push((Instant::now(), producer))
                }
                Some(m @ Message::MappedBytesLimit { .. }) => {
                    seen.limits += 1;
                    seen.other.push((Instant::now(), m.to_string()))
                }
                Some(m) => seen.other.push((Instant::now(), m.to_string())),
                None => {}
            }
        }
    });
    Receiver { stop, thread }
}

/// A producer restarted with the same id: the old instance wrote spectra
/// 1..=400 (timestamps 1..=100), the new one writes its own from sequence
/// id 1 again (timestamps from 1_000_001). Every valid spectrum must be
/// the announcing instance's bytes (digest `none`: the sequence ids alone
/// cannot tell the rings apart), and the new instance's come within 1 s
/// of its first signal.
fn restart(local: bool, digest: DigestKind, n: u16) {
    let g = group(n);
    let id = 0x2700 + n as u64;
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.local_reads = local;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let rx = receive(c);
    let mut a = producer_with(g, id, 4096, digest);
    for t in 1..=100 {
        round(&mut a, t);
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(a);
    let mut b = producer_with(g, id, 4096, digest);
    let first_signal = Instant::now();
    for t in 1..=300 {
        round(&mut b, 1_000_000 + t);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    let seen = rx.finish();
    drop(b);
    let wrong = seen.valid.iter().filter(|v| !v.2).count();
    let old = seen.valid.iter().filter(|v| v.2 && v.1 <= 100).count();
    let new: Vec<_> = seen
        .valid
        .iter()
        .filter(|v| v.2 && v.1 > 1_000_000)
        .collect();
    let first_new = new.first().map(|v| v.0.duration_since(first_signal));
    println!(
        "local={local} {digest:?}: old instance {old} valid, new instance {} valid (first after {first_new:?}), \
         {wrong} wrong; other messages: {}",
        new.len(),
        seen.other.len()
    );
    for (_, m) in seen.other.iter().take(5) {
        println!("  {m}");
    }
    assert_eq!(
        wrong, 0,
        "spectra of the old ring delivered as the new producer's"
    );
    assert!(old > 0, "the first instance's spectra were read");
    let first_new = first_new.expect("no spectrum of the new instance");
    assert!(
        first_new < Duration::from_secs(1),
        "the new instance's first spectrum came {first_new:?} after its first signal"
    );
    assert!(
        new.len() >= 1000,
        "only {} of 1200 spectra of the new instance",
        new.len()
    );
}

#[test]
fn same_id_restart_on_one_host_reads_only_the_new_ring() {
    restart(true, DigestKind::None, 0);
}

#[test]
fn same_id_restart_on_one_host_with_a_digest() {
    restart(true, DigestKind::Crc32c, 4);
}

#[test]
fn same_id_restart_across_hosts_reconnects_at_once() {
    restart(false, DigestKind::None, 1);
}

/// Bytes of producers' rings of `size` bytes this process maps read-only
/// (a consumer's mappings: the producers' own are read-write; the size
/// tells this test's rings from the other tests' running beside it).
fn mapped_read_only(size: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| {
            l.contains("/memfd:splitrt-vys-ring") && l.split_whitespace().nth(1) == Some("r--s")
        })
        .map(|l| {
            let r = l.split_whitespace().next().unwrap();
            let (a, b) = r.split_once('-').unwrap();
            u64::from_str_radix(b, 16).unwrap() - u64::from_str_radix(a, 16).unwrap()
        })
        .filter(|&n| n == size)
        .sum()
}

/// The producer process of the kill test, when run by it; else nothing.
#[test]
fn producer_child() {
    let Ok(spec) = std::env::var("VYS_LIFE_PRODUCER") else {
        return;
    };
    let (g, id) = spec.split_once('/').unwrap();
    let mut p = producer(g.parse().unwrap(), id.parse().unwrap(), 1024);
    let t0 = Instant::now();
    let mut t = 0;
    while t0.elapsed() < Duration::from_secs(60) {
        t += 1;
        round(&mut p, t);
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// kill -9 of a producer process: the consumer says the producer is gone
/// within the configured silence.
#[test]
fn a_killed_producer_is_reported_gone_within_the_silence() {
    let n = 2;
    let g = group(n);
    let id = 0x27_0002u64;
    let silence = Duration::from_secs(1);
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.producer_silence = silence;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let rx = receive(c);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "producer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VYS_LIFE_PRODUCER", format!("{g}/{id}"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    child.wait().unwrap();
    std::thread::sleep(silence + Duration::from_millis(1000));
    let seen = rx.finish();
    let valid = seen.valid.len();
    let wrong = seen.valid.iter().filter(|v| !v.2).count();
    let gone: Vec<_> = seen
        .gone
        .iter()
        .map(|(t, p)| (t.saturating_duration_since(killed), *p))
        .collect();
    println!("{valid} valid ({wrong} wrong) before the kill; gone: {gone:?}");
    for (_, m) in seen.other.iter().take(5) {
        println!("  {m}");
    }
    assert!(valid > 100 && wrong == 0);
    assert_eq!(gone.len(), 1, "one message that the producer is gone");
    assert_eq!(gone[0].1, id);
    assert!(
        gone[0].0 <= silence + Duration::from_millis(300),
        "gone {:?} after the kill (silence {silence:?})",
        gone[0].0
    );
}

/// 20 producers come and go (three alive at a time): the consumer unmaps
/// the rings of the gone ones, its mapped bytes never exceed the bound
/// (it reads the others through their read servers, and says so) and are
/// back to nothing once all are gone.
#[test]
fn twenty_producers_coming_and_going_leave_no_ring_mapped() {
    let n = 3;
    let g = group(n);
    let slots = 2048;
    let ring = (slots * splitrt_vys::ring::slot_bytes(BYTES)) as u64;
    let bound = 3 * ring + ring / 2;
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.max_mapped_bytes = bound;
    cc.producer_silence = Duration::from_millis(500);
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let rx = receive(c);
    let mut live: Vec<Producer> = Vec::new();
    let mut most = 0;
    let mut t = 0;
    for i in 0..20u64 {
        live.push(producer(g, 0x27_0300 + i, slots));
        if live.len() > 3 {
            live.remove(0);
        }
        for _ in 0..10 {
            t += 1;
            for p in &mut live {
                round(p, t);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // (two looks: one read of /proc/self/maps is not atomic, and
        // may see a ring unmapped and the next one mapped meanwhile both)
        most = most.max(mapped_read_only(ring).min(mapped_read_only(ring)));
    }
    live.clear();
    std::thread::sleep(Duration::from_millis(1500));
    let after = mapped_read_only(ring);
    let seen = rx.finish();
    let wrong = seen.valid.iter().filter(|v| !v.2).count();
    let limit = seen.limits;
    let gone = seen.gone.len();
    println!(
        "{} valid ({wrong} wrong); mapped at most {most} B, {after} B after all left \
         (a ring is {ring} B, bound {bound} B); {limit} bound messages, {gone} gone",
        seen.valid.len()
    );
    for (_, m) in seen.other.iter().take(5) {
        println!("  {m}");
    }
    assert_eq!(wrong, 0);
    assert!(most <= bound, "{most} B mapped, bound {bound} B");
    assert_eq!(after, 0, "rings of gone producers still mapped");
    assert!(limit > 0, "no message that the bound was reached");
    assert_eq!(gone, 20, "every producer reported gone");
}

/// An idle producer's heartbeats keep it known (no `ProducerGone` while
/// it writes nothing for three times the silence); once dropped, it is
/// gone after the silence.
#[test]
fn an_idle_producer_is_not_gone_a_dropped_one_is() {
    let n = 5;
    let g = group(n);
    let silence = Duration::from_millis(600);
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.producer_silence = silence;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let rx = receive(c);
    let mut p = producer(g, 0x27_0005, 256);
    round(&mut p, 1);
    std::thread::sleep(3 * silence);
    let heartbeats = p.stats().heartbeats;
    drop(p);
    let dropped = Instant::now();
    std::thread::sleep(silence + Duration::from_millis(500));
    let seen = rx.finish();
    println!(
        "{} valid, {heartbeats} heartbeats, gone: {:?}",
        seen.valid.len(),
        seen.gone
            .iter()
            .map(|(t, p)| (t.saturating_duration_since(dropped), *p))
            .collect::<Vec<_>>()
    );
    assert_eq!(seen.valid.len(), 4);
    assert!(
        heartbeats >= 10,
        "{heartbeats} heartbeats in {:?}",
        3 * silence
    );
    assert_eq!(seen.gone.len(), 1, "gone once, after it was dropped only");
    assert!(seen.gone[0].0 > dropped);
}
