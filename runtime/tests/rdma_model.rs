//! The ibverbs fabric's protocol over the verbs **model** (the in-process
//! test double of RC queue pairs): every rank's fabric in one process,
//! driven from one thread in an order the seed fixes, so any failure is
//! reproducible from its seed. The model fails a send that finds no
//! receive posted, so a credit slip cannot go unnoticed.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use splitrt_runtime::fabric::rdma::model::{ModelNetwork, ModelStats};
use splitrt_runtime::fabric::rdma::verbs::{
    Access, Completion, QpCaps, QpEndpoint, QpId, Region, SendWr, Sge, Verbs,
};
use splitrt_runtime::fabric::rdma::{PendingRdma, RdmaConfig, RdmaFabric};
use splitrt_runtime::fabric::{Channel, Fabric, Packet, SegmentRef};
use splitrt_runtime::view::LocalView;
use splitrt_runtime::{ErrorKind, Result};
use std::cell::RefCell;

type Model = splitrt_runtime::fabric::rdma::model::ModelDevice;

struct Job {
    fabrics: Vec<RdmaFabric<Model>>,
    segs: Vec<Vec<u8>>,
    net: ModelNetwork,
}

fn job(size: usize, seg_len: usize, cfg: RdmaConfig, seed: u64) -> Job {
    let net = ModelNetwork::new(seed);
    let mut segs: Vec<Vec<u8>> = (0..size).map(|_| vec![0u8; seg_len]).collect();
    let pending: Vec<PendingRdma<Model>> = segs
        .iter_mut()
        .enumerate()
        .map(|(r, s)| {
            // SAFETY: `s` is one of `segs`, moved into the Job beside the
            // fabrics, which are declared (so dropped) before it; the test
            // reads it only between operations that completed.
            let seg = unsafe { SegmentRef::new(s.as_mut_ptr(), s.len()) };
            // SAFETY: as above: `seg` outlives the fabric.
            unsafe { PendingRdma::new(net.device(&format!("rank{r}")), r, size, seg, cfg) }.unwrap()
        })
        .collect();
    let cards: Vec<_> = pending.iter().map(|p| p.card()).collect();
    let fabrics = pending
        .into_iter()
        .map(|p| p.connect(&cards).unwrap())
        .collect();
    Job { fabrics, segs, net }
}

/// The payload byte `i` of message `seq` from `src`.
fn byte(src: usize, seq: u64, i: usize) -> u8 {
    (src as u64 * 131 + seq * 7 + i as u64 * 13) as u8
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Short,
    Medium(usize),
    Long(usize),
}

#[derive(Clone, Copy, Debug)]
struct Planned {
    src: usize,
    dst: usize,
    ch: Channel,
    seq: u64,
    kind: Kind,
}

/// Offset of Long number `n` from `src` in a destination's segment.
fn long_slot(size: usize, src: usize, n: usize, slot: usize) -> u64 {
    ((n * size + src) * slot) as u64
}

fn run_seed(seed: u64, size: usize, msgs: usize, cfg: RdmaConfig) -> ModelStats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let longs_per_pair = 8;
    let slot = 3 * cfg.buffer_size;
    let seg_len = longs_per_pair * size * size * slot;
    let j = job(size, seg_len, cfg, seed);
    // the plan: who sends what, in which global order
    let mut longs = vec![0usize; size * size];
    let mut seqs = vec![0u64; size];
    let mut plan = Vec::with_capacity(msgs);
    for _ in 0..msgs {
        let src = rng.gen_range(0..size);
        let dst = rng.gen_range(0..size);
        let ch = if rng.gen_bool(0.5) {
            Channel::Request
        } else {
            Channel::Reply
        };
        let kind = match rng.gen_range(0..10) {
            0..=3 => Kind::Short,
            4..=7 => Kind::Medium(match rng.gen_range(0..4) {
                0 => rng.gen_range(0..64),
                1 => rng.gen_range(64..cfg.buffer_size),
                _ => rng.gen_range(0..=cfg.max_medium),
            }),
            _ if longs[src * size + dst] < longs_per_pair => {
                longs[src * size + dst] += 1;
                Kind::Long(rng.gen_range(0..=slot))
            }
            _ => Kind::Short,
        };
        plan.push(Planned {
            src,
            dst,
            ch,
            seq: seqs[src],
            kind,
        });
        seqs[src] += 1;
    }
    // what each rank expects, per (src, channel), in order
    let mut expect: Vec<Vec<std::collections::VecDeque<Planned>>> = (0..size)
        .map(|_| (0..2 * size).map(|_| Default::default()).collect())
        .collect();
    for p in &plan {
        expect[p.dst][p.src * 2 + p.ch as usize].push_back(*p);
    }
    let expect = RefCell::new(expect);
    let got = RefCell::new(0usize);
    let mut long_no = vec![0usize; size * size];
    let check =
        |rank: usize, seg: SegmentRef, d: &splitrt_runtime::fabric::Delivery<'_>, ch: Channel| {
            let mut e = expect.borrow_mut();
            let p = e[rank][d.src * 2 + ch as usize]
                .pop_front()
                .unwrap_or_else(|| panic!("seed {seed}: rank {rank} got an unplanned message"));
            assert_eq!(d.words.first().copied(), Some(p.seq), "seed {seed}: {p:?}");
            let len = match p.kind {
                Kind::Short => 0,
                Kind::Medium(n) | Kind::Long(n) => n,
            };
            // a Long arrives as its range of the segment, read through a view
            let bytes = match d.deposit {
                Some(dep) => {
                    assert!(d.payload.is_empty(), "seed {seed}: {p:?}");
                    assert!(seg.contains(dep.offset as usize, dep.len));
                    // SAFETY: dep.offset + dep.len lies inside the segment
                    // (checked just above): an in-bounds offset.
                    let at = unsafe { seg.base().add(dep.offset as usize) };
                    // SAFETY: at..at + dep.len lies in the segment, which its
                    // fabric keeps mapped: `j` is borrowed by the poll.
                    unsafe { LocalView::from_raw_parts(at, dep.len) }.to_vec()
                }
                None => d.payload.to_vec(),
            };
            assert_eq!(bytes.len(), len, "seed {seed}: {p:?}");
            assert!(
                bytes
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == byte(p.src, p.seq, i)),
                "seed {seed}: payload of {p:?}"
            );
            assert_eq!(d.deposit.is_some(), matches!(p.kind, Kind::Long(_)));
            *got.borrow_mut() += 1;
        };
    let poll_all = |j: &Job| -> Result<()> {
        for (r, f) in j.fabrics.iter().enumerate() {
            for ch in [Channel::Request, Channel::Reply] {
                let seg = f.local_segment();
                f.poll(ch, &mut |d| check(r, seg, d, ch))?;
            }
        }
        Ok(())
    };
    let mut payload = Vec::new();
    for p in &plan {
        let (len, deposit) = match p.kind {
            Kind::Short => (0, None),
            Kind::Medium(n) => (n, None),
            Kind::Long(n) => {
                let k = &mut long_no[p.src * size + p.dst];
                *k += 1;
                (n, Some(long_slot(size, p.src, *k - 1, slot)))
            }
        };
        payload.clear();
        payload.extend((0..len).map(|i| byte(p.src, p.seq, i)));
        let words = [p.seq, 0xfeed];
        let pkt = Packet {
            tag: 3,
            words: &words[..1 + (p.seq % 2) as usize],
            payload: &payload,
            deposit,
        };
        let mut tries = 0;
        while !j.fabrics[p.src]
            .try_send(p.dst, p.ch, &pkt, &mut |_| poll_all(&j))
            .unwrap_or_else(|e| panic!("seed {seed}: {p:?}: {e}"))
        {
            poll_all(&j).unwrap();
            tries += 1;
            assert!(tries < 1_000_000, "seed {seed}: no credit ever came back");
        }
        if rng.gen_bool(0.3) {
            poll_all(&j).unwrap();
        }
    }
    for _ in 0..100_000 {
        if *got.borrow() == plan.len() {
            break;
        }
        poll_all(&j).unwrap();
    }
    assert_eq!(*got.borrow(), plan.len(), "seed {seed}: messages missing");
    drop(j.segs);
    j.net.stats()
}

#[test]
fn messages_of_every_kind_arrive_intact_and_in_order_over_the_model() {
    let cfg = RdmaConfig {
        buffers: 4,
        buffer_size: 1024,
        max_medium: 5000,
        max_inline: 96,
        ..RdmaConfig::default()
    };
    let mut sends = 0;
    for seed in 0..6 {
        let s = run_seed(seed, 1 + seed as usize % 4, 4000, cfg);
        assert_eq!(s.errors, 0, "seed {seed}");
        sends += s.sends;
    }
    assert!(sends > 20_000, "{sends}");
}

#[test]
fn default_buffers_with_more_ranks() {
    let s = run_seed(100, 6, 6000, RdmaConfig::default());
    assert_eq!(s.errors, 0);
    assert!(s.writes > 0, "Long payloads went by RDMA write");
}

/// 4 buffers of 1 KiB per peer and channel: bounce copies and buffer
/// reuse happen within a few operations.
fn small_buffers() -> RdmaConfig {
    RdmaConfig {
        buffers: 4,
        buffer_size: 1024,
        max_medium: 4096,
        max_inline: 64,
        ..RdmaConfig::default()
    }
}

#[test]
fn get_and_put_by_rdma_with_bounds_checked() {
    let cfg = small_buffers();
    let mut j = job(2, 64 << 10, cfg, 7);
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    // from ordinary memory (bounce buffers), then from the segment itself
    j.fabrics[0].put(1, 100, &data).unwrap();
    assert_eq!(&j.segs[1][100..10_100], &data[..]);
    let mut back = vec![0u8; 10_000];
    j.fabrics[0].get(1, 100, &mut back).unwrap();
    assert_eq!(back, data);
    let seg0 = j.fabrics[0].local_segment();
    // SAFETY: the segment is j.segs[0], 64 KiB and alive for the test, so
    // 2000 is an in-bounds offset.
    let at = unsafe { seg0.base().add(2000) };
    // SAFETY: bytes 2000..7000 of j.segs[0], alive for the test; nothing
    // else reads or writes them while `in_seg` is in use (the `get` below).
    let in_seg = unsafe { std::slice::from_raw_parts_mut(at, 5000) };
    j.fabrics[0].get(1, 100, in_seg).unwrap();
    assert_eq!(&j.segs[0][2000..7000], &data[..5000]);
    j.fabrics[1].put(1, 0, &j.segs[0][2000..2010]).unwrap();
    // outside the peer's segment: refused before anything moves
    let e = j.fabrics[0].put(1, (64 << 10) - 5, &[1; 10]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
    let e = j.fabrics[0].get(7, 0, &mut [0; 4]).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert_eq!(j.net.stats().errors, 0);
    j.segs[0].clear();
}

/// Per-peer quiet: after `quiet_peer(1)` every non-blocking put to rank
/// 1 is there (puts to rank 2 may still be in flight; a full `quiet`
/// completes them), and a rank outside the job is refused.
#[test]
fn quiet_peer_completes_the_puts_to_one_peer() {
    let cfg = small_buffers();
    for seed in 0..8 {
        let mut j = job(3, 64 << 10, cfg, seed);
        let mut expect = vec![vec![0u8; 64 << 10]; 3];
        for n in 0..100usize {
            let peer = 1 + n % 2;
            let off = (n * 97) % (60 << 10);
            let src = [(n as u8).wrapping_mul(13) | 1; 64];
            assert!(j.fabrics[0].put_nb(peer, off as u64, &src).unwrap());
            expect[peer][off..off + 64].copy_from_slice(&src);
        }
        j.fabrics[0].quiet_peer(1).unwrap();
        assert!(
            j.segs[1] == expect[1],
            "seed {seed}: rank 1 after quiet_peer(1)"
        );
        let e = j.fabrics[0].quiet_peer(3).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        j.fabrics[0].quiet().unwrap();
        assert!(j.segs[2] == expect[2], "seed {seed}: rank 2 after quiet");
        assert_eq!(j.net.stats().errors, 0);
        j.segs.iter_mut().for_each(Vec::clear);
    }
}

/// Non-blocking puts: each returns once its source is copied out (the
/// source is overwritten at once here), many more than there are send
/// buffers proceed (completions free them), everything is at the peer
/// after `quiet`, and messages sent between them still arrive.
#[test]
fn non_blocking_puts_complete_by_quiet_and_free_their_buffers() {
    let cfg = small_buffers();
    for seed in 0..8 {
        let mut j = job(3, 64 << 10, cfg, seed);
        let mut src = vec![0u8; 1024];
        let mut expect = vec![vec![0u8; 64 << 10]; 3];
        for n in 0..200usize {
            let peer = 1 + n % 2;
            let len = [1, 8, 100, 1024][n % 4];
            let off = (n * 311) % (60 << 10);
            for (i, b) in src[..len].iter_mut().enumerate() {
                *b = (n * 31 + i) as u8;
            }
            assert!(j.fabrics[0].put_nb(peer, off as u64, &src[..len]).unwrap());
            expect[peer][off..off + len].copy_from_slice(&src[..len]);
            // the source is free for reuse at once
            src[..len].fill(0xee);
        }
        // larger than one buffer: not this path
        assert!(!j.fabrics[0].put_nb(1, 0, &vec![0u8; 1025]).unwrap());
        j.fabrics[0].quiet().unwrap();
        for (peer, want) in expect.iter().enumerate().skip(1) {
            assert!(j.segs[peer] == *want, "seed {seed}: rank {peer}");
        }
        let e = j.fabrics[0]
            .put_nb(1, (64 << 10) - 5, &[1; 10])
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
        assert_eq!(j.net.stats().errors, 0);
        j.segs.iter_mut().for_each(Vec::clear);
    }
}

#[test]
fn bad_sends_are_refused_with_the_reason() {
    let j = job(2, 4096, RdmaConfig::default(), 1);
    let f = &j.fabrics[0];
    let mut no = |_| -> Result<()> { Ok(()) };
    let long = Packet {
        tag: 1,
        words: &[],
        payload: &[1; 100],
        deposit: Some(4000),
    };
    let e = f.try_send(1, Channel::Request, &long, &mut no).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
    let big = vec![0u8; 70_000];
    let medium = Packet {
        tag: 1,
        words: &[],
        payload: &big,
        deposit: None,
    };
    let e = f
        .try_send(1, Channel::Request, &medium, &mut no)
        .unwrap_err();
    assert!(e.to_string().contains("Medium maximum"), "{e}");
    let e = f
        .try_send(
            5,
            Channel::Request,
            &Packet {
                deposit: None,
                ..long
            },
            &mut no,
        )
        .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(j.segs[1].iter().all(|&b| b == 0));
}

/// Without polling at the receiver, a sender runs out of credits and sees
/// back-pressure (never a send the model would fail for lack of a posted
/// receive); replies still flow while requests are blocked.
#[test]
fn back_pressure_per_channel_and_credits_come_back() {
    let cfg = RdmaConfig {
        buffers: 4,
        ..RdmaConfig::default()
    };
    let j = job(2, 4096, cfg, 2);
    let (a, b) = (&j.fabrics[0], &j.fabrics[1]);
    let pkt = Packet {
        tag: 1,
        words: &[1],
        payload: &[],
        deposit: None,
    };
    let mut no = |_| -> Result<()> { Ok(()) };
    let mut sent = 0;
    while a.try_send(1, Channel::Request, &pkt, &mut no).unwrap() {
        sent += 1;
        assert!(sent <= 4);
    }
    assert_eq!(sent, 4);
    assert_eq!(
        a.try_send_why(1, Channel::Request, &pkt, &mut no).unwrap(),
        Err(splitrt_runtime::fabric::WouldBlock::RdmaCreditsExhausted),
        "a refused send says why"
    );
    assert_eq!(a.credits(1, Channel::Request), Some((0, 4)));
    assert!(a.try_send(1, Channel::Reply, &pkt, &mut no).unwrap());
    // the receiver consumes: credits return (by mailbox write or piggy-back)
    let mut n = 0;
    for _ in 0..1000 {
        n += b.poll(Channel::Request, &mut |_| {}).unwrap();
        if n == 4 {
            break;
        }
    }
    assert_eq!(n, 4);
    let mut again = false;
    for _ in 0..1000 {
        b.poll(Channel::Reply, &mut |_| {}).unwrap();
        if a.try_send(1, Channel::Request, &pkt, &mut no).unwrap() {
            again = true;
            break;
        }
    }
    assert!(again, "credits came back");
    assert_eq!(j.net.stats().errors, 0);
}

/// Large get/put from memory outside the segment move straight to and from
/// it through a cached registration: registered once, reused, evicted
/// (deregistered: the model refuses a stale key, so a use after eviction
/// fails the test) under a small cap, dropped by `forget`; with the cache
/// off they go through the bounce buffers. Every byte is checked.
#[test]
fn large_out_of_segment_get_put_use_the_registration_cache() {
    use splitrt_runtime::fabric::rdma::reg_cache::REG_MIN;
    let n = 3 * REG_MIN;
    let pattern = |k: usize| -> Vec<u8> { (0..n).map(|i| (i * 31 + k * 7) as u8).collect() };
    // a cap of one buffer's pages: every new buffer evicts the previous
    for (cap, expect_cached) in [(256 << 20, true), (n + 8192, true), (0, false)] {
        let cfg = RdmaConfig {
            reg_cache: cap,
            ..RdmaConfig::default()
        };
        let mut j = job(2, 1 << 20, cfg, 11);
        let bufs: Vec<Vec<u8>> = (0..3).map(pattern).collect();
        for round in 0..3 {
            for (k, b) in bufs.iter().enumerate() {
                let off = (k * n) as u64;
                j.fabrics[0].put(1, off, b).unwrap();
                assert_eq!(&j.segs[1][k * n..(k + 1) * n], &b[..], "put {k} cap {cap}");
                let mut back = vec![0u8; n];
                j.fabrics[0].get(1, off, &mut back).unwrap();
                assert_eq!(back, *b, "get {k} round {round} cap {cap}");
            }
        }
        let s = j.fabrics[0].reg_cache_stats();
        assert_eq!(j.net.stats().errors, 0, "cap {cap}: {s:?}");
        if !expect_cached {
            assert_eq!((s.hits, s.misses, s.entries), (0, 0, 0), "{s:?}");
            continue;
        }
        assert!(s.pinned_bytes <= cap, "{s:?}");
        if cap > 3 * (n + 8192) {
            // the 3 put sources registered once each, then hits
            assert!(s.hits >= 12 && s.evictions == 0, "{s:?}");
        } else {
            assert!(s.evictions > 0, "a small cap evicts: {s:?}");
        }
        // forget: the next use registers again
        let before = s.misses;
        j.fabrics[0].forget(bufs[0].as_ptr(), n).unwrap();
        j.fabrics[0].put(1, 0, &bufs[0]).unwrap();
        assert_eq!(j.fabrics[0].reg_cache_stats().misses, before + 1);
        assert_eq!(j.net.stats().errors, 0);
        j.segs.iter_mut().for_each(|s| s.clear());
    }
}

/// A blocking get that returns an error (another peer's request failed
/// while its RDMA read was still posted) leaves no read behind that could
/// write the caller's buffer later, after the borrow ended (the buffer
/// may be freed by then): the stopping fabric destroys its queue pairs,
/// which flushes the read. Before, the read stayed posted and ran at the
/// next step of the network (here: a peer's poll) into the buffer.
#[test]
fn a_get_that_fails_leaves_no_rdma_read_behind() {
    let mut seen = 0;
    for seed in 0..3000 {
        let mut j = job(3, 128 << 10, small_buffers(), seed);
        j.segs[1].fill(0x5a);
        // rank 2 goes away: rank 0's request to it fails at the device
        drop(j.fabrics.pop());
        j.fabrics[0].put_nb(2, 0, &[1; 8]).unwrap();
        // a large get outside the segment: read straight into `dst`
        // through the registration cache
        let mut dst = vec![0u8; 64 << 10];
        let reads = j.net.stats().reads;
        let r = j.fabrics[0].get(1, 0, &mut dst);
        if r.is_ok() || j.net.stats().reads != reads {
            continue; // the read ran before the failure was seen
        }
        seen += 1;
        let before = dst.clone();
        // the network goes on through the peer's polls
        for _ in 0..50 {
            let _ = j.fabrics[1].poll(Channel::Request, &mut |_| {});
        }
        assert_eq!(j.net.stats().reads, reads, "seed {seed}: the read ran");
        assert!(
            dst == before,
            "seed {seed}: the buffer changed after get returned"
        );
        if seen == 3 {
            return;
        }
    }
    panic!("only {seen} seeds where the get failed before its read ran");
}

/// A device that lies: past `arm`, every send or non-blocking RDMA write
/// it completes names a send buffer far past the pool. Implementing
/// `Verbs` is `unsafe` (this one breaks the promise on purpose); the
/// fabric must still refuse the completion rather than write through it.
struct Lying {
    model: Model,
    armed: bool,
}

// SAFETY: every call goes to the model, which keeps the contract, except
// `poll`'s forged wr_ids, which are what this test is about: the fabric
// checks them and no test writes through one.
unsafe impl Verbs for Lying {
    fn describe(&self) -> String {
        self.model.describe()
    }
    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.register(addr, len, access) }
    }
    fn deregister(&mut self, region: &Region) -> Result<()> {
        self.model.deregister(region)
    }
    fn create_qp(&mut self, caps: QpCaps) -> Result<QpId> {
        self.model.create_qp(caps)
    }
    fn max_inline(&self, qp: QpId) -> u32 {
        self.model.max_inline(qp)
    }
    fn endpoint(&self, qp: QpId) -> QpEndpoint {
        self.model.endpoint(qp)
    }
    fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()> {
        self.model.connect(qp, remote)
    }
    unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.post_recv(qp, wr_id, sge) }
    }
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.post_send(qp, wr) }
    }
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        let n = self.model.poll(out)?;
        if self.armed {
            for c in &mut out[..n] {
                let kind = c.wr_id >> 62;
                // a send (1) or an RDMA write (3) with a buffer index
                if (kind == 1 || kind == 3) && c.wr_id as u32 != u32::MAX {
                    c.wr_id = (c.wr_id & !0xffff_ffff) | 0x4000_0000;
                }
            }
        }
        Ok(n)
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.model.destroy_qp(qp)
    }
}

/// Two ranks over the model, rank 0's device lying once `armed`.
fn lying_pair(seed: u64) -> Vec<RdmaFabric<Lying>> {
    let net = ModelNetwork::new(seed);
    let pending: Vec<PendingRdma<Lying>> = (0..2)
        .map(|r| {
            let dev = Lying {
                model: net.device(&format!("rank{r}")),
                armed: r == 0,
            };
            PendingRdma::with_own_segment(dev, r, 2, 1 << 16, RdmaConfig::default()).unwrap()
        })
        .collect();
    let cards: Vec<_> = pending.iter().map(|p| p.card()).collect();
    pending
        .into_iter()
        .map(|p| p.connect(&cards).unwrap())
        .collect()
}

/// A completion naming a send buffer outside the pool (from a device
/// that breaks the `Verbs` contract) is a protocol error naming the peer,
/// not a buffer index the next send or non-blocking put copies into: the
/// fabric put it on the free list unchecked, and `put_nb` wrote far past
/// the pool.
#[test]
fn a_completion_naming_a_bogus_send_buffer_is_refused() {
    let check = |e: splitrt_runtime::Error| {
        assert!(matches!(e.kind(), ErrorKind::Protocol(_)), "{e}");
        assert!(e.to_string().contains("send buffer 1073741824"), "{e}");
        assert_eq!(e.peer(), Some(1), "{e}");
    };
    // a non-blocking put's RDMA write
    let f = lying_pair(21);
    let data = [0xa5u8; 512];
    assert!(f[0].put_nb(1, 0, &data).unwrap());
    let mut err = f[0].quiet().err();
    for _ in 0..4 {
        if err.is_some() {
            break;
        }
        // the free list must not hand the forged index out
        err = f[0].put_nb(1, 1024, &data).err();
    }
    check(err.expect("the forged completion was accepted"));
    // a Medium's send (not inline)
    let f = lying_pair(22);
    let big = vec![7u8; 2000];
    let pkt = Packet {
        tag: 1,
        words: &[],
        payload: &big,
        deposit: None,
    };
    let mut err = None;
    for _ in 0..64 {
        match f[0].try_send(1, Channel::Request, &pkt, &mut |_| Ok(())) {
            Err(e) => {
                err = Some(e);
                break;
            }
            Ok(_) => {
                let _ = f[1].poll(Channel::Request, &mut |_| {});
                if let Err(e) = f[0].poll(Channel::Request, &mut |_| {}) {
                    err = Some(e);
                    break;
                }
            }
        }
    }
    check(err.expect("the forged completion was accepted"));
}

/// Strided runs as RDMA (`put_runs_nb` / `get_runs`, issue 25): 1000 runs
/// of 64 B (a 64 000-B stream through 1 KiB send buffers, of which there
/// are 4: each is reused, freed by its last write), then runs that
/// straddle buffers and one longer than a buffer; the counts are one
/// write (read) per run and per buffer crossing, and no send. Everything
/// is at the peer after `quiet`, reads back packed, and a run outside the
/// segment is refused before anything is posted.
#[test]
fn strided_runs_as_one_rdma_write_or_read_per_run() {
    let cfg = small_buffers();
    for seed in 0..4 {
        let mut j = job(2, 256 << 10, cfg, seed);
        let runs: Vec<(u64, u64)> = (0..1000u64).map(|i| (4096 + i * 128, 64)).collect();
        let src: Vec<u8> = (0..64_000u32)
            .map(|i| (i * 7 + seed as u32) as u8)
            .collect();
        let before = j.net.stats();
        j.fabrics[0].put_runs_nb(1, &runs, &src).unwrap();
        j.fabrics[0].quiet().unwrap();
        let after = j.net.stats();
        // 1024-B buffers hold 16 runs each exactly: no run is cut
        assert_eq!(after.writes - before.writes, 1000, "seed {seed}");
        assert_eq!(after.sends, before.sends, "seed {seed}: no message");
        for (i, &(o, n)) in runs.iter().enumerate() {
            let o = o as usize;
            assert_eq!(
                &j.segs[1][o..o + n as usize],
                &src[i * 64..i * 64 + 64],
                "seed {seed}: run {i}"
            );
        }
        let mut back = vec![0u8; 64_000];
        let before = j.net.stats();
        j.fabrics[0].get_runs(1, &runs, &mut back).unwrap();
        assert_eq!(j.net.stats().reads - before.reads, 1000, "seed {seed}");
        assert_eq!(back, src, "seed {seed}");
        // 300-B runs straddle the 1 KiB buffers; a 3000-B run spans three
        let odd: Vec<(u64, u64)> = vec![
            (200_000, 300),
            (210_000, 300),
            (220_000, 3000),
            (190_000, 300),
            (180_000, 300),
        ];
        let osrc: Vec<u8> = (0..4200u32).map(|i| (i * 13 + 5) as u8).collect();
        let before = j.net.stats();
        j.fabrics[0].put_runs_nb(1, &odd, &osrc).unwrap();
        j.fabrics[0].quiet().unwrap();
        // pieces: buffer 0 [300, 300, 424], 1 [1024], 2 [1024], 3 [528, 300, 196], 4 [104]
        assert_eq!(j.net.stats().writes - before.writes, 9, "seed {seed}");
        let mut at = 0;
        for &(o, n) in &odd {
            let (o, n) = (o as usize, n as usize);
            assert_eq!(
                &j.segs[1][o..o + n],
                &osrc[at..at + n],
                "seed {seed}: run at {o}"
            );
            at += n;
        }
        let mut oback = vec![0u8; 4200];
        j.fabrics[0].get_runs(1, &odd, &mut oback).unwrap();
        assert_eq!(oback, osrc, "seed {seed}");
        // the buffers all came back: many more transfers proceed
        for _ in 0..20 {
            j.fabrics[0].put_runs_nb(1, &odd, &osrc).unwrap();
        }
        j.fabrics[0].quiet().unwrap();
        // one run past the end: refused, nothing posted
        let bad = [(1000, 8), ((256 << 10) - 4, 8)];
        let before = j.net.stats();
        let e = j.fabrics[0].put_runs_nb(1, &bad, &[9; 16]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
        assert_eq!(j.net.stats().writes, before.writes);
        assert_eq!(j.segs[1][1000], 0);
        // the lengths must match the stream
        assert!(j.fabrics[0].put_runs_nb(1, &runs, &src[..100]).is_err());
        assert_eq!(j.net.stats().errors, 0);
        j.segs.iter_mut().for_each(Vec::clear);
    }
}

/// A device whose `post_send` fails once, on the `fail_at`-th post after
/// it is armed (counting from 1); everything else goes to the model.
struct FailsOnePost {
    model: Model,
    fail_at: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

// SAFETY: every call goes to the model, which keeps the contract; the one
// refused post does nothing (a failing post must not execute, which it
// does not here).
unsafe impl Verbs for FailsOnePost {
    fn describe(&self) -> String {
        self.model.describe()
    }
    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.register(addr, len, access) }
    }
    fn deregister(&mut self, region: &Region) -> Result<()> {
        self.model.deregister(region)
    }
    fn create_qp(&mut self, caps: QpCaps) -> Result<QpId> {
        self.model.create_qp(caps)
    }
    fn max_inline(&self, qp: QpId) -> u32 {
        self.model.max_inline(qp)
    }
    fn endpoint(&self, qp: QpId) -> QpEndpoint {
        self.model.endpoint(qp)
    }
    fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()> {
        self.model.connect(qp, remote)
    }
    unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.post_recv(qp, wr_id, sge) }
    }
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        match self.fail_at.load(Relaxed) {
            0 => {}
            1 => {
                self.fail_at.store(0, Relaxed);
                return Err(splitrt_runtime::Error::new(ErrorKind::PeerFailed(
                    "injected: post_send refused".into(),
                )));
            }
            n => self.fail_at.store(n - 1, Relaxed),
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { self.model.post_send(qp, wr) }
    }
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        self.model.poll(out)
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.model.destroy_qp(qp)
    }
}

/// A strided write whose post fails after earlier writes from the same
/// send buffer were posted (their completions only count, the last write
/// frees the buffer, and it never went out) still frees that buffer,
/// exactly once, when the posted writes complete: before the fix it
/// leaked, one send buffer per such failure. Also a failure on a buffer's
/// first write (nothing of it posted) and on a later buffer.
#[test]
fn fixes_a_strided_write_that_fails_to_post_frees_its_send_buffer_once() {
    let cfg = small_buffers();
    let nb = 2 * cfg.buffers as usize;
    // 64-B runs: 16 writes per 1 KiB send buffer
    let runs: Vec<(u64, u64)> = (0..64u64).map(|i| (4096 + i * 128, 64)).collect();
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    // which post fails: mid first buffer, a buffer's first write, mid a
    // later buffer, a buffer's last write
    for (seed, fail_at) in [(1u64, 3u32), (2, 17), (3, 20), (4, 32)] {
        let net = ModelNetwork::new(seed);
        let arm = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let pending: Vec<PendingRdma<FailsOnePost>> = (0..2)
            .map(|r| {
                let dev = FailsOnePost {
                    model: net.device(&format!("rank{r}")),
                    fail_at: if r == 0 {
                        arm.clone()
                    } else {
                        Default::default()
                    },
                };
                PendingRdma::with_own_segment(dev, r, 2, 1 << 16, cfg).unwrap()
            })
            .collect();
        let cards: Vec<_> = pending.iter().map(|p| p.card()).collect();
        let f: Vec<RdmaFabric<FailsOnePost>> = pending
            .into_iter()
            .map(|p| p.connect(&cards).unwrap())
            .collect();
        f[0].quiet().unwrap();
        assert_eq!(f[0].free_send_buffers(1), nb, "seed {seed}: at the start");
        arm.store(fail_at, std::sync::atomic::Ordering::Relaxed);
        let e = f[0].put_runs_nb(1, &runs, &src).unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        // the writes that were posted complete
        f[0].quiet().unwrap();
        assert_eq!(
            f[0].free_send_buffers(1),
            nb,
            "seed {seed}: failing post {fail_at}: every send buffer is back, once"
        );
        // and the fabric goes on: a whole transfer, twice over
        for _ in 0..2 {
            f[0].put_runs_nb(1, &runs, &src).unwrap();
            f[0].quiet().unwrap();
            assert_eq!(f[0].free_send_buffers(1), nb, "seed {seed}: after more");
        }
        let mut back = vec![0u8; src.len()];
        f[0].get_runs(1, &runs, &mut back).unwrap();
        assert_eq!(back, src, "seed {seed}");
        assert_eq!(net.stats().errors, 0, "seed {seed}");
    }
}

/// `max_inline_unsplit` over ibverbs is what one receive buffer carries
/// (the buffer less its header, the frame header and the words; every
/// message starts a buffer of its own): a Medium of that size is one send
/// (one buffer, one credit), one byte more is two, and both arrive
/// intact. Before, the fabric kept the trait's default (the Medium
/// maximum, several buffers reassembled), which pgas sizes its get
/// replies by.
#[test]
fn max_inline_unsplit_is_one_receive_buffer() {
    // credits for a whole Medium maximum's buffers: nothing waits on the
    // receiver, which polls only after the send
    let small = RdmaConfig {
        buffers: 16,
        ..small_buffers()
    };
    for cfg in [small, RdmaConfig::default()] {
        let j = job(2, 4096, cfg, 5);
        let (a, b) = (&j.fabrics[0], &j.fabrics[1]);
        for words in 0..=splitrt_runtime::fabric::MAX_WORDS {
            let n = a.max_inline_unsplit(1, words);
            assert!(n > 0 && n <= a.max_inline(1), "{words} words: {n} B");
            for (len, buffers) in [(n, 1), (n + 1, 2)] {
                let w: Vec<u64> = (0..words as u64).collect();
                let payload: Vec<u8> = (0..len).map(|i| byte(0, words as u64, i)).collect();
                let pkt = Packet {
                    tag: 9,
                    words: &w,
                    payload: &payload,
                    deposit: None,
                };
                let before = j.net.stats().sends;
                let mut no = |_| -> Result<()> { Ok(()) };
                assert!(a.try_send(1, Channel::Request, &pkt, &mut no).unwrap());
                let mut got = None;
                for _ in 0..1000 {
                    b.poll(Channel::Request, &mut |d| {
                        got = Some((d.words.to_vec(), d.payload.to_vec()))
                    })
                    .unwrap();
                    if got.is_some() {
                        break;
                    }
                }
                assert_eq!(got, Some((w, payload)), "{words} words, {len} B");
                // buffers sent: the message's (credit reports are writes)
                assert_eq!(
                    j.net.stats().sends - before,
                    buffers,
                    "{words} words, {len} B (buffer size {})",
                    cfg.buffer_size
                );
            }
        }
        // absurd word counts leave room for nothing (no overflow)
        assert_eq!(a.max_inline_unsplit(1, usize::MAX), 0);
        assert_eq!(j.net.stats().errors, 0);
    }
}
