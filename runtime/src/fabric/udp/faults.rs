//! Fault injection for the UDP driver: drop, duplicate, reorder and delay
//! datagrams at seeded rates, per direction. Off (and free: one `Option`
//! test per datagram) unless `SPLITRT_UDP_FAULTS` is set, e.g.
//! `drop=0.01,dup=0.001,reorder=0.01,delay_us=200,seed=7,dir=both`.
//! `record=DIR` also appends every datagram a rank sends to
//! `DIR/udp-tx-<rank>` (the captures the replay tests play back as an
//! on-path attacker would; at most [`RECORD_MAX`] bytes per rank).

use crate::{Error, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The environment variable holding a fault specification.
pub const ENV_UDP_FAULTS: &str = "SPLITRT_UDP_FAULTS";

/// What to inject.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    /// Probability a datagram is dropped.
    pub drop: f64,
    /// Probability a datagram is sent twice.
    pub dup: f64,
    /// Probability a datagram is held back (up to `delay_us`) so later
    /// ones overtake it.
    pub reorder: f64,
    /// Longest hold, microseconds.
    pub delay_us: u64,
    /// Seed (mixed with the rank, so ranks differ but runs repeat).
    pub seed: u64,
    /// Apply to datagrams sent.
    pub tx: bool,
    /// Apply to datagrams received.
    pub rx: bool,
    /// Record every datagram sent into this directory.
    pub record: Option<std::path::PathBuf>,
}

/// Most bytes a rank records (`record=DIR`).
pub const RECORD_MAX: u64 = 64 << 20;

/// A rank's capture of what it sent (`record=DIR`): one record per
/// datagram, `len u32 LE, IPv4 address [u8; 4], port u16 LE, bytes`,
/// each written with one unbuffered write (a stopped rank's capture is
/// whole up to its last datagram).
#[derive(Debug)]
pub struct Recorder {
    file: std::fs::File,
    written: u64,
}

impl Recorder {
    /// Create `dir/udp-tx-<rank>`.
    pub fn create(dir: &std::path::Path, rank: usize) -> Result<Recorder> {
        let path = dir.join(format!("udp-tx-{rank}"));
        let file = std::fs::File::create(&path).map_err(|e| {
            Error::config(format!(
                "{ENV_UDP_FAULTS}: cannot create {}: {e}",
                path.display()
            ))
        })?;
        Ok(Recorder { file, written: 0 })
    }

    /// Append one datagram sent to `to` (IPv4 only; others are skipped).
    pub fn record(&mut self, to: std::net::SocketAddr, d: &[u8]) {
        use std::io::Write;
        let std::net::SocketAddr::V4(a) = to else {
            return;
        };
        if self.written + d.len() as u64 > RECORD_MAX {
            return;
        }
        let mut rec = Vec::with_capacity(10 + d.len());
        rec.extend_from_slice(&(d.len() as u32).to_le_bytes());
        rec.extend_from_slice(&a.ip().octets());
        rec.extend_from_slice(&a.port().to_le_bytes());
        rec.extend_from_slice(d);
        if self.file.write_all(&rec).is_ok() {
            self.written += rec.len() as u64;
        }
    }
}

impl std::str::FromStr for FaultSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<FaultSpec> {
        let mut f = FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay_us: 200,
            seed: 1,
            tx: true,
            rx: false,
            record: None,
        };
        let bad = |why: String| {
            Error::config(format!(
                "{ENV_UDP_FAULTS}={s:?}: {why} (expected e.g. \
                 drop=0.01,dup=0.001,reorder=0.01,delay_us=200,seed=7,dir=tx|rx|both,record=DIR)"
            ))
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("'{part}' is not key=value")))?;
            let prob = |v: &str| -> Result<f64> {
                match v.parse::<f64>() {
                    Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                    _ => Err(bad(format!("{k}={v} is not a probability in 0..=1"))),
                }
            };
            let int = |v: &str| -> Result<u64> {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{k}={v} is not a whole number")))
            };
            match k {
                "drop" => f.drop = prob(v)?,
                "dup" => f.dup = prob(v)?,
                "reorder" => f.reorder = prob(v)?,
                "delay_us" => f.delay_us = int(v)?.min(10_000_000),
                "seed" => f.seed = int(v)?,
                "dir" => {
                    (f.tx, f.rx) = match v {
                        "tx" => (true, false),
                        "rx" => (false, true),
                        "both" => (true, true),
                        _ => return Err(bad(format!("dir={v}"))),
                    }
                }
                "record" if !v.is_empty() => f.record = Some(v.into()),
                _ => return Err(bad(format!("unknown key '{k}'"))),
            }
        }
        Ok(f)
    }
}

/// What to do with one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pass it on.
    Pass,
    /// Lose it.
    Drop,
    /// Pass it on twice.
    Twice,
    /// Hold it this many nanoseconds.
    Hold(u64),
}

/// A seeded fault injector for one direction.
#[derive(Debug)]
pub struct Faults {
    spec: FaultSpec,
    rng: SmallRng,
    /// Datagrams injected: dropped, duplicated, held.
    pub counts: [u64; 3],
}

impl Faults {
    /// An injector for `rank` and direction `dir` (0 tx, 1 rx).
    pub fn new(spec: &FaultSpec, rank: usize, dir: u64) -> Faults {
        let seed = spec.seed ^ ((rank as u64) << 32) ^ (dir << 63);
        Faults {
            spec: spec.clone(),
            rng: SmallRng::seed_from_u64(seed),
            counts: [0; 3],
        }
    }

    /// Decide the fate of the next datagram.
    pub fn verdict(&mut self) -> Verdict {
        let s = &self.spec;
        if s.drop > 0.0 && self.rng.gen_bool(s.drop) {
            self.counts[0] += 1;
            return Verdict::Drop;
        }
        if s.dup > 0.0 && self.rng.gen_bool(s.dup) {
            self.counts[1] += 1;
            return Verdict::Twice;
        }
        if s.reorder > 0.0 && self.rng.gen_bool(s.reorder) {
            self.counts[2] += 1;
            return Verdict::Hold(self.rng.gen_range(0..=s.delay_us) * 1000);
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let f: FaultSpec = "drop=0.05, dup=0.01,dir=both,seed=3".parse().unwrap();
        assert_eq!(
            (f.drop, f.dup, f.seed, f.tx, f.rx),
            (0.05, 0.01, 3, true, true)
        );
        assert!("drop=2".parse::<FaultSpec>().is_err());
        assert!("lose=0.1".parse::<FaultSpec>().is_err());
        let mut a = Faults::new(&f, 1, 0);
        let mut b = Faults::new(&f, 1, 0);
        for _ in 0..1000 {
            assert_eq!(a.verdict(), b.verdict());
        }
        assert!(a.counts[0] > 20 && a.counts[0] < 90, "{:?}", a.counts);
    }
}
