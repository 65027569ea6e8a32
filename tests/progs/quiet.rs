//! Per-peer quiet (`Pgas::quiet_peer`): rank 0 puts a block into rank 1
//! and one into rank 2 (3+ ranks), while rank 2 computes without calling
//! into splitrt (it waits, bounded by time, for a file rank 0 creates).
//! On the AM path only rank 1 acknowledges, so `quiet_peer(1)` returns
//! while `sync` (mode `sync`: the only completion before per-peer quiet)
//! would wait for rank 2 too. Rank 1 then checks, in a handler, that the
//! block is there (remote completion); after rank 2 resumes, `sync` and
//! the checks of every block.
//!
//! While rank 2 computes, rank 0 also sends it Short requests with
//! `try_request` until one is refused, and checks the reason the fabric
//! gave (shm: the peer's ring is full; UDP: the send window; ibverbs:
//! the send credits); rank 2 handles them all once it resumes.
//!
//! Modes `strided` and `put_signal` (2 ranks suffice): rank 0 sends rank 1
//! a strided put of several messages (or one `put_signal`), small enough
//! to go out without rank 1 serving it, then `quiet_peer(1)`, then
//! creates a file. Rank 1 first computes without calling into splitrt for
//! `HOLD` (`quiet_peer(1)` cannot return meanwhile: nothing was
//! acknowledged), then serves its traffic until the file exists, and then
//! reads its block and signal word without any other sync or polling:
//! what `quiet_peer(1)` promised must already be there. (A `quiet_peer`
//! that does not wait returns during the hold, and rank 1 finds nothing.)
//!
//! Usage: t_quiet [quiet|sync|strided|put_signal] DIR   (DIR: where rank 0
//! creates the file)
//!
//! Prints `quiet ok rank R`.

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::am::WouldBlock;
use splitrt::pgas::{Pgas, Shape, SignalOp};
use splitrt::runtime::config::FabricKind;
use splitrt::{EndpointBuilder, Error, Kind, Payload};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: usize = 512;
const LIMIT: Duration = Duration::from_secs(20);

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "quiet".into());
    let dir = PathBuf::from(
        a.next()
            .unwrap_or_else(|| std::env::temp_dir().display().to_string()),
    );
    if let Err(e) = run_on(&mode, &dir, Pgas::attach_with) {
        eprintln!("t_quiet: {e}");
        std::process::exit(1);
    }
}

fn value(rank: usize, i: usize) -> u64 {
    (rank as u64) << 32 | i as u64 | 0x5a00_0000_0000_0000
}

/// The program on a context made by `attach` (`tests/verbs_model.rs`
/// attaches over the verbs model).
pub fn run_on(
    mode: &str,
    dir: &Path,
    attach: impl FnOnce(EndpointBuilder) -> splitrt::Result<Pgas>,
) -> splitrt::Result<()> {
    if matches!(mode, "strided" | "put_signal") {
        return seen_at_once(mode, dir, attach);
    }
    // rank 1's handler: is rank 0's block here? (the answer: 1 yes, 2 no)
    let seen = Arc::new(AtomicU64::new(0));
    let block_at = Arc::new(AtomicU64::new(u64::MAX));
    let mut b = EndpointBuilder::new();
    let s = seen.clone();
    let answer = b.reply("answer", Kind::Short, 1, move |m| {
        s.store(m.arg(0), Ordering::Release)
    })?;
    let at = block_at.clone();
    let eph = Arc::new(std::sync::OnceLock::<splitrt::Endpoint>::new());
    let e = eph.clone();
    let check = b.request("check", Kind::Short, 0, move |tok, _m| {
        let off = at.load(Ordering::Acquire);
        let mut ok = 1;
        for i in 0..LEN {
            let mut w = [0u8; 8];
            let o = off + (i * 8) as u64;
            let read = e.get().map(|ep| ep.read_segment(o, &mut w));
            if !matches!(read, Some(Ok(()))) || u64::from_ne_bytes(w) != value(1, i) {
                ok = 2;
                break;
            }
        }
        tok.reply(answer, &[ok], Payload::None).expect("reply");
    })?;
    let sunk = Arc::new(AtomicU64::new(0));
    let k = sunk.clone();
    let sink = b.request("sink", Kind::Short, 1, move |_tok, _m| {
        k.fetch_add(1, Ordering::AcqRel);
    })?;
    let pg = attach(b)?;
    let ep = pg.endpoint().clone();
    let _ = eph.set(ep.clone());
    let (me, n) = (pg.rank(), pg.size());
    let arr = pg.alloc_sym::<u64>(LEN)?;
    let ready = pg.alloc_sym::<u64>(1)?; // rank 2 computes
    block_at.store(arr.at(me, 0).offset(), Ordering::Release);
    let flood_count = AtomicU64::new(0);
    let flag = dir.join(format!("t_quiet-{}", ep.job().job_id));
    pg.barrier()?;
    if me == 0 {
        if n > 2 {
            ep.wait_until(|| ready.local().get(0) == 1)?;
        }
        let data = |r: usize| (0..LEN).map(|i| value(r, i)).collect::<Vec<_>>();
        for r in 1..n.min(3) {
            pg.put(arr.at(r, 0), &data(r))?;
        }
        match mode {
            "sync" => pg.sync()?,
            _ => pg.quiet_peer(1)?,
        }
        ep.request(1, check, &[], Payload::None)?;
        ep.wait_until(|| seen.load(Ordering::Acquire) != 0)?;
        if seen.load(Ordering::Acquire) != 1 {
            return Err(Error::usage(
                "rank 1: the block is not visible after quiet_peer(1)",
            ));
        }
        let mut flooded = 0u64;
        if n > 2 {
            // rank 2 does not poll: its fabric's limit is met, and named
            let why = loop {
                match ep.try_request(2, sink, &[flooded], Payload::None)? {
                    Ok(()) => flooded += 1,
                    Err(why) => break why,
                }
                if flooded > 1_000_000 {
                    return Err(Error::usage(
                        "1000000 requests to a rank that does not poll",
                    ));
                }
            };
            let want = match ep.config().fabric {
                FabricKind::Shm => Some(WouldBlock::PeerRingFull),
                FabricKind::Udp => Some(WouldBlock::UdpWindowFull),
                FabricKind::Ibverbs => Some(WouldBlock::RdmaCreditsExhausted),
                _ => None,
            };
            if want.is_some_and(|w| w != why) {
                return Err(Error::usage(format!(
                    "try_request to rank 2 refused because {why} ({why:?}), expected {want:?}"
                )));
            }
            println!("quiet flood of rank 2: {flooded} sent, then {why:?}");
        }
        flood_count.store(flooded, Ordering::Release);
        std::fs::write(&flag, b"done").map_err(|e| Error::io("creating the flag file", e))?;
    } else if me == 2 {
        pg.write(ready.at(0, 0), 1)?; // complete at rank 0 on return
                                      // compute without calling into splitrt until rank 0 is done
        let t = Instant::now();
        while !flag.exists() {
            if t.elapsed() > LIMIT {
                let why = format!("rank 2: rank 0 did not finish in {LIMIT:?} (mode {mode})");
                ep.abort(&why);
                return Err(Error::usage(why));
            }
            std::hint::spin_loop();
        }
    }
    pg.sync()?;
    pg.barrier()?;
    // rank 0 says how many requests it sent rank 2, which waits for them
    let mut flooded = [flood_count.load(Ordering::Acquire)];
    pg.broadcast(0, &mut flooded)?;
    let flooded = flooded[0];
    if me == 2 {
        ep.wait_until(|| sunk.load(Ordering::Acquire) == flooded)?;
    }
    if (1..3).contains(&me) {
        let got = arr.local().to_vec();
        if got.iter().enumerate().any(|(i, &v)| v != value(me, i)) {
            return Err(Error::usage(format!("rank {me}: rank 0's block is wrong")));
        }
    }
    if me == 0 {
        let _ = std::fs::remove_file(&flag);
    }
    println!("quiet ok rank {me}");
    drop(ep);
    pg.finish()
}

/// Runs of the strided put (every other run of `RUN` words at rank 1):
/// 16 KiB in all, within a UDP window and a shm ring.
const RUNS: usize = 256;
/// How long rank 1 holds off serving rank 0's messages.
const HOLD: Duration = Duration::from_secs(2);
/// Words in one run.
const RUN: usize = 8;

/// Modes `strided` / `put_signal`: rank 1 serves rank 0's traffic until
/// rank 0 created the file after `quiet_peer(1)`, then checks the data
/// (and the signal word) without polling again.
fn seen_at_once(
    mode: &str,
    dir: &Path,
    attach: impl FnOnce(EndpointBuilder) -> splitrt::Result<Pgas>,
) -> splitrt::Result<()> {
    let pg = attach(EndpointBuilder::new())?;
    let ep = pg.endpoint().clone();
    let me = pg.rank();
    let arr = pg.alloc_sym::<u64>(RUNS * RUN * 2)?;
    let sig = pg.alloc_signals(1)?;
    let ready = pg.alloc_sym::<u64>(1)?; // rank 1 stopped serving
    let flag = dir.join(format!("t_quiet-{}-{mode}", ep.job().job_id));
    let src: Vec<u64> = (0..RUNS * RUN).map(|i| value(1, i)).collect();
    // where word i of `src` lands at rank 1
    let strided = mode == "strided";
    let at = |i: usize| {
        if strided {
            i / RUN * 2 * RUN + i % RUN
        } else {
            i
        }
    };
    let signals = u64::from(!strided);
    pg.barrier()?;
    let mut bad: Option<String> = None;
    if me == 0 {
        // rank 1 is past the barrier (whose wait serves traffic)
        ep.wait_until(|| ready.local().get(0) == 1)?;
        if strided {
            let shape = Shape::new(RUN, &[RUNS])?;
            pg.put_strided(arr.at(1, 0), &[2 * RUN], &src, &[RUN], &shape)?;
        } else {
            pg.put_signal(arr.at(1, 0), &src, sig.at(1, 0), SignalOp::Add, 1)?;
        }
        pg.quiet_peer(1)?;
        std::fs::write(&flag, b"quiet").map_err(|e| Error::io("creating the flag file", e))?;
    } else if me == 1 {
        // complete at rank 0 on return
        pg.write(ready.at(0, 0), 1)?;
        // compute without calling into splitrt: rank 0 cannot be quiet yet
        let t = Instant::now();
        while !flag.exists() && t.elapsed() < HOLD {
            std::hint::spin_loop();
        }
        while !flag.exists() {
            if t.elapsed() > LIMIT {
                let why = format!("rank 1: rank 0 did not quiet in {LIMIT:?} (mode {mode})");
                ep.abort(&why);
                return Err(Error::usage(why));
            }
            ep.poll()?;
        }
        // no polling from here on: rank 0's quiet_peer(1) returned
        let got = arr.local().to_vec();
        let missing = (0..src.len()).filter(|&i| got[at(i)] != src[i]).count();
        let s = pg.signal_fetch(sig.at(1, 0))?; // a local load
        if missing > 0 || s != signals {
            bad = Some(format!(
                "rank 1 ({mode}): after rank 0's quiet_peer(1) returned, {missing} of {} \
                 words missing and the signal word is {s} (want {signals})",
                src.len()
            ));
        }
    }
    if let Some(why) = bad {
        ep.abort(&why); // at once, not at the exit barrier
        return Err(Error::usage(why));
    }
    pg.sync()?;
    pg.barrier()?;
    if me == 0 {
        let _ = std::fs::remove_file(&flag);
    }
    println!("quiet ok rank {me}");
    drop(ep);
    pg.finish()
}
