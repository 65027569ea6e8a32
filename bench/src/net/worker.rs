//! One rank of the network benchmark job (2 ranks, `SPLITRT_FABRIC=udp`;
//! on one host or two). Rank r pins itself to CPU r. Both ranks also open
//! a raw UDP socket on the same interface, so the same two processes on
//! the same cores measure the floor: a busy-poll ping-pong and a one-way
//! stream of plain datagrams, no protocol at all.
//!
//! Rank 0 drives; rank 1 answers Active Messages from its barriers and
//! plays its side of the raw measurements. Every repetition measures, in
//! order: raw RTT, AM Short / Medium 1 KiB / Long 64 KiB RTT, raw stream,
//! Medium and Long one-way bandwidth, Short message rate, put 1 MiB, get
//! 64 KiB and 1 MiB, a strided put of 1000 runs of 64 B vs the same runs
//! as 1000 puts. Rank 0 writes `name,rep,value` lines.

use crate::harness::worker;
use crate::Common;
use splitrt::pgas::Pgas;
use splitrt::{EndpointBuilder, Error, Kind, Payload, Result};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    pong: AtomicU64,
    sunk: AtomicU64,
    bytes: AtomicU64,
    peer_raw: Mutex<Option<SocketAddr>>,
    stream_result: Mutex<Option<(u64, u64)>>,
}

struct Sizes {
    rtt: usize,
    stream_msgs: usize,
    flood: usize,
    raw_stream: usize,
    bw_reps: usize,
}

fn sizes(c: &Common) -> Sizes {
    if c.quick {
        Sizes {
            rtt: 300,
            stream_msgs: 100,
            flood: 20_000,
            raw_stream: 2_000,
            bw_reps: 5,
        }
    } else {
        Sizes {
            rtt: 5_000,
            stream_msgs: 2_000,
            flood: 1_000_000,
            raw_stream: 50_000,
            bw_reps: 50,
        }
    }
}

/// The local address the fabric uses (toward the rendezvous).
fn local_ip() -> Result<std::net::IpAddr> {
    let boot = std::env::var("SPLITRT_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9".into());
    splitrt::runtime::route::local_ip_toward(&boot)
}

/// Run this rank; rank 0 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let sz = sizes(&common);
    worker::pin();
    let sh = Arc::new(Shared::default());
    let mut b = EndpointBuilder::new();
    let s = sh.clone();
    let pong = b.reply("pong", Kind::Short, 1, move |m| {
        s.pong.store(m.arg(0), Ordering::Release)
    })?;
    let ping = b.request("ping", Kind::Short, 1, move |tok, m| {
        tok.reply(pong, &[m.arg(0)], Payload::None).expect("reply")
    })?;
    let mping = b.request("mping", Kind::Medium, 1, move |tok, m| {
        tok.reply(pong, &[m.arg(0)], Payload::None).expect("reply")
    })?;
    let lping = b.request("lping", Kind::Long, 1, move |tok, m| {
        tok.reply(pong, &[m.arg(0)], Payload::None).expect("reply")
    })?;
    let s = sh.clone();
    let sink = b.request("sink", Kind::Short, 1, move |_tok, _m| {
        s.sunk.fetch_add(1, Ordering::Relaxed);
    })?;
    let s = sh.clone();
    let msink = b.request("msink", Kind::Medium, 0, move |_tok, m| {
        s.bytes
            .fetch_add(m.payload().len() as u64, Ordering::Relaxed);
    })?;
    let s = sh.clone();
    let lsink = b.request("lsink", Kind::Long, 0, move |_tok, m| {
        s.bytes.fetch_add(m.payload_len() as u64, Ordering::Relaxed);
    })?;
    let s = sh.clone();
    let addr = b.request("raw addr", Kind::Medium, 0, move |_tok, m| {
        let a = std::str::from_utf8(m.payload())
            .ok()
            .and_then(|t| t.parse().ok());
        *s.peer_raw.lock().unwrap() = a;
    })?;
    let s = sh.clone();
    let streamed = b.request("raw stream result", Kind::Short, 2, move |_tok, m| {
        *s.stream_result.lock().unwrap() = Some((m.arg(0), m.arg(1)));
    })?;
    let pg = Pgas::attach_with(b)?;
    let ep = pg.endpoint();
    worker::two_ranks(pg.size())?;
    let me = pg.rank();
    let other = 1 - me;
    let raw = UdpSocket::bind((local_ip()?, 0)).map_err(|e| Error::io("raw UDP socket", e))?;
    raw.set_nonblocking(true)
        .map_err(|e| Error::io("raw UDP socket", e))?;
    let mine = raw
        .local_addr()
        .map_err(|e| Error::io("raw UDP socket", e))?;
    ep.request(
        other,
        addr,
        &[],
        Payload::Medium(mine.to_string().as_bytes()),
    )?;
    ep.wait_until(|| sh.peer_raw.lock().unwrap().is_some())?;
    let peer = sh.peer_raw.lock().unwrap().expect("peer raw address");
    // not connected: an ICMP error from a stale port must not fail a recv
    let send = |b: &[u8]| raw.send_to(b, peer);

    let max_medium = ep.max_medium(other)?;
    let area = pg.alloc_sym::<u8>(1 << 20)?;
    let strided_area = pg.alloc_sym::<u64>(crate::pgas::strided::TARGET_WORDS)?;
    let mut buf = vec![7u8; 1 << 20];
    area.local().fill(1);
    let mut out = String::new();
    let mut seq = 0u64;
    let mut rtt =
        |ep: &splitrt::Endpoint, n: usize, send: &dyn Fn(u64) -> Result<()>| -> Result<f64> {
            let t = Instant::now();
            for _ in 0..n {
                seq += 1;
                send(seq)?;
                let want = seq;
                ep.wait_until(|| sh.pong.load(Ordering::Acquire) == want)?;
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
        };
    for rep in 0..common.reps {
        let mut row = |name: &str, v: f64| out += &format!("{name},{rep},{v}\n");
        // raw busy-poll ping-pong (8-byte counters; anything else, e.g. a
        // late datagram of the last stream, is skipped)
        let mut junk = vec![0u8; 65_536];
        while raw.recv_from(&mut junk).is_ok() {}
        pg.barrier()?;
        let n = sz.rtt;
        let mut b8 = [0u8; 64];
        // Spins on the raw socket; after 1 ms of silence it also polls the
        // endpoint: under `chrt -f` with both ranks on one CPU the UDP
        // fabric's keeper thread never runs while this thread spins, so a
        // barrier release (or its retransmission) held in this rank's
        // fabric would never leave, and the peer would never start the
        // ping-pong. The steady state (microsecond round trips) never
        // reaches the poll.
        let spin_recv = |b: &mut [u8]| -> Result<u64> {
            let t = Instant::now();
            loop {
                match raw.recv_from(b).map(|(k, _)| k) {
                    Ok(8) => return Ok(u64::from_le_bytes(b[..8].try_into().expect("8"))),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        let quiet = t.elapsed();
                        if quiet > Duration::from_secs(5) {
                            return Err(Error::usage(format!(
                                "rank {me}: raw UDP ping-pong (rep {rep}): no datagram for 5 s"
                            )));
                        }
                        if quiet > Duration::from_millis(1) {
                            ep.poll()?;
                        }
                    }
                    Err(e) => return Err(Error::io("raw UDP recv", e)),
                }
            }
        };
        if me == 0 {
            let t = Instant::now();
            for i in 0..n as u64 {
                if let Err(e) = send(&i.to_le_bytes()) {
                    eprintln!("send: {e}");
                }
                while spin_recv(&mut b8)? != i {}
            }
            row(
                "raw UDP RTT (us)",
                t.elapsed().as_secs_f64() * 1e6 / n as f64,
            );
        } else {
            for _ in 0..n {
                let i = spin_recv(&mut b8)?;
                let _ = send(&i.to_le_bytes());
            }
        }
        pg.barrier()?;
        if me == 0 {
            let v = rtt(ep, n, &|i| ep.request(1, ping, &[i], Payload::None))?;
            row("AM Short RTT (us)", v);
            let kb = vec![3u8; 1024];
            let v = rtt(ep, n, &|i| ep.request(1, mping, &[i], Payload::Medium(&kb)))?;
            row("AM Medium 1 KiB RTT (us)", v);
            let l = vec![4u8; 64 << 10];
            let v = rtt(ep, n / 5, &|i| {
                ep.request(
                    1,
                    lping,
                    &[i],
                    Payload::Long {
                        data: &l,
                        offset: area.ptr(1).offset(),
                    },
                )
            })?;
            row("AM Long 64 KiB RTT (us)", v);
        }
        // raw one-way stream of 65000-byte datagrams
        pg.barrier()?;
        let dg = 65_000;
        if me == 0 {
            let d = vec![9u8; dg];
            for _ in 0..sz.raw_stream {
                loop {
                    match send(&d) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        _ => break,
                    }
                }
            }
            ep.wait_until(|| sh.stream_result.lock().unwrap().is_some())?;
            let (bytes, ns) = sh.stream_result.lock().unwrap().take().expect("result");
            row(
                "raw UDP stream (MB/s)",
                bytes as f64 / ns.max(1) as f64 * 1e3,
            );
        } else {
            let mut big = vec![0u8; 65_536];
            let (mut got, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
            let t0 = Instant::now();
            loop {
                match raw.recv_from(&mut big).map(|(k, _)| k) {
                    Ok(k) => {
                        let now = Instant::now();
                        if first.is_none() {
                            first = Some(now);
                        } else {
                            got += k as u64;
                        }
                        last = now;
                        if got >= (sz.raw_stream as u64 - 1) * dg as u64 {
                            break;
                        }
                    }
                    Err(_) => {
                        let quiet = first.map_or(t0.elapsed(), |_| last.elapsed());
                        if quiet > Duration::from_millis(300) {
                            break;
                        }
                    }
                }
            }
            let ns = first.map_or(1, |f| (last - f).as_nanos() as u64);
            ep.request(0, streamed, &[got, ns], Payload::None)?;
        }
        pg.barrier()?;
        if me == 0 {
            // Medium one-way: a stream, then a ping (processed after them)
            let m = vec![5u8; max_medium];
            let t = Instant::now();
            for _ in 0..sz.stream_msgs {
                ep.request(1, msink, &[], Payload::Medium(&m))?;
            }
            rtt(ep, 1, &|i| ep.request(1, ping, &[i], Payload::None))?;
            let bytes = (sz.stream_msgs * max_medium) as f64;
            row(
                "AM Medium max one-way (MB/s)",
                bytes / t.elapsed().as_secs_f64() / 1e6,
            );
            let t = Instant::now();
            let per = sz.stream_msgs / 16 + 1;
            for _ in 0..per {
                ep.request(
                    1,
                    lsink,
                    &[],
                    Payload::Long {
                        data: &buf,
                        offset: area.ptr(1).offset(),
                    },
                )?;
            }
            rtt(ep, 1, &|i| ep.request(1, ping, &[i], Payload::None))?;
            let bytes = (per * buf.len()) as f64;
            row(
                "AM Long 1 MiB one-way (MB/s)",
                bytes / t.elapsed().as_secs_f64() / 1e6,
            );
            let t = Instant::now();
            for i in 0..sz.flood {
                ep.request(1, sink, &[i as u64], Payload::None)?;
            }
            rtt(ep, 1, &|i| ep.request(1, ping, &[i], Payload::None))?;
            row(
                "AM Short 8 B rate (M msg/s)",
                sz.flood as f64 / t.elapsed().as_secs_f64() / 1e6,
            );
            let t = Instant::now();
            for _ in 0..sz.bw_reps {
                pg.put(area.ptr(1), &buf)?;
            }
            pg.sync()?;
            row(
                "put 1 MiB (MB/s)",
                (sz.bw_reps << 20) as f64 / t.elapsed().as_secs_f64() / 1e6,
            );
            let t = Instant::now();
            for _ in 0..sz.bw_reps * 4 {
                pg.read_slice(area.ptr(1), &mut buf[..64 << 10])?;
            }
            row(
                "get 64 KiB (MB/s)",
                (sz.bw_reps * 4 * (64 << 10)) as f64 / t.elapsed().as_secs_f64() / 1e6,
            );
            let t = Instant::now();
            for _ in 0..sz.bw_reps {
                pg.read_slice(area.ptr(1), &mut buf)?;
            }
            row(
                "get 1 MiB (MB/s)",
                (sz.bw_reps << 20) as f64 / t.elapsed().as_secs_f64() / 1e6,
            );
            // strided put vs the same runs as separate puts (same job)
            let (batches, batch) = if common.quick { (2, 2) } else { (5, 10) };
            let dst = strided_area.ptr(1);
            let (a, b) = crate::pgas::strided::measure(&pg, dst, batches, batch)?;
            let mean_us = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64 / 1e3;
            row("strided put 1000 x 64 B + sync (us)", mean_us(&a));
            row("1000 separate 64 B puts + sync (us)", mean_us(&b));
            // the runs' bytes per time, beside the raw UDP stream's rate
            // (is either form at the wire's rate? see ARCHITECTURE.md)
            let data = (crate::pgas::strided::RUNS * crate::pgas::strided::RUN_BYTES) as f64;
            row("strided put data (MB/s)", data / mean_us(&a));
            row("separate puts data (MB/s)", data / mean_us(&b));
        }
        pg.barrier()?;
    }
    if me == 0 {
        if let Some(s) = ep.udp_stats() {
            out += &format!(
                "datagrams sent,0,{}\nretransmitted,0,{}\n",
                s.sent, s.retransmits
            );
        }
        worker::write_result(result, 0, &out)?;
    }
    pg.finish()
}
