//! The producer's library API: the application writes spectra; the
//! producer puts them in its ring, batches their announcements per data
//! product into signal messages, and serves reads by its own threads (a
//! handover socket for consumers on this host, a read server for those
//! across hosts). The application never waits for a consumer, and no
//! consumer can slow it or make it fail: the ring has only a write
//! pointer, and the serving threads only ever read it.
//!
//! **Instances and heartbeats.** Each `Producer::new` draws a random
//! instance number, which every signal carries and the handover and the
//! read server prove: a consumer reads a signal only from the ring of the
//! instance that sent it, so a producer restarted with the same id is a
//! new producer to its consumers. While the application sends no signal
//! for [`ProducerConfig::heartbeat`], the producer's own thread sends a
//! heartbeat (a signal with no entries), so consumers can tell a dead
//! producer (silent past their `producer_silence`) from a quiet one.
//!
//! ```no_run
//! use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! let cfg = ProducerConfig::new(
//!     [7u8; 32], // the operator's stream key
//!     SocketAddrV4::new(Ipv4Addr::new(239, 255, 42, 99), 47000),
//!     Ipv4Addr::LOCALHOST,
//!     8192, // bytes per spectrum
//! );
//! let mut p = Producer::new(cfg).unwrap();
//! let product = ProductId { stations: [1, 2], spectral_window: 0, stokes: 0 };
//! p.write(product, &vec![0u8; 8192], 1_700_000_000_000).unwrap();
//! p.flush().unwrap();
//! ```

use super::description::StreamDescription;
use super::export::{ExportedRing, HandoverServer};
use super::rdma_device::RdmaDevice;
use super::read_server::ReadServer;
use super::ring::{slot_bytes, write_slot};
use super::signal::{DigestKind, Signal, SpectrumInfo, MAX_ENTRIES};
use super::transport::SignalSender;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One data product: what a signal message describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProductId {
    /// Station (antenna) pair.
    pub stations: [u16; 2],
    /// Spectral window.
    pub spectral_window: u16,
    /// Stokes (polarization) product.
    pub stokes: u16,
}

/// A producer's settings.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// The stream key (from the operator; consumers hold the same).
    pub key: [u8; 32],
    /// Multicast group signals go to (`None`: none; the application takes
    /// them with [`Producer::take_signals`] and sends them itself, e.g. by
    /// Active Message to ranks of its job).
    pub group: Option<SocketAddrV4>,
    /// Keep every signal (encoded) for [`Producer::take_signals`] too.
    pub queue_signals: bool,
    /// Address of the interface signals leave by and reads are served on.
    pub interface: Ipv4Addr,
    /// Bytes of every spectrum.
    pub spectrum_bytes: usize,
    /// Channels per spectrum (announced; the data's meaning).
    pub channels: u32,
    /// Spectra the ring holds (its buffer duration is this many
    /// integrations).
    pub slots: usize,
    /// Digest announced with each spectrum.
    pub digest: DigestKind,
    /// Spectra of one product per signal message (1..=42).
    pub spectra_per_signal: usize,
    /// Correlator configuration id (announced).
    pub config: u64,
    /// Producer id (random if `None`).
    pub id: Option<u64>,
    /// Serve consumers on this host (read-only handover of the ring).
    pub serve_local: bool,
    /// Serve consumers on other hosts (the read server).
    pub serve_remote: bool,
    /// Also offer consumers on other hosts RDMA reads of the ring over
    /// this device (their queue pairs come through the read server's
    /// handshake; needs `serve_remote`). [`Producer::new`] fails if the
    /// device cannot be opened or the ring not registered.
    pub rdma: Option<RdmaDevice>,
    /// Send a heartbeat (a signal with no entries) when no signal left
    /// for this long (`None`: never; consumers then take an idle producer
    /// for a gone one after their `producer_silence`). To the group by
    /// the producer's own thread; with `queue_signals`, also into
    /// [`Producer::take_signals`] when it is called and one is due.
    pub heartbeat: Option<Duration>,
    /// The largest datagram (UDP payload, bytes, 512..=65507) the read
    /// server sends; a consumer that takes less gets less. Default
    /// [`DEFAULT_DATAGRAM`](super::read_proto::DEFAULT_DATAGRAM), the
    /// largest: the consumer's ask decides (its setting lowered to its
    /// route's MTU), so datagrams are never IP-fragmented on links the
    /// hosts see. Setting
    /// `SPLITRT_VYS_DATAGRAM` ([`apply_settings`](Self::apply_settings)).
    pub datagram_bytes: usize,
    /// The stream description sent from the start (`None`: none until
    /// [`Producer::set_description`]). [`Producer::new`] fails if it does
    /// not encode ([`StreamDescription::check`]).
    pub description: Option<StreamDescription>,
    /// The description is sent again (in a signal of its own) when it was
    /// last sent this long ago, so a consumer that joins late learns it;
    /// an idle producer's heartbeats carry it too.
    pub description_every: Duration,
    /// Read-server threads (1..=[`MAX_READ_THREADS`](super::read_server::MAX_READ_THREADS);
    /// one with `rdma`): the consumers of this producer are served in
    /// parallel, each by one thread. Default: 1 (one consumer is served
    /// by one thread however many there are; raise it for producers that
    /// many consumers read at once). Setting `SPLITRT_VYS_READ_THREADS`
    /// ([`apply_settings`](Self::apply_settings)).
    pub read_threads: usize,
}

impl ProducerConfig {
    /// Take the settings `get` gives (e.g. `|k| std::env::var(k).ok()`):
    /// [`ENV_DATAGRAM`](super::read_proto::ENV_DATAGRAM) into
    /// `datagram_bytes`, [`ENV_READ_THREADS`](super::read_threads::ENV_READ_THREADS)
    /// into `read_threads`. An error names the bad setting.
    pub fn apply_settings(&mut self, get: impl Fn(&str) -> Option<String>) -> io::Result<()> {
        if let Some(n) = super::read_proto::datagram_setting(&get)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
        {
            self.datagram_bytes = n;
        }
        if let Some(n) = super::read_threads::threads_setting(&get)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
        {
            self.read_threads = n;
        }
        Ok(())
    }

    /// Settings with defaults: 1024 slots, CRC-32C, 8 spectra per signal,
    /// both kinds of reads served, a heartbeat every second when idle.
    pub fn new(
        key: [u8; 32],
        group: SocketAddrV4,
        interface: Ipv4Addr,
        spectrum_bytes: usize,
    ) -> ProducerConfig {
        ProducerConfig {
            key,
            group: Some(group),
            queue_signals: false,
            interface,
            spectrum_bytes,
            channels: (spectrum_bytes / 8) as u32,
            slots: 1024,
            digest: DigestKind::Crc32c,
            spectra_per_signal: 8,
            config: 0,
            id: None,
            serve_local: true,
            serve_remote: true,
            rdma: None,
            heartbeat: Some(Duration::from_secs(1)),
            datagram_bytes: super::read_proto::DEFAULT_DATAGRAM,
            description: None,
            description_every: Duration::from_secs(1),
            read_threads: super::read_threads::default_threads(),
        }
    }
}

/// Counters of a producer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Spectra written.
    pub spectra: u64,
    /// Signal messages sent.
    pub signals: u64,
    /// Signal messages the network refused (counted, not retried:
    /// signals are datagrams), or dropped from a full
    /// [`Producer::take_signals`] queue.
    pub signal_errors: u64,
    /// Heartbeats sent (signals with no entries, when idle).
    pub heartbeats: u64,
    /// Signals sent to carry the stream description (at start, on change
    /// and every `description_every`; heartbeats carrying it not counted).
    pub descriptions: u64,
}

/// What the producer shares with its heartbeat thread.
struct Beat {
    /// The last signal sequence number given out.
    sequence: AtomicU64,
    /// When the last signal left (ns since `t0`).
    last: AtomicU64,
    t0: Instant,
    heartbeats: AtomicU64,
    stop: AtomicBool,
    /// The description in force and its epoch (heartbeats carry them).
    description: Mutex<Option<Arc<StreamDescription>>>,
    epoch: AtomicU32,
}

impl Beat {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Whether a heartbeat is due (no signal for `every`); if so, it is
    /// counted as sent now.
    fn due(&self, every: Duration) -> bool {
        let now = self.now();
        let last = self.last.load(Ordering::Relaxed);
        if now.saturating_sub(last) < every.as_nanos() as u64 {
            return false;
        }
        self.last.store(now, Ordering::Relaxed);
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The next signal sequence number.
    fn next(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The heartbeat thread: while the producer lives, a heartbeat to the
/// group whenever no signal left for `every`.
fn heartbeats(beat: &Beat, every: Duration, sender: &SignalSender, key: &[u8; 32], mut s: Signal) {
    let mut b = Vec::new();
    while !beat.stop.load(Ordering::Acquire) {
        if beat.due(every) {
            s.sequence = beat.next();
            s.description = beat.description.lock().clone();
            s.description_epoch = beat.epoch.load(Ordering::Relaxed);
            s.encode_into(key, &mut b);
            let _ = sender.send_bytes(&b);
        }
        let since = beat.now().saturating_sub(beat.last.load(Ordering::Relaxed));
        let wait = (every.as_nanos() as u64).saturating_sub(since);
        std::thread::park_timeout(Duration::from_nanos(wait.max(1_000_000)));
    }
}

/// A vys producer.
pub struct Producer {
    cfg: ProducerConfig,
    id: u64,
    /// This instance (random) and its start (ns since the epoch).
    instance: u64,
    started: u64,
    /// Sequence numbers and the heartbeat's clock.
    beat: Arc<Beat>,
    heart: Option<JoinHandle<()>>,
    ring: Arc<ExportedRing>,
    next: u64,
    sender: Option<Arc<SignalSender>>,
    queued: Vec<Vec<u8>>,
    /// The last signal encoded (its allocation reused).
    encoded: Vec<u8>,
    server: Option<ReadServer>,
    handover: Option<HandoverServer>,
    address: SocketAddr,
    batches: FxHashMap<ProductId, Vec<SpectrumInfo>>,
    stats: ProducerStats,
    /// When the description was last sent (`None`: not yet).
    description_sent: Option<Instant>,
}

impl Producer {
    /// Create the ring, the signal sender and the serving threads.
    pub fn new(cfg: ProducerConfig) -> io::Result<Producer> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if cfg.spectrum_bytes == 0 || cfg.spectrum_bytes > super::read_proto::MAX_READ - 24 {
            return Err(bad(format!("spectrum of {} B", cfg.spectrum_bytes)));
        }
        if cfg.slots < 2 {
            return Err(bad(format!("a ring of {} slots (at least 2)", cfg.slots)));
        }
        super::read_proto::check_datagram("ProducerConfig::datagram_bytes", cfg.datagram_bytes)
            .map_err(bad)?;
        if !(1..=MAX_ENTRIES).contains(&cfg.spectra_per_signal) {
            return Err(bad(format!(
                "{} spectra per signal (1..={MAX_ENTRIES})",
                cfg.spectra_per_signal
            )));
        }
        let random = || {
            let mut b = [0u8; 8];
            getrandom::getrandom(&mut b).map_err(|e| io::Error::other(e.to_string()))?;
            Ok::<u64, io::Error>(u64::from_le_bytes(b))
        };
        let id = match cfg.id {
            Some(i) => i,
            None => random()?,
        };
        let instance = random()?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let len = cfg
            .slots
            .checked_mul(slot_bytes(cfg.spectrum_bytes))
            .ok_or_else(|| bad("ring size overflows".into()))?;
        let ring = Arc::new(ExportedRing::new(len)?);
        let sender = match cfg.group {
            Some(g) => Some(Arc::new(SignalSender::new(g, cfg.interface, cfg.key)?)),
            None => None,
        };
        if let Some(d) = &cfg.description {
            d.check().map_err(|e| bad(e.to_string()))?;
        }
        if cfg.heartbeat.is_some_and(|h| h.is_zero()) {
            return Err(bad("a heartbeat interval of 0".into()));
        }
        if cfg.rdma.is_some() && !cfg.serve_remote {
            return Err(bad(
                "RDMA reads are offered through the read server: set serve_remote too".into(),
            ));
        }
        let rdma = match &cfg.rdma {
            Some(dev) => Some(dev.open("producer", len as u64)?),
            None => None,
        };
        let server = if cfg.serve_remote {
            Some(ReadServer::start_threads(
                SocketAddr::new(IpAddr::V4(cfg.interface), 0),
                ring.clone(),
                id,
                instance,
                cfg.key,
                rdma,
                cfg.datagram_bytes,
                cfg.read_threads,
            )?)
        } else {
            None
        };
        let address = server
            .as_ref()
            .map_or(SocketAddr::new(IpAddr::V4(cfg.interface), 0), |s| s.addr());
        let handover = if cfg.serve_local {
            Some(HandoverServer::start(ring.clone(), cfg.key, id, instance)?)
        } else {
            None
        };
        let beat = Arc::new(Beat {
            sequence: AtomicU64::new(0),
            last: AtomicU64::new(0),
            t0: Instant::now(),
            heartbeats: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            description: Mutex::new(None),
            epoch: AtomicU32::new(0),
        });
        let mut p = Producer {
            id,
            instance,
            started,
            beat,
            heart: None,
            ring,
            next: 1,
            sender,
            queued: Vec::new(),
            encoded: Vec::new(),
            server,
            handover,
            address,
            batches: FxHashMap::default(),
            stats: ProducerStats::default(),
            description_sent: None,
            cfg,
        };
        if let Some(d) = p.cfg.description.take() {
            p.set_description(d)?;
        }
        if let (Some(every), Some(tx)) = (p.cfg.heartbeat, p.sender.clone()) {
            let (b, key, s) = (p.beat.clone(), p.cfg.key, p.heartbeat_signal());
            p.heart = Some(
                std::thread::Builder::new()
                    .name("vys-heartbeat".into())
                    .spawn(move || heartbeats(&b, every, &tx, &key, s))?,
            );
        }
        Ok(p)
    }

    /// This producer's instance (random, drawn at its start; in every
    /// signal, proved by its handover and its read server).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// A heartbeat of this instance (its sequence number still to set).
    fn heartbeat_signal(&self) -> Signal {
        Signal {
            digest: self.cfg.digest,
            channels: 0,
            producer: self.id,
            address: self.address,
            stations: [0, 0],
            spectral_window: 0,
            stokes: 0,
            config: self.cfg.config,
            spectrum_bytes: self.cfg.spectrum_bytes as u32,
            instance: self.instance,
            started: self.started,
            sequence: 0,
            entries: Vec::new(),
            description_epoch: self.beat.epoch.load(Ordering::Relaxed),
            description: None,
        }
    }

    /// This producer's id (in every signal).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Where its read server listens (in every signal).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Counters so far.
    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            heartbeats: self.beat.heartbeats.load(Ordering::Relaxed),
            ..self.stats
        }
    }

    /// The handover server (consumers on this host), if it serves them.
    pub fn handover(&self) -> Option<&HandoverServer> {
        self.handover.as_ref()
    }

    /// The read server's counters, if it serves remote reads.
    pub fn server(&self) -> Option<&ReadServer> {
        self.server.as_ref()
    }

    /// Write one spectrum of `product` (exactly `spectrum_bytes` long)
    /// into the ring; its announcement joins the product's batch, which
    /// leaves as a signal once it holds `spectra_per_signal` spectra.
    /// Never waits for a consumer; an error only if the signal could not
    /// be sent at all.
    pub fn write(
        &mut self,
        product: ProductId,
        data: &[u8],
        timestamp: u64,
    ) -> io::Result<SpectrumInfo> {
        if data.len() != self.cfg.spectrum_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a spectrum of {} B, this producer's are {} B",
                    data.len(),
                    self.cfg.spectrum_bytes
                ),
            ));
        }
        let seq = self.next;
        self.next += 1;
        let info = write_slot(
            self.ring.words(),
            self.cfg.spectrum_bytes,
            self.cfg.slots,
            seq,
            data,
            timestamp,
            self.cfg.digest,
        );
        self.stats.spectra += 1;
        let b = self.batches.entry(product).or_default();
        b.push(info);
        if b.len() >= self.cfg.spectra_per_signal {
            self.send(product);
        }
        Ok(info)
    }

    /// Send every partial batch now.
    pub fn flush(&mut self) -> io::Result<()> {
        let due: Vec<ProductId> = self
            .batches
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.send(p);
        }
        Ok(())
    }

    /// The signal a batch makes; it takes the next sequence number of this
    /// producer instance (consumers take each number once).
    pub fn signal(&mut self, product: ProductId, entries: Vec<SpectrumInfo>) -> Signal {
        Signal {
            digest: self.cfg.digest,
            channels: self.cfg.channels,
            producer: self.id,
            address: self.address,
            stations: product.stations,
            spectral_window: product.spectral_window,
            stokes: product.stokes,
            config: self.cfg.config,
            spectrum_bytes: self.cfg.spectrum_bytes as u32,
            instance: self.instance,
            started: self.started,
            sequence: self.beat.next(),
            entries,
            description_epoch: self.beat.epoch.load(Ordering::Relaxed),
            description: None,
        }
    }

    /// The signals kept since the last call (with `queue_signals`), each
    /// one encoded and signed, ready to send by other means (an Active
    /// Message's payload, say; a consumer takes it through its
    /// [`injector`](super::consumer::Consumer::injector)). A heartbeat
    /// joins them if one is due (see [`ProducerConfig::heartbeat`]).
    pub fn take_signals(&mut self) -> Vec<Vec<u8>> {
        if let Some(every) = self.cfg.heartbeat {
            if self.cfg.queue_signals && self.queued.is_empty() && self.beat.due(every) {
                let mut s = self.heartbeat_signal();
                s.sequence = self.beat.next();
                s.description = self.beat.description.lock().clone();
                self.queued.push(s.encode(&self.cfg.key));
            }
        }
        std::mem::take(&mut self.queued)
    }

    /// Send `product`'s batch as one signal; the batch's and the encoding's
    /// allocations are kept for the next one.
    fn send(&mut self, product: ProductId) {
        let Some(batch) = self.batches.get_mut(&product) else {
            return;
        };
        let entries = std::mem::take(batch);
        if self
            .description_sent
            .is_some_and(|t| t.elapsed() >= self.cfg.description_every)
        {
            self.send_description();
        }
        let s = self.signal(product, entries);
        s.encode_into(&self.cfg.key, &mut self.encoded);
        let mut entries = s.entries;
        entries.clear();
        self.beat.last.store(self.beat.now(), Ordering::Relaxed);
        if let Some(batch) = self.batches.get_mut(&product) {
            *batch = entries;
        }
        self.emit();
    }

    /// Send (and queue) the signal in `encoded`.
    fn emit(&mut self) {
        if let Some(tx) = &self.sender {
            match tx.send_bytes(&self.encoded) {
                Ok(()) => self.stats.signals += 1,
                Err(_) => self.stats.signal_errors += 1,
            }
        }
        if self.cfg.queue_signals {
            if self.queued.len() < MAX_QUEUED_SIGNALS {
                self.queued.push(self.encoded.clone());
                if self.sender.is_none() {
                    self.stats.signals += 1;
                }
            } else {
                self.stats.signal_errors += 1;
            }
        }
    }
}

impl Producer {
    /// Set the stream description (what the spectra mean): it takes the
    /// next epoch, which every signal from now on names, and leaves at
    /// once in a signal of its own (then every
    /// [`ProducerConfig::description_every`], and with heartbeats), so
    /// consumers have it before the spectra it describes. Spectra still
    /// in partial batches are sent first, under the epoch they were
    /// written in. Returns the new epoch; an error (and nothing changed)
    /// if the description does not encode ([`StreamDescription::check`]).
    ///
    /// ```no_run
    /// # use splitrt_vys::producer::{Producer, ProducerConfig};
    /// use splitrt_vys::description::*;
    /// # let cfg = ProducerConfig::new([7; 32], "239.255.42.99:47000".parse().unwrap(),
    /// #     std::net::Ipv4Addr::LOCALHOST, 8192);
    /// let mut p = Producer::new(cfg).unwrap();
    /// let epoch = p
    ///     .set_description(StreamDescription {
    ///         data_type: DataType::Complex64,
    ///         channels: 1024,
    ///         frequencies: Frequencies::Linear { first_hz: 1.0e9, width_hz: 125e3 },
    ///         polarizations: vec![Polarization::RR],
    ///         baseband: 0,
    ///         subband: 0,
    ///         config_name: "TRSG0001".into(),
    ///         time_epoch: TimeEpoch::Unix,
    ///         time_unit: TimeUnit::Nanoseconds,
    ///         integration_ns: 10_000_000,
    ///     })
    ///     .unwrap();
    /// assert_eq!(epoch, 1);
    /// ```
    pub fn set_description(&mut self, d: StreamDescription) -> io::Result<u32> {
        d.check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        self.flush()?;
        let epoch = match self.beat.epoch.load(Ordering::Relaxed).wrapping_add(1) {
            0 => 1,
            e => e,
        };
        *self.beat.description.lock() = Some(Arc::new(d));
        self.beat.epoch.store(epoch, Ordering::Relaxed);
        self.send_description();
        Ok(epoch)
    }

    /// The stream description in force and its epoch, if one was set.
    pub fn description(&self) -> Option<(u32, Arc<StreamDescription>)> {
        let d = self.beat.description.lock().clone()?;
        Some((self.beat.epoch.load(Ordering::Relaxed), d))
    }

    /// Send the description in force in a signal of its own (no entries).
    fn send_description(&mut self) {
        let Some(d) = self.beat.description.lock().clone() else {
            return;
        };
        let mut s = self.heartbeat_signal();
        s.sequence = self.beat.next();
        s.description = Some(d);
        s.encode_into(&self.cfg.key, &mut self.encoded);
        self.beat.last.store(self.beat.now(), Ordering::Relaxed);
        self.description_sent = Some(Instant::now());
        self.stats.descriptions += 1;
        self.emit();
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.flush();
        self.beat.stop.store(true, Ordering::Release);
        if let Some(t) = self.heart.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.handover.take();
        self.server.take();
    }
}

/// Signals kept for [`Producer::take_signals`] at most (an application
/// that never takes them loses the newest, counted in `signal_errors`).
const MAX_QUEUED_SIGNALS: usize = 4096;
