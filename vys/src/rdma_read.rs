//! The consumer's side of vys reads by RDMA read: one device, a queue pair
//! per producer ([`super::rdma_export`] is the producer's side), reads
//! landing straight in the consumer's data buffers (registered on first
//! use), a bounded number in flight, completions polled by the consumer's
//! thread. Nothing here blocks.
//!
//! **The ordering a validated read needs.** A slot is a seqlock framed by
//! its sequence id at the head and the tail ([`super::ring`]): the reader
//! must see the tail before the data and the head after it. One RDMA read
//! of the whole slot gives no such order (a device may fetch the bytes of
//! one read in any order), which is how a reader that checks only an id
//! can take a torn spectrum for a good one. So a read here is three RDMA
//! reads on the same queue pair into the slot-shaped buffer: the tail
//! word, then the head, timestamp and data with `IBV_SEND_FENCE` (it
//! starts only after the tail read completed), then the head word again,
//! fenced. The consumer checks the buffer with
//! [`check_slot`](super::ring::check_slot), as for every other route.
//!
//! **A read that does not complete** (the producer's host died, a link is
//! down) cannot simply be given up: the device could still write its
//! buffer later. Past the read timeout the producer's queue pair is
//! destroyed first, and only then are its reads failed and their buffers
//! handed back.
//!
//! Completions carry the read's id (a counter above the place index), so
//! a completion of a read already failed and replaced is recognised and
//! ignored.

use super::rdma_export::RingOffer;
use super::read_client::{Done, ReadResult};
use rustc_hash::FxHashMap;
use splitrt_runtime::fabric::rdma::verbs::{
    Access, Completion, Op, QpCaps, QpEndpoint, QpId, Region, SendWr, Verbs, WcKind, WcStatus,
};
use splitrt_runtime::Result;
use std::time::{Duration, Instant};

/// Bits of a read id that name its place.
const PLACE_BITS: u32 = 16;
/// Bits of a read id's counter: with the place and the two bits of the
/// part it fills a work request id; it wraps (after 2^46 reads, long
/// after a place's earlier read has ended).
const COUNTER_MASK: u64 = (1 << (62 - PLACE_BITS)) - 1;
/// Work requests per read: tail, body, head.
const PARTS: u64 = 3;
/// Reads in flight per producer at most.
pub const MAX_PER_PRODUCER: usize = 1024;

/// A producer the reader has a queue pair to (from [`RdmaReader::open`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerQp(usize);

struct Peer {
    qp: QpId,
    offer: Option<RingOffer>,
    limit: usize,
    inflight: usize,
    failed: Option<String>,
}

struct Place {
    id: u64,
    peer: usize,
    buf: Vec<u8>,
    /// Work requests posted and not yet completed.
    pending: u64,
    error: Option<String>,
    since: Instant,
}

/// Reads by RDMA of producers' rings, for one consumer.
pub struct RdmaReader<V: Verbs> {
    verbs: V,
    /// Registrations of the data buffers, by address.
    regions: FxHashMap<u64, Region>,
    peers: Vec<Option<Peer>>,
    places: Vec<Option<Place>>,
    free: Vec<usize>,
    next_id: u64,
    /// Reads that ended without reaching the device.
    ready: Vec<Done>,
    /// A read started or completed then.
    last_progress: Instant,
    read_timeout: Duration,
    late_check: Instant,
    comps: Vec<Completion>,
}

impl<V: Verbs> RdmaReader<V> {
    /// A reader with at most `places` reads in flight in all
    /// (1..=65536), each failing past `read_timeout`.
    pub fn new(verbs: V, places: usize, read_timeout: Duration) -> RdmaReader<V> {
        let n = places.clamp(1, 1 << PLACE_BITS);
        RdmaReader {
            verbs,
            regions: FxHashMap::default(),
            peers: Vec::new(),
            places: (0..n).map(|_| None).collect(),
            free: (0..n).rev().collect(),
            next_id: 1,
            ready: Vec::new(),
            last_progress: Instant::now(),
            read_timeout,
            late_check: Instant::now(),
            comps: vec![
                Completion {
                    wr_id: 0,
                    qp: QpId(0),
                    kind: WcKind::Read,
                    status: WcStatus::Success,
                    len: 0,
                };
                32
            ],
        }
    }

    /// What the device is (for messages).
    pub fn describe(&self) -> String {
        self.verbs.describe()
    }

    /// A queue pair for a new producer, `per_producer` reads in flight at
    /// most (1..=[`MAX_PER_PRODUCER`]); its endpoint goes in the `HELLO`,
    /// then [`connect`](Self::connect) with the producer's offer (or
    /// [`close`](Self::close) if none comes).
    pub fn open(&mut self, per_producer: usize) -> Result<(ProducerQp, QpEndpoint)> {
        let limit = per_producer.clamp(1, MAX_PER_PRODUCER);
        let qp = self.verbs.create_qp(QpCaps {
            send_depth: (limit as u64 * PARTS) as u32,
            recv_depth: 1,
            max_inline: 0,
            remote: Access::Local,
        })?;
        let peer = Peer {
            qp,
            offer: None,
            limit,
            inflight: 0,
            failed: None,
        };
        let i = match self.peers.iter().position(Option::is_none) {
            Some(i) => {
                self.peers[i] = Some(peer);
                i
            }
            None => {
                self.peers.push(Some(peer));
                self.peers.len() - 1
            }
        };
        Ok((ProducerQp(i), self.verbs.endpoint(qp)))
    }

    /// Connect `p`'s queue pair to the producer's of `offer`.
    pub fn connect(&mut self, p: ProducerQp, offer: RingOffer) -> Result<()> {
        let Some(Some(peer)) = self.peers.get_mut(p.0) else {
            return Err(splitrt_runtime::Error::usage("no such RDMA producer"));
        };
        self.verbs.connect(peer.qp, &offer.qp)?;
        peer.offer = Some(offer);
        Ok(())
    }

    /// Why reads of `p` fail, if they do (a completion in error, a read
    /// past the timeout): the consumer then closes it.
    pub fn failed(&self, p: ProducerQp) -> Option<&str> {
        match self.peers.get(p.0) {
            Some(Some(peer)) => peer.failed.as_deref(),
            _ => Some("the RDMA queue pair was closed"),
        }
    }

    /// Reads of `p` that may start now.
    pub fn room(&self, p: ProducerQp) -> usize {
        match self.peers.get(p.0) {
            Some(Some(peer)) if peer.failed.is_none() && peer.offer.is_some() => {
                (peer.limit - peer.inflight).min(self.free.len())
            }
            _ => 0,
        }
    }

    /// Whether no read is in flight.
    pub fn idle(&self) -> bool {
        self.free.len() == self.places.len() && self.ready.is_empty()
    }

    /// How long since a read started or completed: a caller polling for
    /// completions may sleep between polls once this grows (a producer
    /// whose host died answers nothing until the read timeout).
    pub fn quiet_for(&self) -> Duration {
        self.last_progress.elapsed()
    }

    /// Read the slot of `stride` bytes at ring `offset` of producer `p`
    /// into `buf` (its first `stride` bytes). Returns the read's id, or
    /// the buffer back if no read can start now. A place outside the
    /// offered ring ends as a failure without reaching the device.
    ///
    /// # Safety
    /// `buf`'s memory is registered with the device on first use and stays
    /// registered (by address) for later reads until the reader is dropped.
    /// Every buffer given here must therefore stay allocated, and not be
    /// reallocated, while the reader lives (one of a fixed pool, as the
    /// consumer's data buffers are): a buffer freed and another allocated
    /// at the same address would be written through the old registration.
    pub unsafe fn read(
        &mut self,
        p: ProducerQp,
        offset: u64,
        stride: usize,
        buf: Vec<u8>,
    ) -> std::result::Result<u64, Vec<u8>> {
        if self.room(p) == 0 || buf.len() < stride || stride < 16 || !stride.is_multiple_of(8) {
            return Err(buf);
        }
        let Some(place) = self.free.pop() else {
            return Err(buf);
        };
        let id = ((self.next_id & COUNTER_MASK) << PLACE_BITS) | place as u64;
        self.next_id = self.next_id.wrapping_add(1);
        let peer = self.peers[p.0].as_mut().expect("room checked the peer");
        let offer = peer.offer.expect("room checked the offer");
        let in_ring = offset.is_multiple_of(8)
            && offset
                .checked_add(stride as u64)
                .is_some_and(|e| e <= offer.len);
        if !in_ring {
            self.free.push(place);
            self.ready.push(Done {
                id,
                buf,
                result: ReadResult::Failed(
                    "the announced offset is not a slot of the producer's ring".into(),
                ),
            });
            return Ok(id);
        }
        let base = buf.as_ptr() as u64;
        let local = match self.regions.get(&base) {
            Some(r) if r.len >= buf.len() => *r,
            // SAFETY: a local-access region (no peer can touch it); the
            // device writes it only through reads posted below, into the
            // buffer held by its place until they complete or their queue
            // pair is destroyed (see `fail_peer`).
            _ => match unsafe {
                self.verbs
                    .register(buf.as_ptr() as *mut u8, buf.len(), Access::Local)
            } {
                Ok(r) => {
                    if let Some(old) = self.regions.insert(base, r) {
                        let _ = self.verbs.deregister(&old);
                    }
                    r
                }
                Err(e) => {
                    self.free.push(place);
                    self.ready.push(Done {
                        id,
                        buf,
                        result: ReadResult::Failed(format!(
                            "registering a data buffer for RDMA failed: {e}"
                        )),
                    });
                    return Ok(id);
                }
            },
        };
        let raddr = offer.addr + offset;
        // tail, then everything before it, then the head again: each waits
        // for the read before it (fence)
        let parts = [(stride - 8, 8, false), (0, stride - 8, true), (0, 8, true)];
        let mut posted = 0;
        let mut error = None;
        for (i, &(at, len, fence)) in parts.iter().enumerate() {
            let wr = SendWr {
                wr_id: (id << 2) | i as u64,
                op: Op::Read {
                    raddr: raddr + at as u64,
                    rkey: offer.rkey,
                },
                sge: local.sge(base + at as u64, len),
                inline: false,
                fence,
            };
            // SAFETY: the destination lies in `local`, registered for this
            // buffer; the buffer moves into its place below (its heap bytes
            // stay put) and is handed back only when every posted read
            // completed or the queue pair was destroyed (`fail_peer`).
            match unsafe { self.verbs.post_send(peer.qp, &wr) } {
                Ok(()) => posted += 1,
                Err(e) => {
                    let why = format!("posting an RDMA read failed: {e}");
                    peer.failed = Some(why.clone());
                    error = Some(why);
                    break;
                }
            }
        }
        if posted == 0 {
            self.free.push(place);
            self.ready.push(Done {
                id,
                buf,
                result: ReadResult::Failed(error.unwrap_or_default()),
            });
            return Ok(id);
        }
        peer.inflight += 1;
        self.last_progress = Instant::now();
        self.places[place] = Some(Place {
            id,
            peer: p.0,
            buf,
            pending: posted,
            error,
            since: Instant::now(),
        });
        Ok(id)
    }

    fn finish(&mut self, place: usize, done: &mut Vec<Done>) {
        if let Some(pl) = self.places[place].take() {
            self.free.push(place);
            if let Some(Some(peer)) = self.peers.get_mut(pl.peer) {
                peer.inflight -= 1;
            }
            let result = match pl.error {
                Some(e) => ReadResult::Failed(e),
                None => ReadResult::Slot,
            };
            done.push(Done {
                id: pl.id,
                buf: pl.buf,
                result,
            });
        }
    }

    /// Take completions, fail reads past the timeout (their producer's
    /// queue pair destroyed first), and append finished reads to `done`
    /// (a [`ReadResult::Slot`] is to be checked by the caller).
    pub fn progress(&mut self, done: &mut Vec<Done>) -> Result<()> {
        done.append(&mut self.ready);
        loop {
            let n = self.verbs.poll(&mut self.comps)?;
            if n > 0 {
                self.last_progress = Instant::now();
            }
            for k in 0..n {
                let c = self.comps[k];
                let id = c.wr_id >> 2;
                let place = (id & ((1 << PLACE_BITS) - 1)) as usize;
                let Some(Some(pl)) = self.places.get_mut(place) else {
                    continue;
                };
                if pl.id != id {
                    continue;
                }
                pl.pending -= 1;
                if c.status != WcStatus::Success && pl.error.is_none() {
                    let why = format!(
                        "RDMA read of the producer's ring failed: {}",
                        c.status.describe()
                    );
                    if let Some(Some(peer)) = self.peers.get_mut(pl.peer) {
                        peer.failed.get_or_insert_with(|| why.clone());
                    }
                    pl.error = Some(why);
                }
                if pl.pending == 0 {
                    self.finish(place, done);
                }
            }
            if n < self.comps.len() {
                break;
            }
        }
        if Instant::now() >= self.late_check {
            self.late_check = Instant::now() + Duration::from_millis(10);
            let late: Vec<usize> = self
                .places
                .iter()
                .flatten()
                .filter(|pl| pl.since.elapsed() > self.read_timeout)
                .map(|pl| pl.peer)
                .collect();
            for peer in late {
                let why = format!(
                    "RDMA read of the producer's ring not completed within {:?}",
                    self.read_timeout
                );
                self.fail_peer(peer, why, done);
            }
        }
        Ok(())
    }

    /// Destroy `peer`'s queue pair (so the device writes none of its
    /// buffers any more), then fail its reads with `why`.
    fn fail_peer(&mut self, peer: usize, why: String, done: &mut Vec<Done>) {
        let Some(Some(pr)) = self.peers.get_mut(peer) else {
            return;
        };
        if pr.qp != QpId(u32::MAX) {
            let _ = self.verbs.destroy_qp(pr.qp);
            pr.qp = QpId(u32::MAX);
        }
        pr.failed.get_or_insert(why.clone());
        for place in 0..self.places.len() {
            if let Some(pl) = &mut self.places[place] {
                if pl.peer == peer {
                    pl.error.get_or_insert(why.clone());
                    self.finish(place, done);
                }
            }
        }
    }

    /// Forget producer `p`: its queue pair destroyed, its reads failed
    /// with `why` into `done`.
    pub fn close(&mut self, p: ProducerQp, why: &str, done: &mut Vec<Done>) {
        self.fail_peer(p.0, why.to_string(), done);
        if let Some(slot) = self.peers.get_mut(p.0) {
            *slot = None;
        }
    }
}

impl<V: Verbs> Drop for RdmaReader<V> {
    fn drop(&mut self) {
        for peer in self.peers.iter().flatten() {
            if peer.qp != QpId(u32::MAX) {
                let _ = self.verbs.destroy_qp(peer.qp);
            }
        }
        for r in self.regions.values() {
            let _ = self.verbs.deregister(r);
        }
    }
}
