//! An all-to-all of many ranks over the seeded virtual network (a test
//! double, cargo feature `test-doubles`): every rank sends `messages`
//! requests to every other rank and answers each request it gets with a
//! reply, the way an Active Messages exchange does. The general simulator
//! ([`super::sim::run`]) gives every rank a segment region and both
//! streams' traffic toward every peer, which grows with the square of the
//! ranks; this one keeps per rank only what the check needs (the next
//! message number expected per peer and stream), so 1,024 ranks fit in
//! one process (docs/scale.md).
//!
//! Rank `r` contacts its peers in the pairwise-exchange order `r + 1, r +
//! 2, ...` (modulo the ranks), starting at most `burst` new peers per step
//! of `latency`, as an MPI all-to-all of many ranks does. Only ranks with
//! something to do in a step are visited.
//!
//! ```
//! use splitrt_runtime::fabric::udp::sim_alltoall::{run_alltoall, AllToAllConfig};
//! let r = run_alltoall(&AllToAllConfig { ranks: 16, ..AllToAllConfig::default() }).unwrap();
//! assert_eq!(r.requests, 16 * 15);
//! assert_eq!(r.replies, 16 * 15);
//! ```

use super::proto::{Event, Proto, ProtoConfig, Sent, Stats};
use super::wire::{HEADER, TAG};
use crate::fabric::frames::{OutMsg, Reassembler};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// One all-to-all's parameters.
#[derive(Clone, Debug)]
pub struct AllToAllConfig {
    /// Seed of every random choice (the key, the losses).
    pub seed: u64,
    /// Ranks.
    pub ranks: usize,
    /// Requests per (sender, receiver); each is answered by a reply.
    pub messages: usize,
    /// New peers a rank starts sending to per step, at most.
    pub burst: usize,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// One-way latency (ns); also the step of the clock while busy.
    pub latency: u64,
    /// Protocol tunables.
    pub proto: ProtoConfig,
    /// Give up (an error) past this virtual time (ns).
    pub limit: u64,
}

impl Default for AllToAllConfig {
    fn default() -> Self {
        AllToAllConfig {
            seed: 1,
            ranks: 64,
            messages: 1,
            burst: 32,
            loss: 0.0,
            latency: 20_000,
            proto: ProtoConfig {
                mtu: 9000,
                window: 32,
                ..ProtoConfig::default()
            },
            limit: 60_000_000_000,
        }
    }
}

/// What an all-to-all did.
#[derive(Clone, Debug, Default)]
pub struct AllToAllReport {
    /// Requests delivered (and checked): `ranks * (ranks - 1) * messages`.
    pub requests: u64,
    /// Replies delivered (and checked), as many.
    pub replies: u64,
    /// Virtual time when every rank had quiesced (ns).
    pub time: u64,
    /// Datagrams the network carried (lost ones included).
    pub datagrams: u64,
    /// Datagrams the network lost.
    pub lost: u64,
    /// Most datagrams in the network at once.
    pub peak_in_flight: usize,
    /// Sum of every rank's protocol counters.
    pub stats: Stats,
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: u64,
    n: u64,
    dst: u32,
    bytes: Vec<u8>,
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.n).cmp(&(self.at, self.n))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Words and payload of request `k` from `src` to `dst` (reply: `st` 1).
fn message(src: u32, dst: u32, st: u32, k: u32) -> ([u64; 3], Vec<u8>) {
    let mut h = ((src as u64) << 40) ^ ((dst as u64) << 16) ^ ((st as u64) << 63) ^ k as u64;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^= h >> 33;
    let len = (h % 48) as usize;
    let payload = (0..len).map(|i| (h as usize + i * 31) as u8).collect();
    ([k as u64, src as u64, h], payload)
}

struct Rank {
    proto: Proto,
    /// Peers started so far (pairwise-exchange order).
    started: usize,
    /// Requests not yet taken: (peer, message number, payload offset).
    out: VecDeque<(u32, u32, usize)>,
    /// Replies owed: (peer, message number, payload offset).
    owed: VecDeque<(u32, u32, usize)>,
    /// Next message number expected per peer and stream.
    next_in: [Vec<u32>; 2],
    /// Half-received messages per stream and peer (rare: a message cut
    /// across two datagrams).
    reasm: [HashMap<u32, Reassembler>; 2],
}

/// Run one all-to-all; `Err` names the seed and what went wrong.
pub fn run_alltoall(cfg: &AllToAllConfig) -> Result<AllToAllReport, String> {
    let fail = |what: String| Err(format!("seed {}: {what}", cfg.seed));
    let n = cfg.ranks;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let key: [u8; 32] = rng.gen();
    let mut ranks: Vec<Rank> = (0..n)
        .map(|r| Rank {
            proto: Proto::new(r as u32, n as u32, cfg.proto, key, 0),
            started: 0,
            out: VecDeque::new(),
            owed: VecDeque::new(),
            next_in: [vec![0; n], vec![0; n]],
            reasm: [HashMap::new(), HashMap::new()],
        })
        .collect();
    let want = (n * n.saturating_sub(1) * cfg.messages) as u64;
    let mut report = AllToAllReport::default();
    let mut net: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut counter = 0u64;
    let mut now = 0u64;
    let step = cfg.latency.max(1_000);
    let mut woken = vec![true; n];
    let mut outbox: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut seg: Vec<u8> = Vec::new();
    loop {
        if report.requests == want
            && report.replies == want
            && ranks.iter().all(|x| x.proto.quiesced())
        {
            break;
        }
        if now > cfg.limit {
            return fail(format!(
                "not done by virtual time {} ms: {} requests and {} replies of {want}",
                now / 1_000_000,
                report.requests,
                report.replies
            ));
        }
        while net.peek().is_some_and(|f| f.at <= now) {
            let f = net.pop().expect("peeked");
            let proto = &mut ranks[f.dst as usize].proto;
            if let Some(b) = proto.handle_datagram(now, f.bytes) {
                proto.recycle(b);
            }
            woken[f.dst as usize] = true;
        }
        let mut pending = false;
        for r in 0..n {
            let x = &mut ranks[r];
            let due = x.proto.poll_timeout() <= now;
            let sending = x.started + 1 < n || !x.out.is_empty() || !x.owed.is_empty();
            if !(woken[r] || due || sending) {
                continue;
            }
            woken[r] = false;
            if due {
                x.proto.handle_timeout(now);
            }
            if let Some(Event::PeerDead { peer, .. }) = x.proto.poll_event() {
                return fail(format!("rank {r} declared rank {peer} dead"));
            }
            // hand up what arrived: check it; a request is owed a reply
            for st in 0..2 {
                while let Some((src, d)) = x.proto.next_ready(st) {
                    let body = &d[HEADER..d.len() - TAG];
                    let mut ra = x.reasm[st].remove(&src).unwrap_or_default();
                    let next = &mut x.next_in[st][src as usize];
                    let mut bad = None;
                    let mut got = Vec::new();
                    let res = ra.feed(src as usize, body, 1 << 16, &mut seg, &mut |m| {
                        let (words, payload) = message(src, r as u32, st as u32, *next);
                        if m.words != words || m.payload != &payload[..] {
                            bad.get_or_insert(format!(
                                "rank {r} stream {st}: message {} from rank {src} arrived wrong",
                                *next
                            ));
                        }
                        got.push(*next);
                        *next += 1;
                    });
                    x.proto.recycle(d);
                    if let Err(e) = res {
                        return fail(format!("rank {r}: malformed frames from {src}: {e}"));
                    }
                    if let Some(b) = bad {
                        return fail(b);
                    }
                    if ra.in_progress() {
                        x.reasm[st].insert(src, ra);
                    }
                    if st == 0 {
                        report.requests += got.len() as u64;
                        x.owed.extend(got.iter().map(|&k| (src, k, 0)));
                    } else {
                        report.replies += got.len() as u64;
                    }
                }
            }
            // replies first, then requests to the peers started so far,
            // then up to `burst` new peers
            let mut fresh = 0;
            for st in [1usize, 0] {
                loop {
                    if st == 0 && x.out.is_empty() && x.started + 1 < n && fresh < cfg.burst {
                        x.started += 1;
                        fresh += 1;
                        let dst = ((r + x.started) % n) as u32;
                        x.out.extend((0..cfg.messages as u32).map(|k| (dst, k, 0)));
                    }
                    let q = if st == 0 { &mut x.out } else { &mut x.owed };
                    let Some(&(dst, k, from)) = q.front() else {
                        break;
                    };
                    let (words, payload) = message(r as u32, dst, st as u32, k);
                    let m = OutMsg {
                        tag: st as u16,
                        words: &words,
                        payload: &payload,
                        deposit: None,
                    };
                    match x.proto.send(now, dst, st, &m, from) {
                        Sent::Upto(e) if e == payload.len() => {
                            q.pop_front();
                        }
                        Sent::Upto(e) => {
                            q[0].2 = e;
                            break;
                        }
                        Sent::NoRoom => break,
                        Sent::Dead => return fail(format!("rank {r}: rank {dst} dead")),
                    }
                }
            }
            pending |= x.started + 1 < n || !x.out.is_empty() || !x.owed.is_empty();
            x.proto
                .poll_transmit(now, true, &mut |p, b| outbox.push((p, b.to_vec())));
            for (dst, bytes) in outbox.drain(..) {
                report.datagrams += 1;
                if cfg.loss > 0.0 && rng.gen_bool(cfg.loss) {
                    report.lost += 1;
                    continue;
                }
                counter += 1;
                net.push(InFlight {
                    at: now + cfg.latency,
                    n: counter,
                    dst,
                    bytes,
                });
            }
        }
        report.peak_in_flight = report.peak_in_flight.max(net.len());
        // one step while ranks have sends waiting, else to the next event
        let mut next = now + step;
        if !pending {
            let mut t = net.peek().map_or(u64::MAX, |f| f.at);
            for x in &ranks {
                t = t.min(x.proto.poll_timeout());
            }
            next = t.max(now + 1);
        }
        now = next;
    }
    report.time = now;
    for x in &ranks {
        let s = x.proto.stats();
        let t = &mut report.stats;
        t.sent += s.sent;
        t.retransmits += s.retransmits;
        t.controls += s.controls;
        t.timeouts += s.timeouts;
        t.fast_retransmits += s.fast_retransmits;
        t.received += s.received;
        t.duplicates += s.duplicates;
        t.beyond_window += s.beyond_window;
        t.out_of_order += s.out_of_order;
    }
    Ok(report)
}
