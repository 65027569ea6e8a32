//! Percentiles within one repetition and summaries across repetitions.
//!
//! Within a repetition, latency percentiles are taken over per-batch means
//! (nearest rank, as `shm_pingpong.c` does: p50 = v[n/2], p99 =
//! v[ceil(0.99 n) - 1]). Across repetitions a row shows the median of the
//! per-repetition values and their spread (min..max).

/// Run `warm` untimed calls of `op`, then `batches` timed batches of
/// `batch` calls; returns each batch's mean time per call (ns). One clock
/// read per batch keeps the timer out of the measured calls.
pub fn batch_means<E>(
    warm: usize,
    batches: usize,
    batch: usize,
    mut op: impl FnMut() -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    for _ in 0..warm {
        op()?;
    }
    let mut means = Vec::with_capacity(batches);
    let mut t = std::time::Instant::now();
    for _ in 0..batches {
        for _ in 0..batch {
            op()?;
        }
        let now = std::time::Instant::now();
        means.push((now - t).as_nanos() as f64 / batch as f64);
        t = now;
    }
    Ok(means)
}

/// A row is noisy when the largest per-repetition value exceeds the
/// smallest by more than this factor.
pub const NOISY_RATIO: f64 = 1.5;

/// p50 and p99 of `v` (nearest rank); `(NaN, NaN)` for an empty slice.
pub fn p50_p99(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let k99 = ((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1;
    (s[n / 2], s[k99])
}

/// The median of `v` (mean of the two middle values for even lengths).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// One table row's numbers, over repetitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Median over repetitions (of the p50s for latencies).
    pub median: f64,
    /// Median of the per-repetition p99s (latencies only).
    pub p99: Option<f64>,
    /// Smallest per-repetition value (p50 for latencies).
    pub min: f64,
    /// Largest per-repetition value (p50 for latencies).
    pub max: f64,
    /// Repetitions.
    pub reps: usize,
}

impl Summary {
    /// Summary of per-repetition latency percentiles.
    pub fn latency(p50s: &[f64], p99s: &[f64]) -> Summary {
        Summary {
            p99: Some(median(p99s)),
            ..Summary::values(p50s)
        }
    }

    /// Summary of per-repetition throughput values.
    pub fn values(v: &[f64]) -> Summary {
        Summary {
            median: median(v),
            p99: None,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            reps: v.len(),
        }
    }

    /// A single value (a fixed reference or a one-off measurement).
    pub fn single(x: f64) -> Summary {
        Summary::values(&[x])
    }

    /// Whether the repetitions disagree by more than [`NOISY_RATIO`].
    pub fn noisy(&self) -> bool {
        self.reps > 1 && self.min > 0.0 && self.max / self.min > NOISY_RATIO
    }

    /// Every value multiplied by `k` (unit conversion).
    pub fn scaled(self, k: f64) -> Summary {
        Summary {
            median: self.median * k,
            p99: self.p99.map(|x| x * k),
            min: self.min * k,
            max: self.max * k,
            reps: self.reps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        assert_eq!(p50_p99(&v), (101.0, 198.0));
        assert_eq!(p50_p99(&[5.0]), (5.0, 5.0));
        assert!(p50_p99(&[]).0.is_nan());
    }

    #[test]
    fn summary_and_noise() {
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        let s = Summary::latency(&[1.0, 1.2, 1.1], &[2.0, 3.0, 4.0]);
        assert_eq!((s.median, s.p99, s.min, s.max), (1.1, Some(3.0), 1.0, 1.2));
        assert!(!s.noisy());
        assert!(Summary::values(&[1.0, 1.6]).noisy());
        assert!(!Summary::single(7.0).noisy());
    }
}
