//! Shared by the AM test programs (`t_conformance`, `t_stress`): a seeded
//! mixing function to derive expected data from, and the collector of
//! failed checks that handlers fill and `main` reports.

use std::sync::Mutex;

/// splitmix64's finalizer: a well-spread 64-bit value from any input.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Failed checks (the first 20 are kept).
#[derive(Default)]
pub struct Failures(Mutex<Vec<String>>);

impl Failures {
    /// Record a failed check.
    pub fn fail(&self, e: String) {
        let mut v = self.0.lock().unwrap();
        if v.len() < 20 {
            v.push(e);
        }
    }

    /// Print every recorded failure and turn them into an error.
    pub fn report(&self, rank: usize, what: &str) -> splitrt::Result<()> {
        let v = self.0.lock().unwrap();
        if v.is_empty() {
            return Ok(());
        }
        for e in v.iter() {
            eprintln!("rank {rank}: {e}");
        }
        Err(splitrt::Error::usage(format!(
            "{} {what} check(s) failed",
            v.len()
        )))
    }
}
