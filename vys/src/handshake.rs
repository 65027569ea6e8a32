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
//! **Datagram size.** The `HELLO` says the largest datagram the consumer
//! takes (its setting, lowered to what its route to the server carries);
//! the `WELCOME` says the largest the server will send, never more than
//! that (its own setting may be lower). Both ends run the session's
//! protocol with that size ([`super::read_proto::session_config_for`]).
//!
//! ```text
//! HELLO   0 magic u16 "VH"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 largest datagram taken u32  44 zero u32  48 tag [16]  (64 bytes)
//! WELCOME 0 magic u16 "VW"  2 version u16  4 flags u32  8 consumer nonce [32]
//!        40 server nonce [32]  72 producer id u64  80 ring bytes u64
//!        88 producer instance u64  96 largest datagram sent u32  100 zero u32
//!       104 tag [16]                                     (120 bytes)
//! ```
//!
//! Version 3 (issue 27, part 2): the datagram sizes joined both (version
//! 2's were 56 and 112 bytes and had none; version 1's `WELCOME` had no
//! instance either); a server answers only `HELLO`s of its version, a
//! consumer only `WELCOME`s of its own.
//!
//! Version 4 (issue 27, part 6): the same datagrams; the session then
//! carries batched reads ([`super::read_batch`], `READV`), which a
//! version 3 server would take for malformed.
//!
//! Version 5: the same datagrams; the session's datagrams are the UDP
//! fabric's wire version 4 (the full tag is POLYVAL under a one-time key
//! per datagram), which a version 4 end would drop unread after a
//! successful handshake; so the two refuse each other here instead.

use splitrt_runtime::key::same_mac;

/// Magic of a `HELLO` ("VH").
pub const HELLO_MAGIC: u16 = 0x4856;
/// Magic of a `WELCOME` ("VW").
pub const WELCOME_MAGIC: u16 = 0x5756;
/// Version of the session handshake.
pub const HANDSHAKE_VERSION: u16 = 5;
/// Bytes of a `HELLO`.
pub const HELLO_LEN: usize = 64;
/// Bytes of a `WELCOME`.
pub const WELCOME_LEN: usize = 120;
/// Flag: RDMA reads asked for (`HELLO`) or offered on request (`WELCOME`).
const F_RDMA: u32 = 1;

/// A `HELLO` as the server reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The consumer's nonce.
    pub consumer_nonce: [u8; 32],
    /// The consumer would read by RDMA.
    pub rdma: bool,
    /// The largest datagram (UDP payload, bytes) the consumer takes; a
    /// `HELLO` outside [`super::read_proto::MIN_DATAGRAM`]..=
    /// [`super::read_proto::MAX_DATAGRAM`] is refused.
    pub datagram: u32,
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
    /// The largest datagram (UDP payload, bytes) the server sends in
    /// this session: at most the `HELLO`'s (a consumer refuses a
    /// `WELCOME` that says more).
    pub datagram: u32,
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
    b[40..44].copy_from_slice(&h.datagram.to_le_bytes());
    let t = tag(stream_key, &b[..48]);
    b[48..].copy_from_slice(&t);
    b
}

/// Whether `n` is a datagram size a session may use.
fn datagram_ok(n: u32) -> bool {
    (super::read_proto::MIN_DATAGRAM..=super::read_proto::MAX_DATAGRAM).contains(&(n as usize))
}

/// A `HELLO` that verifies under the stream key (`None`: anything else,
/// unknown flags included).
pub fn read_hello(stream_key: &[u8; 32], b: &[u8]) -> Option<Hello> {
    if b.len() != HELLO_LEN
        || b[0..2] != HELLO_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || !same_mac(&tag(stream_key, &b[..48]), &b[48..])
        || b[44..48] != [0; 4]
    {
        return None;
    }
    let datagram = u32::from_le_bytes(b[40..44].try_into().ok()?);
    datagram_ok(datagram).then_some(())?;
    Some(Hello {
        consumer_nonce: b[8..40].try_into().ok()?,
        rdma: flags(b)? & F_RDMA != 0,
        datagram,
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
    b[96..100].copy_from_slice(&w.datagram.to_le_bytes());
    let t = tag(stream_key, &b[..104]);
    b[104..].copy_from_slice(&t);
    b
}

/// A `WELCOME` answering our `HELLO` (our nonce echoed) that verifies.
pub fn read_welcome(stream_key: &[u8; 32], consumer_nonce: &[u8; 32], b: &[u8]) -> Option<Welcome> {
    if b.len() != WELCOME_LEN
        || b[0..2] != WELCOME_MAGIC.to_le_bytes()
        || b[2..4] != HANDSHAKE_VERSION.to_le_bytes()
        || b[8..40] != consumer_nonce[..]
        || !same_mac(&tag(stream_key, &b[..104]), &b[104..])
        || b[100..104] != [0; 4]
    {
        return None;
    }
    let datagram = u32::from_le_bytes(b[96..100].try_into().ok()?);
    datagram_ok(datagram).then_some(())?;
    Some(Welcome {
        datagram,
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
            datagram: 1472,
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
            datagram: 1472,
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        assert_eq!(read_welcome(&k, &[3; 32], &b), None, "not our nonce");
        assert_eq!(read_welcome(&[8; 32], &n, &b), None);
        assert_ne!(session_key(&k, &n, &[2; 32]), session_key(&k, &[2; 32], &n));
    }

    /// The UDP full tag's precondition (`splitrt_runtime` `fulltag`): no
    /// two sessions share a key. The server draws a fresh nonce for every
    /// `HELLO` (a replayed one too), so even one consumer nonce opens
    /// sessions under different keys.
    #[test]
    fn mac_session_keys_are_fresh_per_session() {
        let k = [9u8; 32];
        let cn = nonce().unwrap();
        let (s1, s2) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(s1, s2);
        let (a, b) = (session_key(&k, &cn, &s1), session_key(&k, &cn, &s2));
        assert_ne!(a, b);
        assert_ne!(a, k);
        assert_ne!(session_key(&[8; 32], &cn, &s1), a, "another stream key");
    }

    #[test]
    fn the_rdma_flag_sits_where_the_layout_says_and_rides_under_the_tag() {
        let k = [9u8; 32];
        let n = [1u8; 32];
        let h = Hello {
            consumer_nonce: n,
            rdma: true,
            datagram: 9000,
        };
        let b = hello(&k, &h);
        assert_eq!(&b[0..8], &[0x56, 0x48, 5, 0, 1, 0, 0, 0]); // version 5: wire v4 tag
        assert_eq!(
            &b[40..48],
            &[0x28, 0x23, 0, 0, 0, 0, 0, 0],
            "the datagram size"
        );
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
            datagram: 8972,
        };
        let b = welcome(&k, &n, &w);
        assert_eq!(&b[0..8], &[0x56, 0x57, 5, 0, 1, 0, 0, 0]);
        assert_eq!(&b[88..96], &6u64.to_le_bytes(), "the instance");
        assert_eq!(&b[96..100], &8972u32.to_le_bytes(), "the datagram size");
        assert_eq!(read_welcome(&k, &n, &b), Some(w));
        let mut x = b;
        x[4] ^= 1;
        assert_eq!(read_welcome(&k, &n, &x), None, "a changed flag");
    }

    #[test]
    fn a_datagram_size_out_of_range_is_refused_even_under_the_tag() {
        let k = [9u8; 32];
        let n = [1u8; 32];
        for d in [0, 511, 65_508, u32::MAX] {
            let h = Hello {
                consumer_nonce: n,
                rdma: false,
                datagram: d,
            };
            assert_eq!(read_hello(&k, &hello(&k, &h)), None, "HELLO with {d}");
            let w = Welcome {
                server_nonce: [2; 32],
                producer: 5,
                instance: 6,
                ring_bytes: 0x2000,
                rdma: false,
                datagram: d,
            };
            assert_eq!(
                read_welcome(&k, &n, &welcome(&k, &n, &w)),
                None,
                "WELCOME with {d}"
            );
        }
        for d in [512, 1472, 65_507] {
            let h = Hello {
                consumer_nonce: n,
                rdma: false,
                datagram: d,
            };
            assert_eq!(read_hello(&k, &hello(&k, &h)), Some(h));
        }
    }
}
