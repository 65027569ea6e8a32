//! Hierarchical team collectives (`pgas/src/team_hier.rs`): on teams
//! spanning hosts, barrier, broadcast, reduce, allreduce, gather and
//! allgather combine within each host through shared memory and send
//! messages across hosts only between one leader per host (a gather's:
//! to the root). Checked on any fabric and path (where
//! the members share one host, or on the AM path, or with
//! `SPLITRT_TEAM_HIER=0`, the same calls go flat and must give the same
//! results):
//!
//!   conf   every rank: the world team, all but world rank 0 (odd sizes)
//!          and the even ranks; every root of broadcast, reduce and
//!          gather, allgather; data
//!          of several shared-memory steps; a float allreduce whose bits
//!          must be the same on every member; then one call of each
//!          collective on the world team, printing what this rank sent to
//!          other hosts for it:
//!          "hier rank R path=P teambarrier=A barrier=B broadcast=C reduce=D
//!          allreduce=E gather=F allgather=G alltoall=H reducescatter=I
//!          scaninc=J scanexc=K alltoallv=L"
//!          (alltoall, alltoallv, reduce_scatter and the scans also on a team whose
//!          hosts' members are not consecutive team ranks: hierarchical
//!          alltoall and reduce_scatter, flat scans)
//!          and "team_hier ok (<path>) rank R"
//!   time N every rank: N world allreduces of one u64, then N of 8 KiB,
//!          then N split-team barriers, N alltoalls of one u64 per block,
//!          N scans of one u64 and N alltoallvs of one u64 per pair;
//!          rank 0 prints µs per call
//!          ("time path=P allreduce8=.. allreduce8k=.. barrier=..
//!          alltoall8=.. alltoallv8=..") and the last rank its scans' ("time path=P
//!          last rank scan8=..")
//!   nb     the non-blocking barrier, broadcast, reduce, allreduce,
//!          gather and allgather
//!          (hierarchical where the blocking forms are: `team_hier_nb.rs`)
//!          on the same three teams, results checked, several outstanding
//!          on one team completed in reverse order; then one call of each
//!          on the world team, printing what this rank sent to other hosts:
//!          "nbhier rank R path=P nbbarrier=A nbbroadcast=B nbreduce=C
//!          nballreduce=D nbgather=E nballgather=F" and "team_hier nb ok (<path>) rank R"
//!   nbop R, nbabsent R  as op and absent, with allreduce_nb
//!   nbvcount R  as vcount, with alltoallv_nb (hierarchical after the
//!          blocking collectives across hosts): the job ends naming R
//!   rsnbabsent R  as nbabsent, with reduce_scatter_nb of one element
//!          per member, which world rank R never calls: the hang report
//!          names R (also when R is a host's leader)
//!   nbscan the non-blocking reduce_scatter and scans (hierarchical where
//!          the blocking forms are, the scans when each host's members are
//!          consecutive team ranks: `team_hier_nb_scan.rs`) on the world
//!          team, all but world rank 0, the even ranks and a team whose
//!          hosts' members are not consecutive (flat scans), results
//!          checked against the flat results (integers: a fold of an
//!          allgather of the inputs in team-rank order; floats: the
//!          blocking form's bits), zero-length and several outstanding;
//!          then one call of each on the world team, printing what this
//!          rank sent to other hosts: "hier rank R path=P
//!          nbreducescatter=A nbscaninc=B nbscanexc=C" (as `conf`'s) and
//!          "team_hier nbscan ok (<path>) rank R"
//!   scantime N  every rank: N back-to-back blocking scans of one u64,
//!          then N non-blocking ones (each waited); the last rank prints
//!          µs per call: "scantime path=P last rank scan8=.. scannb8=.."
//!   op R   every rank does a few world collectives, then allreduces with
//!          Sum, but world rank R with Max: the job ends naming R
//!   absent R  likewise, but world rank R never calls the allreduce: the
//!          hang report names R
//!   count R   likewise with an alltoall of one element per block, but
//!          world rank R passes two: the job ends naming R
//!   bigcount R  likewise, but R passes 1000 (too large for one
//!          shared-memory step: R goes flat, the others hierarchically)
//!   vcount R  likewise with an alltoallv of one element per pair, but
//!          world rank R expects two from every member (recv_counts)
//!          and sends two to each: the job ends naming R
//!   vabsent R  likewise with an alltoallv, which world rank R never
//!          calls: the hang report names R
//!   noscan R  likewise with scan_inclusive (then a broadcast from the
//!          last rank), which
//!          world rank R never calls: the hang report names R
//!   scanmix R  likewise, but world rank R calls scan_inclusive while the
//!          others call a broadcast from team rank 0 as the same call:
//!          the job ends with a team collective mismatch naming R's
//!          call and another member's (not a hang report)
//!   scanmixar R  as scanmix, the others calling an allreduce
//!   nbscanmix R  as scanmix with the non-blocking forms
//!          (scan_inclusive_nb against broadcast_nb, `nb_misuse`)

use splitrt::pgas::{Op, Pgas, Team};
use splitrt::Error;

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "conf".into());
    let target: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    let r = (|| -> splitrt::Result<()> {
        let pg = Pgas::attach()?;
        match mode.as_str() {
            "conf" => conf(pg),
            "op" | "absent" | "count" | "bigcount" | "vcount" | "vabsent" | "noscan"
            | "scanmix" | "scanmixar" => misuse(pg, &mode, target),
            "time" => time(pg, target),
            "nb" => nb(pg),
            "nbop" | "nbabsent" | "nbvcount" | "rsnbabsent" | "nbscanmix" => {
                nb_misuse(pg, &mode, target)
            }
            "nbscan" => nb_scan(pg),
            "scantime" => scan_time(pg, target),
            m => Err(Error::usage(format!("unknown mode {m}"))),
        }
    })();
    if let Err(e) = r {
        eprintln!("t_team_hier: {e}");
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

fn conf(pg: Pgas) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    every(&world)?;
    let rest = world.split(if me == 0 { None } else { Some(1) }, 0)?;
    if rest.is_member() {
        every(&rest)?;
    }
    let even = world.split(Some((me % 2) as u32), me as u64)?;
    every(&even)?;
    for t in [&world, &rest, &even] {
        if t.is_member() {
            every2(t)?;
        }
    }
    // team order 0 2 4 .. 1 3 5 ..: a host's members are not consecutive
    let odd_first = world.split(Some(0), ((me % 2) << 32 | me) as u64)?;
    every2(&odd_first)?;
    // what one call of each sends across hosts from this rank
    let mut x = [me as u64];
    let count = |f: &mut dyn FnMut() -> splitrt::Result<()>| -> splitrt::Result<u64> {
        let before = world.off_host_messages();
        f()?;
        Ok(world.off_host_messages() - before)
    };
    let b = count(&mut || world.barrier())?;
    let c = count(&mut || world.broadcast(0, &mut x))?;
    let d = count(&mut || world.reduce(0, &mut x, Op::Sum))?;
    let e = count(&mut || world.allreduce(&mut x, Op::Sum))?;
    let mut all = vec![0u64; world.size()];
    let f = count(&mut || world.gather(0, &x, if me == 0 { &mut all } else { &mut [] }))?;
    let g = count(&mut || world.allgather(&x, &mut all))?;
    let blocks: Vec<u64> = (0..world.size() as u64).collect();
    let mut got = vec![0u64; world.size()];
    let a2a = count(&mut || world.alltoall(&blocks, &mut got))?;
    let mut one = [0u64];
    let rs = count(&mut || world.reduce_scatter(&blocks, &mut one, Op::Sum))?;
    let vc: Vec<usize> = vec![1; world.size()];
    let a2av = count(&mut || world.alltoallv(&blocks, &vc, &mut got, &vc))?;
    let si = count(&mut || world.scan_inclusive(&mut x, Op::Sum))?;
    let se = count(&mut || world.scan_exclusive(&mut x, Op::Sum))?;
    // world.barrier() is `Pgas::barrier` (counted at rank 0, no team
    // message): a split team of every rank shows the team barrier
    let all = world.split(Some(0), me as u64)?;
    all.barrier()?;
    let before = all.off_host_messages();
    all.barrier()?;
    let tb = all.off_host_messages() - before;
    println!(
        "hier rank {me} path={} teambarrier={tb} barrier={b} broadcast={c} reduce={d} \
         allreduce={e} gather={f} allgather={g} alltoall={a2a} reducescatter={rs} \
         scaninc={si} scanexc={se} alltoallv={a2av}",
        path(&world)
    );
    pg.barrier()?;
    println!("team_hier ok ({:?} path) rank {me}", pg.rma_path());
    pg.finish()
}

fn misuse(pg: Pgas, mode: &str, target: usize) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    let mut d = [me as u64; 2];
    world.allreduce(&mut d, Op::Sum)?;
    world.broadcast(0, &mut d)?;
    println!("rank {me} path={}", path(&world));
    if mode == "count" || mode == "bigcount" {
        // bigcount: R's call is too large for one step (flat), the
        // others' hierarchical
        let big = if mode == "count" { 2 } else { 1000 };
        let k = if me == target { big } else { 1 };
        let send = vec![me as u64; k * pg.size()];
        let mut recv = send.clone();
        world.alltoall(&send, &mut recv)?;
    } else if mode == "vcount" {
        let k = if me == target { 2 } else { 1 };
        let counts = vec![k; pg.size()];
        let send = vec![me as u64; k * pg.size()];
        let mut recv = send.clone();
        world.alltoallv(&send, &counts, &mut recv, &counts)?;
    } else if mode == "vabsent" {
        if me == target {
            std::thread::sleep(std::time::Duration::from_secs(15));
            std::process::exit(3);
        }
        let counts = vec![1; pg.size()];
        let send = vec![me as u64; pg.size()];
        let mut recv = send.clone();
        world.alltoallv(&send, &counts, &mut recv, &counts)?;
    } else if mode == "noscan" {
        if me == target {
            std::thread::sleep(std::time::Duration::from_secs(15));
            std::process::exit(3);
        }
        world.scan_inclusive(&mut d, Op::Sum)?;
        // members the scan does not make wait for R (the ranks below R:
        // the pipelined scan sends only upward, so R's own host's lower
        // members too) wait here, after the report of the member waiting
        // for R, rather than in the exit barrier: a broadcast from the
        // last rank (still in the scan), whose waits report 3 s later or
        // more (leaders' messages, the host fan-out) where an allreduce's
        // first step would report R from R's host as early as the scan
        world.broadcast(pg.size() - 1, &mut d)?;
    } else if mode == "scanmix" || mode == "scanmixar" {
        // call #3: R's scan against the others' broadcast (allreduce)
        if me == target {
            world.scan_inclusive(&mut d, Op::Sum)?;
        } else if mode == "scanmix" {
            world.broadcast(0, &mut d)?;
        } else {
            world.allreduce(&mut d, Op::Sum)?;
        }
    } else if me == target {
        if mode == "absent" {
            // long enough for the others' hang report (1 s) to end the
            // job; bounded, so the launcher need not kill this rank
            std::thread::sleep(std::time::Duration::from_secs(15));
            std::process::exit(3);
        }
        world.allreduce(&mut d, Op::Max)?;
    } else {
        world.allreduce(&mut d, Op::Sum)?;
    }
    println!("done");
    pg.finish()
}

fn time(pg: Pgas, n: usize) -> splitrt::Result<()> {
    let world = pg.world();
    let all = world.split(Some(0), pg.rank() as u64)?;
    let mut one = [1u64];
    let mut big = vec![1u64; 1024];
    world.allreduce(&mut one, Op::Sum)?;
    all.barrier()?;
    let per = |f: &mut dyn FnMut() -> splitrt::Result<()>| -> splitrt::Result<f64> {
        let t = std::time::Instant::now();
        for _ in 0..n {
            f()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64)
    };
    let a = per(&mut || world.allreduce(&mut one, Op::Max))?;
    let b = per(&mut || world.allreduce(&mut big, Op::Max))?;
    let c = per(&mut || all.barrier())?;
    let blocks = vec![1u64; world.size()];
    let mut got = blocks.clone();
    let e = per(&mut || world.alltoall(&blocks, &mut got))?;
    let mut one = [1u64];
    let f = per(&mut || world.scan_inclusive(&mut one, Op::Max))?;
    let vc = vec![1usize; world.size()];
    let v = per(&mut || world.alltoallv(&blocks, &vc, &mut got, &vc))?;
    if pg.rank() == 0 {
        println!(
            "time path={} allreduce8={a:.1} allreduce8k={b:.1} barrier={c:.1} \
             alltoall8={e:.1} alltoallv8={v:.1}",
            path(&world)
        );
    }
    // the first members of a scan wait for no one: the last one's time
    if pg.rank() + 1 == pg.size() {
        println!("time path={} last rank scan8={f:.1}", path(&world));
    }
    pg.finish()
}

fn path(t: &Team) -> &'static str {
    match t.is_hierarchical() {
        Some(true) => "hier",
        Some(false) => "flat",
        None => "shm",
    }
}

/// Every collective of the hierarchical set on `t`, results checked.
fn every(t: &Team) -> splitrt::Result<()> {
    let n = t.size();
    let me = t.rank().expect("a member");
    let name = |what: &str| format!("team {:?} ({}): {what}", t.members(), path(t));
    t.barrier()?;
    // several shared-memory steps (32 KiB each) and a zero-length call
    for len in [1usize, 5000, 0] {
        for root in 0..n {
            let mut d: Vec<u64> = if me == root {
                (0..len as u64).map(|i| i * 7 + root as u64).collect()
            } else {
                vec![u64::MAX; len]
            };
            t.broadcast(root, &mut d)?;
            check(
                d.iter()
                    .enumerate()
                    .all(|(i, &v)| v == i as u64 * 7 + root as u64),
                || name(&format!("broadcast from {root} of {len}")),
            )?;
            let mine: Vec<u64> = (0..len as u64).map(|i| i + me as u64 * 3).collect();
            let mut d = mine.clone();
            t.reduce(root, &mut d, Op::Sum)?;
            let want = |i: u64| (0..n as u64).map(|j| i + j * 3).sum::<u64>();
            if me == root {
                check(
                    d.iter().enumerate().all(|(i, &v)| v == want(i as u64)),
                    || name(&format!("reduce to {root} of {len}")),
                )?;
            } else {
                check(d == mine, || {
                    name(&format!("reduce to {root} changed a non-root"))
                })?;
            }
        }
        let send: Vec<u32> = (0..len as u32).map(|i| i ^ (me as u32) << 20).collect();
        let whole = |d: &[u32]| {
            (0..n).all(|j| (0..len).all(|i| d[j * len + i] == (i as u32) ^ (j as u32) << 20))
        };
        for root in 0..n {
            let mut recv = if me == root {
                vec![7u32; n * len]
            } else {
                vec![]
            };
            t.gather(root, &send, &mut recv)?;
            if me == root {
                check(whole(&recv), || name(&format!("gather to {root} of {len}")))?;
            }
        }
        let mut recv = vec![7u32; n * len];
        t.allgather(&send, &mut recv)?;
        check(whole(&recv), || name(&format!("allgather of {len}")))?;
        let mut d: Vec<i64> = (0..len as i64).map(|i| i - me as i64).collect();
        t.allreduce(&mut d, Op::Min)?;
        check(
            d.iter()
                .enumerate()
                .all(|(i, &v)| v == i as i64 - (n as i64 - 1)),
            || name(&format!("allreduce Min of {len}")),
        )?;
        let mut d: Vec<u64> = (0..len as u64).map(|i| i * (me as u64 + 1)).collect();
        t.allreduce(&mut d, Op::Sum)?;
        let s = (n * (n + 1) / 2) as u64;
        check(
            d.iter().enumerate().all(|(i, &v)| v == i as u64 * s),
            || name(&format!("allreduce Sum of {len}")),
        )?;
    }
    // floats: every member gets the same bits
    let mut f = [0.1f64 * (me as f64 + 1.0), 1e16 + me as f64, -1.0 / 3.0];
    t.allreduce(&mut f, Op::Sum)?;
    let mut g = f;
    t.broadcast(0, &mut g)?;
    check(
        f.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits()),
        || name("a float allreduce gave members different bits"),
    )?;
    t.barrier()
}

/// Alltoall, reduce_scatter and both scans on `t` (the second half of the
/// hierarchical set), results checked: blocks of several shared-memory
/// steps, one element, none; integers (exact in any order) and a float
/// scan whose members agree with an allgather of the inputs summed in
/// team-rank order up to the last bits.
fn every2(t: &Team) -> splitrt::Result<()> {
    let n = t.size();
    let me = t.rank().expect("a member");
    let name = |what: &str| format!("team {:?} ({}): {what}", t.members(), path(t));
    // (alltoall: 400 u64 per block is one step of 6 members' area, so
    // hierarchical; 1000 goes flat; reduce_scatter: 1000 takes two steps)
    for kk in [1usize, 400, 1000, 0] {
        // block j of member i: i << 40 | j << 20 | e
        let v = |i: usize, j: usize, e: usize| ((i as u64) << 40) | ((j as u64) << 20) | e as u64;
        let send: Vec<u64> = (0..n)
            .flat_map(|j| (0..kk).map(move |e| v(me, j, e)))
            .collect();
        let mut recv = vec![u64::MAX; n * kk];
        t.alltoall(&send, &mut recv)?;
        check(
            (0..n).all(|i| (0..kk).all(|e| recv[i * kk + e] == v(i, me, e))),
            || name(&format!("alltoall of {kk} per block")),
        )?;
        let mut out = vec![u64::MAX; kk];
        t.reduce_scatter(&send, &mut out, Op::Sum)?;
        let want = |e: usize| (0..n).map(|i| v(i, me, e)).sum::<u64>();
        check(out.iter().enumerate().all(|(e, &x)| x == want(e)), || {
            name(&format!("reduce_scatter Sum of {kk} per block"))
        })?;
        let mut out = vec![i64::MIN; kk];
        let send: Vec<i64> = send.iter().map(|&x| -(x as i64)).collect();
        t.reduce_scatter(&send, &mut out, Op::Max)?;
        check(
            out.iter()
                .enumerate()
                .all(|(e, &x)| x == -(v(0, me, e) as i64)),
            || name(&format!("reduce_scatter Max of {kk} per block")),
        )?;
        let mine: Vec<u64> = (0..kk as u64).map(|e| e * 3 + me as u64 + 1).collect();
        let upto = |r: usize, e: u64| (0..r as u64).map(|i| e * 3 + i + 1).sum::<u64>();
        let mut d = mine.clone();
        t.scan_inclusive(&mut d, Op::Sum)?;
        check(
            d.iter()
                .enumerate()
                .all(|(e, &x)| x == upto(me + 1, e as u64)),
            || name(&format!("scan_inclusive Sum of {kk}")),
        )?;
        let mut d = mine.clone();
        t.scan_exclusive(&mut d, Op::Sum)?;
        check(
            d.iter().enumerate().all(|(e, &x)| x == upto(me, e as u64)),
            || name(&format!("scan_exclusive Sum of {kk}")),
        )?;
        // a non-commutative check of the order: Max of the team rank and
        // Min of minus it
        let mut d = vec![me as i32; kk];
        t.scan_exclusive(&mut d, Op::Max)?;
        let w = if me == 0 { 0 } else { me as i32 - 1 };
        check(d.iter().all(|&x| x == w), || {
            name(&format!("scan_exclusive Max of {kk}"))
        })?;
        let mut d = vec![-(me as i32); kk];
        t.scan_inclusive(&mut d, Op::Min)?;
        check(d.iter().all(|&x| x == -(me as i32)), || {
            name(&format!("scan_inclusive Min of {kk}"))
        })?;
    }
    alltoallv(t, false)?;
    // floats: close to the sum in team-rank order
    let mut f = [0.1f64 * (me as f64 + 1.0), 1.0 / 3.0];
    let mut all = vec![0f64; 2 * n];
    t.allgather(&f, &mut all)?;
    t.scan_inclusive(&mut f, Op::Sum)?;
    for (e, &x) in f.iter().enumerate() {
        let want: f64 = (0..=me).map(|i| all[2 * i + e]).sum();
        check((x - want).abs() <= 1e-12 * want.abs().max(1.0), || {
            name(&format!("float scan_inclusive: {x} for {want}"))
        })?;
    }
    t.barrier()
}

/// Alltoallv on `t`, results checked: counts that differ per pair
/// (zeros among them), all zero, and large enough that a host's blocks
/// do not fit one shared-memory step (then every member goes flat), also
/// only between the members of the last team rank's host (that host does
/// not fit, the others do: the leaders' decision is flat).
/// `nb`: also `alltoallv_nb`, its result the blocking form's, with its
/// send buffer overwritten between the call and the wait.
fn alltoallv(t: &Team, nb: bool) -> splitrt::Result<()> {
    let n = t.size();
    let me = t.rank().expect("a member");
    let name = |what: &str| format!("team {:?} ({}): {what}", t.members(), path(t));
    // element e of the block from member i to member j
    let v = |i: usize, j: usize, e: usize| ((i as u64) << 40) | ((j as u64) << 20) | e as u64;
    let host = host_ids(t)?;
    let last = host[n - 1];
    for (mult, one_host) in [
        (1usize, false),
        (0, false),
        (100, false),
        (3000, false),
        (3000, true),
    ] {
        let m = |i: usize, j: usize| {
            if !one_host || (host[i] == last && host[j] == last) {
                mult
            } else {
                1
            }
        };
        let cnt = |i: usize, j: usize| (i * 3 + j * 5 + 1) % 4 * m(i, j);
        let mult = if one_host {
            format!("{mult} (on the last host only)")
        } else {
            mult.to_string()
        };
        let send_counts: Vec<usize> = (0..n).map(|j| cnt(me, j)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|i| cnt(i, me)).collect();
        let send: Vec<u64> = (0..n)
            .flat_map(|j| (0..cnt(me, j)).map(move |e| v(me, j, e)))
            .collect();
        let mut recv = vec![u64::MAX; recv_counts.iter().sum()];
        t.alltoallv(&send, &send_counts, &mut recv, &recv_counts)?;
        let want: Vec<u64> = (0..n)
            .flat_map(|i| (0..cnt(i, me)).map(move |e| v(i, me, e)))
            .collect();
        check(recv == want, || {
            name(&format!("alltoallv of counts (3i + 5j + 1) % 4 * {mult}"))
        })?;
        if nb {
            let mut got = vec![u64::MAX; recv.len()];
            let mut mine = send.clone();
            let r = t.alltoallv_nb(&mine, &send_counts, &mut got, &recv_counts)?;
            // the call took what it sends
            mine.fill(u64::MAX - 1);
            r.wait()?;
            check(got == recv, || {
                name(&format!(
                    "alltoallv_nb of counts * {mult}: not the blocking form's"
                ))
            })?;
        }
    }
    Ok(())
}

/// `nb`: the non-blocking forms on the world team, all but world rank 0
/// and the even ranks (each after a blocking collective, which agrees
/// the grouping), on a team whose host groups are not contiguous in team
/// rank with requests started before its first blocking collective
/// ([`nb_interleaved`]), then one call of each on the world team,
/// counted.
fn nb(pg: Pgas) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    let mut x = [me as u64];
    world.allreduce(&mut x, Op::Sum)?;
    nb_alltoallv_big(&world)?;
    nb_every(&world)?;
    let rest = world.split(if me == 0 { None } else { Some(1) }, 0)?;
    if rest.is_member() {
        rest.allreduce(&mut x, Op::Sum)?;
        nb_every(&rest)?;
    }
    let even = world.split(Some((me % 2) as u32), me as u64)?;
    even.allreduce(&mut x, Op::Sum)?;
    nb_every(&even)?;
    nb_interleaved(&world)?;
    let mut x = [me as u64];
    let count = |f: &mut dyn FnMut() -> splitrt::Result<()>| -> splitrt::Result<u64> {
        let before = world.off_host_messages();
        f()?;
        Ok(world.off_host_messages() - before)
    };
    let a = count(&mut || world.barrier_nb()?.wait())?;
    let b = count(&mut || world.broadcast_nb(0, &mut x)?.wait())?;
    let c = count(&mut || world.reduce_nb(0, &mut x, Op::Sum)?.wait())?;
    let d = count(&mut || world.allreduce_nb(&mut x, Op::Sum)?.wait())?;
    let mut all = vec![0u64; world.size()];
    let at_root = if me == 0 { &mut all[..] } else { &mut [] };
    let e = count(&mut || world.gather_nb(0, &x, at_root)?.wait())?;
    let f = count(&mut || world.allgather_nb(&x, &mut all)?.wait())?;
    let blocks: Vec<u64> = (0..world.size() as u64).collect();
    let mut got = blocks.clone();
    let g = count(&mut || world.alltoall_nb(&blocks, &mut got)?.wait())?;
    let vc = vec![1; world.size()];
    let v = count(&mut || world.alltoallv_nb(&blocks, &vc, &mut got, &vc)?.wait())?;
    println!(
        "nbhier rank {me} path={} nbbarrier={a} nbbroadcast={b} nbreduce={c} nballreduce={d} \
         nbgather={e} nballgather={f} nballtoall={g} nballtoallv={v}",
        path(&world)
    );
    pg.barrier()?;
    println!("team_hier nb ok ({:?} path) rank {me}", pg.rma_path());
    pg.finish()
}

/// Each member's host (a hash of its host name), by team rank.
fn host_ids(t: &Team) -> splitrt::Result<Vec<u64>> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let h = name.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut all = vec![0u64; t.size()];
    t.allgather(&[h], &mut all)?;
    Ok(all)
}

/// This process's peak resident memory in bytes (`VmHWM`), after
/// resetting it to the current resident memory if `reset`.
fn peak_rss(reset: bool) -> usize {
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Send buffer of each member in [`nb_alltoallv_big`].
const BIG: usize = 16 << 20;

/// `alltoallv_nb` of [`BIG`] bytes per member (too large for one
/// shared-memory step: the flat fall-back), its result checked, and the
/// growth of this rank's peak resident memory during the call: below
/// 2.5 times its send buffer (the result and the messages held until
/// taken; not also copies of every member's blocks for other hosts).
fn nb_alltoallv_big(t: &Team) -> splitrt::Result<()> {
    let (n, me) = (t.size(), t.rank().expect("a member"));
    let per = BIG / 8 / n;
    let counts = vec![per; n];
    let v = |i: usize, e: usize| ((i as u64) << 40) | e as u64;
    let send: Vec<u64> = (0..n * per).map(|e| v(me, e)).collect();
    let mut got = vec![u64::MAX; n * per];
    let before = peak_rss(true);
    t.alltoallv_nb(&send, &counts, &mut got, &counts)?.wait()?;
    let grew = peak_rss(false).saturating_sub(before);
    let ok = (0..n).all(|i| (0..per).all(|e| got[i * per + e] == v(i, me * per + e)));
    check(ok, || {
        format!(
            "team {:?} ({}): nb alltoallv of {BIG} B",
            t.members(),
            path(t)
        )
    })?;
    println!("nbbig rank {me} path={} grew={grew} send={BIG}", path(t));
    check(grew < BIG * 5 / 2, || {
        format!(
            "team {:?} ({}): alltoallv_nb of {BIG} B per member: peak resident memory grew by {grew} B",
            t.members(),
            path(t)
        )
    })
}

/// A split of every world rank keyed by parity, then by reversed world
/// rank (team order: the even ranks high to low, then the odd ones), so
/// that the members of one host (consecutive or round-robin world ranks)
/// are not contiguous in team rank. On the new team, before any blocking
/// collective (so they go flat): an `allreduce_nb` and a `gather_nb` are
/// started, then the team's first blocking collective (an `allreduce`,
/// which agrees the host groups) runs, then the two requests complete
/// and their results are checked; then every form ([`nb_every`]), which
/// goes hierarchically where the team did.
fn nb_interleaved(world: &Team) -> splitrt::Result<()> {
    let (w, wn) = (world.rank().expect("a member"), world.size());
    let key = (((w % 2) as u64) << 32) | (wn - 1 - w) as u64;
    let t = world.split(Some(0), key)?;
    let (me, n) = (t.rank().expect("a member"), t.size());
    let name = |what: &str| format!("interleaved team {:?}: {what}", t.members());
    check(t.is_hierarchical().is_none_or(|h| !h), || {
        name("hierarchical before its first blocking collective")
    })?;
    let mut a: Vec<u64> = vec![me as u64 + 1, 7];
    let part = [me as u32 * 3, !(me as u32)];
    let root = n - 1;
    let mut all = if me == root {
        vec![0u32; 2 * n]
    } else {
        vec![]
    };
    let ra = t.allreduce_nb(&mut a, Op::Sum)?;
    let rg = t.gather_nb(root, &part, &mut all)?;
    let mut x = [w as u64];
    t.allreduce(&mut x, Op::Sum)?;
    check(x == [(wn * (wn - 1) / 2) as u64], || {
        name(&format!(
            "the blocking allreduce between requests gave {x:?}"
        ))
    })?;
    rg.wait()?;
    ra.wait()?;
    check(a == vec![(n * (n + 1) / 2) as u64, 7 * n as u64], || {
        name(&format!(
            "allreduce_nb across the first blocking call: {a:?}"
        ))
    })?;
    if me == root {
        check(
            (0..n).all(|j| all[2 * j] == j as u32 * 3 && all[2 * j + 1] == !(j as u32)),
            || {
                name(&format!(
                    "gather_nb across the first blocking call: {all:?}"
                ))
            },
        )?;
    }
    nb_every(&t)?;
    println!(
        "nbinterleaved rank {} team rank {me} path={}",
        world.rank().expect("a member"),
        path(&t)
    );
    Ok(())
}

/// Every hierarchical non-blocking form on `t`, results checked.
fn nb_every(t: &Team) -> splitrt::Result<()> {
    let n = t.size();
    let me = t.rank().expect("a member");
    let name = |what: &str| format!("team {:?} ({}): nb {what}", t.members(), path(t));
    t.barrier_nb()?.wait()?;
    for len in [1usize, 5000, 0] {
        for root in 0..n {
            let mut d: Vec<u64> = if me == root {
                (0..len as u64).map(|i| i * 7 + root as u64).collect()
            } else {
                vec![u64::MAX; len]
            };
            t.broadcast_nb(root, &mut d)?.wait()?;
            check(
                d.iter()
                    .enumerate()
                    .all(|(i, &v)| v == i as u64 * 7 + root as u64),
                || name(&format!("broadcast from {root} of {len}")),
            )?;
            let mine: Vec<u64> = (0..len as u64).map(|i| i + me as u64 * 3).collect();
            let mut d = mine.clone();
            t.reduce_nb(root, &mut d, Op::Sum)?.wait()?;
            let want = |i: u64| (0..n as u64).map(|j| i + j * 3).sum::<u64>();
            if me == root {
                check(
                    d.iter().enumerate().all(|(i, &v)| v == want(i as u64)),
                    || name(&format!("reduce to {root} of {len}")),
                )?;
            } else {
                check(d == mine, || {
                    name(&format!("reduce to {root} changed a non-root"))
                })?;
            }
        }
        let send: Vec<u32> = (0..len as u32).map(|i| i ^ (me as u32) << 20).collect();
        let whole = |d: &[u32]| {
            (0..n).all(|j| (0..len).all(|i| d[j * len + i] == (i as u32) ^ (j as u32) << 20))
        };
        for root in 0..n {
            let mut recv = if me == root {
                vec![7u32; n * len]
            } else {
                vec![]
            };
            t.gather_nb(root, &send, &mut recv)?.wait()?;
            if me == root {
                check(whole(&recv), || name(&format!("gather to {root} of {len}")))?;
            }
        }
        let mut recv = vec![7u32; n * len];
        t.allgather_nb(&send, &mut recv)?.wait()?;
        check(whole(&recv), || name(&format!("allgather of {len}")))?;
        nb_alltoall(t, len)?;
        let mut d: Vec<i64> = (0..len as i64).map(|i| i - me as i64).collect();
        t.allreduce_nb(&mut d, Op::Min)?.wait()?;
        check(
            d.iter()
                .enumerate()
                .all(|(i, &v)| v == i as i64 - (n as i64 - 1)),
            || name(&format!("allreduce Min of {len}")),
        )?;
    }
    alltoallv(t, true)?;
    // several outstanding on one team, completed in reverse order (and
    // the last by `test`)
    let mut a: Vec<u64> = vec![me as u64 + 1; 3];
    let mut b = [if me == n - 1 { 42u32 } else { 0 }];
    let mut c = [me as u64 * 2];
    let x2x: Vec<u64> = (0..n as u64).map(|j| ((me as u64) << 32) | j).collect();
    let mut x2 = vec![0u64; n];
    // alltoallv: member i sends j (i + j) % 3 elements
    let vc = |i: usize, j: usize| (i + j) % 3;
    let (vs, vr): (Vec<usize>, Vec<usize>) = (0..n).map(|j| (vc(me, j), vc(j, me))).unzip();
    let vsend: Vec<u32> = (0..n)
        .flat_map(|j| (0..vc(me, j)).map(move |e| (me * 1000 + j * 10 + e) as u32))
        .collect();
    let mut vrecv = vec![0u32; vr.iter().sum()];
    let bar = t.barrier_nb()?;
    let ra = t.allreduce_nb(&mut a, Op::Sum)?;
    let rx = t.alltoall_nb(&x2x, &mut x2)?;
    let rb = t.broadcast_nb(n - 1, &mut b)?;
    let rv = t.alltoallv_nb(&vsend, &vs, &mut vrecv, &vr)?;
    let rc = t.reduce_nb(0, &mut c, Op::Max)?;
    rc.wait()?;
    rv.wait()?;
    rb.wait()?;
    rx.wait()?;
    ra.wait()?;
    check(
        (0..n).all(|j| x2[j] == ((j as u64) << 32) | me as u64),
        || name(&format!("outstanding alltoall: {x2:?}")),
    )?;
    let vwant: Vec<u32> = (0..n)
        .flat_map(|i| (0..vc(i, me)).map(move |e| (i * 1000 + me * 10 + e) as u32))
        .collect();
    check(vrecv == vwant, || {
        name(&format!("outstanding alltoallv: {vrecv:?}"))
    })?;
    let mut bar = bar;
    let mut tests = 0u64;
    while !bar.test()? {
        tests += 1;
        check(tests < 10_000_000, || name("a barrier_nb never completed"))?;
        std::thread::yield_now();
    }
    let s = (n * (n + 1) / 2) as u64;
    check(a == vec![s; 3], || {
        name(&format!("outstanding allreduce: {a:?}"))
    })?;
    check(b == [42], || name(&format!("outstanding broadcast: {b:?}")))?;
    let want = if me == 0 {
        (n as u64 - 1) * 2
    } else {
        me as u64 * 2
    };
    check(c == [want], || name(&format!("outstanding reduce: {c:?}")))?;
    // floats: every member the same bits, and the blocking form's where
    // it takes the same path (hierarchical or flat messages)
    let f0 = [0.1f64 * (me as f64 + 1.0), 1e16 + me as f64, -1.0 / 3.0];
    let mut f = f0;
    t.allreduce_nb(&mut f, Op::Sum)?.wait()?;
    let mut g = f;
    t.broadcast_nb(0, &mut g)?.wait()?;
    check(
        f.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits()),
        || name("a float allreduce_nb gave members different bits"),
    )?;
    let mut bl = f0;
    t.allreduce(&mut bl, Op::Sum)?;
    if path(t) != "shm" {
        check(
            f.iter().zip(&bl).all(|(a, b)| a.to_bits() == b.to_bits()),
            || name(&format!("allreduce_nb {f:?} and allreduce {bl:?} differ")),
        )?;
    }
    t.barrier_nb()?.wait()
}

/// `alltoall_nb` of `len` u32 per block on `t`, checked against the
/// expected blocks and the blocking `alltoall`'s result (5000 per block
/// is more than one shared-memory step: both forms go flat).
fn nb_alltoall(t: &Team, len: usize) -> splitrt::Result<()> {
    let (n, me) = (t.size(), t.rank().expect("a member"));
    let name = |what: &str| format!("team {:?} ({}): nb {what}", t.members(), path(t));
    // element e of the block from member i to member j
    let v = |i: usize, j: usize, e: usize| ((i as u32) << 24) ^ ((j as u32) << 16) ^ e as u32;
    let send: Vec<u32> = (0..n)
        .flat_map(|j| (0..len).map(move |e| v(me, j, e)))
        .collect();
    let mut got = vec![7u32; n * len];
    let mut mine = send.clone();
    let r = t.alltoall_nb(&mine, &mut got)?;
    // the call took what it sends
    mine.fill(u32::MAX);
    r.wait()?;
    let want: Vec<u32> = (0..n)
        .flat_map(|i| (0..len).map(move |e| v(i, me, e)))
        .collect();
    check(got == want, || name(&format!("alltoall of {len}")))?;
    let mut blocking = vec![7u32; n * len];
    t.alltoall(&send, &mut blocking)?;
    check(got == blocking, || {
        name(&format!("alltoall_nb and alltoall of {len} differ"))
    })
}

/// `nbop R` / `nbabsent R`: as `misuse`, the third collective an
/// `allreduce_nb` (hierarchical after the blocking two across hosts);
/// `nbvcount R`: an `alltoallv_nb` where R sends and expects two
/// elements per member, the others one; `rsnbabsent R`: a
/// `reduce_scatter_nb` R never calls.
fn nb_misuse(pg: Pgas, mode: &str, target: usize) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    let mut d = [me as u64; 2];
    world.allreduce(&mut d, Op::Sum)?;
    world.broadcast(0, &mut d)?;
    println!("rank {me} path={}", path(&world));
    if mode == "nbvcount" {
        let k = if me == target { 2 } else { 1 };
        let counts = vec![k; pg.size()];
        let send = vec![me as u64; k * pg.size()];
        let mut recv = send.clone();
        world
            .alltoallv_nb(&send, &counts, &mut recv, &counts)?
            .wait()?;
    } else if mode == "rsnbabsent" {
        if me == target {
            // as in `misuse`: bounded, the others' report ends the job
            std::thread::sleep(std::time::Duration::from_secs(15));
            std::process::exit(3);
        }
        let send = vec![me as u64; pg.size()];
        world
            .reduce_scatter_nb(&send, &mut [0u64], Op::Sum)?
            .wait()?;
    } else if mode == "nbscanmix" {
        if me == target {
            world.scan_inclusive_nb(&mut d, Op::Sum)?.wait()?;
        } else {
            world.broadcast_nb(0, &mut d)?.wait()?;
        }
    } else if me == target {
        if mode == "nbabsent" {
            // as in `misuse`: bounded, the others' report ends the job
            std::thread::sleep(std::time::Duration::from_secs(15));
            std::process::exit(3);
        }
        world.allreduce_nb(&mut d, Op::Max)?.wait()?;
    } else {
        world.allreduce_nb(&mut d, Op::Sum)?.wait()?;
    }
    println!("done");
    pg.finish()
}

/// `nbscan`: see the module docs.
fn nb_scan(pg: Pgas) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    let rest = world.split(if me == 0 { None } else { Some(1) }, 0)?;
    let even = world.split(Some((me % 2) as u32), me as u64)?;
    // team order 0 2 4 .. 1 3 5 ..: a host's members are not consecutive
    let odd_first = world.split(Some(0), ((me % 2) << 32 | me) as u64)?;
    for t in [&world, &rest, &even, &odd_first] {
        if t.is_member() {
            // a blocking collective first: it agrees the host groups
            let mut x = [me as u64];
            t.allreduce(&mut x, Op::Sum)?;
            nb_scan_every(t)?;
        }
    }
    let count = |f: &mut dyn FnMut() -> splitrt::Result<()>| -> splitrt::Result<u64> {
        let before = world.off_host_messages();
        f()?;
        Ok(world.off_host_messages() - before)
    };
    let blocks: Vec<u64> = (0..world.size() as u64).collect();
    let mut one = [0u64];
    let a = count(&mut || world.reduce_scatter_nb(&blocks, &mut one, Op::Sum)?.wait())?;
    let mut x = [me as u64];
    let b = count(&mut || world.scan_inclusive_nb(&mut x, Op::Sum)?.wait())?;
    let c = count(&mut || world.scan_exclusive_nb(&mut x, Op::Sum)?.wait())?;
    println!(
        "hier rank {me} path={} nbreducescatter={a} nbscaninc={b} nbscanexc={c}",
        path(&world)
    );
    pg.barrier()?;
    println!("team_hier nbscan ok ({:?} path) rank {me}", pg.rma_path());
    pg.finish()
}

/// The non-blocking reduce_scatter and scans on `t`, results checked
/// against the flat results: every member's input, allgathered, folded
/// in team-rank order here ([`fold_ref`]); floats against the blocking
/// forms' bits (where the team takes the same path).
fn nb_scan_every(t: &Team) -> splitrt::Result<()> {
    let n = t.size();
    let me = t.rank().expect("a member");
    let name = |what: &str| format!("team {:?} ({}): nb {what}", t.members(), path(t));
    // Prod: its identity is not zero (an exclusive scan's first host must
    // not take a zero offset); Max / Min: the order of the members
    let ops = [Op::Sum, Op::Max, Op::Min, Op::Prod];
    for kk in [1usize, 3, 1000, 0] {
        // member i's element e of block j (n blocks of kk)
        let x = |i: usize, j: usize, e: usize| {
            (((i * 31 + j * 7 + e) % 13) as i64 - 6)
                * if (i + e).is_multiple_of(2) { 1 } else { -3 }
        };
        let mine: Vec<i64> = (0..n * kk)
            .map(|c| x(me, c / kk.max(1), c % kk.max(1)))
            .collect();
        let mut all = vec![0i64; n * n * kk];
        t.allgather(&mine, &mut all)?;
        // member i's element `c` of its input
        let at = |i: usize, c: usize| all[i * n * kk + c];
        for op in ops {
            let mut out = vec![i64::MIN; kk];
            t.reduce_scatter_nb(&mine, &mut out, op)?.wait()?;
            let want: Vec<i64> = (0..kk)
                .map(|e| fold_ref(op, (0..n).map(|i| at(i, me * kk + e))))
                .collect();
            check(out == want, || {
                name(&format!("reduce_scatter {op:?} of {kk}: {out:?}"))
            })?;
            // the scans of the first block
            for inclusive in [true, false] {
                let mut d = mine[..kk].to_vec();
                let upto = if inclusive { me + 1 } else { me };
                if inclusive {
                    t.scan_inclusive_nb(&mut d, op)?.wait()?;
                } else {
                    t.scan_exclusive_nb(&mut d, op)?.wait()?;
                }
                let want: Vec<i64> = (0..kk)
                    .map(|e| fold_ref(op, (0..upto).map(|i| at(i, e))))
                    .collect();
                check(d == want, || {
                    name(&format!(
                        "scan (inclusive {inclusive}) {op:?} of {kk}: {d:?}"
                    ))
                })?;
            }
        }
    }
    // several outstanding, completed in reverse order
    let mut a = [me as u64 + 1; 2];
    let mut b = [1u64];
    let blocks = vec![me as u64; n];
    let mut c = [0u64];
    let ra = t.scan_inclusive_nb(&mut a, Op::Sum)?;
    let rb = t.scan_exclusive_nb(&mut b, Op::Sum)?;
    let rc = t.reduce_scatter_nb(&blocks, &mut c, Op::Sum)?;
    rc.wait()?;
    rb.wait()?;
    ra.wait()?;
    let tri = |r: usize| (r * (r + 1) / 2) as u64;
    check(a == [tri(me + 1); 2], || {
        name(&format!("outstanding scan_inclusive: {a:?}"))
    })?;
    check(b == [me as u64], || {
        name(&format!("outstanding scan_exclusive: {b:?}"))
    })?;
    check(c == [tri(n - 1)], || {
        name(&format!("outstanding reduce_scatter: {c:?}"))
    })?;
    // floats: the blocking forms' bits where they take the same path
    let f0 = [0.1f64 * (me as f64 + 1.0), 1e16 + me as f64, -1.0 / 3.0];
    let (mut f, mut g) = (f0, f0);
    t.scan_inclusive_nb(&mut f, Op::Sum)?.wait()?;
    t.scan_inclusive(&mut g, Op::Sum)?;
    let fs: Vec<f64> = (0..n * 3).map(|i| f0[i % 3] * (i / 3 + 1) as f64).collect();
    let (mut r, mut q) = (vec![0f64; 3], vec![0f64; 3]);
    t.reduce_scatter_nb(&fs, &mut r, Op::Sum)?.wait()?;
    t.reduce_scatter(&fs, &mut q, Op::Sum)?;
    if path(t) != "shm" {
        let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        check(same(&f, &g), || {
            name(&format!(
                "scan_inclusive_nb {f:?} and scan_inclusive {g:?} differ"
            ))
        })?;
        check(same(&r, &q), || {
            name(&format!(
                "reduce_scatter_nb {r:?} and reduce_scatter {q:?} differ"
            ))
        })?;
    }
    t.barrier_nb()?.wait()
}

/// `scantime N`: see the module docs.
fn scan_time(pg: Pgas, n: usize) -> splitrt::Result<()> {
    let world = pg.world();
    let mut one = [1u64];
    world.allreduce(&mut one, Op::Sum)?;
    world.scan_inclusive(&mut one, Op::Max)?;
    // µs per call since `t`
    let us = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    let t = std::time::Instant::now();
    for _ in 0..n {
        world.scan_inclusive(&mut one, Op::Max)?;
    }
    let a = us(t);
    world.allreduce(&mut one, Op::Sum)?;
    let t = std::time::Instant::now();
    for _ in 0..n {
        world.scan_inclusive_nb(&mut one, Op::Max)?.wait()?;
    }
    let b = us(t);
    // the first members of a scan wait for no one: the last one's time
    if pg.rank() + 1 == pg.size() {
        println!(
            "scantime path={} last rank scan8={a:.1} scannb8={b:.1}",
            path(&world)
        );
    }
    pg.finish()
}

/// The left fold of `items` with `op` in order (the flat forms' order;
/// zero for none, as the exclusive scan's team rank 0).
fn fold_ref(op: Op, items: impl Iterator<Item = i64>) -> i64 {
    use splitrt::pgas::Reduce;
    items
        .reduce(|a, b| i64::combine(op, a, b).unwrap_or(a))
        .unwrap_or(0)
}
