//! Teams and team collectives, checked against values every rank can
//! compute: on the world team, on strided, 2-d and color splits (odd
//! sizes, size-1 teams), with zero-length data and data longer than a
//! fabric Medium (sent in chunks). And misuse: a non-member's call,
//! mismatched arguments, a member that never arrives.
//!
//! Usage: t_teams [MODE [RANK]]     (exit 0 = every check passed)
//!   conf            the conformance checks (default); prints `teams ok (PATH)`
//!   nonmember       rank 1 calls barrier on the team {0}: an error naming it
//!   split_args      ranks pass different split_strided arguments: an error
//!                   on every rank
//!   mismatch_len    world allreduce of 2 elements on rank 0, 3 elsewhere
//!   mismatch_root   world broadcast from root 0 on rank 0, root 1 elsewhere
//!   mismatch_op     world allreduce Sum on rank 0, Max elsewhere
//!   mismatch_counts world alltoallv: rank 0 expects 2 elements from rank 1,
//!                   which sends it 1
//!   absent RANK     every rank but RANK calls the world team's allreduce;
//!                   RANK never does
//!   bad_recv        rank 1 passes a recv of the wrong length to the world
//!                   team's allgather (a usage error), then every rank calls
//!                   the same allgather (and an allreduce) correctly
//!   mismatch_nb     world scan_inclusive_nb: Sum on rank 0, Max elsewhere
//!   bad_nb          rank 1 passes a send of the wrong length to the world
//!                   team's reduce_scatter_nb (a usage error), then every
//!                   rank calls it correctly
//!   orphan_bound    rank 0 drops 2000 barrier_nb requests while the others
//!                   wait in Pgas::barrier: it must stop at the bound of
//!                   dropped requests pending (its hang report says so)
//!   drop_loop ITERS every rank starts ITERS non-blocking team collectives
//!                   (allgather, allreduce, alltoall, broadcast, barrier in
//!                   turn) and drops each at once; then a blocking allreduce
//!                   and allgather must work and the rank's resident memory
//!                   must not have grown by more than 64 MiB; prints
//!                   `drop_loop ok`
//!   time ITERS      (not a test) rank 0 prints the mean time of world
//!                   Pgas vs Team barrier / allreduce, and Team alltoall

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
            m => misuse(m, target, pg),
        }
    })();
    if let Err(e) = r {
        eprintln!("t_teams: {e}");
        std::process::exit(1);
    }
}

fn fail(msg: String) -> Error {
    Error::usage(msg)
}

fn check(cond: bool, what: impl FnOnce() -> String) -> splitrt::Result<()> {
    if cond {
        Ok(())
    } else {
        Err(fail(what()))
    }
}

/// The checks on an attached context (`tests/verbs_model.rs` runs them on
/// ranks attached over the verbs model).
pub fn run_on(pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let world = pg.world();
    check(
        world.rank() == Some(me) && world.size() == n && world.is_member(),
        || "world team".into(),
    )?;
    let mut teams: Vec<(String, Team)> = vec![("world".into(), world.clone())];
    let evens = world.split_strided(0, 2, n.div_ceil(2))?;
    check(evens.is_member() == (me % 2 == 0), || "evens".into())?;
    teams.push(("evens".into(), evens));
    if n >= 2 {
        let odds = world.split_strided(1, 2, n / 2)?;
        check(odds.is_member() == (me % 2 == 1), || "odds".into())?;
        teams.push(("odds".into(), odds));
    }
    let (row, col) = world.split_2d(2)?;
    check(
        row.rank() == Some(me % 2) && col.rank() == Some(me / 2),
        || format!("2d: row {:?} col {:?}", row.members(), col.members()),
    )?;
    teams.push(("row".into(), row.clone()));
    teams.push(("col".into(), col));
    // three colors, reversed order: an odd size when n > 3
    let tri = world.split(Some((me % 3) as u32), (n - me) as u64)?;
    let want: Vec<usize> = (0..n).rev().filter(|r| r % 3 == me % 3).collect();
    check(tri.members() == want, || {
        format!("color split: {:?} vs {want:?}", tri.members())
    })?;
    teams.push(("tri".into(), tri));
    let alone = world.split(Some(me as u32), 0)?;
    check(alone.size() == 1 && alone.rank() == Some(0), || {
        "size-1 team".into()
    })?;
    teams.push(("alone".into(), alone));
    // a nested split: the row team's first member alone
    let first = row.split_strided(0, 1, 1)?;
    check(first.is_member() == (row.rank() == Some(0)), || {
        "nested split".into()
    })?;
    teams.push(("row-first".into(), first));
    // no color: a non-member handle of no team
    let none = world.split(if me == 0 { None } else { Some(0) }, 0)?;
    check(none.is_member() == (me != 0), || "no color".into())?;
    teams.push(("no-color".into(), none));

    for (name, t) in &teams {
        if t.is_member() {
            team_checks(t).map_err(|e| fail(format!("team {name} {:?}: {e}", t.members())))?;
        }
    }
    // the world collectives still work, after and between team ones
    let mut x = [1u64];
    pg.allreduce(&mut x, Op::Sum)?;
    check(x[0] == n as u64, || "world allreduce".into())?;
    world.barrier()?;
    pg.barrier()?;
    println!("teams ok ({:?} path) rank {me}", pg.rma_path());
    pg.finish()
}

/// Every collective on team `t` (this rank is a member).
fn team_checks(t: &Team) -> splitrt::Result<()> {
    let me = t.rank().expect("a member");
    let n = t.size();
    let w = |r: usize| t.world_rank(r).expect("team rank") as u64;
    for r in 0..n {
        check(t.team_rank_of(w(r) as usize) == Some(r), || {
            "rank translation".into()
        })?;
    }
    check(t.world_rank(n).is_none(), || "past the team".into())?;
    t.barrier()?;
    // lengths: empty, small, and longer than any fabric's Medium
    for len in [0usize, 3, 20_000] {
        for root in [0, n - 1] {
            let mut d: Vec<u64> = if me == root {
                (0..len as u64).map(|i| w(root) * 1_000_000 + i).collect()
            } else {
                vec![7; len]
            };
            t.broadcast(root, &mut d)?;
            check(
                d.iter()
                    .enumerate()
                    .all(|(i, &v)| v == w(root) * 1_000_000 + i as u64),
                || format!("broadcast len {len} root {root}"),
            )?;
            let mine: Vec<u64> = (0..len as u64).map(|i| w(me) * 10 + i).collect();
            let sum = |i: usize| (0..n).map(|r| w(r) * 10 + i as u64).sum::<u64>();
            let mut d = mine.clone();
            t.reduce(root, &mut d, Op::Sum)?;
            if me == root {
                check(d.iter().enumerate().all(|(i, &v)| v == sum(i)), || {
                    format!("reduce len {len} root {root}")
                })?;
            } else {
                check(d == mine, || "reduce changed a non-root's data".into())?;
            }
        }
        let mut d: Vec<u64> = (0..len as u64).map(|i| w(me) * 10 + i).collect();
        t.allreduce(&mut d, Op::Sum)?;
        check(
            d.iter()
                .enumerate()
                .all(|(i, &v)| v == (0..n).map(|r| w(r) * 10 + i as u64).sum::<u64>()),
            || format!("allreduce len {len}"),
        )?;
    }
    let mut f = [w(me) as f64, -(w(me) as f64)];
    t.allreduce(&mut f, Op::Max)?;
    let top = (0..n).map(w).max().unwrap() as f64;
    let low = (0..n).map(w).min().unwrap() as f64;
    check(f == [top, -low], || format!("f64 max {f:?}"))?;
    // every member gets the same bits of a rounding float sum
    let mut f = [0.1 * (w(me) + 1) as f64, 1e16 / (w(me) + 3) as f64];
    t.allreduce(&mut f, Op::Sum)?;
    let mut all = vec![0f64; 2 * n];
    t.allgather(&f, &mut all)?;
    check(
        all.chunks(2)
            .all(|c| c[0].to_bits() == f[0].to_bits() && c[1].to_bits() == f[1].to_bits()),
        || format!("allreduce bits differ across members: {all:?}"),
    )?;
    let mut b = [w(me) as u32 | 0x100];
    t.allreduce(&mut b, Op::BitOr)?;
    check(b[0] == (0..n).fold(0x100, |a, r| a | w(r) as u32), || {
        "bitor".into()
    })?;

    for k in [0usize, 2, 5000] {
        let send: Vec<u64> = (0..k as u64).map(|i| w(me) * 100_000 + i).collect();
        let want: Vec<u64> = (0..n)
            .flat_map(|r| (0..k as u64).map(move |i| (r, i)))
            .map(|(r, i)| w(r) * 100_000 + i)
            .collect();
        for root in [0, n / 2] {
            let mut recv = if me == root {
                vec![0u64; n * k]
            } else {
                Vec::new()
            };
            t.gather(root, &send, &mut recv)?;
            if me == root {
                check(recv == want, || format!("gather k {k} root {root}"))?;
            }
        }
        let mut recv = vec![0u64; n * k];
        t.allgather(&send, &mut recv)?;
        check(recv == want, || format!("allgather k {k}"))?;

        // alltoall: block j for team rank j
        let val = |src: u64, dst: u64, i: u64| src * 1_000_000 + dst * 1000 + i;
        let send: Vec<u64> = (0..n)
            .flat_map(|j| (0..k as u64).map(move |i| (j, i)))
            .map(|(j, i)| val(w(me), w(j), i))
            .collect();
        let mut recv = vec![0u64; n * k];
        t.alltoall(&send, &mut recv)?;
        let want: Vec<u64> = (0..n)
            .flat_map(|j| (0..k as u64).map(move |i| (j, i)))
            .map(|(j, i)| val(w(j), w(me), i))
            .collect();
        check(recv == want, || format!("alltoall k {k}"))?;

        // reduce_scatter: the sum of every member's block for me
        let mut out = vec![0u64; k];
        t.reduce_scatter(&send, &mut out, Op::Sum)?;
        let want: Vec<u64> = (0..k as u64)
            .map(|i| (0..n).map(|j| val(w(j), w(me), i)).sum())
            .collect();
        check(out == want, || format!("reduce_scatter k {k}"))?;
    }

    // alltoallv: (src + dst) % 3 elements from src to dst, some empty
    let cnt = |s: usize, d: usize| (s + d) % 3;
    let send_counts: Vec<usize> = (0..n).map(|j| cnt(me, j)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|j| cnt(j, me)).collect();
    let send: Vec<u32> = (0..n)
        .flat_map(|j| (0..cnt(me, j)).map(move |i| (j, i)))
        .map(|(j, i)| (w(me) * 100 + w(j) * 10 + i as u64) as u32)
        .collect();
    let mut recv = vec![0u32; recv_counts.iter().sum()];
    t.alltoallv(&send, &send_counts, &mut recv, &recv_counts)?;
    let want: Vec<u32> = (0..n)
        .flat_map(|j| (0..cnt(j, me)).map(move |i| (j, i)))
        .map(|(j, i)| (w(j) * 100 + w(me) * 10 + i as u64) as u32)
        .collect();
    check(recv == want, || format!("alltoallv {recv:?} vs {want:?}"))?;

    // scans
    for len in [0usize, 4] {
        let x = |r: usize, i: usize| w(r) + 1 + i as u64;
        let mut d: Vec<u64> = (0..len).map(|i| x(me, i)).collect();
        t.scan_inclusive(&mut d, Op::Sum)?;
        let want: Vec<u64> = (0..len).map(|i| (0..=me).map(|r| x(r, i)).sum()).collect();
        check(d == want, || format!("inscan {d:?} vs {want:?}"))?;
        let mut d: Vec<u64> = (0..len).map(|i| x(me, i)).collect();
        t.scan_exclusive(&mut d, Op::Sum)?;
        let want: Vec<u64> = (0..len).map(|i| (0..me).map(|r| x(r, i)).sum()).collect();
        check(d == want, || format!("exscan {d:?} vs {want:?}"))?;
        let mut d: Vec<i64> = (0..len).map(|i| -(x(me, i) as i64)).collect();
        t.scan_inclusive(&mut d, Op::Min)?;
        let want: Vec<i64> = (0..len)
            .map(|i| (0..=me).map(|r| -(x(r, i) as i64)).min().unwrap())
            .collect();
        check(d == want, || format!("min inscan {d:?} vs {want:?}"))?;
    }
    // non-blocking: two in flight, completed by wait, test and .await
    for k in [0usize, 3, 3000] {
        let val = |src: u64, dst: u64, i: u64| src * 1_000_000 + dst * 1000 + i;
        let send: Vec<u64> = (0..n)
            .flat_map(|j| (0..k as u64).map(move |i| (j, i)))
            .map(|(j, i)| val(w(me), w(j), i))
            .collect();
        let want: Vec<u64> = (0..n)
            .flat_map(|j| (0..k as u64).map(move |i| (j, i)))
            .map(|(j, i)| val(w(j), w(me), i))
            .collect();
        let total: u64 = (0..n).map(w).sum();
        let (mut r1, mut r2, mut r3) = (vec![0u64; n * k], vec![0u64; n * k], vec![0u64; n * k]);
        let mut s1 = vec![w(me); k];
        let mut s2 = vec![w(me) as f64; k];
        let a = t.alltoall_nb(&send, &mut r1)?;
        let b = t.allreduce_nb(&mut s1, Op::Sum)?;
        let c = t.alltoall_nb(&send, &mut r2)?;
        let mut d = t.allreduce_nb(&mut s2, Op::Sum)?;
        let e = t.alltoall_nb(&send, &mut r3)?;
        block_on(e)?; // the last first: the others' messages wait meanwhile
        c.wait()?;
        while !d.test()? {}
        drop(d);
        block_on(b)?;
        a.wait()?;
        check(r1 == want && r2 == want && r3 == want, || {
            format!("alltoall_nb k {k}")
        })?;
        check(s1.iter().all(|&x| x == total), || {
            format!("allreduce_nb {s1:?}")
        })?;
        check(s2.iter().all(|&x| x == total as f64), || {
            format!("allreduce_nb f64 {s2:?}")
        })?;
    }
    // the other non-blocking forms, in flight together
    for len in [0usize, 5, 9000] {
        let root = n / 2;
        let mut bc: Vec<u64> = if me == root {
            (0..len as u64).collect()
        } else {
            vec![0; len]
        };
        let mine: Vec<u32> = (0..len as u32).map(|i| w(me) as u32 + i).collect();
        let mut all = vec![0u32; n * len];
        let b = t.barrier_nb()?;
        let c = t.broadcast_nb(root, &mut bc)?;
        let g = t.allgather_nb(&mine, &mut all)?;
        block_on(g)?;
        c.wait()?;
        block_on(b)?;
        check(bc == (0..len as u64).collect::<Vec<_>>(), || {
            format!("broadcast_nb len {len}")
        })?;
        let want: Vec<u32> = (0..n)
            .flat_map(|r| (0..len as u32).map(move |i| (r, i)))
            .map(|(r, i)| w(r) as u32 + i)
            .collect();
        check(all == want, || format!("allgather_nb len {len}"))?;
    }
    nb_forms(t)?;
    // a wrong local length is an error before anything is sent
    let mut short = vec![0u64; 1];
    let e = t.allgather(&[1u64, 2], &mut short);
    check(
        n == 0
            || e.as_ref()
                .is_err_and(|e| e.to_string().contains("expected")),
        || format!("short recv: {e:?}"),
    )?;
    t.barrier()
}

/// The non-blocking forms of reduce, gather, alltoallv, reduce_scatter
/// and the scans on team `t` (this rank is a member): all in flight at
/// once, completed in an order that differs from member to member (by
/// `wait`, `test` and `.await`), against values every rank computes and,
/// for floating point, bit for bit against the blocking forms; and a
/// request dropped on some members completes on the others.
fn nb_forms(t: &Team) -> splitrt::Result<()> {
    let me = t.rank().expect("a member");
    let n = t.size();
    let w = |r: usize| t.world_rank(r).expect("team rank") as u64;
    for k in [0usize, 3, 3000] {
        let root = n - 1;
        let mine: Vec<u64> = (0..k as u64).map(|i| w(me) * 10 + i).collect();
        let sum = |i: u64| (0..n).map(|r| w(r) * 10 + i).sum::<u64>();
        let all: Vec<u64> = (0..n)
            .flat_map(|r| (0..k as u64).map(move |i| w(r) * 10 + i))
            .collect();
        let val = |src: u64, dst: u64, i: u64| src * 1_000_000 + dst * 1000 + i;
        let blocks: Vec<u64> = (0..n)
            .flat_map(|j| (0..k as u64).map(move |i| (j, i)))
            .map(|(j, i)| val(w(me), w(j), i))
            .collect();
        // alltoallv: (src + dst + k) % 3 elements from src to dst
        let cnt = |s: usize, d: usize| (s + d + k) % 3;
        let send_counts: Vec<usize> = (0..n).map(|j| cnt(me, j)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|j| cnt(j, me)).collect();
        let vsend: Vec<u32> = (0..n)
            .flat_map(|j| (0..cnt(me, j)).map(move |i| (j, i)))
            .map(|(j, i)| (w(me) * 100 + w(j) * 10 + i as u64) as u32)
            .collect();
        let x = |r: usize, i: usize| w(r) + 1 + i as u64;
        let (mut red, mut gat) = (mine.clone(), vec![0u64; if me == 0 { n * k } else { 0 }]);
        let mut vrecv = vec![0u32; recv_counts.iter().sum()];
        let mut rs = vec![0u64; k];
        let mut inc: Vec<u64> = (0..k).map(|i| x(me, i)).collect();
        let mut exc = inc.clone();
        let mut r1 = t.reduce_nb(root, &mut red, Op::Sum)?;
        let r2 = t.gather_nb(0, &mine, &mut gat)?;
        let r3 = t.alltoallv_nb(&vsend, &send_counts, &mut vrecv, &recv_counts)?;
        let r4 = t.reduce_scatter_nb(&blocks, &mut rs, Op::Sum)?;
        let r5 = t.scan_inclusive_nb(&mut inc, Op::Sum)?;
        let mut r6 = t.scan_exclusive_nb(&mut exc, Op::Sum)?;
        match me % 3 {
            0 => {
                // the last first
                while !r6.test()? {}
                drop(r6);
                block_on(r5)?;
                r4.wait()?;
                block_on(r3)?;
                r2.wait()?;
                while !r1.test()? {}
                drop(r1);
            }
            1 => {
                r1.wait()?;
                r2.wait()?;
                block_on(r3)?;
                r4.wait()?;
                block_on(r5)?;
                r6.wait()?;
            }
            _ => {
                block_on(r4)?;
                r2.wait()?;
                r6.wait()?;
                while !r1.test()? {}
                drop(r1);
                r5.wait()?;
                r3.wait()?;
            }
        }
        if me == root {
            check(
                red.iter().enumerate().all(|(i, &v)| v == sum(i as u64)),
                || format!("reduce_nb k {k}"),
            )?;
        } else {
            check(red == mine, || "reduce_nb changed a non-root's data".into())?;
        }
        check(me != 0 || gat == all, || format!("gather_nb k {k}"))?;
        let want: Vec<u32> = (0..n)
            .flat_map(|j| (0..cnt(j, me)).map(move |i| (j, i)))
            .map(|(j, i)| (w(j) * 100 + w(me) * 10 + i as u64) as u32)
            .collect();
        check(vrecv == want, || {
            format!("alltoallv_nb {vrecv:?} vs {want:?}")
        })?;
        let want: Vec<u64> = (0..k as u64)
            .map(|i| (0..n).map(|j| val(w(j), w(me), i)).sum())
            .collect();
        check(rs == want, || format!("reduce_scatter_nb k {k}"))?;
        let want: Vec<u64> = (0..k).map(|i| (0..=me).map(|r| x(r, i)).sum()).collect();
        check(inc == want, || format!("scan_inclusive_nb k {k}"))?;
        let want: Vec<u64> = (0..k).map(|i| (0..me).map(|r| x(r, i)).sum()).collect();
        check(exc == want, || format!("scan_exclusive_nb k {k}"))?;
    }
    // the blocking forms' results (float sums, min); every member calls the
    // same form (a non-blocking collective never matches a blocking one, as
    // in MPI). Where the members share a host the blocking form runs over
    // shared memory, combining in team-rank order, and the non-blocking one
    // along its message tree: a float sum may differ in its last bit (each
    // path gives every member the same bits); the same path, the same bits
    let shm = t.pgas().rma_path() == splitrt::pgas::RmaPath::Native;
    let f = |r: usize| {
        [
            0.1 * (w(r) + 1) as f64,
            1e16 / (w(r) + 3) as f64,
            -(w(r) as f64),
        ]
    };
    let odd = me % 2 == 1;
    let root = n / 2;
    let (mut a, mut b) = (f(me), f(me));
    t.reduce(root, &mut a, Op::Sum)?;
    t.reduce_nb(root, &mut b, Op::Sum)?.wait()?;
    let same = |a: &[f64], b: &[f64]| {
        a.iter().zip(b).all(|(x, y)| {
            x.to_bits() == y.to_bits() || (shm && (x - y).abs() <= 4.0 * f64::EPSILON * x.abs())
        })
    };
    check(same(&a, &b), || format!("reduce_nb bits {a:?} vs {b:?}"))?;
    for op in [Op::Sum, Op::Min] {
        let (mut a, mut b, mut c, mut d) = (f(me), f(me), f(me), f(me));
        t.scan_inclusive(&mut a, op)?;
        t.scan_exclusive(&mut c, op)?;
        let r = t.scan_inclusive_nb(&mut b, op)?;
        let s = t.scan_exclusive_nb(&mut d, op)?;
        block_on(s)?;
        r.wait()?;
        check(same(&a, &b) && same(&c, &d), || {
            format!("scan_nb {op:?} bits {a:?} vs {b:?}, {c:?} vs {d:?}")
        })?;
        let blocks: Vec<f64> = (0..n)
            .flat_map(|j| f(me).map(|v| v * (j + 1) as f64))
            .collect();
        let (mut a, mut b) = ([0f64; 3], [0f64; 3]);
        t.reduce_scatter(&blocks, &mut a, op)?;
        block_on(t.reduce_scatter_nb(&blocks, &mut b, op)?)?;
        check(same(&a, &b), || format!("reduce_scatter_nb {op:?} bits"))?;
    }
    // dropped on even members, waited on odd ones: the dropped parts
    // finish in the background (advanced by the later calls)
    let mut s = [w(me) + 1];
    let mut g = vec![0u64; n];
    let r = t.allreduce_nb(&mut s, Op::Sum)?;
    let q = t.allgather_nb(&[w(me)], &mut g)?;
    let total: u64 = (0..n).map(|r| w(r) + 1).sum();
    if odd {
        r.wait()?;
        q.wait()?;
        check(s[0] == total, || {
            format!("allreduce_nb beside dropped: {s:?}")
        })?;
        check(g == (0..n).map(w).collect::<Vec<_>>(), || {
            format!("allgather_nb beside dropped: {g:?}")
        })?;
    } else {
        drop(q);
        drop(r);
    }
    let mut s = [1u64];
    t.allreduce(&mut s, Op::Sum)?;
    check(s[0] == n as u64, || {
        "allreduce after dropped requests".into()
    })
}

/// The misuse modes (see the module docs).
fn misuse(mode: &str, target: usize, pg: Pgas) -> splitrt::Result<()> {
    let me = pg.rank();
    let world = pg.world();
    match mode {
        "nonmember" => {
            let zero = world.split_strided(0, 1, 1)?;
            if me != 0 {
                let e = zero.barrier().expect_err("a non-member's barrier");
                println!("nonmember error: {e}");
                let mut d = [0u64];
                let e = zero.allreduce(&mut d, Op::Sum).expect_err("allreduce");
                println!("nonmember error: {e}");
            } else {
                zero.barrier()?;
            }
        }
        "split_args" => {
            let e = world
                .split_strided(0, 1 + me % 2, 1)
                .expect_err("disagreeing split arguments");
            println!("split error: {e}");
        }
        "mismatch_len" => {
            let mut d = vec![1u64; if me == 0 { 2 } else { 3 }];
            world.allreduce(&mut d, Op::Sum)?;
        }
        "mismatch_root" => {
            let mut d = [1u64; 2];
            world.broadcast(if me == 0 { 0 } else { 1 }, &mut d)?;
        }
        "mismatch_op" => {
            let mut d = [1u64; 2];
            world.allreduce(&mut d, if me == 0 { Op::Sum } else { Op::Max })?;
        }
        "time" => {
            let iters = target.clamp(1, 1_000_000);
            let mut x = [1u64];
            let k = 512; // 4 KiB per pair
            let send = vec![me as u64; k * pg.size()];
            let mut recv = vec![0u64; k * pg.size()];
            let mut rows: Vec<(&str, f64)> = Vec::new();
            for round in 0..2 {
                let mut time = |name: &'static str, f: &mut dyn FnMut() -> splitrt::Result<()>| {
                    pg.barrier()?;
                    let t = std::time::Instant::now();
                    for _ in 0..iters {
                        f()?;
                    }
                    if round == 1 {
                        rows.push((name, t.elapsed().as_secs_f64() * 1e6 / iters as f64));
                    }
                    splitrt::Result::Ok(())
                };
                time("Pgas::barrier", &mut || pg.barrier())?;
                time("Team::barrier (world)", &mut || world.barrier())?;
                time("Pgas::allreduce 8 B", &mut || pg.allreduce(&mut x, Op::Sum))?;
                time("Team::allreduce 8 B (world)", &mut || {
                    world.allreduce(&mut x, Op::Sum)
                })?;
                time("Team::alltoall 4 KiB per pair", &mut || {
                    world.alltoall(&send, &mut recv)
                })?;
            }
            if me == 0 {
                for (name, us) in rows {
                    println!("{name}: {us:.2} us");
                }
            }
        }
        "mismatch_counts" => {
            let n = pg.size();
            let send = vec![me as u64; n];
            let send_counts = vec![1; n];
            let mut recv_counts = vec![1; n];
            if me == 0 {
                recv_counts[1] = 2;
            }
            let mut recv = vec![0u64; recv_counts.iter().sum()];
            world.alltoallv(&send, &send_counts, &mut recv, &recv_counts)?;
        }
        "bad_recv" => {
            let n = pg.size();
            let send = [me as u64 + 1; 2];
            if me == 1 {
                let mut short = vec![0u64; 2 * n - 1];
                let e = world
                    .allgather(&send, &mut short)
                    .expect_err("a recv of the wrong length");
                println!("bad_recv error: {e}");
            }
            let mut recv = vec![0u64; 2 * n];
            world.allgather(&send, &mut recv)?;
            let want: Vec<u64> = (0..n as u64).flat_map(|r| [r + 1; 2]).collect();
            check(recv == want, || {
                format!("allgather after bad_recv: {recv:?}")
            })?;
            let mut d = [1u64];
            world.allreduce(&mut d, Op::Sum)?;
            check(d[0] == n as u64, || {
                format!("allreduce after bad_recv: {d:?}")
            })?;
        }
        "mismatch_nb" => {
            let mut d = [1u64; 2];
            let op = if me == 0 { Op::Sum } else { Op::Max };
            world.scan_inclusive_nb(&mut d, op)?.wait()?;
        }
        "bad_nb" => {
            let n = pg.size();
            let send: Vec<u64> = (0..2 * n as u64).collect();
            let mut mine = [0u64; 2];
            if me == 1 {
                let e = world
                    .reduce_scatter_nb(&send[1..], &mut mine, Op::Sum)
                    .expect_err("a send of the wrong length");
                println!("bad_nb error: {e}");
            }
            world.reduce_scatter_nb(&send, &mut mine, Op::Sum)?.wait()?;
            let want = [2 * me as u64 * n as u64, (2 * me as u64 + 1) * n as u64];
            check(mine == want, || {
                format!("reduce_scatter_nb after bad_nb: {mine:?}")
            })?;
        }
        "orphan_bound" => {
            // rank 0 drops 2000 barriers while the others wait elsewhere
            // (in the world barrier, which does not advance team
            // requests): its 1025th drop must wait for the oldest
            if me == 0 {
                for _ in 0..2000 {
                    drop(world.barrier_nb()?);
                }
            }
            pg.barrier()?;
        }
        "drop_loop" => {
            let iters = target.clamp(1, 1_000_000);
            let n = pg.size();
            let rss0 = rss_kib();
            let x = [me as u64 + 1; 4];
            let mut y = vec![0u64; 4 * n];
            let all = vec![me as u64; 4 * n];
            let mut z = vec![0u64; 4];
            let counts = vec![4; n];
            for i in 0..iters {
                let r = match i % 11 {
                    0 => world.allgather_nb(&x, &mut y)?,
                    1 => world.allreduce_nb(&mut y, Op::Sum)?,
                    2 => world.alltoall_nb(&all, &mut y)?,
                    3 => world.broadcast_nb(i % n, &mut y)?,
                    4 => world.barrier_nb()?,
                    5 => world.reduce_nb(i % n, &mut z, Op::Max)?,
                    6 => world.gather_nb(i % n, &x, &mut y)?,
                    7 => world.alltoallv_nb(&all, &counts, &mut y, &counts)?,
                    8 => world.reduce_scatter_nb(&all, &mut z, Op::Sum)?,
                    9 => world.scan_inclusive_nb(&mut z, Op::Sum)?,
                    _ => world.scan_exclusive_nb(&mut z, Op::Sum)?,
                };
                drop(r);
            }
            let mut d = [1u64];
            world.allreduce(&mut d, Op::Sum)?;
            check(d[0] == n as u64, || {
                format!("allreduce after {iters} dropped requests: {d:?}")
            })?;
            let mut got = vec![0u64; 4 * n];
            world.allgather(&x, &mut got)?;
            let want: Vec<u64> = (0..n as u64).flat_map(|r| [r + 1; 4]).collect();
            check(got == want, || format!("allgather after the loop: {got:?}"))?;
            let grew = rss_kib().saturating_sub(rss0);
            check(grew < 64 << 10, || {
                format!("resident memory grew by {grew} KiB over {iters} dropped requests")
            })?;
            println!("drop_loop ok rank {me} (grew {grew} KiB)");
        }
        "absent" => {
            if me == target {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
            let mut d = [1u64; 2];
            world.allreduce(&mut d, Op::Sum)?;
        }
        "absent_busy" => {
            // like "absent", but the missing member keeps sending the
            // others unrelated traffic (puts: Active Messages under
            // SPLITRT_RMA=am) every 20 ms for 20 s before it calls the
            // allreduce
            let word = pg.alloc_sym::<u64>(1)?;
            if me == target {
                let t = std::time::Instant::now();
                let mut k = 0u64;
                while t.elapsed() < std::time::Duration::from_secs(20) {
                    for r in (0..pg.size()).filter(|&r| r != me) {
                        pg.put(word.ptr(r), &[k])?;
                    }
                    k += 1;
                    // serving traffic meanwhile (the replies' credits)
                    let next = std::time::Instant::now() + std::time::Duration::from_millis(20);
                    pg.endpoint()
                        .wait_until(|| std::time::Instant::now() >= next)?;
                }
            }
            let mut d = [1u64; 2];
            world.allreduce(&mut d, Op::Sum)?;
        }
        "absent_flood" => {
            // like "absent_busy", but the traffic is a flood: the missing
            // member stores to the others with no pause for 20 s (Active
            // Messages under SPLITRT_RMA=am), so their waits almost never
            // find an idle round
            let word = pg.alloc_sym::<u64>(1)?;
            if me == target {
                let t = std::time::Instant::now();
                let mut k = 0u64;
                while t.elapsed() < std::time::Duration::from_secs(20) {
                    for r in (0..pg.size()).filter(|&r| r != me) {
                        pg.store(word.ptr(r), &[k])?;
                    }
                    k += 1;
                }
            }
            let mut d = [1u64; 2];
            world.allreduce(&mut d, Op::Sum)?;
        }
        m => return Err(fail(format!("unknown mode {m}"))),
    }
    println!("done");
    pg.finish()
}

/// This process's resident memory in KiB (0 where /proc is missing).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Run a future on this thread, parking between polls: a pending future
/// must wake the thread (its waker is registered with the team mailbox
/// and the doorbell bridge); a park that times out is a lost wake-up, and
/// 10 000 polls a future that wakes itself (spins).
fn block_on<F: std::future::Future<Output = splitrt::Result<()>>>(f: F) -> splitrt::Result<()> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    for _ in 0..10_000 {
        if let std::task::Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return r;
        }
        let t = std::time::Instant::now();
        std::thread::park_timeout(std::time::Duration::from_secs(20));
        if t.elapsed() >= std::time::Duration::from_secs(20) {
            return Err(fail("a pending team request was never woken".into()));
        }
    }
    // each wake is a message or traffic: far fewer for these collectives
    Err(fail(
        "a pending team request was polled 10000 times: it wakes itself (spins)".into(),
    ))
}
