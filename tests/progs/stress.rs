//! AM stress in the spirit of GASNet's testcore2: every rank floods every
//! rank (itself included) with many requests in flight, a random mix of
//! Short, Medium (often larger than a cell, so chunked) and Long, half of
//! them through the non-blocking `try_request`. Every request and every reply
//! is verified byte for byte. Run with tiny rings so credits run out on all
//! ranks at once: the run must neither deadlock nor lose a message.
//!
//! Usage: t_stress [MSGS_PER_PEER [THREADS]]   (exit 0 = all checks passed)

#[path = "checks.rs"]
mod checks;
use checks::{mix, Failures};

use splitrt::runtime::job::JobInfo;
use splitrt::{EndpointBuilder, Error, Kind, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Long slots per (source, destination): at most this many Longs in flight.
const SLOTS: usize = 4;
const SLOT_BYTES: usize = 16 << 10;

fn bytes_for(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (mix(seed ^ (i as u64 / 8)) >> ((i % 8) * 8)) as u8)
        .collect()
}

fn seed(src: usize, dst: usize, seq: u64) -> u64 {
    mix((src as u64) << 48 ^ (dst as u64) << 32 ^ seq)
}

struct State {
    rank: usize,
    replies: AtomicU64,
    long_done: Vec<AtomicU64>,
    handled: AtomicU64,
    failures: Failures,
}

impl State {
    fn fail(&self, e: String) {
        self.failures.fail(e);
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_stress: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let mut a = std::env::args().skip(1);
    let msgs: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let threads: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let job = JobInfo::from_env()?;
    let size = job.size;
    let st = Arc::new(State {
        rank: job.rank,
        replies: AtomicU64::new(0),
        long_done: (0..size).map(|_| AtomicU64::new(0)).collect(),
        handled: AtomicU64::new(0),
        failures: Failures::default(),
    });

    let mut b = EndpointBuilder::new();
    let s = st.clone();
    let ack = b.reply("ack", Kind::Short, 1, move |m| {
        if m.arg(0) != mix(m.src() as u64 ^ s.rank as u64) {
            s.fail(format!("bad ack from {}", m.src()));
        }
        s.replies.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    let long_ack = b.reply("long_ack", Kind::Short, 0, move |m| {
        s.long_done[m.src()].fetch_add(1, Ordering::Release);
        s.replies.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    let echo = b.reply("echo", Kind::Medium, 2, move |m| {
        // the peer echoes our request payload
        let sd = seed(s.rank, m.src(), m.arg(0));
        if m.payload() != bytes_for(sd, m.arg(1) as usize).as_slice() {
            s.fail(format!("echo from {} seq {} differs", m.src(), m.arg(0)));
        }
        s.replies.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    let short = b.request("short", Kind::Short, 3, move |tok, m| {
        let sd = seed(m.src(), s.rank, m.arg(0));
        if m.arg(1) != sd || m.arg(2) != !sd {
            s.fail(format!("short from {} seq {}: bad args", m.src(), m.arg(0)));
        }
        s.handled.fetch_add(1, Ordering::Relaxed);
        let v = mix(s.rank as u64 ^ m.src() as u64);
        tok.reply(ack, &[v], Payload::None).expect("reply");
    })?;
    let s = st.clone();
    let medium = b.request("medium", Kind::Medium, 2, move |tok, m| {
        let (seq, len) = (m.arg(0), m.arg(1) as usize);
        let sd = seed(m.src(), s.rank, seq);
        if m.payload() != bytes_for(sd, len).as_slice() {
            s.fail(format!(
                "medium from {} seq {seq}: payload differs",
                m.src()
            ));
        }
        s.handled.fetch_add(1, Ordering::Relaxed);
        tok.reply(echo, &[seq, len as u64], Payload::Medium(m.payload()))
            .expect("reply");
    })?;
    let s = st.clone();
    let long = b.request("long", Kind::Long, 2, move |tok, m| {
        let (seq, len) = (m.arg(0), m.arg(1) as usize);
        let sd = seed(m.src(), s.rank, seq);
        let got = m.long_payload().map(|v| v.to_vec()).unwrap_or_default();
        if got != bytes_for(sd, len) {
            s.fail(format!("long from {} seq {seq}: payload differs", m.src()));
        }
        s.handled.fetch_add(1, Ordering::Relaxed);
        tok.reply(long_ack, &[], Payload::None).expect("reply");
    })?;
    let ep = b.attach()?;
    let rank = ep.rank();
    if ep.segment_len() < 2 * size * SLOTS * SLOT_BYTES {
        return Err(Error::usage("segment too small for the Long slots"));
    }
    let max_medium = ep.max_medium(rank)?;
    let backpressure = AtomicU64::new(0);
    let sent_total = AtomicU64::new(0);

    std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for t in 0..threads {
            let (ep, st, bp, sent_total) = (ep.clone(), st.clone(), &backpressure, &sent_total);
            hs.push(sc.spawn(move || -> splitrt::Result<()> {
                let mut longs_sent = vec![0u64; size];
                for i in 0..msgs {
                    for d in 0..size {
                        let dst = (rank + d) % size;
                        let seq = (t as u64) << 40 | i;
                        let sd = seed(rank, dst, seq);
                        let r = mix(sd ^ 0x5555);
                        // only thread 0 sends Longs: it owns the slots
                        let kind = match r % 10 {
                            0..=3 => 0,
                            4..=8 => 1,
                            _ if t == 0 => 2,
                            _ => 1,
                        };
                        let sent = |r: splitrt::am::Sent| {
                            if r.is_err() {
                                bp.fetch_add(1, Ordering::Relaxed);
                            }
                            r.is_ok()
                        };
                        let args3 = [seq, sd, !sd];
                        let try_first = r & 0x100 != 0;
                        match kind {
                            0 => {
                                if !(try_first
                                    && sent(ep.try_request(dst, short, &args3, Payload::None)?))
                                {
                                    ep.request(dst, short, &args3, Payload::None)?;
                                }
                            }
                            1 => {
                                let len = match r >> 16 & 3 {
                                    0 => (r >> 20) as usize % 64,
                                    1 => (r >> 20) as usize % 1024,
                                    2 => (r >> 20) as usize % 8192,
                                    _ => (r >> 20) as usize % (max_medium + 1),
                                };
                                let data = bytes_for(sd, len);
                                let p = Payload::Medium(&data);
                                if !(try_first
                                    && sent(ep.try_request(dst, medium, &[seq, len as u64], p)?))
                                {
                                    ep.request(dst, medium, &[seq, len as u64], p)?;
                                }
                            }
                            _ => {
                                // wait for a free slot at dst
                                let n = longs_sent[dst];
                                let st2 = &st;
                                ep.wait_until(|| {
                                    n - st2.long_done[dst].load(Ordering::Acquire) < SLOTS as u64
                                })?;
                                let slot = n as usize % SLOTS;
                                let off = ((rank * SLOTS + slot) * SLOT_BYTES) as u64;
                                let len = (r >> 20) as usize % (SLOT_BYTES + 1);
                                let data = bytes_for(sd, len);
                                let p = Payload::Long {
                                    data: &data,
                                    offset: off,
                                };
                                ep.request(dst, long, &[seq, len as u64], p)?;
                                longs_sent[dst] += 1;
                            }
                        }
                        sent_total.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        hs.into_iter()
            .try_for_each(|h| h.join().expect("sender thread panicked"))
    })?;
    let total = sent_total.load(Ordering::Relaxed);
    ep.wait_until(|| st.replies.load(Ordering::Acquire) == total)?;
    ep.barrier()?;
    st.failures.report(rank, "stress")?;
    println!(
        "stress ok: {total} requests sent and answered, {} handled here, {} back-pressure refusals",
        st.handled.load(Ordering::Relaxed),
        backpressure.load(Ordering::Relaxed)
    );
    ep.finish()
}
