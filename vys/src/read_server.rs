//! The producer's read server: progress threads that serve consumers'
//! reads of the exported ring across hosts, without the producer
//! application taking part (the role RDMA hardware plays on InfiniBand).
//!
//! One UDP socket per thread, all bound to the address signals announce
//! (`SO_REUSEPORT` when there are several: the kernel keeps each
//! consumer on one thread; [`ReadServer::start_threads`]). A consumer opens a
//! session with the [`super::handshake`]; then it and the server speak the
//! UDP fabric's reliable protocol (sans I/O, the same state machine ranks
//! use) under the session's key. Each `READ` is answered by copying the
//! slot in the validated order ([`super::ring::snapshot_slot`]) and sending
//! it back; a `READV` ([`super::read_batch`]) asks for several slots at
//! once, each answered the same way. Everything a stranger can cost is bounded: sessions (least
//! recently confirmed evicted first when full, never-confirmed ones
//! before confirmed ones), replies queued per session (the session's
//! receive window closes behind them, so a greedy consumer throttles only
//! itself), and a session silent past the peer timeout is dropped.
//!
//! With the ring registered for RDMA, remote read only ([`RingExport`]),
//! the `WELCOME` says so; a consumer that then sends its queue pair inside
//! the session (`RDMA`, authentic under the session key) gets one of the
//! producer's connected to it, and the offer (`OFFER`); its reads then
//! bypass this thread entirely. One queue pair per session at most; the
//! session lives on as the reads' liveness channel, and the queue pair is
//! destroyed when the session ends.

use super::export::ExportedRing;
use super::handshake::{self, Welcome, HELLO_LEN, HELLO_MAGIC};
use super::rdma_export::RingExport;
use super::read_batch;
use super::read_proto::{
    self, MAX_CONTROL, MAX_READ, STATUS_OK, STATUS_OUT_OF_RING, STATUS_OVERWRITTEN, STATUS_REFUSED,
    T_DATA, T_OFFER, T_RDMA, T_READ,
};
use super::reply_buffers::ReplyBuffers;
use super::ring::{snapshot_slot, Snapshot};
use splitrt_runtime::fabric::frames::{OutMsg, Reassembler};
use splitrt_runtime::fabric::rdma::verbs::{QpEndpoint, QpId, Verbs};
use splitrt_runtime::fabric::udp::proto::{Event, Proto, Sent};
use splitrt_runtime::fabric::udp::wire::{HEADER, MAX_DATAGRAM, TAG};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sessions served at once at most (by all of a server's threads).
pub const MAX_SESSIONS: usize = 64;
/// Read-server threads of one producer at most.
pub const MAX_READ_THREADS: usize = 16;
/// The largest request payload reassembled: a control message's or a
/// full `READV`'s.
pub(crate) const MAX_REQUEST: usize = if read_batch::MAX_PAYLOAD > MAX_CONTROL {
    read_batch::MAX_PAYLOAD
} else {
    MAX_CONTROL
};
/// Replies queued per session at most (and bytes, whichever is reached
/// first; one reply is always allowed).
const MAX_QUEUED: usize = 64;
const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Bytes of emptied reply buffers a server thread keeps for reuse at
/// most (a session's queue of 64 slots up to 128 KiB each).
const SPARE_BYTES: usize = 8 << 20;

/// What the read server did, for reports and tests.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Sessions opened.
    pub sessions: AtomicU64,
    /// Reads served with data.
    pub reads: AtomicU64,
    /// Bytes of slots served.
    pub bytes: AtomicU64,
    /// Reads refused: not a slot of the ring.
    pub refused: AtomicU64,
    /// Reads answered "overwritten" without data (the tail had moved on).
    pub overwritten: AtomicU64,
    /// Datagrams dropped: no session, bad handshake, or not authentic.
    pub dropped: AtomicU64,
    /// Sessions closed because their consumer went silent or misbehaved.
    pub closed: AtomicU64,
    /// Sessions given a queue pair for RDMA reads.
    pub rdma_sessions: AtomicU64,
    /// Queue pairs asked for and not made (the device refused).
    pub rdma_refused: AtomicU64,
    /// Queue pairs open now.
    pub rdma_open: AtomicU64,
    /// The largest datagram sent (UDP payload, bytes): never more than
    /// the size agreed with each session.
    pub largest_datagram: AtomicU64,
    /// The most replies one session held queued at once (slot copies):
    /// never more than 64, however many reads one datagram asks for.
    pub queued_peak: AtomicU64,
}

/// A running read server; stops when dropped.
pub struct ReadServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    threads: Vec<JoinHandle<()>>,
}

struct Reply {
    id: u64,
    status: u64,
    landing: u64,
    slot: Vec<u8>,
    from: usize,
}

struct Session {
    consumer_nonce: [u8; 32],
    welcome: [u8; handshake::WELCOME_LEN],
    proto: Proto,
    reasm: Reassembler,
    replies: VecDeque<Reply>,
    queued_bytes: usize,
    /// Requests taken from a datagram but not served yet: one datagram
    /// may ask for more than the reply queue's room, and each is served
    /// (its slot copied) only when there is room, so the bound holds.
    /// At most one datagram's requests (taken only when empty).
    deferred: VecDeque<[u64; 5]>,
    /// An authentic datagram came (it holds the session key).
    confirmed: bool,
    last: u64,
    /// The producer's queue pair for this consumer's RDMA reads.
    qp: Option<QpId>,
    /// The consumer sent its queue pair (once per session at most).
    asked_rdma: bool,
    /// The answer to it, not yet wholly taken by the window.
    offer: Option<Offer>,
}

/// The server's answer to a consumer's queue pair (`OFFER`), being handed
/// to the session's protocol.
struct Offer {
    status: u64,
    /// The encoded [`RingOffer`](super::rdma_export::RingOffer), or
    /// nothing (refused).
    payload: Vec<u8>,
    /// Bytes of `payload` the protocol took.
    from: usize,
}

/// Hand what the window allows of a session's reply stream to its
/// protocol: the offer, and the replies in order. A message the protocol
/// took only part of (`Sent::Upto(k)`, `k` short of its payload) goes on
/// from `k` before any other starts on the stream (the consumer
/// reassembles one message at a time per stream); the offer goes before
/// the replies but never into the middle of one. Returns whether the
/// consumer is dead.
fn send_stream(s: &mut Session, now: u64, spare: &mut ReplyBuffers) -> bool {
    loop {
        if let Some(o) = &mut s.offer {
            if s.replies.front().is_none_or(|r| r.from == 0) {
                let words = [o.status];
                let m = OutMsg {
                    tag: T_OFFER,
                    words: &words,
                    payload: &o.payload,
                    deposit: None,
                };
                match s.proto.send(now, 1, 1, &m, o.from) {
                    Sent::Upto(n) if n == o.payload.len() => {
                        s.offer = None;
                        continue;
                    }
                    Sent::Upto(n) => {
                        o.from = n;
                        return false;
                    }
                    Sent::NoRoom => return false,
                    Sent::Dead => return true,
                }
            }
        }
        let Some(r) = s.replies.front_mut() else {
            return false;
        };
        let words = [r.id, r.status];
        let m = OutMsg {
            tag: T_DATA,
            words: &words,
            payload: &r.slot,
            deposit: (r.status == STATUS_OK).then_some(r.landing),
        };
        match s.proto.send(now, 1, 1, &m, r.from) {
            Sent::Upto(n) if n == r.slot.len() => {
                let r = s.replies.pop_front().expect("front");
                s.queued_bytes -= r.slot.len();
                spare.give(r.slot);
            }
            Sent::Upto(n) => {
                r.from = n;
                return false;
            }
            Sent::NoRoom => return false,
            Sent::Dead => return true,
        }
    }
}

struct Server {
    sock: UdpSocket,
    /// Declared before `ring`: deregistered before the ring can go.
    rdma: Option<RingExport<Box<dyn Verbs>>>,
    ring: Arc<ExportedRing>,
    producer: u64,
    instance: u64,
    key: [u8; 32],
    /// The largest datagram this server sends (a session's consumer may
    /// ask for smaller).
    datagram: usize,
    sessions: HashMap<SocketAddr, Session>,
    /// Sessions this thread serves at most (its share of
    /// [`MAX_SESSIONS`]).
    max_sessions: usize,
    stats: Arc<ServerStats>,
    t0: Instant,
    /// Emptied reply buffers for reuse (bounded as a session's queue).
    spare: ReplyBuffers,
    /// Datagrams of one session's round, sent together.
    out: Batch,
    /// Requests of one datagram (kept to reuse its allocation).
    reqs: Vec<[u64; 5]>,
}

impl ReadServer {
    /// Serve reads of `ring` (of producer `producer`, its instance
    /// `instance`, both told to every consumer that opens a session) on a UDP socket
    /// bound to `bind` (port 0: any), for consumers holding `key`; with
    /// `rdma`, also offer RDMA reads of the ring over that device. No
    /// datagram sent is larger than `datagram` bytes of UDP payload
    /// (checked: [`read_proto::check_datagram`]) nor than the one each
    /// consumer says it takes.
    pub fn start(
        bind: SocketAddr,
        ring: Arc<ExportedRing>,
        producer: u64,
        instance: u64,
        key: [u8; 32],
        rdma: Option<Box<dyn Verbs>>,
        datagram: usize,
    ) -> io::Result<ReadServer> {
        ReadServer::start_threads(bind, ring, producer, instance, key, rdma, datagram, 1)
    }

    /// [`start`](Self::start) with `threads` server threads (1..=
    /// [`MAX_READ_THREADS`]; 1 with `rdma`: the ring's registration and
    /// its queue pairs belong to one thread). Each thread has a socket of
    /// its own bound to the same address (`SO_REUSEPORT`, so only this
    /// user's processes can join it): the kernel hands each consumer's
    /// datagrams to one thread by their addresses, so a session lives on
    /// one thread, and the consumers of a producer are served in parallel.
    /// The threads share [`MAX_SESSIONS`] (each serves its share at most).
    ///
    /// ```no_run
    /// # use splitrt_vys::{export::ExportedRing, read_server::ReadServer, read_proto};
    /// # fn f(ring: std::sync::Arc<ExportedRing>) -> std::io::Result<()> {
    /// let s = ReadServer::start_threads(
    ///     "10.0.0.1:0".parse().unwrap(), ring, 7, 1, [0; 32], None,
    ///     read_proto::DEFAULT_DATAGRAM, 4,
    /// )?;
    /// println!("announce {}", s.addr());
    /// # Ok(()) }
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn start_threads(
        bind: SocketAddr,
        ring: Arc<ExportedRing>,
        producer: u64,
        instance: u64,
        key: [u8; 32],
        rdma: Option<Box<dyn Verbs>>,
        datagram: usize,
        threads: usize,
    ) -> io::Result<ReadServer> {
        let threads = if rdma.is_some() {
            1
        } else {
            threads.clamp(1, MAX_READ_THREADS)
        };
        let datagram = read_proto::check_datagram("the read server's datagram size", datagram)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let rdma = match rdma {
            // SAFETY: the export goes into `Server` beside the `ring` Arc,
            // declared before it, so it is dropped (deregistered) first.
            Some(v) => Some(unsafe { RingExport::new(v, ring.words()) }.map_err(|e| {
                io::Error::other(format!(
                    "vys producer: registering the ring for RDMA reads failed: {e}"
                ))
            })?),
            None => None,
        };
        // every socket bound before the address is announced, so the
        // kernel's choice of thread for a consumer never changes
        let first = server_socket(bind, threads > 1)?;
        let addr = first.local_addr()?;
        let mut socks = vec![first];
        for _ in 1..threads {
            socks.push(server_socket(addr, true)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let mut rdma = rdma;
        let mut out = ReadServer {
            addr,
            stop: stop.clone(),
            stats: stats.clone(),
            threads: Vec::new(),
        };
        for (i, sock) in socks.into_iter().enumerate() {
            let mut server = Server {
                sock,
                rdma: rdma.take(),
                ring: ring.clone(),
                producer,
                instance,
                key,
                datagram,
                sessions: HashMap::new(),
                max_sessions: MAX_SESSIONS.div_ceil(threads),
                stats: stats.clone(),
                t0: Instant::now(),
                spare: ReplyBuffers::new(MAX_QUEUED, SPARE_BYTES),
                out: Batch::default(),
                reqs: Vec::new(),
            };
            let st = stop.clone();
            // a thread that cannot start stops those started (`out` drops)
            out.threads.push(
                std::thread::Builder::new()
                    .name(format!("vys-read-server-{i}"))
                    .spawn(move || server.run(&st))?,
            );
        }
        Ok(out)
    }

    /// The address consumers send to (announced in signals).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }
}

impl Drop for ReadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Server {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.sock);
        while !stop.load(Ordering::Acquire) {
            let wait = self.next_wait();
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = wait.as_micros().div_ceil(1000).min(20) as libc::c_int;
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut p, 1, ms) };
            // whatever is there (the socket is non-blocking)
            for _ in 0..256 {
                match self.sock.recv_from(&mut buf) {
                    Ok((n, from)) => self.datagram(&buf[..n], from),
                    Err(_) => break,
                }
            }
            self.progress();
        }
    }

    fn next_wait(&self) -> Duration {
        let now = self.now();
        let mut due = now + 20_000_000;
        for s in self.sessions.values() {
            due = due.min(s.proto.poll_timeout());
            if !s.replies.is_empty() || !s.deferred.is_empty() {
                due = now;
            }
        }
        Duration::from_nanos(due.saturating_sub(now))
    }

    fn datagram(&mut self, d: &[u8], from: SocketAddr) {
        let now = self.now();
        if d.len() == HELLO_LEN && d[0..2] == HELLO_MAGIC.to_le_bytes() {
            self.hello(d, from, now);
            return;
        }
        let Some(s) = self.sessions.get_mut(&from) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let before = s.proto.stats().received;
        let mut b = s.proto.buffer();
        b.extend_from_slice(d);
        if let Some(b) = s.proto.handle_datagram(now, b) {
            s.proto.recycle(b);
        }
        if s.proto.stats().received > before {
            s.confirmed = true;
            s.last = now;
        } else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn hello(&mut self, d: &[u8], from: SocketAddr, now: u64) {
        let Some(h) = handshake::read_hello(&self.key, d) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let cn = h.consumer_nonce;
        if let Some(s) = self.sessions.get(&from) {
            if s.consumer_nonce == cn {
                // our WELCOME was lost: the same answer again
                let _ = self.sock.send_to(&s.welcome, from);
            } else {
                // a confirmed session is not replaced by a HELLO (that
                // could be replayed); it ends by silence
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if self.sessions.len() >= self.max_sessions && !self.evict_one() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok(sn) = handshake::nonce() else { return };
        // never larger than the consumer takes (read_hello bounds it)
        let datagram = self.datagram.min(h.datagram as usize);
        let w = handshake::welcome(
            &self.key,
            &cn,
            &Welcome {
                server_nonce: sn,
                producer: self.producer,
                instance: self.instance,
                ring_bytes: self.ring.len() as u64,
                // offered inside the session, to a holder of its key
                rdma: h.rdma && self.rdma.is_some(),
                datagram: datagram as u32,
            },
        );
        let skey = handshake::session_key(&self.key, &cn, &sn);
        let proto = Proto::new(0, 2, read_proto::session_config_for(datagram), skey, now);
        self.sessions.insert(
            from,
            Session {
                consumer_nonce: cn,
                welcome: w,
                proto,
                reasm: Reassembler::default(),
                replies: VecDeque::new(),
                queued_bytes: 0,
                deferred: VecDeque::new(),
                confirmed: false,
                last: now,
                qp: None,
                asked_rdma: false,
                offer: None,
            },
        );
        self.stats.sessions.fetch_add(1, Ordering::Relaxed);
        let _ = self.sock.send_to(&w, from);
    }

    /// Make room: the oldest unconfirmed session, else none (confirmed
    /// sessions end only by silence).
    fn evict_one(&mut self) -> bool {
        let victim = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.confirmed)
            .min_by_key(|(_, s)| s.last)
            .map(|(a, _)| *a);
        match victim {
            Some(a) => {
                self.close(&a);
                true
            }
            None => false,
        }
    }

    /// End the session of `a`, and its queue pair with it.
    fn close(&mut self, a: &SocketAddr) {
        if let Some(s) = self.sessions.remove(a) {
            self.stats.closed.fetch_add(1, Ordering::Relaxed);
            if let (Some(x), Some(qp)) = (&mut self.rdma, s.qp) {
                x.release(qp);
                self.stats
                    .rdma_open
                    .store(x.consumers() as u64, Ordering::Relaxed);
            }
        }
    }

    fn progress(&mut self) {
        let now = self.now();
        let mut gone = Vec::new();
        let sock = &self.sock;
        let ring = &self.ring;
        let stats = &self.stats;
        let spare = &mut self.spare;
        let out = &mut self.out;
        let reqs = &mut self.reqs;
        let rdma = &mut self.rdma;
        for (addr, s) in self.sessions.iter_mut() {
            let mut bad = false;
            let mut asks: Option<QpEndpoint> = None;
            // serve the requests taken while there is room to queue their
            // replies; take a datagram's requests only when all are served
            // (a datagram may ask for more than the room: they wait here,
            // never holding a copy of their slot)
            let room = |s: &Session| {
                s.replies.len() < MAX_QUEUED
                    && (s.replies.is_empty() || s.queued_bytes < MAX_QUEUED_BYTES)
            };
            loop {
                while room(s) {
                    let Some([id, offset, stride, landing, seq]) = s.deferred.pop_front() else {
                        break;
                    };
                    let mut slot = spare.take();
                    let status = match usize::try_from(stride) {
                        Ok(st) if st <= MAX_READ => {
                            match snapshot_slot(ring.words(), offset, st, seq, &mut slot) {
                                Snapshot::Copied => STATUS_OK,
                                Snapshot::Overwritten => STATUS_OVERWRITTEN,
                                Snapshot::OutOfRing => STATUS_OUT_OF_RING,
                            }
                        }
                        _ => STATUS_OUT_OF_RING,
                    };
                    match status {
                        STATUS_OK => {
                            stats.reads.fetch_add(1, Ordering::Relaxed);
                            stats.bytes.fetch_add(stride, Ordering::Relaxed);
                        }
                        STATUS_OVERWRITTEN => {
                            stats.overwritten.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            slot.clear();
                        }
                    }
                    s.queued_bytes += slot.len();
                    s.replies.push_back(Reply {
                        id,
                        status,
                        landing,
                        slot,
                        from: 0,
                    });
                    stats
                        .queued_peak
                        .fetch_max(s.replies.len() as u64, Ordering::Relaxed);
                }
                if !s.deferred.is_empty() || !room(s) {
                    break;
                }
                let Some((_, d)) = s.proto.next_ready(0) else {
                    break;
                };
                let body = &d[HEADER..d.len() - TAG];
                reqs.clear();
                let mut junk = false;
                let r = s
                    .reasm
                    .feed(1, body, MAX_REQUEST, &mut Vec::new(), &mut |m| {
                        if m.tag == T_READ && m.words.len() == 5 && m.payload.is_empty() {
                            reqs.push([m.words[0], m.words[1], m.words[2], m.words[3], m.words[4]]);
                        } else if m.tag == read_batch::T_READV {
                            // bounded and checked; a malformed one ends
                            // the session
                            junk |= !read_batch::decode(m.words, m.payload, reqs);
                        } else if m.tag == T_RDMA && m.words.is_empty() && asks.is_none() {
                            match QpEndpoint::decode(m.payload) {
                                Some(e) => asks = Some(e),
                                None => junk = true,
                            }
                        } else {
                            junk = true;
                        }
                    });
                s.proto.recycle(d);
                if r.is_err() || junk {
                    bad = true;
                    break;
                }
                s.deferred.extend(reqs.iter().copied());
            }
            // a queue pair asked for: once per session, only if offered
            if let Some(consumer) = asks.take() {
                match rdma.as_mut() {
                    Some(x) if !s.asked_rdma => {
                        s.asked_rdma = true;
                        s.offer = Some(match x.accept(&consumer) {
                            Ok((qp, offer)) => {
                                s.qp = Some(qp);
                                stats.rdma_sessions.fetch_add(1, Ordering::Relaxed);
                                stats
                                    .rdma_open
                                    .store(x.consumers() as u64, Ordering::Relaxed);
                                Offer {
                                    status: STATUS_OK,
                                    payload: offer.encode().to_vec(),
                                    from: 0,
                                }
                            }
                            Err(_) => {
                                // reads then come over the session instead
                                stats.rdma_refused.fetch_add(1, Ordering::Relaxed);
                                Offer {
                                    status: STATUS_REFUSED,
                                    payload: Vec::new(),
                                    from: 0,
                                }
                            }
                        });
                    }
                    // asked twice, or never offered: a misbehaving consumer
                    _ => bad = true,
                }
            }
            bad |= send_stream(s, now, spare);
            if now >= s.proto.poll_timeout() {
                s.proto.handle_timeout(now);
            }
            while let Some(Event::PeerDead { .. }) = s.proto.poll_event() {
                bad = true;
            }
            s.proto.poll_transmit(now, true, &mut |_, b| out.push(b));
            let largest = out.send_to(sock, addr);
            stats
                .largest_datagram
                .fetch_max(largest as u64, Ordering::Relaxed);
            if !s.confirmed && now.saturating_sub(s.last) > 5_000_000_000 {
                bad = true;
            }
            if bad {
                gone.push(*addr);
            }
        }
        for a in gone {
            self.close(&a);
        }
        if let Some(x) = &mut self.rdma {
            let _ = x.poll();
        }
    }
}

#[cfg(test)]
mod offer_tests;

/// A server thread's socket bound to `bind` (with `SO_REUSEPORT` if
/// `shared`: several threads' sockets on one address), non-blocking,
/// with 8 MiB buffers.
fn server_socket(bind: SocketAddr, shared: bool) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(bind),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if shared {
        s.set_reuse_port(true)?;
    }
    s.bind(&bind.into())?;
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    Ok(s.into())
}

/// Datagrams to one address, sent by as few system calls as the kernel
/// allows: runs of equal-sized datagrams by one `sendmsg` each with UDP
/// segmentation offload (`UDP_SEGMENT`: the kernel, or the network card,
/// cuts the run into those very datagrams; no IP fragmentation), the rest
/// (and every datagram if the kernel refuses segmentation offload) by
/// `sendmmsg`, 64 per call.
struct Batch {
    bytes: Vec<u8>,
    /// Where each datagram ends in `bytes`.
    ends: Vec<usize>,
    /// Segmentation offload works here (until the kernel refuses it).
    gso: bool,
}

impl Default for Batch {
    fn default() -> Batch {
        Batch {
            bytes: Vec::new(),
            ends: Vec::new(),
            gso: true,
        }
    }
}

/// Datagrams per `sendmmsg` call, and per offloaded run, at most.
const BATCH: usize = 64;
/// Bytes of one offloaded run at most (one UDP datagram's worth).
const GSO_BYTES: usize = 65_507;

impl Batch {
    fn push(&mut self, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.ends.push(self.bytes.len());
    }

    /// Send every datagram to `to` (one the kernel refuses is dropped,
    /// as a lost datagram: the protocol sends it again) and empty the
    /// batch; returns the largest datagram's length.
    fn send_to(&mut self, sock: &UdpSocket, to: &SocketAddr) -> usize {
        let addr = socket2::SockAddr::from(*to);
        let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
        let mut largest = 0;
        let mut begin = 0;
        let mut i = 0;
        // datagrams [single_from, i) wait for sendmmsg
        let mut single_from = 0;
        while i < self.ends.len() {
            let seg = self.ends[i] - begin;
            largest = largest.max(seg);
            // the run: datagrams of `seg` bytes, the last maybe shorter
            let mut j = i + 1;
            while self.gso && j < self.ends.len() && j - i < BATCH {
                let len = self.ends[j] - self.ends[j - 1];
                if len > seg || self.ends[j] - begin > GSO_BYTES {
                    break;
                }
                j += 1;
                if len < seg {
                    break;
                }
            }
            if j - i >= 2 {
                self.mmsg(fd, &addr, single_from, i);
                if self.offload(fd, &addr, begin, self.ends[j - 1], seg) {
                    single_from = j;
                } else {
                    // not offloaded: these go by sendmmsg, and from now on
                    // every datagram does
                    self.gso = false;
                    single_from = i;
                }
            }
            begin = self.ends[j - 1];
            i = j;
        }
        self.mmsg(fd, &addr, single_from, self.ends.len());
        self.bytes.clear();
        self.ends.clear();
        largest
    }

    /// Send `bytes[from..to]` as datagrams of `seg` bytes (the last maybe
    /// shorter) by one `sendmsg` with `UDP_SEGMENT`; `false` if the
    /// kernel refuses segmentation offload (nothing was sent).
    fn offload(
        &self,
        fd: std::os::fd::RawFd,
        addr: &socket2::SockAddr,
        from: usize,
        to: usize,
        seg: usize,
    ) -> bool {
        let mut iov = libc::iovec {
            iov_base: self.bytes[from..to].as_ptr() as *mut libc::c_void,
            iov_len: to - from,
        };
        // room for one cmsg with a u16, aligned for cmsghdr
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = addr.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = addr.len();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
        debug_assert!(space <= std::mem::size_of_val(&control));
        msg.msg_controllen = space;
        // SAFETY: `msg` has a control buffer of `space` bytes, enough for
        // one header: the first header is inside it.
        let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        if c.is_null() {
            return false;
        }
        // SAFETY: CMSG_LEN only computes a size.
        let len = unsafe { libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) } as usize;
        // SAFETY: `c` points to the first header, inside `control`,
        // aligned (u64 array) and ours alone.
        unsafe {
            *c = libc::cmsghdr {
                cmsg_len: len,
                cmsg_level: libc::SOL_UDP,
                cmsg_type: libc::UDP_SEGMENT,
            }
        };
        // SAFETY: the header's data lies inside `control` (`space` bytes
        // hold the header and a u16).
        let data = unsafe { libc::CMSG_DATA(c) } as *mut u16;
        // SAFETY: `data` points to 2 bytes inside `control`, maybe not
        // 2-aligned: written unaligned.
        unsafe { data.write_unaligned(seg as u16) };
        // SAFETY: `msg` points to `iov` (into `self.bytes`), `addr` and
        // `control`, all alive until the call returns; the kernel only
        // reads them.
        let n = unsafe { libc::sendmsg(fd, &msg, 0) };
        if n >= 0 {
            return true;
        }
        // refused for want of offload: EIO (the device), EINVAL,
        // ENOPROTOOPT, EOPNOTSUPP; anything else (a full buffer) loses
        // the run as the network would
        !matches!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
        )
    }

    /// Send datagrams `from..to` of the batch by `sendmmsg`.
    fn mmsg(&self, fd: std::os::fd::RawFd, addr: &socket2::SockAddr, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let mut begin = if from == 0 { 0 } else { self.ends[from - 1] };
        for chunk in self.ends[from..to].chunks(BATCH) {
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; BATCH];
            for (v, &end) in iov.iter_mut().zip(chunk) {
                v.iov_base = self.bytes[begin..end].as_ptr() as *mut libc::c_void;
                v.iov_len = end - begin;
                begin = end;
            }
            // SAFETY: mmsghdr is plain data; all zeroes is a valid value.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                m.msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_namelen = addr.len();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            let mut sent = 0;
            while sent < chunk.len() {
                let rest = msgs[sent..].as_mut_ptr();
                // SAFETY: `msgs[sent..chunk.len()]` are initialised headers
                // whose name points into `addr` and whose one iovec each
                // points into `self.bytes`, all alive and unmoved until
                // the call returns; the kernel only reads them.
                let n =
                    unsafe { libc::sendmmsg(fd, rest, (chunk.len() - sent) as libc::c_uint, 0) };
                if n <= 0 {
                    // the first of the rest refused (a full buffer, an
                    // error from the network): dropped, the rest tried
                    sent += 1;
                } else {
                    sent += n as usize;
                }
            }
        }
    }
}
