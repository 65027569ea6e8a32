//! The producer's side of vys reads by RDMA: its ring registered for
//! remote read, and a reliable-connected queue pair per consumer, made
//! when the consumer's `HELLO` carries its queue pair
//! ([`super::handshake`]) and destroyed with the read session. The
//! producer's CPU takes no part in a read; the consumer's side is
//! [`super::rdma_read`].
//!
//! Nothing a consumer is given lets it write: the ring is registered for
//! remote read only, and the queue pair carries no receive buffers.

use splitrt_runtime::fabric::rdma::verbs::{
    Access, Completion, QpCaps, QpEndpoint, QpId, Region, Verbs, WcKind, WcStatus,
};
use splitrt_runtime::Result;
use std::sync::atomic::AtomicU64;

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

    /// Little-endian encoding: queue pair, address, length, key.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let q = QpEndpoint::LEN;
        b[..q].copy_from_slice(&self.qp.encode());
        b[q..q + 8].copy_from_slice(&self.addr.to_le_bytes());
        b[q + 8..q + 16].copy_from_slice(&self.len.to_le_bytes());
        b[q + 16..q + 20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decode what a peer sent (`None`: wrong length, or a ring whose end
    /// overflows the address space).
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

/// The producer's queue pairs post nothing: the smallest queues a device
/// accepts.
const CAPS: QpCaps = QpCaps {
    send_depth: 1,
    recv_depth: 1,
    max_inline: 0,
    remote: Access::RemoteRead,
};

/// The producer's side: its ring registered for remote reads, a queue
/// pair per consumer it accepted.
pub struct RingExport<V: Verbs> {
    verbs: V,
    ring: Region,
    qps: Vec<QpId>,
}

impl<V: Verbs> RingExport<V> {
    /// Register `ring` (the producer's ring words) for remote reads (drop
    /// deregisters it).
    ///
    /// # Safety
    /// The memory of `ring` must stay allocated until this export is
    /// dropped: consumers holding the key read it by RDMA at any time, and
    /// the export does not borrow it (the producer keeps both side by
    /// side, the export dropped first).
    pub unsafe fn new(mut verbs: V, ring: &[AtomicU64]) -> Result<RingExport<V>> {
        // SAFETY: peers only read the ring (RemoteRead), whose words are
        // atomics, so no Rust reference is invalidated; it stays allocated
        // until the export (which deregisters on drop) is gone, by this
        // function's contract.
        let r = unsafe {
            verbs.register(ring.as_ptr() as *mut u8, ring.len() * 8, Access::RemoteRead)
        }?;
        Ok(RingExport {
            verbs,
            ring: r,
            qps: Vec::new(),
        })
    }

    /// What the device is (for messages).
    pub fn describe(&self) -> String {
        self.verbs.describe()
    }

    /// A queue pair for the consumer whose queue pair is `consumer`,
    /// connected, and the offer to send back to it.
    pub fn accept(&mut self, consumer: &QpEndpoint) -> Result<(QpId, RingOffer)> {
        let qp = self.verbs.create_qp(CAPS)?;
        if let Err(e) = self.verbs.connect(qp, consumer) {
            let _ = self.verbs.destroy_qp(qp);
            return Err(e);
        }
        self.qps.push(qp);
        let offer = RingOffer {
            qp: self.verbs.endpoint(qp),
            addr: self.ring.addr,
            len: self.ring.len as u64,
            rkey: self.ring.rkey,
        };
        Ok((qp, offer))
    }

    /// Destroy the queue pair of a consumer whose session ended: its
    /// reads fail from now on.
    pub fn release(&mut self, qp: QpId) {
        if let Some(i) = self.qps.iter().position(|&q| q == qp) {
            self.qps.swap_remove(i);
            let _ = self.verbs.destroy_qp(qp);
        }
    }

    /// Queue pairs open (one per consumer reading by RDMA).
    pub fn consumers(&self) -> usize {
        self.qps.len()
    }

    /// Drain the completion queue (a producer posts nothing, but a
    /// device may report its queue pairs' errors here).
    pub fn poll(&mut self) -> Result<usize> {
        let mut c = [Completion {
            wr_id: 0,
            qp: QpId(0),
            kind: WcKind::Recv,
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
