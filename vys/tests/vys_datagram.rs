//! Read-session datagram size (issue 27, part 2): reads across hosts are
//! never IP-fragmented by default. Each test runs in a network namespace
//! of its own (its loopback's MTU set as a real link's), so the kernel's
//! fragment counters (`/proc/thread-self/net/snmp`, `Ip: FragCreates`,
//! `ReasmReqds`) count this test's datagrams only. Needs the right to
//! make a network namespace (root, as in CI); without it the tests say
//! they are skipped.
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x62; 32];
const BYTES: usize = 8192;

/// Run `f` on a thread moved into a new network namespace whose loopback
/// is up with `mtu`; `None` (and a message) if that is not allowed here.
fn in_own_netns<T: Send + 'static>(mtu: u32, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        // SAFETY: unshare takes no pointers; it moves this thread (and
        // the threads and processes it starts) into a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            eprintln!(
                "skipped: no network namespace of our own ({}); run as root",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let up = Command::new("ip")
            .args(["link", "set", "lo", "mtu", &mtu.to_string(), "up"])
            .status();
        if !matches!(up, Ok(s) if s.success()) {
            eprintln!("skipped: `ip link set lo mtu {mtu} up` failed: {up:?}");
            return None;
        }
        Some(f())
    })
    .join()
    .unwrap()
}

/// `Ip: FragCreates` and `Ip: ReasmReqds` of this thread's namespace.
fn fragments() -> (u64, u64) {
    let t = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let mut ip = t.lines().filter(|l| l.starts_with("Ip:"));
    let names: Vec<&str> = ip.next().unwrap().split_whitespace().collect();
    let vals: Vec<&str> = ip.next().unwrap().split_whitespace().collect();
    let get = |k: &str| {
        vals[names.iter().position(|n| *n == k).unwrap()]
            .parse()
            .unwrap()
    };
    (get("FragCreates"), get("ReasmReqds"))
}

/// What a run of remote reads came to.
#[derive(Debug)]
struct Run {
    valid: u64,
    wrong: u64,
    frag_creates: u64,
    reasm_reqds: u64,
    /// The largest datagram the read server sent.
    largest: u64,
}

/// `n` 8 KiB spectra written, announced to a consumer by its injector and
/// read through the producer's read server (the consumer maps nothing),
/// paced so every read is served; `producer` and `consumer` adjust the
/// settings.
fn remote_reads(
    n: usize,
    producer: impl FnOnce(&mut ProducerConfig),
    consumer: impl FnOnce(&mut ConsumerConfig),
) -> Run {
    let mut pc = ProducerConfig::new(
        KEY,
        "239.255.62.1:1".parse().unwrap(),
        Ipv4Addr::LOCALHOST,
        BYTES,
    );
    pc.group = None;
    pc.queue_signals = true;
    pc.slots = n + 64;
    pc.spectra_per_signal = 8;
    pc.heartbeat = None;
    producer(&mut pc);
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::without_multicast(KEY);
    cc.local_reads = false;
    cc.max_spectrum_bytes = BYTES;
    consumer(&mut cc);
    let c = Arc::new(Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap());
    let (valid, wrong, outcomes) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let rx = {
        let (c, valid, wrong, outcomes) =
            (c.clone(), valid.clone(), wrong.clone(), outcomes.clone());
        std::thread::spawn(move || loop {
            match c.recv(Duration::from_secs(30)) {
                Some(Message::Valid(s)) => {
                    let pr = &s.product;
                    let ok = checkable::matches(
                        (pr.stations, pr.spectral_window, pr.stokes),
                        s.info.timestamp,
                        s.data(),
                    );
                    if ok { &valid } else { &wrong }.fetch_add(1, Ordering::Relaxed);
                    outcomes.fetch_add(1, Ordering::Relaxed);
                }
                Some(Message::End { .. }) | None => return,
                Some(m) => {
                    eprintln!("{m}");
                    outcomes.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let before = fragments();
    let inject = c.injector();
    let mut d = vec![0u8; BYTES];
    let mut written = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    for t in 1..=(n / 8) as u64 {
        for a in 0..8u16 {
            let pr = ProductId {
                stations: [a, a + 1],
                spectral_window: 0,
                stokes: 0,
            };
            checkable::fill((pr.stations, pr.spectral_window, pr.stokes), t, &mut d);
            p.write(pr, &d, t).unwrap();
            written += 1;
        }
        if t % 32 == 0 || t == (n / 8) as u64 {
            p.flush().unwrap();
            for s in p.take_signals() {
                assert!(inject.inject(&s), "the injector's queue was full");
            }
            // every read answered before the next batch (no starvation)
            while outcomes.load(Ordering::Relaxed) < written {
                assert!(Instant::now() < deadline, "reads not answered in 60 s");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let after = fragments();
    c.shutdown();
    rx.join().unwrap();
    let largest = p
        .server()
        .unwrap()
        .stats()
        .largest_datagram
        .load(Ordering::Relaxed);
    Run {
        largest,
        valid: valid.load(Ordering::Relaxed),
        wrong: wrong.load(Ordering::Relaxed),
        frag_creates: after.0 - before.0,
        reasm_reqds: after.1 - before.1,
    }
}

/// 4 000 remote 8 KiB reads over a path with a 1500-byte MTU, default
/// settings: every spectrum valid and right, and not one IP fragment
/// (before: 65 507-byte datagrams, 22 924 fragments).
#[test]
fn remote_reads_are_not_fragmented_by_default() {
    let Some(r) = in_own_netns(1500, || remote_reads(4000, |_| {}, |_| {})) else {
        return;
    };
    println!("{r:?}");
    assert_eq!((r.valid, r.wrong), (4000, 0), "{r:?}");
    assert_eq!((r.frag_creates, r.reasm_reqds), (0, 0), "{r:?}");
    assert!(r.largest <= 1472, "{r:?}");
    // the default follows the route: on the loopback's 65 536-byte MTU
    // the datagrams grow past 9000 B, still unfragmented
    let Some(r) = in_own_netns(65_536, || remote_reads(800, |_| {}, |_| {})) else {
        return;
    };
    println!("{r:?}");
    assert_eq!((r.valid, r.wrong), (800, 0), "{r:?}");
    assert_eq!((r.frag_creates, r.reasm_reqds), (0, 0), "{r:?}");
    assert!(r.largest > 9000, "{r:?}");
}

/// Both ends set to 9000 B (through their settings lookup, as
/// `SPLITRT_VYS_DATAGRAM=9000` does) on a path that carries it (the
/// loopback's 65 536 B MTU): the datagrams grow to the setting and not
/// past it, unfragmented.
#[test]
fn the_datagram_size_follows_the_setting() {
    let set = |k: &str| (k == "SPLITRT_VYS_DATAGRAM").then(|| "9000".to_string());
    let Some(r) = in_own_netns(65_536, move || {
        remote_reads(
            800,
            |p| p.apply_settings(set).unwrap(),
            |c| c.apply_settings(set).unwrap(),
        )
    }) else {
        return;
    };
    println!("{r:?}");
    assert_eq!((r.valid, r.wrong), (800, 0), "{r:?}");
    assert!(r.largest > 1472 && r.largest <= 9000, "{r:?}");
    assert_eq!((r.frag_creates, r.reasm_reqds), (0, 0), "{r:?}");
}

/// Each end takes the smaller of the two settings, and the consumer
/// lowers its own to what its route carries: 9000 B asked for on a
/// 1500-byte MTU path gives 1472-byte datagrams, unfragmented; a
/// producer set to 1000 B sends no larger to a consumer that takes 9000.
#[test]
fn the_smaller_setting_and_the_path_bound_the_datagrams() {
    let Some(r) = in_own_netns(1500, || {
        remote_reads(
            400,
            |p| p.datagram_bytes = 9000,
            |c| c.datagram_bytes = 9000,
        )
    }) else {
        return;
    };
    println!("{r:?}");
    assert_eq!((r.valid, r.wrong), (400, 0), "{r:?}");
    assert!(r.largest <= 1472, "{r:?}");
    assert_eq!((r.frag_creates, r.reasm_reqds), (0, 0), "{r:?}");
    let Some(r) = in_own_netns(65_536, || {
        remote_reads(
            400,
            |p| p.datagram_bytes = 1000,
            |c| c.datagram_bytes = 9000,
        )
    }) else {
        return;
    };
    println!("{r:?}");
    assert_eq!((r.valid, r.wrong), (400, 0), "{r:?}");
    assert!(r.largest <= 1000, "{r:?}");
}

/// A datagram size out of range is refused at start, naming the setting.
#[test]
fn a_bad_datagram_setting_is_refused_by_name() {
    let mut cc = ConsumerConfig::without_multicast(KEY);
    let e = cc
        .apply_settings(|k| (k == "SPLITRT_VYS_DATAGRAM").then(|| "70000".into()))
        .unwrap_err();
    assert!(e.to_string().contains("SPLITRT_VYS_DATAGRAM"), "{e}");
    let e = cc
        .apply_settings(|k| (k == "SPLITRT_VYS_DATAGRAM").then(|| "big".into()))
        .unwrap_err();
    assert!(e.to_string().contains("SPLITRT_VYS_DATAGRAM"), "{e}");
    cc.datagram_bytes = 100;
    let e = Consumer::start(cc, |_, _, _| {}).err().expect("refused");
    assert!(e.to_string().contains("datagram_bytes"), "{e}");
    let mut pc = ProducerConfig::new(
        KEY,
        "239.255.62.1:1".parse().unwrap(),
        Ipv4Addr::LOCALHOST,
        BYTES,
    );
    pc.group = None;
    pc.datagram_bytes = 65_508;
    let e = Producer::new(pc).err().expect("refused");
    assert!(e.to_string().contains("datagram_bytes"), "{e}");
}
