//! Shared memory between the ranks of this host, UDP to the others:
//! chosen per peer, once, at start-up; one predictable branch per send.

use super::shm::ShmFabric;
use super::udp::UdpFabric;
use super::{Channel, Delivery, Fabric, LoadStore, Packet, SegmentRef, Wakeup};
use crate::Result;

/// A rank's fabrics in a job that spans hosts.
pub struct Hybrid {
    /// This host's ranks (owns the local segment).
    pub shm: ShmFabric,
    /// Every other rank (deposits into the shm fabric's segment).
    pub udp: UdpFabric,
    /// Per peer: reached over UDP.
    remote: Vec<bool>,
}

impl Hybrid {
    /// Combine: peers in `shm.members()` go through shared memory.
    pub fn new(shm: ShmFabric, udp: UdpFabric) -> Hybrid {
        let mut remote = vec![true; shm.size()];
        for &m in shm.members() {
            remote[m] = false;
        }
        Hybrid { shm, udp, remote }
    }

    #[inline]
    fn is_remote(&self, peer: usize) -> bool {
        self.remote.get(peer).copied().unwrap_or(false)
    }
}

impl Fabric for Hybrid {
    fn rank(&self) -> usize {
        self.shm.rank()
    }
    fn size(&self) -> usize {
        self.remote.len()
    }
    fn max_inline(&self, peer: usize) -> usize {
        if self.is_remote(peer) {
            self.udp.max_inline(peer)
        } else {
            self.shm.max_inline(peer)
        }
    }
    fn max_inline_unsplit(&self, peer: usize, words: usize) -> usize {
        if self.is_remote(peer) {
            self.udp.max_inline_unsplit(peer, words)
        } else {
            self.shm.max_inline_unsplit(peer, words)
        }
    }
    fn segment_len(&self, peer: usize) -> usize {
        self.shm.segment_len(peer)
    }
    fn local_segment(&self) -> SegmentRef {
        self.shm.local_segment()
    }
    #[inline]
    fn try_send_why(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<super::Sent> {
        if self.is_remote(peer) {
            self.udp.try_send_why(peer, ch, pkt, stall)
        } else {
            self.shm.try_send_why(peer, ch, pkt, stall)
        }
    }
    fn frames_segment_sources(&self, peer: usize) -> bool {
        if self.is_remote(peer) {
            self.udp.frames_segment_sources(peer)
        } else {
            self.shm.frames_segment_sources(peer)
        }
    }
    #[inline]
    fn try_send_segment_why(
        &self,
        peer: usize,
        ch: Channel,
        tag: u16,
        words: &[u64],
        src: super::SegmentBytes<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<super::Sent> {
        if self.is_remote(peer) {
            self.udp
                .try_send_segment_why(peer, ch, tag, words, src, stall)
        } else {
            self.shm
                .try_send_segment_why(peer, ch, tag, words, src, stall)
        }
    }
    #[inline]
    fn try_send_short(&self, peer: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        if self.is_remote(peer) {
            self.udp.try_send_short(peer, ch, tag, words)
        } else {
            self.shm.try_send_short(peer, ch, tag, words)
        }
    }
    fn poll(&self, ch: Channel, deliver: &mut dyn FnMut(&Delivery<'_>)) -> Result<usize> {
        Ok(self.shm.poll(ch, deliver)? + self.udp.poll(ch, deliver)?)
    }
    fn credits(&self, peer: usize, ch: Channel) -> Option<(usize, usize)> {
        if self.is_remote(peer) {
            self.udp.credits(peer, ch)
        } else {
            self.shm.credits(peer, ch)
        }
    }
    /// The UDP side's (the shm side deposits at send time).
    fn share_frozen(&mut self, frozen: std::sync::Arc<crate::frozen::FrozenRanges>) {
        self.udp.share_frozen(frozen)
    }
    fn arrivals_waiting(&self) -> bool {
        self.udp.arrivals_waiting()
    }
    fn quiesced(&self) -> Result<bool> {
        self.udp.quiesced()
    }
    fn unacked_ranks(&self) -> Vec<usize> {
        Fabric::unacked_ranks(&self.udp)
    }
    #[inline]
    fn load_store(&self) -> Option<&dyn LoadStore> {
        Some(self)
    }
    #[inline]
    fn wakeup(&self) -> Option<&dyn Wakeup> {
        Some(self)
    }
}

/// This host's ranks' segments (the others are not mapped here).
impl LoadStore for Hybrid {
    fn peer_segment(&self, peer: usize) -> Option<SegmentRef> {
        if self.is_remote(peer) {
            None
        } else {
            self.shm.peer_segment(peer)
        }
    }
}

/// The shm doorbell with a look at the socket; `idle_wait` is the timed
/// sleep (datagrams ring no doorbell).
impl Wakeup for Hybrid {
    /// The doorbell bridge's wait: the shm doorbell (this host's ranks
    /// ring it), with a look at the UDP side (without waiting) before and
    /// after; a datagram from another host waits at most one doorbell wait
    /// (2 ms) to be noticed.
    fn await_traffic(&self, limit: std::time::Duration, stop: &dyn Fn() -> bool) -> bool {
        let now = std::time::Duration::ZERO;
        self.udp.await_traffic(now, stop)
            || self.shm.await_traffic(limit, stop)
            || self.udp.await_traffic(now, stop)
    }

    fn traffic_seq(&self) -> Option<u32> {
        self.shm.traffic_seq()
    }
}
