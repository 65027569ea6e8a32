//! Team collectives through shared memory (`pgas/src/team_shm.rs`) and
//! the world collectives as the world team's, checked on any fabric and
//! path (where the members do not share a host, or on the AM path, the
//! same calls go by team messages and must give the same results):
//!
//!   conf     every rank: mixes `pg.barrier()` / `pg.world().barrier()`
//!            (and broadcast / reduce / allreduce) across ranks; data
//!            larger than one shared-memory step on odd-size teams
//!            (allreduce, reduce, broadcast, gather, allgather, alltoall,
//!            reduce_scatter, scans); 100 teams split and dropped in turn;
//!            prints "team_shm ok (<path>) rank R"
//!   absent R every member of the odd ranks' team but world rank R calls
//!            allreduce on it (R and the even ranks sleep): the report
//!            names R

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::pgas::{Op, Pgas, Team};
use splitrt::Error;

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "conf".into());
    let target: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    let r = (|| -> splitrt::Result<()> {
        let pg = Pgas::attach()?;
        match mode.as_str() {
            "conf" => run_on(pg),
            "absent" => absent(pg, target),
            m => Err(Error::usage(format!("unknown mode {m}"))),
        }
    })();
    if let Err(e) = r {
        eprintln!("t_team_shm: {e}");
        std::process::exit(1);
    }
}

fn check(cond: bool, what: impl FnOnce() -> String) -> splitrt::Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::usage(what()))
    }
}

/// Every check on an attached context (`tests/verbs_model.rs` runs them
/// on ranks attached over the verbs model).
pub fn run_on(pg: Pgas) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    mixed(&pg, &world)?;
    // odd-size teams where n allows: every third rank, and all but rank 0
    let tri = world.split(Some((me % 3) as u32), me as u64)?;
    big(&tri).map_err(|e| Error::usage(format!("team {:?}: {e}", tri.members())))?;
    let rest = world.split(if me == 0 { None } else { Some(1) }, 0)?;
    if rest.is_member() {
        big(&rest).map_err(|e| Error::usage(format!("team {:?}: {e}", rest.members())))?;
    }
    // pairs of neighbours: on one host where ranks are placed in blocks
    // of two or more per host (through its shared memory there), even
    // when the job spans hosts
    let pair = world.split(Some((me / 2) as u32), me as u64)?;
    big(&pair).map_err(|e| Error::usage(format!("team {:?}: {e}", pair.members())))?;
    big(&world).map_err(|e| Error::usage(format!("world: {e}")))?;
    churn(&world)?;
    // the world collectives and the world team still agree afterwards
    mixed(&pg, &world)?;
    println!("team_shm ok ({:?} path) rank {me}", pg.rma_path());
    pg.finish()
}

/// `pg.X()` on some ranks and `pg.world().X()` on the others, in turns:
/// one sequence, so every call matches and the values are right.
fn mixed(pg: &Pgas, world: &Team) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    for round in 0..20usize {
        let via_pgas = (me + round) % 2 == 0;
        if via_pgas {
            pg.barrier()?;
        } else {
            world.barrier()?;
        }
        let mut x = [me as u64 + 1, round as u64];
        if via_pgas {
            pg.allreduce(&mut x, Op::Sum)?;
        } else {
            world.allreduce(&mut x, Op::Sum)?;
        }
        let want = (n * (n + 1) / 2) as u64;
        check(x == [want, (round * n) as u64], || {
            format!("mixed allreduce round {round}: {x:?}")
        })?;
        let root = round % n;
        let mut b = if me == root {
            [round as u64, 7]
        } else {
            [0, 0]
        };
        if via_pgas {
            pg.broadcast(root, &mut b)?;
        } else {
            world.broadcast(root, &mut b)?;
        }
        check(b == [round as u64, 7], || {
            format!("mixed broadcast round {round}: {b:?}")
        })?;
        let mut r = [me as u64];
        if via_pgas {
            pg.reduce(root, &mut r, Op::Max)?;
        } else {
            world.reduce(root, &mut r, Op::Max)?;
        }
        if me == root {
            check(r[0] == n as u64 - 1, || {
                format!("mixed reduce round {round}")
            })?;
        }
    }
    // a split-phase barrier is the same collective too
    if me % 3 == 0 {
        pg.barrier_notify()?;
        pg.barrier_wait()?;
    } else if me % 3 == 1 {
        pg.barrier()?;
    } else {
        world.barrier()?;
    }
    let mut x = [1u64];
    world.allreduce(&mut x, Op::Sum)?;
    check(x[0] == n as u64, || {
        "allreduce after a split-phase barrier".into()
    })?;
    Ok(())
}

/// Data larger than one step of a team's shared-memory area (32 KiB per
/// member), on every collective, checked against what it must be.
fn big(t: &Team) -> splitrt::Result<()> {
    let (me, n) = (t.rank().expect("a member"), t.size());
    let w = |j: usize| t.world_rank(j).unwrap() as u64;
    let len = 10_000usize; // 80 kB of u64: three steps
                           // allreduce, exact for integers
    let mut d: Vec<u64> = (0..len as u64).map(|i| w(me) * 7 + i).collect();
    t.allreduce(&mut d, Op::Sum)?;
    let sw: u64 = (0..n).map(w).sum();
    check(
        d.iter()
            .enumerate()
            .all(|(i, &v)| v == sw * 7 + (n * i) as u64),
        || "allreduce".into(),
    )?;
    // allreduce of floats: every member the same bits
    let mut f: Vec<f64> = (0..len).map(|i| 1.0 / (1 + i + 3 * me) as f64).collect();
    t.allreduce(&mut f, Op::Sum)?;
    let mut bits = vec![0u64; n * 4];
    let mine: Vec<u64> = [0, 1, len / 2, len - 1].map(|i| f[i].to_bits()).to_vec();
    t.allgather(&mine, &mut bits)?;
    check(bits.chunks(4).all(|c| c == mine.as_slice()), || {
        "float allreduce bits differ across members".into()
    })?;
    // reduce and broadcast from the last member
    let root = n - 1;
    let mut r: Vec<u64> = (0..len as u64).map(|i| i ^ w(me)).collect();
    let keep = r.clone();
    t.reduce(root, &mut r, Op::BitXor)?;
    if me == root {
        let x = (0..n).fold(0, |a, j| a ^ w(j));
        let want = |i: u64| if n % 2 == 1 { i ^ x } else { x };
        check(
            r.iter().enumerate().all(|(i, &v)| v == want(i as u64)),
            || "reduce".into(),
        )?;
    } else {
        check(r == keep, || "reduce changed a non-root".into())?;
    }
    let mut b: Vec<u32> = if me == root {
        (0..3 * len as u32).collect()
    } else {
        vec![0; 3 * len]
    };
    t.broadcast(root, &mut b)?;
    check(b.iter().enumerate().all(|(i, &v)| v == i as u32), || {
        "broadcast".into()
    })?;
    // gather and allgather of 5000 u64 per member
    let k = 5_000usize;
    let send: Vec<u64> = (0..k as u64).map(|i| w(me) << 32 | i).collect();
    let want: Vec<u64> = (0..n)
        .flat_map(|j| (0..k as u64).map(move |i| w(j) << 32 | i))
        .collect();
    let mut all = vec![0u64; n * k];
    t.allgather(&send, &mut all)?;
    check(all == want, || "allgather".into())?;
    let mut g = if me == 0 {
        vec![0u64; n * k]
    } else {
        Vec::new()
    };
    t.gather(0, &send, &mut g)?;
    if me == 0 {
        check(g == want, || "gather".into())?;
    }
    // alltoall and reduce_scatter with blocks of 2000 u64
    let k = 2_000usize;
    let send: Vec<u64> = (0..n * k).map(|x| w(me) * 1_000_000 + x as u64).collect();
    let mut recv = vec![0u64; n * k];
    t.alltoall(&send, &mut recv)?;
    check(
        (0..n).all(|j| (0..k).all(|i| recv[j * k + i] == w(j) * 1_000_000 + (me * k + i) as u64)),
        || "alltoall".into(),
    )?;
    let mut rs = vec![0u64; k];
    t.reduce_scatter(&send, &mut rs, Op::Sum)?;
    check(
        (0..k).all(|i| rs[i] == sw * 1_000_000 + (n * (me * k + i)) as u64),
        || "reduce_scatter".into(),
    )?;
    // scans: team rank j contributes j + 1 in every element
    let mut s = vec![me as u64 + 1; len];
    t.scan_inclusive(&mut s, Op::Sum)?;
    let tri = |m: usize| (m * (m + 1) / 2) as u64;
    check(s.iter().all(|&v| v == tri(me + 1)), || {
        "scan_inclusive".into()
    })?;
    let mut s = vec![me as u64 + 1; len];
    t.scan_exclusive(&mut s, Op::Sum)?;
    check(s.iter().all(|&v| v == tri(me)), || "scan_exclusive".into())?;
    // zero-length calls still match and complete
    t.allreduce(&mut [0u64; 0], Op::Sum)?;
    t.barrier()?;
    Ok(())
}

/// 100 teams split from the world and dropped in turn, each with a
/// collective (their shared-memory blocks are freed and reused: more
/// than a rank holds at once).
fn churn(world: &Team) -> splitrt::Result<()> {
    let me = world.rank().expect("a member");
    for round in 0..100u64 {
        let t = world.split(Some((me % 2) as u32), round)?;
        let mut x = [1u64, round];
        t.allreduce(&mut x, Op::Sum)?;
        check(x == [t.size() as u64, round * t.size() as u64], || {
            format!("churn round {round}: {x:?}")
        })?;
    }
    Ok(())
}

/// The odd world ranks' team allreduces; world rank `target` never calls.
fn absent(pg: Pgas, target: usize) -> splitrt::Result<()> {
    let me = pg.rank();
    let odds = pg.world().split(Some((me % 2) as u32), 0)?;
    // set the team up (its first collective) on every member
    odds.barrier()?;
    // the target, and the even ranks (which would otherwise wait in
    // `finish` and report first), stay away until the job ends
    if me == target || me.is_multiple_of(2) {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let mut x = [1u64];
    odds.allreduce(&mut x, Op::Sum)?;
    pg.finish()
}
