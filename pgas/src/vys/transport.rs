//! Signal messages over UDP multicast: producers send to a group, any
//! number of consumers join it (no producer knows its consumers). Every
//! datagram a receiver takes is decoded and checked against the stream key;
//! what is not a usable signal is counted by kind and dropped.
//!
//! ```no_run
//! use splitrt_pgas::vys::transport::{SignalReceiver, SignalSender};
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
        Ok(SignalReceiver {
            sock: s.into(),
            key,
            buf: vec![0; 65_536],
            received: 0,
            dropped: Dropped::default(),
        })
    }

    /// The next datagram of the group, waiting at most `timeout`: a
    /// decoded signal, or why it was dropped (also counted); `None` if
    /// nothing came.
    pub fn recv(&mut self, timeout: Duration) -> Option<Result<Signal, SignalError>> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))
            .ok()?;
        let n = self.sock.recv(&mut self.buf).ok()?;
        let r = Signal::decode(&self.buf[..n], &self.key);
        match &r {
            Ok(_) => self.received += 1,
            Err(SignalError::Version { .. }) => self.dropped.version += 1,
            Err(SignalError::Foreign) => self.dropped.foreign += 1,
            Err(SignalError::Malformed(_)) => self.dropped.malformed += 1,
        }
        Some(r)
    }
}
