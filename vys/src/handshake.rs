//! The two datagrams that open a read session between a consumer and a
//! producer's read server across hosts, and the session key they agree.
//!
//! Both sides hold the stream key. The consumer sends `HELLO` with a fresh
//! nonce, tagged under a key derived from the stream key; the server
//! answers `WELCOME` with the consumer's nonce, its own, its producer id,
//! its producer instance (the random number drawn at the producer's start,
//! which its signals carry: a consumer reads a signal only through a
//! session with that instance's server) and ring length, tagged the same
//! way. The session key is keyed BLAKE3
//! of both nonces under the stream key, so a replayed `HELLO` gives a
//! stranger a session it cannot use (it cannot compute the key), and every
//! session's datagrams are authenticated under a key of its own. After
//! that the session speaks the UDP fabric's protocol
//! ([`splitrt_runtime::fabric::udp::proto`]), consumer as peer 1, server
//! as peer 0.
//!
//! **RDMA reads.** A consumer that can read by RDMA sets flag bit 0 of its
//! `HELLO`; a server whose ring is registered for RDMA sets bit 0 of the
//! `WELCOME`. Nothing of RDMA travels in these two datagrams: the
//! consumer's queue pair and the server's offer (queue pair, ring address,
//! length, key) go inside the session ([`super::read_proto`]), so only a
//! consumer that proved it holds the session key (hence the stream key)
//! gets a queue pair, and a replayed `HELLO` gets none.
//!
//! ```text
//! HELLO   0 magic u16 "VH"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 tag [16]                                     (56 bytes)
//! WELCOME 0 magic u16 "VW"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 server nonce [32]  72 producer id u64  80 ring bytes u64
//!        88 producer instance u64  96 tag [16]           (112 bytes)
//! ```
//!
//! Version 2 (issue 27): the instance joined the `WELCOME` (version 1's
//! had 104 bytes and none); a server answers only `HELLO`s of its
//! version, a consumer only `WELCOME`s of its own.

use splitrt_runtime::key::same_mac;

/// Magic of a `HELLO` ("VH").
pub const HELLO_MAGIC: u16 = 0x4856;
/// Magic of a `WELCOME` ("VW").
pub const WELCOME_MAGIC: u16 = 0x5756;
/// Version of the session handshake.
pub const HANDSHAKE_VERSION: u16 = 2;
/// Bytes of a `HELLO`.
pub const HELLO_LEN: usize = 56;
/// Bytes of a `WELCOME`.
pub const WELCOME_LEN: usize = 112;
/// Flag: RDMA reads asked for (`HELLO`) or offered on request (`WELCOME`).
const F_RDMA: u32 = 1;

/// A `HELLO` as the server reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The consumer's nonce.
    pub consumer_nonce: [u8; 32],
    /// The consumer would read by RDMA.
    pub rdma: bool,
}

/// A `WELCOME` as the consumer reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The server's nonce.
    pub server_nonce: [u8; 32],
    /// The producer the server reads for.
    pub producer: u64,
    /// Its instance (drawn at its start; in its signals).
    pub instance: u64,
    /// Bytes of its exported ring.
    pub ring_bytes: u64,
    /// The server offers RDMA reads inside the session.
    pub rdma: bool,
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

/// The flags of a datagram, if only known ones are set.
fn flags(b: &[u8]) -> Option<u32> {
    let f = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    (f & !F_RDMA == 0).then_some(f)
}

fn flag(on: bool) -> [u8; 4] {
    (if on { F_RDMA } else { 0 }).to_le_bytes()
}

/// Encode a `HELLO`.
pub fn hello(stream_key: &[u8; 32], h: &Hello) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[0..2].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[2..4].copy_from_slice(&HANDSHAKE_VERSION.to_le_bytes());
    b[4..8].copy_from_slice(&flag(h.rdma));
    b[8..40].copy_from_slice(&h.consumer_nonce);
    let t = tag(stream_key, &b[..40]);
    b[40..].copy_from_slice(&t);
    b
}

/// A `HELLO` that verifies under the stream key (`None`: anything else,
/// unknown flags included).
pub fn read_hello(stream_key: &[u8; 32], b: &[u8]) -> Option<Hello> {
    if b.len() != HELLO_LEN
        || b[0..2] != HELLO_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || !same_mac(&tag(stream_key, &b[..40]), &b[40..])
    {
        return None;
    }
    Some(Hello {
        consumer_nonce: b[8..40].try_into().ok()?,
        rdma: flags(b)? & F_RDMA != 0,
    })
}

/// Encode a `WELCOME`.
pub fn welcome(stream_key: &[u8; 32], consumer_nonce: &[u8; 32], w: &Welcome) -> [u8; WELCOME_LEN] {
    let mut b = [0u8; WELCOME_LEN];
    b[0..2].copy_from_slice(&WELCOME_MAGIC.to_le_bytes());
    b[2..4].copy_from_slice(&HANDSHAKE_VERSION.to_le_bytes());
    b[4..8].copy_from_slice(&flag(w.rdma));
    b[8..40].copy_from_slice(consumer_nonce);
    b[40..72].copy_from_slice(&w.server_nonce);
    b[72..80].copy_from_slice(&w.producer.to_le_bytes());
    b[80..88].copy_from_slice(&w.ring_bytes.to_le_bytes());
    b[88..96].copy_from_slice(&w.instance.to_le_bytes());
    let t = tag(stream_key, &b[..96]);
    b[96..].copy_from_slice(&t);
    b
}

/// A `WELCOME` answering our `HELLO` (our nonce echoed) that verifies.
pub fn read_welcome(stream_key: &[u8; 32], consumer_nonce: &[u8; 32], b: &[u8]) -> Option<Welcome> {
    if b.len() != WELCOME_LEN
        || b[0..2] != WELCOME_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || b[8..40] != consumer_nonce[..]
        || !same_mac(&tag(stream_key, &b[..96]), &b[96..])
    {
        return None;
    }
    Some(Welcome {
        server_nonce: b[40..72].try_into().ok()?,
        producer: u64::from_le_bytes(b[72..80].try_into().ok()?),
        ring_bytes: u64::from_le_bytes(b[80..88].try_into().ok()?),
        instance: u64::from_le_bytes(b[88..96].try_into().ok()?),
        rdma: flags(b)? & F_RDMA != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(n: [u8; 32]) -> Hello {
        Hello {
            consumer_nonce: n,
            rdma: false,
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
            instance: 0x1234,
            ring_bytes: 4096,
            rdma: false,
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        assert_eq!(read_welcome(&k, &[3; 32], &b), None, "not our nonce");
        assert_eq!(read_welcome(&[8; 32], &n, &b), None);
        assert_ne!(session_key(&k, &n, &[2; 32]), session_key(&k, &[2; 32], &n));
    }

    #[test]
    fn the_rdma_flag_sits_where_the_layout_says_and_rides_under_the_tag() {
        let k = [9u8; 32];
        let n = [1u8; 32];
        let h = Hello {
            consumer_nonce: n,
            rdma: true,
        };
        let b = hello(&k, &h);
        assert_eq!(&b[0..8], &[0x56, 0x48, 2, 0, 1, 0, 0, 0]);
        assert_eq!(read_hello(&k, &b), Some(h));
        // a flipped flag or an unknown flag is refused (the tag covers them)
        for (at, bit) in [(4, 1), (4, 2), (7, 0x80)] {
            let mut x = b;
            x[at] ^= bit;
            assert_eq!(read_hello(&k, &x), None, "byte {at} bit {bit}");
        }
        let w = Welcome {
            server_nonce: [2; 32],
            producer: 5,
            instance: 6,
            ring_bytes: 0x2000,
            rdma: true,
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(&b[0..8], &[0x56, 0x57, 2, 0, 1, 0, 0, 0]);
        assert_eq!(&b[88..96], &6u64.to_le_bytes(), "the instance");
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        let mut x = b;
        x[4] ^= 1;
        assert_eq!(read_welcome(&k, &n, &x), None, "a changed flag");
    }
}
