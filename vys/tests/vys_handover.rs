//! The producer's handover socket against strangers (issue 24, items 3-5):
//! connections that trickle bytes or stay silent, held by another user
//! (`nobody`), neither keep a consumer on this host from its mapping nor
//! hold a slot past the handshake's deadline; a consumer that fell back to
//! the read server takes the mapping later; and nobody can squat the
//! socket's name before a producer starts.
//!
//! The attacks run in a copy of this test binary as `nobody`
//! (`attacker_child`, told what to do by `VYS_ATTACK`); when the tests do
//! not run as root they run as this user instead.

use splitrt_vys::consumer::{Consumer, ConsumerConfig, ConsumerStats, Message};
use splitrt_vys::export::{handover_name, ImportedRing};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x24; 32];

fn group(n: u16) -> SocketAddrV4 {
    let port = 36_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 80, n as u8 + 1), port)
}

/// A producer id of this test run's own.
fn id(n: u64) -> u64 {
    0x2400_0000_0000_0000 | (std::process::id() as u64) << 8 | n
}

/// The name producer `id` of stream `KEY` listens on (what a stranger
/// reads in /proc/net/unix once it is bound).
fn name_of(id: u64) -> String {
    handover_name(&KEY, id)
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// A copy of this test binary any user can run (the target directory may
/// sit where only root can enter).
fn attacker_binary() -> &'static std::path::Path {
    static BIN: OnceLock<std::path::PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("splitrt-vys-attacker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("attacker");
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    })
}

/// Another user (`nobody`) running `attacker_child` with `attack`; its
/// stdout is read up to the line starting with `until`, returned.
struct Attacker {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Attacker {
    fn start(attack: &str) -> Attacker {
        let bin = attacker_binary();
        let mut c = if is_root() {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(bin);
            c
        } else {
            Command::new(bin)
        };
        let mut child = c
            .args([
                "--exact",
                "attacker_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("VYS_ATTACK", attack)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the attacker");
        let out = BufReader::new(child.stdout.take().unwrap());
        Attacker { child, out }
    }

    /// Lines until one starts with `prefix` (that one returned; at most
    /// 60 s, the attacker's own bound).
    fn line(&mut self, prefix: &str) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            if self.out.read_line(&mut l).unwrap_or(0) == 0 {
                panic!("the attacker ended before '{prefix}'");
            }
            // (the test harness's own words may precede ours on the line)
            if let Some(at) = l.find(prefix) {
                return l[at..].trim().to_string();
            }
        }
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // its cue to let go
        let _ = self.child.wait();
    }
}

/// Field `key=` of `line`.
fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in '{line}'"))
        .parse()
        .unwrap()
}

fn connect_nonblocking(name: &str) -> Option<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).ok()?;
    s.set_nonblocking(true).ok()?;
    let addr = socket2::SockAddr::unix(format!("\0{name}")).ok()?;
    s.connect(&addr).ok()?;
    Some(s)
}

/// The attacks, when run by [`Attacker`]; otherwise nothing.
///
/// * `silent N NAME`: hold N connections to NAME, saying nothing;
/// * `trickle N NAME`: N connections each sending one byte every 1.5 s;
///   reports when the producer closed each (at most 12 s);
/// * `bind NAME,NAME..`: bind each name, hold them.
///
/// Each holds what it made until its stdin closes (at most 60 s).
#[test]
fn attacker_child() {
    let Ok(attack) = std::env::var("VYS_ATTACK") else {
        return;
    };
    let w: Vec<&str> = attack.split_whitespace().collect();
    let mut held = Vec::new();
    let mut bound = Vec::new();
    match w[0] {
        "silent" => {
            let n: usize = w[1].parse().unwrap();
            held.extend((0..n).filter_map(|_| connect_nonblocking(w[2])));
            println!("held {} of {n}", held.len());
        }
        "trickle" => {
            let n: usize = w[1].parse().unwrap();
            let t0 = Instant::now();
            let mut conns: Vec<Option<socket2::Socket>> =
                (0..n).map(|_| connect_nonblocking(w[2])).collect();
            let connected = conns.iter().flatten().count();
            let mut closed_at = Vec::new();
            let mut next_byte = t0;
            let mut buf = [0u8; 64];
            while t0.elapsed() < Duration::from_secs(12) && conns.iter().any(Option::is_some) {
                let tick = Instant::now() >= next_byte;
                if tick {
                    next_byte += Duration::from_millis(1500);
                }
                for c in conns.iter_mut() {
                    let Some(s) = c else { continue };
                    let mut gone = false;
                    loop {
                        match (&*s).read(&mut buf) {
                            Ok(0) => {
                                gone = true;
                                break;
                            }
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(_) => {
                                gone = true;
                                break;
                            }
                        }
                    }
                    if !gone && tick && (&*s).write(&[0x55]).is_err() {
                        gone = true;
                    }
                    if gone {
                        closed_at.push(t0.elapsed().as_secs_f64());
                        *c = None;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let max = closed_at.iter().cloned().fold(0.0, f64::max);
            println!(
                "trickled connected={connected} closed={} max_s={max:.2}",
                closed_at.len()
            );
        }
        "bind" => {
            for name in w[1].split(',') {
                let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)
                    .unwrap();
                let addr = socket2::SockAddr::unix(format!("\0{name}")).unwrap();
                match s.bind(&addr).and_then(|()| s.listen(8)) {
                    Ok(()) => {
                        println!("bound {name}");
                        bound.push(s);
                    }
                    Err(e) => println!("refused {name}: {e}"),
                }
            }
        }
        other => panic!("unknown attack {other}"),
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    // hold until the test lets go (stdin closed), 60 s at most
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        while std::io::stdin().read(&mut b).unwrap_or(0) > 0 {}
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(60));
    drop((held, bound));
}

fn producer(n: u16, pid: u64, slots: usize) -> Producer {
    let mut pc = ProducerConfig::new(KEY, group(n), Ipv4Addr::LOCALHOST, 4096);
    pc.id = Some(pid);
    pc.slots = slots;
    pc.spectra_per_signal = 4;
    Producer::new(pc).unwrap()
}

/// Item 3: 16 connections trickling one byte every 1.5 s are all closed
/// within the handover's deadline (they were never closed: the deadline
/// was a per-read timeout, reset by every byte).
#[test]
fn trickling_handover_connections_are_closed_within_the_deadline() {
    let pid = id(1);
    let _p = producer(0, pid, 64);
    let mut a = Attacker::start(&format!("trickle 16 {}", name_of(pid)));
    let l = a.line("trickled");
    println!("16 trickling connections: {l}");
    assert_eq!(field(&l, "connected"), 16.0, "{l}");
    assert_eq!(
        field(&l, "closed"),
        16.0,
        "trickling connections kept open past the deadline: {l}"
    );
    assert!(field(&l, "max_s") < 4.0, "closed too late: {l}");
}

/// A producer writing 12 spectra every millisecond for 1.5 s while
/// `nobody` holds `silent` silent connections to its handover socket,
/// and a consumer of everything on this host: its stats.
fn stream_while_held(n: u16, silent: usize) -> ConsumerStats {
    let pid = id(10 + n as u64);
    let mut p = producer(n, pid, 2048);
    let mut a = Attacker::start(&format!("silent {silent} {}", name_of(pid)));
    println!("{}", a.line("held"));
    a.line("ready");
    let mut cc = ConsumerConfig::new(KEY, group(n), Ipv4Addr::LOCALHOST);
    cc.queue_len = 1 << 16;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let mut writer = Some(std::thread::spawn(move || {
        let t0 = Instant::now();
        let d = vec![7u8; 4096];
        let mut t = 0;
        while t0.elapsed() < Duration::from_millis(1500) {
            t += 1;
            for s in 0..12u16 {
                let pr = ProductId {
                    stations: [s, s + 1],
                    spectral_window: 0,
                    stokes: 0,
                };
                p.write(pr, &d, t).unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        p.flush().unwrap();
        p
    }));
    let t0 = Instant::now();
    let mut asked = false;
    let mut keep = None;
    let stats = loop {
        assert!(t0.elapsed() < Duration::from_secs(30), "no END");
        if !asked && writer.as_ref().is_some_and(|w| w.is_finished()) {
            // kept, serving, until the end
            keep = writer.take().map(|w| w.join().unwrap());
            // the last signals reach the consumer before it stops
            std::thread::sleep(Duration::from_millis(200));
            c.shutdown();
            asked = true;
        }
        if let Some(Message::End { stats, .. }) = c.recv(Duration::from_millis(50)) {
            break stats;
        }
    };
    drop(keep);
    let frac = stats.valid as f64 / stats.chosen.max(1) as f64;
    println!(
        "{silent} silent connections: valid {:.0}% ({} of {} chosen), local reads {}, \
         remote reads {}",
        frac * 100.0,
        stats.valid,
        stats.chosen,
        stats.local_reads,
        stats.remote_reads
    );
    stats
}

/// Item 4: 64 and then 300 silent connections held by `nobody` do not
/// keep a consumer on this host from the mapping of the ring.
#[test]
fn silent_strangers_do_not_keep_a_consumer_from_the_mapping() {
    for (n, silent) in [(1u16, 0usize), (2, 64), (3, 300)] {
        let s = stream_while_held(n, silent);
        assert!(s.chosen > 0, "{s:?}");
        assert_eq!(s.remote_reads, 0, "{silent} silent: fell back: {s:?}");
        assert_eq!(
            s.local_reads,
            s.chosen - s.starved,
            "{silent} silent: {s:?}"
        );
    }
}

/// Item 5: `nobody` binds, before the producer starts, every handover
/// name it can compute for the producer's (public) id without the stream
/// key: the old one (`splitrt-vys-<id>`) and the name under a key of its
/// own. The producer still starts, and a consumer gets its ring.
#[test]
fn a_stranger_cannot_squat_the_handover_name() {
    let pid = id(2);
    let guesses = [
        format!("splitrt-vys-{pid:016x}"),
        handover_name(&[0; 32], pid),
    ];
    assert!(
        !guesses.contains(&name_of(pid)),
        "the name is computable without the key"
    );
    let mut a = Attacker::start(&format!("bind {}", guesses.join(",")));
    for g in &guesses {
        assert_eq!(a.line("bound"), format!("bound {g}"), "test setup");
    }
    a.line("ready");
    let mut pc = ProducerConfig::new(KEY, group(4), Ipv4Addr::LOCALHOST, 4096);
    pc.id = Some(pid);
    let p = Producer::new(pc).unwrap_or_else(|e| panic!("a squatter stopped the producer: {e}"));
    let r = ImportedRing::connect_producer(pid, &KEY).expect("the handover");
    assert_eq!(r.producer(), p.id());
}

/// A second producer of the same stream and id on this host: the error
/// names the socket and the cause.
#[test]
fn a_bind_conflict_names_the_socket_and_the_cause() {
    let pid = id(3);
    let _p = producer(5, pid, 64);
    let mut pc = ProducerConfig::new(KEY, group(5), Ipv4Addr::LOCALHOST, 4096);
    pc.id = Some(pid);
    let e = Producer::new(pc).err().expect("two producers on one name");
    let e = e.to_string();
    println!("{e}");
    assert!(e.contains(&name_of(pid)), "the socket is not named: {e}");
    assert!(
        e.contains(&format!("{pid:016x}")) && e.contains("already"),
        "the cause is not named: {e}"
    );
}

/// Item 4: a consumer whose handover failed (the producer refused every
/// connection for a while) reads through the read server meanwhile, and
/// takes the mapping once the handover answers again (it kept the read
/// server for its whole life).
#[test]
fn a_consumer_that_fell_back_takes_the_mapping_later() {
    let pid = id(4);
    let mut p = producer(6, pid, 4096);
    p.handover().unwrap().refuse_all(true);
    let mut cc = ConsumerConfig::new(KEY, group(6), Ipv4Addr::LOCALHOST);
    cc.retry_after = Duration::from_millis(300);
    cc.queue_len = 1 << 16;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let d = vec![7u8; 4096];
    let mut t = 0;
    // write until `enough` holds of the consumer's counts (10 s at most)
    let mut write_until = |p: &mut Producer, enough: &dyn Fn(&ConsumerStats) -> bool| {
        let t0 = Instant::now();
        while !enough(&c.stats()) {
            assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", c.stats());
            t += 1;
            for s in 0..4u16 {
                let pr = ProductId {
                    stations: [s, s],
                    spectral_window: 0,
                    stokes: 0,
                };
                p.write(pr, &d, t).unwrap();
            }
            while c.try_recv().is_some() {}
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    write_until(&mut p, &|s| s.remote_reads > 100);
    p.handover().unwrap().refuse_all(false);
    let before = c.stats();
    write_until(&mut p, &|s| s.local_reads > 100);
    c.shutdown();
    let stats = loop {
        if let Some(Message::End { stats, .. }) = c.recv(Duration::from_secs(10)) {
            break stats;
        }
    };
    println!("refused: {before:?}\nthen: {stats:?}");
    assert_eq!(before.local_reads, 0);
    assert!(stats.local_reads > 100, "{stats:?}");
    assert_eq!(stats.read_failures, 0, "{stats:?}");
}
