//! em3d: the classic Split-C electromagnetics kernel on a random bipartite
//! graph.
//!
//! The graph has E nodes and H nodes; every rank owns `NODES` of each. Every
//! node has `DEGREE` weighted edges to nodes of the other kind; each edge
//! points to a node on another rank with probability `REMOTE` (otherwise to
//! a node on the same rank). E nodes' edges carry random weights between 0
//! and 0.5/DEGREE, H nodes' edges between -0.5/DEGREE and 0. One iteration
//! is
//!
//! ```text
//! for every E node e:  e.value -= sum_j e.weight[j] * e.neighbour[j].value   (H values)
//! for every H node h:  h.value -= sum_j h.weight[j] * h.neighbour[j].value   (E values)
//! ```
//!
//! How the remote values travel (the "bulk ghost" version of Split-C em3d):
//!
//! * Set-up. Each rank lists, per peer, the distinct remote nodes its edges
//!   touch (its imports) and gives every edge a source slot: a local node or
//!   a slot in a ghost buffer. Ranks publish how many values they import from
//!   each peer (puts into the peer's symmetric count array), read the peers'
//!   count arrays back with split-phase gets to find where their request
//!   goes, and put their import lists there. Afterwards every rank knows the
//!   nodes each peer needs from it, as one contiguous export list.
//! * Every half-iteration: each rank packs the current values its peers need
//!   into its symmetric export buffer, a barrier, then each rank fetches its
//!   whole ghost buffer with one bulk `get` per peer, all in flight at once
//!   inside one `pg.scope`, and updates its nodes.
//!
//! Check: every rank's final E and H values are gathered on rank 0 (bulk
//! gets again), which rebuilds the whole graph from the same seed, runs the
//! same iterations sequentially and compares with a relative tolerance of
//! 1e-9 (the summation order is the same, so the values normally agree
//! exactly). Every rank exits non-zero if the check fails.
//!
//! ```text
//! cargo build --examples --bins
//! target/debug/splitrt-run -n 4 target/debug/examples/em3d
//! target/debug/splitrt-run -n 4 --rma am target/debug/examples/em3d 2000 8 0.3 10
//! ```
//!
//! Arguments (all optional, positional): nodes of each kind per rank
//! (default 4000), degree (default 8), remote fraction (default 0.2),
//! iterations (default 20).

use splitrt::pgas::{Op, Pgas, SymArray};
use splitrt::{Error, Result};
use std::time::Instant;

const SEED: u64 = 0x00e3_d5ee_d000_0001;
const E: u64 = 0;
const H: u64 = 1;

/// splitmix64: a good 64-bit mixer and a tiny generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(mix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy)]
struct Params {
    nodes: usize,
    degree: usize,
    remote: f64,
    iters: usize,
}

/// One node's edges: (rank, local index) of each neighbour and its weight.
/// A pure function of the node's identity, so any rank can rebuild any part
/// of the graph.
fn edges(p: &Params, ranks: usize, kind: u64, rank: usize, i: usize) -> Vec<(usize, usize, f64)> {
    let id = (kind << 56) ^ ((rank as u64) << 32) ^ i as u64;
    let mut rng = Rng::new(SEED ^ mix(id));
    (0..p.degree)
        .map(|_| {
            let far = ranks > 1 && rng.unit() < p.remote;
            let r = if far {
                (rank + 1 + rng.below(ranks - 1)) % ranks
            } else {
                rank
            };
            let k = rng.below(p.nodes);
            // E edges pull, H edges push (like the two curl terms); small
            // weights keep the values' growth slow on a random graph.
            let sign = if kind == E { 0.5 } else { -0.5 };
            let w = sign * rng.unit() / p.degree as f64;
            (r, k, w)
        })
        .collect()
}

fn initial(kind: u64, rank: usize, i: usize) -> f64 {
    let id = (kind << 56) ^ ((rank as u64) << 32) ^ i as u64;
    Rng::new(!SEED ^ mix(id)).unit()
}

/// The update of one kind of node on this rank: edges in CSR form with each
/// source either a local node (`< nodes`) or a ghost slot (`nodes + g`), and
/// the import/export plan for the values of the other kind.
struct Side {
    src: Vec<u32>,
    weight: Vec<f64>,
    /// Per peer: the first ghost slot and how many values come from it.
    ghost_at: Vec<(usize, usize)>,
    /// Per peer: where my request starts in the peer's export buffer.
    remote_off: Vec<usize>,
    ghosts: usize,
    /// Local indices of the other kind's nodes my peers need, in export order.
    export_idx: Vec<u32>,
    /// Symmetric export buffer the peers fetch from.
    export: SymArray<f64>,
    remote_edges: usize,
}

/// Collective: build this rank's half of the graph for nodes of `kind`.
fn build_side(pg: &Pgas, p: &Params, kind: u64) -> Result<Side> {
    let (me, ranks) = (pg.rank(), pg.size());
    let mut imports: Vec<Vec<u32>> = vec![Vec::new(); ranks];
    let mut all = Vec::with_capacity(p.nodes * p.degree);
    for i in 0..p.nodes {
        for (r, k, w) in edges(p, ranks, kind, me, i) {
            if r != me {
                imports[r].push(k as u32);
            }
            all.push((r, k, w));
        }
    }
    for list in &mut imports {
        list.sort_unstable();
        list.dedup();
    }
    let mut ghost_at = Vec::with_capacity(ranks);
    let mut ghosts = 0;
    for list in &imports {
        ghost_at.push((ghosts, list.len()));
        ghosts += list.len();
    }
    let remote_edges = all.iter().filter(|e| e.0 != me).count();
    let src = all
        .iter()
        .map(|&(r, k, _)| {
            if r == me {
                k as u32
            } else {
                let pos = imports[r].binary_search(&(k as u32)).expect("imported");
                (p.nodes + ghost_at[r].0 + pos) as u32
            }
        })
        .collect();
    let weight = all.iter().map(|e| e.2).collect();

    // Tell every peer how many of its values I need: counts[q][me] = n.
    let counts = pg.alloc_sym::<u64>(ranks)?;
    for (q, list) in imports.iter().enumerate() {
        if q != me {
            pg.put(counts.at(q, me), &[list.len() as u64])?;
        }
    }
    pg.sync()?;
    pg.barrier()?;
    let my_exports: usize = counts.local().iter().sum::<u64>() as usize;
    let mut cap = [my_exports as u64];
    pg.allreduce(&mut cap, Op::Max)?;
    let cap = (cap[0] as usize).max(1);
    let export_list = pg.alloc_sym::<u32>(cap)?;
    let export = pg.alloc_sym::<f64>(cap)?;

    // Where does my request go in each peer's export list? Read every
    // peer's count array, all gets in flight at once.
    let mut theirs = vec![0u64; ranks * ranks];
    pg.scope(|s| {
        for (q, row) in theirs.chunks_mut(ranks).enumerate() {
            if q != me {
                s.get(counts.ptr(q), row)?;
            }
        }
        Ok(())
    })?;
    let mut remote_off = vec![0; ranks];
    for (q, list) in imports.iter().enumerate() {
        if q != me {
            let row = &theirs[q * ranks..(q + 1) * ranks];
            remote_off[q] = row[..me].iter().sum::<u64>() as usize;
            pg.put(export_list.at(q, remote_off[q]), list)?;
        }
    }
    pg.sync()?;
    pg.barrier()?;
    let export_idx = export_list.local().slice(..my_exports).to_vec();
    Ok(Side {
        src,
        weight,
        ghost_at,
        remote_off,
        ghosts,
        export_idx,
        export,
        remote_edges,
    })
}

/// Collective: one half-iteration. `x` are the values of the nodes `side`
/// updates; `y` the values of the other kind, which its edges read.
fn half_step(
    pg: &Pgas,
    side: &mut Side,
    x: &SymArray<f64>,
    y: &SymArray<f64>,
    ghost: &mut [f64],
    degree: usize,
) -> Result<()> {
    let me = pg.rank();
    // SAFETY: no rank writes `y` during this half-step (peers read only
    // the export arrays; `y` changes in the other half-step, on this rank
    // alone, behind the barrier below), and no other view of it is used.
    let yl = unsafe { y.local().as_slice() };
    // Pack the values my peers need. SAFETY: nobody reads this side's
    // export now: peers fetch it after the barrier below, and their last
    // fetch of it ended before the other side's half-step barrier.
    let export = unsafe { side.export.local().as_mut_slice() };
    for (e, &k) in export.iter_mut().zip(&side.export_idx) {
        *e = yl[k as usize];
    }
    pg.barrier()?;
    let export = &side.export;
    let (ghost_at, remote_off) = (&side.ghost_at, &side.remote_off);
    pg.scope(|s| {
        let mut rest = &mut ghost[..];
        for (q, &(_, n)) in ghost_at.iter().enumerate() {
            let (mine, tail) = rest.split_at_mut(n);
            rest = tail;
            if q != me && n > 0 {
                s.get(export.at(q, remote_off[q]), mine)?;
            }
        }
        Ok(())
    })?;
    let n = yl.len();
    // SAFETY: `x` is this rank's alone during the half-step: peers read
    // only the export arrays, and `x` is read here, through this slice
    // only, until the next half-step packs it behind a barrier.
    let xl = unsafe { x.local().as_mut_slice() };
    for (i, v) in xl.iter_mut().enumerate() {
        let mut sum = 0.0;
        for j in i * degree..(i + 1) * degree {
            let s = side.src[j] as usize;
            let val = if s < n { yl[s] } else { ghost[s - n] };
            sum += side.weight[j] * val;
        }
        *v -= sum;
    }
    Ok(())
}

/// The whole graph, sequentially: returns the final (E, H) values indexed
/// by rank * nodes + i.
fn sequential(p: &Params, ranks: usize) -> (Vec<f64>, Vec<f64>) {
    let total = ranks * p.nodes;
    let build = |kind| {
        let mut src = Vec::with_capacity(total * p.degree);
        let mut w = Vec::with_capacity(total * p.degree);
        for r in 0..ranks {
            for i in 0..p.nodes {
                for (q, k, wt) in edges(p, ranks, kind, r, i) {
                    src.push(q * p.nodes + k);
                    w.push(wt);
                }
            }
        }
        (src, w)
    };
    let (es, ew) = build(E);
    let (hs, hw) = build(H);
    let init = |kind| -> Vec<f64> {
        (0..total)
            .map(|g| initial(kind, g / p.nodes, g % p.nodes))
            .collect()
    };
    let (mut ev, mut hv) = (init(E), init(H));
    let step = |x: &mut [f64], y: &[f64], src: &[usize], w: &[f64]| {
        for (i, v) in x.iter_mut().enumerate() {
            let mut sum = 0.0;
            for j in i * p.degree..(i + 1) * p.degree {
                sum += w[j] * y[src[j]];
            }
            *v -= sum;
        }
    };
    for _ in 0..p.iters {
        step(&mut ev, &hv, &es, &ew);
        step(&mut hv, &ev, &hs, &hw);
    }
    (ev, hv)
}

fn arg<T: std::str::FromStr>(v: Option<String>, name: &str, default: T) -> Result<T> {
    match v {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| Error::usage(format!("bad {name} {s:?}"))),
    }
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("em3d: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<bool> {
    let mut a = std::env::args().skip(1);
    let p = Params {
        nodes: arg(a.next(), "node count", 4000)?,
        degree: arg(a.next(), "degree", 8)?,
        remote: arg(a.next(), "remote fraction", 0.2)?,
        iters: arg(a.next(), "iteration count", 20)?,
    };
    if let Some(extra) = a.next() {
        return Err(Error::usage(format!(
            "unexpected argument {extra:?}; usage: em3d [NODES_PER_RANK] [DEGREE] [REMOTE_FRACTION] [ITERATIONS]"
        )));
    }
    if p.nodes == 0 || p.nodes > u32::MAX as usize / 2 || p.degree == 0 {
        return Err(Error::usage("need at least 1 node and degree 1"));
    }
    if !(0.0..=1.0).contains(&p.remote) {
        return Err(Error::usage("the remote fraction must lie in [0, 1]"));
    }

    let pg = Pgas::attach()?;
    let (me, ranks) = (pg.rank(), pg.size());
    let t0 = Instant::now();
    let ev = pg.alloc_sym::<f64>(p.nodes)?;
    let hv = pg.alloc_sym::<f64>(p.nodes)?;
    for i in 0..p.nodes {
        ev.local().set(i, initial(E, me, i));
        hv.local().set(i, initial(H, me, i));
    }
    let mut e_side = build_side(&pg, &p, E)?;
    let mut h_side = build_side(&pg, &p, H)?;
    let mut e_ghost = vec![0.0; e_side.ghosts];
    let mut h_ghost = vec![0.0; h_side.ghosts];
    pg.barrier()?;
    let t_setup = t0.elapsed();

    let t1 = Instant::now();
    for _ in 0..p.iters {
        half_step(&pg, &mut e_side, &ev, &hv, &mut e_ghost, p.degree)?;
        half_step(&pg, &mut h_side, &hv, &ev, &mut h_ghost, p.degree)?;
    }
    pg.barrier()?;
    let t_iter = t1.elapsed();

    let mut stats = [
        (e_side.remote_edges + h_side.remote_edges) as u64,
        (e_side.ghosts + h_side.ghosts) as u64,
    ];
    pg.allreduce(&mut stats, Op::Sum)?;

    // Gather every rank's values on rank 0 and check them there.
    let total = ranks * p.nodes;
    let mut verdict = [0u64; 2]; // [failed, worst relative error bits]
    if me == 0 {
        let (mut ge, mut gh) = (vec![0.0; total], vec![0.0; total]);
        pg.scope(|s| {
            for (r, (ce, ch)) in ge
                .chunks_mut(p.nodes)
                .zip(gh.chunks_mut(p.nodes))
                .enumerate()
            {
                s.get(ev.ptr(r), ce)?;
                s.get(hv.ptr(r), ch)?;
            }
            Ok(())
        })?;
        let (se, sh) = sequential(&p, ranks);
        let mut worst = 0.0f64;
        let mut bad = None;
        for (kind, got, want) in [("E", &ge, &se), ("H", &gh, &sh)] {
            for (g, (x, y)) in got.iter().zip(want.iter()).enumerate() {
                // identical (also inf or NaN after very many iterations) or close
                let rel = if x == y || x.to_bits() == y.to_bits() {
                    0.0
                } else {
                    (x - y).abs() / y.abs().max(1.0)
                };
                if rel > worst || rel.is_nan() {
                    worst = rel;
                }
                if (rel.is_nan() || rel > 1e-9) && bad.is_none() {
                    bad = Some(format!(
                        "{kind} node {} of rank {}: distributed {x:e}, sequential {y:e}",
                        g % p.nodes,
                        g / p.nodes
                    ));
                }
            }
        }
        let overflowed = se.iter().chain(&sh).filter(|v| !v.is_finite()).count();
        if overflowed > 0 {
            println!(
                "em3d: note: {overflowed} values overflowed (the values grow by ~10% per iteration on a random graph); use fewer iterations"
            );
        }
        if let Some(b) = &bad {
            eprintln!("em3d: MISMATCH: {b}");
        }
        verdict = [bad.is_some() as u64, worst.to_bits()];
    }
    pg.broadcast(0, &mut verdict)?;
    let ok = verdict[0] == 0;
    if me == 0 {
        let edges = 2 * total * p.degree;
        println!(
            "em3d: {ranks} ranks x {} E + {} H nodes, degree {}, {} iterations, {:?} path",
            p.nodes,
            p.nodes,
            p.degree,
            p.iters,
            pg.rma_path()
        );
        println!(
            "em3d: {:.1}% of {edges} edges remote, {} ghost values fetched per iteration",
            100.0 * stats[0] as f64 / edges as f64,
            stats[1]
        );
        println!(
            "em3d: set-up {:.1} ms, {:.3} ms per iteration",
            t_setup.as_secs_f64() * 1e3,
            t_iter.as_secs_f64() * 1e3 / p.iters.max(1) as f64
        );
        if ok {
            println!(
                "em3d OK: {} values match the sequential run (max relative error {:e})",
                2 * total,
                f64::from_bits(verdict[1])
            );
        } else {
            println!("em3d FAILED: distributed values differ from the sequential run");
        }
    }
    pg.finish()?;
    Ok(ok)
}
