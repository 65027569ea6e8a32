//! NAS Parallel Benchmarks MG (multigrid), classes S and W, on splitrt's
//! PGAS layer.
//!
//! # The benchmark
//!
//! MG solves the discrete Poisson problem `A u = v` on a periodic
//! `n x n x n` grid with `NIT` V-cycles of multigrid (NPB 3.x `mg3P`):
//! restrict the residual down to a 2x2x2 grid (`rprj3`, trilinear
//! projection), smooth there (`psinv`), then on the way up prolongate
//! (`interp`), take the residual (`resid`) and smooth again at each level.
//! `v` is zero except for ten `+1` and ten `-1` charges at the positions
//! of the ten largest and ten smallest numbers NPB's generator
//! (`randlc`, `a = 5^13`, seed 314159265) puts on the grid (`zran3`).
//! Verification compares the L2 norm of the final residual with NPB's
//! reference value (relative error at most 1e-8).
//!
//! | class | n   | NIT | levels | L2 norm (reference) |
//! |-------|-----|-----|--------|---------------------|
//! | S     | 32  | 4   | 5      | 0.5307707005734e-04 |
//! | W     | 128 | 4   | 7      | 0.6467329375339e-05 |
//!
//! The operators use NPB's coefficients: `a = (-8/3, 0, 1/6, 1/12)` for
//! `resid` and the S(a) smoother `c = (-3/8, 1/32, -1/64, 0)` for `psinv`.
//!
//! # Mapping to PGAS
//!
//! * Every array is `n3 x n2 x n1` (i1 fastest) with one ghost layer on
//!   each side, as in NPB. The grid is split over the ranks along the
//!   **y axis** (`i2`): a rank holds `n / P` rows of every plane. Splitting
//!   the middle axis makes each halo face a 2-D strided region (one run of
//!   `n1` doubles per plane, planes `n1 * n2` doubles apart), the shape a
//!   strided put (OpenSHMEM `iput`, GASNet-EX VIS, UPC++ `rput_strided`)
//!   moves as one request.
//! * `comm3` (the periodic boundary exchange after every operator) copies
//!   the x faces locally, exchanges the y faces with the neighbours
//!   ([`exchange_face`]: one `pg.put_strided` into the neighbour's
//!   symmetric ghost buffer, `pg.sync`, `pg.barrier`, unpack; two buffer sets used
//!   alternately so one barrier per exchange suffices) and copies the z
//!   faces locally, in NPB's order, so corners and edges come out as NPB's.
//! * A level is split while it has at least two rows per rank. The coarser
//!   levels are small; every rank holds them whole and computes them
//!   redundantly (same values on every rank). Going down, the restriction
//!   into the first such level is computed in slabs and gathered with puts
//!   into every rank's symmetric buffer; going up, the interpolation from
//!   it reads the rank's slab of the whole coarse grid.
//! * Every grid point is computed from the same operands in the same order
//!   as NPB's serial code, so the grids are NPB's bit for bit whatever the
//!   number of ranks; only the norms' sums (`pg.allreduce`) add in a
//!   different order. `zran3` runs NPB's generator over the rank's own rows
//!   (jumping ahead with `randlc` by powers of `a`), and the global ten
//!   largest and smallest come from every rank's local candidates
//!   (an `allreduce` of candidate slots).
//! * Ranks: a power of two with at least two rows per rank on the finest
//!   grid (1, 2, 4, 8 or 16 for class S; up to 64 for W). The time is the
//!   maximum over ranks; every rank exits 1 when verification fails.
//!
//! # Running
//!
//! ```text
//! cargo build --release --examples --bins
//! target/release/splitrt-run -n 4 target/release/examples/npb_mg W
//! target/release/splitrt-run -n 2 --rma am target/release/examples/npb_mg S
//! target/release/examples/npb_mg            # class S, a 1-rank job
//! ```

#[path = "npb_common/mod.rs"]
mod npb_common;

use npb_common::{
    class_arg, fmt_e, print_results, randlc, rma_name, skip_ahead, vranlc, Results, AMULT, SEED,
};
use splitrt::pgas::{Op, Pgas, Shape, SymArray};
use std::time::Instant;

/// Relative tolerance on the residual norm (NPB's `epsilon`).
const EPSILON: f64 = 1.0e-8;
/// `resid` coefficients (`a[1] = 0` is assumed by the operator, as in NPB).
const A: [f64; 4] = [-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0];
/// The S(a) smoother of classes S, W and A (`c[3] = 0` is assumed).
const C: [f64; 4] = [-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0];
/// Charges of each sign `zran3` places.
const MM: usize = 10;

/// One problem class (values from NPB 3.x MG).
struct Class {
    letter: char,
    /// Levels: the finest grid is `2^lt` points per axis.
    lt: usize,
    nit: usize,
    verify: f64,
}

const CLASSES: [Class; 2] = [
    Class {
        letter: 'S',
        lt: 5,
        nit: 4,
        verify: 0.530_770_700_573_4e-4,
    },
    Class {
        letter: 'W',
        lt: 7,
        nit: 4,
        verify: 0.646_732_937_533_9e-5,
    },
];

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("npb_mg: {e}");
            std::process::exit(1);
        }
    }
}

/// A local 3-D array `n3 x n2 x n1` (i1 fastest), ghosts included.
#[derive(Clone)]
struct Grid {
    n1: usize,
    n2: usize,
    n3: usize,
    a: Vec<f64>,
}

impl Grid {
    fn new(n1: usize, n2: usize, n3: usize) -> Grid {
        Grid {
            n1,
            n2,
            n3,
            a: vec![0.0; n1 * n2 * n3],
        }
    }

    #[inline(always)]
    fn at(&self, i3: usize, i2: usize, i1: usize) -> usize {
        (i3 * self.n2 + i2) * self.n1 + i1
    }

    /// Row `i2` of plane `i3` (all `n1` points).
    fn row(&self, i3: usize, i2: usize) -> &[f64] {
        let s = self.at(i3, i2, 0);
        &self.a[s..s + self.n1]
    }

    fn row_mut(&mut self, i3: usize, i2: usize) -> &mut [f64] {
        let s = self.at(i3, i2, 0);
        let n1 = self.n1;
        &mut self.a[s..s + n1]
    }

    /// Rows `first..first + n2` of every plane, as a grid of its own.
    fn rows(&self, first: usize, n2: usize) -> Grid {
        let mut g = Grid::new(self.n1, n2, self.n3);
        for i3 in 0..self.n3 {
            for j in 0..n2 {
                g.row_mut(i3, j).copy_from_slice(self.row(i3, first + j));
            }
        }
        g
    }
}

/// One level of the grid hierarchy on this rank.
struct Level {
    /// Points per axis (the global grid).
    n: usize,
    /// Split along y over the ranks (else every rank holds it whole).
    split: bool,
    /// Interior rows this rank holds (`n / P` when split, else `n`).
    rows: usize,
    u: Grid,
    r: Grid,
    /// Split levels: the neighbours' faces land here (two sets of two).
    halo: Option<SymArray<f64>>,
    /// The first whole level below split ones: the slabs of the
    /// restriction land here (two sets of one slot per rank).
    gather: Option<SymArray<f64>>,
}

/// What the exchanges share: the job, and the count of exchange steps so
/// far (its parity picks the buffer set).
struct Net<'a> {
    pg: &'a Pgas,
    me: usize,
    np: usize,
    step: usize,
}

/// Move the y faces of a split level's array `g` to the neighbours'
/// ghost rows (`comm3`'s second axis): this rank's last interior row
/// becomes the upper neighbour's ghost row 0, its first interior row the
/// lower neighbour's ghost row `n2 - 1` (periodic: rank 0's lower
/// neighbour is rank P-1).
///
/// Each face is the rows at `i2 = row` of the interior planes
/// `i3 = 1..n3-1`: `n3 - 2` runs of `n1` contiguous doubles, `n1 * n2`
/// doubles apart (element offset of the first run `(n2 + row) * n1`).
/// One strided put (`Pgas::put_strided`: over messages one request, not
/// one per run) moves it into the neighbour's symmetric ghost buffer
/// (contiguous, `n3 - 2` runs of `n1`), then `sync` + `barrier`, then the
/// ghost rows are filled from there.
fn exchange_face(net: &mut Net<'_>, g: &mut Grid, halo: &SymArray<f64>) -> splitrt::Result<()> {
    let (n1, n2, n3) = (g.n1, g.n2, g.n3);
    let face = (n3 - 2) * n1;
    let set = (net.step % 2) * 2 * face;
    net.step += 1;
    let upper = (net.me + 1) % net.np;
    let lower = (net.me + net.np - 1) % net.np;
    // (row sent, to whom, which of its two slots: 0 = its ghost row 0)
    for (row, peer, side) in [(n2 - 2, upper, 0), (1, lower, 1)] {
        // n3 - 2 runs of n1 doubles, n1 * n2 apart here, packed there
        net.pg.put_strided(
            halo.at(peer, set + side * face),
            &[n1],
            &g.a[g.at(1, row, 0)..],
            &[n1 * n2],
            &Shape::new(n1, &[n3 - 2])?,
        )?;
    }
    net.pg.sync()?;
    net.pg.barrier()?;
    // Both neighbours' faces are here; nobody writes this set again before
    // the next exchange's barrier, which this rank enters after unpacking.
    let mine = halo.local();
    for (row, side) in [(0, 0), (n2 - 1, 1)] {
        for i3 in 1..n3 - 1 {
            let at = set + side * face + (i3 - 1) * n1;
            mine.slice(at..at + n1).copy_to(g.row_mut(i3, row));
        }
    }
    Ok(())
}

/// NPB `comm3`: the periodic boundary of `g` (x locally, y with the
/// neighbours when the level is split, then z locally over whole planes).
fn comm3(net: &mut Net<'_>, g: &mut Grid, halo: Option<&SymArray<f64>>) -> splitrt::Result<()> {
    let (n1, n2, n3) = (g.n1, g.n2, g.n3);
    for i3 in 1..n3 - 1 {
        for i2 in 1..n2 - 1 {
            let s = g.at(i3, i2, 0);
            g.a[s] = g.a[s + n1 - 2];
            g.a[s + n1 - 1] = g.a[s + 1];
        }
    }
    match halo {
        Some(h) => exchange_face(net, g, h)?,
        None => {
            for i3 in 1..n3 - 1 {
                let (from, to) = (g.at(i3, n2 - 2, 0), g.at(i3, 0, 0));
                g.a.copy_within(from..from + n1, to);
                let (from, to) = (g.at(i3, 1, 0), g.at(i3, n2 - 1, 0));
                g.a.copy_within(from..from + n1, to);
            }
        }
    }
    let plane = n1 * n2;
    g.a.copy_within((n3 - 2) * plane..(n3 - 1) * plane, 0);
    g.a.copy_within(plane..2 * plane, (n3 - 1) * plane);
    Ok(())
}

/// NPB `resid`: `r = v - A u` on the interior (`v` is `r` itself when
/// `None`).
fn resid(u: &Grid, v: Option<&Grid>, r: &mut Grid) {
    if let Some(v) = v {
        r.a.copy_from_slice(&v.a);
    }
    let (n1, n2, n3) = (u.n1, u.n2, u.n3);
    let (mut u1, mut u2) = (vec![0.0; n1], vec![0.0; n1]);
    let ua = &u.a;
    for i3 in 1..n3 - 1 {
        for i2 in 1..n2 - 1 {
            for i1 in 0..n1 {
                u1[i1] = ua[u.at(i3, i2 - 1, i1)]
                    + ua[u.at(i3, i2 + 1, i1)]
                    + ua[u.at(i3 - 1, i2, i1)]
                    + ua[u.at(i3 + 1, i2, i1)];
                u2[i1] = ua[u.at(i3 - 1, i2 - 1, i1)]
                    + ua[u.at(i3 - 1, i2 + 1, i1)]
                    + ua[u.at(i3 + 1, i2 - 1, i1)]
                    + ua[u.at(i3 + 1, i2 + 1, i1)];
            }
            let c = u.at(i3, i2, 0);
            for i1 in 1..n1 - 1 {
                r.a[c + i1] = r.a[c + i1]
                    - A[0] * ua[c + i1]
                    - A[2] * (u2[i1] + u1[i1 - 1] + u1[i1 + 1])
                    - A[3] * (u2[i1 - 1] + u2[i1 + 1]);
            }
        }
    }
}

/// NPB `psinv`: the smoother `u = u + C r` on the interior.
fn psinv(r: &Grid, u: &mut Grid) {
    let (n1, n2, n3) = (r.n1, r.n2, r.n3);
    let (mut r1, mut r2) = (vec![0.0; n1], vec![0.0; n1]);
    let ra = &r.a;
    for i3 in 1..n3 - 1 {
        for i2 in 1..n2 - 1 {
            for i1 in 0..n1 {
                r1[i1] = ra[r.at(i3, i2 - 1, i1)]
                    + ra[r.at(i3, i2 + 1, i1)]
                    + ra[r.at(i3 - 1, i2, i1)]
                    + ra[r.at(i3 + 1, i2, i1)];
                r2[i1] = ra[r.at(i3 - 1, i2 - 1, i1)]
                    + ra[r.at(i3 - 1, i2 + 1, i1)]
                    + ra[r.at(i3 + 1, i2 - 1, i1)]
                    + ra[r.at(i3 + 1, i2 + 1, i1)];
            }
            let c = r.at(i3, i2, 0);
            for i1 in 1..n1 - 1 {
                u.a[c + i1] = u.a[c + i1]
                    + C[0] * ra[c + i1]
                    + C[1] * (ra[c + i1 - 1] + ra[c + i1 + 1] + r1[i1])
                    + C[2] * (r2[i1] + r1[i1 - 1] + r1[i1 + 1]);
            }
        }
    }
}

/// NPB `rprj3`: `s = P r`, the trilinear projection of the fine `r` onto
/// the interior of the coarse `s` (`s` has half the interior points of `r`
/// along each axis; no axis of `r` has a single interior point, so NPB's
/// offsets `d1 = d2 = d3 = 1`).
fn rprj3(r: &Grid, s: &mut Grid) {
    assert!(
        r.n1 > 3 && r.n2 > 3 && r.n3 > 3,
        "rprj3 from a grid this small"
    );
    let (m1j, m2j, m3j) = (s.n1, s.n2, s.n3);
    let (mut x1, mut y1) = (vec![0.0; r.n1], vec![0.0; r.n1]);
    let ra = &r.a;
    let q = |i3: usize, i2: usize, i1: usize| ra[r.at(i3, i2, i1)];
    for j3 in 1..m3j - 1 {
        let i3 = 2 * j3 - 1;
        for j2 in 1..m2j - 1 {
            let i2 = 2 * j2 - 1;
            for j1 in 1..m1j {
                let i1 = 2 * j1 - 1;
                x1[i1] = q(i3 + 1, i2, i1)
                    + q(i3 + 1, i2 + 2, i1)
                    + q(i3, i2 + 1, i1)
                    + q(i3 + 2, i2 + 1, i1);
                y1[i1] =
                    q(i3, i2, i1) + q(i3 + 2, i2, i1) + q(i3, i2 + 2, i1) + q(i3 + 2, i2 + 2, i1);
            }
            for j1 in 1..m1j - 1 {
                let i1 = 2 * j1 - 1;
                let y2 = q(i3, i2, i1 + 1)
                    + q(i3 + 2, i2, i1 + 1)
                    + q(i3, i2 + 2, i1 + 1)
                    + q(i3 + 2, i2 + 2, i1 + 1);
                let x2 = q(i3 + 1, i2, i1 + 1)
                    + q(i3 + 1, i2 + 2, i1 + 1)
                    + q(i3, i2 + 1, i1 + 1)
                    + q(i3 + 2, i2 + 1, i1 + 1);
                let k = s.at(j3, j2, j1);
                s.a[k] = 0.5 * q(i3 + 1, i2 + 1, i1 + 1)
                    + 0.25 * (q(i3 + 1, i2 + 1, i1) + q(i3 + 1, i2 + 1, i1 + 2) + x2)
                    + 0.125 * (x1[i1] + x1[i1 + 2] + y2)
                    + 0.0625 * (y1[i1] + y1[i1 + 2]);
            }
        }
    }
}

/// NPB `interp`: `u = u + Q z`, the trilinear interpolation of the coarse
/// correction `z` added to the fine `u` (ghosts included: `z`'s ghosts
/// are current, so `u`'s come out periodic without an exchange).
fn interp(z: &Grid, u: &mut Grid) {
    assert!(
        u.n1 != 3 && u.n2 != 3 && u.n3 != 3,
        "interp onto a grid this small"
    );
    let (mm1, mm2, mm3) = (z.n1, z.n2, z.n3);
    let (mut z1, mut z2, mut z3) = (vec![0.0; mm1], vec![0.0; mm1], vec![0.0; mm1]);
    let za = &z.a;
    let q = |i3: usize, i2: usize, i1: usize| za[z.at(i3, i2, i1)];
    for i3 in 0..mm3 - 1 {
        for i2 in 0..mm2 - 1 {
            for i1 in 0..mm1 {
                z1[i1] = q(i3, i2 + 1, i1) + q(i3, i2, i1);
                z2[i1] = q(i3 + 1, i2, i1) + q(i3, i2, i1);
                z3[i1] = q(i3 + 1, i2 + 1, i1) + q(i3 + 1, i2, i1) + z1[i1];
            }
            let o = u.at(2 * i3, 2 * i2, 0);
            for i1 in 0..mm1 - 1 {
                u.a[o + 2 * i1] += q(i3, i2, i1);
                u.a[o + 2 * i1 + 1] += 0.5 * (q(i3, i2, i1 + 1) + q(i3, i2, i1));
            }
            let o = u.at(2 * i3, 2 * i2 + 1, 0);
            for i1 in 0..mm1 - 1 {
                u.a[o + 2 * i1] += 0.5 * z1[i1];
                u.a[o + 2 * i1 + 1] += 0.25 * (z1[i1] + z1[i1 + 1]);
            }
            let o = u.at(2 * i3 + 1, 2 * i2, 0);
            for i1 in 0..mm1 - 1 {
                u.a[o + 2 * i1] += 0.5 * z2[i1];
                u.a[o + 2 * i1 + 1] += 0.25 * (z2[i1] + z2[i1 + 1]);
            }
            let o = u.at(2 * i3 + 1, 2 * i2 + 1, 0);
            for i1 in 0..mm1 - 1 {
                u.a[o + 2 * i1] += 0.25 * z3[i1];
                u.a[o + 2 * i1 + 1] += 0.125 * (z3[i1] + z3[i1 + 1]);
            }
        }
    }
}

/// NPB `norm2u3`: (L2 norm, max norm) of the interior of the finest grid
/// (split over the ranks: partial sums combined with `allreduce`).
fn norm2u3(pg: &Pgas, r: &Grid, n: usize) -> splitrt::Result<(f64, f64)> {
    let (mut s, mut rnmu) = (0.0f64, 0.0f64);
    for i3 in 1..r.n3 - 1 {
        for i2 in 1..r.n2 - 1 {
            for &x in &r.row(i3, i2)[1..r.n1 - 1] {
                s += x * x;
                rnmu = rnmu.max(x.abs());
            }
        }
    }
    let mut sum = [s];
    pg.allreduce(&mut sum, Op::Sum)?;
    let mut max = [rnmu];
    pg.allreduce(&mut max, Op::Max)?;
    let dn = (n * n * n) as f64;
    Ok(((sum[0] / dn).sqrt(), max[0]))
}

/// NPB `bubble`: after a new value entered slot 0 of the sorted `ten`
/// (ascending when `up`, descending otherwise), move it to its place.
fn bubble(ten: &mut [(f64, usize); MM], up: bool) {
    for i in 0..MM - 1 {
        let out_of_order = if up {
            ten[i].0 > ten[i + 1].0
        } else {
            ten[i].0 < ten[i + 1].0
        };
        if !out_of_order {
            return;
        }
        ten.swap(i, i + 1);
    }
}

/// NPB `zran3`: fill this rank's rows of the finest grid `z` with NPB's
/// random numbers, find the ten largest and ten smallest over the whole
/// grid, and make `z` +1 at the largest, -1 at the smallest, 0 elsewhere.
/// `row0` is this rank's first interior row (0-based, global).
fn zran3(net: &mut Net<'_>, top: &Level, z: &mut Grid, row0: usize) -> splitrt::Result<()> {
    let n = top.n;
    let a1 = skip_ahead(1.0, AMULT, n as u64); // a^nx (NPB `power`)
    let a2 = skip_ahead(1.0, AMULT, (n * n) as u64); // a^(nx*ny)
    let ai = skip_ahead(1.0, AMULT, (n * row0) as u64);
    z.a.fill(0.0);
    let mut x0 = SEED;
    randlc(&mut x0, ai);
    for i3 in 1..z.n3 - 1 {
        let mut x1 = x0;
        for i2 in 1..z.n2 - 1 {
            let mut xx = x1;
            vranlc(&mut xx, AMULT, &mut z.row_mut(i3, i2)[1..=n]);
            randlc(&mut x1, a1);
        }
        randlc(&mut x0, a2);
    }

    // This rank's ten largest (ascending) and ten smallest (descending),
    // as (value, global index in the ghost-included whole grid).
    let m = n + 2;
    let mut hi = [(0.0, 0usize); MM];
    let mut lo = [(1.0, 0usize); MM];
    for i3 in 1..z.n3 - 1 {
        for i2 in 1..z.n2 - 1 {
            for i1 in 1..z.n1 - 1 {
                let x = z.a[z.at(i3, i2, i1)];
                let g = i1 + m * ((row0 + i2) + m * i3);
                if x > hi[0].0 {
                    hi[0] = (x, g);
                    bubble(&mut hi, true);
                }
                if x < lo[0].0 {
                    lo[0] = (x, g);
                    bubble(&mut lo, false);
                }
            }
        }
    }
    // Every rank's candidates to every rank: one slot each in a zeroed
    // vector, summed (exact: the other slots add zeros).
    let slot = 4 * MM;
    let mut all = vec![0.0; net.np * slot];
    {
        let mine = &mut all[net.me * slot..(net.me + 1) * slot];
        for i in 0..MM {
            mine[i] = hi[i].0;
            mine[MM + i] = hi[i].1 as f64;
            mine[2 * MM + i] = lo[i].0;
            mine[3 * MM + i] = lo[i].1 as f64;
        }
    }
    net.pg.allreduce(&mut all, Op::Sum)?;
    let (mut his, mut los) = (Vec::new(), Vec::new());
    for c in all.chunks(slot) {
        for i in 0..MM {
            his.push((c[i], c[MM + i] as usize));
            los.push((c[2 * MM + i], c[3 * MM + i] as usize));
        }
    }
    his.sort_by(|a, b| b.0.total_cmp(&a.0));
    los.sort_by(|a, b| a.0.total_cmp(&b.0));

    z.a.fill(0.0);
    let rows = top.rows;
    let mut set = |g: usize, val: f64| {
        let (i1, i2, i3) = (g % m, (g / m) % m, g / (m * m));
        if i2 > row0 && i2 <= row0 + rows {
            let k = z.at(i3, i2 - row0, i1);
            z.a[k] = val;
        }
    };
    for &(_, g) in &los[..MM] {
        set(g, -1.0);
    }
    for &(_, g) in &his[..MM] {
        set(g, 1.0);
    }
    comm3(net, z, top.halo.as_ref())
}

/// Restrict level `k`'s residual onto level `k - 1` (`levels[k - 1]` is
/// level `k`), then its boundary exchange.
fn restrict(net: &mut Net<'_>, levels: &mut [Level], k: usize) -> splitrt::Result<()> {
    let (lo, hi) = levels.split_at_mut(k - 1);
    let (coarse, fine) = (&mut lo[k - 2], &hi[0]);
    if fine.split && !coarse.split {
        // Each rank computes its rows, then every rank gathers them all.
        let rows = fine.rows / 2;
        let mut slab = Grid::new(coarse.r.n1, rows + 2, coarse.r.n3);
        rprj3(&fine.r, &mut slab);
        let buf = coarse.gather.as_ref().expect("gather buffer");
        gather(net, &slab, rows, buf, &mut coarse.r)?;
        comm3(net, &mut coarse.r, None)
    } else {
        rprj3(&fine.r, &mut coarse.r);
        comm3(net, &mut coarse.r, coarse.halo.as_ref())
    }
}

/// Put this rank's interior rows of `slab` into every rank's `buf`, then
/// copy every rank's rows from this rank's `buf` into the whole grid
/// `full` (ghosts are left to `comm3`).
fn gather(
    net: &mut Net<'_>,
    slab: &Grid,
    rows: usize,
    buf: &SymArray<f64>,
    full: &mut Grid,
) -> splitrt::Result<()> {
    let (n1, n3) = (slab.n1, slab.n3);
    let per = (n3 - 2) * rows * n1;
    let set = (net.step % 2) * net.np * per;
    net.step += 1;
    // rows * n1 doubles of every interior plane (n1 * n2 apart here),
    // packed there
    let shape = Shape::new(rows * n1, &[n3 - 2])?;
    let from = &slab.a[slab.at(1, 1, 0)..];
    for r in 0..net.np {
        net.pg.put_strided(
            buf.at(r, set + net.me * per),
            &[rows * n1],
            from,
            &[slab.n1 * slab.n2],
            &shape,
        )?;
    }
    net.pg.sync()?;
    net.pg.barrier()?;
    let all = buf.local();
    for r in 0..net.np {
        let mut at = set + r * per;
        for i3 in 1..n3 - 1 {
            for j in 1..=rows {
                all.slice(at..at + n1)
                    .copy_to(full.row_mut(i3, r * rows + j));
                at += n1;
            }
        }
    }
    Ok(())
}

/// Interpolate level `k - 1`'s correction into level `k`'s `u`.
fn prolong(net: &Net<'_>, levels: &mut [Level], k: usize) {
    let (lo, hi) = levels.split_at_mut(k - 1);
    let (coarse, fine) = (&lo[k - 2], &mut hi[0]);
    if fine.split && !coarse.split {
        // This rank's slab of the whole coarse grid, ghost rows included.
        let rows = fine.rows / 2;
        let slab = coarse.u.rows(net.me * rows, rows + 2);
        interp(&slab, &mut fine.u);
    } else {
        interp(&coarse.u, &mut fine.u);
    }
}

/// NPB `mg3P`: one V-cycle (`levels[k - 1]` is level `k`; `v` the
/// right-hand side on the finest level `lt`).
fn mg3p(net: &mut Net<'_>, levels: &mut [Level], v: &Grid) -> splitrt::Result<()> {
    let lt = levels.len();
    for k in (2..=lt).rev() {
        restrict(net, levels, k)?;
    }
    {
        let l = &mut levels[0];
        l.u.a.fill(0.0);
        psinv(&l.r, &mut l.u);
        comm3(net, &mut l.u, l.halo.as_ref())?;
    }
    for k in 2..lt {
        levels[k - 1].u.a.fill(0.0);
        prolong(net, levels, k);
        let l = &mut levels[k - 1];
        resid(&l.u, None, &mut l.r);
        comm3(net, &mut l.r, l.halo.as_ref())?;
        psinv(&l.r, &mut l.u);
        comm3(net, &mut l.u, l.halo.as_ref())?;
    }
    prolong(net, levels, lt);
    let l = &mut levels[lt - 1];
    resid(&l.u, Some(v), &mut l.r);
    comm3(net, &mut l.r, l.halo.as_ref())?;
    psinv(&l.r, &mut l.u);
    comm3(net, &mut l.u, l.halo.as_ref())
}

/// `resid` on the finest level with its exchange.
fn resid_top(net: &mut Net<'_>, levels: &mut [Level], v: &Grid) -> splitrt::Result<()> {
    let l = levels.last_mut().expect("levels");
    resid(&l.u, Some(v), &mut l.r);
    comm3(net, &mut l.r, l.halo.as_ref())
}

fn run() -> splitrt::Result<bool> {
    let letter = class_arg("npb_mg", &['S', 'W'])?;
    run_on(letter, Pgas::attach()?)
}

/// Class `letter` (`S` or `W`) on an attached context: prints NPB's report
/// on rank 0 and returns whether it verified (the same on every rank).
/// `tests/npb_verbs_model.rs` runs it on ranks attached over the verbs
/// model (threads of one process).
pub fn run_on(letter: char, pg: Pgas) -> splitrt::Result<bool> {
    let Some(c) = CLASSES.iter().find(|c| c.letter == letter) else {
        return Err(splitrt::Error::usage(format!(
            "npb_mg: class {letter} is not supported"
        )));
    };
    let (me, np) = (pg.rank(), pg.size());
    let n = 1usize << c.lt;
    if !np.is_power_of_two() || n / np < 2 {
        return Err(splitrt::Error::usage(format!(
            "npb_mg: class {letter} runs on a power of two of at most {} ranks, not {np}",
            n / 2
        )));
    }

    if me == 0 {
        println!();
        println!();
        println!(" NAS Parallel Benchmarks 3.4 (splitrt PGAS port) -- MG Benchmark");
        println!();
        println!(" Size: {n:>4}x{n:>4}x{n:>4}  (class {letter})");
        println!(" Iterations: {:>3}", c.nit);
        println!(" Number of active processes: {np:>5}");
        println!(" RMA path: {}", rma_name(&pg));
        println!();
    }

    let t_init = Instant::now();
    // Levels 1..=lt (finest last); symmetric buffers allocated in the same
    // order on every rank.
    let mut levels = Vec::with_capacity(c.lt);
    for k in 1..=c.lt {
        let nk = 1usize << k;
        let split = nk >= 2 * np;
        let rows = if split { nk / np } else { nk };
        let (m, m2) = (nk + 2, rows + 2);
        let halo = if split {
            Some(pg.alloc_sym::<f64>(2 * 2 * nk * m)?)
        } else {
            None
        };
        let finer_split = k < c.lt && (nk * 2) >= 2 * np;
        let gather = if !split && finer_split {
            Some(pg.alloc_sym::<f64>(2 * nk * nk * m)?)
        } else {
            None
        };
        levels.push(Level {
            n: nk,
            split,
            rows,
            u: Grid::new(m, m2, m),
            r: Grid::new(m, m2, m),
            halo,
            gather,
        });
    }
    let top = levels.last().expect("levels");
    let row0 = me * top.rows;
    let mut v = Grid::new(top.u.n1, top.u.n2, top.u.n3);
    let mut net = Net {
        pg: &pg,
        me,
        np,
        step: 0,
    };

    zran3(&mut net, levels.last().expect("levels"), &mut v, row0)?;
    // One untimed iteration (as NPB does), then start again.
    resid_top(&mut net, &mut levels, &v)?;
    norm2u3(&pg, &levels[c.lt - 1].r, n)?;
    mg3p(&mut net, &mut levels, &v)?;
    resid_top(&mut net, &mut levels, &v)?;
    levels[c.lt - 1].u.a.fill(0.0);
    zran3(&mut net, levels.last().expect("levels"), &mut v, row0)?;
    pg.barrier()?;
    if me == 0 {
        println!(
            " Initialization time: {:>15.3} seconds",
            t_init.elapsed().as_secs_f64()
        );
        println!();
    }

    let t0 = Instant::now();
    resid_top(&mut net, &mut levels, &v)?;
    norm2u3(&pg, &levels[c.lt - 1].r, n)?;
    for it in 1..=c.nit {
        if me == 0 && (it == 1 || it == c.nit || it % 5 == 0) {
            println!("  iter {it:>3}");
        }
        mg3p(&mut net, &mut levels, &v)?;
        resid_top(&mut net, &mut levels, &v)?;
    }
    let (rnm2, _rnmu) = norm2u3(&pg, &levels[c.lt - 1].r, n)?;
    let mut time = [t0.elapsed().as_secs_f64()];
    pg.allreduce(&mut time, Op::Max)?;

    // Every rank holds the same rnm2 (allreduce adds in rank order).
    let err = (rnm2 - c.verify).abs() / c.verify;
    let verified = err <= EPSILON;
    if me == 0 {
        println!();
        println!(" Benchmark completed");
        if verified {
            println!(" VERIFICATION SUCCESSFUL");
            println!(" L2 Norm is {:>20}", fmt_e(rnm2, 13));
            println!(" Error is   {:>20}", fmt_e(err, 13));
        } else {
            println!(" VERIFICATION FAILED");
            println!(" L2 Norm is             {:>20}", fmt_e(rnm2, 13));
            println!(" The correct L2 Norm is {:>20}", fmt_e(c.verify, 13));
        }
        let nn = (n * n * n) as f64;
        print_results(&Results {
            name: "MG",
            class: letter,
            size: (n * n * n) as u64,
            iterations: c.nit,
            seconds: time[0],
            procs: np,
            mops: 58.0 * c.nit as f64 * nn / time[0] / 1e6,
            optype: "floating point",
            verified,
            rma: rma_name(&pg),
        });
    }
    pg.finish()?;
    Ok(verified)
}
