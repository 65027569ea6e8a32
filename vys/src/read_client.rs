//! A consumer's read session with one producer's read server across
//! hosts: the [`super::handshake`], then `READ` requests over the UDP
//! fabric's protocol, each reply deposited straight into the data buffer
//! the read was given (its landing place), a bounded number outstanding.
//!
//! Driven by its owner (the consumer's thread): [`RemoteRing::read`]
//! queues, [`RemoteRing::progress`] moves datagrams and hands back
//! finished reads; nothing here blocks but [`RemoteRing::connect`].

use super::handshake::{self, WELCOME_LEN};
use super::rdma_export::RingOffer;
use super::read_batch::{self, MAX_BATCH, T_READV};
use super::read_proto::{
    self, MAX_CONTROL, STATUS_OK, STATUS_OVERWRITTEN, T_DATA, T_OFFER, T_RDMA, T_READ,
};
use splitrt_runtime::fabric::frames::{OutMsg, Reassembler, Sink};
use splitrt_runtime::fabric::rdma::verbs::QpEndpoint;
use splitrt_runtime::fabric::udp::proto::{Event, Proto, Sent};
use splitrt_runtime::fabric::udp::wire::{HEADER, TAG};
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How a read ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    /// The slot is in the buffer (to be checked with
    /// [`super::ring::check_slot`]).
    Slot,
    /// The server found the slot already rewritten and sent nothing.
    Overwritten,
    /// The read failed.
    Failed(String),
}

/// A read that finished: its id, the buffer it was given back (the slot
/// in its first `stride` bytes for [`ReadResult::Slot`]), and how it ended.
pub struct Done {
    /// The id [`RemoteRing::read`] returned.
    pub id: u64,
    /// The buffer.
    pub buf: Vec<u8>,
    /// How it ended.
    pub result: ReadResult,
}

/// A read in flight, in its landing place.
struct Place {
    /// The read's id: a counter above [`PLACE_BITS`], the place below.
    id: u64,
    buf: Vec<u8>,
    /// Bytes the reply must bring.
    want: usize,
    since: Instant,
}

/// A `READV` of up to [`MAX_BATCH`] requests, being handed to the
/// protocol.
struct Batch {
    /// Requests in it.
    count: u64,
    payload: Vec<u8>,
    /// Bytes of `payload` the protocol took.
    from: usize,
}

/// Bits of a read id that name its landing place.
const PLACE_BITS: u32 = 16;

struct Landing {
    /// Bytes per landing place (the consumer's buffer size).
    stride: usize,
    places: Vec<Option<Place>>,
    /// Places with no read.
    free: Vec<usize>,
}

impl Sink for Landing {
    fn len(&self) -> usize {
        self.stride * self.places.len()
    }
    /// Bytes for a place with no read (a late reply to a read that was
    /// failed and replaced), or past what its read wants, are dropped:
    /// accepted, not written. Only a range outside the landing as a whole
    /// is refused.
    fn write(&mut self, off: usize, data: &[u8]) -> bool {
        if off.checked_add(data.len()).is_none_or(|e| e > self.len()) {
            return false;
        }
        let (i, at) = (off / self.stride, off % self.stride);
        if let Some(Some(p)) = self.places.get_mut(i) {
            if at + data.len() <= p.want {
                p.buf[at..at + data.len()].copy_from_slice(data);
            }
        }
        true
    }
}

/// A read session with one producer's read server.
pub struct RemoteRing {
    sock: UdpSocket,
    proto: Proto,
    reasm: Reassembler,
    landing: Landing,
    /// Requests not yet taken by the protocol (its window was full).
    unsent: VecDeque<[u64; 5]>,
    /// The `READV` being sent (taken from `unsent`), if the protocol took
    /// only part of it.
    batch: Option<Batch>,
    next_id: u64,
    /// Replies of one datagram (kept to reuse its allocation).
    got: Vec<(u64, u64, Option<u64>, usize)>,
    /// The late-read scan is next due then.
    late_check: Instant,
    t0: Instant,
    read_timeout: Duration,
    failed: Option<String>,
    rbuf: Vec<u8>,
    /// The producer the server answered for.
    pub producer: u64,
    /// Its instance (a consumer reads a signal only through a session
    /// with the instance that sent it).
    pub instance: u64,
    /// The largest datagram (UDP payload, bytes) the server said it sends
    /// in this session (larger ones are dropped unread).
    pub datagram: usize,
    /// Bytes of its ring.
    pub ring_bytes: u64,
    /// The server's offer of RDMA reads (if a queue pair was sent and
    /// the server made one).
    pub offer: Option<RingOffer>,
    /// Where asking for RDMA reads stands.
    rdma: Asking,
}

/// Where a session's request for RDMA reads stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asking {
    /// Not asked (not wanted, or not offered).
    No,
    /// The queue pair is to be sent: bytes of its encoding the protocol
    /// took (more than 0: the rest goes before anything else).
    Send(QpEndpoint, usize),
    /// Sent; the answer is awaited.
    Sent,
    /// Answered (an offer, or a refusal).
    Answered,
}

/// What the wait for the RDMA offer at connect came to: `None` to go on
/// (RDMA answered or never asked; a queue pair that never left is given up
/// and the session reads through the read server), else the error for the
/// caller, naming why: the session failed meanwhile (the server dead or
/// its answer malformed: `failed`), the queue pair could not be sent whole
/// (the server may yet make a queue pair this side would never use, and
/// reads behind a part of one would be misparsed: give the session up and
/// let the caller retry), or no offer came within `wait`.
fn offer_outcome(
    rdma: &Asking,
    failed: Option<&str>,
    addr: impl std::fmt::Display,
    wait: Duration,
) -> Option<io::Error> {
    if let (Some(why), Asking::Send(..) | Asking::Sent) = (failed, rdma) {
        return Some(io::Error::other(format!(
            "the session with the vys read server at {addr} failed while it asked for RDMA \
             reads: {why}"
        )));
    }
    match rdma {
        Asking::Send(_, 0) | Asking::No | Asking::Answered => None,
        Asking::Send(..) => Some(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the queue pair for RDMA reads could not be sent whole to the vys read server at \
                 {addr} within {wait:?} (its window stayed shut)"
            ),
        )),
        Asking::Sent => Some(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the vys read server at {addr} offered no RDMA reads within {wait:?}"),
        )),
    }
}

/// The largest UDP payload the route of the connected `sock` to `addr`
/// carries unfragmented, if the kernel knows its MTU (`IP_MTU`,
/// `IPV6_MTU`: the interface's, or the path's once learned).
fn path_datagram(sock: &UdpSocket, addr: SocketAddr) -> Option<usize> {
    let (level, name, headers) = if addr.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU, 28)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU, 48)
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `mtu` and `len` are live and `len` is `mtu`'s size.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || mtu <= headers {
        return None;
    }
    Some((mtu - headers) as usize).filter(|&n| n >= read_proto::MIN_DATAGRAM)
}

/// Ask the kernel to coalesce runs of equal-sized datagrams from one
/// sender into one receive (`UDP_GRO`; where it cannot, datagrams come
/// one by one as before).
fn gro_on(sock: &UdpSocket) {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a live c_int and the length is its size.
    let _ = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Receive into `buf`: its length, and the size of the datagrams in it
/// if the kernel coalesced several (`UDP_GRO`), else `None`; a datagram
/// too large for `buf` is dropped (length 0).
fn recv_gro(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Option<usize>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points to `iov` (over `buf`) and `control`, both
    // alive and ours until the call returns.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        // larger than any datagram the server sends: dropped unread
        return Ok((0, None));
    }
    let mut seg = None;
    // SAFETY: `msg` is the header recvmsg filled; its control length is
    // within `control`.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header CMSG_FIRSTHDR / CMSG_NXTHDR returned,
        // inside `control` and aligned.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_UDP && h.cmsg_type == libc::UDP_GRO {
            // SAFETY: a UDP_GRO header carries an int, inside `control`.
            let data = unsafe { libc::CMSG_DATA(c) } as *const libc::c_int;
            // SAFETY: `data` points to an int inside `control`, maybe
            // not int-aligned: read unaligned.
            let v = unsafe { data.read_unaligned() };
            seg = usize::try_from(v).ok().filter(|&v| v > 0);
        }
        // SAFETY: `msg` and `c` as above; NXTHDR returns null past the end.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    Ok((n as usize, seg))
}

impl RemoteRing {
    /// Open a session with the read server at `addr`: up to three
    /// `HELLO`s, `wait` for the answer in all. `places` reads may be
    /// outstanding (1..=65536), each into a buffer of `stride` bytes.
    /// With `rdma` (this consumer's queue pair for the producer), if the
    /// server offers RDMA reads, the queue pair goes to it inside the
    /// session ([`read_proto::T_RDMA`]) and its answer is awaited (within
    /// `wait` in all): [`offer`](Self::offer) is then set, and the
    /// session stays open as the reads' liveness channel.
    ///
    /// `datagram` is the largest datagram (UDP payload, bytes) this side
    /// takes (checked: [`read_proto::check_datagram`]), lowered to what
    /// the route to `addr` carries unfragmented if the kernel knows
    /// (`IP_MTU` of the connected socket); the server sends no larger.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        addr: SocketAddr,
        key: &[u8; 32],
        places: usize,
        stride: usize,
        read_timeout: Duration,
        wait: Duration,
        rdma: Option<QpEndpoint>,
        datagram: usize,
    ) -> io::Result<RemoteRing> {
        let datagram = read_proto::check_datagram("the consumer's datagram size", datagram)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let bind: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0".parse().expect("address")
        } else {
            "[::]:0".parse().expect("address")
        };
        let sock = UdpSocket::bind(bind)?;
        sock.connect(addr)?;
        let s2 = socket2::SockRef::from(&sock);
        let _ = s2.set_recv_buffer_size(8 << 20);
        let ask = path_datagram(&sock, addr).map_or(datagram, |p| datagram.min(p));
        let cn = handshake::nonce()?;
        let hello = handshake::hello(
            key,
            &handshake::Hello {
                consumer_nonce: cn,
                rdma: rdma.is_some(),
                datagram: ask as u32,
            },
        );
        let t0 = Instant::now();
        // room for a datagram, or a run of them coalesced (UDP_GRO)
        let mut buf = vec![0u8; 1 << 16];
        let mut welcome = None;
        'tries: for _ in 0..3 {
            sock.send(&hello)?;
            let until = Instant::now() + wait / 3;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                sock.set_read_timeout(Some(left.max(Duration::from_micros(100))))?;
                match sock.recv(&mut buf) {
                    Ok(n) if n == WELCOME_LEN => {
                        match handshake::read_welcome(key, &cn, &buf[..n]) {
                            Some(w) if w.datagram as usize <= ask => {
                                welcome = Some(w);
                                break 'tries;
                            }
                            Some(w) => {
                                return Err(io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!(
                                        "the vys read server at {addr} would send datagrams \
                                         of {} B, larger than the {ask} B asked for",
                                        w.datagram
                                    ),
                                ))
                            }
                            None => {}
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!("no vys read server at {addr}"),
                        ))
                    }
                    Err(_) => {}
                }
            }
        }
        let w = welcome.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the vys read server at {addr} did not answer in {wait:?} (gone, or \
                     another stream key)"
                ),
            )
        })?;
        sock.set_nonblocking(true)?;
        gro_on(&sock);
        let skey = handshake::session_key(key, &cn, &w.server_nonce);
        let now = t0.elapsed().as_nanos() as u64;
        let mut ring = RemoteRing {
            sock,
            proto: Proto::new(
                1,
                2,
                read_proto::session_config_for(w.datagram as usize),
                skey,
                now,
            ),
            reasm: Reassembler::default(),
            landing: Landing {
                stride,
                places: (0..places.clamp(1, 1 << PLACE_BITS))
                    .map(|_| None)
                    .collect(),
                free: (0..places.clamp(1, 1 << PLACE_BITS)).rev().collect(),
            },
            unsent: VecDeque::new(),
            batch: None,
            next_id: 1,
            got: Vec::new(),
            late_check: Instant::now(),
            t0,
            read_timeout,
            failed: None,
            rbuf: buf,
            producer: w.producer,
            instance: w.instance,
            datagram: w.datagram as usize,
            ring_bytes: w.ring_bytes,
            offer: None,
            rdma: match rdma {
                Some(e) if w.rdma => Asking::Send(e, 0),
                _ => Asking::No,
            },
        };
        // the offer, within what is left of `wait`
        let mut done = Vec::new();
        while matches!(ring.rdma, Asking::Send(..) | Asking::Sent) && ring.failed.is_none() {
            let Some(left) = wait.checked_sub(t0.elapsed()) else {
                break;
            };
            let mut p = libc::pollfd {
                fd: ring.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.min(ring.next_due()).as_micros().div_ceil(1000) as libc::c_int;
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut p, 1, ms) };
            ring.progress(&mut done);
        }
        if let Some(e) = offer_outcome(&ring.rdma, ring.failed.as_deref(), addr, wait) {
            return Err(e);
        }
        if let Asking::Send(_, 0) = ring.rdma {
            // the queue pair never left: read through the session
            ring.rdma = Asking::No;
        }
        Ok(ring)
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The socket, for the owner's `poll`.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Why the session failed, if it did (every read then fails).
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Reads that may still be started.
    pub fn room(&self) -> usize {
        if self.failed.is_some() {
            0
        } else {
            self.landing.free.len()
        }
    }

    /// Whether no read is outstanding.
    pub fn idle(&self) -> bool {
        self.landing.free.len() == self.landing.places.len()
    }

    /// Read the slot of `stride` bytes at ring `offset` that should hold
    /// sequence id `seq` into `buf` (at least `stride` long, at most the
    /// landing stride). Returns the read's id, or the buffer back if no
    /// read can start now.
    pub fn read(
        &mut self,
        offset: u64,
        stride: usize,
        seq: u64,
        buf: Vec<u8>,
    ) -> Result<u64, Vec<u8>> {
        if self.failed.is_some() || buf.len() < stride || stride > self.landing.stride {
            return Err(buf);
        }
        let Some(place) = self.landing.free.pop() else {
            return Err(buf);
        };
        let id = (self.next_id << PLACE_BITS) | place as u64;
        self.next_id += 1;
        self.landing.places[place] = Some(Place {
            id,
            buf,
            want: stride,
            since: Instant::now(),
        });
        let landing = (place * self.landing.stride) as u64;
        self.unsent
            .push_back([id, offset, stride as u64, landing, seq]);
        Ok(id)
    }

    /// The place of read `id`, if that read is in flight.
    fn place_of(&self, id: u64) -> Option<usize> {
        let place = (id & ((1 << PLACE_BITS) - 1)) as usize;
        match self.landing.places.get(place) {
            Some(Some(p)) if p.id == id => Some(place),
            _ => None,
        }
    }

    fn finish(&mut self, place: usize, result: ReadResult, done: &mut Vec<Done>) {
        if let Some(p) = self.landing.places[place].take() {
            self.landing.free.push(place);
            done.push(Done {
                id: p.id,
                buf: p.buf,
                result,
            });
        }
    }

    /// Move datagrams both ways, run timers, and append finished reads to
    /// `done`.
    pub fn progress(&mut self, done: &mut Vec<Done>) {
        let now = self.now();
        for _ in 0..512 {
            let (n, seg) = match recv_gro(&self.sock, &mut self.rbuf) {
                Ok(r) => r,
                Err(_) => break,
            };
            // one datagram, or a run of `seg`-byte ones (the last maybe
            // shorter) the kernel coalesced
            for d in self.rbuf[..n].chunks(seg.unwrap_or(n).max(1)) {
                // larger than agreed: not the server's (it never sends so)
                if d.len() > self.datagram {
                    continue;
                }
                let mut b = self.proto.buffer();
                b.extend_from_slice(d);
                if let Some(b) = self.proto.handle_datagram(now, b) {
                    self.proto.recycle(b);
                }
            }
        }
        while let Some((_, d)) = self.proto.next_ready(1) {
            let body = &d[HEADER..d.len() - TAG];
            let mut got = std::mem::take(&mut self.got);
            got.clear();
            let mut answer: Option<Option<RingOffer>> = None;
            let r = self
                .reasm
                .feed(0, body, MAX_CONTROL, &mut self.landing, &mut |m| {
                    if m.tag == T_DATA && m.words.len() == 2 {
                        // a deposit arrives as its range (offset, length)
                        let (at, len) = match m.deposit {
                            Some(d) => (Some(d.offset), d.len),
                            None => (None, m.payload.len()),
                        };
                        got.push((m.words[0], m.words[1], at, len));
                    } else if m.tag == T_OFFER && m.words.len() == 1 && m.deposit.is_none() {
                        answer = Some(if m.words[0] == STATUS_OK {
                            RingOffer::decode(m.payload)
                        } else {
                            None
                        });
                    }
                });
            self.proto.recycle(d);
            if let (Some(a), Asking::Sent) = (answer, self.rdma) {
                // an offer of another ring than the WELCOME described is
                // refused: reads then go through the session
                self.offer = a.filter(|o| o.len == self.ring_bytes);
                self.rdma = Asking::Answered;
            }
            for &(id, status, deposit, len) in &got {
                let Some(place) = self.place_of(id) else {
                    continue;
                };
                let want = self.landing.places[place].as_ref().map_or(0, |p| p.want);
                let at = (place * self.landing.stride) as u64;
                let result = if status == STATUS_OK && deposit == Some(at) && len == want {
                    ReadResult::Slot
                } else if status == STATUS_OK {
                    ReadResult::Failed("the read server answered with another range".into())
                } else if status == STATUS_OVERWRITTEN {
                    ReadResult::Overwritten
                } else {
                    ReadResult::Failed(
                        "the producer says the range is not a slot of its ring".into(),
                    )
                };
                self.finish(place, result, done);
            }
            self.got = got;
            if let Err(e) = r {
                self.failed = Some(format!("malformed reply from the read server: {e}"));
            }
        }
        self.send_requests(now);
        if now >= self.proto.poll_timeout() {
            self.proto.handle_timeout(now);
        }
        while let Some(Event::PeerDead { silent, .. }) = self.proto.poll_event() {
            self.failed = Some(format!(
                "the read server has not answered for {:.1} s",
                silent as f64 / 1e9
            ));
        }
        let sock = &self.sock;
        self.proto.poll_transmit(now, true, &mut |_, b| {
            let _ = sock.send(b);
        });
        // reads that took too long (looked for every 10 ms), or all of them
        // once the session failed
        if self.failed.is_some() || Instant::now() >= self.late_check {
            self.late_check = Instant::now() + Duration::from_millis(10);
            for place in 0..self.landing.places.len() {
                let Some(p) = &self.landing.places[place] else {
                    continue;
                };
                if self.failed.is_none() && p.since.elapsed() <= self.read_timeout {
                    continue;
                }
                let id = p.id;
                let why = match &self.failed {
                    Some(f) => f.clone(),
                    None => format!("no answer in {:?}", self.read_timeout),
                };
                self.unsent.retain(|q| q[0] != id);
                self.finish(place, ReadResult::Failed(why), done);
            }
        }
    }

    /// Hand what the window allows of the request stream to the
    /// protocol: the queue pair (if it is to be sent), then the queued
    /// reads, up to [`MAX_BATCH`] per `READV` (a lone one as a `READ`: no
    /// batch to describe). A message the protocol took only part of
    /// (`Sent::Upto(k)`, `k` short of its payload) goes on from `k`
    /// before any other starts on the stream (the server reassembles one
    /// message at a time per stream); the queue pair goes first but never
    /// into the middle of a `READV`.
    fn send_requests(&mut self, now: u64) {
        while self.failed.is_none() {
            if let Asking::Send(e, from) = self.rdma {
                if self.batch.as_ref().is_none_or(|b| b.from == 0) {
                    let qp = e.encode();
                    let m = OutMsg {
                        tag: T_RDMA,
                        words: &[],
                        payload: &qp,
                        deposit: None,
                    };
                    match self.proto.send(now, 0, 0, &m, from) {
                        Sent::Upto(n) if n == qp.len() => {
                            self.rdma = Asking::Sent;
                            continue;
                        }
                        Sent::Upto(n) => self.rdma = Asking::Send(e, n),
                        Sent::NoRoom => {}
                        Sent::Dead => {
                            self.failed = Some("the read server stopped answering".into())
                        }
                    }
                    break;
                }
            }
            if self.batch.is_none() {
                let k = self.unsent.len().min(MAX_BATCH);
                if k == 0 {
                    break;
                }
                if k == 1 {
                    let q = self.unsent[0];
                    let m = OutMsg {
                        tag: T_READ,
                        words: &q,
                        payload: &[],
                        deposit: None,
                    };
                    match self.proto.send(now, 0, 0, &m, 0) {
                        // no payload: its one frame is taken whole or not
                        // at all (Upto(0) is the whole message)
                        Sent::Upto(_) => {
                            self.unsent.pop_front();
                            continue;
                        }
                        Sent::NoRoom => break,
                        Sent::Dead => {
                            self.failed = Some("the read server stopped answering".into());
                            break;
                        }
                    }
                }
                let (a, b) = self.unsent.as_slices();
                let mut payload = Vec::with_capacity(k * read_batch::ENTRY_BYTES);
                read_batch::encode(&a[..k.min(a.len())], &mut payload);
                read_batch::encode(&b[..k - k.min(a.len())], &mut payload);
                self.unsent.drain(..k);
                self.batch = Some(Batch {
                    count: k as u64,
                    payload,
                    from: 0,
                });
            }
            let b = self.batch.as_mut().expect("set above");
            let words = [b.count];
            let m = OutMsg {
                tag: T_READV,
                words: &words,
                payload: &b.payload,
                deposit: None,
            };
            match self.proto.send(now, 0, 0, &m, b.from) {
                Sent::Upto(n) if n == b.payload.len() => self.batch = None,
                Sent::Upto(n) => {
                    b.from = n;
                    break;
                }
                Sent::NoRoom => break,
                Sent::Dead => {
                    self.failed = Some("the read server stopped answering".into());
                }
            }
        }
    }

    /// Give the session up: every read in flight fails with `why` (each
    /// appended to `done` with its buffer) and no read starts again (the
    /// consumer drops a route whose producer restarted or went silent).
    pub fn abandon(&mut self, why: &str, done: &mut Vec<Done>) {
        if self.failed.is_none() {
            self.failed = Some(why.to_string());
        }
        self.unsent.clear();
        self.batch = None;
        for place in 0..self.landing.places.len() {
            self.finish(place, ReadResult::Failed(why.to_string()), done);
        }
    }

    /// When [`progress`](Self::progress) is next needed even if nothing
    /// arrives.
    pub fn next_due(&self) -> Duration {
        let now = self.now();
        let t = Duration::from_nanos(self.proto.poll_timeout().saturating_sub(now));
        if self.unsent.is_empty() && self.batch.is_none() && !matches!(self.rdma, Asking::Send(..))
        {
            t.min(Duration::from_millis(50))
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod qp_tests;
