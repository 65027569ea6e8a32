//! NAS Parallel Benchmarks CG (conjugate gradient), classes S and W, on
//! splitrt's PGAS layer.
//!
//! # The benchmark
//!
//! CG estimates the smallest eigenvalue of a large sparse symmetric
//! positive definite matrix by inverse power iteration: each of the
//! `NITER` outer iterations solves `A z = x` approximately with 25
//! iterations of unpreconditioned conjugate gradient, then sets
//! `zeta = SHIFT + 1 / (x . z)` and `x = z / ||z||`. The matrix is NPB's
//! `makea`: `NA` random sparse vectors (`sprnvc` / `vecset` on NPB's
//! generator, `tran = 314159265`, `amult = 1220703125`) whose outer
//! products are summed with geometrically decreasing weights, plus a
//! shifted diagonal. Verification compares the final `zeta` with NPB's
//! reference value (relative error at most 1e-10).
//!
//! | class | NA   | NONZER | NITER | SHIFT | zeta (reference) |
//! |-------|------|--------|-------|-------|------------------|
//! | S     | 1400 | 7      | 15    | 10    | 8.5971775078648  |
//! | W     | 7000 | 8      | 15    | 12    | 10.362595087124  |
//!
//! # Mapping to PGAS
//!
//! * Rows of `A` and the vectors `x, z, p, q, r` are distributed in blocks
//!   (a `Dist::Block` spread array's partition). Every rank runs the whole
//!   (cheap, sequential) random generation of `makea` but assembles only
//!   its own rows, in the same order of summation as NPB's `sparse`, so the
//!   matrix is NPB's whatever the number of ranks (1..8, any count).
//! * The sparse mat-vec `q = A p` needs all of `p`: each rank publishes its
//!   block in the spread array, a barrier makes the blocks visible, and a
//!   `pg.scope` of bulk `s.get`s fetches every other rank's block into a
//!   local full-length copy (the same for `z` in the residual norm).
//! * Dot products are local partial sums combined with
//!   `pg.allreduce(&mut [..], Op::Sum)`, which adds in rank order, so every
//!   rank gets the same `alpha`, `beta` and `zeta`, bit for bit.
//! * The time is the maximum over ranks (`Op::Max`); every rank exits 1 when
//!   verification fails.
//!
//! # Running
//!
//! ```text
//! cargo build --release --examples --bins
//! target/release/splitrt-run -n 4 target/release/examples/npb_cg W
//! target/release/splitrt-run -n 4 --rma am target/release/examples/npb_cg S
//! target/release/examples/npb_cg            # class S, a 1-rank job
//! ```

#[path = "npb_common/mod.rs"]
mod npb_common;

use npb_common::{class_arg, fmt_e, print_results, randlc, rma_name, Results, AMULT, SEED};
use splitrt::pgas::{Dist, Op, Pgas, SpreadArray};
use std::ops::Range;
use std::time::Instant;

/// Inner conjugate gradient iterations per outer iteration.
const CGITMAX: usize = 25;
/// Relative tolerance on zeta.
const EPSILON: f64 = 1.0e-10;
const RCOND: f64 = 0.1;

/// One problem class (values from NPB's CG).
struct Class {
    letter: char,
    na: usize,
    nonzer: usize,
    niter: usize,
    shift: f64,
    zeta_ref: f64,
}

const CLASSES: [Class; 2] = [
    Class {
        letter: 'S',
        na: 1400,
        nonzer: 7,
        niter: 15,
        shift: 10.0,
        zeta_ref: 8.597_177_507_864_8,
    },
    Class {
        letter: 'W',
        na: 7000,
        nonzer: 8,
        niter: 15,
        shift: 12.0,
        zeta_ref: 10.362_595_087_124,
    },
];

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("npb_cg: {e}");
            std::process::exit(1);
        }
    }
}

/// This rank's rows of `A` (compressed sparse rows, global column indices).
struct Rows {
    rowstr: Vec<usize>,
    colidx: Vec<usize>,
    a: Vec<f64>,
}

impl Rows {
    /// `out[j] = (row j of A) . v` for this rank's rows (`v` full length).
    fn matvec(&self, v: &[f64], out: &mut [f64]) {
        for (j, o) in out.iter_mut().enumerate() {
            let mut sum = 0.0;
            for k in self.rowstr[j]..self.rowstr[j + 1] {
                sum += self.a[k] * v[self.colidx[k]];
            }
            *o = sum;
        }
    }
}

/// NPB `sprnvc`: a sparse vector of `nz` distinct random positions in
/// 1..=n with random values.
fn sprnvc(n: usize, nz: usize, nn1: usize, tran: &mut f64, v: &mut Vec<f64>, iv: &mut Vec<usize>) {
    v.clear();
    iv.clear();
    while iv.len() < nz {
        let vecelt = randlc(tran, AMULT);
        let vecloc = randlc(tran, AMULT);
        // icnvrt: an integer in 1..=nn1, kept if it is at most n
        let i = (nn1 as f64 * vecloc) as usize + 1;
        if i > n || iv.contains(&i) {
            continue;
        }
        v.push(vecelt);
        iv.push(i);
    }
}

/// NPB `vecset`: set element `i` of the sparse vector to `val`.
fn vecset(v: &mut Vec<f64>, iv: &mut Vec<usize>, i: usize, val: f64) {
    let mut set = false;
    for (x, &k) in v.iter_mut().zip(iv.iter()) {
        if k == i {
            *x = val;
            set = true;
        }
    }
    if !set {
        v.push(val);
        iv.push(i);
    }
}

/// NPB `makea` + `sparse`, assembling only `rows`. The generator runs over
/// the whole matrix on every rank; each row's entries are summed in NPB's
/// order (by outer vector, then element), so the values are NPB's.
fn makea(c: &Class, rows: Range<usize>) -> Rows {
    let n = c.na;
    let mut tran = SEED;
    randlc(&mut tran, AMULT); // NPB's main draws one number before makea
    let mut nn1 = 1;
    while nn1 < n {
        nn1 *= 2;
    }
    // The outer vectors: positions (0-based) and values.
    let mut acol: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut aelt: Vec<Vec<f64>> = Vec::with_capacity(n);
    let (mut v, mut iv) = (Vec::new(), Vec::new());
    for iouter in 0..n {
        sprnvc(n, c.nonzer, nn1, &mut tran, &mut v, &mut iv);
        vecset(&mut v, &mut iv, iouter + 1, 0.5);
        acol.push(iv.iter().map(|&i| i - 1).collect());
        aelt.push(v.clone());
    }

    // sparse(): row j gets aelt[i][nza] * aelt[i][*] * size_i for every
    // outer vector i with a nonzero in position j; duplicates add up.
    let mut built: Vec<Vec<(usize, f64)>> = vec![Vec::new(); rows.len()];
    let mut size = 1.0;
    let ratio = RCOND.powf(1.0 / n as f64);
    for i in 0..n {
        for (&j, &ej) in acol[i].iter().zip(&aelt[i]) {
            if !rows.contains(&j) {
                continue;
            }
            let scale = size * ej;
            let row = &mut built[j - rows.start];
            for (&jcol, &ecol) in acol[i].iter().zip(&aelt[i]) {
                let mut va = ecol * scale;
                if jcol == j && j == i {
                    va = va + RCOND - c.shift;
                }
                let k = match row.binary_search_by_key(&jcol, |e| e.0) {
                    Ok(k) => k,
                    Err(k) => {
                        row.insert(k, (jcol, 0.0));
                        k
                    }
                };
                row[k].1 += va;
            }
        }
        size *= ratio;
    }
    let mut out = Rows {
        rowstr: vec![0],
        colidx: Vec::new(),
        a: Vec::new(),
    };
    for row in built {
        for (col, val) in row {
            out.colidx.push(col);
            out.a.push(val);
        }
        out.rowstr.push(out.a.len());
    }
    out
}

/// The distributed solver state of one rank.
struct Cg<'a> {
    pg: &'a Pgas,
    rows: Rows,
    /// This rank's rows (global indices).
    mine: Range<usize>,
    /// Rows per rank (the spread array's block).
    per: usize,
    /// Where ranks publish their block of a vector for the others.
    shared: SpreadArray<f64>,
    /// Full-length vector gathered for the mat-vec.
    full: Vec<f64>,
    x: Vec<f64>,
    z: Vec<f64>,
    p: Vec<f64>,
    q: Vec<f64>,
    r: Vec<f64>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).fold(0.0, |s, (x, y)| s + x * y)
}

impl Cg<'_> {
    fn sum(&self, v: f64) -> splitrt::Result<f64> {
        let mut d = [v];
        self.pg.allreduce(&mut d, Op::Sum)?;
        Ok(d[0])
    }

    /// Gather the distributed vector whose local block is `block` into
    /// `self.full`: publish the block, barrier, bulk-get every other block.
    fn gather(&mut self, which: Which) -> splitrt::Result<()> {
        let block = match which {
            Which::P => &self.p,
            Which::Z => &self.z,
        };
        // SAFETY: nobody reads or writes this rank's part of `shared` now:
        // peers fetched the last publication before the allreduce that
        // preceded this call, and fetch this one after the barrier below.
        unsafe { self.shared.local().as_mut_slice() }.copy_from_slice(block);
        self.full[self.mine.clone()].copy_from_slice(block);
        self.pg.barrier()?;
        let me = self.pg.rank();
        let (shared, full) = (&self.shared, &mut self.full);
        self.pg.scope(|s| {
            for (r, dst) in full.chunks_mut(self.per).enumerate() {
                if r != me {
                    s.get(shared.ptr(r * self.per), dst)?;
                }
            }
            Ok(())
        })?;
        // Nobody republishes before everyone has fetched: the next publish
        // comes after at least one allreduce, which synchronizes all ranks.
        Ok(())
    }

    /// NPB `conj_grad`: 25 CG iterations on A z = x; returns ||x - A z||.
    fn conj_grad(&mut self) -> splitrt::Result<f64> {
        self.q.fill(0.0);
        self.z.fill(0.0);
        self.r.copy_from_slice(&self.x);
        self.p.copy_from_slice(&self.r);
        let mut rho = self.sum(dot(&self.r, &self.r))?;
        for _ in 0..CGITMAX {
            // q = A . p
            self.gather(Which::P)?;
            self.rows.matvec(&self.full, &mut self.q);
            // alpha = rho / (p . q)
            let d = self.sum(dot(&self.p, &self.q))?;
            let alpha = rho / d;
            let rho0 = rho;
            // z = z + alpha p;  r = r - alpha q
            for j in 0..self.z.len() {
                self.z[j] += alpha * self.p[j];
                self.r[j] -= alpha * self.q[j];
            }
            rho = self.sum(dot(&self.r, &self.r))?;
            let beta = rho / rho0;
            // p = r + beta p
            for (p, r) in self.p.iter_mut().zip(&self.r) {
                *p = r + beta * *p;
            }
        }
        // ||r|| = ||x - A z||
        self.gather(Which::Z)?;
        self.rows.matvec(&self.full, &mut self.r);
        let local = self
            .x
            .iter()
            .zip(&self.r)
            .fold(0.0, |s, (x, az)| s + (x - az) * (x - az));
        Ok(self.sum(local)?.sqrt())
    }

    /// One outer iteration: solve, then zeta = shift + 1/(x.z) and
    /// x = z / ||z||. Returns (rnorm, zeta).
    fn step(&mut self, shift: f64) -> splitrt::Result<(f64, f64)> {
        let rnorm = self.conj_grad()?;
        let mut t = [dot(&self.x, &self.z), dot(&self.z, &self.z)];
        self.pg.allreduce(&mut t, Op::Sum)?;
        let scale = 1.0 / t[1].sqrt();
        let zeta = shift + 1.0 / t[0];
        for (x, z) in self.x.iter_mut().zip(&self.z) {
            *x = scale * z;
        }
        Ok((rnorm, zeta))
    }
}

#[derive(Clone, Copy)]
enum Which {
    P,
    Z,
}

fn run() -> splitrt::Result<bool> {
    let letter = class_arg("npb_cg", &['S', 'W'])?;
    let c = CLASSES
        .iter()
        .find(|c| c.letter == letter)
        .expect("class_arg checked the letter");
    let pg = Pgas::attach()?;
    let (me, np) = (pg.rank(), pg.size());

    if me == 0 {
        println!();
        println!();
        println!(" NAS Parallel Benchmarks 3.4 (splitrt PGAS port) -- CG Benchmark");
        println!();
        println!(" Size: {:>11}", c.na);
        println!(" Iterations: {:>5}", c.niter);
        println!(" Number of active processes: {np:>5}");
        println!(" Number of nonzeroes per row: {:>8}", c.nonzer);
        println!(" Eigenvalue shift: {}", fmt_e(c.shift, 3));
        println!(" RMA path: {}", rma_name(&pg));
        println!();
    }

    let t_init = Instant::now();
    let shared = pg.spread::<f64>(c.na, Dist::Block)?;
    let per = shared.blocks().len();
    let nloc = shared.len_on(me);
    let first = shared.global_index(me, 0).min(c.na);
    let mine = first..first + nloc;
    let rows = makea(c, mine.clone());
    let mut cg = Cg {
        pg: &pg,
        rows,
        mine,
        per,
        shared,
        full: vec![0.0; c.na],
        x: vec![1.0; nloc],
        z: vec![0.0; nloc],
        p: vec![0.0; nloc],
        q: vec![0.0; nloc],
        r: vec![0.0; nloc],
    };

    // One untimed iteration (as NPB does), then reset x.
    cg.step(c.shift)?;
    cg.x.fill(1.0);
    pg.barrier()?;
    if me == 0 {
        println!(
            " Initialization time = {:>15.3} seconds",
            t_init.elapsed().as_secs_f64()
        );
    }

    let t0 = Instant::now();
    let mut zeta = 0.0;
    for it in 1..=c.niter {
        let (rnorm, z) = cg.step(c.shift)?;
        zeta = z;
        if me == 0 {
            if it == 1 {
                println!();
                println!("   iteration           ||r||                 zeta");
            }
            println!("    {it:>5}       {:>20}{zeta:>20.13}", fmt_e(rnorm, 14));
        }
    }
    let mut time = [t0.elapsed().as_secs_f64()];
    pg.allreduce(&mut time, Op::Max)?;

    // Every rank holds the same zeta (allreduce adds in rank order).
    let err = (zeta - c.zeta_ref).abs() / c.zeta_ref;
    let verified = err <= EPSILON;
    if me == 0 {
        println!(" Benchmark completed");
        if verified {
            println!(" VERIFICATION SUCCESSFUL");
            println!(" Zeta is    {:>20}", fmt_e(zeta, 13));
            println!(" Error is   {:>20}", fmt_e(err, 13));
        } else {
            println!(" VERIFICATION FAILED");
            println!(" Zeta                {:>20}", fmt_e(zeta, 13));
            println!(" The correct zeta is {:>20}", fmt_e(c.zeta_ref, 13));
        }
        let nnz = (c.nonzer * (c.nonzer + 1)) as f64;
        let flops = (2 * c.niter * c.na) as f64 * (3.0 + nnz + 25.0 * (5.0 + nnz) + 3.0);
        print_results(&Results {
            name: "CG",
            class: letter,
            size: c.na as u64,
            iterations: c.niter,
            seconds: time[0],
            procs: np,
            mops: flops / time[0] / 1e6,
            optype: "floating point",
            verified,
            rma: rma_name(&pg),
        });
    }
    pg.finish()?;
    Ok(verified)
}
