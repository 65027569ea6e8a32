//! A hostile local user attacking a running job's bootstrap port: what a
//! stranger without the job key can send. Used by `tests/security.rs`; it
//! never targets anything but the address it is given (loopback).
//!
//! Usage: t_attacker ADDR MODE...   modes:
//! * `garbage`  — 300 connections sending random bytes
//! * `oversize` — 64 connections announcing 16 MiB frames and sending 1 MiB
//! * `halves`   — 256 connections at once each sending half a length word,
//!   held open for 2 s
//! * `forge`    — old-style unauthenticated Barrier / Release / Abort / Hello
//!   / Bye frames, each on its own connection and all on one
//! * `fakerank` — the real handshake with a wrong key, claiming ranks 0..4,
//!   then sealed frames anyway
//! * `barriers` — for 2 s, unauthenticated Barrier arrivals and releases of
//!   epochs 1..=2000, over and over (nothing else, so nothing ends the job
//!   first: a server that counted them would release waiting ranks early)
//! * `trickle` — for 14 s, 64 connections each sending the 72-byte proof
//!   one byte every 4 s (a per-read timeout never fires), each replaced by
//!   a new one when the server closes it; reports how long the server let
//!   the longest one live
//! * `udp` — for 1.5 s, datagrams at every loopback UDP socket of user
//!   `ATTACK_UID` (default 0) listed in `/proc/net/udp`: random bytes, and
//!   well-formed UDP-fabric headers (every kind, plausible sequence and
//!   acknowledgement numbers) under a made-up tag
//! * `udpflood` — until killed (or `FLOOD_SECS`, default 60 s), as fast as
//!   it can, the largest datagrams (`FLOOD_SIZE`, default 65507 B) of
//!   garbage under a plausible UDP-fabric header (right magic, version and
//!   length; sender and addressee ranks 0 / 1) at the ports in
//!   `FLOOD_PORTS` (comma separated) of `FLOOD_HOST` (default 127.0.0.1)
//!
//! Prints one line per mode and `attacker: done`; exits 1 only if the
//! server ever accepted it (a fake rank got in).

use splitrt::runtime::bootstrap::auth::{self, HandshakeError};
use splitrt::runtime::bootstrap::wire::write_frame;
use splitrt::runtime::bootstrap::{Collective, Hello, Msg};
use splitrt::runtime::key::JobKey;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    Some(s)
}

/// Read whatever the server says until it closes or goes quiet.
fn drain(s: &mut TcpStream) -> usize {
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let mut buf = [0u8; 4096];
    let mut n = 0;
    while let Ok(k) = s.read(&mut buf) {
        if k == 0 {
            break;
        }
        n += k;
    }
    n
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn garbage(addr: SocketAddr) -> String {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut sent = 0;
    for i in 0..300 {
        let Some(mut s) = connect(addr) else { continue };
        let len = 1 + (xorshift(&mut seed) % 200) as usize;
        let mut junk: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        if i % 3 == 0 {
            // a plausible small length word first
            junk[..4.min(len)].copy_from_slice(&[8, 0, 0, 0][..4.min(len)]);
        }
        if s.write_all(&junk).is_ok() {
            sent += 1;
        }
        drop(s);
    }
    format!("garbage: {sent} connections sent random bytes")
}

fn oversize(addr: SocketAddr) -> String {
    let chunk = vec![0xabu8; 1 << 20];
    let conns: Vec<TcpStream> = (0..64)
        .filter_map(|_| {
            let mut s = connect(addr)?;
            s.write_all(&(16u32 << 20).to_le_bytes()).ok()?;
            let _ = s.write_all(&chunk);
            Some(s)
        })
        .collect();
    format!(
        "oversize: {} connections announced 16 MiB frames",
        conns.len()
    )
}

fn halves(addr: SocketAddr) -> String {
    let conns: Vec<TcpStream> = (0..256)
        .filter_map(|_| {
            let mut s = connect(addr)?;
            s.write_all(&[0xff, 0xff]).ok()?;
            Some(s)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    format!("halves: {} connections held half a frame", conns.len())
}

/// How long the attack lasts and how slowly it trickles.
const TRICKLE_FOR: Duration = Duration::from_secs(14);
const TRICKLE_EVERY: Duration = Duration::from_secs(4);

/// One slot of the trickle: connect, send a byte every [`TRICKLE_EVERY`]
/// while reading what the server says, note how long the server kept the
/// connection, reconnect, until [`TRICKLE_FOR`] is over. Returns the
/// lifetimes of the connections the server closed, and those of the ones
/// still open at the end.
fn trickle_slot(addr: SocketAddr, end: std::time::Instant) -> (Vec<Duration>, Vec<Duration>) {
    use std::time::Instant;
    let (mut closed, mut open) = (Vec::new(), Vec::new());
    while Instant::now() < end {
        let Some(mut s) = connect(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let born = Instant::now();
        let mut next_byte = born;
        // the frame of a proof: its length word (72), then 72 bytes
        let mut proof = 72u32.to_le_bytes().to_vec();
        proof.resize(4 + 72, 0x5a);
        let mut sent = 0;
        let mut buf = [0u8; 256];
        let gone = loop {
            let now = Instant::now();
            if now >= end {
                break false;
            }
            if now >= next_byte {
                let byte = proof[sent.min(proof.len() - 1)];
                if s.write_all(&[byte]).is_err() {
                    break true;
                }
                sent += 1;
                next_byte += TRICKLE_EVERY;
            }
            let wait = next_byte.min(end).saturating_duration_since(Instant::now());
            let _ = s.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break true,
            }
        };
        if gone {
            closed.push(born.elapsed());
        } else {
            open.push(born.elapsed());
        }
    }
    (closed, open)
}

fn trickle(addr: SocketAddr) -> String {
    let end = std::time::Instant::now() + TRICKLE_FOR;
    let slots: Vec<_> = (0..64)
        .map(|_| std::thread::spawn(move || trickle_slot(addr, end)))
        .collect();
    let (mut closed, mut open) = (Vec::new(), Vec::new());
    for h in slots {
        let (c, o) = h.join().expect("trickle thread");
        closed.extend(c);
        open.extend(o);
    }
    let max = |v: &[Duration]| v.iter().max().map_or(0.0, |d| d.as_secs_f64());
    format!(
        "trickle: {} connections closed by the server, longest lived {:.1} s; \
         {} still open at the end, oldest {:.1} s",
        closed.len(),
        max(&closed),
        open.len(),
        max(&open)
    )
}

fn forged() -> Vec<Msg> {
    let mut v = Vec::new();
    for e in 1..=200 {
        v.push(Msg::Barrier(Collective::User, e));
        v.push(Msg::Release(e));
    }
    v.push(Msg::Abort(1, "forged abort from a stranger".into()));
    v.push(Msg::Hello(Hello {
        rank: 0,
        size: 2,
        job: "x".into(),
        host: "evil".into(),
        pid: 1,
        table: vec![],
        endpoint: vec![],
    }));
    v.push(Msg::Bye);
    v
}

fn barriers(addr: SocketAddr) -> String {
    let frames: Vec<Vec<u8>> = (1..=2000)
        .flat_map(|e| [Msg::Barrier(Collective::User, e), Msg::Release(e)])
        .map(|m| m.encode_body())
        .collect();
    let t0 = std::time::Instant::now();
    let mut sent = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        let Some(mut s) = connect(addr) else { continue };
        for f in &frames {
            if write_frame(&mut s, f).is_err() {
                break;
            }
            sent += 1;
        }
        drain(&mut s);
    }
    format!("barriers: {sent} forged barrier frames sent")
}

fn forge(addr: SocketAddr) -> String {
    let msgs = forged();
    let mut answered = 0;
    for m in &msgs[msgs.len() - 3..] {
        if let Some(mut s) = connect(addr) {
            let _ = write_frame(&mut s, &m.encode_body());
            answered += drain(&mut s);
        }
    }
    if let Some(mut s) = connect(addr) {
        for m in &msgs {
            if write_frame(&mut s, &m.encode_body()).is_err() {
                break;
            }
        }
        answered += drain(&mut s);
    }
    format!(
        "forge: {} unauthenticated frames sent; server said {answered} B",
        msgs.len() + 3
    )
}

fn fakerank(addr: SocketAddr) -> Result<String, String> {
    let mut rejected = 0;
    for rank in 0..4u32 {
        let Some(mut s) = connect(addr) else { continue };
        let key = JobKey::generate().map_err(|e| e.to_string())?;
        match auth::client(&mut s, &key, rank) {
            Ok((mut seal, _)) => {
                let _ = seal.send(&mut s, &Msg::Abort(rank, "fake rank".into()));
                return Err(format!("the server accepted a fake rank {rank}"));
            }
            Err(HandshakeError::Rejected) => rejected += 1,
            Err(HandshakeError::Transient(_)) => {}
            Err(HandshakeError::BadServer(why)) => return Err(why),
        }
    }
    Ok(format!(
        "fakerank: {rejected} of 4 wrong-key handshakes rejected"
    ))
}

/// Loopback UDP ports of `uid` from /proc/net/udp.
fn udp_targets(uid: u32) -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[7].parse::<u32>().ok() != Some(uid) {
            continue;
        }
        let Some((ip, port)) = f[1].split_once(':') else {
            continue;
        };
        let (Ok(ip), Ok(port)) = (u32::from_str_radix(ip, 16), u16::from_str_radix(port, 16))
        else {
            continue;
        };
        let ip = std::net::Ipv4Addr::from(u32::from_be(ip));
        if ip.is_loopback() {
            out.push(SocketAddr::from((ip, port)));
        }
    }
    out
}

fn udp_spray() -> String {
    use splitrt::runtime::fabric::udp::wire::{Ack, Header, HEADER, TAG};
    let uid = std::env::var("ATTACK_UID")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp socket");
    let mut x = 0x2545F4914F6CDD1Du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let t0 = std::time::Instant::now();
    let (mut sent, mut targets) = (0u64, 0usize);
    while t0.elapsed() < Duration::from_millis(1500) {
        let to = udp_targets(uid);
        targets = targets.max(to.len());
        for a in &to {
            for k in 0..20u64 {
                let body = (rnd() % 1400) as usize;
                let mut d = vec![0u8; HEADER + body + TAG];
                if k % 2 == 0 {
                    d.iter_mut().for_each(|b| *b = rnd() as u8);
                } else {
                    Header {
                        kind: (rnd() % 3) as u8,
                        flags: (rnd() % 2) as u8,
                        body_len: if k % 4 == 1 { body as u16 } else { 0 },
                        src: (rnd() % 8) as u32,
                        dst: (rnd() % 8) as u32,
                        seq: (rnd() % 64) as u32,
                        acks: [Ack {
                            cum: (rnd() % 64) as u32,
                            sack: rnd() as u32,
                            win: 64,
                        }; 2],
                        ts: rnd() as u32,
                        echo: rnd() as u32,
                        hold: rnd() as u8,
                        pn: rnd(),
                    }
                    .write(&mut d);
                    if k % 4 != 1 {
                        d.truncate(HEADER + TAG);
                    }
                }
                if sock.send_to(&d, a).is_ok() {
                    sent += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    format!("udp: {sent} datagrams sent at {targets} socket(s)")
}

fn udp_flood() -> String {
    use splitrt::runtime::fabric::udp::wire::{Header, HEADER, TAG};
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let ports: Vec<u16> = env("FLOOD_PORTS")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    let secs: u64 = env("FLOOD_SECS").parse().unwrap_or(60);
    let size: usize = env("FLOOD_SIZE").parse().unwrap_or(65_507);
    let size = size.clamp(HEADER + TAG, 65_507);
    let host = std::env::var("FLOOD_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let sock = std::net::UdpSocket::bind(if host.starts_with("127.") {
        "127.0.0.1:0"
    } else {
        "0.0.0.0:0"
    })
    .expect("udp socket");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut d: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let t0 = std::time::Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) && !ports.is_empty() {
        for &port in &ports {
            for (src, dst) in [(0u32, 1u32), (1, 0)] {
                Header {
                    kind: 0,
                    body_len: (size - HEADER - TAG) as u16,
                    src,
                    dst,
                    seq: sent as u32 % 64,
                    ..Header::default()
                }
                .write(&mut d);
                if sock.send_to(&d, (host.as_str(), port)).is_ok() {
                    sent += 1;
                }
            }
        }
    }
    format!(
        "udpflood: {sent} datagrams of {size} B sent at {} port(s)",
        ports.len()
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("usage: t_attacker ADDR MODE...");
    assert!(addr.ip().is_loopback(), "attacks only loopback addresses");
    let modes: Vec<String> = args.collect();
    let handles: Vec<_> = modes
        .into_iter()
        .map(|m| {
            std::thread::spawn(move || match m.as_str() {
                "garbage" => Ok(garbage(addr)),
                "oversize" => Ok(oversize(addr)),
                "halves" => Ok(halves(addr)),
                "forge" => Ok(forge(addr)),
                "fakerank" => fakerank(addr),
                "udp" => Ok(udp_spray()),
                "udpflood" => Ok(udp_flood()),
                "barriers" => Ok(barriers(addr)),
                "trickle" => Ok(trickle(addr)),
                other => Err(format!("unknown mode {other}")),
            })
        })
        .collect();
    let mut failed = false;
    for h in handles {
        match h.join().expect("attack thread") {
            Ok(line) => println!("{line}"),
            Err(e) => {
                println!("attacker: {e}");
                failed = true;
            }
        }
    }
    println!("attacker: done");
    std::process::exit(i32::from(failed));
}
