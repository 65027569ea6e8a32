//! Shared by the NPB ports (`npb_is`, `npb_cg`): the official NPB random
//! number generator (`randlc` / `vranlc` from NPB's `randdp.c`, plus a
//! jump-ahead), the class argument, C-style `%E` formatting and the
//! standard result block of NPB's `c_print_results`.
//!
//! This directory has no `main.rs`, so cargo does not build it as an
//! example; each benchmark includes it with
//! `#[path = "npb_common/mod.rs"] mod npb_common;`.
#![allow(dead_code)] // each benchmark uses a different subset

use splitrt::pgas::{Pgas, RmaPath};

/// NPB's multiplier for every benchmark's generator.
pub const AMULT: f64 = 1_220_703_125.0;
/// NPB's seed (IS's key sequence; CG's `tran`).
pub const SEED: f64 = 314_159_265.0;

const R23: f64 = 1.0 / 8_388_608.0; // 2^-23
const T23: f64 = 8_388_608.0; // 2^23
const R46: f64 = R23 * R23; // 2^-46
const T46: f64 = T23 * T23; // 2^46

/// NPB `randlc`: `x = a * x mod 2^46`, returns `x * 2^-46` in (0, 1).
///
/// The official double-precision algorithm (David H. Bailey): split `a`
/// and `x` into 23-bit halves so every product is exact in a 53-bit
/// mantissa. `x` and `a` are odd integers in (1, 2^46).
pub fn randlc(x: &mut f64, a: f64) -> f64 {
    // a = 2^23 * a1 + a2
    let a1 = (R23 * a).trunc();
    let a2 = a - T23 * a1;
    // x = 2^23 * x1 + x2; z = a1 * x2 + a2 * x1 (mod 2^23);
    // x = 2^23 * z + a2 * x2 (mod 2^46)
    let x1 = (R23 * *x).trunc();
    let x2 = *x - T23 * x1;
    let t1 = a1 * x2 + a2 * x1;
    let t2 = (R23 * t1).trunc();
    let z = t1 - T23 * t2;
    let t3 = T23 * z + a2 * x2;
    let t4 = (R46 * t3).trunc();
    *x = t3 - T46 * t4;
    R46 * *x
}

/// NPB `vranlc`: the next `y.len()` numbers of the sequence into `y`
/// (the same numbers `y.len()` calls of [`randlc`] return).
pub fn vranlc(x: &mut f64, a: f64, y: &mut [f64]) {
    for v in y {
        *v = randlc(x, a);
    }
}

/// The seed after `n` steps of the generator from `seed`: what `n` calls
/// of `randlc(&mut seed, a)` would leave in `seed`, in O(log n) steps
/// (binary powering of `a`, as NPB's `find_my_seed` does).
pub fn skip_ahead(seed: f64, a: f64, mut n: u64) -> f64 {
    let (mut x, mut m) = (seed, a);
    while n > 0 {
        if n & 1 == 1 {
            randlc(&mut x, m);
        }
        let mm = m;
        randlc(&mut m, mm); // m = m^2 mod 2^46
        n >>= 1;
    }
    x
}

/// The class letter: the first argument (default `S`), which must be one
/// of `allowed`.
pub fn class_arg(bench: &str, allowed: &[char]) -> splitrt::Result<char> {
    let arg = std::env::args().nth(1);
    let c = match arg.as_deref() {
        None => 'S',
        Some(s) if s.len() == 1 => s.chars().next().unwrap_or('S').to_ascii_uppercase(),
        Some(s) => {
            return Err(splitrt::Error::usage(format!(
                "{bench}: expected a class letter ({allowed:?}), got {s:?}"
            )))
        }
    };
    if !allowed.contains(&c) {
        return Err(splitrt::Error::usage(format!(
            "{bench}: class {c} is not supported (choose one of {allowed:?})"
        )));
    }
    Ok(c)
}

/// C's `%.{prec}E`: mantissa, `E`, sign, at least two exponent digits.
pub fn fmt_e(x: f64, prec: usize) -> String {
    let s = format!("{x:.prec$E}");
    match s.split_once('E') {
        Some((mant, exp)) => {
            let e: i32 = exp.parse().unwrap_or(0);
            let sign = if e < 0 { '-' } else { '+' };
            format!("{mant}E{sign}{:02}", e.abs())
        }
        None => s, // inf / NaN
    }
}

/// The name of the job's one-sided path.
pub fn rma_name(pg: &Pgas) -> &'static str {
    match pg.rma_path() {
        RmaPath::Native => "native",
        RmaPath::Am => "am",
    }
}

/// What a result block reports.
pub struct Results<'a> {
    pub name: &'a str,
    pub class: char,
    pub size: u64,
    pub iterations: usize,
    pub seconds: f64,
    pub procs: usize,
    pub mops: f64,
    pub optype: &'a str,
    pub verified: bool,
    pub rma: &'a str,
}

/// The standard NPB result block (layout of NPB's `c_print_results`).
pub fn print_results(r: &Results<'_>) {
    println!();
    println!();
    println!(" {} Benchmark Completed", r.name);
    println!(" Class           =                        {}", r.class);
    println!(" Size            =             {:>12}", r.size);
    println!(" Iterations      =             {:>12}", r.iterations);
    println!(" Time in seconds =             {:>12.2}", r.seconds);
    println!(" Total processes =             {:>12}", r.procs);
    println!(" Mop/s total     =             {:>12.2}", r.mops);
    println!(
        " Mop/s/process   =             {:>12.2}",
        r.mops / r.procs as f64
    );
    println!(" Operation type  = {:>24}", r.optype);
    if r.verified {
        println!(" Verification    =               SUCCESSFUL");
    } else {
        println!(" Verification    =             UNSUCCESSFUL");
    }
    println!(" Version         =             {:>12}", "3.4");
    println!(" Runtime         =     {:>20}", "splitrt PGAS");
    println!(" RMA path        =             {:>12}", r.rma);
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// randlc is exact integer arithmetic mod 2^46.
    #[test]
    fn randlc_matches_integer_lcg() {
        let (mut x, mut xi) = (SEED, SEED as u64);
        for _ in 0..1000 {
            let r = randlc(&mut x, AMULT);
            xi = ((xi as u128 * AMULT as u128) % (1u128 << 46)) as u64;
            assert_eq!(x, xi as f64);
            assert_eq!(r, xi as f64 / (1u64 << 46) as f64);
        }
        let mut y = SEED;
        for _ in 0..12345 {
            randlc(&mut y, AMULT);
        }
        assert_eq!(skip_ahead(SEED, AMULT, 12345), y);
    }
}
