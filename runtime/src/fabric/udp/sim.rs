//! A test double of the network: many ranks' [`Proto`] state machines in
//! one process over a virtual clock and a lossy virtual network (loss,
//! duplication, reordering, delay, corruption, partitions that heal, a
//! rank that stops). Everything is drawn from one seed, so any failure is
//! reproduced by running the same [`SimConfig`] again.
//!
//! Every rank sends numbered messages of every shape (Short, Medium in one
//! frame or across datagrams, Long deposits) to every rank on both
//! streams; receivers check that each arrives exactly once, in order, with
//! the right words and bytes.
//!
//! A [`Bottleneck`] (a link of a given rate in bytes per second of
//! simulated time with a finite drop-tail queue) may sit in front of one
//! rank, shared by every flow toward it: [`run_incast`] drives N senders
//! of large messages into one receiver through it (incast), for the
//! congestion controller's tests.
//!
//! ```
//! use splitrt_runtime::fabric::udp::sim::{run, SimConfig};
//! let r = run(&SimConfig { seed: 7, ranks: 3, messages: 300, loss: 0.05, ..SimConfig::default() })
//!     .unwrap();
//! assert_eq!(r.delivered, 3 * 3 * 2 * 300);
//! ```

use super::proto::{Event, Proto, ProtoConfig, Sent, Stats};
use super::wire::{HEADER, TAG};
use crate::fabric::frames::{OutMsg, Reassembler, Sink};
use crate::fabric::Deposit;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::{BinaryHeap, VecDeque};

/// A bottleneck link: a rate and a drop-tail queue in front of it, shared
/// by every datagram that crosses it (in the order they reach it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bottleneck {
    /// Bytes per second of simulated time.
    pub rate: u64,
    /// Bytes the queue holds (datagrams waiting or being sent); a datagram
    /// that does not fit is dropped.
    pub queue: u64,
    /// The rank whose incoming link this is (`None`: every datagram
    /// crosses it).
    pub into: Option<usize>,
}

/// A bottleneck's state: when each queued datagram finishes leaving.
struct Link {
    cfg: Bottleneck,
    /// (departure time, bytes) in order.
    queued: VecDeque<(u64, u64)>,
    bytes: u64,
    free_at: u64,
    /// Datagrams the full queue dropped.
    drops: u64,
    /// Most bytes queued at once.
    peak: u64,
}

impl Link {
    fn new(cfg: Bottleneck) -> Link {
        Link {
            cfg,
            queued: VecDeque::new(),
            bytes: 0,
            free_at: 0,
            drops: 0,
            peak: 0,
        }
    }

    fn crosses(&self, dst: usize) -> bool {
        self.cfg.into.is_none_or(|r| r == dst)
    }

    /// A datagram of `len` bytes reaches the link at `now`: when it has
    /// left it, or `None` if the queue is full (dropped).
    fn enqueue(&mut self, now: u64, len: usize) -> Option<u64> {
        while self.queued.front().is_some_and(|&(t, _)| t <= now) {
            let (_, b) = self.queued.pop_front().expect("front");
            self.bytes -= b;
        }
        let len = len as u64;
        if self.bytes + len > self.cfg.queue {
            self.drops += 1;
            return None;
        }
        let start = self.free_at.max(now);
        self.free_at = start + (len as u128 * 1_000_000_000 / self.cfg.rate.max(1) as u128) as u64;
        self.queued.push_back((self.free_at, len));
        self.bytes += len;
        self.peak = self.peak.max(self.bytes);
        Some(self.free_at)
    }
}

/// One simulation's parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Ranks.
    pub ranks: usize,
    /// Messages per (sender, receiver, stream).
    pub messages: usize,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub dup: f64,
    /// Probability a datagram is delayed by up to `jitter` more.
    pub reorder: f64,
    /// Probability a datagram has one byte flipped.
    pub corrupt: f64,
    /// Base one-way latency (ns).
    pub latency: u64,
    /// Extra delay of a reordered datagram, at most (ns).
    pub jitter: u64,
    /// Cut the ranks in two halves from `.0` for `.1` ns.
    pub partition: Option<(u64, u64)>,
    /// Probability per step that a receiver stops polling for a while
    /// (its windows close, senders must wait).
    pub pause: f64,
    /// Rank that stops for good at this time (its peers must declare it
    /// dead instead of delivering).
    pub crash: Option<(usize, u64)>,
    /// An on-path attacker: it records every datagram the `crash` rank
    /// sends and, from the crash on, replays the recording (in order, over
    /// and over, each to its original addressee) at this many datagrams
    /// per second (0: no attacker).
    pub replay_rate: u64,
    /// A bottleneck link with a finite queue (`None`: unlimited rate).
    pub bottleneck: Option<Bottleneck>,
    /// Protocol tunables.
    pub proto: ProtoConfig,
    /// Give up (an error) past this virtual time (ns).
    pub limit: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            ranks: 4,
            messages: 1000,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            latency: 20_000,
            jitter: 100_000,
            partition: None,
            pause: 0.0,
            crash: None,
            replay_rate: 0,
            bottleneck: None,
            proto: ProtoConfig {
                mtu: 9000,
                window: 32,
                ..ProtoConfig::default()
            },
            limit: 600_000_000_000,
        }
    }
}

/// What a simulation did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Messages delivered (and checked).
    pub delivered: u64,
    /// Virtual time at the end (ns).
    pub time: u64,
    /// Sum of every rank's protocol counters.
    pub stats: Stats,
    /// Datagrams the network dropped, corrupted, duplicated.
    pub lost: u64,
    /// Corrupted by the network.
    pub corrupted: u64,
    /// Duplicated by the network.
    pub duplicated: u64,
    /// After a partition healed: virtual time until the first message
    /// crossed between the halves again (ns).
    pub resumed_after_heal: Option<u64>,
    /// Peers declared dead: (by rank, dead rank).
    pub dead: Vec<(u32, u32)>,
    /// Virtual time of each declaration in `dead` (ns).
    pub dead_at: Vec<u64>,
    /// Datagrams the attacker replayed (`replay_rate`).
    pub replayed: u64,
    /// Datagrams the bottleneck's full queue dropped (also in `lost`).
    pub queue_drops: u64,
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: u64,
    n: u64,
    dst: usize,
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

/// Segment region (per sender and stream) that Long messages land in.
const REGION: usize = 32 << 10;
const MAX_MEDIUM: usize = 24 << 10;

struct Node {
    proto: Proto,
    reasm: Vec<[Reassembler; 2]>,
    seg: Vec<u8>,
    /// Next message number to send, per (dst, stream), and the payload
    /// offset reached in it.
    next_out: Vec<[(usize, usize); 2]>,
    /// Next message number expected, per (src, stream).
    next_in: Vec<[usize; 2]>,
    paused_until: u64,
    crashed: bool,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
    x ^ (x >> 33)
}

/// The message number `n` from `src` to `dst` on `stream`: its shape and
/// contents follow from these numbers alone.
fn message(src: usize, dst: usize, st: usize, n: usize) -> (u16, Vec<u64>, Vec<u8>, Option<u64>) {
    let h = mix(((src as u64) << 48) ^ ((dst as u64) << 32) ^ ((st as u64) << 31) ^ n as u64);
    let nwords = (h % 5) as usize;
    let mut words = vec![n as u64, src as u64];
    words.extend((0..nwords).map(|i| h.rotate_left(i as u32 * 7)));
    // mostly small (the count is what matters); now and then a Medium
    // or a Long that spans many datagrams
    let shape = (h >> 8) % 256;
    let size = (h >> 16) as usize;
    let (len, long) = match shape {
        0..=191 => (0, false),
        192..=243 => (size % 300, false),
        244..=253 => (size % 600, true),
        254 => (size % MAX_MEDIUM, false),
        _ => (size % REGION, true),
    };
    let payload: Vec<u8> = (0..len).map(|i| (h as usize + i * 31) as u8).collect();
    let deposit = long.then(|| ((src * 2 + st) * REGION) as u64);
    ((h >> 40) as u16, words, payload, deposit)
}

/// A node's segment as a deposit sink the delivery callback can read
/// while the reassembler holds the sink (deliveries carry a deposit as a
/// range; the simulator checks the bytes that landed there).
struct SharedSeg<'a>(&'a RefCell<Vec<u8>>);

impl Sink for SharedSeg<'_> {
    fn len(&self) -> usize {
        self.0.borrow().len()
    }
    fn write(&mut self, off: usize, data: &[u8]) -> bool {
        Sink::write(&mut *self.0.borrow_mut(), off, data)
    }
}

/// Run one simulation; `Err` names the seed and what went wrong.
pub fn run(cfg: &SimConfig) -> Result<SimReport, String> {
    let fail = |what: String| Err(format!("seed {}: {what}", cfg.seed));
    let n = cfg.ranks;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let key: [u8; 32] = rng.gen();
    let mut nodes: Vec<Node> = (0..n)
        .map(|r| Node {
            proto: Proto::new(r as u32, n as u32, cfg.proto, key, 0),
            reasm: (0..n).map(|_| Default::default()).collect(),
            seg: vec![0u8; 2 * n * REGION],
            next_out: vec![[(0, 0); 2]; n],
            next_in: vec![[0; 2]; n],
            paused_until: 0,
            crashed: false,
        })
        .collect();
    let mut net: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut report = SimReport::default();
    let mut counter = 0u64;
    let mut now = 0u64;
    let want = (n * n * 2 * cfg.messages) as u64;
    let half = |r: usize| r < n / 2;
    let cut = |t: u64, a: usize, b: usize| {
        cfg.partition
            .is_some_and(|(s, d)| t >= s && t < s + d && half(a) != half(b))
    };
    let healed_at = cfg.partition.map(|(s, d)| s + d);
    let step = cfg.latency.max(1_000);
    let mut outbox: Vec<(u32, Vec<u8>)> = Vec::new();
    // the attacker's recording of the crash rank's datagrams (dst, bytes)
    let mut recorded: Vec<(usize, Vec<u8>)> = Vec::new();
    let replay_every = 1_000_000_000 / cfg.replay_rate.max(1);
    let mut next_replay = cfg.crash.map_or(u64::MAX, |(_, t)| t);
    let mut link = cfg.bottleneck.map(Link::new);
    loop {
        if report.delivered == want && nodes.iter().all(|x| x.crashed || x.proto.quiesced()) {
            break;
        }
        if cfg.crash.is_some() && report.dead.len() >= n - 1 {
            break;
        }
        if now > cfg.limit {
            return fail(format!(
                "not done by virtual time {} s: {} of {want} messages delivered",
                now / 1_000_000_000,
                report.delivered
            ));
        }
        let mut busy = false;
        // the attacker injects its replays
        while cfg.replay_rate > 0 && !recorded.is_empty() && next_replay <= now {
            let (dst, bytes) = &recorded[report.replayed as usize % recorded.len()];
            counter += 1;
            net.push(InFlight {
                at: next_replay + cfg.latency,
                n: counter,
                dst: *dst,
                bytes: bytes.clone(),
            });
            report.replayed += 1;
            next_replay += replay_every;
        }
        // the network hands over what is due
        while net.peek().is_some_and(|f| f.at <= now) {
            let f = net.pop().expect("peeked");
            busy = true;
            let node = &mut nodes[f.dst];
            if node.crashed {
                continue;
            }
            if let Some(b) = node.proto.handle_datagram(now, f.bytes) {
                node.proto.recycle(b);
            }
        }
        for (r, node) in nodes.iter_mut().enumerate() {
            if let Some((c, t)) = cfg.crash {
                if c == r && now >= t {
                    node.crashed = true;
                }
            }
            if node.crashed {
                continue;
            }
            node.proto.handle_timeout(now);
            while let Some(Event::PeerDead { peer, .. }) = node.proto.poll_event() {
                report.dead.push((r as u32, peer));
                report.dead_at.push(now);
            }
            // deliver (unless this rank is pausing)
            if node.paused_until <= now {
                if cfg.pause > 0.0 && rng.gen_bool(cfg.pause) {
                    node.paused_until = now + rng.gen_range(0..2_000_000);
                }
                for st in 0..2 {
                    while let Some((src, d)) = node.proto.next_ready(st) {
                        busy = true;
                        let body = &d[HEADER..d.len() - TAG];
                        let src = src as usize;
                        let mut bad = None;
                        let next_in = &mut node.next_in[src][st];
                        let got = &mut report.delivered;
                        let resumed = &mut report.resumed_after_heal;
                        // a deposit arrives as its range: its bytes are
                        // read back from the segment when it is delivered
                        let seg = RefCell::new(std::mem::take(&mut node.seg));
                        let res = node.reasm[src][st].feed(src, body, MAX_MEDIUM, &mut SharedSeg(&seg), &mut |m| {
                            let (tag, words, payload, deposit) = message(src, r, st, *next_in);
                            let inline = if deposit.is_some() { &[][..] } else { &payload[..] };
                            let range = deposit.map(|offset| Deposit { offset, len: payload.len() });
                            let landed = deposit.is_none_or(|at| {
                                seg.borrow().get(at as usize..at as usize + payload.len()) == Some(&payload[..])
                            });
                            if m.tag != tag || m.words != &words[..] || m.payload != inline || m.deposit != range || !landed {
                                bad.get_or_insert(format!(
                                    "rank {r} stream {st}: message {} from rank {src} arrived wrong \
                                     (got tag {} words {:?} {} B)",
                                    *next_in, m.tag, &m.words[..m.words.len().min(2)], m.payload.len()
                                ));
                            }
                            *next_in += 1;
                            *got += 1;
                            if let Some(h) = healed_at {
                                if now >= h && resumed.is_none() && half(src) != half(r) {
                                    *resumed = Some(now - h);
                                }
                            }
                        });
                        node.seg = seg.into_inner();
                        node.proto.recycle(d);
                        if let Err(e) = res {
                            return fail(format!(
                                "rank {r}: malformed frames from rank {src}: {e}"
                            ));
                        }
                        if let Some(b) = bad {
                            return fail(b);
                        }

                        if node.next_in[src][st] > cfg.messages {
                            return fail(format!(
                                "rank {r}: more messages than sent from rank {src}"
                            ));
                        }
                    }
                }
            }
            // send: a burst per (dst, stream) until no room
            for dst in 0..n {
                for st in 0..2 {
                    for _ in 0..rng.gen_range(1..8) {
                        let (k, from) = node.next_out[dst][st];
                        if k >= cfg.messages {
                            break;
                        }
                        let (tag, words, payload, deposit) = message(r, dst, st, k);
                        let m = OutMsg {
                            tag,
                            words: &words,
                            payload: &payload,
                            deposit,
                        };
                        match node.proto.send(now, dst as u32, st, &m, from) {
                            Sent::Upto(e) if e == payload.len() => {
                                node.next_out[dst][st] = (k + 1, 0);
                                busy = true;
                            }
                            Sent::Upto(e) => {
                                node.next_out[dst][st] = (k, e);
                                busy = true;
                                break;
                            }
                            Sent::NoRoom | Sent::Dead => break,
                        }
                    }
                }
            }
            node.proto
                .poll_transmit(now, true, &mut |p, b| outbox.push((p, b.to_vec())));
            for (dst, mut bytes) in outbox.drain(..) {
                busy = true;
                let dst = dst as usize;
                if cfg.replay_rate > 0 && cfg.crash.is_some_and(|(c, _)| c == r) {
                    recorded.push((dst, bytes.clone()));
                }
                if cut(now, r, dst) || rng.gen_bool(cfg.loss) {
                    report.lost += 1;
                    continue;
                }
                if cfg.corrupt > 0.0 && rng.gen_bool(cfg.corrupt) {
                    let i = rng.gen_range(0..bytes.len());
                    bytes[i] ^= 1 << rng.gen_range(0..8);
                    report.corrupted += 1;
                }
                let mut at = now + cfg.latency;
                if let Some(l) = link.as_mut().filter(|l| l.crosses(dst)) {
                    match l.enqueue(now, bytes.len()) {
                        Some(left) => at = left + cfg.latency,
                        None => {
                            report.lost += 1;
                            report.queue_drops += 1;
                            continue;
                        }
                    }
                }
                if cfg.reorder > 0.0 && rng.gen_bool(cfg.reorder) {
                    at += rng.gen_range(0..=cfg.jitter);
                }
                if cfg.dup > 0.0 && rng.gen_bool(cfg.dup) {
                    report.duplicated += 1;
                    counter += 1;
                    net.push(InFlight {
                        at: at + rng.gen_range(0..=cfg.jitter),
                        n: counter,
                        dst,
                        bytes: bytes.clone(),
                    });
                }
                counter += 1;
                net.push(InFlight {
                    at,
                    n: counter,
                    dst,
                    bytes,
                });
            }
        }
        // advance the clock: one step while busy, else to the next event
        let mut next = now + step;
        if !busy {
            let mut t = net.peek().map_or(u64::MAX, |f| f.at);
            if cfg.replay_rate > 0 && !recorded.is_empty() {
                t = t.min(next_replay);
            }
            for x in nodes.iter().filter(|x| !x.crashed) {
                t = t.min(x.proto.poll_timeout());
                if x.paused_until > now {
                    t = t.min(x.paused_until);
                }
            }
            next = next.max(t);
        }
        now = next;
    }
    report.time = now;
    for x in &nodes {
        let s = x.proto.stats();
        let t = &mut report.stats;
        t.sent += s.sent;
        t.retransmits += s.retransmits;
        t.controls += s.controls;
        t.timeouts += s.timeouts;
        t.fast_retransmits += s.fast_retransmits;
        t.received += s.received;
        t.bad_tag += s.bad_tag;
        t.early_rejects += s.early_rejects;
        t.replays += s.replays;
        t.duplicates += s.duplicates;
        t.beyond_window += s.beyond_window;
        t.out_of_order += s.out_of_order;
        t.cwnd_reductions += s.cwnd_reductions;
        t.paced += s.paced;
        t.spurious_timeouts += s.spurious_timeouts;
    }
    Ok(report)
}

/// An incast: `senders` ranks each send `messages` Long messages of
/// `message_bytes` to one receiver (the last rank), all at once from time
/// 0, through an optional [`Bottleneck`] into the receiver.
#[derive(Clone, Debug)]
pub struct IncastConfig {
    /// Seed of every random choice (the key, the payloads).
    pub seed: u64,
    /// Ranks sending.
    pub senders: usize,
    /// Messages per sender.
    pub messages: usize,
    /// Bytes per message.
    pub message_bytes: usize,
    /// One-way latency, queueing excluded (ns).
    pub latency: u64,
    /// The receiver's incoming link (`into` is set to the receiver).
    pub bottleneck: Option<Bottleneck>,
    /// Protocol tunables.
    pub proto: ProtoConfig,
    /// Give up past this virtual time (ns): the report says what was
    /// delivered by then (`done == false`).
    pub limit: u64,
    /// The receiver is descheduled now and then (a busy host), if set.
    pub stall: Option<Stall>,
    /// Arrival stamps early by up to this much (ns; 0: exact): each
    /// datagram a rank takes outside a stall is handed over as having
    /// arrived a seeded time uniform in `0..=stale_clock` before it did,
    /// as a driver does that reads its clock once per poll, is then
    /// descheduled, and converts the kernel's stamps against that old
    /// reading (an arrival that seems to precede the transmission it
    /// acknowledges).
    pub stale_clock: u64,
}

/// A receiver that does not always run (a host with more runnable threads
/// than cores): it runs for `run` ns, is then off for a seeded time
/// uniform in `0..=off` ns, and so on. Datagrams that arrive while it is
/// off wait in its socket (up to [`SOCKET_BYTES`]) with their arrival time,
/// as a kernel queues them and stamps them on arrival, and are handled
/// when it runs again; it sends nothing meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Time it runs between stalls (ns).
    pub run: u64,
    /// Longest stall (ns).
    pub off: u64,
}

/// The simulated receiver's socket buffer (bytes): datagrams beyond it
/// are dropped, as a full kernel buffer drops them.
pub const SOCKET_BYTES: usize = 16 << 20;

impl Default for IncastConfig {
    fn default() -> Self {
        IncastConfig {
            seed: 1,
            senders: 64,
            messages: 2,
            message_bytes: 1 << 20,
            latency: 20_000,
            bottleneck: Some(Bottleneck {
                rate: 125_000_000,
                queue: 1 << 20,
                into: None,
            }),
            proto: ProtoConfig {
                mtu: 9000,
                ..ProtoConfig::default()
            },
            limit: 60_000_000_000,
            stall: None,
            stale_clock: 0,
        }
    }
}

/// What an incast did.
#[derive(Clone, Debug, Default)]
pub struct IncastReport {
    /// Every message delivered before the limit.
    pub done: bool,
    /// Virtual time the last message was delivered (ns).
    pub time: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Payload bytes per second of virtual time (`bytes / time`).
    pub goodput: f64,
    /// Virtual time each sender's last message was delivered (ns; 0: not).
    pub finished: Vec<u64>,
    /// Bytes each sender had handed up in order (datagram bodies) when
    /// the first sender finished (all still competing up to then).
    pub at_first_finish: Vec<u64>,
    /// The smallest of `at_first_finish` over their mean (1: perfectly
    /// fair; fairness target: at least 0.5).
    pub min_share: f64,
    /// Datagrams the bottleneck's queue dropped.
    pub queue_drops: u64,
    /// Most bytes queued in the bottleneck at once.
    pub peak_queue: u64,
    /// Sum of every rank's protocol counters.
    pub stats: Stats,
    /// Datagrams the stalled receiver's full socket dropped.
    pub socket_drops: u64,
    /// Sender 0's congestion window toward the receiver at the end (bytes).
    pub final_cwnd: u64,
}

/// Run one incast; `Err` names the seed and what arrived wrong.
pub fn run_incast(cfg: &IncastConfig) -> Result<IncastReport, String> {
    let fail = |what: String| Err(format!("seed {}: {what}", cfg.seed));
    let n = cfg.senders + 1;
    let rx_rank = cfg.senders;
    let len = cfg.message_bytes;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let key: [u8; 32] = rng.gen();
    // message (s, k) is `pattern` rotated by rot(s, k)
    let pattern: Vec<u8> = (0..len.max(1)).map(|_| rng.gen()).collect();
    let rot = |s: usize, k: usize| (s * 977 + k * 131) % len.max(1);
    let mut protos: Vec<Proto> = (0..n)
        .map(|r| Proto::new(r as u32, n as u32, cfg.proto, key, 0))
        .collect();
    let mut reasm: Vec<Reassembler> = (0..cfg.senders).map(|_| Default::default()).collect();
    let seg = RefCell::new(vec![0u8; cfg.senders * len]);
    // per sender: (message number, payload offset taken), its payload
    let mut out: Vec<(usize, usize)> = vec![(0, 0); cfg.senders];
    let mut payload: Vec<Vec<u8>> = vec![Vec::new(); cfg.senders];
    let mut next_in = vec![0usize; cfg.senders];
    let mut got = vec![0u64; cfg.senders];
    // payload bytes handed up in order per sender (fairness, per datagram)
    let mut progress = vec![0u64; cfg.senders];
    let mut report = IncastReport {
        finished: vec![0; cfg.senders],
        ..IncastReport::default()
    };
    let mut link = cfg.bottleneck.map(|b| {
        Link::new(Bottleneck {
            into: Some(rx_rank),
            ..b
        })
    });
    let mut net: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut counter = 0u64;
    let mut now = 0u64;
    let mut active = vec![true; n];
    let mut outbox: Vec<(u32, Vec<u8>)> = Vec::new();
    let want = (cfg.senders * cfg.messages) as u64;
    let mut delivered = 0u64;
    // ranks act in a fresh order at each instant: in index order the low
    // ranks would always reach the bottleneck's queue first and the high
    // ones find it full (a bias no real network has)
    let mut order: Vec<usize> = (0..n).collect();
    // the receiver's stalls: their own draws, so runs without any keep
    // the same choices as before
    let mut stall_rng = SmallRng::seed_from_u64(cfg.seed ^ 0x5741_11ed);
    let mut stalled_until = 0u64;
    let mut next_stall = cfg.stall.map_or(u64::MAX, |s| s.run);
    // what arrived for the receiver while it was off: (arrival, datagram)
    let mut socket: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut socket_bytes = 0usize;
    // early arrival stamps: their own draws too
    let mut clock_rng = SmallRng::seed_from_u64(cfg.seed ^ 0x51a1_e0c1);
    loop {
        if delivered == want {
            report.done = true;
            break;
        }
        if now > cfg.limit {
            break;
        }
        if let Some(st) = cfg.stall {
            if now >= next_stall {
                stalled_until = now + stall_rng.gen_range(0..=st.off);
                next_stall = stalled_until + st.run;
            }
        }
        let rx_off = now < stalled_until;
        if !rx_off {
            while let Some((at, d)) = socket.pop_front() {
                socket_bytes -= d.len();
                active[rx_rank] = true;
                if let Some(b) = protos[rx_rank].handle_datagram_at(now, at, d) {
                    protos[rx_rank].recycle(b);
                }
            }
        }
        while net.peek().is_some_and(|f| f.at <= now) {
            let f = net.pop().expect("peeked");
            if f.dst == rx_rank && rx_off {
                if socket_bytes + f.bytes.len() > SOCKET_BYTES {
                    report.socket_drops += 1;
                } else {
                    socket_bytes += f.bytes.len();
                    socket.push_back((f.at, f.bytes));
                }
                continue;
            }
            active[f.dst] = true;
            let arrived = if cfg.stale_clock > 0 {
                now.saturating_sub(clock_rng.gen_range(0..=cfg.stale_clock))
            } else {
                now
            };
            if let Some(b) = protos[f.dst].handle_datagram_at(now, arrived, f.bytes) {
                protos[f.dst].recycle(b);
            }
        }
        for i in (1..n).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        for &r in &order {
            if r == rx_rank && rx_off {
                continue;
            }
            if protos[r].poll_timeout() <= now {
                protos[r].handle_timeout(now);
                active[r] = true;
            }
            if !active[r] {
                continue;
            }
            active[r] = false;
            let proto = &mut protos[r];
            if r == rx_rank {
                while let Some((src, d)) = proto.next_ready(0) {
                    let src = src as usize;
                    let body = &d[HEADER..d.len() - TAG];
                    progress[src] += body.len() as u64;
                    let mut bad = None;
                    let mut done_msgs = 0;
                    let res =
                        reasm[src].feed(src, body, MAX_MEDIUM, &mut SharedSeg(&seg), &mut |m| {
                            let k = next_in[src];
                            let want_dep = Deposit {
                                offset: (src * len) as u64,
                                len,
                            };
                            // the deposit's bytes: the whole message, rotated
                            let o = rot(src, k);
                            let seg = seg.borrow();
                            let region = &seg[src * len..(src + 1) * len];
                            let landed = region[..len - o] == pattern[o..]
                                && region[len - o..] == pattern[..o];
                            if m.words != [k as u64, src as u64]
                                || m.deposit != Some(want_dep)
                                || !landed
                            {
                                bad.get_or_insert(format!(
                                    "message {k} from rank {src} arrived wrong"
                                ));
                            }
                            next_in[src] += 1;
                            done_msgs += 1;
                        });
                    proto.recycle(d);
                    if let Err(e) = res {
                        return fail(format!("malformed frames from rank {src}: {e}"));
                    }
                    if let Some(b) = bad {
                        return fail(b);
                    }
                    for _ in 0..done_msgs {
                        got[src] += len as u64;
                        delivered += 1;
                        if next_in[src] == cfg.messages {
                            report.finished[src] = now;
                            if report.at_first_finish.is_empty() {
                                report.at_first_finish = progress.clone();
                            }
                        }
                        report.time = now;
                    }
                }
            } else {
                // a sender: push its current message as far as it goes
                loop {
                    let (k, from) = out[r];
                    if k >= cfg.messages {
                        break;
                    }
                    if from == 0 {
                        let o = rot(r, k);
                        payload[r].clear();
                        payload[r].extend_from_slice(&pattern[o..]);
                        payload[r].extend_from_slice(&pattern[..o]);
                    }
                    let words = [k as u64, r as u64];
                    let m = OutMsg {
                        tag: 1,
                        words: &words,
                        payload: &payload[r],
                        deposit: Some((r * len) as u64),
                    };
                    match proto.send(now, rx_rank as u32, 0, &m, from) {
                        Sent::Upto(e) if e == len => out[r] = (k + 1, 0),
                        Sent::Upto(e) => out[r] = (k, e),
                        Sent::NoRoom | Sent::Dead => break,
                    }
                }
            }
            proto.poll_transmit(now, true, &mut |p, b| outbox.push((p, b.to_vec())));
            for (dst, bytes) in outbox.drain(..) {
                let dst = dst as usize;
                let mut at = now + cfg.latency;
                if let Some(l) = link.as_mut().filter(|l| l.crosses(dst)) {
                    match l.enqueue(now, bytes.len()) {
                        Some(left) => at = left + cfg.latency,
                        None => continue,
                    }
                }
                counter += 1;
                net.push(InFlight {
                    at,
                    n: counter,
                    dst,
                    bytes,
                });
            }
        }
        // on to the next arrival or timer
        let mut t = net.peek().map_or(u64::MAX, |f| f.at);
        for (r, p) in protos.iter().enumerate() {
            if r == rx_rank && rx_off {
                // it wakes at the end of its stall, not for its timers
                t = t.min(stalled_until);
            } else {
                t = t.min(p.poll_timeout());
            }
        }
        if !rx_off {
            t = t.min(next_stall);
        }
        now = t.max(now + 1);
    }
    report.final_cwnd = protos[0].congestion_window(rx_rank as u32).0;
    report.bytes = got.iter().sum();
    report.goodput = if report.time > 0 {
        report.bytes as f64 * 1e9 / report.time as f64
    } else {
        0.0
    };
    if report.at_first_finish.is_empty() {
        report.at_first_finish = progress.clone();
    }
    let mean = report.at_first_finish.iter().sum::<u64>() as f64 / cfg.senders.max(1) as f64;
    let min = report.at_first_finish.iter().copied().min().unwrap_or(0) as f64;
    report.min_share = if mean > 0.0 { min / mean } else { 0.0 };
    if let Some(l) = &link {
        report.queue_drops = l.drops;
        report.peak_queue = l.peak;
    }
    for p in &protos {
        let s = p.stats();
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
        t.cwnd_reductions += s.cwnd_reductions;
        t.paced += s.paced;
        t.spurious_timeouts += s.spurious_timeouts;
    }
    Ok(report)
}
