//! The datagram: a fixed header, a body of message frames, and a 16-byte
//! authentication tag (keyed BLAKE3 of everything before it, under a key
//! derived from the job key). A datagram whose tag does not verify is
//! dropped before any of its fields is believed.
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
//! All integers little-endian.

/// Magic number ("SU").
pub const MAGIC: u16 = 0x5553;
/// Wire format version.
pub const VERSION: u8 = 3;
/// Header bytes.
pub const HEADER: usize = 64;
/// Bytes of the header the header tag covers (the tag follows them).
const HEADER_TAGGED: usize = 56;
/// Header tag bytes.
const HEADER_TAG: usize = HEADER - HEADER_TAGGED;
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
    body: bool,
}

impl Mac {
    /// From a 256-bit key (derived from the job key): the tag covers the
    /// whole datagram.
    pub fn new(key: [u8; 32]) -> Mac {
        let hkey = *blake3::keyed_hash(&key, b"splitrt udp header tag v2").as_bytes();
        Mac {
            key,
            hkey,
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
}
