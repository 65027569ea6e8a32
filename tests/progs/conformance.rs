//! AM conformance in the spirit of GASNet's testcore4: for every argument
//! count 0..=16 and each of Short/Medium/Long, a request and its reply, with
//! random arguments and random payload sizes up to the maximum, to every
//! rank including itself. Every argument, payload byte, size, Long offset
//! and source rank is checked. Misuse (wrong argument count or kind, too
//! large, out of segment, sending from a handler, bad rank) must be refused
//! at the sender.
//!
//! Usage: t_conformance [ROUNDS]   (exit 0 = all checks passed)

#![allow(dead_code)] // `main` is unused where a test includes this file

#[path = "checks.rs"]
mod checks;
use checks::{mix, Failures};

use splitrt::runtime::job::JobInfo;
use splitrt::{Endpoint, EndpointBuilder, ErrorKind, Kind, Payload, ReplyHandler, MAX_ARGS};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const KINDS: [Kind; 3] = [Kind::Short, Kind::Medium, Kind::Long];
const NH: usize = 3 * (MAX_ARGS + 1);

fn seed(src: usize, dst: usize, h: usize, count: u64, reply: bool) -> u64 {
    mix(mix(mix(src as u64 ^ (dst as u64) << 20) ^ h as u64) ^ count.wrapping_mul(2) ^ reply as u64)
}

fn args_for(seed: u64, n: usize) -> Vec<u64> {
    (0..n).map(|i| mix(seed ^ (i as u64 + 1) << 40)).collect()
}

fn bytes_for(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut s = seed | 1;
    while v.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Payload size for a seed: often 0 or the maximum, otherwise uniform.
fn size_for(seed: u64, max: usize) -> usize {
    match seed % 8 {
        0 => max,
        1 => 0,
        _ => (mix(seed) % (max as u64 + 1)) as usize,
    }
}

struct State {
    rank: usize,
    size: usize,
    max_medium: AtomicUsize,
    region: usize,
    req_seen: Vec<AtomicU64>,
    rep_seen: Vec<AtomicU64>,
    replies: AtomicU64,
    checked_bytes: AtomicU64,
    failures: Failures,
    nested: Mutex<Option<String>>,
}

impl State {
    fn fail(&self, e: String) {
        self.failures.fail(e);
    }

    /// Check one message against what (src, dst, handler, count) implies.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        what: &str,
        m: &splitrt::Incoming<'_>,
        src: usize,
        dst: usize,
        h: usize,
        count: u64,
        reply: bool,
        long_base: u64,
    ) {
        let kind = KINDS[h / (MAX_ARGS + 1)];
        let n = h % (MAX_ARGS + 1);
        let s = seed(src, dst, h, count, reply);
        if m.src() != src {
            self.fail(format!("{what}: source {} expected {src}", m.src()));
        }
        if m.args() != args_for(s, n).as_slice() {
            self.fail(format!("{what} #{count} from {src}: arguments differ"));
        }
        let max = match kind {
            Kind::Short => 0,
            Kind::Medium => self.max_medium.load(Ordering::Relaxed),
            Kind::Long => self.region,
        };
        let len = size_for(s, max);
        // a Long's bytes are read through a view, Short and Medium in place
        let got = match m.long_payload() {
            Some(v) => v.to_vec(),
            None => m.payload().to_vec(),
        };
        if m.payload_len() != len || got.len() != len {
            self.fail(format!(
                "{what} #{count} from {src}: {} payload bytes, expected {len}",
                m.payload_len()
            ));
        } else if got != bytes_for(s, len) {
            self.fail(format!("{what} #{count} from {src}: payload bytes differ"));
        }
        let want_off = (kind == Kind::Long).then_some(long_base);
        if m.long_offset() != want_off {
            self.fail(format!(
                "{what}: long offset {:?} expected {want_off:?}",
                m.long_offset()
            ));
        }
        self.checked_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    fn req_region(&self, src: usize) -> u64 {
        (src * self.region) as u64
    }
    fn rep_region(&self, src: usize) -> u64 {
        ((self.size + src) * self.region) as u64
    }
}

fn payload_for<'a>(kind: Kind, data: &'a [u8], offset: u64) -> Payload<'a> {
    match kind {
        Kind::Short => Payload::None,
        Kind::Medium => Payload::Medium(data),
        Kind::Long => Payload::Long { data, offset },
    }
}

fn expect_err(what: &str, r: splitrt::Result<()>, needle: &str, st: &State) {
    match r {
        Err(e) if e.to_string().contains(needle) => {}
        Err(e) => st.fail(format!("{what}: wrong error: {e}")),
        Ok(()) => st.fail(format!("{what}: was accepted")),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_conformance: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let job = JobInfo::from_env()?;
    let seg = splitrt::runtime::config::Config::from_env()?.segment_size;
    run_on(rounds, &job, seg, EndpointBuilder::attach)
}

/// The sweep for rank `job.rank` with segments of `seg` bytes, joining
/// through `attach` (`tests/verbs_model.rs` attaches over the verbs model).
pub fn run_on(
    rounds: u64,
    job: &JobInfo,
    seg: usize,
    attach: impl FnOnce(EndpointBuilder) -> splitrt::Result<Endpoint>,
) -> splitrt::Result<()> {
    let st = Arc::new(State {
        rank: job.rank,
        size: job.size,
        max_medium: AtomicUsize::new(0),
        // requests from each source, then replies from each source
        region: seg / (2 * job.size),
        req_seen: (0..job.size * NH).map(|_| AtomicU64::new(0)).collect(),
        rep_seen: (0..job.size * NH).map(|_| AtomicU64::new(0)).collect(),
        replies: AtomicU64::new(0),
        checked_bytes: AtomicU64::new(0),
        failures: Failures::default(),
        nested: Mutex::new(None),
    });

    let mut b = EndpointBuilder::new();
    let mut reps: Vec<ReplyHandler> = Vec::new();
    for (ki, &kind) in KINDS.iter().enumerate() {
        for n in 0..=MAX_ARGS {
            let h = ki * (MAX_ARGS + 1) + n;
            let st = st.clone();
            reps.push(b.reply(&format!("rep_{kind:?}_{n}"), kind, n, move |m| {
                let c = st.rep_seen[m.src() * NH + h].fetch_add(1, Ordering::Relaxed);
                st.check(
                    "reply",
                    m,
                    m.src(),
                    st.rank,
                    h,
                    c,
                    true,
                    st.rep_region(m.src()),
                );
                st.replies.fetch_add(1, Ordering::Release);
            })?);
        }
    }
    let mut reqs = Vec::new();
    for (ki, &kind) in KINDS.iter().enumerate() {
        for n in 0..=MAX_ARGS {
            let h = ki * (MAX_ARGS + 1) + n;
            let st = st.clone();
            let rep = reps[h];
            reqs.push(
                b.request(&format!("req_{kind:?}_{n}"), kind, n, move |tok, m| {
                    let src = m.src();
                    let c = st.req_seen[src * NH + h].fetch_add(1, Ordering::Relaxed);
                    st.check("request", m, src, st.rank, h, c, false, st.req_region(src));
                    // answer with the same kind and argument count
                    let s = seed(st.rank, src, h, c, true);
                    let max = match kind {
                        Kind::Short => 0,
                        Kind::Medium => st.max_medium.load(Ordering::Relaxed),
                        Kind::Long => st.region,
                    };
                    let data = bytes_for(s, size_for(s, max));
                    let off = st.rep_region(st.rank);
                    if let Err(e) = tok.reply(rep, &args_for(s, n), payload_for(kind, &data, off)) {
                        st.fail(format!("reply failed: {e}"));
                    }
                })?,
            );
        }
    }
    let ep_cell: Arc<OnceLock<Endpoint>> = Arc::new(OnceLock::new());
    let (cell, st2, first) = (ep_cell.clone(), st.clone(), reqs[0]);
    let nested = b.request("nested", Kind::Short, 0, move |_tok, m| {
        let ep = cell.get().expect("endpoint set");
        let r = ep.request(m.src(), first, &[], Payload::None);
        *st2.nested.lock().unwrap() = Some(match r {
            Err(e) => e.to_string(),
            Ok(()) => "accepted".into(),
        });
    })?;

    let ep = attach(b)?;
    let _ = ep_cell.set(ep.clone());
    let (rank, size) = (ep.rank(), ep.size());
    st.max_medium.store(ep.max_medium(rank)?, Ordering::Relaxed);
    if ep.max_medium(rank)? < 512 || ep.max_long(rank)? < 512 {
        st.fail("maximum payloads below 512 B".into());
    }

    // Misuse is refused at the sender, with the cause in the message.
    let peer = (rank + 1) % size;
    let (short2, med0, long0) = (reqs[2], reqs[MAX_ARGS + 1], reqs[2 * (MAX_ARGS + 1)]);
    expect_err(
        "wrong arg count",
        ep.request(peer, short2, &[1], Payload::None),
        "takes 2 argument words",
        &st,
    );
    expect_err(
        "wrong kind",
        ep.request(peer, short2, &[1, 2], Payload::Medium(b"x")),
        "is a Short handler",
        &st,
    );
    let big = vec![0u8; ep.max_medium(peer)? + 1];
    expect_err(
        "medium too big",
        ep.request(peer, med0, &[], Payload::Medium(&big)),
        "exceeds the Medium maximum",
        &st,
    );
    let end = ep.max_long(peer)? as u64;
    for off in [end - 4, end, u64::MAX - 2] {
        let r = ep.request(
            peer,
            long0,
            &[],
            Payload::Long {
                data: &[1; 8],
                offset: off,
            },
        );
        match r {
            Err(e)
                if matches!(e.kind(), ErrorKind::OutOfBounds { .. }) && e.peer() == Some(peer) => {}
            other => st.fail(format!("long at {off:#x} beyond the segment: {other:?}")),
        }
    }
    expect_err(
        "bad rank",
        ep.request(size, short2, &[1, 2], Payload::None),
        "does not exist",
        &st,
    );
    ep.request(rank, nested, &[], Payload::None)?;
    ep.wait_until(|| st.nested.lock().unwrap().is_some())?;
    let n = st.nested.lock().unwrap().clone().unwrap();
    if !n.contains("inside a handler") {
        st.fail(format!("request from a handler: {n}"));
    }
    ep.barrier()?;

    // The conformance sweep: one request at a time, all ranks at once.
    let mut sent = vec![0u64; size * NH];
    let mut expected_replies = 0u64;
    for _ in 0..rounds {
        for d in 0..size {
            let dst = (rank + d) % size;
            for (h, &req) in reqs.iter().enumerate() {
                let kind = KINDS[h / (MAX_ARGS + 1)];
                let n = h % (MAX_ARGS + 1);
                let c = sent[dst * NH + h];
                sent[dst * NH + h] += 1;
                let s = seed(rank, dst, h, c, false);
                let max = match kind {
                    Kind::Short => 0,
                    Kind::Medium => ep.max_medium(dst)?,
                    Kind::Long => st.region,
                };
                let data = bytes_for(s, size_for(s, max));
                let off = st.req_region(rank);
                ep.request(dst, req, &args_for(s, n), payload_for(kind, &data, off))?;
                expected_replies += 1;
                ep.wait_until(|| st.replies.load(Ordering::Acquire) == expected_replies)?;
            }
        }
    }
    ep.barrier()?;
    st.failures.report(rank, "conformance")?;
    println!(
        "conformance ok: {expected_replies} round trips, {} payload bytes checked",
        st.checked_bytes.load(Ordering::Relaxed)
    );
    if let Some(s) = ep.udp_stats() {
        println!(
            "udp: {} datagrams sent, {} retransmitted, {} foreign or corrupt dropped, \
             {} rejected before the full tag, {} replays dropped, {} dropped by the kernel",
            s.sent, s.retransmits, s.bad_tag, s.early_rejects, s.replays, s.kernel_drops
        );
    }
    ep.finish()
}
