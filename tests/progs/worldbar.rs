//! The world barrier across hosts (`pgas/src/world_barrier.rs`): where
//! ranks share hosts (native path), the ranks of a host count arrivals in
//! shared memory and one message per host goes to rank 0 and back; on
//! one host, the shared-memory counter; on the AM path or with
//! `SPLITRT_TEAM_HIER=0`, the flat messages. Checked on any fabric and
//! path:
//!
//!   conf [ROUNDS]  every rank writes the round's number into every
//!          rank's slot, then a barrier (every other round split-phase:
//!          notify, wait), then checks every slot it holds; alloc_sym,
//!          freeze and thaw between rounds; then 10 barriers, printing
//!          what this rank sent to other hosts for them:
//!          "worldbar rank R path=P msgs=M" (P: hier, flat or one-host)
//!          and "worldbar ok rank R"; then finish
//!   time N   N barriers; rank 0 prints "time path=P barrier_us=X"
//!          (µs per barrier)
//!   free R   every rank allocates a symmetric array and passes a few
//!          barriers, then calls barrier but world rank R free_sym: the
//!          job ends naming R and free_sym
//!   finish R likewise, but R calls finish
//!   absent R likewise, but R never calls: the hang report names R

use splitrt::pgas::{Pgas, SymArray};
use splitrt::Error;

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "conf".into());
    let arg: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    let r = (|| -> splitrt::Result<()> {
        let pg = Pgas::attach()?;
        match mode.as_str() {
            "conf" => conf(pg, if arg == usize::MAX { 40 } else { arg }),
            "free" | "finish" | "absent" => misuse(pg, &mode, arg),
            "time" => time(pg, if arg == usize::MAX { 1000 } else { arg }),
            m => Err(Error::usage(format!("unknown mode {m}"))),
        }
    })();
    if let Err(e) = r {
        eprintln!("t_worldbar: {e}");
        std::process::exit(1);
    }
}

fn path(pg: &Pgas) -> &'static str {
    match pg.barrier_is_hierarchical() {
        Some(true) => "hier",
        Some(false) => "flat",
        None => "one-host",
    }
}

fn conf(pg: Pgas, rounds: usize) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let slots: SymArray<u64> = pg.alloc_sym(n)?;
    for round in 1..=rounds as u64 {
        for q in 0..n {
            pg.write(slots.at(q, me), round)?;
        }
        if round % 2 == 0 {
            pg.barrier_notify()?;
            pg.barrier_wait()?;
        } else {
            pg.barrier()?;
        }
        for j in 0..n {
            let v = pg.read(slots.at(me, j))?;
            if v != round {
                return Err(Error::usage(format!(
                    "rank {me} round {round}: slot of rank {j} holds {v}: released early"
                )));
            }
        }
        // nobody writes the next round's numbers before everyone checked
        pg.barrier()?;
        if round % 10 == 0 {
            let extra: SymArray<u64> = pg.alloc_sym(4)?;
            let f = pg.freeze(extra)?;
            let extra = pg.thaw(f)?;
            pg.free_sym(extra)?;
        }
    }
    let before = pg.barrier_off_host_messages();
    for _ in 0..10 {
        pg.barrier()?;
    }
    let msgs = pg.barrier_off_host_messages() - before;
    println!("worldbar rank {me} path={} msgs={msgs}", path(&pg));
    println!("worldbar ok rank {me}");
    pg.finish()
}

fn time(pg: Pgas, n: usize) -> splitrt::Result<()> {
    pg.barrier()?;
    pg.barrier()?;
    let t = std::time::Instant::now();
    for _ in 0..n {
        pg.barrier()?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    if pg.rank() == 0 {
        println!("time path={} barrier_us={us:.1}", path(&pg));
    }
    pg.finish()
}

fn misuse(pg: Pgas, mode: &str, target: usize) -> splitrt::Result<()> {
    let me = pg.rank();
    let a: SymArray<u64> = pg.alloc_sym(1)?;
    for _ in 0..3 {
        pg.barrier()?;
    }
    println!("rank {me} path={}", path(&pg));
    if me == target {
        match mode {
            "free" => pg.free_sym(a)?,
            "finish" => return pg.finish(),
            _ => {
                // long enough for the others' hang report (1 s) to end
                // the job; bounded, so the launcher need not kill it
                std::thread::sleep(std::time::Duration::from_secs(15));
                std::process::exit(3);
            }
        }
    } else {
        pg.barrier()?;
    }
    println!("done");
    pg.finish()
}
