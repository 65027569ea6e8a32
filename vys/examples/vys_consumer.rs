//! vys_consumer: joins a vys stream, chooses spectra by a filter, reads and
//! validates them, and prints live statistics (spectra/s, bytes/s, every
//! message kind) each second and a summary line at the end. It can dump
//! spectra and check the content of a `--checkable` producer's.
//!
//!     target/release/examples/vys_consumer --spw 0 --stokes 0 --duration-s 10 --check
//!
//! Filters (all optional; a spectrum passes if it matches every one given):
//! `--stations A-B`, `--spw N`, `--stokes N`, `--every N` (one spectrum in
//! N of what passes the rest).

use clap::Parser;
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, ConsumerStats, Message};
use splitrt_vys::rdma_device::RdmaDevice;
use splitrt_vys::stream_key;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "vys consumer")]
struct Args {
    /// Multicast group and port of the signals.
    #[arg(long, default_value = "239.255.42.99:47000")]
    group: SocketAddrV4,
    /// Address of the interface to join the group on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    /// File holding the stream key (else $SPLITRT_VYS_KEY).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Only this station pair, as A-B.
    #[arg(long, value_parser = parse_pair)]
    stations: Option<[u16; 2]>,
    /// Only this spectral window.
    #[arg(long)]
    spw: Option<u16>,
    /// Only this stokes product.
    #[arg(long)]
    stokes: Option<u16>,
    /// Take one spectrum in N of those passing the other filters.
    #[arg(long, default_value_t = 1)]
    every: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Print statistics every this many seconds (0: only at the end).
    #[arg(long, default_value_t = 1.0)]
    stats_s: f64,
    /// Print the first N valid spectra (identity and first values).
    #[arg(long, default_value_t = 0)]
    dump: usize,
    /// Check every valid spectrum's data against its identity (for a
    /// --checkable producer) and against the filter (--stations, --spw,
    /// --stokes; --every is not checked).
    #[arg(long)]
    check: bool,
    /// Read producers on this host through their read server too.
    #[arg(long)]
    remote_only: bool,
    /// Read producers on other hosts by RDMA read (the RDMA device of
    /// SPLITRT_IBV_DEVICE; a build with `--features splitrt/ibverbs`).
    #[arg(long)]
    rdma: bool,
    /// Largest spectrum in bytes.
    #[arg(long, default_value_t = 64 << 10)]
    max_spectrum_bytes: usize,
    /// Data buffers.
    #[arg(long, default_value_t = 4096)]
    buffers: usize,
    /// Print `ready` after this long (the signal group is joined then).
    #[arg(long, default_value_t = 0.0)]
    ready_after_s: f64,
    /// A producer silent (no signal, no heartbeat) this long is gone.
    #[arg(long, default_value_t = 5.0)]
    producer_silence_s: f64,
    /// Map producers' rings up to this many MiB in all (then read
    /// through their read servers).
    #[arg(long, default_value_t = 16 << 10)]
    max_mapped_mib: u64,
}

fn parse_pair(s: &str) -> Result<[u16; 2], String> {
    let (a, b) = s.split_once('-').ok_or("stations as A-B")?;
    Ok([
        a.parse().map_err(|_| "station")?,
        b.parse().map_err(|_| "station")?,
    ])
}

fn main() {
    match run(Args::parse()) {
        Ok(0) => {}
        Ok(_) => std::process::exit(2),
        Err(e) => {
            eprintln!("vys_consumer: {e}");
            std::process::exit(1);
        }
    }
}

fn run(a: Args) -> Result<u64, String> {
    let key = stream_key::from_file_or_env(a.key_file.as_deref())?;
    let mut cfg = ConsumerConfig::new(key, a.group, a.interface);
    cfg.local_reads = !a.remote_only;
    cfg.rdma = a.rdma.then(RdmaDevice::hardware);
    cfg.max_spectrum_bytes = a.max_spectrum_bytes;
    cfg.data_buffers = a.buffers;
    cfg.producer_silence = Duration::try_from_secs_f64(a.producer_silence_s)
        .map_err(|e| format!("--producer-silence-s: {e}"))?;
    cfg.max_mapped_bytes = a.max_mapped_mib.saturating_mul(1 << 20);
    cfg.apply_settings(|k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    let (stations, spw, stokes, every) = (a.stations, a.spw, a.stokes, a.every.max(1));
    let mut seen = 0u64;
    let wanted = move |st: [u16; 2], w: u16, k: u16| {
        stations.is_none_or(|s| s == st)
            && spw.is_none_or(|x| x == w)
            && stokes.is_none_or(|s| s == k)
    };
    let c = Consumer::start(cfg, move |p, _infos, pass| {
        if wanted(p.stations, p.spectral_window, p.stokes) {
            for x in pass.iter_mut() {
                *x = seen.is_multiple_of(every);
                seen += 1;
            }
        }
    })
    .map_err(|e| format!("joining the stream: {e}"))?;
    std::thread::sleep(Duration::from_secs_f64(a.ready_after_s));
    println!("ready pid={}", std::process::id());
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.duration_s);
    let mut tick = start;
    let (mut bytes, mut mismatched, mut unfiltered, mut dumped) = (0u64, 0u64, 0u64, 0usize);
    let mut kinds = Kinds::default();
    // messages other than valid spectra printed to stderr: the first 20
    let mut printed = 0u64;
    let mut last = (kinds, 0u64, 0u64);
    let mut stopping = false;
    let stats: ConsumerStats = loop {
        if !stopping && Instant::now() >= end {
            c.shutdown();
            stopping = true;
        }
        if a.stats_s > 0.0 && tick.elapsed().as_secs_f64() >= a.stats_s {
            let dt = tick.elapsed().as_secs_f64();
            let (k0, b0, r0) = last;
            // replayed signals are dropped, not messages: the live count
            let replays = c.stats().replays;
            println!(
                "stats: spectra/s={:.0} MB/s={:.1} {} replays={}",
                (kinds.valid - k0.valid) as f64 / dt,
                (bytes - b0) as f64 / dt / 1e6,
                kinds.since(&k0),
                replays - r0
            );
            let _ = std::io::stdout().flush();
            tick = Instant::now();
            last = (kinds, bytes, replays);
        }
        let Some(m) = c.recv(Duration::from_millis(50)) else {
            continue;
        };
        kinds.count(&m);
        match m {
            Message::Valid(s) => {
                bytes += s.data().len() as u64;
                let p = &s.product;
                let id = (p.stations, p.spectral_window, p.stokes);
                if a.check && !checkable::matches(id, s.info.timestamp, s.data()) {
                    mismatched += 1;
                    eprintln!(
                        "MISMATCH {id:?} timestamp {} seq {}",
                        s.info.timestamp, s.info.seq
                    );
                }
                if a.check && !wanted(p.stations, p.spectral_window, p.stokes) {
                    unfiltered += 1;
                    eprintln!("NOT CHOSEN {id:?} timestamp {} delivered", s.info.timestamp);
                }
                if dumped < a.dump {
                    dumped += 1;
                    let d = s.data();
                    let first: Vec<String> = d
                        .chunks_exact(4)
                        .take(4)
                        .map(|c| format!("{:e}", f32::from_le_bytes(c.try_into().unwrap())))
                        .collect();
                    println!(
                        "spectrum producer={:016x} stations={}-{} spw={} stokes={} t={} seq={} bytes={} first=[{}]",
                        p.producer, p.stations[0], p.stations[1], p.spectral_window, p.stokes,
                        s.info.timestamp, s.info.seq, d.len(), first.join(", ")
                    );
                }
            }
            Message::End { stats, status } => {
                if status != splitrt_vys::consumer::EndStatus::Shutdown {
                    eprintln!("vys_consumer: ended: {status:?}");
                }
                break stats;
            }
            // a producer's life: always said
            m @ (Message::ProducerGone { .. }
            | Message::MappedBytesLimit { .. }
            | Message::DescriptionChanged { .. }) => {
                eprintln!("{m}")
            }
            m => {
                printed += 1;
                if printed <= 20 {
                    eprintln!("{m}");
                }
            }
        }
    };
    let valid = kinds.valid;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "vys_consumer: valid={valid} mismatched={mismatched} unfiltered={unfiltered} bytes={bytes} seconds={secs:.3} \
         signals={} chosen={} verification_failures={} read_failures={} starved={} \
         signals_lost={} bad_signals={} version_mismatches={} replays={} queue_dropped={} \
         local_reads={} remote_reads={} rdma_reads={} heartbeats={} producers_gone={} \
         restarts={} mapping_refusals={}",
        stats.signals,
        stats.chosen,
        stats.verification_failures,
        stats.read_failures,
        stats.starved,
        stats.signals_lost,
        stats.bad_signals,
        stats.version_mismatches,
        stats.replays,
        stats.queue_dropped,
        stats.local_reads,
        stats.remote_reads,
        stats.rdma_reads,
        stats.heartbeats,
        stats.producers_gone,
        stats.restarts,
        stats.mapping_refusals
    );
    Ok(mismatched + unfiltered)
}

/// Messages taken from the queue, by kind (each `Message` counts once;
/// the starvation and queue alerts carry how many they stand for, and
/// those are summed).
#[derive(Default, Clone, Copy)]
struct Kinds {
    valid: u64,
    verification_failures: u64,
    read_failures: u64,
    starved: u64,
    signals_lost: u64,
    queue_dropped: u64,
    bad_signals: u64,
    version_mismatches: u64,
    producers_gone: u64,
    mapping_refusals: u64,
}

impl Kinds {
    fn count(&mut self, m: &Message) {
        match m {
            Message::Valid(_) => self.valid += 1,
            Message::VerificationFailure { .. } => self.verification_failures += 1,
            Message::ReadFailure { .. } => self.read_failures += 1,
            Message::DataBufferStarvation { spectra } => self.starved += spectra,
            Message::SignalBufferStarvation { signals } => self.signals_lost += signals,
            Message::QueueAlert { dropped, .. } => self.queue_dropped += dropped,
            Message::SignalReceiveFailure { count, .. } => self.bad_signals += count,
            Message::VersionMismatch { .. } => self.version_mismatches += 1,
            Message::ProducerGone { .. } => self.producers_gone += 1,
            Message::MappedBytesLimit { .. } => self.mapping_refusals += 1,
            Message::DescriptionChanged { .. } | Message::End { .. } => {}
        }
    }

    /// This interval's counts of every kind, as `name=n` pairs.
    fn since(&self, o: &Kinds) -> String {
        format!(
            "valid={} verification_failures={} read_failures={} starved={} signals_lost={} \
             queue_dropped={} bad_signals={} version_mismatches={} producers_gone={} \
             mapping_refusals={}",
            self.valid - o.valid,
            self.verification_failures - o.verification_failures,
            self.read_failures - o.read_failures,
            self.starved - o.starved,
            self.signals_lost - o.signals_lost,
            self.queue_dropped - o.queue_dropped,
            self.bad_signals - o.bad_signals,
            self.version_mismatches - o.version_mismatches,
            self.producers_gone - o.producers_gone,
            self.mapping_refusals - o.mapping_refusals
        )
    }
}
