//! The two datagrams that open a read session between a consumer and a
//! producer's read server across hosts, and the session key they agree.
//!
//! Both sides hold the stream key. The consumer sends `HELLO` with a fresh
//! nonce, tagged under a key derived from the stream key; the server
//! answers `WELCOME` with the consumer's nonce, its own, its producer id
//! and ring length, tagged the same way. The session key is keyed BLAKE3
//! of both nonces under the stream key, so a replayed `HELLO` gives a
//! stranger a session it cannot use (it cannot compute the key), and every
//! session's datagrams are authenticated under a key of its own. After
//! that the session speaks the UDP fabric's protocol
//! ([`splitrt_runtime::fabric::udp::proto`]), consumer as peer 1, server
//! as peer 0.
//!
//! **RDMA reads.** A consumer that can read by RDMA puts its queue pair in
//! the `HELLO` (flag bit 0); a server whose ring is registered for RDMA
//! answers with a [`RingOffer`] (its queue pair for this consumer, the
//! ring's address, length and remote key; flag bit 0 of the `WELCOME`).
//! Both ride under the tag, so only a holder of the stream key gets a
//! queue pair or a key. The session then stays open as the RDMA
//! reads' liveness channel: its keepalives tell the server the consumer
//! still exists, and the server destroys the queue pair with the session.
//!
//! ```text
//! HELLO   0 magic u16 "VH"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 consumer queue pair [26]  66 pad [6]  72 tag [16]     (88 bytes)
//! WELCOME 0 magic u16 "VW"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 server nonce [32]  72 producer id u64  80 ring bytes u64
//!        88 ring offer [46]  134 pad [2]  136 tag [16]            (152 bytes)
//! ```
//!
//! Version 1 (56- and 104-byte datagrams, no RDMA fields) is not
//! understood by version 2 peers: the server drops such a `HELLO`, so an
//! old consumer reports the producer unreachable.

use super::rdma_export::RingOffer;
use splitrt_runtime::fabric::rdma::verbs::QpEndpoint;
use splitrt_runtime::key::same_mac;

/// Magic of a `HELLO` ("VH").
pub const HELLO_MAGIC: u16 = 0x4856;
/// Magic of a `WELCOME` ("VW").
pub const WELCOME_MAGIC: u16 = 0x5756;
/// Version of the session handshake.
pub const HANDSHAKE_VERSION: u16 = 2;
/// Bytes of a `HELLO`.
pub const HELLO_LEN: usize = 88;
/// Bytes of a `WELCOME`.
pub const WELCOME_LEN: usize = 152;
/// Flag: the RDMA field (queue pair, offer) is present.
const F_RDMA: u32 = 1;
const HELLO_QP: usize = 40;
const HELLO_TAG: usize = 72;
const WELCOME_OFFER: usize = 88;
const WELCOME_TAG: usize = 136;

static_assertions::const_assert!(HELLO_QP + QpEndpoint::LEN <= HELLO_TAG);
static_assertions::const_assert!(WELCOME_OFFER + RingOffer::LEN <= WELCOME_TAG);
static_assertions::const_assert_eq!(HELLO_TAG + 16, HELLO_LEN);
static_assertions::const_assert_eq!(WELCOME_TAG + 16, WELCOME_LEN);

/// A `HELLO` as the server reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The consumer's nonce.
    pub consumer_nonce: [u8; 32],
    /// The consumer's queue pair, if it reads by RDMA.
    pub rdma: Option<QpEndpoint>,
}

/// A `WELCOME` as the consumer reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The server's nonce.
    pub server_nonce: [u8; 32],
    /// The producer the server reads for.
    pub producer: u64,
    /// Bytes of its exported ring.
    pub ring_bytes: u64,
    /// RDMA reads of the ring, if the consumer asked and the server has
    /// its ring registered.
    pub offer: Option<RingOffer>,
}

fn tag(stream_key: &[u8; 32], data: &[u8]) -> [u8; 16] {
    let mut h = blake3::Hasher::new_keyed(stream_key);
    h.update(b"splitrt vys handshake\0");
    h.update(data);
    let mut t = [0u8; 16];
    t.copy_from_slice(&h.finalize().as_bytes()[..16]);
    t
}

/// A fresh nonce from the operating system.
pub fn nonce() -> std::io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    getrandom::getrandom(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(n)
}

/// The key of the session the two nonces open.
pub fn session_key(stream_key: &[u8; 32], consumer: &[u8; 32], server: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(stream_key);
    h.update(b"splitrt vys session\0");
    h.update(consumer);
    h.update(server);
    *h.finalize().as_bytes()
}

fn flags(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[4], b[5], b[6], b[7]])
}

/// Encode a `HELLO` (with the consumer's queue pair if it reads by RDMA).
pub fn hello(stream_key: &[u8; 32], h: &Hello) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[0..2].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[2..4].copy_from_slice(&HANDSHAKE_VERSION.to_le_bytes());
    b[8..40].copy_from_slice(&h.consumer_nonce);
    if let Some(qp) = &h.rdma {
        b[4..8].copy_from_slice(&F_RDMA.to_le_bytes());
        b[HELLO_QP..HELLO_QP + QpEndpoint::LEN].copy_from_slice(&qp.encode());
    }
    let t = tag(stream_key, &b[..HELLO_TAG]);
    b[HELLO_TAG..].copy_from_slice(&t);
    b
}

/// A `HELLO` that verifies under the stream key (`None`: anything else,
/// unknown flags included).
pub fn read_hello(stream_key: &[u8; 32], b: &[u8]) -> Option<Hello> {
    if b.len() != HELLO_LEN
        || b[0..2] != HELLO_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || flags(b) & !F_RDMA != 0
        || !same_mac(&tag(stream_key, &b[..HELLO_TAG]), &b[HELLO_TAG..])
    {
        return None;
    }
    let rdma = if flags(b) & F_RDMA != 0 {
        Some(QpEndpoint::decode(
            &b[HELLO_QP..HELLO_QP + QpEndpoint::LEN],
        )?)
    } else {
        None
    };
    Some(Hello {
        consumer_nonce: b[8..40].try_into().ok()?,
        rdma,
    })
}

/// Encode a `WELCOME`.
pub fn welcome(stream_key: &[u8; 32], consumer_nonce: &[u8; 32], w: &Welcome) -> [u8; WELCOME_LEN] {
    let mut b = [0u8; WELCOME_LEN];
    b[0..2].copy_from_slice(&WELCOME_MAGIC.to_le_bytes());
    b[2..4].copy_from_slice(&HANDSHAKE_VERSION.to_le_bytes());
    b[8..40].copy_from_slice(consumer_nonce);
    b[40..72].copy_from_slice(&w.server_nonce);
    b[72..80].copy_from_slice(&w.producer.to_le_bytes());
    b[80..88].copy_from_slice(&w.ring_bytes.to_le_bytes());
    if let Some(o) = &w.offer {
        b[4..8].copy_from_slice(&F_RDMA.to_le_bytes());
        b[WELCOME_OFFER..WELCOME_OFFER + RingOffer::LEN].copy_from_slice(&o.encode());
    }
    let t = tag(stream_key, &b[..WELCOME_TAG]);
    b[WELCOME_TAG..].copy_from_slice(&t);
    b
}

/// A `WELCOME` answering our `HELLO` (our nonce echoed) that verifies.
pub fn read_welcome(stream_key: &[u8; 32], consumer_nonce: &[u8; 32], b: &[u8]) -> Option<Welcome> {
    if b.len() != WELCOME_LEN
        || b[0..2] != WELCOME_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || b[8..40] != consumer_nonce[..]
        || flags(b) & !F_RDMA != 0
        || !same_mac(&tag(stream_key, &b[..WELCOME_TAG]), &b[WELCOME_TAG..])
    {
        return None;
    }
    let offer = if flags(b) & F_RDMA != 0 {
        Some(RingOffer::decode(
            &b[WELCOME_OFFER..WELCOME_OFFER + RingOffer::LEN],
        )?)
    } else {
        None
    };
    Some(Welcome {
        server_nonce: b[40..72].try_into().ok()?,
        producer: u64::from_le_bytes(b[72..80].try_into().ok()?),
        ring_bytes: u64::from_le_bytes(b[80..88].try_into().ok()?),
        offer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(n: [u8; 32]) -> Hello {
        Hello {
            consumer_nonce: n,
            rdma: None,
        }
    }

    #[test]
    fn hello_and_welcome_verify_only_under_the_stream_key() {
        let k = [9u8; 32];
        let n = [1u8; 32];
        let h = hello(&k, &plain(n));
        assert_eq!(read_hello(&k, &h), Some(plain(n)));
        assert_eq!(read_hello(&[8; 32], &h), None);
        let mut bad = h;
        bad[9] ^= 1;
        assert_eq!(read_hello(&k, &bad), None);
        assert_eq!(read_hello(&k, &h[..40]), None);
        let w = Welcome {
            server_nonce: [2; 32],
            producer: 77,
            ring_bytes: 4096,
            offer: None,
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        assert_eq!(read_welcome(&k, &[3; 32], &b), None, "not our nonce");
        assert_eq!(read_welcome(&[8; 32], &n, &b), None);
        assert_ne!(session_key(&k, &n, &[2; 32]), session_key(&k, &[2; 32], &n));
    }

    fn endpoint() -> QpEndpoint {
        QpEndpoint {
            lid: 0x0102,
            qpn: 0x0304_0506,
            psn: 0x0007_0809,
            gid: [0xa0; 16],
        }
    }

    #[test]
    fn rdma_fields_sit_where_the_layout_says_and_ride_under_the_tag() {
        let k = [9u8; 32];
        let n = [1u8; 32];
        let h = Hello {
            consumer_nonce: n,
            rdma: Some(endpoint()),
        };
        let b = hello(&k, &h);
        // golden bytes of the head and the queue pair
        assert_eq!(&b[0..8], &[0x56, 0x48, 2, 0, 1, 0, 0, 0]);
        assert_eq!(&b[40..46], &[0x02, 0x01, 0x06, 0x05, 0x04, 0x03]);
        assert_eq!(&b[46..50], &[0x09, 0x08, 0x07, 0x00]);
        assert_eq!(&b[50..66], &[0xa0; 16]);
        assert_eq!(&b[66..72], &[0; 6]);
        assert_eq!(read_hello(&k, &b), Some(h));
        // a changed queue pair, a flipped flag or an unknown flag is refused
        for at in [4, 5, 40, 60] {
            let mut x = b;
            x[at] ^= 0x10;
            assert_eq!(read_hello(&k, &x), None, "byte {at}");
        }
        let offer = RingOffer {
            qp: endpoint(),
            addr: 0x1000,
            len: 0x2000,
            rkey: 0x33,
        };
        let w = Welcome {
            server_nonce: [2; 32],
            producer: 5,
            ring_bytes: 0x2000,
            offer: Some(offer),
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(&b[0..8], &[0x56, 0x57, 2, 0, 1, 0, 0, 0]);
        assert_eq!(&b[88..88 + RingOffer::LEN], &offer.encode());
        assert_eq!(&b[134..136], &[0; 2]);
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        let mut x = b;
        x[120] ^= 1;
        assert_eq!(read_welcome(&k, &n, &x), None, "a changed offer");
    }

    #[test]
    fn version_1_datagrams_are_not_understood() {
        let k = [9u8; 32];
        let mut b = hello(&k, &plain([1; 32]));
        b[2] = 1;
        assert_eq!(read_hello(&k, &b), None);
        assert_eq!(read_hello(&k, &b[..56]), None);
    }
}
