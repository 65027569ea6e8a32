//! What rank 0 hands to the driver: `# key=value` lines describing the
//! configuration, then one CSV row per (benchmark, size, repetition):
//! `bench,size,rep,p50_ns,p99_ns,value` (latencies fill the two
//! percentiles, throughputs the value).

use std::fmt::Write as _;

/// The measured quantities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bench {
    /// Raw cache-line ping-pong round trip.
    RawLineRtt,
    /// AM Short round trip.
    ShortRtt,
    /// AM Medium round trip (same size each way).
    MediumRtt,
    /// AM Long round trip (same size each way).
    LongRtt,
    /// AM Medium one-way throughput.
    MediumBw,
    /// AM Long one-way throughput.
    LongBw,
    /// AM Short one-way message rate.
    ShortRate,
}

impl Bench {
    /// Every benchmark, in table order.
    pub const ALL: [Bench; 7] = [
        Bench::RawLineRtt,
        Bench::ShortRtt,
        Bench::MediumRtt,
        Bench::LongRtt,
        Bench::MediumBw,
        Bench::LongBw,
        Bench::ShortRate,
    ];

    /// Identifier used in CSV files.
    pub fn id(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw_line_rtt",
            Bench::ShortRtt => "am_short_rtt",
            Bench::MediumRtt => "am_medium_rtt",
            Bench::LongRtt => "am_long_rtt",
            Bench::MediumBw => "am_medium_oneway_bw",
            Bench::LongBw => "am_long_oneway_bw",
            Bench::ShortRate => "am_short_msg_rate",
        }
    }

    /// The benchmark with identifier `id`.
    pub fn from_id(id: &str) -> Option<Bench> {
        Bench::ALL.into_iter().find(|b| b.id() == id)
    }

    /// Name in the printed table.
    pub fn label(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw line ping-pong RTT",
            Bench::ShortRtt => "AM Short RTT",
            Bench::MediumRtt => "AM Medium RTT",
            Bench::LongRtt => "AM Long RTT",
            Bench::MediumBw => "AM Medium one-way",
            Bench::LongBw => "AM Long one-way",
            Bench::ShortRate => "AM Short flood rate",
        }
    }

    /// Whether rows hold round-trip percentiles (else a throughput value).
    pub fn is_latency(self) -> bool {
        matches!(
            self,
            Bench::RawLineRtt | Bench::ShortRtt | Bench::MediumRtt | Bench::LongRtt
        )
    }

    /// Unit of the printed values.
    pub fn unit(self) -> &'static str {
        match self {
            Bench::MediumBw | Bench::LongBw => "MB/s",
            Bench::ShortRate => "msgs/s",
            _ => "us",
        }
    }
}

/// One repetition's result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Percentiles of per-batch mean round-trip times, in ns.
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
pub struct Record {
    /// What was measured.
    pub bench: Bench,
    /// Payload bytes (0 for Short, 64 for the raw line).
    pub size: usize,
    /// Repetition, from 0.
    pub rep: usize,
    /// The result.
    pub value: Value,
}

/// Everything one job measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Results {
    /// Settings in force (`cell_size`, `ring_len`, ...), in order.
    pub config: Vec<(String, String)>,
    /// The measurements.
    pub records: Vec<Record>,
}

const HEADER: &str = "bench,size,rep,p50_ns,p99_ns,value";

impl Results {
    /// The configuration value named `key`.
    pub fn config_value(&self, key: &str) -> Option<&str> {
        self.config
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
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
    pub fn parse(text: &str) -> Result<Results, String> {
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
                bench: Bench::from_id(bench).ok_or_else(|| bad("unknown benchmark"))?,
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

    #[test]
    fn csv_round_trip() {
        let r = Results {
            config: vec![("cell_size".into(), "4096".into())],
            records: vec![
                Record {
                    bench: Bench::ShortRtt,
                    size: 0,
                    rep: 1,
                    value: Value::Latency {
                        p50_ns: 512.5,
                        p99_ns: 700.0,
                    },
                },
                Record {
                    bench: Bench::LongBw,
                    size: 4096,
                    rep: 0,
                    value: Value::Rate(1234.5),
                },
            ],
        };
        assert_eq!(Results::parse(&r.to_csv()).unwrap(), r);
        assert!(Results::parse("nope,1,2,3,4,5").is_err());
    }
}
