//! vys-spead: a bridge between SPEAD (spead2) and vys streams.
//!
//!     vys-spead ingest --listen 127.0.0.1:7148 --antennas 4 --until-stop
//!     vys-spead publish --dest 127.0.0.1:7149 --spw 0 --rate-mb-s 100
//!
//! `ingest` reassembles a SPEAD sender's heaps (MeerKAT X-engine style)
//! and writes each integration's baselines into a vys producer's ring;
//! `publish` is a vys consumer that sends each chosen spectrum as a SPEAD
//! heap with item descriptors. See docs/vys-spead.md.

use clap::{Parser, Subcommand};
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::signal::DigestKind;
use splitrt_vys::stream_key;
use splitrt_vys_spead::descriptor::{Descriptor, NumpyHeader};
use splitrt_vys_spead::encode::{encode_control, encode_heap, HeapItem, ItemValue};
use splitrt_vys_spead::heap::{Limits, Reassembler};
use splitrt_vys_spead::wire;
use splitrt_vys_spead::xeng::{self, Ingest, XengConfig};

#[path = "vys-spead/recv_batch.rs"]
mod recv_batch;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "SPEAD <-> vys bridge")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Receive a SPEAD stream's heaps and publish them into a vys producer ring.
    Ingest(IngestArgs),
    /// Consume a vys stream and send the chosen spectra as SPEAD heaps.
    Publish(PublishArgs),
}

#[derive(clap::Args, Debug)]
struct StreamArgs {
    /// Multicast group and port of the vys signals.
    #[arg(long, default_value = "239.255.42.99:47000")]
    group: SocketAddrV4,
    /// Address of the interface for the vys signals and reads.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    /// File holding the vys stream key (else $SPLITRT_VYS_KEY).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Stop after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    duration_s: f64,
    /// Print counters every this many seconds (0: only the summary).
    #[arg(long, default_value_t = 1.0)]
    stats_s: f64,
}

#[derive(clap::Args, Debug)]
struct IngestArgs {
    #[command(flatten)]
    stream: StreamArgs,
    /// UDP address to receive SPEAD packets on (port 0: any; `ready` says which).
    #[arg(long, default_value = "127.0.0.1:7148")]
    listen: SocketAddr,
    /// Name of the timestamp item.
    #[arg(long, default_value = "timestamp")]
    timestamp_name: String,
    /// Name of the visibility item ([channels, baselines, 2] int32 or [channels, baselines] complex64).
    #[arg(long, default_value = "xeng_raw")]
    data_name: String,
    /// Name of the frequency (first channel) item; its channel block is the spectral window.
    #[arg(long, default_value = "frequency")]
    frequency_name: String,
    /// Antennas: baselines in the order (0,0), (0,1), ... (0,n-1), (1,1), ...
    /// (without it: stations [0, baseline index]).
    #[arg(long)]
    antennas: Option<u16>,
    /// Spectral window of heaps without a frequency item.
    #[arg(long, default_value_t = 0)]
    spw: u16,
    /// Stokes product of every spectrum.
    #[arg(long, default_value_t = 0)]
    stokes: u16,
    /// vys producer id (random if not given).
    #[arg(long)]
    id: Option<u64>,
    /// Slots of the vys ring.
    #[arg(long, default_value_t = 4096)]
    slots: usize,
    /// Digest of each spectrum: none, crc32c, xxh3, md5.
    #[arg(long, default_value = "crc32c")]
    digest: String,
    /// Heaps reassembled at once.
    #[arg(long, default_value_t = 8)]
    max_heaps: usize,
    /// Largest heap, MiB.
    #[arg(long, default_value_t = 64)]
    max_heap_mib: usize,
    /// Bytes all heaps being reassembled may hold together, MiB (raised
    /// to --max-heap-mib if below).
    #[arg(long, default_value_t = 128)]
    max_mib_in_flight: usize,
    /// Exit at the sender's stream stop (spead2's `get_end`).
    #[arg(long)]
    until_stop: bool,
    /// Socket receive buffer, bytes.
    #[arg(long, default_value_t = 8 << 20)]
    recv_buffer: usize,
    /// Integrations of a baseline per vys signal (1..=42): 1 announces
    /// each heap's spectra at once; more send fewer signals (the last
    /// partial batches leave at a stream stop and at the end).
    #[arg(long, default_value_t = 1)]
    spectra_per_signal: usize,
    /// Keep serving reads of the ring this long after the end (consumers
    /// still reading the last heaps' spectra).
    #[arg(long, default_value_t = 0.5)]
    linger_s: f64,
}

#[derive(clap::Args, Debug)]
struct PublishArgs {
    #[command(flatten)]
    stream: StreamArgs,
    /// Where to send the SPEAD packets.
    #[arg(long)]
    dest: SocketAddr,
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
    /// Exit after this many spectra sent (0: no limit).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Largest SPEAD packet, bytes (UDP payload).
    #[arg(long, default_value_t = 1472)]
    packet_bytes: usize,
    /// Send at most this many MB/s (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    rate_mb_s: f64,
    /// Name of the data item.
    #[arg(long, default_value = "vis")]
    data_name: String,
    /// Data type of the data item: auto (complex64 if the size allows), complex64, int32, uint8.
    #[arg(long, default_value = "auto")]
    dtype: String,
    /// Send the item descriptors again every this many heaps (and on a change).
    #[arg(long, default_value_t = 64)]
    descriptors_every: u64,
    /// Largest spectrum, bytes.
    #[arg(long, default_value_t = 64 << 10)]
    max_spectrum_bytes: usize,
}

fn parse_pair(s: &str) -> Result<[u16; 2], String> {
    let (a, b) = s.split_once('-').ok_or("stations as A-B")?;
    Ok([
        a.parse().map_err(|_| "station")?,
        b.parse().map_err(|_| "station")?,
    ])
}

fn main() {
    let r = match Cli::parse().cmd {
        Cmd::Ingest(a) => ingest(a),
        Cmd::Publish(a) => publish(a),
    };
    if let Err(e) = r {
        eprintln!("vys-spead: {e}");
        std::process::exit(1);
    }
}

fn deadline(s: &StreamArgs) -> Result<Option<Instant>, String> {
    if s.duration_s == 0.0 {
        return Ok(None);
    }
    let d = Duration::try_from_secs_f64(s.duration_s).map_err(|e| format!("--duration-s: {e}"))?;
    Ok(Some(Instant::now() + d))
}

fn ready(what: &str) {
    println!("ready {what} pid={}", std::process::id());
    let _ = io::stdout().flush();
}

/// The ingest command's counters.
#[derive(Default, Debug, Clone, Copy)]
struct IngestCounts {
    published_heaps: u64,
    spectra: u64,
    descriptors: u64,
    bad_descriptors: u64,
    undescribed: u64,
    bad_layout: u64,
    other_skipped: u64,
    starts: u64,
    stops: u64,
    write_errors: u64,
}

fn ingest(a: IngestArgs) -> Result<(), String> {
    let key = stream_key::from_file_or_env(a.stream.key_file.as_deref())?;
    let digest = match a.digest.as_str() {
        "none" => DigestKind::None,
        "crc32c" => DigestKind::Crc32c,
        "xxh3" => DigestKind::Xxh3,
        "md5" => DigestKind::Md5,
        d => return Err(format!("--digest {d}: none, crc32c, xxh3 or md5")),
    };
    let end = deadline(&a.stream)?;
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(a.listen),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| e.to_string())?;
    // best effort: the kernel caps it (net.core.rmem_max)
    let _ = sock.set_recv_buffer_size(a.recv_buffer);
    sock.bind(&a.listen.into())
        .map_err(|e| format!("binding {}: {e}", a.listen))?;
    let sock: UdpSocket = sock.into();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    let limits = Limits {
        max_heaps: a.max_heaps,
        max_heap_bytes: a.max_heap_mib.saturating_mul(1 << 20),
        max_bytes_in_flight: a.max_mib_in_flight.saturating_mul(1 << 20),
        ..Limits::default()
    };
    let mut r = Reassembler::new(limits);
    let mut ing = Ingest::new(XengConfig {
        timestamp: a.timestamp_name.clone(),
        data: a.data_name.clone(),
        frequency: a.frequency_name.clone(),
        antennas: a.antennas,
        spectral_window: a.spw,
        stokes: a.stokes,
    });
    let mut producer: Option<(Producer, usize)> = None;
    let mut n = IngestCounts::default();
    let mut rx = recv_batch::Receiver::with_buffers();
    let mut spectrum = Vec::new();
    let mut tick = Instant::now();
    let mut reported_skip = 0u64;
    ready(&format!("listen={local}"));
    loop {
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        if a.stream.stats_s > 0.0 && tick.elapsed().as_secs_f64() >= a.stream.stats_s {
            println!("stats: {}", ingest_line(&r, &n));
            let _ = io::stdout().flush();
            tick = Instant::now();
        }
        let d = match rx.recv(&sock) {
            Ok(d) => d,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("receiving: {e}")),
        };
        let pushed = r.push(d);
        let Some(heap) = pushed.complete else {
            continue;
        };
        let (ok, bad) = ing.descriptors(&heap);
        n.descriptors += ok as u64;
        n.bad_descriptors += bad as u64;
        match ing.integration(&heap) {
            Ok(Some(i)) => {
                let bytes = i.spectrum_bytes();
                if producer.is_none() {
                    let mut cfg =
                        ProducerConfig::new(key, a.stream.group, a.stream.interface, bytes);
                    cfg.slots = a.slots;
                    cfg.digest = digest;
                    cfg.id = a.id;
                    cfg.channels = i.channels as u32;
                    cfg.spectra_per_signal = a.spectra_per_signal.clamp(1, 42);
                    cfg.apply_settings(|k| std::env::var(k).ok())
                        .map_err(|e| e.to_string())?;
                    let p = Producer::new(cfg).map_err(|e| format!("vys producer: {e}"))?;
                    println!(
                        "producer id={:016x} spectrum_bytes={bytes} channels={}",
                        p.id(),
                        i.channels
                    );
                    producer = Some((p, bytes));
                }
                let (p, p_bytes) = producer.as_mut().expect("made above");
                if bytes != *p_bytes {
                    n.bad_layout += 1;
                    continue;
                }
                for (b, pair) in xeng::baseline_pairs(a.antennas, i.baselines).enumerate() {
                    let Some(stations) = pair else {
                        break;
                    };
                    i.spectrum(b, &mut spectrum);
                    let product = ProductId {
                        stations,
                        spectral_window: i.spectral_window,
                        stokes: a.stokes,
                    };
                    match p.write(product, &spectrum, i.timestamp) {
                        Ok(_) => n.spectra += 1,
                        Err(_) => n.write_errors += 1,
                    }
                }
                n.published_heaps += 1;
            }
            Ok(None) => {}
            Err(e) => {
                match e {
                    xeng::Skip::Undescribed => n.undescribed += 1,
                    xeng::Skip::BadLayout(_) => n.bad_layout += 1,
                    _ => n.other_skipped += 1,
                }
                let skipped = n.undescribed + n.bad_layout + n.other_skipped;
                if skipped.is_power_of_two() && skipped != reported_skip {
                    reported_skip = skipped;
                    eprintln!("vys-spead ingest: heap {} not published: {e}", heap.cnt);
                }
            }
        }
        if heap.control() == Some(wire::CTRL_STREAM_START) {
            n.starts += 1;
        }
        if heap.control() == Some(wire::CTRL_STREAM_STOP) {
            n.stops += 1;
            r.flush();
            if let Some((p, _)) = producer.as_mut() {
                let _ = p.flush();
            }
            if a.until_stop {
                break;
            }
        }
    }
    r.flush();
    if let Some((p, _)) = producer.as_mut() {
        let _ = p.flush();
    }
    println!("summary: {}", ingest_line(&r, &n));
    let _ = io::stdout().flush();
    // consumers still reading the ring (across hosts: through its read
    // server) get `--linger-s` before it goes
    if producer.is_some() {
        let linger =
            Duration::try_from_secs_f64(a.linger_s).map_err(|e| format!("--linger-s: {e}"))?;
        std::thread::sleep(linger);
    }
    Ok(())
}

fn ingest_line(r: &Reassembler, n: &IngestCounts) -> String {
    let s = r.stats();
    format!(
        "packets={} malformed={} duplicates={} refused={} heaps={} incomplete={} \
         published_heaps={} spectra={} descriptors={} bad_descriptors={} undescribed={} \
         bad_layout={} other_skipped={} starts={} stops={} write_errors={}",
        s.packets,
        s.malformed,
        s.duplicates,
        s.refused,
        s.heaps,
        s.incomplete,
        n.published_heaps,
        n.spectra,
        n.descriptors,
        n.bad_descriptors,
        n.undescribed,
        n.bad_layout,
        n.other_skipped,
        n.starts,
        n.stops,
        n.write_errors
    )
}

/// Item ids of the heaps `publish` sends (docs/vys-spead.md).
mod ids {
    pub const TIMESTAMP: u16 = 0x1600;
    pub const STATION0: u16 = 0x1601;
    pub const STATION1: u16 = 0x1602;
    pub const SPECTRAL_WINDOW: u16 = 0x1603;
    pub const STOKES: u16 = 0x1604;
    pub const PRODUCER: u16 = 0x1605;
    pub const DATA: u16 = 0x1800;
}

fn scalar_desc(id: u16, name: &str, description: &str, bits: u32) -> Vec<u8> {
    Descriptor {
        id,
        name: name.into(),
        description: description.into(),
        shape: Vec::new(),
        format: vec![(b'u', bits)],
        numpy_header: None,
    }
    .encode()
}

/// The descriptors of a heap whose data item is `bytes` long.
fn descriptors(a: &PublishArgs, bytes: usize) -> Result<Vec<Vec<u8>>, String> {
    let (descr, shape): (&str, Vec<u64>) = match (a.dtype.as_str(), bytes.is_multiple_of(8)) {
        ("auto" | "complex64", true) => ("<c8", vec![bytes as u64 / 8]),
        ("int32", true) => ("<i4", vec![bytes as u64 / 8, 2]),
        ("auto" | "uint8", _) => ("|u1", vec![bytes as u64]),
        (t, _) => return Err(format!("--dtype {t} for a spectrum of {bytes} B")),
    };
    let data = Descriptor {
        id: ids::DATA,
        name: a.data_name.clone(),
        description: "one vys spectrum".into(),
        shape: shape.iter().map(|&x| Some(x)).collect(),
        format: Vec::new(),
        numpy_header: Some(NumpyHeader::format(descr, &shape)),
    };
    Ok(vec![
        scalar_desc(
            ids::TIMESTAMP,
            "timestamp",
            "vys timestamp of the spectrum",
            64,
        ),
        scalar_desc(
            ids::STATION0,
            "station0",
            "first station of the baseline",
            48,
        ),
        scalar_desc(
            ids::STATION1,
            "station1",
            "second station of the baseline",
            48,
        ),
        scalar_desc(
            ids::SPECTRAL_WINDOW,
            "spectral_window",
            "spectral window",
            48,
        ),
        scalar_desc(ids::STOKES, "stokes", "stokes (polarization) product", 48),
        scalar_desc(ids::PRODUCER, "producer", "vys producer id", 64),
        data.encode(),
    ])
}

fn publish(a: PublishArgs) -> Result<(), String> {
    let key = stream_key::from_file_or_env(a.stream.key_file.as_deref())?;
    let end = deadline(&a.stream)?;
    let mut cfg = ConsumerConfig::new(key, a.stream.group, a.stream.interface);
    cfg.max_spectrum_bytes = a.max_spectrum_bytes;
    cfg.apply_settings(|k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    let (stations, spw, stokes, every) = (a.stations, a.spw, a.stokes, a.every.max(1));
    let mut seen = 0u64;
    let c = Consumer::start(cfg, move |p, _infos, pass| {
        if stations.is_none_or(|s| s == p.stations)
            && spw.is_none_or(|x| x == p.spectral_window)
            && stokes.is_none_or(|s| s == p.stokes)
        {
            for x in pass.iter_mut() {
                *x = seen.is_multiple_of(every);
                seen += 1;
            }
        }
    })
    .map_err(|e| format!("joining the vys stream: {e}"))?;
    let bind: SocketAddr = if a.dest.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let sock = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    sock.connect(a.dest)
        .map_err(|e| format!("{}: {e}", a.dest))?;
    let rate = (a.rate_mb_s > 0.0).then_some(a.rate_mb_s * 1e6);
    let start = Instant::now();
    let mut sent_bytes = 0f64;
    let mut send = |packets: &mut Vec<Vec<u8>>, sent: &mut u64| -> Result<(), String> {
        for p in packets.drain(..) {
            if let Some(r) = rate {
                let due = start + Duration::from_secs_f64(sent_bytes / r);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            match sock.send(&p) {
                Ok(_) => {}
                // nobody listening yet (ICMP port unreachable): counted as sent
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(format!("sending to {}: {e}", a.dest)),
            }
            sent_bytes += p.len() as f64;
            *sent += 1;
        }
        Ok(())
    };
    ready(&format!("dest={}", a.dest));
    let (mut cnt, mut spectra, mut packets_sent, mut other) = (1u64, 0u64, 0u64, 0u64);
    let mut described: Option<usize> = None;
    let mut since_desc = 0u64;
    // (producer, instance, epoch) of the stream description sent last
    let mut sent_description: Option<(u64, u64, u32)> = None;
    let mut packets = Vec::new();
    let mut tick = Instant::now();
    let mut stopping = false;
    loop {
        if !stopping
            && (end.is_some_and(|e| Instant::now() >= e) || (a.count > 0 && spectra >= a.count))
        {
            c.shutdown();
            stopping = true;
        }
        if a.stream.stats_s > 0.0 && tick.elapsed().as_secs_f64() >= a.stream.stats_s {
            println!(
                "stats: spectra={spectra} heaps={} packets={packets_sent} other_messages={other}",
                cnt - 1
            );
            let _ = io::stdout().flush();
            tick = Instant::now();
        }
        let Some(m) = c.recv(Duration::from_millis(50)) else {
            continue;
        };
        let s = match m {
            Message::Valid(s) => s,
            Message::End { stats, .. } => {
                println!("consumer: {stats:?}");
                break;
            }
            m => {
                other += 1;
                if other <= 20 {
                    eprintln!("vys-spead publish: {m}");
                }
                continue;
            }
        };
        if stopping && a.count > 0 && spectra >= a.count {
            continue;
        }
        let data = s.data();
        let p = &s.product;
        let descs = if described != Some(data.len()) || since_desc + 1 >= a.descriptors_every.max(1)
        {
            since_desc = 0;
            described = Some(data.len());
            descriptors(&a, data.len())?
        } else {
            since_desc += 1;
            Vec::new()
        };
        // the stream description the spectrum belongs to, as items: with
        // the heap when it is not the one sent last, and with the
        // descriptors' refresh (docs/vys-spead.md)
        let d_items = match &p.description {
            Some(d)
                if !descs.is_empty()
                    || sent_description != Some((p.producer, p.instance, p.description_epoch)) =>
            {
                sent_description = Some((p.producer, p.instance, p.description_epoch));
                Some(splitrt_vys_spead::described::items(d))
            }
            _ => None,
        };
        let epoch_desc = splitrt_vys_spead::described::epoch_descriptor();
        let ts = s.info.timestamp.to_be_bytes();
        let producer = p.producer.to_be_bytes();
        let mut items: Vec<HeapItem<'_>> = descs
            .iter()
            .map(|d| HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(d)))
            .collect();
        if p.description_epoch != 0 {
            if !descs.is_empty() || d_items.is_some() {
                items.push(HeapItem::new(
                    wire::DESCRIPTOR_ID,
                    ItemValue::Bytes(&epoch_desc),
                ));
            }
            items.push(HeapItem::new(
                splitrt_vys_spead::described::ids::DESCRIPTION_EPOCH,
                ItemValue::Immediate(u64::from(p.description_epoch)),
            ));
        }
        if let Some(d) = &d_items {
            items.extend(
                d.descriptors
                    .iter()
                    .map(|x| HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(x))),
            );
            items.extend(
                d.values
                    .iter()
                    .map(|(id, v)| HeapItem::new(*id, ItemValue::Bytes(v))),
            );
            items.extend(
                d.immediates
                    .iter()
                    .map(|(id, v)| HeapItem::new(*id, ItemValue::Immediate(*v))),
            );
        }
        items.extend([
            HeapItem::new(ids::TIMESTAMP, ItemValue::Bytes(&ts)),
            HeapItem::new(
                ids::STATION0,
                ItemValue::Immediate(u64::from(p.stations[0])),
            ),
            HeapItem::new(
                ids::STATION1,
                ItemValue::Immediate(u64::from(p.stations[1])),
            ),
            HeapItem::new(
                ids::SPECTRAL_WINDOW,
                ItemValue::Immediate(u64::from(p.spectral_window)),
            ),
            HeapItem::new(ids::STOKES, ItemValue::Immediate(u64::from(p.stokes))),
            HeapItem::new(ids::PRODUCER, ItemValue::Bytes(&producer)),
            HeapItem::new(ids::DATA, ItemValue::Bytes(data)),
        ]);
        encode_heap(cnt, &items, a.packet_bytes, &mut packets).map_err(|e| e.to_string())?;
        cnt += 1;
        spectra += 1;
        send(&mut packets, &mut packets_sent)?;
    }
    encode_control(cnt, wire::CTRL_STREAM_STOP, a.packet_bytes, &mut packets)
        .map_err(|e| e.to_string())?;
    send(&mut packets, &mut packets_sent)?;
    println!(
        "summary: spectra={spectra} heaps={} packets={packets_sent} other_messages={other}",
        cnt - 1
    );
    let _ = io::stdout().flush();
    Ok(())
}
