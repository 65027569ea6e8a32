//! vys reads by RDMA read: the producer's ring registered for remote read,
//! one reliable-connected queue pair per consumer, and each spectrum read
//! with no producer CPU, validated exactly like the other read paths.
//!
//! **The ordering a validated read needs.** A slot is a seqlock framed by
//! its sequence id at the head and the tail ([`super::ring`]): the reader
//! must see the tail before the data and the head after it. One RDMA read
//! of the whole slot gives no such order (a device may fetch the bytes of
//! one read in any order), which is how a reader that checks only an id
//! can take a torn spectrum for a good one. So a read here is three RDMA
//! reads on the same queue pair into one local slot buffer: the tail word,
//! then the head, timestamp and data with `IBV_SEND_FENCE` (it starts only
//! after the tail read completed), then the head word again, fenced; the
//! copy is then checked with [`check_slot`](super::ring::check_slot).
//!
//! Both sides run over the [`Verbs`] trait: the real device (cargo feature
//! `ibverbs`) or, in tests, the verbs model (a named test double; it
//! executes a queue pair's requests in order, so it cannot show what the
//! fence prevents on hardware). The offer a producer makes
//! ([`RingOffer`]: queue pair, ring address, length, key) is meant to ride
//! in the read-session handshake; that wiring, and a consumer route that
//! uses this reader, are not built yet (see docs/ibverbs.md).

use super::ring::{check_slot, slot_bytes, ReadOutcome};
use super::signal::{DigestKind, SpectrumInfo};
use splitrt_runtime::fabric::rdma::verbs::{
    Completion, Op, QpCaps, QpEndpoint, QpId, Region, SendWr, Verbs, WcStatus,
};
use splitrt_runtime::{Error, Result};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// What a producer offers a consumer for RDMA reads of its ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingOffer {
    /// The producer's queue pair for this consumer.
    pub qp: QpEndpoint,
    /// The ring's address in the producer.
    pub addr: u64,
    /// The ring's length in bytes.
    pub len: u64,
    /// The key for remote reads of it.
    pub rkey: u32,
}

impl RingOffer {
    /// Bytes of an encoded offer.
    pub const LEN: usize = QpEndpoint::LEN + 20;

    /// Little-endian encoding.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let q = QpEndpoint::LEN;
        b[..q].copy_from_slice(&self.qp.encode());
        b[q..q + 8].copy_from_slice(&self.addr.to_le_bytes());
        b[q + 8..q + 16].copy_from_slice(&self.len.to_le_bytes());
        b[q + 16..q + 20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decode what a peer sent (`None`: wrong length or malformed).
    pub fn decode(b: &[u8]) -> Option<RingOffer> {
        if b.len() != Self::LEN {
            return None;
        }
        let q = QpEndpoint::LEN;
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let offer = RingOffer {
            qp: QpEndpoint::decode(&b[..q])?,
            addr: u64_at(q)?,
            len: u64_at(q + 8)?,
            rkey: u32::from_le_bytes(b[q + 16..q + 20].try_into().ok()?),
        };
        offer.addr.checked_add(offer.len)?;
        Some(offer)
    }
}

const CAPS: QpCaps = QpCaps {
    send_depth: 16,
    recv_depth: 1,
    max_inline: 0,
};

/// The producer's side: its ring registered for remote reads, a queue
/// pair per consumer it accepted.
pub struct RingExport<V: Verbs> {
    verbs: V,
    ring: Region,
    qps: Vec<QpId>,
}

impl<V: Verbs> RingExport<V> {
    /// Register `ring` (the producer's ring words) for remote reads.
    pub fn new(mut verbs: V, ring: &[AtomicU64]) -> Result<RingExport<V>> {
        let r = verbs.register(ring.as_ptr() as *mut u8, ring.len() * 8, true)?;
        Ok(RingExport {
            verbs,
            ring: r,
            qps: Vec::new(),
        })
    }

    /// A queue pair for the consumer whose queue pair is `consumer`,
    /// connected, and the offer to send back to it.
    pub fn accept(&mut self, consumer: &QpEndpoint) -> Result<RingOffer> {
        let qp = self.verbs.create_qp(CAPS)?;
        self.verbs.connect(qp, consumer)?;
        self.qps.push(qp);
        Ok(RingOffer {
            qp: self.verbs.endpoint(qp),
            addr: self.ring.addr,
            len: self.ring.len as u64,
            rkey: self.ring.rkey,
        })
    }

    /// Drain the completion queue (a producer never posts, but a device
    /// may report its queue pairs' errors here).
    pub fn poll(&mut self) -> Result<usize> {
        let mut c = [Completion {
            wr_id: 0,
            qp: QpId(0),
            kind: splitrt_runtime::fabric::rdma::verbs::WcKind::Recv,
            status: WcStatus::Success,
            len: 0,
        }; 8];
        self.verbs.poll(&mut c)
    }
}

impl<V: Verbs> Drop for RingExport<V> {
    fn drop(&mut self) {
        for q in self.qps.drain(..) {
            let _ = self.verbs.destroy_qp(q);
        }
        let _ = self.verbs.deregister(&self.ring);
    }
}

/// The consumer's side for one producer: a queue pair connected to the
/// producer's, and a registered slot buffer the reads land in.
pub struct RdmaRingReader<V: Verbs> {
    verbs: V,
    qp: QpId,
    offer: Option<RingOffer>,
    slot: Vec<u64>,
    local: Region,
    timeout: Duration,
}

impl<V: Verbs> RdmaRingReader<V> {
    /// A reader for spectra up to `max_bytes`; send [`endpoint`] to the
    /// producer, then [`connect`] with its offer.
    ///
    /// [`endpoint`]: Self::endpoint
    /// [`connect`]: Self::connect
    pub fn new(mut verbs: V, max_bytes: usize, timeout: Duration) -> Result<RdmaRingReader<V>> {
        let mut slot = vec![0u64; slot_bytes(max_bytes) / 8];
        let local = verbs.register(slot.as_mut_ptr() as *mut u8, slot.len() * 8, false)?;
        let qp = verbs.create_qp(CAPS)?;
        Ok(RdmaRingReader {
            verbs,
            qp,
            offer: None,
            slot,
            local,
            timeout,
        })
    }

    /// This reader's queue pair, for the producer.
    pub fn endpoint(&self) -> QpEndpoint {
        self.verbs.endpoint(self.qp)
    }

    /// Connect to the producer's queue pair of `offer`.
    pub fn connect(&mut self, offer: RingOffer) -> Result<()> {
        self.verbs.connect(self.qp, &offer.qp)?;
        self.offer = Some(offer);
        Ok(())
    }

    /// Read the spectrum `info` announced (of `bytes` bytes) into `out`
    /// (exactly `bytes` long) and validate it. An announced place outside
    /// the offered ring is refused before anything is posted.
    pub fn read(
        &mut self,
        info: &SpectrumInfo,
        bytes: usize,
        digest: DigestKind,
        out: &mut [u8],
    ) -> Result<ReadOutcome> {
        let offer = self
            .offer
            .ok_or_else(|| Error::usage("RDMA ring reader used before connect"))?;
        let stride = slot_bytes(bytes);
        if out.len() != bytes
            || stride > self.slot.len() * 8
            || !info.offset.is_multiple_of(8)
            || info
                .offset
                .checked_add(stride as u64)
                .is_none_or(|e| e > offer.len)
        {
            return Ok(ReadOutcome::OutOfRing);
        }
        let raddr = offer.addr + info.offset;
        let base = self.local.addr;
        // tail, then everything before it, then the head again: each waits
        // for the read before it (fence)
        let parts = [(stride - 8, 8, false), (0, stride - 8, true), (0, 8, true)];
        for (i, &(at, len, fence)) in parts.iter().enumerate() {
            let wr = SendWr {
                wr_id: i as u64,
                op: Op::Read {
                    raddr: raddr + at as u64,
                    rkey: offer.rkey,
                },
                sge: self.local.sge(base + at as u64, len),
                inline: false,
                fence,
            };
            self.verbs.post_send(self.qp, &wr)?;
        }
        self.wait(parts.len())?;
        // SAFETY: the slot buffer holds `stride` initialized bytes (u64s);
        // the reads completed, nothing writes it now.
        let copy = unsafe { std::slice::from_raw_parts(self.slot.as_ptr() as *const u8, stride) };
        let outcome = check_slot(copy, bytes, info, digest);
        if outcome == ReadOutcome::Valid {
            out.copy_from_slice(&copy[super::ring::DATA_OFFSET..super::ring::DATA_OFFSET + bytes]);
        }
        Ok(outcome)
    }

    /// Poll until `n` completions arrived, all successful, or fail (a
    /// completion in error, or the timeout: the producer's side is gone).
    fn wait(&mut self, n: usize) -> Result<()> {
        let start = Instant::now();
        let mut got = 0;
        let mut c = [Completion {
            wr_id: 0,
            qp: self.qp,
            kind: splitrt_runtime::fabric::rdma::verbs::WcKind::Read,
            status: WcStatus::Success,
            len: 0,
        }; 4];
        while got < n {
            let k = self.verbs.poll(&mut c)?;
            for x in &c[..k] {
                if x.status != WcStatus::Success {
                    return Err(Error::protocol(format!(
                        "RDMA read of the producer's ring failed: {}",
                        x.status.describe()
                    )));
                }
            }
            got += k;
            if k == 0 {
                if start.elapsed() > self.timeout {
                    return Err(Error::protocol(format!(
                        "RDMA read of the producer's ring not completed within {:?}",
                        self.timeout
                    )));
                }
                std::hint::spin_loop();
            }
        }
        Ok(())
    }
}

impl<V: Verbs> Drop for RdmaRingReader<V> {
    fn drop(&mut self) {
        let _ = self.verbs.destroy_qp(self.qp);
        let _ = self.verbs.deregister(&self.local);
    }
}
