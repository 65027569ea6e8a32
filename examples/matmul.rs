//! matmul: blocked dense matrix multiply C = A x B over a 2-D process grid,
//! with remote blocks fetched by bulk split-phase gets.
//!
//! The N x N matrices are cut into BS x BS blocks (the last block row and
//! column are padded with zeros when BS does not divide N). The ranks form
//! a `pr x pc` grid (`pr` the largest divisor of the rank count not above
//! its square root, so any rank count works; 4 ranks make a 2 x 2 grid, 8 a
//! 2 x 4 one) and block (i, j) of A, B and C lives on grid rank
//! (i mod pr, j mod pc): a 2-D block-cyclic layout, each block contiguous in
//! its owner's symmetric array.
//!
//! The product is SUMMA with gets instead of broadcasts: for every k the
//! rank needs the panel A(i, k) for each of its block rows i (from ranks in
//! its grid row) and B(k, j) for each of its block columns j (from its grid
//! column). Each panel is fetched with one `s.get` per whole block, all in
//! flight at once inside one `pg.scope`, and the gets for panel k + 1 are
//! issued in the same scope *before* the rank multiplies panel k, so the
//! transfer overlaps the arithmetic (double buffering).
//!
//! Check: A and B come from a deterministic generator of small integers, so
//! every product is exact in f64. Each rank recomputes its own C blocks
//! sequentially from the generator and demands exact equality (padding
//! included), and rank 0 compares the allreduced sum of C with
//! sum_k colsum(A)_k * rowsum(B)_k. Any failure makes every rank exit
//! non-zero.
//!
//! ```text
//! cargo build --examples --bins
//! target/debug/splitrt-run -n 4 target/debug/examples/matmul
//! target/debug/splitrt-run -n 6 --rma am target/debug/examples/matmul 200 24
//! ```
//!
//! Arguments (optional): matrix size N (default 256) and block size BS
//! (default 32).

use splitrt::pgas::{Op, Pgas, Scope, SymArray};
use splitrt::{Error, Result};
use std::time::Instant;

const SEED: u64 = 0x003a_73a7_0000_0001;

/// splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Element (i, j) of matrix `m` (0 = A, 1 = B): an integer in -9..=9, and
/// 0 in the padding beyond `n`.
fn elem(m: u64, n: usize, i: usize, j: usize) -> f64 {
    if i >= n || j >= n {
        return 0.0;
    }
    let h = mix(SEED ^ (m << 62) ^ ((i as u64) << 31) ^ j as u64);
    (h % 19) as f64 - 9.0
}

/// c += a * b for row-major bs x bs blocks.
fn gemm_acc(c: &mut [f64], a: &[f64], b: &[f64], bs: usize) {
    for (crow, arow) in c.chunks_exact_mut(bs).zip(a.chunks_exact(bs)) {
        for (&aik, brow) in arow.iter().zip(b.chunks_exact(bs)) {
            if aik != 0.0 {
                for (cv, &bv) in crow.iter_mut().zip(brow) {
                    *cv += aik * bv;
                }
            }
        }
    }
}

/// The block-cyclic layout over a pr x pc grid.
struct Layout {
    bs: usize,
    pr: usize,
    pc: usize,
    /// Blocks per rank in one block column / one block row (capacity).
    lr: usize,
    lc: usize,
}

impl Layout {
    fn owner(&self, bi: usize, bj: usize) -> usize {
        (bi % self.pr) * self.pc + bj % self.pc
    }
    /// Element offset of block (bi, bj) in its owner's array.
    fn offset(&self, bi: usize, bj: usize) -> usize {
        ((bi / self.pr) * self.lc + bj / self.pc) * self.bs * self.bs
    }
}

/// What a rank needs to fetch panels.
struct Operands<'a> {
    l: &'a Layout,
    a: &'a SymArray<f64>,
    b: &'a SymArray<f64>,
    rows: &'a [usize],
    cols: &'a [usize],
}

/// Start fetching panel k: A(i, k) for my block rows i into `ap`, B(k, j)
/// for my block columns j into `bp`, one whole-block get each, all in
/// flight together. Returns the number of gets.
fn fetch_panel<'env>(
    s: &Scope<'env>,
    o: &Operands<'_>,
    k: usize,
    ap: &'env mut [f64],
    bp: &'env mut [f64],
) -> Result<u64> {
    let (l, bb) = (o.l, o.l.bs * o.l.bs);
    for (&bi, dst) in o.rows.iter().zip(ap.chunks_mut(bb)) {
        s.get(o.a.at(l.owner(bi, k), l.offset(bi, k)), dst)?;
    }
    for (&bj, dst) in o.cols.iter().zip(bp.chunks_mut(bb)) {
        s.get(o.b.at(l.owner(k, bj), l.offset(k, bj)), dst)?;
    }
    Ok((o.rows.len() + o.cols.len()) as u64)
}

fn arg(v: Option<String>, name: &str, default: usize) -> Result<usize> {
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
            eprintln!("matmul: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<bool> {
    let mut args = std::env::args().skip(1);
    let n = arg(args.next(), "matrix size", 256)?;
    let bs = arg(args.next(), "block size", 32)?;
    if let Some(a) = args.next() {
        return Err(Error::usage(format!(
            "unexpected argument {a:?}; usage: matmul [N] [BLOCK_SIZE]"
        )));
    }
    if n == 0 || bs == 0 {
        return Err(Error::usage("N and BLOCK_SIZE must be positive"));
    }

    let pg = Pgas::attach()?;
    let (me, ranks) = (pg.rank(), pg.size());
    let pr = (1..=ranks)
        .filter(|d| ranks % d == 0 && d * d <= ranks)
        .max()
        .unwrap_or(1);
    let pc = ranks / pr;
    let nb = n.div_ceil(bs);
    let l = Layout {
        bs,
        pr,
        pc,
        lr: nb.div_ceil(pr),
        lc: nb.div_ceil(pc),
    };
    let (myrow, mycol) = (me / pc, me % pc);
    let rows: Vec<usize> = (myrow..nb).step_by(pr).collect();
    let cols: Vec<usize> = (mycol..nb).step_by(pc).collect();
    let bb = bs * bs;

    // Distributed A, B, C: my blocks, filled from the generator.
    let cap = l.lr * l.lc * bb;
    let a = pg.alloc_sym::<f64>(cap)?;
    let b = pg.alloc_sym::<f64>(cap)?;
    let c = pg.alloc_sym::<f64>(cap)?;
    for &bi in &rows {
        for &bj in &cols {
            let o = l.offset(bi, bj);
            for i in 0..bs {
                for j in 0..bs {
                    let (gi, gj) = (bi * bs + i, bj * bs + j);
                    a.local().set(o + i * bs + j, elem(0, n, gi, gj));
                    b.local().set(o + i * bs + j, elem(1, n, gi, gj));
                }
            }
        }
    }
    pg.barrier()?;

    // SUMMA with gets, double-buffered panels.
    let t0 = Instant::now();
    let mut a_pan = [vec![0.0; rows.len() * bb], vec![0.0; rows.len() * bb]];
    let mut b_pan = [vec![0.0; cols.len() * bb], vec![0.0; cols.len() * bb]];
    let ops = Operands {
        l: &l,
        a: &a,
        b: &b,
        rows: &rows,
        cols: &cols,
    };
    let mut gets = {
        let (ap, bp) = (&mut a_pan[0], &mut b_pan[0]);
        pg.scope(|s| fetch_panel(s, &ops, 0, ap, bp))?
    };
    for k in 0..nb {
        let [a0, a1] = &mut a_pan;
        let [b0, b1] = &mut b_pan;
        let (a_cur, a_next, b_cur, b_next) = if k % 2 == 0 {
            (&*a0, a1, &*b0, b1)
        } else {
            (&*a1, a0, &*b1, b0)
        };
        // SAFETY: C is this rank's alone until the barrier after the loop:
        // peers fetch panels of A and B only, and this slice is the only
        // access to C meanwhile.
        let cl = unsafe { c.local().as_mut_slice() };
        gets += pg.scope(|s| {
            // start fetching panel k + 1 ...
            let issued = if k + 1 < nb {
                fetch_panel(s, &ops, k + 1, a_next, b_next)?
            } else {
                0
            };
            // ... and meanwhile C(i, j) += A(i, k) B(k, j) for my blocks
            for (&bi, ablk) in rows.iter().zip(a_cur.chunks(bb)) {
                for (&bj, bblk) in cols.iter().zip(b_cur.chunks(bb)) {
                    let o = l.offset(bi, bj);
                    gemm_acc(&mut cl[o..o + bb], ablk, bblk, bs);
                }
            }
            Ok(issued)
        })?;
    }
    pg.barrier()?;
    let secs = t0.elapsed().as_secs_f64();

    // Check my blocks against a sequential product from the generator.
    let npad = nb * bs;
    let mut bad = None;
    let mut checked = 0u64;
    let mut csum = 0.0;
    let cl = c.local().to_vec();
    for &bi in &rows {
        // rows of A for this block row, columns of B for each block column
        let arows: Vec<Vec<f64>> = (0..bs)
            .map(|i| (0..npad).map(|k| elem(0, n, bi * bs + i, k)).collect())
            .collect();
        for &bj in &cols {
            let bcols: Vec<Vec<f64>> = (0..bs)
                .map(|j| (0..npad).map(|k| elem(1, n, k, bj * bs + j)).collect())
                .collect();
            let o = l.offset(bi, bj);
            for (i, ar) in arows.iter().enumerate() {
                for (j, bc) in bcols.iter().enumerate() {
                    let want: f64 = ar.iter().zip(bc).map(|(x, y)| x * y).sum();
                    let got = cl[o + i * bs + j];
                    csum += got;
                    checked += 1;
                    if got != want && bad.is_none() {
                        bad = Some(format!(
                            "C[{}][{}] = {got}, sequential product gives {want}",
                            bi * bs + i,
                            bj * bs + j
                        ));
                    }
                }
            }
        }
    }
    if let Some(b) = &bad {
        eprintln!("matmul: rank {me}: MISMATCH: {b}");
    }
    let mut sums = [csum];
    pg.allreduce(&mut sums, Op::Sum)?;
    let mut counts = [bad.is_some() as u64, checked, gets];
    pg.allreduce(&mut counts, Op::Sum)?;
    let mut ok = counts[0] == 0;
    if me == 0 {
        // sum of C = sum_k (sum_i A[i][k]) * (sum_j B[k][j])
        let expect: f64 = (0..n)
            .map(|k| {
                let ca: f64 = (0..n).map(|i| elem(0, n, i, k)).sum();
                let rb: f64 = (0..n).map(|j| elem(1, n, k, j)).sum();
                ca * rb
            })
            .sum();
        if sums[0] != expect {
            eprintln!("matmul: sum of C is {}, expected {expect}", sums[0]);
            ok = false;
        }
        if counts[1] != (npad * npad) as u64 {
            eprintln!(
                "matmul: checked {} elements, expected {}",
                counts[1],
                npad * npad
            );
            ok = false;
        }
    }
    let mut verdict = [ok as u64];
    pg.broadcast(0, &mut verdict)?;
    let ok = verdict[0] == 1;
    if me == 0 {
        println!(
            "matmul: N={n}, {bs}x{bs} blocks ({nb}x{nb}), {pr}x{pc} rank grid, {:?} path",
            pg.rma_path()
        );
        println!(
            "matmul: {:.1} ms, {:.1} MFLOP/s, {} block gets ({} KiB each)",
            secs * 1e3,
            2.0 * (n as f64).powi(3) / secs / 1e6,
            counts[2],
            bb * 8 / 1024
        );
        if ok {
            println!(
                "matmul OK: C matches the sequential product exactly (sum of C = {})",
                sums[0]
            );
        } else {
            println!("matmul FAILED");
        }
    }
    pg.finish()?;
    Ok(ok)
}
