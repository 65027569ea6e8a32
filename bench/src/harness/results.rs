//! What rank 0 of a benchmark job hands to the driver: `# key=value` lines
//! describing the configuration, then one CSV row per (benchmark, size,
//! repetition): `bench,size,rep,p50_ns,p99_ns,value` (latencies fill the two
//! percentiles, throughputs the value). Generic over the benchmark's set of
//! measured quantities ([`BenchId`]).

use crate::harness::stats::{p50_p99, Summary};
use std::fmt::Write as _;

/// A set of measured quantities with stable CSV identifiers.
pub trait BenchId: Copy + Eq + std::fmt::Debug + 'static {
    /// Every member, in table order.
    const ALL: &'static [Self];

    /// Identifier used in CSV files.
    fn id(self) -> &'static str;

    /// The member with identifier `id`.
    fn from_id(id: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|b| b.id() == id)
    }
}

/// One repetition's result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Percentiles of per-batch mean times, in ns.
    Latency {
        /// Median batch.
        p50_ns: f64,
        /// 99th-percentile batch.
        p99_ns: f64,
    },
    /// MB/s (1 MB = 1e6 B) or messages/s.
    Rate(f64),
}

/// One row: a benchmark at one size in one repetition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record<B> {
    /// What was measured.
    pub bench: B,
    /// Payload bytes (0 when the quantity has no size).
    pub size: usize,
    /// Repetition, from 0.
    pub rep: usize,
    /// The result.
    pub value: Value,
}

/// Everything one job measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Results<B> {
    /// Settings in force (`cell_size`, `ring_len`, ...), in order.
    pub config: Vec<(String, String)>,
    /// The measurements.
    pub records: Vec<Record<B>>,
}

impl<B> Default for Results<B> {
    fn default() -> Self {
        Results {
            config: Vec::new(),
            records: Vec::new(),
        }
    }
}

const HEADER: &str = "bench,size,rep,p50_ns,p99_ns,value";

impl<B: BenchId> Results<B> {
    /// Empty results with the given configuration lines.
    pub fn with_config(config: Vec<(&str, String)>) -> Self {
        Results {
            config: config
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            records: Vec::new(),
        }
    }

    /// Append one record.
    pub fn push(&mut self, bench: B, size: usize, rep: usize, value: Value) {
        self.records.push(Record {
            bench,
            size,
            rep,
            value,
        });
    }

    /// Append one latency record: the p50 and p99 (nearest rank) of a
    /// repetition's per-batch means (ns).
    pub fn push_latency(&mut self, bench: B, size: usize, rep: usize, batch_means: &[f64]) {
        let (p50_ns, p99_ns) = p50_p99(batch_means);
        self.push(bench, size, rep, Value::Latency { p50_ns, p99_ns });
    }

    /// The configuration value named `key`.
    pub fn config_value(&self, key: &str) -> Option<&str> {
        self.config
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Records of `bench` at `size`, in repetition order.
    pub fn reps_of(&self, bench: B, size: usize) -> Vec<Record<B>> {
        let mut v: Vec<Record<B>> = self
            .records
            .iter()
            .filter(|r| r.bench == bench && r.size == size)
            .copied()
            .collect();
        v.sort_by_key(|r| r.rep);
        v
    }

    /// Sizes measured for `bench`, ascending.
    pub fn sizes_of(&self, bench: B) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .records
            .iter()
            .filter(|r| r.bench == bench)
            .map(|r| r.size)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Summary over repetitions of `bench` at `size`: latencies in us
    /// (median of the p50s, median p99), rates as recorded.
    pub fn summary(&self, bench: B, size: usize) -> Summary {
        let recs = self.reps_of(bench, size);
        let (mut p50, mut p99, mut rate) = (Vec::new(), Vec::new(), Vec::new());
        for r in &recs {
            match r.value {
                Value::Latency { p50_ns, p99_ns } => {
                    p50.push(p50_ns / 1e3);
                    p99.push(p99_ns / 1e3);
                }
                Value::Rate(x) => rate.push(x),
            }
        }
        if rate.is_empty() && !p50.is_empty() {
            Summary::latency(&p50, &p99)
        } else {
            Summary::values(&rate)
        }
    }

    /// Per-repetition p50s (us) of a latency quantity, in repetition order.
    pub fn p50s_us(&self, bench: B, size: usize) -> Vec<f64> {
        self.reps_of(bench, size)
            .iter()
            .filter_map(|r| match r.value {
                Value::Latency { p50_ns, .. } => Some(p50_ns / 1e3),
                Value::Rate(_) => None,
            })
            .collect()
    }

    /// Per-repetition values of a rate quantity, in repetition order.
    pub fn rates(&self, bench: B, size: usize) -> Vec<f64> {
        self.reps_of(bench, size)
            .iter()
            .filter_map(|r| match r.value {
                Value::Rate(x) => Some(x),
                Value::Latency { .. } => None,
            })
            .collect()
    }

    /// The CSV text.
    pub fn to_csv(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.config {
            let _ = writeln!(s, "# {k}={v}");
        }
        s.push_str(HEADER);
        s.push('\n');
        for r in &self.records {
            let (p50, p99, v) = match r.value {
                Value::Latency { p50_ns, p99_ns } => (
                    format!("{p50_ns:.1}"),
                    format!("{p99_ns:.1}"),
                    String::new(),
                ),
                Value::Rate(x) => (String::new(), String::new(), format!("{x:.1}")),
            };
            let _ = writeln!(s, "{},{},{},{p50},{p99},{v}", r.bench.id(), r.size, r.rep);
        }
        s
    }

    /// Parse [`Results::to_csv`] output.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Results::default();
        for (n, line) in text.lines().enumerate() {
            let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if let Some(kv) = line.strip_prefix("# ") {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| bad("expected key=value"))?;
                out.config.push((k.to_string(), v.to_string()));
                continue;
            }
            if line.is_empty() || line == HEADER {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            let [bench, size, rep, p50, p99, value] = f[..] else {
                return Err(bad("expected 6 fields"));
            };
            let num = |s: &str| s.parse::<f64>().map_err(|_| bad("bad number"));
            let value = if value.is_empty() {
                Value::Latency {
                    p50_ns: num(p50)?,
                    p99_ns: num(p99)?,
                }
            } else {
                Value::Rate(num(value)?)
            };
            out.records.push(Record {
                bench: B::from_id(bench).ok_or_else(|| bad("unknown benchmark"))?,
                size: size.parse().map_err(|_| bad("bad size"))?,
                rep: rep.parse().map_err(|_| bad("bad repetition"))?,
                value,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum T {
        Lat,
        Bw,
    }

    impl BenchId for T {
        const ALL: &'static [T] = &[T::Lat, T::Bw];
        fn id(self) -> &'static str {
            match self {
                T::Lat => "lat",
                T::Bw => "bw",
            }
        }
    }

    #[test]
    fn csv_round_trip() {
        let mut r = Results::<T>::with_config(vec![("cell_size", "4096".into())]);
        r.push(
            T::Lat,
            0,
            1,
            Value::Latency {
                p50_ns: 512.5,
                p99_ns: 700.0,
            },
        );
        r.push(T::Bw, 4096, 0, Value::Rate(1234.5));
        assert_eq!(Results::parse(&r.to_csv()).unwrap(), r);
        assert!(Results::<T>::parse("nope,1,2,3,4,5").is_err());
        assert_eq!(r.config_value("cell_size"), Some("4096"));
    }

    #[test]
    fn summaries_by_kind() {
        let mut r = Results::<T>::default();
        for (rep, ns) in [(1, 3000.0), (0, 1000.0), (2, 2000.0)] {
            r.push(
                T::Lat,
                8,
                rep,
                Value::Latency {
                    p50_ns: ns,
                    p99_ns: 2.0 * ns,
                },
            );
            r.push(T::Bw, 8, rep, Value::Rate(ns));
        }
        assert_eq!(r.p50s_us(T::Lat, 8), [1.0, 3.0, 2.0]);
        let s = r.summary(T::Lat, 8);
        assert_eq!((s.median, s.p99, s.reps), (2.0, Some(4.0), 3));
        assert_eq!(r.summary(T::Bw, 8).median, 2000.0);
        assert_eq!(r.sizes_of(T::Bw), [8]);
        assert!(r.summary(T::Bw, 16).median.is_nan());
    }
}
