//! Connections made on first contact: a peer's queue pair and buffer pool
//! are created by the first send, put or get toward it, or by its first
//! connection request, and the two queue pairs are connected through a
//! side channel (the bootstrap connection's relay in a job: authenticated
//! like every bootstrap message, bounded; see [`SideChannel`]).
//!
//! Three messages, each a few bytes:
//!
//! ```text
//!  REQUEST  [1, version] + the sender's queue pair for the receiver (26 B)
//!  ANSWER   [2, version] + the sender's queue pair for the receiver (26 B)
//!  READY    [3, version]
//! ```
//!
//! A rank that wants to reach `p` creates its queue pair for `p`, posts its
//! receives and sends REQUEST. `p` creates its own (if it has none yet),
//! connects it to the one named, and sends ANSWER; the asker connects and
//! sends READY. A rank sends toward a peer only once it heard ANSWER or
//! READY from it: the peer sent either after connecting its side, so no
//! message ever reaches a queue pair that is not connected.
//!
//! Each rank has at most one queue pair per peer, and every message it
//! sends names that one; so when two ranks ask each other at the same
//! moment, both requests name the same two queue pairs: each side connects
//! on the other's REQUEST, answers, and is ready on the other's ANSWER. No
//! tie-break is needed, and no queue pair is made twice.
//!
//! A message may be lost on the way (a full relay inbox drops it), so a
//! rank waiting for a peer asks again after an eighth of its bound (5 ms
//! to 500 ms), the gaps doubling from there (a peer that does not poll
//! for a long while gets a few copies, well within its inbox): REQUEST is idempotent (a peer already connected to the queue
//! pair named answers again; the asker sends READY again), and a rank
//! that answered first but has not heard READY when it wants to send asks
//! itself after the same wait.
//!
//! A message that is malformed, names a queue pair other than the one this
//! rank connected, or comes out of turn (an ANSWER nobody asked for) is
//! refused: dropped and counted ([`PeerStateStats::refused`]), never a
//! panic, and the fabric goes on; so is a REQUEST this rank cannot make a
//! queue pair for (locked memory, queue-pair limits: logged on stderr; the
//! peer asks again). Connection messages are sent after the device lock
//! is dropped (a relay is a blocking write to the bootstrap socket).

use super::verbs::{QpEndpoint, QpId};
use crate::Result;
use std::time::Instant;

/// Format version of the three messages.
pub const VERSION: u8 = 1;
/// The longest message (REQUEST and ANSWER).
pub const MAX_LEN: usize = 2 + QpEndpoint::LEN;

const K_REQUEST: u8 = 1;
const K_ANSWER: u8 = 2;
const K_READY: u8 = 3;

/// One connection message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectMsg {
    /// "Connect to my queue pair for you."
    Request(QpEndpoint),
    /// "Connected; here is my queue pair for you."
    Answer(QpEndpoint),
    /// "Connected to the queue pair you answered with."
    Ready,
}

impl ConnectMsg {
    /// The bytes sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MAX_LEN);
        match self {
            ConnectMsg::Request(e) | ConnectMsg::Answer(e) => {
                b.push(if matches!(self, ConnectMsg::Request(_)) {
                    K_REQUEST
                } else {
                    K_ANSWER
                });
                b.push(VERSION);
                b.extend_from_slice(&e.encode());
            }
            ConnectMsg::Ready => b.extend_from_slice(&[K_READY, VERSION]),
        }
        b
    }

    /// Decode; why not, if malformed (never panics).
    ///
    /// ```
    /// use splitrt_runtime::fabric::rdma::on_demand::ConnectMsg;
    /// assert_eq!(ConnectMsg::decode(&ConnectMsg::Ready.encode()), Ok(ConnectMsg::Ready));
    /// assert!(ConnectMsg::decode(&[1, 1, 0]).is_err());
    /// ```
    pub fn decode(b: &[u8]) -> std::result::Result<ConnectMsg, String> {
        if b.len() < 2 {
            return Err(format!("a connection message of {} B", b.len()));
        }
        let (kind, version, rest) = (b[0], b[1], &b[2..]);
        if version != VERSION {
            return Err(format!(
                "connection message version {version} (expected {VERSION})"
            ));
        }
        let endpoint = || {
            if rest.len() != QpEndpoint::LEN {
                return Err(format!(
                    "a connection message of {} B (expected {MAX_LEN})",
                    b.len()
                ));
            }
            QpEndpoint::decode(rest).ok_or_else(|| "a malformed queue-pair endpoint".to_string())
        };
        match kind {
            K_REQUEST => Ok(ConnectMsg::Request(endpoint()?)),
            K_ANSWER => Ok(ConnectMsg::Answer(endpoint()?)),
            K_READY if rest.is_empty() => Ok(ConnectMsg::Ready),
            K_READY => Err(format!("a READY of {} B", b.len())),
            k => Err(format!("unknown connection message kind {k}")),
        }
    }
}

/// How connection messages travel between ranks: in a job, the bootstrap
/// connection's relay (every message sealed under the job key, through the
/// rendezvous); in tests, anything that delivers bytes from rank to rank.
pub trait SideChannel: Send + Sync {
    /// Send `msg` (at most [`MAX_LEN`] bytes) to rank `to`.
    fn send(&self, to: usize, msg: &[u8]) -> Result<()>;
    /// Whether a message may be waiting (one load: called on every poll).
    fn pending(&self) -> bool;
    /// The next message received: its sender's rank and bytes.
    fn take(&self) -> Option<(usize, Vec<u8>)>;
    /// Messages to this rank the channel dropped (a full inbox), for error
    /// messages; none by default.
    fn dropped(&self) -> u64 {
        0
    }
}

/// This rank's side of the connection toward one contacted peer.
#[derive(Clone, Copy, Debug)]
pub(super) struct PeerLink {
    /// Its queue pair for the peer (receives posted).
    pub qp: QpId,
    /// The peer's queue pair this one is connected to.
    pub remote: Option<QpEndpoint>,
    /// When this rank sent its REQUEST (none sent: the peer asked first).
    pub asked: Option<Instant>,
    /// The peer connected its side (ANSWER or READY heard): sends may go.
    pub ready: bool,
}

/// What a rank holds toward its peers on the ibverbs fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStateStats {
    /// Queue pairs created (one per contacted peer, itself included once
    /// it talked to itself).
    pub queue_pairs: usize,
    /// Buffer pools registered (one per queue pair).
    pub pools: usize,
    /// Bytes this fabric pinned besides the segment: the pools and the
    /// credit mailbox.
    pub pinned_bytes: u64,
    /// Connection messages refused (malformed, out of turn, or naming
    /// another queue pair than the one connected).
    pub refused: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazyrdma_messages_round_trip_and_garbage_is_refused() {
        let e = QpEndpoint {
            lid: 7,
            qpn: 0x12_3456,
            psn: 0x55,
            gid: [3; 16],
        };
        for m in [
            ConnectMsg::Request(e),
            ConnectMsg::Answer(e),
            ConnectMsg::Ready,
        ] {
            let b = m.encode();
            assert!(b.len() <= MAX_LEN);
            assert_eq!(ConnectMsg::decode(&b), Ok(m));
            for cut in 0..b.len() {
                assert!(ConnectMsg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(ConnectMsg::decode(&long).is_err());
            let mut v = b.clone();
            v[1] = 9;
            assert!(ConnectMsg::decode(&v).is_err());
        }
        assert!(ConnectMsg::decode(&[4, VERSION]).is_err());
        // every short input: refused or decoded, never a panic (fewer
        // inputs per length under Miri, which took 234 s for 200)
        let per_len = if cfg!(miri) { 6 } else { 200 };
        let mut x = 0x9e37_79b9u32;
        for len in 0..64 {
            for _ in 0..per_len {
                let b: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                let _ = ConnectMsg::decode(&b);
            }
        }
    }
}
