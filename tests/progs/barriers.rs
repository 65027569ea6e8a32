//! A job that checks its own barriers: in every round each rank sends a
//! request to every rank and waits for the replies, then enters the
//! barrier; after the barrier each rank must have received the round's
//! request from every rank. A barrier released early (a forged release, a
//! stray arrival counted) shows up as a missing request.
//!
//! Usage: t_barriers [ROUNDS] [PAUSE_MS] [STOPFILE]   (exit 0 = every round
//! checked). With STOPFILE, ROUNDS is a maximum: rank 0 ends the run after
//! the round in which it sees that file exist (it tells the others in that
//! round's request).
//! With `T_BARRIERS_LATE_RANK=r`, only rank r pauses (before its requests),
//! so the others wait in every barrier for it.
//! Rank 0 prints `BOOT <addr>` first (the rendezvous address, for the
//! bootstrap attack tests) and `barriers ok R` at the end on every rank.

use splitrt::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn main() {
    if let Err(e) = run() {
        eprintln!("t_barriers: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let rounds = arg(1, 50);
    let pause = Duration::from_millis(arg(2, 0));
    let late: Option<usize> = std::env::var("T_BARRIERS_LATE_RANK")
        .ok()
        .and_then(|s| s.parse().ok());
    // arrivals[r % 2]: requests of round r seen (two rounds can overlap:
    // a fast rank may send round r+1 before a slow one checked round r)
    let seen = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let stop_file = std::env::args().nth(3);
    // the round rank 0 declared the last one (u64::MAX: none yet)
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let acks = Arc::new(AtomicU64::new(0));
    let mut b = EndpointBuilder::new();
    let a = acks.clone();
    let ack = b.reply("ack", Kind::Short, 0, move |_| {
        a.fetch_add(1, Ordering::AcqRel);
    })?;
    let s = seen.clone();
    let l = last.clone();
    let req = b.request("round", Kind::Short, 2, move |tok, m| {
        s[(m.arg(0) % 2) as usize].fetch_add(1, Ordering::AcqRel);
        if m.src() == 0 && m.arg(1) == 1 {
            l.store(m.arg(0), Ordering::Release);
        }
        tok.reply(ack, &[], Payload::None).expect("reply");
    })?;
    let ep = b.attach()?;
    let (rank, size) = (ep.rank(), ep.size() as u64);
    if rank == 0 {
        println!(
            "BOOT {}",
            std::env::var("SPLITRT_BOOTSTRAP").unwrap_or_default()
        );
    }
    let mut done = 0;
    for r in 0..rounds {
        let stop = rank == 0
            && stop_file
                .as_ref()
                .is_some_and(|f| std::path::Path::new(f).exists());
        if late == Some(rank) {
            std::thread::sleep(pause);
        }
        let before = acks.load(Ordering::Acquire);
        for peer in 0..ep.size() {
            ep.request(peer, req, &[r, u64::from(stop)], Payload::None)?;
        }
        ep.wait_until(|| acks.load(Ordering::Acquire) == before + size)?;
        ep.barrier()?;
        let got = seen[(r % 2) as usize].swap(0, Ordering::AcqRel);
        if got != size {
            return Err(splitrt::Error::usage(format!(
                "rank {rank}: round {r}: barrier released after {got} of {size} requests arrived"
            )));
        }
        // a second barrier per round: more for forged arrivals to disturb
        ep.barrier()?;
        done = r + 1;
        if last.load(Ordering::Acquire) == r {
            break;
        }
        if late.is_none() {
            std::thread::sleep(pause);
        }
    }
    println!("barriers ok {done}");
    ep.finish()
}
