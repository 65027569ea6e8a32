//! Signal messages over UDP multicast: producers send to a group, any
//! number of consumers join it (no producer knows its consumers). Every
//! datagram a receiver takes is decoded and checked against the stream key;
//! what is not a usable signal is counted by kind and dropped.
//!
//! ```no_run
//! use splitrt_vys::transport::{SignalReceiver, SignalSender};
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 42, 99), 47000);
//! let key = [7u8; 32]; // from the operator's stream key
//! let mut rx = SignalReceiver::join(group, Ipv4Addr::LOCALHOST, key).unwrap();
//! let tx = SignalSender::new(group, Ipv4Addr::LOCALHOST, key).unwrap();
//! // tx.send(&signal)?; ... rx.recv(std::time::Duration::from_millis(10))
//! ```

use super::signal::{Signal, SignalError};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

/// Sends signal messages to a multicast group.
pub struct SignalSender {
    sock: UdpSocket,
    group: SocketAddrV4,
    key: [u8; 32],
}

impl SignalSender {
    /// A sender to `group` through the interface with address `interface`
    /// (loopback for one host), signing with `key`.
    pub fn new(
        group: SocketAddrV4,
        interface: Ipv4Addr,
        key: [u8; 32],
    ) -> io::Result<SignalSender> {
        if !group.ip().is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a multicast address", group.ip()),
            ));
        }
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_multicast_if_v4(&interface)?;
        s.set_multicast_loop_v4(true)?;
        s.set_multicast_ttl_v4(4)?;
        s.bind(&SocketAddrV4::new(interface, 0).into())?;
        Ok(SignalSender {
            sock: s.into(),
            group,
            key,
        })
    }

    /// Send one signal.
    pub fn send(&self, s: &Signal) -> io::Result<()> {
        self.send_bytes(&s.encode(&self.key))
    }

    /// Send raw bytes to the group (tests of what receivers drop).
    pub fn send_bytes(&self, b: &[u8]) -> io::Result<()> {
        self.sock.send_to(b, self.group).map(|_| ())
    }
}

/// What a receiver dropped, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Another wire format version.
    pub version: u64,
    /// Not signed with this stream's key.
    pub foreign: u64,
    /// Malformed.
    pub malformed: u64,
}

/// Receives signal messages of one stream from a multicast group.
pub struct SignalReceiver {
    sock: UdpSocket,
    key: [u8; 32],
    buf: Vec<u8>,
    /// Signals received and decoded.
    pub received: u64,
    /// Datagrams dropped, by kind.
    pub dropped: Dropped,
    /// Datagrams the kernel dropped because this receiver fell behind
    /// (its socket's receive queue overflowed; `SO_RXQ_OVFL`), cumulative.
    pub overflowed: u64,
    error: Option<io::Error>,
}

impl SignalReceiver {
    /// Join `group` on the interface with address `interface`. Several
    /// receivers (consumers) on one host may join the same group.
    pub fn join(
        group: SocketAddrV4,
        interface: Ipv4Addr,
        key: [u8; 32],
    ) -> io::Result<SignalReceiver> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.port()).into())?;
        s.join_multicast_v4(group.ip(), &interface)?;
        let _ = s.set_recv_buffer_size(4 << 20);
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on our socket with a c_int option value of the
        // stated size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                libc::SO_RXQ_OVFL,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(SignalReceiver {
            sock: s.into(),
            key,
            buf: vec![0; 65_536],
            received: 0,
            dropped: Dropped::default(),
            overflowed: 0,
            error: None,
        })
    }

    /// The socket, for the owner's `poll`.
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }

    /// The last receive error other than "nothing to read", taken (a
    /// receive that fails returns `None` and keeps its error here).
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// The next datagram already queued, without waiting (as
    /// [`recv`](Self::recv)); also updates [`overflowed`](Self::overflowed).
    pub fn try_recv(&mut self) -> Option<Result<Signal, SignalError>> {
        let n = self.recv_counting(libc::MSG_DONTWAIT)?;
        Some(self.decode(n))
    }

    /// recvmsg into `buf`, reading the kernel's drop counter if it came.
    fn recv_counting(&mut self, flags: libc::c_int) -> Option<usize> {
        let mut iov = libc::iovec {
            iov_base: self.buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: self.buf.len(),
        };
        let mut cbuf = [0u64; 8];
        // SAFETY: msghdr is integers and pointers: all-zero bytes are a
        // valid value (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.sock);
        // SAFETY: `msg`'s iov and control point at live buffers (`buf`,
        // `cbuf`) of the stated lengths for the call; the kernel writes at
        // most those (and `msg`'s own length and flag fields).
        let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                self.error = Some(e);
            }
            return None;
        }
        // The control messages are walked with CMSG_FIRSTHDR / CMSG_NXTHDR,
        // which return only headers lying wholly inside the
        // `msg_controllen` bytes of `cbuf` (8-aligned), or null.
        // SAFETY: CMSG_FIRSTHDR only reads `msg`'s control fields.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: CMSG_LEN is a pure size computation.
        let with_u32 = unsafe { libc::CMSG_LEN(4) } as usize;
        while !c.is_null() {
            // SAFETY: a non-null header inside `cbuf` (as just said),
            // aligned and initialised (zeroed, then written by the kernel);
            // nothing writes `cbuf` while `hdr` lives.
            let hdr = unsafe { &*c };
            // The control message is checked (level, type, length) before
            // its u32 is read.
            if hdr.cmsg_level == libc::SOL_SOCKET
                && hdr.cmsg_type == libc::SO_RXQ_OVFL
                && hdr.cmsg_len as usize >= with_u32
            {
                // SAFETY: CMSG_DATA is pointer arithmetic: the first byte
                // after the header `c`, inside `cbuf`.
                let at = unsafe { libc::CMSG_DATA(c) } as *const u32;
                // SAFETY: cmsg_len >= CMSG_LEN(4), so the u32 after the
                // header lies in the message, inside `cbuf`; read unaligned.
                let v = unsafe { std::ptr::read_unaligned(at) };
                self.overflowed = self.overflowed.max(v as u64);
            }
            // SAFETY: CMSG_NXTHDR reads `msg`'s control fields and the
            // header `c` (inside `cbuf`), and returns the next header wholly
            // inside the control bytes, or null.
            c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
        }
        Some(n as usize)
    }

    fn decode(&mut self, n: usize) -> Result<Signal, SignalError> {
        let r = Signal::decode(&self.buf[..n], &self.key);
        match &r {
            Ok(_) => self.received += 1,
            Err(SignalError::Version { .. }) => self.dropped.version += 1,
            Err(SignalError::Foreign) => self.dropped.foreign += 1,
            Err(SignalError::Malformed(_)) => self.dropped.malformed += 1,
        }
        r
    }

    /// The next datagram of the group, waiting at most `timeout`: a
    /// decoded signal, or why it was dropped (also counted); `None` if
    /// nothing came.
    pub fn recv(&mut self, timeout: Duration) -> Option<Result<Signal, SignalError>> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))
            .ok()?;
        let n = self.recv_counting(0)?;
        Some(self.decode(n))
    }
}
