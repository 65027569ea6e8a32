//! Reading several datagrams with one system call (`recvmmsg(2)`).
//!
//! The driver used to read one datagram per `recv` and learn that the
//! socket was empty from one more `recv` failing with `EAGAIN`: a poll
//! that found k datagrams cost k + 1 system calls (a bulk receiver, which
//! usually finds one 64 KiB datagram per poll, paid two per datagram).
//! One `recvmmsg` reads up to [`SLOTS`] datagrams, and a batch shorter
//! than asked for says the queue is empty, so such a poll costs one call.
//!
//! Each slot is a buffer of [`MAX_DATAGRAM`] bytes (the largest UDP
//! payload over IPv4) and reads that much at most, whatever the buffer's
//! capacity; a longer datagram (IPv6 allows 65527 B) is truncated by the
//! kernel (`MSG_TRUNC`) and comes out empty, which the protocol rejects
//! as implausible, so no datagram is ever delivered cut short, and none
//! delivered longer because its slot's buffer happened to be larger.
//! A slot whose datagram the
//! caller keeps is refilled with a buffer it hands back, or a new one.
//! [`SLOTS`] buffers and up to [`SLOTS`] spares (buffers handed back
//! while every slot had one) are the bound on what this reader holds:
//! 2 x [`SLOTS`].
//!
//! With arrival stamping on (`stamp.rs`, congestion control), each slot
//! also has its own control buffer in the `mmsghdr` array, and the
//! kernel's `SCM_TIMESTAMPNS` for each datagram is parsed out of it with
//! the same bounds checks as the single stamped `recvmsg`
//! ([`stamp::stamp_of`]): a batch gives each datagram's time in the
//! socket ([`waited`](RecvBatch::waited)), for one realtime clock reading
//! per batch, and its arrival on the monotonic clock
//! ([`arrived`](RecvBatch::arrived), against a monotonic reading taken
//! with that realtime one).

use super::stamp::{self, CONTROL_LEN};
use super::wire::MAX_DATAGRAM;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Datagrams read per system call at most.
pub(super) const SLOTS: usize = 8;

/// The receive buffers of one socket.
pub(super) struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    /// Each slot's control data (arrival stamps), when stamping.
    control: Box<[Control; SLOTS]>,
    /// How long (ns) each datagram of the last batch waited in the
    /// socket, if it was stamped.
    waited: [Option<u64>; SLOTS],
    /// The monotonic clock when those ages were measured (read together
    /// with the realtime clock: [`stamp::clocks`]).
    read_at: Option<std::time::Instant>,
    /// Buffers of [`MAX_DATAGRAM`] bytes allocated so far (see
    /// [`give`](Self::give)).
    allocs: u64,
    /// Buffers of [`MAX_DATAGRAM`] bytes handed back while every slot
    /// had one, for the next slots left empty (see [`give`](Self::give)):
    /// at most [`SLOTS`] (its capacity, reserved once).
    spares: Vec<Vec<u8>>,
    /// Slots whose buffer is shorter than [`MAX_DATAGRAM`] (none yet, or
    /// taken): `recv` looks at the slots' buffers only while one is.
    short: usize,
}

/// One slot's control buffer, aligned as a `cmsghdr` wants. Initialized
/// (zeroes) once: only the bytes the kernel reports writing are read.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Control([u8; CONTROL_LEN]);

impl RecvBatch {
    /// No buffer yet: each is made on first use.
    pub(super) fn new() -> RecvBatch {
        RecvBatch {
            bufs: (0..SLOTS).map(|_| Vec::new()).collect(),
            control: Box::new([Control([0; CONTROL_LEN]); SLOTS]),
            waited: [None; SLOTS],
            read_at: None,
            allocs: 0,
            spares: Vec::with_capacity(SLOTS),
            short: SLOTS,
        }
    }

    /// Read up to `max` (at most [`SLOTS`]) datagrams from `sock` without
    /// blocking; how many were read (0: none waited, or the call failed,
    /// e.g. an ICMP error queued on the socket: nothing to read). Datagram
    /// `i < n` is then [`take`](Self::take)n or [`peek`](Self::peek)ed.
    /// With `stamps` (the socket has `SO_TIMESTAMPNS` on), each slot gets
    /// a control buffer and [`waited`](Self::waited) gives each datagram's
    /// time in the socket.
    pub(super) fn recv(&mut self, sock: &UdpSocket, max: usize, stamps: bool) -> usize {
        self.waited = [None; SLOTS];
        self.read_at = None;
        let max = max.min(SLOTS);
        if max == 0 {
            return 0;
        }
        // SAFETY: iovec is plain data; all zeroes is a valid value.
        let mut iov: [libc::iovec; SLOTS] = unsafe { std::mem::zeroed() };
        // SAFETY: mmsghdr is plain data; all zeroes is a valid value
        // (no name, no control data).
        let mut msgs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
        if self.short > 0 {
            self.fill(max);
        }
        for i in 0..max {
            let b = &mut self.bufs[i];
            b.clear();
            // every slot holds MAX_DATAGRAM bytes (`fill`), some more (a
            // larger buffer handed back): each reads MAX_DATAGRAM at most,
            // so a longer datagram is truncated (and rejected) in all
            debug_assert!(b.capacity() >= MAX_DATAGRAM);
            let spare = b.spare_capacity_mut();
            iov[i].iov_base = spare.as_mut_ptr().cast();
            iov[i].iov_len = spare.len().min(MAX_DATAGRAM);
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            if stamps {
                msgs[i].msg_hdr.msg_control = self.control[i].0.as_mut_ptr().cast();
                msgs[i].msg_hdr.msg_controllen = CONTROL_LEN as _;
            }
        }
        // SAFETY: `msgs[..max]` are valid headers, each naming one iovec
        // of `iov` that points at the spare capacity (at most its length,
        // in `iov_len`) of its own buffer and (when stamping) its own CONTROL_LEN-byte
        // control buffer in `self.control`; all of them outlive the call,
        // which does not block (MSG_DONTWAIT) and has no timeout.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                max as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            return 0;
        }
        let n = (n as usize).min(max);
        for (b, m) in self.bufs.iter_mut().zip(&msgs).take(n) {
            // a datagram longer than the slot's MAX_DATAGRAM bytes is
            // truncated by the kernel: it comes out empty, which the
            // protocol rejects as implausible (never delivered cut short)
            let len = if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                0
            } else {
                (m.msg_len as usize).min(MAX_DATAGRAM).min(b.capacity())
            };
            // SAFETY: the kernel wrote `msg_len` bytes (at most the
            // iovec's length, at most this buffer's capacity: the buffer
            // was cleared) at the start of this buffer's spare capacity;
            // `len` is no more than that.
            unsafe { b.set_len(len) };
        }
        if stamps {
            let mut clocks = None;
            for (i, m) in msgs.iter().enumerate().take(n) {
                // the kernel's reported length, trusted only up to the
                // buffer's size; every byte of it is checked by stamp_of
                #[allow(clippy::unnecessary_cast)] // size_t on glibc, socklen_t on musl
                let clen = (m.msg_hdr.msg_controllen as usize).min(CONTROL_LEN);
                if let Some(s) = stamp::stamp_of(&self.control[i].0[..clen]) {
                    let (now, at) = *clocks.get_or_insert_with(stamp::clocks);
                    self.waited[i] = Some(stamp::age(s, now));
                    self.read_at = Some(at);
                }
            }
        }
        n
    }

    /// Give each of the first `max` slots short of a full buffer a
    /// spare, else a new one.
    #[cold]
    fn fill(&mut self, max: usize) {
        for b in self.bufs.iter_mut().take(max) {
            if b.capacity() < MAX_DATAGRAM {
                match self.spares.pop() {
                    Some(s) => *b = s,
                    None => {
                        *b = Vec::with_capacity(MAX_DATAGRAM);
                        self.allocs += 1;
                    }
                }
                self.short -= 1;
            }
        }
    }

    /// How long (ns) datagram `i` of the last [`recv`](Self::recv) waited
    /// in the socket, if the kernel stamped it.
    pub(super) fn waited(&self, i: usize) -> Option<u64> {
        self.waited.get(i).copied().flatten()
    }

    /// When datagram `i` of the last [`recv`](Self::recv) reached the
    /// socket, in ns since `t0` on the monotonic clock, if the kernel
    /// stamped it: its age against the monotonic reading taken with the
    /// realtime one, not against a clock reading from before the call (a
    /// rank descheduled in between would put the arrival before the send).
    pub(super) fn arrived(&self, i: usize, t0: std::time::Instant) -> Option<u64> {
        Some(stamp::arrival(self.waited(i)?, self.read_at?, t0))
    }

    /// Datagram `i` of the last [`recv`](Self::recv), left in place.
    pub(super) fn peek(&self, i: usize) -> &[u8] {
        &self.bufs[i]
    }

    /// Datagram `i` of the last [`recv`](Self::recv), taken out; its slot
    /// gets `refill` (a buffer of any capacity: one too small is replaced
    /// on the next `recv`).
    pub(super) fn take(&mut self, i: usize, refill: Vec<u8>) -> Vec<u8> {
        let was_short = self.bufs[i].capacity() < MAX_DATAGRAM;
        let now_short = refill.capacity() < MAX_DATAGRAM;
        self.short = self.short + now_short as usize - was_short as usize;
        std::mem::replace(&mut self.bufs[i], refill)
    }

    /// Hand back a buffer a taken datagram arrived in, once its reader is
    /// done with it: a slot left short of a full buffer by
    /// [`take`](Self::take) gets it, so the next [`recv`](Self::recv)
    /// reads into memory already mapped and warm instead of a new
    /// allocation (a fresh 64 KiB buffer per large datagram cost 8.3
    /// page faults per strided put, `perf stat -e page-faults` over the
    /// whole 2-rank job, almost all of them and their zeroing on the
    /// receiver inside `recvmmsg`, on the put's critical path; issue
    /// 25). When no slot wants it, it is kept as a spare, which the next
    /// slot left empty gets: datagrams read by one poll and delivered by
    /// a later one (the other channel's poll read them) leave their slots
    /// empty across a `recv`, which would otherwise allocate, one buffer
    /// per datagram so read. `Some` (the buffer back) when it is too
    /// small or [`SLOTS`] spares are kept already: at most 2 x [`SLOTS`]
    /// buffers.
    pub(super) fn give(&mut self, mut b: Vec<u8>) -> Option<Vec<u8>> {
        if b.capacity() < MAX_DATAGRAM {
            return Some(b);
        }
        b.clear();
        if self.short > 0 {
            if let Some(slot) = self.bufs.iter_mut().find(|s| s.capacity() < MAX_DATAGRAM) {
                *slot = b;
                self.short -= 1;
                return None;
            }
        }
        if self.spares.len() < SLOTS {
            self.spares.push(b);
            return None;
        }
        Some(b)
    }

    /// Buffers of [`MAX_DATAGRAM`] bytes this reader has allocated.
    #[cfg(test)]
    pub(super) fn allocs(&self) -> u64 {
        self.allocs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28 point 3: several datagrams of different sizes (the
    /// largest UDP payload among them) come out of one call whole and in
    /// order; a shorter batch than asked for means the queue is empty;
    /// an empty socket gives 0.
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn udpbulk_a_batch_comes_out_of_one_call_whole() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let mut b = RecvBatch::new();
        assert_eq!(b.recv(&rx, SLOTS, false), 0, "nothing sent yet");
        let sizes = [1usize, 64, 2047, MAX_DATAGRAM, 9000];
        for (k, &s) in sizes.iter().enumerate() {
            let d: Vec<u8> = (0..s).map(|i| (i * 31 + k) as u8).collect();
            tx.send_to(&d, to).unwrap();
        }
        // loopback delivers before send_to returns
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while got.len() < sizes.len() && t0.elapsed() < std::time::Duration::from_secs(10) {
            let n = b.recv(&rx, SLOTS, false);
            for i in 0..n {
                got.push(if i % 2 == 0 {
                    b.take(i, Vec::new())
                } else {
                    b.peek(i).to_vec()
                });
            }
            if n > 0 {
                assert!(n < SLOTS, "more read than sent");
            }
        }
        assert_eq!(got.len(), sizes.len());
        for (k, (d, &s)) in got.iter().zip(&sizes).enumerate() {
            assert_eq!(d.len(), s, "datagram {k}");
            assert!(d.iter().enumerate().all(|(i, &x)| x == (i * 31 + k) as u8));
        }
        assert_eq!(b.recv(&rx, SLOTS, false), 0, "drained");
    }

    /// Review of issue 25's strided put fix: after any sequence of
    /// `fill` (what `recv` does first), `take` (with refills of any
    /// capacity) and `give` (of buffers of any capacity), `short` counts
    /// exactly the slots short of a full buffer, every spare is an empty
    /// buffer of at least [`MAX_DATAGRAM`] bytes, there are at most
    /// [`SLOTS`] spares, and a filled slot holds a full buffer. Seeded
    /// and bounded; no socket, so it runs under Miri too (fewer steps).
    #[test]
    fn strided_udp_short_count_and_spares_stay_true() {
        let steps = if cfg!(miri) { 300 } else { 20_000 };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let cap = |c: u64| match c {
            0 => 0,
            1 => 100,
            2 => MAX_DATAGRAM - 1,
            3 => MAX_DATAGRAM,
            _ => MAX_DATAGRAM + 1000,
        };
        let mut b = RecvBatch::new();
        for step in 0..steps {
            match next(3) {
                0 => {
                    let max = 1 + next(SLOTS as u64) as usize;
                    b.fill(max);
                    for (i, s) in b.bufs.iter().take(max).enumerate() {
                        assert!(s.capacity() >= MAX_DATAGRAM, "step {step}: slot {i}");
                    }
                }
                1 => {
                    let i = next(SLOTS as u64) as usize;
                    let refill = Vec::with_capacity(cap(next(5)));
                    let _ = b.take(i, refill);
                }
                _ => {
                    let c = cap(next(5));
                    let mut v = Vec::with_capacity(c);
                    v.resize(c.min(3), 1);
                    if let Some(back) = b.give(v) {
                        assert!(
                            back.capacity() < MAX_DATAGRAM || b.spares.len() == SLOTS,
                            "step {step}: a full buffer refused while a spare was free"
                        );
                    }
                }
            }
            let short = b
                .bufs
                .iter()
                .filter(|s| s.capacity() < MAX_DATAGRAM)
                .count();
            assert_eq!(b.short, short, "step {step}");
            assert!(b.spares.len() <= SLOTS, "step {step}");
            assert!(
                b.spares
                    .iter()
                    .all(|s| s.capacity() >= MAX_DATAGRAM && s.is_empty()),
                "step {step}"
            );
        }
    }

    /// Review of issue 25's strided put fix: a slot's iovec was its
    /// buffer's whole capacity, and `give` takes any buffer of at least
    /// [`MAX_DATAGRAM`] bytes, so a larger buffer read a datagram over
    /// 65507 B (possible over IPv6) whole while a slot of exactly
    /// [`MAX_DATAGRAM`] bytes read its first 65507 B as if it were whole.
    /// Every slot reads at most [`MAX_DATAGRAM`] bytes, and a truncated
    /// datagram (`MSG_TRUNC`) comes out empty, which the protocol rejects
    /// as implausible: it is never delivered. A datagram of exactly
    /// [`MAX_DATAGRAM`] bytes still comes out whole.
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn strided_udp_a_datagram_too_large_is_never_delivered() {
        // (a machine without IPv6 loopback cannot send a datagram over
        // 65507 B: nothing to check there)
        let Ok(rx) = UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        let tx = UdpSocket::bind("[::1]:0").unwrap();
        let to = rx.local_addr().unwrap();
        let mut b = RecvBatch::new();
        let read_one = |b: &mut RecvBatch, size: usize| -> usize {
            tx.send_to(&vec![0x3cu8; size], to).unwrap();
            let t0 = std::time::Instant::now();
            let mut n = 0;
            while n == 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
                n = b.recv(&rx, 1, false);
            }
            assert_eq!(n, 1, "datagram of {size} B not read");
            b.peek(0).len()
        };
        let over = MAX_DATAGRAM + 13;
        // a slot of MAX_DATAGRAM bytes
        assert_eq!(read_one(&mut b, MAX_DATAGRAM), MAX_DATAGRAM);
        assert_eq!(read_one(&mut b, over), 0, "truncated, delivered");
        // a larger buffer handed back to slot 0
        let _ = b.take(0, Vec::new());
        assert!(b.give(Vec::with_capacity(MAX_DATAGRAM + 4096)).is_none());
        assert!(b.bufs[0].capacity() > MAX_DATAGRAM);
        assert_eq!(read_one(&mut b, over), 0, "longer than MAX_DATAGRAM");
        assert_eq!(read_one(&mut b, MAX_DATAGRAM), MAX_DATAGRAM);
        assert_eq!(read_one(&mut b, 100), 100);
    }

    /// With stamping on, every datagram of one `recvmmsg` batch comes with
    /// its own kernel arrival stamp (per-slot control buffers): each waited
    /// at least the 20 ms slept before the batch was read, and the
    /// payloads are whole. The kernel enables stamping system-wide in
    /// deferred work, so (as in `stamp.rs`'s test) a few bounded tries.
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn udpbulk_recv_batch_stamps_each_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        assert!(stamp::enable(&rx));
        let mut b = RecvBatch::new();
        let mut seen = Vec::new();
        for round in 0..50u8 {
            let sizes = [3usize, MAX_DATAGRAM, 100];
            for (k, &s) in sizes.iter().enumerate() {
                tx.send_to(&vec![round ^ k as u8; s], to).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut got = Vec::new();
            let t0 = std::time::Instant::now();
            while got.len() < sizes.len() && t0.elapsed() < std::time::Duration::from_secs(10) {
                let n = b.recv(&rx, SLOTS, true);
                for i in 0..n {
                    got.push((b.peek(i).to_vec(), b.waited(i)));
                }
            }
            assert_eq!(got.len(), sizes.len());
            for (k, ((d, _), &s)) in got.iter().zip(&sizes).enumerate() {
                assert_eq!(d.len(), s);
                assert!(d.iter().all(|&x| x == round ^ k as u8));
            }
            let w: Vec<u64> = got
                .iter()
                .map(|(_, w)| w.expect("a kernel stamp for every datagram"))
                .collect();
            assert!(w.iter().all(|&w| w < 10_000_000_000), "waited {w:?} ns");
            seen.push(w.clone());
            if w.iter().all(|&w| w >= 15_000_000) {
                break;
            }
        }
        assert!(
            seen.last()
                .is_some_and(|w| w.iter().all(|&w| w >= 15_000_000)),
            "no stamps on arrival: waited {seen:?} ns"
        );
        // stamping off: no stamps
        tx.send_to(b"plain", to).unwrap();
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while n == 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
            n = b.recv(&rx, SLOTS, false);
        }
        assert_eq!(n, 1);
        assert_eq!(b.waited(0), None);
    }

    /// A driver reads its clock once per poll (`now`), then reads the
    /// socket; when it is descheduled in between, a stamp turned into an
    /// age at the read and subtracted from that older `now` put the
    /// arrival before the datagram was even sent (the congestion
    /// controller took the negative round trip for a queue of 71 minutes).
    /// The arrival is taken against a monotonic reading made together with
    /// the realtime one: never before the send. (The 20 ms sleep is the
    /// descheduling being modelled, not a wait for an event.)
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn cc_arrival_is_not_before_the_send_after_a_stale_clock_reading() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        assert!(stamp::enable(&rx));
        // a driver's start, a while ago
        let t0 = std::time::Instant::now();
        let t0 = t0
            .checked_sub(std::time::Duration::from_secs(1))
            .unwrap_or(t0);
        let ns = |t: std::time::Instant| t.duration_since(t0).as_nanos() as u64;
        let mut b = RecvBatch::new();
        let mut seen = Vec::new();
        // stamping turns on system-wide in deferred work: bounded tries
        for round in 0..50u8 {
            let sent = ns(std::time::Instant::now());
            tx.send_to(&[round; 100], to).unwrap();
            // the poll's one clock reading, then the descheduling
            let now = ns(std::time::Instant::now());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let start = std::time::Instant::now();
            let mut n = 0;
            while n == 0 && start.elapsed() < std::time::Duration::from_secs(10) {
                n = b.recv(&rx, SLOTS, true);
            }
            assert_eq!(n, 1);
            let Some(w) = b.waited(0) else { continue };
            let arrived = b.arrived(0, t0).expect("a stamp").min(now);
            seen.push((w, sent, arrived));
            assert!(
                arrived + 1_000_000 >= sent,
                "arrived {arrived} ns, sent {sent} ns (waited {w} ns)"
            );
            if w >= 15_000_000 {
                return;
            }
        }
        panic!("no stamps on arrival: {seen:?}");
    }
}
