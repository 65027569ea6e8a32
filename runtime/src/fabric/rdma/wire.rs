//! The ibverbs fabric's formats: the header of every buffer sent, and the
//! card each rank publishes through the bootstrap so its peers can connect.
//!
//! ```text
//! buffer header (24 B, then message frames as in crate::fabric::frames):
//!  0 channel u8 (0 requests, 1 replies)  1 version u8  2 pad [u8; 6]
//!  8 freed requests u64   16 freed replies u64   (piggy-backed credits)
//!
//! card (40 B, then one 26-byte QpEndpoint per rank of the job, or none
//! when queue pairs are made on first contact, `super::on_demand`):
//!  0 version u8  1 pad [u8; 3]  4 segment rkey u32  8 segment address u64
//! 16 segment length u64  24 mailbox address u64  32 mailbox rkey u32
//! 36 ranks u32
//! ```
//! All little-endian; every length and index is checked before use.

use super::verbs::QpEndpoint;
use static_assertions::const_assert_eq;

/// Format version of both.
pub const VERSION: u8 = 1;
/// Bytes of a buffer header.
pub const HEADER: usize = 24;
/// Bytes of a card before its queue-pair endpoints.
pub const CARD_FIXED: usize = 40;
const_assert_eq!(QpEndpoint::LEN, 26);

/// A decoded buffer header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufHeader {
    /// Channel index (0 requests, 1 replies).
    pub channel: usize,
    /// The sender's cumulative consumed-buffer counts, per channel.
    pub freed: [u64; 2],
}

impl BufHeader {
    /// Write into the first [`HEADER`] bytes of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        b[0] = self.channel as u8;
        b[1] = VERSION;
        b[2..8].fill(0);
        b[8..16].copy_from_slice(&self.freed[0].to_le_bytes());
        b[16..24].copy_from_slice(&self.freed[1].to_le_bytes());
    }

    /// Read from a received buffer; why not, if it is malformed.
    pub fn decode(b: &[u8]) -> Result<BufHeader, String> {
        if b.len() < HEADER {
            return Err(format!(
                "a buffer of {} B, shorter than its header",
                b.len()
            ));
        }
        if b[1] != VERSION {
            return Err(format!(
                "buffer format version {} (expected {VERSION})",
                b[1]
            ));
        }
        if b[0] > 1 {
            return Err(format!("channel {}", b[0]));
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(BufHeader {
            channel: b[0] as usize,
            freed: [u(8), u(16)],
        })
    }
}

/// What a rank publishes so that its peers can connect and reach its
/// segment and mailbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    /// Segment address in the owner's process (the RDMA target base).
    pub seg_addr: u64,
    /// Segment length.
    pub seg_len: u64,
    /// Remote key of the segment.
    pub seg_rkey: u32,
    /// Credit mailbox address.
    pub mail_addr: u64,
    /// Remote key of the mailbox.
    pub mail_rkey: u32,
    /// The owner's queue pair for each rank, by rank; empty when they are
    /// made on first contact ([`super::on_demand`]).
    pub qps: Vec<QpEndpoint>,
}

impl Card {
    /// Encode (see the module documentation).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CARD_FIXED + self.qps.len() * QpEndpoint::LEN);
        b.push(VERSION);
        b.extend_from_slice(&[0; 3]);
        b.extend_from_slice(&self.seg_rkey.to_le_bytes());
        b.extend_from_slice(&self.seg_addr.to_le_bytes());
        b.extend_from_slice(&self.seg_len.to_le_bytes());
        b.extend_from_slice(&self.mail_addr.to_le_bytes());
        b.extend_from_slice(&self.mail_rkey.to_le_bytes());
        b.extend_from_slice(&(self.qps.len() as u32).to_le_bytes());
        for q in &self.qps {
            b.extend_from_slice(&q.encode());
        }
        b
    }

    /// Decode a card of a job of `size` ranks (with a queue pair for each,
    /// or none); why not, if malformed.
    pub fn decode(b: &[u8], size: usize) -> Result<Card, String> {
        if b.len() < CARD_FIXED {
            return Err(format!("a card of {} B", b.len()));
        }
        if b[0] != VERSION {
            return Err(format!("card version {} (expected {VERSION})", b[0]));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let n = u32_at(36) as usize;
        if (n != size && n != 0) || b.len() != CARD_FIXED + n * QpEndpoint::LEN {
            return Err(format!(
                "a card for {n} ranks of {} B (the job has {size})",
                b.len()
            ));
        }
        let qps = b[CARD_FIXED..]
            .chunks_exact(QpEndpoint::LEN)
            .map(|c| QpEndpoint::decode(c).expect("exact chunk"))
            .collect();
        Ok(Card {
            seg_rkey: u32_at(4),
            seg_addr: u64_at(8),
            seg_len: u64_at(16),
            mail_addr: u64_at(24),
            mail_rkey: u32_at(32),
            qps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_card_round_trip_and_refuse_garbage() {
        let h = BufHeader {
            channel: 1,
            freed: [7, 1 << 40],
        };
        let mut b = [0u8; HEADER];
        h.encode(&mut b);
        assert_eq!(BufHeader::decode(&b), Ok(h));
        assert!(BufHeader::decode(&b[..10]).is_err());
        let mut bad = b;
        bad[0] = 2;
        assert!(BufHeader::decode(&bad).is_err());

        let c = Card {
            seg_addr: 0x7f00_0000_0000,
            seg_len: 1 << 20,
            seg_rkey: 9,
            mail_addr: 0x1000,
            mail_rkey: 11,
            qps: vec![
                QpEndpoint {
                    lid: 3,
                    qpn: 0x1234,
                    psn: 0x55,
                    gid: [1; 16],
                };
                3
            ],
        };
        let e = c.encode();
        assert_eq!(e.len(), CARD_FIXED + 3 * 26);
        assert_eq!(Card::decode(&e, 3), Ok(c.clone()));
        assert!(Card::decode(&e, 4).is_err());
        assert!(Card::decode(&e[..e.len() - 1], 3).is_err());
        assert!(Card::decode(&[], 3).is_err());
        // a card without queue pairs (made on first contact)
        let lazy = Card {
            qps: Vec::new(),
            ..c
        };
        let e = lazy.encode();
        assert_eq!(e.len(), CARD_FIXED);
        assert_eq!(Card::decode(&e, 3), Ok(lazy));
        assert!(Card::decode(&e[..e.len() - 1], 3).is_err());
    }
}
