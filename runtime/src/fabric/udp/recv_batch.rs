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
//! payload over IPv4, so nothing is truncated); a slot whose datagram the
//! caller keeps is refilled with a buffer it hands back, or a new one.
//! [`SLOTS`] buffers are the bound on what this reader holds.

use super::wire::MAX_DATAGRAM;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Datagrams read per system call at most.
pub(super) const SLOTS: usize = 8;

/// The receive buffers of one socket.
pub(super) struct RecvBatch {
    bufs: Vec<Vec<u8>>,
}

impl RecvBatch {
    /// No buffer yet: each is made on first use.
    pub(super) fn new() -> RecvBatch {
        RecvBatch {
            bufs: (0..SLOTS).map(|_| Vec::new()).collect(),
        }
    }

    /// Read up to `max` (at most [`SLOTS`]) datagrams from `sock` without
    /// blocking; how many were read (0: none waited, or the call failed,
    /// e.g. an ICMP error queued on the socket: nothing to read). Datagram
    /// `i < n` is then [`take`](Self::take)n or [`peek`](Self::peek)ed.
    pub(super) fn recv(&mut self, sock: &UdpSocket, max: usize) -> usize {
        let max = max.min(SLOTS);
        if max == 0 {
            return 0;
        }
        // SAFETY: iovec is plain data; all zeroes is a valid value.
        let mut iov: [libc::iovec; SLOTS] = unsafe { std::mem::zeroed() };
        // SAFETY: mmsghdr is plain data; all zeroes is a valid value
        // (no name, no control data).
        let mut msgs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
        for i in 0..max {
            let b = &mut self.bufs[i];
            b.clear();
            if b.capacity() < MAX_DATAGRAM {
                *b = Vec::with_capacity(MAX_DATAGRAM);
            }
            let spare = b.spare_capacity_mut();
            iov[i].iov_base = spare.as_mut_ptr().cast();
            iov[i].iov_len = MAX_DATAGRAM;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..max]` are valid headers, each naming one iovec
        // of `iov` that points at MAX_DATAGRAM bytes of spare capacity of
        // its own buffer; all of them outlive the call, which does not
        // block (MSG_DONTWAIT) and has no timeout.
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
            let len = (m.msg_len as usize).min(MAX_DATAGRAM);
            // SAFETY: the kernel wrote `msg_len` bytes (at most the
            // iovec's MAX_DATAGRAM, within the capacity) at the start of
            // this buffer's spare capacity.
            unsafe { b.set_len(len) };
        }
        n
    }

    /// Datagram `i` of the last [`recv`](Self::recv), left in place.
    pub(super) fn peek(&self, i: usize) -> &[u8] {
        &self.bufs[i]
    }

    /// Datagram `i` of the last [`recv`](Self::recv), taken out; its slot
    /// gets `refill` (a buffer of any capacity: one too small is replaced
    /// on the next `recv`).
    pub(super) fn take(&mut self, i: usize, refill: Vec<u8>) -> Vec<u8> {
        std::mem::replace(&mut self.bufs[i], refill)
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
        assert_eq!(b.recv(&rx, SLOTS), 0, "nothing sent yet");
        let sizes = [1usize, 64, 2047, MAX_DATAGRAM, 9000];
        for (k, &s) in sizes.iter().enumerate() {
            let d: Vec<u8> = (0..s).map(|i| (i * 31 + k) as u8).collect();
            tx.send_to(&d, to).unwrap();
        }
        // loopback delivers before send_to returns
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while got.len() < sizes.len() && t0.elapsed() < std::time::Duration::from_secs(10) {
            let n = b.recv(&rx, SLOTS);
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
        assert_eq!(b.recv(&rx, SLOTS), 0, "drained");
    }
}
