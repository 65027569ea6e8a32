//! A **test double** of RDMA verbs: an in-process model of reliable-
//! connected queue pairs, so the ibverbs fabric's protocol (credits,
//! buffers, frames, RDMA write and read, completions) runs in `cargo test`
//! on machines without RDMA hardware. It is never chosen at run time: jobs
//! run over a real device ([`super::device`]) or not at all.
//!
//! What it models, with the checks a real HCA makes:
//! * memory regions with local and remote keys and the remote access each
//!   allows (read, or read and write), as queue pairs do; every scatter/gather entry
//!   and every remote address is checked against them (protection and
//!   remote access errors), so a protocol bug cannot touch memory outside
//!   what was registered;
//! * RC queue pairs connected by [`QpEndpoint`]s; work runs in order per
//!   queue pair, asynchronously: posted requests wait until some device
//!   polls, and a seeded generator picks which queue pair advances next,
//!   so queue pairs interleave differently per seed;
//! * a send with no receive posted at the peer fails with
//!   [`WcStatus::ReceiverNotReady`] and puts the queue pair in error (a
//!   real device retries first; the fabric's credits must make it
//!   impossible, and the model turns any slip into a visible failure);
//! * a queue pair in error flushes its outstanding work
//!   ([`WcStatus::Flushed`]); a destroyed peer makes later work fail with
//!   [`WcStatus::Transport`].
//!
//! Inline requests copy their bytes at post time, as a device does.

use super::verbs::{
    Access, Completion, Op, QpCaps, QpEndpoint, QpId, Region, SendWr, Sge, Verbs, WcKind, WcStatus,
};
use crate::{Error, Result};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Arc;

/// Completions a device's queue holds at most before the model reports an
/// overrun (a real CQ overrun is fatal too).
const CQ_DEPTH: usize = 1 << 16;

/// The shared "wire" every model device attaches to.
#[derive(Clone)]
pub struct ModelNetwork {
    net: Arc<Mutex<Net>>,
}

/// Counters of what the model did (for tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// Sends delivered into a posted receive.
    pub sends: u64,
    /// RDMA writes executed.
    pub writes: u64,
    /// RDMA reads executed.
    pub reads: u64,
    /// Work requests that ended in error (any status but success or flush).
    pub errors: u64,
}

struct Net {
    devices: Vec<Dev>,
    qps: Vec<Option<Qp>>,
    rng: SmallRng,
    next_key: u32,
    stats: ModelStats,
    /// Nothing moves ([`ModelNetwork::hold`]): a link down, a wedged peer.
    held: bool,
    /// Queue-pair creation fails (see [`ModelNetwork::refuse_qps`]).
    refuse_qps: bool,
}

struct Dev {
    name: String,
    regions: Vec<(Region, Access)>,
    cq: VecDeque<Completion>,
    overrun: bool,
}

#[derive(PartialEq, Eq)]
enum State {
    Created,
    Ready,
    Error,
}

struct Qp {
    dev: usize,
    local: QpId,
    caps: QpCaps,
    psn: u32,
    state: State,
    remote: Option<usize>,
    recvs: VecDeque<(u64, Sge)>,
    sends: VecDeque<(SendWr, Option<Vec<u8>>)>,
    /// The request after the first already read its data (an unfenced
    /// RDMA read may run before the read ahead of it; it completes in
    /// order all the same).
    next_prefetched: bool,
}

impl Default for ModelNetwork {
    fn default() -> Self {
        Self::new(0)
    }
}

impl ModelNetwork {
    /// A network whose scheduling choices follow `seed`.
    pub fn new(seed: u64) -> ModelNetwork {
        ModelNetwork {
            net: Arc::new(Mutex::new(Net {
                devices: Vec::new(),
                qps: Vec::new(),
                rng: SmallRng::seed_from_u64(seed),
                next_key: 0x100,
                stats: ModelStats::default(),
                held: false,
                refuse_qps: false,
            })),
        }
    }

    /// A new device on this network (one per rank).
    pub fn device(&self, name: &str) -> ModelDevice {
        let mut n = self.net.lock();
        n.devices.push(Dev {
            name: name.to_string(),
            regions: Vec::new(),
            cq: VecDeque::new(),
            overrun: false,
        });
        ModelDevice {
            net: self.net.clone(),
            dev: n.devices.len() - 1,
            qps: Vec::new(),
        }
    }

    /// What the model has done so far.
    pub fn stats(&self) -> ModelStats {
        self.net.lock().stats
    }

    /// Stop (`true`) or resume executing posted requests: while held,
    /// requests wait and nothing completes, as over a link that went down
    /// or toward a wedged peer.
    pub fn hold(&self, held: bool) {
        self.net.lock().held = held;
    }

    /// Make queue-pair creation fail (`true`) or work again, on every
    /// device: a device out of queue pairs or locked memory.
    pub fn refuse_qps(&self, refuse: bool) {
        self.net.lock().refuse_qps = refuse;
    }

    /// Queue pairs created and not destroyed, on every device.
    pub fn live_qps(&self) -> usize {
        self.net.lock().qps.iter().flatten().count()
    }
}

/// One rank's device on a [`ModelNetwork`] (test double).
pub struct ModelDevice {
    net: Arc<Mutex<Net>>,
    dev: usize,
    /// Global queue-pair index of each local [`QpId`].
    qps: Vec<usize>,
}

impl Net {
    fn complete(&mut self, dev: usize, c: Completion) {
        if !matches!(c.status, WcStatus::Success | WcStatus::Flushed) {
            self.stats.errors += 1;
        }
        let d = &mut self.devices[dev];
        if d.cq.len() >= CQ_DEPTH {
            d.overrun = true;
        } else {
            d.cq.push_back(c);
        }
    }

    fn region_by_lkey(&self, dev: usize, sge: &Sge) -> bool {
        self.devices[dev]
            .regions
            .iter()
            .any(|(r, _)| r.lkey == sge.lkey && r.covers(sge.addr, sge.len as usize))
    }

    /// Whether `dev` has a region of key `rkey` covering the range that
    /// allows `need` remote access.
    fn region_by_rkey(&self, dev: usize, rkey: u32, addr: u64, len: usize, need: Access) -> bool {
        self.devices[dev]
            .regions
            .iter()
            .any(|(r, a)| r.rkey != 0 && r.rkey == rkey && r.covers(addr, len) && *a >= need)
    }

    /// Put queue pair `g` in error and flush what it holds.
    fn fail_qp(&mut self, g: usize) {
        let Some(q) = self.qps[g].as_mut() else {
            return;
        };
        q.state = State::Error;
        let (dev, local) = (q.dev, q.local);
        let sends: Vec<_> = q.sends.drain(..).collect();
        let recvs: Vec<_> = q.recvs.drain(..).collect();
        for (wr, _) in sends {
            self.complete(
                dev,
                Completion {
                    wr_id: wr.wr_id,
                    qp: local,
                    kind: kind_of(&wr.op),
                    status: WcStatus::Flushed,
                    len: 0,
                },
            );
        }
        for (wr_id, _) in recvs {
            self.complete(
                dev,
                Completion {
                    wr_id,
                    qp: local,
                    kind: WcKind::Recv,
                    status: WcStatus::Flushed,
                    len: 0,
                },
            );
        }
    }

    /// Execute the first posted request of queue pair `g`.
    fn step(&mut self, g: usize) {
        let Some(q) = self.qps[g].as_mut() else {
            return;
        };
        let Some((wr, inline)) = q.sends.pop_front() else {
            return;
        };
        let early = std::mem::take(&mut q.next_prefetched);
        let (dev, local, remote) = (q.dev, q.local, q.remote);
        let done = |net: &mut Net, status: WcStatus| {
            net.complete(
                dev,
                Completion {
                    wr_id: wr.wr_id,
                    qp: local,
                    kind: kind_of(&wr.op),
                    status,
                    len: 0,
                },
            );
            if status != WcStatus::Success {
                net.fail_qp(g);
            }
        };
        // the peer queue pair, if it still exists and is ready
        let peer = remote.filter(|&r| {
            self.qps[r]
                .as_ref()
                .is_some_and(|p| p.state == State::Ready && p.remote == Some(g))
        });
        let Some(r) = peer else {
            return done(self, WcStatus::Transport);
        };
        let rdev = self.qps[r].as_ref().map_or(0, |p| p.dev);
        // The local memory is checked again now, as a device checks its
        // keys at execution: a region deregistered since the post (its
        // memory perhaps freed) is not written or read.
        if inline.is_none() && !self.region_by_lkey(dev, &wr.sge) {
            return done(self, WcStatus::LocalProtection);
        }
        // what the target queue pair lets its peer do
        let allowed = self.qps[r]
            .as_ref()
            .map_or(Access::Local, |p| p.caps.remote);
        let len = wr.sge.len as usize;
        match wr.op {
            Op::Send => {
                let Some((rid, rsge)) = self.qps[r].as_mut().and_then(|p| p.recvs.pop_front())
                else {
                    return done(self, WcStatus::ReceiverNotReady);
                };
                if len > rsge.len as usize || !self.region_by_lkey(rdev, &rsge) {
                    // the receiver's buffer is too short: both sides fail
                    let rlocal = self.qps[r].as_ref().map_or(QpId(0), |p| p.local);
                    self.complete(
                        rdev,
                        Completion {
                            wr_id: rid,
                            qp: rlocal,
                            kind: WcKind::Recv,
                            status: WcStatus::Other(1),
                            len: 0,
                        },
                    );
                    self.fail_qp(r);
                    return done(self, WcStatus::Other(9));
                }
                // SAFETY: the receive buffer was just checked against a
                // region of its device, the source likewise (or copied
                // inline at post time); `register`'s and the posts'
                // contracts keep those bytes valid and unaliased while the
                // requests are outstanding.
                unsafe { copy(&inline, wr.sge.addr, rsge.addr, len) };
                self.stats.sends += 1;
                let rlocal = self.qps[r].as_ref().map_or(QpId(0), |p| p.local);
                self.complete(
                    rdev,
                    Completion {
                        wr_id: rid,
                        qp: rlocal,
                        kind: WcKind::Recv,
                        status: WcStatus::Success,
                        len: len as u32,
                    },
                );
                done(self, WcStatus::Success)
            }
            Op::Write { raddr, rkey } => {
                if allowed < Access::RemoteReadWrite
                    || !self.region_by_rkey(rdev, rkey, raddr, len, Access::RemoteReadWrite)
                {
                    return done(self, WcStatus::RemoteAccess);
                }
                // SAFETY: the destination was just checked against the
                // peer's remote-enabled region, valid until deregistered
                // (`register`'s contract); the source as for Send.
                unsafe { copy(&inline, wr.sge.addr, raddr, len) };
                self.stats.writes += 1;
                done(self, WcStatus::Success)
            }
            Op::Read { raddr, rkey } => {
                if allowed < Access::RemoteRead
                    || !self.region_by_rkey(rdev, rkey, raddr, len, Access::RemoteRead)
                {
                    return done(self, WcStatus::RemoteAccess);
                }
                // What a device may do: start the next read before this
                // one ends, unless it is fenced (`IBV_SEND_FENCE`). Half
                // the time the next unfenced read's data is fetched first.
                let next = self.qps[g]
                    .as_ref()
                    .and_then(|q| q.sends.front())
                    .map(|(w, _)| *w);
                if let Some(SendWr {
                    op:
                        Op::Read {
                            raddr: nraddr,
                            rkey: nrkey,
                        },
                    sge: nsge,
                    fence: false,
                    ..
                }) = next
                {
                    let nlen = nsge.len as usize;
                    if self.region_by_rkey(rdev, nrkey, nraddr, nlen, Access::RemoteRead)
                        && self.region_by_lkey(dev, &nsge)
                        && self.rng.gen_bool(0.5)
                    {
                        // SAFETY: the source was just checked against the
                        // peer's remote-enabled region, the destination
                        // against a local region; both valid while so
                        // registered and the request outstanding
                        // (`register`'s and `post_send`'s contracts).
                        unsafe { copy(&None, nraddr, nsge.addr, nlen) };
                        if let Some(q) = self.qps[g].as_mut() {
                            q.next_prefetched = true;
                        }
                    }
                }
                if !early {
                    // SAFETY: the source was just checked against the
                    // peer's remote-enabled region, the destination
                    // against a local region (above); both valid while so
                    // registered and the request outstanding.
                    unsafe { copy(&None, raddr, wr.sge.addr, len) };
                }
                self.stats.reads += 1;
                done(self, WcStatus::Success)
            }
        }
    }

    /// Run up to `budget` posted requests, picking queue pairs at random.
    fn advance(&mut self, budget: usize) {
        if self.held {
            return;
        }
        for _ in 0..budget {
            let busy: Vec<usize> = (0..self.qps.len())
                .filter(|&g| self.qps[g].as_ref().is_some_and(|q| !q.sends.is_empty()))
                .collect();
            if busy.is_empty() {
                return;
            }
            let g = busy[self.rng.gen_range(0..busy.len())];
            self.step(g);
        }
    }
}

/// Copy `len` bytes to `dst` from the inline copy if any, else from `src`.
///
/// # Safety
/// `dst` (and `src` without an inline copy) must be valid for `len` bytes.
unsafe fn copy(inline: &Option<Vec<u8>>, src: u64, dst: u64, len: usize) {
    match inline {
        // SAFETY: `b` is a live vector of at least `len.min(b.len())` bytes;
        // `dst` is valid for `len` bytes (this function's `# Safety`
        // contract); `copy` allows overlap.
        Some(b) => unsafe { std::ptr::copy(b.as_ptr(), dst as *mut u8, len.min(b.len())) },
        // SAFETY: without an inline copy, `src` and `dst` are both valid
        // for `len` bytes (this function's `# Safety` contract).
        None => unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) },
    }
}

fn kind_of(op: &Op) -> WcKind {
    match op {
        Op::Send => WcKind::Send,
        Op::Write { .. } => WcKind::Write,
        Op::Read { .. } => WcKind::Read,
    }
}

impl ModelDevice {
    fn global(&self, qp: QpId) -> Result<usize> {
        self.qps
            .get(qp.0 as usize)
            .copied()
            .ok_or_else(|| Error::usage(format!("model: no queue pair {}", qp.0)))
    }
}

// SAFETY: the model touches only registered regions (key, bounds and
// access checked when a request executes) and posted entries while their
// requests are outstanding, and completes each posted request once, with
// its own wr_id; a destroyed queue pair's work is flushed, not executed.
unsafe impl Verbs for ModelDevice {
    fn describe(&self) -> String {
        format!(
            "verbs model device {} (test double)",
            self.net.lock().devices[self.dev].name
        )
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: Access) -> Result<Region> {
        if addr.is_null() || len == 0 {
            return Err(Error::usage("model: registering an empty region"));
        }
        let mut n = self.net.lock();
        let key = n.next_key;
        n.next_key += 2;
        let r = Region {
            addr: addr as u64,
            len,
            lkey: key,
            rkey: if access > Access::Local { key + 1 } else { 0 },
        };
        n.devices[self.dev].regions.push((r, access));
        Ok(r)
    }

    fn deregister(&mut self, region: &Region) -> Result<()> {
        let mut n = self.net.lock();
        let regions = &mut n.devices[self.dev].regions;
        let before = regions.len();
        regions.retain(|(r, _)| r.lkey != region.lkey);
        if regions.len() == before {
            return Err(Error::usage(format!(
                "model: no region with key {:#x}",
                region.lkey
            )));
        }
        Ok(())
    }

    fn create_qp(&mut self, caps: QpCaps) -> Result<QpId> {
        let mut n = self.net.lock();
        if n.refuse_qps {
            return Err(Error::io(
                "model: creating a queue pair",
                std::io::Error::from_raw_os_error(libc::ENOMEM),
            ));
        }
        let psn = n.rng.gen::<u32>() & 0xff_ffff;
        let local = QpId(self.qps.len() as u32);
        n.qps.push(Some(Qp {
            dev: self.dev,
            local,
            caps,
            psn,
            state: State::Created,
            remote: None,
            recvs: VecDeque::new(),
            sends: VecDeque::new(),
            next_prefetched: false,
        }));
        self.qps.push(n.qps.len() - 1);
        Ok(local)
    }

    fn max_inline(&self, qp: QpId) -> u32 {
        let Ok(g) = self.global(qp) else { return 0 };
        self.net.lock().qps[g]
            .as_ref()
            .map_or(0, |q| q.caps.max_inline)
    }

    fn endpoint(&self, qp: QpId) -> QpEndpoint {
        let g = self.global(qp).unwrap_or(usize::MAX);
        let n = self.net.lock();
        let psn = n.qps.get(g).and_then(|q| q.as_ref()).map_or(0, |q| q.psn);
        QpEndpoint {
            lid: self.dev as u16 + 1,
            qpn: g as u32 + 1,
            psn,
            gid: [0; 16],
        }
    }

    fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()> {
        let g = self.global(qp)?;
        let mut n = self.net.lock();
        let r = remote.qpn.wrapping_sub(1) as usize;
        let ok = n
            .qps
            .get(r)
            .and_then(|q| q.as_ref())
            .is_some_and(|q| q.dev + 1 == remote.lid as usize && q.psn == remote.psn);
        if !ok {
            return Err(Error::config(format!(
                "model: no queue pair {} at lid {} (psn {})",
                remote.qpn, remote.lid, remote.psn
            )));
        }
        let q = n.qps[g]
            .as_mut()
            .ok_or_else(|| Error::usage("model: the queue pair was destroyed"))?;
        q.remote = Some(r);
        q.state = State::Ready;
        Ok(())
    }

    unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
        let g = self.global(qp)?;
        let mut n = self.net.lock();
        if !n.region_by_lkey(self.dev, &sge) {
            return Err(Error::usage(format!(
                "model: receive buffer {:#x}+{} not in a registered region (key {:#x})",
                sge.addr, sge.len, sge.lkey
            )));
        }
        let q = n.qps[g]
            .as_mut()
            .ok_or_else(|| Error::usage("model: the queue pair was destroyed"))?;
        if q.recvs.len() >= q.caps.recv_depth as usize {
            return Err(Error::usage("model: receive queue full"));
        }
        if q.state == State::Error {
            drop(n);
            let mut n = self.net.lock();
            n.complete(
                self.dev,
                Completion {
                    wr_id,
                    qp,
                    kind: WcKind::Recv,
                    status: WcStatus::Flushed,
                    len: 0,
                },
            );
            return Ok(());
        }
        q.recvs.push_back((wr_id, sge));
        Ok(())
    }

    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()> {
        let g = self.global(qp)?;
        let mut n = self.net.lock();
        let q = n.qps[g]
            .as_ref()
            .ok_or_else(|| Error::usage("model: the queue pair was destroyed"))?;
        if q.state == State::Created {
            return Err(Error::usage("model: posting to a queue pair not connected"));
        }
        if q.sends.len() >= q.caps.send_depth as usize {
            return Err(Error::usage("model: send queue full"));
        }
        if wr.inline && matches!(wr.op, Op::Read { .. }) {
            // a device refuses it too: an inline request carries its bytes
            return Err(Error::usage("model: an inline RDMA read"));
        }
        if wr.inline && wr.sge.len > q.caps.max_inline {
            return Err(Error::usage(format!(
                "model: inline request of {} B (max {})",
                wr.sge.len, q.caps.max_inline
            )));
        }
        let in_error = q.state == State::Error;
        let inline = if wr.inline {
            let mut b = vec![0u8; wr.sge.len as usize];
            // SAFETY: an inline request's bytes are read at post time; the
            // caller vouches for `sge` (post_send's contract: no key is
            // needed, as on a device).
            unsafe {
                std::ptr::copy_nonoverlapping(wr.sge.addr as *const u8, b.as_mut_ptr(), b.len())
            };
            Some(b)
        } else {
            None
        };
        if !wr.inline && !n.region_by_lkey(self.dev, &wr.sge) {
            // a local protection error completes the request in error
            n.complete(
                self.dev,
                Completion {
                    wr_id: wr.wr_id,
                    qp,
                    kind: kind_of(&wr.op),
                    status: WcStatus::LocalProtection,
                    len: 0,
                },
            );
            n.fail_qp(g);
            return Ok(());
        }
        if in_error {
            n.complete(
                self.dev,
                Completion {
                    wr_id: wr.wr_id,
                    qp,
                    kind: kind_of(&wr.op),
                    status: WcStatus::Flushed,
                    len: 0,
                },
            );
            return Ok(());
        }
        n.qps[g]
            .as_mut()
            .expect("own queue pair")
            .sends
            .push_back((*wr, inline));
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        let mut n = self.net.lock();
        let budget = n.rng.gen_range(1..=32);
        n.advance(budget);
        let d = &mut n.devices[self.dev];
        if d.overrun {
            return Err(Error::protocol("model: completion queue overrun"));
        }
        let k = out.len().min(d.cq.len());
        for (o, c) in out.iter_mut().zip(d.cq.drain(..k)) {
            *o = c;
        }
        Ok(k)
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let g = self.global(qp)?;
        let mut n = self.net.lock();
        n.fail_qp(g);
        n.qps[g] = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: QpCaps = QpCaps {
        send_depth: 16,
        recv_depth: 16,
        max_inline: 64,
        remote: Access::RemoteReadWrite,
    };

    /// Register all of `buf` on `d`.
    fn reg(d: &mut ModelDevice, buf: &mut [u8], access: Access) -> Region {
        // SAFETY: each test keeps its buffers alive until its end, reads
        // them only after draining the completions of the requests on them,
        // and posts (and executes) nothing after its last drain.
        unsafe { d.register(buf.as_mut_ptr(), buf.len(), access) }.unwrap()
    }

    /// Post `wr` on `d`.
    fn send(d: &mut ModelDevice, qp: QpId, wr: &SendWr) -> Result<()> {
        // SAFETY: the tests' requests name their registered buffers (see
        // `reg`), or a live local array for an inline send; which the model
        // checks, as these tests show.
        unsafe { d.post_send(qp, wr) }
    }

    /// Post a receive on `d`.
    fn recv(d: &mut ModelDevice, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
        // SAFETY: as for `send`: a registered buffer, kept until drained.
        unsafe { d.post_recv(qp, wr_id, sge) }
    }

    fn pair(net: &ModelNetwork) -> (ModelDevice, QpId, ModelDevice, QpId) {
        let (mut a, mut b) = (net.device("a"), net.device("b"));
        let qa = a.create_qp(CAPS).unwrap();
        let qb = b.create_qp(CAPS).unwrap();
        let (ea, eb) = (a.endpoint(qa), b.endpoint(qb));
        a.connect(qa, &eb).unwrap();
        b.connect(qb, &ea).unwrap();
        (a, qa, b, qb)
    }

    fn drain(d: &mut ModelDevice) -> Vec<Completion> {
        let mut all = Vec::new();
        let mut buf = [Completion {
            wr_id: 0,
            qp: QpId(0),
            kind: WcKind::Send,
            status: WcStatus::Success,
            len: 0,
        }; 8];
        for _ in 0..100 {
            let k = d.poll(&mut buf).unwrap();
            all.extend_from_slice(&buf[..k]);
        }
        all
    }

    /// Remote access as a device enforces it: a read-only region refuses
    /// writes, and so does a queue pair that allows reads only, even to a
    /// read-write region; reads pass both.
    #[test]
    fn read_only_regions_and_queue_pairs_refuse_writes() {
        for (region, qp) in [
            (Access::RemoteRead, Access::RemoteReadWrite),
            (Access::RemoteReadWrite, Access::RemoteRead),
        ] {
            let net = ModelNetwork::new(2);
            let (mut a, mut b) = (net.device("a"), net.device("b"));
            let qa = a.create_qp(CAPS).unwrap();
            let qb = b.create_qp(QpCaps { remote: qp, ..CAPS }).unwrap();
            let (ea, eb) = (a.endpoint(qa), b.endpoint(qb));
            a.connect(qa, &eb).unwrap();
            b.connect(qb, &ea).unwrap();
            let mut abuf = vec![1u8; 64];
            let mut bbuf = vec![2u8; 64];
            let ra = reg(&mut a, &mut abuf, Access::Local);
            let rb = reg(&mut b, &mut bbuf, region);
            let wr = |wr_id, op| SendWr {
                wr_id,
                op,
                sge: ra.sge(ra.addr, 8),
                inline: false,
                fence: false,
            };
            let (raddr, rkey) = (rb.addr, rb.rkey);
            send(&mut a, qa, &wr(1, Op::Read { raddr, rkey })).unwrap();
            assert_eq!(drain(&mut a)[0].status, WcStatus::Success);
            send(&mut a, qa, &wr(2, Op::Write { raddr, rkey })).unwrap();
            assert_eq!(drain(&mut a)[0].status, WcStatus::RemoteAccess);
            assert_eq!(bbuf, vec![2u8; 64], "{region:?} region, {qp:?} queue pair");
            assert_eq!(&abuf[..8], &[2u8; 8]);
        }
    }

    #[test]
    fn send_write_read_and_their_checks() {
        let net = ModelNetwork::new(1);
        let (mut a, qa, mut b, qb) = pair(&net);
        let mut abuf = vec![0u8; 256];
        let mut bbuf = vec![0u8; 256];
        // written before it is registered: a write through the Vec after
        // registration would be the program touching registered memory
        // while the device may use it (Miri: the device's pointer dies)
        abuf[..5].copy_from_slice(b"hello");
        let ra = reg(&mut a, &mut abuf, Access::Local);
        let rb = reg(&mut b, &mut bbuf, Access::RemoteReadWrite);
        recv(&mut b, qb, 7, rb.sge(rb.addr, 64)).unwrap();
        let wr = |wr_id, op, sge| SendWr {
            wr_id,
            op,
            sge,
            inline: false,
            fence: false,
        };
        send(&mut a, qa, &wr(1, Op::Send, ra.sge(ra.addr, 5))).unwrap();
        send(
            &mut a,
            qa,
            &wr(
                2,
                Op::Write {
                    raddr: rb.addr + 100,
                    rkey: rb.rkey,
                },
                ra.sge(ra.addr, 5),
            ),
        )
        .unwrap();
        send(
            &mut a,
            qa,
            &wr(
                3,
                Op::Read {
                    raddr: rb.addr + 100,
                    rkey: rb.rkey,
                },
                ra.sge(ra.addr + 10, 5),
            ),
        )
        .unwrap();
        let ca = drain(&mut a);
        let cb = drain(&mut b);
        assert_eq!(
            ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            vec![
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::Success)
            ]
        );
        assert_eq!(cb.len(), 1);
        assert_eq!((cb[0].wr_id, cb[0].len), (7, 5));
        assert_eq!(&bbuf[..5], b"hello");
        assert_eq!(&bbuf[100..105], b"hello");
        assert_eq!(&abuf[10..15], b"hello");
        // outside the peer's region: remote access error, queue pair in error
        send(
            &mut a,
            qa,
            &wr(
                4,
                Op::Write {
                    raddr: rb.addr + 250,
                    rkey: rb.rkey,
                },
                ra.sge(ra.addr, 10),
            ),
        )
        .unwrap();
        send(&mut a, qa, &wr(5, Op::Send, ra.sge(ra.addr, 5))).unwrap();
        let ca = drain(&mut a);
        assert_eq!(ca[0].status, WcStatus::RemoteAccess);
        assert_eq!(ca[1].status, WcStatus::Flushed);
        assert_eq!(&bbuf[250..], &[0; 6]);
    }

    #[test]
    fn a_send_without_a_posted_receive_fails_visibly() {
        let net = ModelNetwork::new(2);
        let (mut a, qa, _b, _qb) = pair(&net);
        let c = drain(&mut a);
        assert!(c.is_empty());
        let msg = *b"hi";
        send(
            &mut a,
            qa,
            &SendWr {
                wr_id: 1,
                op: Op::Send,
                sge: Sge {
                    addr: msg.as_ptr() as u64,
                    len: 2,
                    lkey: 0,
                },
                inline: true,
                fence: false,
            },
        )
        .unwrap();
        let c = drain(&mut a);
        assert_eq!(c[0].status, WcStatus::ReceiverNotReady);
        assert_eq!(net.stats().errors, 1);
    }

    #[test]
    fn unregistered_memory_is_refused() {
        let net = ModelNetwork::new(3);
        let (mut a, qa, mut b, qb) = pair(&net);
        let mut bbuf = vec![0u8; 64];
        let rb = reg(&mut b, &mut bbuf, Access::RemoteReadWrite);
        assert!(recv(&mut b, qb, 1, rb.sge(rb.addr, 64)).is_ok());
        let stray = [1u8; 8];
        send(
            &mut a,
            qa,
            &SendWr {
                wr_id: 9,
                op: Op::Send,
                sge: Sge {
                    addr: stray.as_ptr() as u64,
                    len: 8,
                    lkey: 0x999,
                },
                inline: false,
                fence: false,
            },
        )
        .unwrap();
        let c = drain(&mut a);
        assert_eq!(c[0].status, WcStatus::LocalProtection);
        assert!(bbuf.iter().all(|&x| x == 0));
    }
}
