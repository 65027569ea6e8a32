//! vys_producer: a correlator back-end simulator. Every integration it
//! writes one spectrum per baseline (antenna pairs, autocorrelations
//! included), spectral window and stokes product into its ring and
//! announces them in signal messages over UDP multicast; consumers on this
//! host map the ring, consumers elsewhere read through its read server.
//!
//!     export SPLITRT_VYS_KEY=$(head -c 32 /dev/urandom | xxd -p -c 64)
//!     target/release/examples/vys_producer --antennas 4 --spectral-windows 2 \
//!         --channels 1024 --stokes 2 --integration-ms 10 --duration-s 10 --checkable
//!
//! With `--checkable` each spectrum's data is a function of its identity
//! (product and timestamp), which `vys_consumer --check` verifies. The
//! ring holds `--buffer-ms` of data (at least two integrations). It prints
//! `ready producer=<id>` when it starts and a summary line when done.

use clap::Parser;
use splitrt_vys::checkable;
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::rdma_device::RdmaDevice;
use splitrt_vys::signal::DigestKind;
use splitrt_vys::stream_key;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "vys producer simulator")]
struct Args {
    /// Multicast group and port of the signals.
    #[arg(long, default_value = "239.255.42.99:47000")]
    group: SocketAddrV4,
    /// Address of the interface to send signals from and serve reads on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    /// File holding the stream key (else $SPLITRT_VYS_KEY).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Antennas (baselines: all pairs, autocorrelations included).
    #[arg(long, default_value_t = 3)]
    antennas: u16,
    /// Spectral windows.
    #[arg(long, default_value_t = 2)]
    spectral_windows: u16,
    /// Channels per spectrum (8 bytes each: complex f32).
    #[arg(long, default_value_t = 1024)]
    channels: u32,
    /// Stokes products (1..=4).
    #[arg(long, default_value_t = 2)]
    stokes: u16,
    /// Integration time in ms (0: as fast as possible).
    #[arg(long, default_value_t = 10.0)]
    integration_ms: f64,
    /// Spectra per signal message (1..=42).
    #[arg(long, default_value_t = 8)]
    spectra_per_signal: usize,
    /// Data the ring holds, in ms of integrations (at least 2
    /// integrations); with --integration-ms 0, use --slots.
    #[arg(long, default_value_t = 1000.0)]
    buffer_ms: f64,
    /// Ring slots (overrides --buffer-ms).
    #[arg(long)]
    slots: Option<usize>,
    /// Digest: none, crc32c, xxh3, md5.
    #[arg(long, default_value = "crc32c")]
    digest: DigestKind,
    /// Data a function of each spectrum's identity.
    #[arg(long)]
    checkable: bool,
    /// Stop after this many seconds.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Stop after this many integrations.
    #[arg(long)]
    integrations: Option<u64>,
    /// Producer id (hex; random if absent).
    #[arg(long, value_parser = parse_hex)]
    id: Option<u64>,
    /// Keep serving reads this long after the last integration (the last
    /// signals' spectra are still being read).
    #[arg(long, default_value_t = 0.5)]
    linger_s: f64,
    /// Do not serve consumers on this host through the mapping.
    #[arg(long)]
    no_local: bool,
    /// Do not serve consumers on other hosts.
    #[arg(long)]
    no_remote: bool,
    /// Offer consumers on other hosts RDMA reads of the ring (the RDMA
    /// device of SPLITRT_IBV_DEVICE; a build with `--features
    /// splitrt/ibverbs`).
    #[arg(long)]
    rdma: bool,
    /// Send a heartbeat when no signal left for this many ms (0: never).
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
}

fn parse_hex(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| e.to_string())
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("vys_producer: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    if !(1..=4).contains(&a.stokes) || a.antennas == 0 || a.spectral_windows == 0 || a.channels == 0
    {
        return Err("need 1..=4 stokes and at least one antenna, window and channel".into());
    }
    let key = stream_key::from_file_or_env(a.key_file.as_deref())?;
    let mut products = Vec::new();
    for i in 0..a.antennas {
        for j in i..a.antennas {
            for spw in 0..a.spectral_windows {
                for stokes in 0..a.stokes {
                    products.push(ProductId {
                        stations: [i, j],
                        spectral_window: spw,
                        stokes,
                    });
                }
            }
        }
    }
    let bytes = a.channels as usize * 8;
    let per_integration = products.len();
    let slots = match a.slots {
        Some(s) => s,
        None if a.integration_ms > 0.0 => {
            ((a.buffer_ms / a.integration_ms).ceil() as usize).max(2) * per_integration
        }
        None => 64 * per_integration,
    };
    let mut cfg = ProducerConfig::new(key, a.group, a.interface, bytes);
    cfg.channels = a.channels;
    cfg.slots = slots;
    cfg.digest = a.digest;
    cfg.spectra_per_signal = a.spectra_per_signal;
    cfg.id = a.id;
    cfg.serve_local = !a.no_local;
    cfg.serve_remote = !a.no_remote;
    cfg.rdma = a.rdma.then(RdmaDevice::hardware);
    cfg.heartbeat = (a.heartbeat_ms > 0).then(|| std::time::Duration::from_millis(a.heartbeat_ms));
    cfg.apply_settings(|k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    let mut p = Producer::new(cfg).map_err(|e| format!("starting the producer: {e}"))?;
    println!(
        "ready producer={:016x} address={} products={} spectrum_bytes={bytes} slots={slots}",
        p.id(),
        p.address(),
        per_integration
    );
    let start = Instant::now();
    let stop_at = a.duration_s.map(|s| start + Duration::from_secs_f64(s));
    let mut data = vec![0u8; bytes];
    let mut n: u64 = 0;
    let mut late = 0u64;
    loop {
        if a.integrations.is_some_and(|m| n >= m) || stop_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        n += 1;
        // timestamps: integration number (monotonic, unique per product)
        let ts = n;
        for pr in &products {
            if a.checkable {
                checkable::fill((pr.stations, pr.spectral_window, pr.stokes), ts, &mut data);
            } else {
                data[..8].copy_from_slice(&ts.to_le_bytes());
            }
            // a product's batch leaves once it holds --spectra-per-signal
            // integrations (a short time series of one product)
            p.write(*pr, &data, ts).map_err(|e| e.to_string())?;
        }
        if a.integration_ms > 0.0 {
            let due = start + Duration::from_secs_f64(n as f64 * a.integration_ms / 1e3);
            match due.checked_duration_since(Instant::now()) {
                Some(d) => std::thread::sleep(d),
                None => late += 1,
            }
        }
    }
    p.flush().map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs_f64(a.linger_s));
    let s = p.stats();
    let (served, sessions, closed) = p.server().map_or((0, 0, 0), |x| {
        use std::sync::atomic::Ordering::Relaxed;
        (
            x.stats().reads.load(Relaxed),
            x.stats().sessions.load(Relaxed),
            x.stats().closed.load(Relaxed),
        )
    });
    println!(
        "vys_producer: integrations={n} spectra={} signals={} signal_errors={} seconds={secs:.3} \
         spectra_per_s={:.0} late_integrations={late} remote_reads_served={served} sessions={sessions} \
         sessions_closed={closed}",
        s.spectra,
        s.signals,
        s.signal_errors,
        s.spectra as f64 / secs
    );
    Ok(())
}
