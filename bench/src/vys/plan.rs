//! What one `vys` job measures, in order: the same plan is computed by
//! the driver (to label the table) and by both ranks (to walk through the
//! phases in step), from `--quick` and where the job runs.

use splitrt::vys::ring::slot_bytes;
use splitrt::vys::signal::DigestKind;
use std::time::Duration;

/// Where the two ranks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Both on this host (signals and read-server reads over loopback).
    OneHost,
    /// On two hosts (`--hosts a,b`): producers on the first, consumers on
    /// the second.
    Across,
}

impl Place {
    /// The value of [`super::stream::ENV_PLACE`] naming it.
    pub fn id(self) -> &'static str {
        match self {
            Place::OneHost => "host",
            Place::Across => "across",
        }
    }

    /// The place a [`Place::id`] names.
    pub fn from_id(s: &str) -> Option<Place> {
        [Place::OneHost, Place::Across]
            .into_iter()
            .find(|p| p.id() == s)
    }
}

/// How consumers read spectra.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Through a read-only mapping of the producer's ring
    /// (`ConsumerConfig::local_reads = true`, the producer on this host).
    Local,
    /// Through the producer's read server over the UDP fabric's protocol
    /// (`local_reads = false`; across hosts there is no other way).
    Remote,
}

impl Reads {
    /// Label in tables and CSV.
    pub fn id(self) -> &'static str {
        match self {
            Reads::Local => "local",
            Reads::Remote => "remote",
        }
    }
}

/// The label of a digest in tables and CSV.
pub fn digest_id(d: DigestKind) -> &'static str {
    match d {
        DigestKind::None => "none",
        DigestKind::Crc32c => "crc32c",
        DigestKind::Xxh3 => "xxh3",
        DigestKind::Md5 => "md5",
    }
}

/// Which table a row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Delivered rate vs spectrum size, rings large enough.
    Stream,
    /// Verification failures vs ring slots, one spectrum size.
    Scan,
}

impl Section {
    /// Label in CSV.
    pub fn id(self) -> &'static str {
        match self {
            Section::Stream => "stream",
            Section::Scan => "scan",
        }
    }
}

/// Producers, consumers, read path and digest of a stream measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Producer threads (each a `Producer` with its own ring), on rank 0.
    pub producers: usize,
    /// Consumers (each a `Consumer` taking every spectrum of every
    /// producer), on rank 1.
    pub consumers: usize,
    /// How the consumers read.
    pub reads: Reads,
    /// Digest the producers compute and the consumers check.
    pub digest: DigestKind,
}

impl Setup {
    /// `1x1 local none`: producers x consumers, read path, digest.
    pub fn label(&self) -> String {
        format!(
            "{}x{} {} {}",
            self.producers,
            self.consumers,
            self.reads.id(),
            digest_id(self.digest)
        )
    }

    /// The label with dashes for spaces (`1x1-local-none`), as `--setups`
    /// takes it.
    pub fn id(&self) -> String {
        self.label().replace(' ', "-")
    }
}

/// Which parts of the plan to run (`--sizes`, `--setups`, `--no-scan`),
/// handed to the ranks through their environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only these spectrum sizes in the stream rows.
    pub sizes: Option<Vec<usize>>,
    /// Only the setups with these [`Setup::id`]s.
    pub setups: Option<Vec<String>>,
    /// Skip the failure-rate scan.
    pub no_scan: bool,
}

/// `--sizes` for the ranks (comma-separated bytes).
pub const ENV_SIZES: &str = "SPLITRT_BENCH_VYS_SIZES";
/// `--setups` for the ranks (comma-separated ids).
pub const ENV_SETUPS: &str = "SPLITRT_BENCH_VYS_SETUPS";
/// `--no-scan` for the ranks (`1`).
pub const ENV_NO_SCAN: &str = "SPLITRT_BENCH_VYS_NO_SCAN";

impl Selection {
    /// From the command line's strings: sizes like `512,8K,1M`, setup ids
    /// like `1x1-local-none,2x2-remote-none` (empty: none).
    pub fn parse(
        sizes: Option<&str>,
        setups: Option<&str>,
        no_scan: bool,
    ) -> Result<Selection, String> {
        let sizes = match sizes {
            None => None,
            Some(s) => Some(
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| {
                        splitrt::runtime::size::parse_size(x)
                            .filter(|&n| n > 0)
                            .ok_or_else(|| format!("--sizes: '{x}' is not a size (512, 8K, 1M)"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let setups = setups.map(|s| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
        Ok(Selection {
            sizes,
            setups,
            no_scan,
        })
    }

    /// The environment that carries it to the ranks.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        if let Some(s) = &self.sizes {
            let t: Vec<String> = s.iter().map(usize::to_string).collect();
            v.push((ENV_SIZES.to_string(), t.join(",")));
        }
        if let Some(s) = &self.setups {
            v.push((ENV_SETUPS.to_string(), s.join(",")));
        }
        if self.no_scan {
            v.push((ENV_NO_SCAN.to_string(), "1".to_string()));
        }
        v
    }

    /// The selection this rank's environment carries.
    pub fn from_env() -> Result<Selection, String> {
        let var = |k: &str| std::env::var(k).ok();
        Selection::parse(
            var(ENV_SIZES).as_deref(),
            var(ENV_SETUPS).as_deref(),
            var(ENV_NO_SCAN).is_some_and(|v| v == "1"),
        )
    }
}

/// One measurement: a setup at one spectrum size and ring length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Its table.
    pub section: Section,
    /// Producers, consumers, reads, digest.
    pub setup: Setup,
    /// Bytes per spectrum.
    pub size: usize,
    /// Ring slots of each producer.
    pub slots: usize,
}

impl Row {
    /// The row's identity in CSV and between ranks.
    pub fn key(&self) -> String {
        format!(
            "{},{},{},{},{},{},{}",
            self.section.id(),
            self.setup.producers,
            self.setup.consumers,
            self.setup.reads.id(),
            digest_id(self.setup.digest),
            self.size,
            self.slots
        )
    }
}

/// Bytes of the ring a stream row gives each producer: far more than a
/// consumer that keeps up ever lags behind (its signals arrive within
/// microseconds), and large next to the caches.
pub const RING_BYTES: usize = 256 << 20;

/// Ring slots of a stream row at spectrum size `size`.
pub fn stream_slots(size: usize) -> usize {
    (RING_BYTES / slot_bytes(size)).clamp(64, 1 << 20)
}

/// Spectrum size of the failure-rate scan.
pub const SCAN_SIZE: usize = 8 << 10;

/// Everything one job measures and for how long.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Where the job runs.
    pub place: Place,
    /// Spectrum sizes of the stream rows (and the baselines).
    pub sizes: Vec<usize>,
    /// Setups measured at every size.
    pub setups: Vec<Setup>,
    /// The failure-rate scan (empty across hosts).
    pub scan: Vec<Row>,
    /// Time from a consumer's first message to the start of its window.
    pub warmup: Duration,
    /// Length of a consumer's counting window.
    pub window: Duration,
    /// Time of each baseline measurement (memcpy, fabric get).
    pub baseline: Duration,
}

impl Plan {
    /// The plan of a job at `place`, short with `quick`.
    pub fn new(place: Place, quick: bool) -> Plan {
        let sizes: Vec<usize> = if quick {
            vec![512, 64 << 10]
        } else {
            vec![512, 2 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20]
        };
        let s = |producers, consumers, reads, digest| Setup {
            producers,
            consumers,
            reads,
            digest,
        };
        let setups = match place {
            Place::OneHost => vec![
                s(1, 1, Reads::Local, DigestKind::None),
                s(1, 1, Reads::Local, DigestKind::Crc32c),
                s(1, 1, Reads::Remote, DigestKind::None),
                s(2, 2, Reads::Local, DigestKind::None),
                s(2, 2, Reads::Remote, DigestKind::None),
            ],
            Place::Across => vec![
                s(1, 1, Reads::Remote, DigestKind::None),
                s(1, 1, Reads::Remote, DigestKind::Crc32c),
                s(2, 2, Reads::Remote, DigestKind::None),
            ],
        };
        let scan_slots: &[usize] = if quick {
            &[4096, 32, 4]
        } else {
            &[65536, 4096, 256, 32, 8, 4]
        };
        let scan_reads: &[Reads] = if quick {
            &[Reads::Local]
        } else {
            &[Reads::Local, Reads::Remote]
        };
        let scan = match place {
            Place::Across => Vec::new(),
            Place::OneHost => scan_reads
                .iter()
                .flat_map(|&reads| {
                    scan_slots.iter().map(move |&slots| Row {
                        section: Section::Scan,
                        setup: s(1, 1, reads, DigestKind::None),
                        size: SCAN_SIZE,
                        slots,
                    })
                })
                .collect(),
        };
        Plan {
            place,
            sizes,
            setups,
            scan,
            warmup: Duration::from_millis(if quick { 50 } else { 250 }),
            window: Duration::from_millis(if quick { 200 } else { 1000 }),
            baseline: Duration::from_millis(if quick { 50 } else { 300 }),
        }
    }

    /// Keep only what `sel` selects; an unknown setup id is an error
    /// naming the known ones.
    pub fn select(mut self, sel: &Selection) -> Result<Plan, String> {
        if let Some(sizes) = &sel.sizes {
            self.sizes = sizes.clone();
        }
        if let Some(ids) = &sel.setups {
            let known: Vec<String> = self.setups.iter().map(Setup::id).collect();
            if let Some(bad) = ids.iter().find(|i| !known.contains(i)) {
                return Err(format!(
                    "--setups: no setup '{bad}' here; known: {}",
                    known.join(", ")
                ));
            }
            self.setups.retain(|s| ids.contains(&s.id()));
        }
        if sel.no_scan {
            self.scan.clear();
        }
        Ok(self)
    }

    /// The stream rows at `size`, in the order they run.
    pub fn stream_rows(&self, size: usize) -> Vec<Row> {
        self.setups
            .iter()
            .map(|&setup| Row {
                section: Section::Stream,
                setup,
                size,
                slots: stream_slots(size),
            })
            .collect()
    }

    /// Every row of one repetition, in the order they run.
    pub fn rows(&self) -> Vec<Row> {
        let mut v: Vec<Row> = self
            .sizes
            .iter()
            .flat_map(|&s| self.stream_rows(s))
            .collect();
        v.extend(self.scan.iter().copied());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_and_keys() {
        let p = Plan::new(Place::OneHost, false);
        assert_eq!(p.rows().len(), 6 * 5 + 12);
        assert_eq!(stream_slots(1 << 20), 255);
        assert_eq!(stream_slots(16), 1 << 20);
        let keys: std::collections::HashSet<String> = p.rows().iter().map(Row::key).collect();
        assert_eq!(keys.len(), p.rows().len(), "every row has its own key");
        let a = Plan::new(Place::Across, true);
        // 2 quick sizes x (1x1 none, 1x1 crc32c, 2x2 none)
        assert!(a.scan.is_empty() && a.rows().len() == 2 * 3);
        assert_eq!(Place::from_id("across"), Some(Place::Across));
        assert_eq!(p.setups[0].label(), "1x1 local none");
        let sel = Selection::parse(Some("512,8K"), Some("1x1-local-none"), true).unwrap();
        let q = p.clone().select(&sel).unwrap();
        assert_eq!(
            (q.sizes.clone(), q.setups.len(), q.scan.len()),
            (vec![512, 8192], 1, 0)
        );
        assert!(p
            .clone()
            .select(&Selection::parse(None, Some("9x9"), false).unwrap())
            .is_err());
        assert!(Selection::parse(Some("x"), None, false).is_err());
        let env = sel.env();
        assert_eq!(env.len(), 3);
    }
}
