//! The UDP protocol at scale (docs/scale.md): bytes of protocol state per
//! peer, measured with a counting allocator, and an all-to-all of 1,024
//! ranks in the seeded network simulator. `--nocapture` prints the figures
//! docs/scale.md quotes. Wall-clock speed is never asserted.

use splitrt_runtime::fabric::frames::OutMsg;
use splitrt_runtime::fabric::udp::proto::{Proto, ProtoConfig, Sent};
use splitrt_runtime::fabric::udp::sim_alltoall::{run_alltoall, AllToAllConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Live heap bytes of this test binary (every thread).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Most live heap bytes at once since the last [`reset_peak`].
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting live bytes.
struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged and only adds bookkeeping of the sizes, so `System`'s
// guarantees are this allocator's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size() as isize, Ordering::Relaxed) + l.size() as isize;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            let d = new as isize - l.size() as isize;
            let now = LIVE.fetch_add(d, Ordering::Relaxed) + d;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The tests of this file one at a time: the allocator's count is global.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Start a new peak of [`PEAK`] from the bytes live now.
fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

/// The real driver's tunables (`SPLITRT_UDP_WINDOW` 32, the largest
/// datagram).
fn driver_cfg() -> ProtoConfig {
    ProtoConfig {
        window: 32,
        ..ProtoConfig::default()
    }
}

/// Rank 0 of `size` exchanges one Short request and its acknowledgement
/// with each of `contacted` peers, to quiescence; returns rank 0's
/// protocol state and the others'.
fn exchange(size: u32, contacted: u32) -> (Proto, Vec<Proto>) {
    let cfg = driver_cfg();
    let key = [7u8; 32];
    let mut me = Proto::new(0, size, cfg, key, 0);
    let mut others: Vec<Proto> = (1..=contacted)
        .map(|r| Proto::new(r, size, cfg, key, 0))
        .collect();
    let words = [1u64, 2];
    let m = OutMsg {
        tag: 1,
        words: &words,
        payload: &[],
        deposit: None,
    };
    for p in 1..=contacted {
        assert_eq!(me.send(0, p, 0, &m, 0), Sent::Upto(0));
    }
    let mut now = 0;
    for _ in 0..10 {
        now += 100_000;
        let mut out = Vec::new();
        me.poll_transmit(now, true, &mut |p, b| out.push((p, b.to_vec())));
        for (p, b) in out {
            let o = &mut others[p as usize - 1];
            if let Some(b) = o.handle_datagram(now, b) {
                o.recycle(b);
            }
            while let Some((_, d)) = o.next_ready(0) {
                o.recycle(d);
            }
        }
        for o in others.iter_mut() {
            o.handle_timeout(now + 60_000);
            let mut back = Vec::new();
            o.poll_transmit(now + 60_000, true, &mut |_, b| back.push(b.to_vec()));
            for b in back {
                if let Some(b) = me.handle_datagram(now + 70_000, b) {
                    me.recycle(b);
                }
            }
        }
        me.handle_timeout(now + 80_000);
        if me.quiesced() {
            break;
        }
    }
    assert!(me.quiesced(), "rank 0 still has unacknowledged data");
    (me, others)
}

/// Bytes of UDP protocol state per peer: at start (no peer contacted yet)
/// and per peer after one exchange. Per-peer state is created on first
/// contact, so a rank of a 4,096-rank job that has talked to nobody holds
/// a few bytes per peer (a pointer), not a peer's streams and windows.
#[test]
fn scalemodel_udp_state_per_peer_is_lazy() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let size = 4096u32;
    let before = live();
    let p = Proto::new(0, size, driver_cfg(), [7u8; 32], 0);
    let at_start = (live() - before) as f64 / size as f64;
    drop(p);
    // per contacted peer: rank 0's state after 256 exchanges minus after
    // one (the others dropped before measuring; rank 0's buffer pool is
    // included, an upper bound)
    let base = live();
    let (me1, o1) = exchange(size, 1);
    drop(o1);
    let one = live() - base;
    drop(me1);
    let base = live();
    let (me256, o256) = exchange(size, 256);
    drop(o256);
    let many = live() - base;
    drop(me256);
    let per_contacted = (many - one) as f64 / 255.0;
    println!(
        "UDP protocol state, {size} ranks, window 32: {at_start:.1} B per peer at start, \
         {per_contacted:.1} B per peer contacted (one exchange, to quiescence)"
    );
    // what the driver keeps per rank of the job besides (from the start):
    // the peer's address, a reassembler, a send lock per stream
    println!(
        "driver, per rank of the job: address {} B + 2 reassemblers {} B + 2 send locks {} B",
        std::mem::size_of::<Option<std::net::SocketAddr>>(),
        2 * std::mem::size_of::<splitrt_runtime::fabric::frames::Reassembler>(),
        2 * std::mem::size_of::<std::sync::Mutex<()>>()
    );
    assert!(
        at_start <= 16.0,
        "{at_start:.1} B of state per peer before any contact"
    );
    assert!(
        per_contacted <= 2048.0,
        "{per_contacted:.1} B of state per contacted peer"
    );
}

/// 1,024 ranks exchange all-to-all (a request to every other rank and a
/// reply to each: 2 x 1,047,552 messages) over the simulated network
/// with 0.1% loss: every message arrives once, in order, intact, and every
/// rank quiesces. Bounded: about 3 M datagrams; the wall time is printed.
#[test]
fn scalemodel_alltoall_1024_ranks_in_the_simulator() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ranks = std::env::var("SPLITRT_SIM_RANKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024usize);
    let cfg = AllToAllConfig {
        seed: 28,
        ranks,
        loss: 0.001,
        burst: std::env::var("SPLITRT_SIM_BURST")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(32),
        ..AllToAllConfig::default()
    };
    let t = std::time::Instant::now();
    let before = live();
    reset_peak();
    let r = run_alltoall(&cfg).unwrap_or_else(|e| panic!("{e}\nconfig: {cfg:?}"));
    let wall = t.elapsed();
    let want = (ranks * (ranks - 1)) as u64;
    println!(
        "all-to-all of {ranks} ranks: {} requests and {} replies in {:.1} ms simulated, \
         {} datagrams ({} lost, {} retransmitted, {} timeouts), peak {} in flight, \
         peak heap {:.0} MB; wall {:.2} s",
        r.requests,
        r.replies,
        r.time as f64 / 1e6,
        r.datagrams,
        r.lost,
        r.stats.retransmits,
        r.stats.timeouts,
        r.peak_in_flight,
        (PEAK.load(Ordering::Relaxed) - before) as f64 / 1e6,
        wall.as_secs_f64()
    );
    assert_eq!(r.requests, want);
    assert_eq!(r.replies, want);
}
