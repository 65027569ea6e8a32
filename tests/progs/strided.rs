//! Strided and indexed transfers against a model, on whichever fabric and
//! path the job uses (`SPLITRT_FABRIC`, `SPLITRT_RMA=native|am`).
//!
//! Every rank writes into a region of its right neighbour's array that
//! only it writes (cleared first), checks what landed with a plain
//! contiguous read against a model computed by nested loops here (not by
//! the library's walker), and reads the shape back with the strided /
//! indexed get. Cases: 1-, 2-, 3-D shapes, no dimensions, zero-length
//! dimensions and runs (no-ops), a source stride of 0 (overlapping source
//! runs), shapes larger than one message and runs larger than one
//! message, indexed lists (unsorted, uneven, with empty runs), the same in
//! a `Scope`, and the faces of a 3-D array. Misuse: out of range (nothing
//! written), inconsistent strides, too many dimensions, overlapping
//! destinations, a short local slice, an unknown rank, the reserved area,
//! a frozen array.
//!
//! Usage: t_strided    (exit 0 = every check passed; prints
//! "strided ok (PATH path)")

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::pgas::{GlobalPtr, Pgas, Shape};
use splitrt::{Error, ErrorKind};

/// Elements of each rank's array.
const M: usize = 100_000;

fn main() {
    if let Err(e) = Pgas::attach().and_then(run_on) {
        eprintln!("t_strided: {e}");
        std::process::exit(1);
    }
}

fn fail(msg: String) -> Error {
    Error::usage(msg)
}

/// Every run's element offsets (from the base) of a shape with `strides`,
/// by plain nested loops over the index space.
fn offsets(shape: &Shape, strides: &[usize]) -> Vec<usize> {
    let counts = shape.counts();
    let mut out = Vec::new();
    if counts.contains(&0) {
        return out;
    }
    let total: usize = counts.iter().product();
    for lin in 0..total {
        let (mut rest, mut off) = (lin, 0);
        for (d, &c) in counts.iter().enumerate() {
            off += (rest % c) * strides[d];
            rest /= c;
        }
        out.push(off);
    }
    out
}

/// The strided copy `dst[dst_off + ..] := src` by the model.
fn model_strided(
    dst: &mut [u64],
    dst_off: usize,
    ds: &[usize],
    src: &[u64],
    ss: &[usize],
    shape: &Shape,
) {
    let run = shape.run();
    for (d, s) in offsets(shape, ds).into_iter().zip(offsets(shape, ss)) {
        for k in 0..run {
            dst[dst_off + d + k] = src[s + k];
        }
    }
}

/// Flatten runs (offset, len) to element indices.
fn flat(runs: &[(usize, usize)]) -> Vec<usize> {
    runs.iter().flat_map(|&(o, n)| o..o + n).collect()
}

fn pattern(me: usize, case: usize, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| ((me as u64 + 1) << 48) | ((case as u64) << 32) | (i as u64 + 1))
        .collect()
}

struct Ctx<'a> {
    pg: &'a Pgas,
    arr: GlobalPtr<u64>,
    me: usize,
    t: usize,
    path: String,
    checked: usize,
}

impl Ctx<'_> {
    /// The target region [at, at + len) of the right neighbour, cleared.
    fn clear(&self, at: usize, len: usize) -> splitrt::Result<()> {
        self.pg
            .write_slice(self.arr.on(self.t).add(at), &vec![0u64; len])
    }

    fn read(&self, at: usize, len: usize) -> splitrt::Result<Vec<u64>> {
        let mut v = vec![0u64; len];
        self.pg.read_slice(self.arr.on(self.t).add(at), &mut v)?;
        Ok(v)
    }

    fn expect(&mut self, what: &str, got: &[u64], want: &[u64]) -> splitrt::Result<()> {
        if got != want {
            let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
            return Err(fail(format!(
                "rank {} ({}): {what}: element {i} is {:#x}, want {:#x} (of {})",
                self.me,
                self.path,
                got.get(i).copied().unwrap_or(0),
                want.get(i).copied().unwrap_or(0),
                want.len()
            )));
        }
        self.checked += 1;
        Ok(())
    }

    /// Put `shape` (dst strides `ds`, src strides `ss`) into the region at
    /// `at` (of `len` elements), check the region, get it back with
    /// strides `gs` and check that; both blocking and in a scope.
    #[allow(clippy::too_many_arguments)]
    fn strided_case(
        &mut self,
        case: usize,
        at: usize,
        len: usize,
        shape: &Shape,
        ds: &[usize],
        ss: &[usize],
        gs: &[usize],
    ) -> splitrt::Result<()> {
        let src_len = offsets(shape, ss)
            .iter()
            .max()
            .map_or(0, |m| m + shape.run());
        let src = pattern(self.me, case, src_len);
        let dst = self.arr.on(self.t).add(at);
        for scoped in [false, true] {
            self.clear(at, len)?;
            if scoped {
                self.pg.scope(|s| s.put_strided(dst, ds, &src, ss, shape))?;
            } else {
                self.pg.put_strided(dst, ds, &src, ss, shape)?;
                self.pg.sync()?;
            }
            let mut want = vec![0u64; len];
            model_strided(&mut want, 0, ds, &src, ss, shape);
            let got = self.read(at, len)?;
            self.expect(&format!("case {case} put (scoped {scoped})"), &got, &want)?;
            // back with other local strides
            let back_len = offsets(shape, gs)
                .iter()
                .max()
                .map_or(0, |m| m + shape.run());
            let mut back = vec![u64::MAX; back_len];
            let mut back_want = back.clone();
            model_strided(&mut back_want, 0, gs, &want, ds, shape);
            if scoped {
                self.pg
                    .scope(|s| s.get_strided(dst, ds, &mut back, gs, shape))?;
            } else {
                self.pg.get_strided(dst, ds, &mut back, gs, shape)?;
            }
            self.expect(
                &format!("case {case} get (scoped {scoped})"),
                &back,
                &back_want,
            )?;
        }
        Ok(())
    }

    /// The indexed mirror of `strided_case`.
    fn indexed_case(
        &mut self,
        case: usize,
        at: usize,
        len: usize,
        dr: &[(usize, usize)],
        sr: &[(usize, usize)],
    ) -> splitrt::Result<()> {
        let src_len = sr.iter().map(|&(o, n)| o + n).max().unwrap_or(0);
        let src = pattern(self.me, case, src_len);
        let dst = self.arr.on(self.t).add(at);
        let mut want = vec![0u64; len];
        for (d, s) in flat(dr).into_iter().zip(flat(sr)) {
            want[d] = src[s];
        }
        for scoped in [false, true] {
            self.clear(at, len)?;
            if scoped {
                self.pg.scope(|s| s.put_indexed(dst, dr, &src, sr))?;
            } else {
                self.pg.put_indexed(dst, dr, &src, sr)?;
                self.pg.sync()?;
            }
            let got = self.read(at, len)?;
            self.expect(
                &format!("case {case} indexed put (scoped {scoped})"),
                &got,
                &want,
            )?;
            // back, packed (the source runs may overlap)
            let total = flat(dr).len();
            let mut back = vec![0u64; total];
            let packed = [(0, total)];
            if scoped {
                self.pg
                    .scope(|s| s.get_indexed(dst, dr, &mut back, &packed))?;
            } else {
                self.pg.get_indexed(dst, dr, &mut back, &packed)?;
            }
            let back_want: Vec<u64> = flat(dr).into_iter().map(|d| want[d]).collect();
            self.expect(
                &format!("case {case} indexed get (scoped {scoped})"),
                &back,
                &back_want,
            )?;
        }
        Ok(())
    }

    /// `r` must be an error of `kind` (a usage error if `None`) naming
    /// the target rank, and the region at `at` must be unchanged.
    fn refused(
        &mut self,
        what: &str,
        r: splitrt::Result<()>,
        out_of_bounds: bool,
        at: usize,
        before: &[u64],
    ) -> splitrt::Result<()> {
        match r {
            Ok(()) => return Err(fail(format!("rank {}: {what} was accepted", self.me))),
            Err(e) => {
                let kind_ok = if out_of_bounds {
                    matches!(e.kind(), ErrorKind::OutOfBounds { .. })
                } else {
                    matches!(e.kind(), ErrorKind::Usage(_))
                };
                if !kind_ok || e.rank() != Some(self.me) {
                    return Err(fail(format!(
                        "rank {}: {what}: unexpected error {e}",
                        self.me
                    )));
                }
                if self.me == 0 && self.checked < 1000 {
                    println!("refused as it should: {what}: {e}");
                }
            }
        }
        self.pg.sync()?;
        let now = self.read(at, before.len())?;
        self.expect(&format!("{what} wrote nothing"), &now, before)
    }
}

pub fn run_on(pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let arr = pg.alloc_sym::<u64>(M)?;
    let mut c = Ctx {
        pg: &pg,
        arr: arr.ptr(0),
        me,
        t: (me + 1) % n,
        path: format!("{:?} path", pg.rma_path()),
        checked: 0,
    };
    let sh = |run, counts: &[usize]| Shape::new(run, counts);

    // 1-D, 2-D, 3-D, no dimension
    c.strided_case(1, 0, 400, &sh(3, &[50])?, &[7], &[3], &[4])?;
    c.strided_case(2, 0, 400, &sh(2, &[5, 4])?, &[3, 20], &[2, 10], &[2, 12])?;
    c.strided_case(
        3,
        0,
        600,
        &sh(4, &[3, 5, 2])?,
        &[5, 30, 200],
        &[4, 12, 60],
        &[5, 15, 80],
    )?;
    c.strided_case(4, 0, 20, &sh(10, &[])?, &[], &[], &[])?;
    // a source stride of 0: one source run written to every destination run
    c.strided_case(5, 0, 100, &sh(4, &[10])?, &[8], &[0], &[4])?;
    // zero-length dimensions and runs: no-ops (the region stays clear)
    c.strided_case(
        6,
        0,
        100,
        &sh(5, &[5, 0, 3])?,
        &[6, 30, 90],
        &[5, 25, 0],
        &[5, 25, 0],
    )?;
    c.strided_case(7, 0, 100, &sh(0, &[5, 3])?, &[6, 30], &[5, 25], &[5, 25])?;
    // larger than one message (64 B runs, 1000 of them: 128 kB apart)
    c.strided_case(8, 0, 32_000, &sh(8, &[2000])?, &[16], &[8], &[9])?;
    // runs larger than one message
    c.strided_case(
        9,
        0,
        30_000,
        &sh(10_000, &[2])?,
        &[12_000],
        &[10_000],
        &[10_001],
    )?;
    // 3-D, larger than one message, odd run
    c.strided_case(
        10,
        0,
        60_000,
        &sh(3, &[20, 30, 20])?,
        &[4, 100, 3000],
        &[3, 60, 1800],
        &[3, 60, 1800],
    )?;

    // indexed: unsorted, uneven on either side, empty runs
    c.indexed_case(
        20,
        0,
        200,
        &[(50, 3), (0, 5), (5, 0), (100, 2)],
        &[(0, 4), (10, 6)],
    )?;
    // many runs, larger than one message
    let dr: Vec<(usize, usize)> = (0..300).map(|i| (i * 150, 100)).collect();
    let sr: Vec<(usize, usize)> = vec![(0, 30_000)];
    c.indexed_case(21, 0, 45_000, &dr, &sr)?;
    // one huge run (split over messages) and tiny ones
    c.indexed_case(
        22,
        0,
        40_000,
        &[(0, 20_000), (30_000, 1), (30_002, 1)],
        &[(5, 20_002)],
    )?;
    // overlapping source runs are fine
    c.indexed_case(23, 0, 100, &[(0, 4), (10, 4)], &[(0, 4), (2, 4)])?;

    // faces of a 3-D array, every axis, into the opposite face
    let dims = [6, 5, 4];
    let vol: usize = dims.iter().product();
    let src = pattern(me, 30, vol);
    for axis in 0..3 {
        let (si, di) = (1, dims[axis] - 1);
        c.clear(0, vol)?;
        pg.put_face_3d(c.arr.on(c.t), &src, dims, axis, si, di)?;
        pg.sync()?;
        let mut want = vec![0u64; vol];
        for i in 0..dims[0] {
            for j in 0..dims[1] {
                for k in 0..dims[2] {
                    let idx = [i, j, k];
                    if idx[axis] == di {
                        let mut s = idx;
                        s[axis] = si;
                        want[(i * dims[1] + j) * dims[2] + k] =
                            src[(s[0] * dims[1] + s[1]) * dims[2] + s[2]];
                    }
                }
            }
        }
        let got = c.read(0, vol)?;
        c.expect(&format!("face axis {axis}"), &got, &want)?;
        let mut back = vec![0u64; vol];
        pg.get_face_3d(c.arr.on(c.t), &mut back, dims, axis, di, si)?;
        let mut back_want = vec![0u64; vol];
        // the face came back to index si: where the source had it
        for i in 0..dims[0] {
            for j in 0..dims[1] {
                for k in 0..dims[2] {
                    let idx = [i, j, k];
                    if idx[axis] == si {
                        let f = (i * dims[1] + j) * dims[2] + k;
                        back_want[f] = src[f];
                    }
                }
            }
        }
        c.expect(&format!("face axis {axis} back"), &back, &back_want)?;
        // and in a scope
        c.clear(0, vol)?;
        pg.scope(|s| s.put_face_3d(c.arr.on(c.t), &src, dims, axis, si, di))?;
        let got = c.read(0, vol)?;
        c.expect(&format!("face axis {axis} scoped"), &got, &want)?;
    }

    // misuse: every one refused at the caller, nothing written
    let region = 64;
    c.clear(0, region)?;
    let before = c.read(0, region)?;
    let dst = c.arr.on(c.t);
    let src = pattern(me, 40, 4096);
    let seg = pg.endpoint().max_long(c.t)?;
    // a shape whose first runs are in the region and last past the segment
    let huge_stride = seg / 8 / 4;
    let r = pg.put_strided(dst, &[huge_stride], &src, &[1], &sh(1, &[8])?);
    c.refused("a strided put past the segment", r, true, 0, &before)?;
    let r = pg.put_indexed(dst, &[(0, 4), (seg / 8, 4)], &src, &[(0, 8)]);
    c.refused("an indexed put past the segment", r, true, 0, &before)?;
    let mut sink = vec![0u64; 64];
    let r = pg.get_strided(dst, &[huge_stride], &mut sink, &[1], &sh(1, &[8])?);
    c.refused("a strided get past the segment", r, true, 0, &before)?;
    let r = pg.put_strided(dst, &[2, 8], &src, &[1], &sh(1, &[4, 2])?);
    c.refused("inconsistent strides", r, false, 0, &before)?;
    match Shape::new(1, &[1; 9]) {
        Err(e) if matches!(e.kind(), ErrorKind::Usage(_)) => c.checked += 1,
        other => return Err(fail(format!("rank {me}: a 9-D shape: {other:?}"))),
    }
    let r = pg.put_strided(dst, &[2], &src, &[4], &sh(4, &[4])?);
    c.refused("overlapping destination runs", r, false, 0, &before)?;
    let r = pg.put_strided(dst, &[0], &src, &[4], &sh(4, &[4])?);
    c.refused("a destination stride of 0", r, false, 0, &before)?;
    let r = pg.put_indexed(dst, &[(0, 4), (2, 4)], &src, &[(0, 8)]);
    c.refused("overlapping indexed destination runs", r, false, 0, &before)?;
    let r = pg.put_indexed(dst, &[(0, 4)], &src, &[(0, 5)]);
    c.refused("indexed lists of different lengths", r, false, 0, &before)?;
    let r = pg.put_strided(dst, &[8], &src[..10], &[8], &sh(4, &[4])?);
    c.refused("a source slice too short", r, false, 0, &before)?;
    let r = pg.get_strided(dst, &[8], &mut sink[..10], &[2], &sh(4, &[4])?);
    c.refused("an overlapping local destination", r, false, 0, &before)?;
    let r = pg.put_strided(
        GlobalPtr::new(n, dst.offset()),
        &[8],
        &src,
        &[8],
        &sh(4, &[4])?,
    );
    c.refused("an unknown rank", r, false, 0, &before)?;
    let r = pg.put_strided(
        GlobalPtr::<u64>::new(c.t, 64),
        &[8],
        &src,
        &[8],
        &sh(4, &[4])?,
    );
    c.refused("the reserved area", r, false, 0, &before)?;
    let r = pg.put_face_3d(dst, &src, [4, 4, 4], 3, 0, 0);
    c.refused("a face of axis 3", r, false, 0, &before)?;

    // a frozen array: strided and indexed puts into it are refused at the
    // caller, nothing written
    let fro = pg.freeze(pg.alloc_sym::<u64>(256)?)?;
    let fdst = fro.ptr(c.t);
    let mut fbefore = vec![0u64; 256];
    pg.read_slice(fdst, &mut fbefore)?;
    let tries = [
        (
            "a strided put into a frozen array",
            pg.put_strided(fdst, &[8], &src, &[4], &sh(4, &[8])?),
        ),
        (
            "an indexed put into a frozen array",
            pg.put_indexed(fdst, &[(250, 4)], &src, &[(0, 4)]),
        ),
    ];
    for (what, r) in tries {
        match r {
            Err(e) if matches!(e.kind(), ErrorKind::Usage(_)) && e.rank() == Some(me) => {
                if me == 0 {
                    println!("refused as it should: {what}: {e}");
                }
            }
            other => return Err(fail(format!("rank {me}: {what}: {other:?}"))),
        }
        pg.sync()?;
        let mut now = vec![0u64; 256];
        pg.read_slice(fdst, &mut now)?;
        c.expect(&format!("{what} wrote nothing"), &now, &fbefore)?;
    }
    let _ = pg.thaw(fro)?;

    pg.barrier()?;
    println!(
        "strided ok ({}): {} checks, rank {me} of {n}",
        c.path, c.checked
    );
    pg.finish()
}
