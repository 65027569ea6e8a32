//! Progress without polling: every rank but 0 computes without calling
//! into splitrt (a busy loop bounded by time, watching a flag that only
//! a handler sets) while rank 0's AM requests to it are answered and its
//! one-sided gets and writes from and into its memory complete (on the
//! AM path, `SPLITRT_RMA=am`, they need its handlers). Then every rank
//! finishes; the progress thread is joined.
//!
//! Usage: t_progress MODE   (MODE: poll | thread | thread-only; the
//! computing ranks' progress mode; with `poll` the job fails: nothing
//! answers rank 0 while they compute. `panic` (2 ranks): rank 1's
//! handler panics on its progress thread; rank 1's wait and finish
//! report it, and the job fails)
//!
//! `race`: two threads of every rank start progress threads at once,
//! many times; afterwards exactly one runs (none leaked), and none once
//! the mode is back to polling.
//!
//! Prints `progress ok rank R handlers=WHERE` per rank.

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::am::Progress;
use splitrt::pgas::Pgas;
use splitrt::{EndpointBuilder, Error, Kind, Payload};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a computing rank waits for rank 0 before it gives up.
const COMPUTE_LIMIT: Duration = Duration::from_secs(20);

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "thread".into());
    let out = if mode == "race" {
        race()
    } else {
        run_on(&mode, Pgas::attach_with)
    };
    if let Err(e) = out {
        eprintln!("t_progress: {e}");
        std::process::exit(1);
    }
}

/// The program on an endpoint made by `attach` (`tests/verbs_model.rs`
/// attaches over the verbs model).
pub fn run_on(
    mode: &str,
    attach: impl FnOnce(EndpointBuilder) -> splitrt::Result<Pgas>,
) -> splitrt::Result<()> {
    let panic = mode == "panic";
    let mode = if panic {
        Progress::ThreadOnly
    } else {
        Progress::parse(mode)?
    };
    let pongs = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // the threads handlers ran on (their names)
    let ran_on = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut b = EndpointBuilder::new();
    let p = pongs.clone();
    let pong = b.reply("pong", Kind::Short, 1, move |m| {
        p.fetch_add(m.arg(0), Ordering::AcqRel);
    })?;
    let on = ran_on.clone();
    let ping = b.request("ping", Kind::Short, 1, move |tok, m| {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        on.lock().unwrap().push(name);
        tok.reply(pong, &[m.arg(0)], Payload::None).expect("reply");
    })?;
    let d = done.clone();
    let stop = b.request("stop", Kind::Short, 0, move |_tok, _m| {
        d.store(true, Ordering::Release);
    })?;
    let boom = b.request("boom", Kind::Short, 0, |_tok, _m| panic!("boom"))?;
    let pg = attach(b)?;
    let ep = pg.endpoint().clone();
    let (me, n) = (pg.rank(), pg.size());
    let arr = pg.alloc_sym::<u64>(2 + n)?; // [value, rank 0's write, computing flags]
    arr.local().set(0, 1000 + me as u64);
    if me != 0 {
        ep.set_progress(mode)?;
        if ep.progress() != mode {
            return Err(Error::usage(format!(
                "progress mode {:?} not in force",
                mode
            )));
        }
    }
    pg.barrier()?;
    if panic {
        return if me == 0 {
            ep.request(1, boom, &[], Payload::None)?;
            // rank 1 fails the job
            let e = ep.wait_until(|| false).expect_err("the job fails");
            println!("progress panic rank 0 saw: {e}");
            Ok(())
        } else {
            let e = ep
                .wait_until(|| done.load(Ordering::Acquire))
                .expect_err("the wait reports the panic");
            println!("progress panic at the wait: {e}");
            drop(ep);
            let f = pg.finish().expect_err("finish reports it too");
            println!("progress panic at finish: {f}");
            Ok(())
        };
    }
    if me == 0 {
        // each peer says it computes (its last call into splitrt)
        ep.wait_until(|| (1..n).all(|p| arr.local().get(2 + p) == 1))?;
        for peer in 1..n {
            let before = pongs.load(Ordering::Acquire);
            ep.request(peer, ping, &[peer as u64], Payload::None)?;
            ep.wait_until(|| pongs.load(Ordering::Acquire) == before + peer as u64)?;
            let v = pg.read(arr.at(peer, 0))?;
            if v != 1000 + peer as u64 {
                return Err(Error::usage(format!(
                    "got {v} from rank {peer}, not {}",
                    1000 + peer
                )));
            }
            pg.write(arr.at(peer, 1), 7 + peer as u64)?;
            pg.sync()?;
            ep.request(peer, stop, &[], Payload::None)?;
        }
    } else {
        pg.write(arr.at(0, 2 + me), 1)?; // complete at rank 0 on return
                                         // compute: never call into splitrt until a handler says so
        let t = Instant::now();
        let mut x = 1u64;
        while !done.load(Ordering::Acquire) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            if x & 0xffff == 0 && t.elapsed() > COMPUTE_LIMIT {
                let why = format!(
                    "rank {me}: nothing from rank 0 in {COMPUTE_LIMIT:?} of computing \
                     (progress mode {mode:?})"
                );
                ep.abort(&why);
                return Err(Error::usage(why));
            }
        }
        std::hint::black_box(x);
        if arr.local().get(1) != 7 + me as u64 {
            let why = format!("rank {me}: rank 0's write is not here");
            ep.abort(&why);
            return Err(Error::usage(why));
        }
    }
    let where_ = ran_on.lock().unwrap().join(",");
    // Handlers only on the progress thread: the ping ran there. Inline
    // (`thread`), whichever thread polls runs it: the main thread may
    // have, while its flag write's completion was still coming back (the
    // flag reached rank 0 first); what ran while it computed proves the
    // progress thread.
    let placed = match mode {
        Progress::ThreadOnly => where_.starts_with("splitrt-progress-"),
        _ => !where_.is_empty(),
    };
    if me != 0 && !placed {
        let why =
            format!("rank {me}: the request handler ran on '{where_}' (progress mode {mode:?})");
        // end the job now: a rank that leaves without finishing would
        // hold the others in the exit barrier
        ep.abort(&why);
        return Err(Error::usage(why));
    }
    println!("progress ok rank {me} handlers={where_}");
    drop(ep);
    pg.finish()
}

/// This process's threads named as progress threads (`/proc/self/task/*/comm`,
/// cut to 15 bytes: "splitrt-progres").
fn progress_threads() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("splitrt-progres"))
        .count()
}

/// Two threads set the progress mode at once, 50 times each: one thread
/// must run afterwards (a concurrent `set_progress` once left one
/// running, unstoppable, beside the recorded one), none after polling.
fn race() -> splitrt::Result<()> {
    let pg = Pgas::attach()?;
    let ep = pg.endpoint().clone();
    let go = Arc::new(std::sync::Barrier::new(2));
    let setters: Vec<_> = (0..2)
        .map(|_| {
            let (ep, go) = (ep.clone(), go.clone());
            std::thread::spawn(move || -> splitrt::Result<()> {
                for _ in 0..50 {
                    go.wait();
                    ep.set_progress(Progress::Thread)?;
                }
                Ok(())
            })
        })
        .collect();
    for s in setters {
        s.join().expect("a setter panicked")?;
    }
    // a thread names itself once it runs: wait (bounded) to see it
    let named = |want: &dyn Fn(usize) -> bool| {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let n = progress_threads();
            if want(n) || Instant::now() >= end {
                return n;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let running = named(&|n| n >= 1);
    ep.set_progress(Progress::Polling)?;
    // every thread started was stopped and joined: none is left (a
    // leaked one never ends)
    let after = named(&|n| n == 0);
    if running != 1 || after != 0 {
        return Err(Error::usage(format!(
            "rank {}: {running} progress thread(s) after the race (want 1), {after} 5 s after polling (want 0)",
            pg.rank()
        )));
    }
    pg.barrier()?;
    println!("progress ok rank {} race", pg.rank());
    drop(ep);
    pg.finish()
}
