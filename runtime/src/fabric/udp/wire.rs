//! The datagram: a fixed header, a body of message frames, and a 16-byte
//! authentication tag of everything before it, under a key derived from
//! the job key: POLYVAL under a one-time key that keyed BLAKE3 derives
//! from the header (a Carter-Wegman MAC, see `fulltag`; wire version 4).
//! A datagram whose tag does not verify is dropped before any of its
//! fields is believed.
//!
//! ```text
//!  0 magic u16 "SU"   2 version u8   3 kind u8   4 flags u8   5 hold u8
//!  6 body_len u16     8 src u32     12 dst u32  16 seq u32
//! 20 cum[0] u32      24 sack[0] u32 28 cum[1] u32 32 sack[1] u32
//! 36 win[0] u16      38 win[1] u16  40 ts u32       44 echo u32
//! 48 pn u64          56 header tag [u8; 8]
//! 64 body (body_len bytes)          64+body_len tag [u8; 16]
//! ```
//! `pn` numbers every datagram a rank sends to one peer (data,
//! retransmission or control alike: 1, 2, 3, ... never reused), so the
//! receiver acts on each authentic datagram at most once: a copy replayed
//! by someone on the path is recognised and dropped without refreshing the
//! sender's liveness (see `proto`). The header tag is a short keyed BLAKE3
//! of bytes 0..56 under a second key derived from the job key: a receiver
//! checks the header's plausibility (length, magic, addressee, sender) and
//! then this tag before it spends a pass over the body on the full tag, so
//! a stranger's large garbage datagram costs one 64-byte hash, not one per
//! body byte.
//! `kind` 0 and 1 are data datagrams of stream 0 (requests) and 1
//! (replies), carrying sequence number `seq`; kind 2 is a control datagram
//! (acknowledgements, window updates, keepalives) with no body. Every
//! datagram carries the sender's acknowledgement state of both streams:
//! `cum` is the next sequence number it expects, bit i of `sack` says that
//! `cum + 1 + i` has arrived too, `win` is how many datagrams past `cum` it
//! accepts. `ts` is the sender's clock (microseconds, wrapping, never 0)
//! when the datagram left; `echo` the `ts` of the last in-order data
//! datagram the sender received (0: none), which times round trips without
//! counting the wait for a retransmission. `hold` is how long the sender
//! held that echoed datagram before this one left (from its arrival at the
//! sender's socket; coded as in `proto::hold`, microseconds with 4 bits of
//! precision, at most about 0.5 s, rounded down): the receiver of the echo
//! subtracts it from the round trip, so delay the echoing host added (a
//! descheduled or busy rank) is not read as network queueing (version 3).
//! Version 4: the same header; the full tag became POLYVAL with a one-time
//! key per datagram (version 3's was keyed BLAKE3 of the whole datagram,
//! 1.4-5x the CPU per byte).
//! All integers little-endian.

/// Magic number ("SU").
pub const MAGIC: u16 = 0x5553;
/// Wire format version (4: the full tag is POLYVAL under a one-time key
/// per datagram, `fulltag`; 3 was keyed BLAKE3 of the whole datagram).
/// Raised together with the bootstrap protocol version
/// ([`crate::bootstrap::auth::VERSION`]), so ranks of two releases are
/// refused at the bootstrap with its message.
pub const VERSION: u8 = 4;
/// Header bytes.
pub const HEADER: usize = 64;
/// Bytes of the header the header tag covers (the tag follows them).
const HEADER_TAGGED: usize = 56;
/// Header tag bytes.
const HEADER_TAG: usize = HEADER - HEADER_TAGGED;
// the full tag's one-time key comes from the bytes the header tag covers
const _: () = assert!(super::fulltag::KEYED_BY == HEADER_TAGGED);
/// Tag bytes.
pub const TAG: usize = 16;
/// Header and tag together: a datagram's fixed cost.
pub const OVERHEAD: usize = HEADER + TAG;
/// Largest datagram UDP carries over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// The kind of a control datagram.
pub const KIND_CONTROL: u8 = 2;
/// Flag: the receiver should acknowledge at once (a keepalive, a sender
/// short of window).
pub const F_ACK_NOW: u8 = 1;

/// One stream's acknowledgement state as carried in every header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// Next sequence number expected in order.
    pub cum: u32,
    /// Bit i: `cum + 1 + i` arrived.
    pub sack: u32,
    /// Datagrams past `cum` the receiver accepts.
    pub win: u16,
}

/// A decoded header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// 0 / 1: data of that stream; [`KIND_CONTROL`]: control.
    pub kind: u8,
    /// [`F_ACK_NOW`].
    pub flags: u8,
    /// Body length.
    pub body_len: u16,
    /// Sending rank.
    pub src: u32,
    /// Receiving rank.
    pub dst: u32,
    /// Sequence number (data datagrams).
    pub seq: u32,
    /// The sender's acknowledgement state, per stream.
    pub acks: [Ack; 2],
    /// Sender's clock when it left (us, wrapping; 0: unset).
    pub ts: u32,
    /// Echo of the peer's `ts` (0: none).
    pub echo: u32,
    /// How long the echoed datagram was held before this one left (coded,
    /// see `proto::hold`; 0: not at all or no echo).
    pub hold: u8,
    /// Datagram number: per (sender, receiver), one more on every datagram
    /// sent (retransmissions included); 0 is never sent.
    pub pn: u64,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(w)
}

impl Header {
    /// Write into the first [`HEADER`] bytes of `b`.
    pub fn write(&self, b: &mut [u8]) {
        let b = &mut b[..HEADER];
        b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[3] = self.kind;
        b[4] = self.flags;
        b[6..8].copy_from_slice(&self.body_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.src.to_le_bytes());
        b[12..16].copy_from_slice(&self.dst.to_le_bytes());
        b[16..20].copy_from_slice(&self.seq.to_le_bytes());
        self.write_acks(b);
    }

    /// Rewrite only the fields of the moment a datagram leaves: the
    /// acknowledgements, flags, `hold`, `ts`, `echo` and `pn`.
    pub fn write_acks(&self, b: &mut [u8]) {
        for (i, a) in self.acks.iter().enumerate() {
            b[20 + 8 * i..24 + 8 * i].copy_from_slice(&a.cum.to_le_bytes());
            b[24 + 8 * i..28 + 8 * i].copy_from_slice(&a.sack.to_le_bytes());
            b[36 + 2 * i..38 + 2 * i].copy_from_slice(&a.win.to_le_bytes());
        }
        b[4] = self.flags;
        b[5] = self.hold;
        b[40..44].copy_from_slice(&self.ts.to_le_bytes());
        b[44..48].copy_from_slice(&self.echo.to_le_bytes());
        b[48..56].copy_from_slice(&self.pn.to_le_bytes());
    }

    /// Parse a header; `None` if the fields are inconsistent with the
    /// datagram's length. Nothing in it is to be believed before
    /// [`Mac::verify`] (this is the cheap plausibility check made first).
    pub fn read(b: &[u8]) -> Option<Header> {
        Self::read_head(b, b.len())
    }

    /// [`read`](Self::read) from the first [`HEADER`] bytes (or more) of a
    /// datagram of `len` bytes.
    pub fn read_head(b: &[u8], len: usize) -> Option<Header> {
        if b.len() < HEADER || len < OVERHEAD || u16_at(b, 0) != MAGIC || b[2] != VERSION {
            return None;
        }
        let h = Header {
            kind: b[3],
            flags: b[4],
            body_len: u16_at(b, 6),
            src: u32_at(b, 8),
            dst: u32_at(b, 12),
            seq: u32_at(b, 16),
            acks: [0, 1].map(|i| Ack {
                cum: u32_at(b, 20 + 8 * i),
                sack: u32_at(b, 24 + 8 * i),
                win: u16_at(b, 36 + 2 * i),
            }),
            ts: u32_at(b, 40),
            echo: u32_at(b, 44),
            hold: b[5],
            pn: u64_at(b, 48),
        };
        let ok = h.kind <= KIND_CONTROL
            && HEADER + h.body_len as usize + TAG == len
            && (h.kind != KIND_CONTROL || h.body_len == 0);
        ok.then_some(h)
    }
}

/// The datagram authenticator of one job.
#[derive(Clone)]
pub struct Mac {
    key: [u8; 32],
    /// Key of the header tag (derived from `key`).
    hkey: [u8; 32],
    /// Key that derives the full tag's one-time keys (from `key`).
    gen: [u8; 32],
    body: bool,
}

impl Mac {
    /// From a 256-bit key (derived from the job key): the tag covers the
    /// whole datagram (POLYVAL under a one-time key per datagram, see the
    /// module docs; the caller never seals two different datagrams with
    /// the same first 56 header bytes, as `proto` does by numbering every
    /// datagram it sends).
    pub fn new(key: [u8; 32]) -> Mac {
        let hkey = *blake3::keyed_hash(&key, b"splitrt udp header tag v2").as_bytes();
        Mac {
            key,
            hkey,
            gen: super::fulltag::generator_key(&key),
            body: true,
        }
    }

    /// A tag over the header only (`SPLITRT_UDP_AUTH=header`): datagrams
    /// of strangers and other jobs are still refused, but the body is
    /// protected only by UDP's checksum, so an on-path attacker could alter
    /// it. For trusted networks, where the full tag costs bandwidth.
    pub fn header_only(key: [u8; 32]) -> Mac {
        Mac {
            body: false,
            ..Mac::new(key)
        }
    }

    fn header_tag_of(&self, d: &[u8]) -> [u8; HEADER_TAG] {
        let h = blake3::keyed_hash(&self.hkey, &d[..HEADER_TAGGED]);
        let mut t = [0u8; HEADER_TAG];
        t.copy_from_slice(&h.as_bytes()[..HEADER_TAG]);
        t
    }

    /// Whether the header tag is right: the cheap check (one 64-byte
    /// block hashed, whatever the body's length) made before
    /// [`verify`](Self::verify). Passing it proves nothing by itself.
    pub fn verify_header(&self, d: &[u8]) -> bool {
        if d.len() < HEADER {
            return false;
        }
        let t = self.header_tag_of(d);
        crate::key::same_mac(&t, &d[HEADER_TAGGED..HEADER])
    }

    fn covered(&self, n: usize) -> usize {
        if self.body {
            n
        } else {
            HEADER.min(n)
        }
    }

    fn tag_of(&self, data: &[u8]) -> [u8; TAG] {
        if self.body {
            return super::fulltag::tag(&self.gen, data);
        }
        // header only: keyed BLAKE3 of the header (one 64-byte block)
        let h = blake3::keyed_hash(&self.key, data);
        let mut t = [0u8; TAG];
        t.copy_from_slice(&h.as_bytes()[..TAG]);
        t
    }

    /// Write the header tag, then the tag over `d[..len - TAG]` (or its
    /// header) into the last [`TAG`] bytes.
    pub fn seal(&self, d: &mut [u8]) {
        let ht = self.header_tag_of(d);
        d[HEADER_TAGGED..HEADER].copy_from_slice(&ht);
        let n = d.len() - TAG;
        let t = self.tag_of(&d[..self.covered(n)]);
        d[n..].copy_from_slice(&t);
    }

    /// Whether the datagram's tag is right (constant time).
    pub fn verify(&self, d: &[u8]) -> bool {
        if d.len() < OVERHEAD {
            return false;
        }
        let n = d.len() - TAG;
        let t = self.tag_of(&d[..self.covered(n)]);
        crate::key::same_mac(&t, &d[n..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_tag() {
        let h = Header {
            kind: 1,
            flags: F_ACK_NOW,
            body_len: 5,
            src: 3,
            dst: 9,
            seq: 0xfffffff0,
            acks: [
                Ack {
                    cum: 7,
                    sack: 0b101,
                    win: 64,
                },
                Ack {
                    cum: 1 << 31,
                    sack: 0,
                    win: 0,
                },
            ],
            ts: 77,
            echo: 5,
            hold: 0x9c,
            pn: 1 << 40,
        };
        let mut d = vec![0u8; OVERHEAD + 5];
        h.write(&mut d);
        let mac = Mac::new([7; 32]);
        mac.seal(&mut d);
        assert!(mac.verify_header(&d) && mac.verify(&d));
        assert_eq!(Header::read(&d), Some(h));
        assert!(!Mac::new([8; 32]).verify(&d));
        assert!(!Mac::new([8; 32]).verify_header(&d));
        d[HEADER] ^= 1;
        assert!(!mac.verify(&d));
        // the body is not under the header tag, the datagram number is
        assert!(mac.verify_header(&d));
        d[50] ^= 1;
        assert!(!mac.verify_header(&d));
        assert_eq!(Header::read(&d[..OVERHEAD + 4]), None);
    }

    /// A sealed data datagram of `body` bytes from rank 2 to rank 5.
    fn sealed(mac: &Mac, body: usize, pn: u64) -> Vec<u8> {
        let h = Header {
            kind: 0,
            body_len: body as u16,
            src: 2,
            dst: 5,
            seq: 11,
            pn,
            ..Header::default()
        };
        let mut d = vec![0u8; OVERHEAD + body];
        for (i, b) in d[HEADER..HEADER + body].iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        h.write(&mut d);
        mac.seal(&mut d);
        d
    }

    /// Any byte of header, body or tag altered, the datagram is refused
    /// by the full tag (and by the header tag where it covers the byte).
    #[test]
    fn mac_altered_datagrams_are_refused() {
        let mac = Mac::new([0x11; 32]);
        let bodies: &[usize] = if cfg!(miri) {
            &[0, 200]
        } else {
            &[0, 1, 1392, 8112]
        };
        for &body in bodies {
            let d = sealed(&mac, body, 77);
            assert!(mac.verify_header(&d) && mac.verify(&d), "body {body}");
            let step = if cfg!(miri) { 11 } else { 1 };
            for i in (0..d.len()).step_by(step) {
                for x in [1u8, 0x80] {
                    let mut e = d.clone();
                    e[i] ^= x;
                    assert!(!mac.verify(&e), "body {body}: byte {i} ^ {x:#x} passed");
                    if i < HEADER {
                        assert!(!mac.verify_header(&e), "body {body}: header byte {i}");
                    }
                }
            }
            // the same datagram with trailing zero bytes, or cut short
            let n = d.len() - TAG;
            for extra in [1usize, 15, 16, 17] {
                let mut e = d[..n].to_vec();
                e.resize(n + extra, 0);
                e.extend_from_slice(&d[n..]);
                assert!(!mac.verify(&e), "body {body} + {extra} zeros");
            }
            if body > 0 {
                let mut e = d[..n - 1].to_vec();
                e.extend_from_slice(&d[n..]);
                assert!(!mac.verify(&e), "body {body} cut");
            }
            // a tag moved onto another datagram number
            let other = sealed(&mac, body, 78);
            let mut e = other.clone();
            e[n..].copy_from_slice(&d[n..]);
            assert!(!mac.verify(&e), "body {body}: tag of pn 77 on pn 78");
            // another key (another job, another session)
            assert!(!Mac::new([0x12; 32]).verify(&d));
        }
        // the header-only mode still refuses altered headers, not bodies
        let ho = Mac::header_only([0x11; 32]);
        let d = sealed(&ho, 100, 1);
        assert!(ho.verify(&d));
        let mut e = d.clone();
        e[HEADER + 3] ^= 1;
        assert!(ho.verify(&e));
        e[49] ^= 1;
        assert!(!ho.verify(&e));
        assert!(!mac.verify(&d), "a header-only tag is no full tag");
    }
}
