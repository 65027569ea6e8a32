//! What the consumer rank hands the driver: `# key=value` lines (settings
//! and facts), `base|rep|what|size|GB/s` lines (memcpy and fabric get), and
//! `row|rep|key|name=value ...` lines (one stream or scan measurement),
//! with their parser.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Outcomes one consumer's application thread counted, from the messages
/// it took off the consumer's queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Spectra delivered as valid (and found to hold exactly the
    /// producer's data).
    pub valid: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Verification failures: overwritten before or while read.
    pub overwritten: u64,
    /// Verification failures: head and tail right, digest wrong.
    pub digest_mismatch: u64,
    /// Reads that could not be done.
    pub read_failures: u64,
    /// Chosen spectra not read (no data buffer or read slot free).
    pub starved: u64,
    /// Signal messages the kernel dropped before the consumer saw them.
    pub signals_lost: u64,
    /// Messages dropped because the application's queue was full.
    pub queue_dropped: u64,
    /// Other messages (signal receive failures, version mismatches).
    pub other: u64,
}

impl Counts {
    /// Field names and values, in CSV order.
    pub fn fields(&self) -> [(&'static str, u64); 9] {
        [
            ("valid", self.valid),
            ("bytes", self.bytes),
            ("overwritten", self.overwritten),
            ("digest_mismatch", self.digest_mismatch),
            ("read_failures", self.read_failures),
            ("starved", self.starved),
            ("signals_lost", self.signals_lost),
            ("queue_dropped", self.queue_dropped),
            ("other", self.other),
        ]
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &Counts) {
        self.valid += o.valid;
        self.bytes += o.bytes;
        self.overwritten += o.overwritten;
        self.digest_mismatch += o.digest_mismatch;
        self.read_failures += o.read_failures;
        self.starved += o.starved;
        self.signals_lost += o.signals_lost;
        self.queue_dropped += o.queue_dropped;
        self.other += o.other;
    }

    /// Spectra the consumers chose and heard of again: every outcome
    /// that names spectra (signals lost are not spectra chosen).
    pub fn chosen(&self) -> u64 {
        self.valid
            + self.overwritten
            + self.digest_mismatch
            + self.read_failures
            + self.starved
            + self.queue_dropped
    }

    fn set(&mut self, name: &str, v: u64) -> bool {
        let f = match name {
            "valid" => &mut self.valid,
            "bytes" => &mut self.bytes,
            "overwritten" => &mut self.overwritten,
            "digest_mismatch" => &mut self.digest_mismatch,
            "read_failures" => &mut self.read_failures,
            "starved" => &mut self.starved,
            "signals_lost" => &mut self.signals_lost,
            "queue_dropped" => &mut self.queue_dropped,
            "other" => &mut self.other,
            _ => return false,
        };
        *f = v;
        true
    }
}

/// One measurement of one row in one repetition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowResult {
    /// [`super::plan::Row::key`].
    pub key: String,
    /// Repetition, from 0.
    pub rep: usize,
    /// Seconds each consumer counted (its window).
    pub window_s: f64,
    /// Outcomes inside the windows, summed over consumers.
    pub window: Counts,
    /// Spectra per second the producers wrote, summed over producers
    /// (each over its whole run).
    pub produced_per_s: f64,
    /// Signal messages the producers could not send.
    pub signal_errors: u64,
    /// Valid spectra over the whole run, every one checked.
    pub checked: u64,
    /// Valid spectra whose data was not the producer's: a vys bug.
    pub mismatched: u64,
    /// Spectra read through a mapping (consumers' own count).
    pub local_reads: u64,
    /// Spectra read through a read server (consumers' own count).
    pub remote_reads: u64,
}

impl RowResult {
    /// Spectra per second delivered as valid, all consumers together.
    pub fn delivered_per_s(&self) -> f64 {
        self.window.valid as f64 / self.window_s
    }

    /// GB/s delivered as valid, all consumers together.
    pub fn delivered_gbps(&self) -> f64 {
        self.window.bytes as f64 / self.window_s / 1e9
    }

    /// GB/s of `size`-byte spectra the consumers copied out of rings,
    /// valid or not (a read copies the spectrum before it can tell): what
    /// they read while busy, overwritten spectra included.
    pub fn read_gbps(&self, size: usize) -> f64 {
        let w = &self.window;
        let read = w.valid + w.overwritten + w.digest_mismatch;
        (read * size as u64) as f64 / self.window_s / 1e9
    }

    /// The result line.
    pub fn line(&self) -> String {
        let mut s = format!(
            "row|{}|{}|window_s={} produced_per_s={} signal_errors={} checked={} mismatched={} \
             local_reads={} remote_reads={}",
            self.rep,
            self.key,
            self.window_s,
            self.produced_per_s,
            self.signal_errors,
            self.checked,
            self.mismatched,
            self.local_reads,
            self.remote_reads
        );
        for (k, v) in self.window.fields() {
            let _ = write!(s, " {k}={v}");
        }
        s
    }

    fn parse(rep: &str, key: &str, fields: &str) -> Option<RowResult> {
        let mut r = RowResult {
            key: key.to_string(),
            rep: rep.parse().ok()?,
            ..RowResult::default()
        };
        for f in fields.split_whitespace() {
            let (k, v) = f.split_once('=')?;
            match k {
                "window_s" => r.window_s = v.parse().ok()?,
                "produced_per_s" => r.produced_per_s = v.parse().ok()?,
                _ => {
                    let n: u64 = v.parse().ok()?;
                    match k {
                        "signal_errors" => r.signal_errors = n,
                        "checked" => r.checked = n,
                        "mismatched" => r.mismatched = n,
                        "local_reads" => r.local_reads = n,
                        "remote_reads" => r.remote_reads = n,
                        _ if r.window.set(k, n) => {}
                        _ => return None,
                    }
                }
            }
        }
        Some(r)
    }
}

/// A baseline measured in the job: `memcpy` or `get` (the UDP fabric's
/// pipelined get between the two ranks).
#[derive(Clone, Debug, PartialEq)]
pub struct Baseline {
    /// `memcpy` or `get`.
    pub what: String,
    /// Repetition, from 0.
    pub rep: usize,
    /// Bytes per copy or get.
    pub size: usize,
    /// GB/s.
    pub gbps: f64,
}

impl Baseline {
    /// The result line.
    pub fn line(&self) -> String {
        format!(
            "base|{}|{}|{}|{}",
            self.rep, self.what, self.size, self.gbps
        )
    }
}

/// Everything the consumer rank wrote.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// `# key=value` lines, in order.
    pub facts: Vec<(String, String)>,
    /// Baselines.
    pub baselines: Vec<Baseline>,
    /// Row measurements.
    pub rows: Vec<RowResult>,
}

impl Output {
    /// Parse the result file.
    pub fn parse(text: &str) -> Result<Output, String> {
        let mut o = Output::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let bad = || format!("malformed result line: {line}");
            if let Some(kv) = line.strip_prefix("# ") {
                let (k, v) = kv.split_once('=').ok_or_else(bad)?;
                o.facts.push((k.to_string(), v.to_string()));
                continue;
            }
            let f: Vec<&str> = line.split('|').collect();
            match f.as_slice() {
                ["base", rep, what, size, gbps] => o.baselines.push(Baseline {
                    what: what.to_string(),
                    rep: rep.parse().map_err(|_| bad())?,
                    size: size.parse().map_err(|_| bad())?,
                    gbps: gbps.parse().map_err(|_| bad())?,
                }),
                ["row", rep, key, fields] => o
                    .rows
                    .push(RowResult::parse(rep, key, fields).ok_or_else(bad)?),
                _ => return Err(bad()),
            }
        }
        Ok(o)
    }

    /// The results of row `key`, by repetition.
    pub fn row(&self, key: &str) -> Vec<&RowResult> {
        self.rows.iter().filter(|r| r.key == key).collect()
    }

    /// Baseline `what` at `size`, by repetition.
    pub fn baseline(&self, what: &str, size: usize) -> BTreeMap<usize, f64> {
        self.baselines
            .iter()
            .filter(|b| b.what == what && b.size == size)
            .map(|b| (b.rep, b.gbps))
            .collect()
    }

    /// A fact's value.
    pub fn fact(&self, key: &str) -> Option<&str> {
        self.facts
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let r = RowResult {
            key: "stream,1,1,local,none,512,1000".into(),
            rep: 2,
            window_s: 1.5,
            window: Counts {
                valid: 10,
                bytes: 5120,
                overwritten: 3,
                starved: 1,
                ..Counts::default()
            },
            produced_per_s: 1e6,
            signal_errors: 0,
            checked: 12,
            mismatched: 0,
            local_reads: 13,
            remote_reads: 0,
        };
        let b = Baseline {
            what: "memcpy".into(),
            rep: 0,
            size: 512,
            gbps: 12.5,
        };
        let text = format!("# interface=127.0.0.1\n{}\n{}\n", b.line(), r.line());
        let o = Output::parse(&text).unwrap();
        assert_eq!(o.rows, vec![r.clone()]);
        assert_eq!(o.baselines, vec![b]);
        assert_eq!(o.fact("interface"), Some("127.0.0.1"));
        assert_eq!(o.row(&r.key).len(), 1);
        assert_eq!(r.window.chosen(), 14);
        assert!((o.rows[0].delivered_per_s() - 10.0 / 1.5).abs() < 1e-9);
        assert!(Output::parse("row|x|y|z").is_err());
    }
}
