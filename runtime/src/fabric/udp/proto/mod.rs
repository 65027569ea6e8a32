//! The UDP fabric's protocol, sans I/O: one rank's connections to every
//! peer as state machines with no sockets, clocks or threads (the split
//! quinn-proto and smoltcp make). Time is a number of nanoseconds the
//! caller passes in; datagrams come in as byte buffers and go out through
//! a callback. The same code runs under the real driver
//! ([`super::UdpFabric`]) and the seeded simulator (`super::sim`, cargo
//! feature `test-doubles`).
//!
//! Per peer there are two streams (0: requests, 1: replies), each with its
//! own sequence numbers, send window and receive window, so replies never
//! wait behind requests. Reliability follows the usnic / TCP recipe:
//! cumulative acknowledgements piggy-backed on every datagram plus a
//! 32-datagram selective-acknowledgement bitmap; delayed explicit
//! acknowledgements (every second in-order datagram, or after
//! `ack_delay`); retransmission timeouts from a smoothed RTT with
//! exponential back-off up to `max_rto`; fast retransmission after three
//! duplicate acknowledgements; duplicates and stale datagrams dropped;
//! in-order hand-up. The receive window doubles as credits: a receiver
//! whose upper layer stops polling stops opening its window. Control
//! datagrams (acknowledgements, window updates, keepalives) are small and
//! leave before data (the priority channel). Small messages are coalesced
//! Nagle-style: a message to a peer with nothing in flight on that stream
//! leaves at once; while datagrams are in flight, later messages fill one
//! datagram until it is full or the caller polls.
//!
//! A datagram is acted on only if its header is plausible (length, magic,
//! version, addressed to this rank from another rank of the job), its
//! short header tag verifies and then its full tag verifies under the
//! job's key; otherwise it is dropped and counted, the implausible and
//! the wrong header tags before any pass over the body (a stranger's
//! flood of large datagrams costs a 64-byte hash each, not a full one).
//!
//! Every datagram to a peer carries the next datagram number `pn` of that
//! direction (retransmissions and controls included). The receiver keeps
//! the highest number seen and a 128-bit bitmap of the numbers below it
//! (the IPsec / DTLS replay window) and acts on each authentic datagram at
//! most once: a number seen before, or older than the window, is a replay
//! (or a network duplicate) and is dropped and counted without touching
//! anything — no liveness, no acknowledgement, no ack processing. So only
//! authentic, new datagrams refresh a peer's liveness, and an on-path
//! attacker replaying captured datagrams cannot keep a dead peer alive. A
//! keepalive needs no counter of its own: it is a control datagram with
//! a fresh number, and so is the answer it asks for. A peer heard from
//! once and then silent past `peer_timeout` (while keepalives went to it)
//! is reported dead.
//!
//! Congestion control (`congestion.rs`, when `ProtoConfig::cc` is on):
//! per peer a window in bytes (slow start, AIMD on loss, slow start
//! ended by a rising RTT) below the credits, and pacing: a datagram the
//! controller holds back leaves at the next `poll_transmit` from
//! [`Proto::poll_timeout`] on (after [`Proto::handle_timeout`]).

mod congestion;
mod hold;
mod peers;
mod recv;
mod send;
mod urge;

use self::congestion::{Cc, Gate};
use self::peers::PeerTable;
use self::recv::{Arrival, RecvStream};
use self::send::{SendStream, TxSlot};
use super::wire::{Ack, Header, Mac, F_ACK_NOW, HEADER, KIND_CONTROL, MAX_DATAGRAM, OVERHEAD, TAG};
use crate::fabric::frames::{self, OutMsg, SrcMsg, FRAME_HEADER};
use std::collections::VecDeque;

/// Whether sequence number `a` comes before `b` (modulo 2^32).
#[inline]
pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Buffers kept for reuse at most.
const POOL_MAX: usize = 256;

fn recycle(pool: &mut Vec<Vec<u8>>, mut b: Vec<u8>) {
    if pool.len() < POOL_MAX {
        b.clear();
        pool.push(b);
    }
}

/// Protocol tunables (all times in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoConfig {
    /// Largest datagram in bytes, header and tag included.
    pub mtu: usize,
    /// Datagrams in flight per stream, and accepted ahead per stream.
    pub window: u16,
    /// Longest an in-order datagram waits for its acknowledgement.
    pub ack_delay: u64,
    /// Retransmission timeout before any RTT sample.
    pub initial_rto: u64,
    /// Shortest retransmission timeout.
    pub min_rto: u64,
    /// Longest retransmission timeout (back-off cap).
    pub max_rto: u64,
    /// Silence after which a peer gets a keepalive.
    pub keepalive: u64,
    /// Silence after which a peer is declared dead.
    pub peer_timeout: u64,
    /// The tag covers the body too (`false`: the header only).
    pub auth_body: bool,
    /// Congestion control and pacing per peer (`false`: the fixed credit
    /// window alone, as before the controller). `ProtoConfig::default()`
    /// leaves it off (the simulator's fixed-window tests); a job's
    /// configuration turns it on unless `SPLITRT_UDP_CC=off`
    /// (docs/networking.md).
    pub cc: bool,
}

impl Default for ProtoConfig {
    fn default() -> Self {
        ProtoConfig {
            mtu: MAX_DATAGRAM,
            window: 64,
            ack_delay: 50_000,
            initial_rto: 5_000_000,
            min_rto: 200_000,
            max_rto: 100_000_000,
            keepalive: 1_000_000_000,
            peer_timeout: 10_000_000_000,
            auth_body: true,
            cc: false,
        }
    }
}

impl ProtoConfig {
    /// Check the values (a message naming the bad one).
    pub fn validate(&self) -> Result<(), String> {
        if self.mtu < 512 || self.mtu > MAX_DATAGRAM {
            return Err(format!(
                "datagram size {} B out of range 512..={MAX_DATAGRAM}",
                self.mtu
            ));
        }
        if self.window < 2 || self.window > 4096 {
            return Err(format!("window {} out of range 2..=4096", self.window));
        }
        if self.min_rto == 0 || self.min_rto > self.max_rto {
            return Err("retransmission timeouts: need 0 < min <= max".into());
        }
        if self.keepalive == 0 || self.peer_timeout <= self.keepalive {
            return Err("peer timeout must exceed the keepalive interval".into());
        }
        Ok(())
    }
}

/// Something the upper layer must hear of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The peer has been silent past the peer timeout.
    PeerDead {
        /// The peer.
        peer: u32,
        /// Nanoseconds since it was last heard from.
        silent: u64,
    },
}

/// Counters, for reports and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Of which retransmissions.
    pub retransmits: u64,
    /// Of which control datagrams.
    pub controls: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Fast retransmissions (duplicate acknowledgements).
    pub fast_retransmits: u64,
    /// Datagrams accepted (authentic, well formed, for us).
    pub received: u64,
    /// Dropped as not authentic (another job, a stranger, corruption):
    /// an implausible header, a wrong header tag, or a wrong tag.
    pub bad_tag: u64,
    /// Of `bad_tag`, dropped before the full tag was computed (an
    /// implausible header, not addressed to this rank from another rank
    /// of the job, or a wrong header tag): the cheap path.
    pub early_rejects: u64,
    /// Dropped: authentic, but this datagram (its number) was acted on
    /// before or is older than the replay window: a replay or a network
    /// duplicate. Refreshes nothing.
    pub replays: u64,
    /// Dropped: data seen before (a retransmission that crossed its
    /// acknowledgement).
    pub duplicates: u64,
    /// Dropped: past the advertised window.
    pub beyond_window: u64,
    /// Held out of order.
    pub out_of_order: u64,
    /// Refused by the socket (its buffer was full; resent later). Counted
    /// by the driver.
    pub send_errors: u64,
    /// Dropped by the kernel before they reached the socket's queue: not
    /// from a peer's address (the source filter), or the receive buffer
    /// was full. Counted by the kernel, read by the driver (`SO_MEMINFO`).
    pub kernel_drops: u64,
    /// Congestion events: the congestion window halved after a loss
    /// (once per round trip at most; timeouts are counted in `timeouts`).
    pub cwnd_reductions: u64,
    /// Times a datagram was held back by pacing.
    pub paced: u64,
    /// Episodes of retransmission timeouts found spurious and undone (one
    /// per episode, whichever streams timed out in it; the timeouts are
    /// counted in `timeouts`): the acknowledgements after them showed that
    /// what every one of them took for lost had reached the peer, the
    /// first of each stream's flight before the timeout fired.
    pub spurious_timeouts: u64,
}

/// Datagram numbers below the highest one seen that are still told apart
/// (older ones are dropped as replays).
const REPLAY_WINDOW: u64 = 128;

struct Peer {
    tx: [SendStream; 2],
    rx: [RecvStream; 2],
    /// Number of the last datagram sent to this peer.
    tx_pn: u64,
    /// Highest datagram number received from this peer (0: none).
    rx_pn: u64,
    /// Bit i: datagram `rx_pn - i` was received (bit 0: `rx_pn` itself).
    rx_seen: u128,
    /// Last datagram from this peer (0: never).
    heard: u64,
    /// Last datagram to this peer.
    spoke: u64,
    /// Traffic was exchanged: keepalives go to it, silence kills it.
    active: bool,
    dead: bool,
    /// Send an acknowledgement at this time (piggy-backing clears it).
    ack_at: Option<u64>,
    /// Ask the peer to acknowledge at once (keepalive, window probe).
    ping: bool,
    /// Retransmission deadline per stream.
    rto_at: [Option<u64>; 2],
    srtt: u64,
    rttvar: u64,
    /// The `ts` of the last in-order data datagram from this peer, to echo.
    echo: u32,
    /// When that datagram arrived (the hold time reported with the echo
    /// runs from here).
    echo_at: u64,
    rto: u64,
    backoff: u32,
    /// Listed in `Proto::dirty`.
    dirty: bool,
    /// Listed in `Proto::ready[stream]`.
    listed: [bool; 2],
    /// Congestion window and pacing.
    cc: Cc,
    /// Listed in `Proto::paced`.
    paced: bool,
    /// The sender waits for this peer's acknowledgements (`urge.rs`):
    /// the next transmit asks for them at once.
    urgent: bool,
    /// Asked already since the last data datagram left (`urge.rs`).
    asked: bool,
    /// The deadline the delayed-acknowledgement path set in `ack_at`;
    /// when the upper layer takes that datagram while it still stands,
    /// it moves once by `ack_delay` (the reply the upper layer is making
    /// will likely carry the acknowledgement).
    ack_delayed: Option<u64>,
}

impl Peer {
    /// State toward a peer first contacted at `now`.
    fn new(cfg: &ProtoConfig, now: u64) -> Peer {
        let w = cfg.window;
        let credit = 2 * w as u64 * cfg.mtu as u64;
        Peer {
            tx: [SendStream::new(w), SendStream::new(w)],
            rx: [RecvStream::new(w), RecvStream::new(w)],
            tx_pn: 0,
            rx_pn: 0,
            rx_seen: 0,
            heard: now,
            spoke: now,
            active: false,
            dead: false,
            ack_at: None,
            ping: false,
            rto_at: [None, None],
            srtt: 0,
            rttvar: 0,
            echo: 0,
            echo_at: 0,
            rto: cfg.initial_rto,
            backoff: 0,
            dirty: false,
            listed: [false, false],
            // an episode of timeouts is dropped (its reduction standing)
            // if not judged within 16 maximal timeouts (16
            // retransmissions at the longest back-off) after its latest
            // timeout, or within the peer timeout after its first
            cc: Cc::new(
                cfg.cc,
                cfg.mtu,
                credit,
                cfg.max_rto.saturating_mul(16).min(cfg.peer_timeout),
                cfg.peer_timeout,
            ),
            paced: false,
            urgent: false,
            asked: false,
            ack_delayed: None,
        }
    }
}

/// One rank's protocol state toward every peer.
pub struct Proto {
    me: u32,
    cfg: ProtoConfig,
    mac: Mac,
    /// Per-peer state, made on first contact.
    peers: PeerTable<Peer>,
    /// Peers with something to transmit.
    dirty: Vec<u32>,
    /// The other list of `poll_transmit` (the two swap, so neither is
    /// allocated again on the per-message path).
    spare: Vec<u32>,
    /// Peers with in-order data to hand up, per stream.
    ready: [VecDeque<u32>; 2],
    pool: Vec<Vec<u8>>,
    events: VecDeque<Event>,
    stats: Stats,
    /// No timer is due before this.
    next_timer: u64,
    /// Peers whose next datagram waits for its pacing time.
    paced: Vec<u32>,
    /// The earliest of those times (`u64::MAX`: none).
    next_pace: u64,
}

/// What [`Proto::send`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Took payload bytes up to this offset (all of the message when it
    /// equals the payload length).
    Upto(usize),
    /// No room: nothing taken (back-pressure).
    NoRoom,
    /// The peer is dead.
    Dead,
}

impl Proto {
    /// State for rank `me` of `size` ranks, authenticating with `mac_key`.
    ///
    /// # Security
    /// The key must be new for every instance (as
    /// [`JobNonce::datagram_key`](crate::fabric::udp::job_nonce::JobNonce::datagram_key)
    /// makes it): the full tag's one-time keys come from the header bytes,
    /// which restart with a new instance.
    pub fn new(me: u32, size: u32, cfg: ProtoConfig, mac_key: [u8; 32], now: u64) -> Proto {
        Proto {
            me,
            mac: if cfg.auth_body {
                Mac::new(mac_key)
            } else {
                Mac::header_only(mac_key)
            },
            peers: PeerTable::new(size),
            dirty: Vec::new(),
            spare: Vec::new(),
            ready: [VecDeque::new(), VecDeque::new()],
            pool: Vec::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            next_timer: now.saturating_add(cfg.keepalive),
            paced: Vec::new(),
            next_pace: u64::MAX,
            cfg,
        }
    }

    /// The tunables.
    pub fn config(&self) -> &ProtoConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Largest body a datagram carries.
    pub fn max_body(&self) -> usize {
        self.cfg.mtu - OVERHEAD
    }

    /// A buffer for the driver to receive into (from the pool).
    pub fn buffer(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    /// Give a buffer back.
    pub fn recycle(&mut self, b: Vec<u8>) {
        recycle(&mut self.pool, b)
    }

    fn mark_dirty(&mut self, p: u32) {
        let peer = &mut self.peers[p as usize];
        if !peer.dirty {
            peer.dirty = true;
            self.dirty.push(p);
        }
    }

    /// Queue (part of) message `m` to `peer` on `stream`, its payload from
    /// byte `from` on. The first call for a message passes `from = 0`; the
    /// caller keeps calling with the returned offset until the whole
    /// payload is taken, sending nothing else on this stream meanwhile.
    #[inline]
    pub fn send(
        &mut self,
        now: u64,
        peer: u32,
        stream: usize,
        m: &OutMsg<'_>,
        from: usize,
    ) -> Sent {
        self.send_src(now, peer, stream, &SrcMsg::from(m), from)
    }

    /// [`send`](Self::send) of a message whose payload may lie in this
    /// rank's segment: it is copied from there straight into the datagram
    /// bodies ([`frames::append_src`]).
    pub fn send_src(
        &mut self,
        now: u64,
        peer: u32,
        stream: usize,
        m: &SrcMsg<'_>,
        from: usize,
    ) -> Sent {
        let max_body = self.max_body();
        let window = self.cfg.window as usize;
        let me = self.me;
        let cfg = &self.cfg;
        let p = self
            .peers
            .get_or_make(peer as usize, || Peer::new(cfg, now));
        if p.dead {
            return Sent::Dead;
        }
        if !p.active {
            p.active = true;
            p.heard = now;
        }
        let mut from = from;
        let mut took_any = false;
        // A Medium that nearly fills a fresh datagram (at least 7/8 of a
        // body: a get's unsplit reply, a strided chunk) but not the room
        // left in the open one (behind a small message: a get's tail, a
        // put's ack) would be cut across two and reassembled: seal the
        // open one first, if the window has a slot for the fresh one (else
        // it is split as before). Smaller messages keep filling the open
        // datagram (sealing early for them would cost up to twice the
        // datagrams), and so do Longs, whose pieces are written straight
        // into the segment (no reassembly copy to save).
        let whole = FRAME_HEADER + 8 * m.words.len() + m.payload.len();
        if from == 0 && m.deposit.is_none() && whole <= max_body && whole >= max_body - max_body / 8
        {
            let s = &mut p.tx[stream];
            if let Some(body) = &s.open {
                let used = body.len() - HEADER;
                if used > 0 && whole > max_body - used && s.slots.len() + 1 < window {
                    Self::seal(me, peer, stream, s);
                }
            }
        }
        loop {
            let s = &mut p.tx[stream];
            if s.open.is_none() {
                if s.slots.len() >= window {
                    break;
                }
                let mut b = self.pool.pop().unwrap_or_default();
                b.clear();
                b.resize(HEADER, 0);
                s.open = Some(b);
            }
            let body = s.open.as_mut().expect("open body");
            let room = max_body - (body.len() - HEADER);
            if let Some(n) = frames::append_src(body, m, from, room) {
                from += n;
                took_any = true;
                if from == m.payload.len() {
                    // nothing more fits (not even an empty frame's
                    // header): the datagram is full and leaves at once
                    // instead of waiting for the next send or poll
                    if max_body - (body.len() - HEADER) < FRAME_HEADER {
                        Self::seal(me, peer, stream, s);
                    }
                    break;
                }
            }
            // this datagram is full: seal it and go on in a fresh one
            Self::seal(me, peer, stream, s);
        }
        if took_any {
            // Nagle's rule: on an idle stream the datagram leaves at once
            // (latency); while earlier ones are in flight, later messages
            // fill it until it is full or the sender polls (coalescing).
            let s = &mut self.peers[peer as usize].tx[stream];
            if s.in_flight() == 0 && s.next_tx == s.next_seq && s.slots.len() < window {
                Self::seal(me, peer, stream, s);
            }
            self.mark_dirty(peer);
            Sent::Upto(from)
        } else {
            Sent::NoRoom
        }
    }

    fn seal(me: u32, peer: u32, stream: usize, s: &mut SendStream) {
        let Some(mut b) = s.open.take() else { return };
        let body_len = b.len() - HEADER;
        b.resize(b.len() + TAG, 0);
        Header {
            kind: stream as u8,
            flags: 0,
            body_len: body_len as u16,
            src: me,
            dst: peer,
            seq: s.next_seq,
            acks: [Ack::default(); 2],
            ts: 0,
            echo: 0,
            hold: 0,
            pn: 0,
        }
        .write(&mut b);
        s.next_seq = s.next_seq.wrapping_add(1);
        s.slots.push_back(TxSlot {
            buf: b,
            sent_at: 0,
            sacked: false,
            again: false,
            inflight: false,
            retx: false,
        });
    }

    /// Whether `peer` can take a message on `stream` now (a datagram
    /// slot or room in the open one).
    pub fn credits(&self, peer: u32, stream: usize) -> (usize, usize) {
        let w = self.cfg.window as usize;
        let Some(p) = self.peers.get(peer as usize) else {
            return (w, w);
        };
        (w.saturating_sub(p.tx[stream].slots.len()), w)
    }

    /// The congestion window toward `peer` and the bytes in flight to it
    /// (the window is the credit of both streams when the controller is
    /// off).
    pub fn congestion_window(&self, peer: u32) -> (u64, u64) {
        match self.peers.get(peer as usize) {
            Some(p) => (p.cc.cwnd, p.cc.inflight),
            None => (Peer::new(&self.cfg, 0).cc.cwnd, 0),
        }
    }

    /// Whether everything sent to every peer has been acknowledged.
    pub fn quiesced(&self) -> bool {
        self.peers
            .iter()
            .all(|(_, p)| p.dead || (!p.tx[0].busy() && !p.tx[1].busy()))
    }

    /// Peers with unacknowledged data (for reports).
    pub fn unacked_peers(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.dead && (p.tx[0].busy() || p.tx[1].busy()))
            .map(|(i, _)| i)
            .collect();
        v.sort_unstable();
        v
    }

    /// The cheap checks alone, on the first [`HEADER`] bytes `head` of a
    /// datagram of `len` bytes (a driver under a flood peeks them before
    /// reading the whole datagram): whether it may be authentic. A `false`
    /// is counted as an early reject; the datagram is to be discarded.
    pub fn screen(&mut self, head: &[u8], len: usize) -> bool {
        if self.plausible(head, len).is_some() {
            return true;
        }
        self.stats.bad_tag += 1;
        self.stats.early_rejects += 1;
        false
    }

    /// The header, if plausible and its header tag verifies.
    fn plausible(&self, head: &[u8], len: usize) -> Option<Header> {
        Header::read_head(head, len)
            .filter(|h| h.dst == self.me && (h.src as usize) < self.peers.len())
            .filter(|_| self.mac.verify_header(head))
    }

    /// Take an arrived datagram. It comes back if not kept (give it to
    /// the pool or reuse it).
    pub fn handle_datagram(&mut self, now: u64, d: Vec<u8>) -> Option<Vec<u8>> {
        self.handle_datagram_at(now, now, d)
    }

    /// [`handle_datagram`](Self::handle_datagram) of a datagram that
    /// reached this rank's socket at `arrived` (`<= now`; the kernel's
    /// receive timestamp): the time it waited there counts as this rank's
    /// hold time, reported to its sender with the echo, not as network
    /// delay, and the round trip of an acknowledgement ends at its
    /// arrival.
    pub fn handle_datagram_at(&mut self, now: u64, arrived: u64, d: Vec<u8>) -> Option<Vec<u8>> {
        let arrived = arrived.min(now);
        // the cheap checks first: nothing here reads past the header
        let Some(h) = self.plausible(&d, d.len()) else {
            self.stats.bad_tag += 1;
            self.stats.early_rejects += 1;
            return Some(d);
        };
        if !self.mac.verify(&d) {
            self.stats.bad_tag += 1;
            return Some(d);
        }
        let src = h.src;
        // authentic: a peer's state is made on its first datagram
        let cfg = &self.cfg;
        let p = self.peers.get_or_make(src as usize, || Peer::new(cfg, now));
        if p.dead {
            return Some(d);
        }
        // each authentic datagram is acted on once (the replay window)
        if h.pn > p.rx_pn {
            let shift = h.pn - p.rx_pn;
            p.rx_seen = if shift >= REPLAY_WINDOW {
                1
            } else {
                (p.rx_seen << shift) | 1
            };
            p.rx_pn = h.pn;
        } else {
            let age = p.rx_pn - h.pn;
            if h.pn == 0 || age >= REPLAY_WINDOW || p.rx_seen & (1 << age) != 0 {
                self.stats.replays += 1;
                return Some(d);
            }
            p.rx_seen |= 1 << age;
        }
        self.stats.received += 1;
        p.heard = now;
        p.active = true;
        let mut wants_tx = false;
        for st in 0..2 {
            let a = h.acks[st];
            let acked = p.tx[st].on_ack(a.cum, a.sack, a.win, &mut self.pool);
            if acked.freed > 0 {
                // the echoed timestamp times the transmission that was
                // acknowledged, retransmission or not
                let rtt = (us(now).wrapping_sub(h.echo) as u64) * 1000;
                // a saturated hold (the peer stalled half a second or
                // more, or its acks were lost that long: hold::SATURATED)
                // times the stall or the acks' loss, not a round trip: it
                // sets neither the RTO nor the pacing rate nor the delay
                // signal (a 900 ms stall in the smoothed RTT paced the
                // next 2 MiB out over 7x their time); the undo then waits
                // for an ack covering the whole flight (Cc::on_echo)
                let stalled = hold::saturated(h.hold);
                if h.echo != 0 && rtt < 60_000_000_000 {
                    if !stalled {
                        rtt_sample(p, &self.cfg, rtt);
                    } else if p.backoff > 0 {
                        p.rto = base_rto(p, &self.cfg);
                    }
                    // a timeout whose echoed datagram reached the peer in
                    // time (the ack times a transmission from before it,
                    // and the peer's hold places its arrival before it)
                    // and whose whole flight then arrived without a
                    // retransmission was spurious: the window comes back
                    // once every stream that timed out is judged so,
                    // unless an ack shows a hole below a datagram it
                    // selectively acknowledges (a loss in the flight).
                    // What the timeout marked and was not resent yet stays
                    // marked and is resent now: the ack proves only what
                    // it acknowledges arrived, not the rest of the flight
                    if p.tx[st].hole_below_sack() {
                        p.cc.on_hole(st);
                    }
                    let una = p.tx[st].una;
                    if p.cc
                        .on_echo(now, st, h.echo, us(arrived), hold::decode(h.hold), una)
                    {
                        self.stats.spurious_timeouts += 1;
                    }
                    // the controller's delay signal follows Karn's rule,
                    // from the arrival and without the peer's hold time:
                    // the network's share of the round trip
                    // (none from an arrival stamped before the echoed
                    // transmission: hold::network_rtt; never more than
                    // the round trip, as the arrival is no later than now)
                    if !acked.retx && !stalled {
                        let hold = hold::host_delay(h.hold);
                        match hold::network_rtt(us(arrived), h.echo, hold) {
                            Some(net) => p.cc.on_rtt(now, h.echo, net, p.srtt),
                            None => p.cc.on_srtt(p.srtt),
                        }
                    }
                } else if p.backoff > 0 {
                    p.rto = base_rto(p, &self.cfg);
                }
                p.backoff = 0;
                p.rto_at[st] = (p.tx[st].in_flight() > 0).then(|| now + p.rto);
            }
            p.cc.on_acked(acked.bytes, acked.flight);
            // three duplicate acknowledgements, or with the controller on
            // fewer when fewer datagrams are in flight (early retransmit,
            // RFC 5827): a small congestion window must not wait for a
            // timeout
            let dupthresh = if self.cfg.cc {
                (p.tx[st].in_flight() as u32).saturating_sub(1).clamp(1, 3)
            } else {
                3
            };
            if acked.dup && p.tx[st].dups >= dupthresh {
                // holes not resent within the last round trip
                let before = now.saturating_sub(p.srtt.max(20_000));
                let lost = p.tx[st].mark_lost(false, before);
                if lost.marked > 0 {
                    self.stats.fast_retransmits += 1;
                    p.cc.on_left(lost.flight);
                    if p.cc.on_loss(now, lost.last_sent) {
                        self.stats.cwnd_reductions += 1;
                    }
                }
            }
            if p.tx[st].again > 0 || p.tx[st].may_send_new(self.cfg.window) {
                wants_tx = true;
            }
        }
        if h.flags & F_ACK_NOW != 0 {
            p.ack_at = Some(now);
        }
        let back;
        if h.kind != KIND_CONTROL {
            let st = h.kind as usize;
            let (arr, b) = p.rx[st].arrive(h.seq, d);
            back = b;
            match arr {
                Arrival::Stored { in_order } => {
                    if in_order {
                        p.echo = h.ts;
                        p.echo_at = arrived;
                        p.rx[st].unacked += 1;
                        if p.rx[st].unacked >= 2 {
                            p.ack_at = Some(now);
                        } else {
                            let t = now + self.cfg.ack_delay;
                            p.ack_at = Some(p.ack_at.map_or(t, |a| a.min(t)));
                            // (not when an immediate one is due already)
                            p.ack_delayed = (p.ack_at == Some(t)).then_some(t);
                            self.next_timer = self.next_timer.min(t);
                        }
                    } else {
                        self.stats.out_of_order += 1;
                        p.ack_at = Some(now);
                    }
                    if p.rx[st].ready() && !p.listed[st] {
                        p.listed[st] = true;
                        self.ready[st].push_back(src);
                    }
                }
                Arrival::Duplicate => {
                    self.stats.duplicates += 1;
                    p.ack_at = Some(now);
                }
                Arrival::BeyondWindow => {
                    self.stats.beyond_window += 1;
                    p.ack_at = Some(now);
                }
            }
        } else {
            back = Some(d);
        }
        if wants_tx || p.ack_at == Some(now) {
            self.mark_dirty(src);
        }
        back
    }

    /// Whether [`next_ready`](Self::next_ready) may have something on a
    /// stream (it may also find the listed peers empty).
    pub fn may_have_ready(&self) -> bool {
        self.ready.iter().any(|q| !q.is_empty())
    }

    /// The next in-order datagram of `stream` from any peer (round robin):
    /// (peer, whole datagram; its body is
    /// `d[HEADER..d.len() - TAG]`). Give the buffer back with
    /// [`recycle`](Self::recycle) when done.
    pub fn next_ready(&mut self, stream: usize) -> Option<(u32, Vec<u8>)> {
        while let Some(src) = self.ready[stream].pop_front() {
            let p = &mut self.peers[src as usize];
            let r = &mut p.rx[stream];
            let Some(d) = r.take() else {
                p.listed[stream] = false;
                continue;
            };
            if r.ready() {
                self.ready[stream].push_back(src);
            } else {
                p.listed[stream] = false;
            }
            // handed up while its delayed acknowledgement waits: the
            // upper layer's reply will likely carry it, so it waits once
            // more (a handler slower than `ack_delay` made a lone
            // acknowledgement leave just before the reply, issue 25)
            if p.ack_delayed.is_some() && p.ack_at == p.ack_delayed {
                p.ack_at = p.ack_at.map(|t| t.saturating_add(self.cfg.ack_delay));
                p.ack_delayed = None;
            }
            // A window that had closed to below half is reopened at once.
            let half = self.cfg.window / 2;
            if r.advertised < half && r.win() >= half {
                p.ack_at = Some(0);
                self.mark_dirty(src);
            }
            return Some((src, d));
        }
        None
    }

    /// Hand every due datagram to `out` as (peer, bytes): retransmissions,
    /// then new data (replies before requests), then control. With
    /// `flush`, partly filled datagrams are sealed and leave too (the
    /// caller's burst of sends is over); without, they wait to be filled
    /// (coalescing).
    pub fn poll_transmit(&mut self, now: u64, flush: bool, out: &mut dyn FnMut(u32, &[u8])) {
        let spare = std::mem::take(&mut self.spare);
        let mut dirty = std::mem::replace(&mut self.dirty, spare);
        let window = self.cfg.window as usize;
        for &peer in &dirty {
            let p = &mut self.peers[peer as usize];
            p.dirty = false;
            if flush {
                for (st, s) in p.tx.iter_mut().enumerate() {
                    if s.open.is_some() && s.slots.len() < window {
                        Self::seal(self.me, peer, st, s);
                    }
                }
            }
            self.transmit_peer(now, peer, out);
            if self.peers[peer as usize]
                .tx
                .iter()
                .any(|s| s.open.is_some())
            {
                self.mark_dirty(peer);
            }
        }
        dirty.clear();
        self.spare = dirty;
    }

    fn acks_of(p: &mut Peer) -> [Ack; 2] {
        [0, 1].map(|st| {
            let a = p.rx[st].ack();
            p.rx[st].advertised = a.win;
            p.rx[st].unacked = 0;
            a
        })
    }

    /// One datagram's transmission, first or again: slot `idx` of stream
    /// `st` toward `peer` takes the acknowledgement state, the clock and
    /// echo, the next packet number and `flags` (`F_ACK_NOW`: the peer is
    /// asked to acknowledge at once), is sealed and handed out, and is in
    /// flight from `now`. Inlined into both callers: out of line it cost
    /// 57 more instructions a datagram (callgrind, the simulator).
    #[inline(always)]
    fn transmit_slot(
        mac: &Mac,
        p: &mut Peer,
        (peer, st, idx): (u32, usize, usize),
        flags: u8,
        now: u64,
        out: &mut dyn FnMut(u32, &[u8]),
    ) {
        let acks = Self::acks_of(p);
        let echo = (p.echo, hold_of(p, now));
        p.tx_pn += 1;
        let pn = p.tx_pn;
        p.asked = flags != 0;
        let s = &mut p.tx[st].slots[idx];
        s.sent_at = now;
        s.inflight = true;
        let len = s.buf.len();
        emit(
            mac,
            &mut s.buf,
            acks,
            (us(now), echo, pn),
            (peer, flags),
            out,
        );
        p.cc.on_sent(now, len);
    }

    fn transmit_peer(&mut self, now: u64, peer: u32, out: &mut dyn FnMut(u32, &[u8])) {
        let me = self.me;
        let window = self.cfg.window;
        let p = &mut self.peers[peer as usize];
        if p.dead {
            return;
        }
        let mut sent_data = false;
        // what the congestion controller holds back, if anything
        let mut held = Gate::Open;
        for st in [1usize, 0] {
            // retransmissions
            if p.tx[st].again > 0 {
                let n = p.tx[st].in_flight().min(p.tx[st].slots.len());
                for i in 0..n {
                    if !p.tx[st].slots[i].again {
                        continue;
                    }
                    held = p.cc.gate(now);
                    if held != Gate::Open {
                        break;
                    }
                    let s = &mut p.tx[st].slots[i];
                    s.again = false;
                    s.retx = true;
                    // a waiting sender's retransmission asks for its
                    // acknowledgement at once (urge.rs)
                    let flags = if p.urgent { F_ACK_NOW } else { 0 };
                    Self::transmit_slot(&self.mac, p, (peer, st, i), flags, now, out);
                    p.tx[st].again -= 1;
                    self.stats.sent += 1;
                    self.stats.retransmits += 1;
                    sent_data = true;
                }
            }
            // new data
            while held == Gate::Open && p.tx[st].may_send_new(window) {
                held = p.cc.gate(now);
                if held != Gate::Open {
                    break;
                }
                let idx = p.tx[st].next_tx.wrapping_sub(p.tx[st].una) as usize;
                // a waiting sender's last queued datagram asks for its
                // acknowledgement at once (urge.rs)
                let tail = idx + 1 == p.tx[st].slots.len();
                let flags = if p.urgent && tail { F_ACK_NOW } else { 0 };
                Self::transmit_slot(&self.mac, p, (peer, st, idx), flags, now, out);
                p.tx[st].next_tx = p.tx[st].next_tx.wrapping_add(1);
                self.stats.sent += 1;
                sent_data = true;
            }
            if p.tx[st].in_flight() > 0 && p.rto_at[st].is_none() {
                let t = now + p.rto;
                p.rto_at[st] = Some(t);
                self.next_timer = self.next_timer.min(t);
            }
            // data waiting for a window the receiver has closed: probe
            if p.tx[st].next_tx != p.tx[st].next_seq
                && p.tx[st].in_flight() == 0
                && !seq_lt(p.tx[st].next_tx, p.tx[st].limit)
                && p.rto_at[st].is_none()
            {
                let t = now + p.rto;
                p.rto_at[st] = Some(t);
                self.next_timer = self.next_timer.min(t);
            }
        }
        if sent_data {
            p.ack_at = None;
            p.spoke = now;
        }
        if let Gate::Pace(t) = held {
            // the driver comes back at `t` (poll_timeout), not before
            self.stats.paced += 1;
            if !p.paced {
                p.paced = true;
                self.paced.push(peer);
            }
            self.next_pace = self.next_pace.min(t);
        }
        if p.urgent {
            // all its data had left unasked: one ping asks (urge.rs)
            p.urgent = false;
            if !p.asked && (p.tx[0].in_flight() > 0 || p.tx[1].in_flight() > 0) {
                p.ping = true;
            }
        }
        let due = p.ack_at.is_some_and(|t| t <= now);
        if due || p.ping {
            let mut b = [0u8; OVERHEAD];
            let acks = Self::acks_of(p);
            p.tx_pn += 1;
            Header {
                kind: KIND_CONTROL,
                flags: if p.ping { F_ACK_NOW } else { 0 },
                body_len: 0,
                src: me,
                dst: peer,
                seq: 0,
                acks,
                ts: us(now),
                echo: p.echo,
                hold: hold_of(p, now),
                pn: p.tx_pn,
            }
            .write(&mut b);
            self.mac.seal(&mut b);
            out(peer, &b);
            self.stats.sent += 1;
            self.stats.controls += 1;
            p.asked |= p.ping;
            p.ack_at = None;
            p.ping = false;
            p.spoke = now;
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: a timer,
    /// or the earliest time a datagram the congestion controller paced may
    /// leave (then `handle_timeout` and `poll_transmit` send it).
    pub fn poll_timeout(&self) -> u64 {
        self.next_timer.min(self.next_pace)
    }

    /// The earliest time a datagram the congestion controller paced may
    /// leave, if one waits (also in [`poll_timeout`](Self::poll_timeout)):
    /// a driver that sleeps wakes by then.
    pub fn poll_pace(&self) -> Option<u64> {
        (self.next_pace != u64::MAX).then_some(self.next_pace)
    }

    /// Run the timers due at `now`: paced datagrams, delayed
    /// acknowledgements, retransmissions, keepalives, dead peers.
    pub fn handle_timeout(&mut self, now: u64) {
        if now >= self.next_pace {
            self.release_paced(now);
        }
        if now < self.next_timer {
            return;
        }
        let cfg = self.cfg;
        let mut next = now.saturating_add(cfg.keepalive);
        for k in 0..self.peers.contacted() {
            let i = self.peers.contacted_at(k) as usize;
            let p = &mut self.peers[i];
            if p.dead {
                continue;
            }
            let mut dirty = false;
            if let Some(t) = p.ack_at {
                if t <= now {
                    dirty = true;
                } else {
                    next = next.min(t);
                }
            }
            for st in 0..2 {
                if let Some(t) = p.rto_at[st] {
                    if t <= now {
                        p.rto_at[st] = None;
                        self.stats.timeouts += 1;
                        p.backoff = (p.backoff + 1).min(16);
                        p.rto = (p.rto * 2).min(cfg.max_rto);
                        let lost = p.tx[st].mark_lost(true, now);
                        p.cc.on_left(lost.flight);
                        if lost.marked == 0 {
                            // nothing in flight: a closed window; ask
                            p.ping = true;
                        } else {
                            p.cc.on_timeout(now, us(now), st, p.tx[st].next_tx);
                        }
                        dirty = true;
                    } else {
                        next = next.min(t);
                    }
                }
            }
            // a rank is never silent to itself
            if p.active && i as u32 != self.me {
                let silent = now.saturating_sub(p.heard);
                if silent >= cfg.peer_timeout {
                    p.dead = true;
                    self.events.push_back(Event::PeerDead {
                        peer: i as u32,
                        silent,
                    });
                    for s in 0..2 {
                        p.rx[s].drain(&mut self.pool);
                    }
                    continue;
                }
                if silent >= cfg.keepalive && now.saturating_sub(p.spoke) >= cfg.keepalive / 4 {
                    p.ping = true;
                    dirty = true;
                }
                let keepalive_at = p.heard.saturating_add(cfg.keepalive);
                if now < keepalive_at {
                    next = next.min(keepalive_at);
                } else {
                    // silent past the keepalive: the next ping (a quarter
                    // of it after the last datagram to it; a ping not yet
                    // sent goes out at the next transmit) or the end of
                    // its time, not a timer in the past firing at once
                    // until then
                    let ping_at = p.spoke.saturating_add(cfg.keepalive / 4).max(now + 1);
                    next = next
                        .min(ping_at)
                        .min(p.heard.saturating_add(cfg.peer_timeout));
                }
            }
            if dirty {
                self.mark_dirty(i as u32);
            }
        }
        self.next_timer = next.max(now + 1);
    }

    /// Peers whose pacing time came are marked for transmission.
    fn release_paced(&mut self, now: u64) {
        let list = std::mem::take(&mut self.paced);
        let mut next = u64::MAX;
        for &i in &list {
            let p = &mut self.peers[i as usize];
            match p.cc.gate(now) {
                Gate::Pace(t) if !p.dead => {
                    next = next.min(t);
                    self.paced.push(i);
                }
                _ => {
                    p.paced = false;
                    if !p.dead {
                        self.mark_dirty(i);
                    }
                }
            }
        }
        self.next_pace = next;
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

/// The retransmission timeout the RTT estimate gives (no back-off).
fn base_rto(p: &Peer, cfg: &ProtoConfig) -> u64 {
    if p.srtt == 0 {
        cfg.initial_rto
    } else {
        (p.srtt + 4 * p.rttvar).clamp(cfg.min_rto, cfg.max_rto)
    }
}

fn rtt_sample(p: &mut Peer, cfg: &ProtoConfig, rtt: u64) {
    if p.srtt == 0 {
        p.srtt = rtt;
        p.rttvar = rtt / 2;
    } else {
        let d = p.srtt.abs_diff(rtt);
        p.rttvar = (3 * p.rttvar + d) / 4;
        p.srtt = (7 * p.srtt + rtt) / 8;
    }
    p.rto = base_rto(p, cfg);
}

/// A time as the wire's microsecond clock (wrapping; never 0).
fn us(now: u64) -> u32 {
    ((now / 1000) as u32).max(1)
}

/// The hold time to report with the echo toward `p` at `now` (coded).
fn hold_of(p: &Peer, now: u64) -> u8 {
    if p.echo == 0 {
        0
    } else {
        hold::encode(now.saturating_sub(p.echo_at))
    }
}

/// Stamp the acknowledgement state, seal, hand out.
fn emit(
    mac: &Mac,
    buf: &mut [u8],
    acks: [Ack; 2],
    (ts, (echo, hold), pn): (u32, (u32, u8), u64),
    (peer, flags): (u32, u8),
    out: &mut dyn FnMut(u32, &[u8]),
) {
    Header {
        flags,
        acks,
        ts,
        echo,
        hold,
        pn,
        ..Header::default()
    }
    .write_acks(buf);
    mac.seal(buf);
    out(peer, buf);
}

#[cfg(test)]
mod clock_step_tests;

#[cfg(test)]
mod ccundo_tests;

#[cfg(test)]
mod pn_unique_tests;

#[cfg(test)]
mod ccidle_tests;

#[cfg(test)]
mod unsplit_tests;

#[cfg(test)]
mod segsrc_tests;
