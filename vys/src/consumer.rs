//! The consumer's library API, shaped like vysmaw: a filter callback
//! chooses spectra per signal message; chosen spectra are read one-sided
//! and validated; every outcome arrives on a queue as a [`Message`], and
//! [`Message::End`] is always the last.
//!
//! A consumer is an independent process that may start and stop at any
//! time. It learns producers from their signals and connects on demand:
//! a read-only mapping of the producer's ring if the producer is on this
//! host (its handover socket answers), else a read session with the
//! producer's read server; with [`ConsumerConfig::rdma`] set, that
//! session's handshake also connects a queue pair to the producer's and
//! spectra are then read by RDMA read ([`super::rdma_read`]), the
//! producer's CPU not involved (a producer without RDMA is read through
//! its read server as before). One thread does all of it: it receives
//! signals, dispatches each to the filter (as an Active Message reaches
//! its handler), starts reads (a bounded number outstanding per producer,
//! into a bounded pool of data buffers) and delivers outcomes. It never
//! waits for the application: when the queue is full, messages are
//! dropped and a [`Message::QueueAlert`] says how many of which kinds.
//! Loss reports ([`Message::DataBufferStarvation`],
//! [`Message::SignalBufferStarvation`], the alerts) are never dropped:
//! places are kept for reports beyond the queue's bound, and past those a
//! count is added to the newest queued report of its kind.
//!
//! **Replays.** Each signal carries its producer instance (drawn at each
//! producer start) and its number among that instance's signals, under
//! the stream key's tag. The consumer takes each number of an instance
//! once (a sliding window of 1024 numbers per instance, 4 instances per
//! producer id, the newest by start time, 4096 producer ids) and drops
//! the rest, counted in [`ConsumerStats::replays`]: signals recorded from
//! the group and sent again, by anyone, never make a spectrum delivered
//! twice.
//!
//! **Producer instances.** A producer restarted with the same id (the
//! usual case: a correlator node keeps its id) is a new instance, and a
//! new producer to the consumer: on the first signal of a newer instance
//! (by start time) the consumer drops the old instance's route (its
//! mapping unmapped, its session closed, its reads in flight failed) and
//! reads the new one's spectra from the new ring or read server, which
//! prove their instance when the ring is handed over or the session
//! opened. A signal is read only through a route of its own instance, so
//! a spectrum is valid only if its bytes are the ones the announcing
//! instance wrote, whatever the digest (`none` included). Signals of an
//! instance older than the newest heard of are not read
//! ([`Message::ReadFailure`] for the spectra chosen).
//!
//! **Gone producers.** A producer instance not heard of (no signal, no
//! heartbeat) for [`ConsumerConfig::producer_silence`] is reported
//! ([`Message::ProducerGone`]) and forgotten: its ring unmapped, its
//! session closed. The rings mapped at once are bounded
//! ([`ConsumerConfig::max_mapped_bytes`]): a producer whose ring would
//! pass the bound is read through its read server instead, and
//! [`Message::MappedBytesLimit`] says so.
//!
//! ```no_run
//! use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use std::time::Duration;
//! let cfg = ConsumerConfig::new(
//!     [7u8; 32],
//!     SocketAddrV4::new(Ipv4Addr::new(239, 255, 42, 99), 47000),
//!     Ipv4Addr::LOCALHOST,
//! );
//! // every spectrum of spectral window 0
//! let c = Consumer::start(cfg, |p, _infos, pass| pass.fill(p.spectral_window == 0)).unwrap();
//! c.shutdown();
//! while let Some(m) = c.recv(Duration::from_secs(5)) {
//!     match m {
//!         Message::Valid(s) => println!("{} B at {}", s.data().len(), s.info.timestamp),
//!         Message::End { .. } => break,
//!         other => println!("{other}"),
//!     }
//! }
//! ```

use super::described::{Book, Described};
use super::description::StreamDescription;
use super::export::{ImportedRing, RingTooLarge};
use super::landing::Landing;
use super::queue::{Alert, MessageQueue, KINDS};
use super::rdma_device::RdmaDevice;
use super::rdma_read::{ProducerQp, RdmaReader};
use super::read_client::{Done, ReadResult, RemoteRing};
use super::replay::Replays;
use super::ring::{check_slot, read_validated, slot_bytes, ReadOutcome, DATA_OFFSET};
use super::signal::{DigestKind, Signal, SignalError, SpectrumInfo};
use super::transport::SignalReceiver;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use splitrt_runtime::fabric::rdma::verbs::Verbs;
use std::collections::hash_map::Entry;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A consumer's settings (vysmaw's configuration: buffer pool, queue
/// length, timeouts).
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// The stream key (the producers hold the same).
    pub key: [u8; 32],
    /// Multicast group of the signals (`None`: signals come only through
    /// [`Consumer::injector`], e.g. by Active Message inside a job).
    pub group: Option<SocketAddrV4>,
    /// Address of the interface to join the group on.
    pub interface: Ipv4Addr,
    /// Largest spectrum this consumer takes (its data buffers' size).
    pub max_spectrum_bytes: usize,
    /// Data buffers at most (spectra read or delivered and not yet
    /// dropped by the application).
    pub data_buffers: usize,
    /// Reads outstanding per producer across hosts at most.
    pub max_outstanding_reads: usize,
    /// Messages waiting for the application at most.
    pub queue_len: usize,
    /// A read across hosts not answered in this time fails.
    pub read_timeout: Duration,
    /// Longest wait for a producer's read server to open a session.
    pub connect_timeout: Duration,
    /// A producer that could not be reached is tried again after this; a
    /// producer on this host whose ring handover failed (it was busy or
    /// refused) is read through its read server meanwhile and asked for
    /// its ring again after this.
    pub retry_after: Duration,
    /// Read producers on this host through the mapping of their ring
    /// (`false`: always through their read server, as across hosts).
    pub local_reads: bool,
    /// Read producers on other hosts by RDMA read over this device, where
    /// the producer offers it (`None`: through their read servers).
    /// [`Consumer::start`] fails if the device cannot be opened.
    pub rdma: Option<RdmaDevice>,
    /// A producer instance that sent nothing (no signal, no heartbeat)
    /// for this long is gone: [`Message::ProducerGone`], its ring
    /// unmapped, its session closed. Set it to a few of the producers'
    /// heartbeat intervals (theirs is 1 s by default).
    pub producer_silence: Duration,
    /// Bytes of producers' rings mapped at once at most; a producer on
    /// this host whose ring would pass it is read through its read server
    /// ([`Message::MappedBytesLimit`]) and asked for its ring again after
    /// `retry_after`.
    pub max_mapped_bytes: u64,
    /// The largest datagram (UDP payload, bytes, 512..=65507) this
    /// consumer takes in its read sessions across hosts; lowered to what
    /// the route to the producer carries if the kernel knows its MTU. The
    /// producer's read server sends no larger (its own setting may be
    /// smaller). Default [`DEFAULT_DATAGRAM`](super::read_proto::DEFAULT_DATAGRAM),
    /// the largest: as large as the route carries, never IP-fragmented
    /// (1472 B on a 1500-byte MTU link); set 1472 if a router with a
    /// smaller MTU than the hosts' links lies between them. Setting
    /// `SPLITRT_VYS_DATAGRAM` ([`apply_settings`](Self::apply_settings)).
    pub datagram_bytes: usize,
}

impl ConsumerConfig {
    /// Take the settings `get` gives (e.g. `|k| std::env::var(k).ok()`):
    /// [`ENV_DATAGRAM`](super::read_proto::ENV_DATAGRAM) into
    /// `datagram_bytes`. An error names the bad setting.
    pub fn apply_settings(&mut self, get: impl Fn(&str) -> Option<String>) -> io::Result<()> {
        if let Some(n) = super::read_proto::datagram_setting(get)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
        {
            self.datagram_bytes = n;
        }
        Ok(())
    }

    /// Settings with defaults: spectra up to 64 KiB, 4096 buffers, 256
    /// reads outstanding per producer, a queue of 8192, 2 s read timeout,
    /// producers gone after 5 s of silence, 16 GiB of rings mapped,
    /// read-session datagrams as large as the route to each producer
    /// carries unfragmented.
    pub fn new(key: [u8; 32], group: SocketAddrV4, interface: Ipv4Addr) -> ConsumerConfig {
        ConsumerConfig {
            key,
            group: Some(group),
            interface,
            max_spectrum_bytes: 64 << 10,
            data_buffers: 4096,
            max_outstanding_reads: 256,
            queue_len: 8192,
            read_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            retry_after: Duration::from_secs(2),
            local_reads: true,
            rdma: None,
            producer_silence: Duration::from_secs(5),
            max_mapped_bytes: 16 << 30,
            datagram_bytes: super::read_proto::DEFAULT_DATAGRAM,
        }
    }

    /// Settings for a consumer whose signals come only through its
    /// [`injector`](Consumer::injector) (no multicast group joined).
    pub fn without_multicast(key: [u8; 32]) -> ConsumerConfig {
        ConsumerConfig {
            group: None,
            ..ConsumerConfig::new(
                key,
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                Ipv4Addr::UNSPECIFIED,
            )
        }
    }
}

/// What a signal message says of the spectra it announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Product {
    /// Producer id.
    pub producer: u64,
    /// Producer instance (random, drawn at its start).
    pub instance: u64,
    /// When that instance started (ns since the Unix epoch).
    pub started: u64,
    /// Producer's read server.
    pub address: SocketAddr,
    /// Correlator configuration id.
    pub config: u64,
    /// Station pair.
    pub stations: [u16; 2],
    /// Spectral window.
    pub spectral_window: u16,
    /// Stokes product.
    pub stokes: u16,
    /// Channels per spectrum.
    pub channels: u32,
    /// Bytes per spectrum.
    pub spectrum_bytes: u32,
    /// Digest of the entries.
    pub digest: DigestKind,
    /// Epoch of the producer's stream description these spectra belong
    /// to (0: none set; see [`Consumer::description`]).
    pub description_epoch: u32,
    /// That description, if the consumer had it when it took the signal
    /// (`None`: none set, or its description signal not heard yet).
    pub description: Option<Arc<StreamDescription>>,
}

impl Product {
    fn of(s: &Signal) -> Product {
        Product {
            producer: s.producer,
            instance: s.instance,
            started: s.started,
            address: s.address,
            config: s.config,
            stations: s.stations,
            spectral_window: s.spectral_window,
            stokes: s.stokes,
            channels: s.channels,
            spectrum_bytes: s.spectrum_bytes,
            digest: s.digest,
            description_epoch: s.description_epoch,
            description: None,
        }
    }
}

/// The data buffers: made on demand up to `max`, then reused.
struct Pool {
    /// Free buffers, and how many were made.
    free: Mutex<(Vec<Vec<u8>>, usize)>,
    max: usize,
    size: usize,
}

impl Pool {
    fn take(&self) -> Option<Vec<u8>> {
        let mut g = self.free.lock();
        if let Some(b) = g.0.pop() {
            return Some(b);
        }
        if g.1 >= self.max {
            return None;
        }
        g.1 += 1;
        drop(g);
        Some(vec![0u8; self.size])
    }
    fn give(&self, b: Vec<u8>) {
        self.free.lock().0.push(b);
    }
}

/// A valid spectrum, in a data buffer of the consumer's pool (returned to
/// the pool when this is dropped).
pub struct Spectrum {
    /// What the signal said of it.
    pub product: Arc<Product>,
    /// Where and which it was.
    pub info: SpectrumInfo,
    buf: Option<Vec<u8>>,
    pool: Arc<Pool>,
}

impl Spectrum {
    /// The spectrum's bytes.
    pub fn data(&self) -> &[u8] {
        let b = self.buf.as_deref().expect("buffer held until drop");
        &b[DATA_OFFSET..DATA_OFFSET + self.product.spectrum_bytes as usize]
    }
}

impl Drop for Spectrum {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give(b);
        }
    }
}

impl std::fmt::Debug for Spectrum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spectrum")
            .field("product", &self.product)
            .field("info", &self.info)
            .finish()
    }
}

/// Why a read spectrum failed verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The producer rewrote the buffer before or while it was read (the
    /// head or tail sequence id is not the announced one).
    Overwritten,
    /// Head and tail were right but the data's digest was not.
    DigestMismatch,
}

/// Counts of every message kind a consumer produced (dropped ones
/// included), reported with [`Message::End`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Signal messages accepted.
    pub signals: u64,
    /// Spectra the filter chose.
    pub chosen: u64,
    /// Valid spectra.
    pub valid: u64,
    /// Verification failures.
    pub verification_failures: u64,
    /// Read failures.
    pub read_failures: u64,
    /// Spectra dropped for want of a data buffer or read slot.
    pub starved: u64,
    /// Signals the kernel dropped (the consumer fell behind).
    pub signals_lost: u64,
    /// Datagrams that were not usable signals (other key, malformed).
    pub bad_signals: u64,
    /// Signals of another wire format version (authentic: signed with
    /// the stream key).
    pub version_mismatches: u64,
    /// Authentic signals dropped because they were taken before: replays
    /// (a stranger sending recorded signals again) or duplicates (see
    /// [`Consumer`]: each signal of a producer instance is taken once).
    pub replays: u64,
    /// Messages dropped because the queue was full.
    pub queue_dropped: u64,
    /// Spectra read through a mapping on this host.
    pub local_reads: u64,
    /// Spectra read from a read server across hosts.
    pub remote_reads: u64,
    /// Spectra read by RDMA read.
    pub rdma_reads: u64,
    /// Heartbeats taken (signals with no spectra: an idle producer).
    pub heartbeats: u64,
    /// Producer instances gone silent ([`Message::ProducerGone`]).
    pub producers_gone: u64,
    /// Producers restarted: a newer instance of a producer id replaced
    /// the one read until then.
    pub restarts: u64,
    /// Rings not mapped because of the bound on mapped bytes
    /// ([`Message::MappedBytesLimit`]).
    pub mapping_refusals: u64,
    /// Stream descriptions taken that were news
    /// ([`Message::DescriptionChanged`]).
    pub descriptions_changed: u64,
    /// Bytes of producers' rings mapped now (not a count: the level at
    /// the time of the statistics).
    pub mapped_bytes: u64,
}

/// The messages a full queue dropped, by kind ([`Message::QueueAlert`]).
/// Counts (starvation, lost signals, alerts) are never dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DroppedKinds {
    /// [`Message::Valid`] (their buffers went back to the pool).
    pub valid: u64,
    /// [`Message::VerificationFailure`].
    pub verification_failures: u64,
    /// [`Message::ReadFailure`].
    pub read_failures: u64,
    /// [`Message::SignalReceiveFailure`].
    pub signal_receive_failures: u64,
    /// [`Message::VersionMismatch`].
    pub version_mismatches: u64,
    /// [`Message::ProducerGone`] (only past the reports' reserve).
    pub producers_gone: u64,
    /// [`Message::MappedBytesLimit`] (only past the reports' reserve).
    pub mapped_bytes_limits: u64,
    /// [`Message::DescriptionChanged`] (only past the reports' reserve;
    /// [`Consumer::description`] has the description all the same).
    pub descriptions_changed: u64,
}

impl DroppedKinds {
    fn from_counts(d: [u64; KINDS]) -> DroppedKinds {
        DroppedKinds {
            valid: d[K_VALID],
            verification_failures: d[K_VERIFICATION],
            read_failures: d[K_READ],
            signal_receive_failures: d[K_RECEIVE],
            version_mismatches: d[K_VERSION],
            producers_gone: d[K_GONE],
            mapped_bytes_limits: d[K_LIMIT],
            descriptions_changed: d[K_DESCRIPTION],
        }
    }

    fn add(&mut self, o: &DroppedKinds) {
        self.valid += o.valid;
        self.verification_failures += o.verification_failures;
        self.read_failures += o.read_failures;
        self.signal_receive_failures += o.signal_receive_failures;
        self.version_mismatches += o.version_mismatches;
        self.producers_gone += o.producers_gone;
        self.mapped_bytes_limits += o.mapped_bytes_limits;
        self.descriptions_changed += o.descriptions_changed;
    }
}

impl std::fmt::Display for DroppedKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = [
            ("valid", self.valid),
            ("verification failures", self.verification_failures),
            ("read failures", self.read_failures),
            ("signal receive failures", self.signal_receive_failures),
            ("version mismatches", self.version_mismatches),
            ("producers gone", self.producers_gone),
            ("mapped bytes limits", self.mapped_bytes_limits),
            ("descriptions changed", self.descriptions_changed),
        ];
        let mut first = true;
        for (name, n) in all.iter().filter(|(_, n)| *n > 0) {
            write!(f, "{}{n} {name}", if first { "" } else { ", " })?;
            first = false;
        }
        Ok(())
    }
}

/// Kinds of messages the queue may drop ([`Alert::class`]; `KINDS` of them
/// at most), then kinds of counts (never dropped).
const K_VALID: usize = 0;
const K_VERIFICATION: usize = 1;
const K_READ: usize = 2;
const K_RECEIVE: usize = 3;
const K_VERSION: usize = 4;
const K_GONE: usize = 5;
const K_LIMIT: usize = 6;
const K_DESCRIPTION: usize = 7;
const K_STARVED: usize = KINDS;
const K_SIGNALS_LOST: usize = KINDS + 1;
const K_ALERT: usize = KINDS + 2;
const K_END: usize = KINDS + 3;

/// How the consumer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndStatus {
    /// [`Consumer::shutdown`] (or drop) was asked.
    Shutdown,
    /// The signal socket failed.
    Failed(String),
}

/// An outcome, as vysmaw delivers them.
#[derive(Debug)]
pub enum Message {
    /// A spectrum read and validated.
    Valid(Spectrum),
    /// A spectrum read that did not validate (never delivered as valid).
    VerificationFailure {
        /// Its product.
        product: Arc<Product>,
        /// Its announcement.
        info: SpectrumInfo,
        /// Why.
        cause: Verification,
    },
    /// A read that could not be done (producer unreachable, refused, timed
    /// out, spectrum larger than the consumer's buffers).
    ReadFailure {
        /// Its product.
        product: Arc<Product>,
        /// Its announcement.
        info: SpectrumInfo,
        /// Why.
        error: String,
    },
    /// Chosen spectra not read: no data buffer or read slot was free.
    DataBufferStarvation {
        /// How many since the last such message.
        spectra: u64,
    },
    /// Signals lost before the consumer saw them (the kernel's receive
    /// queue overflowed, or the injector's queue was full).
    SignalBufferStarvation {
        /// How many since the last such message.
        signals: u64,
    },
    /// Messages dropped because the application did not take them fast
    /// enough (the queue was full): how many since the last alert, and of
    /// which kinds. Loss reports are never among them (a count arrives
    /// folded into a later report of its kind if need be); a
    /// [`Message::ProducerGone`] or [`Message::MappedBytesLimit`] only if
    /// the application took none of the last 1024 reports.
    QueueAlert {
        /// How many.
        dropped: u64,
        /// Of which kinds.
        kinds: DroppedKinds,
    },
    /// Datagrams on the group that were not usable signals of this stream
    /// (another key, malformed), or receive errors: each is counted, and
    /// they are reported at most once per [`BAD_SIGNAL_REPORT_EVERY`]
    /// (the first at once), so a stranger flooding the group with garbage
    /// cannot flood the queue with reports.
    SignalReceiveFailure {
        /// Why the first of them failed.
        error: String,
        /// How many since the last such message (at least 1).
        count: u64,
    },
    /// A signal of another wire format version, signed with the stream
    /// key (unsigned bytes are a [`Message::SignalReceiveFailure`],
    /// whatever version they claim).
    VersionMismatch {
        /// Its version.
        version: u16,
    },
    /// A producer instance sent nothing (no signal, no heartbeat) for
    /// [`ConsumerConfig::producer_silence`]: it is taken for gone, its
    /// ring unmapped and its session closed (a signal of it later makes
    /// it known again).
    ProducerGone {
        /// Its id.
        producer: u64,
        /// Its instance.
        instance: u64,
        /// How long it was silent.
        silent_for: Duration,
    },
    /// A producer on this host was not mapped: its ring would take the
    /// consumer past [`ConsumerConfig::max_mapped_bytes`]. Its spectra
    /// are read through its read server meanwhile.
    MappedBytesLimit {
        /// Its id.
        producer: u64,
        /// Bytes of its ring.
        ring_bytes: u64,
        /// Bytes of rings mapped now.
        mapped: u64,
        /// The bound.
        limit: u64,
    },
    /// A producer's stream description is news: the first heard of its
    /// instance (at its start, or when this consumer joined late), or a
    /// new epoch (the producer changed it). Spectra name the epoch of
    /// their description ([`Product::description_epoch`]); the latest
    /// is also at [`Consumer::description`].
    DescriptionChanged {
        /// Its producer.
        producer: u64,
        /// The description, its epoch and the instance that sent it.
        described: Described,
    },
    /// The last message: the consumer has stopped.
    End {
        /// Why.
        status: EndStatus,
        /// Everything it counted.
        stats: ConsumerStats,
    },
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Valid(s) => write!(
                f,
                "valid spectrum {} of producer {:x}",
                s.info.seq, s.product.producer
            ),
            Message::VerificationFailure {
                product,
                info,
                cause,
            } => write!(
                f,
                "spectrum {} of producer {:x} failed verification: {cause:?}",
                info.seq, product.producer
            ),
            Message::ReadFailure {
                product,
                info,
                error,
            } => write!(
                f,
                "spectrum {} of producer {:x} not read: {error}",
                info.seq, product.producer
            ),
            Message::DataBufferStarvation { spectra } => {
                write!(
                    f,
                    "{spectra} chosen spectra not read: no data buffer or read slot free"
                )
            }
            Message::SignalBufferStarvation { signals } => {
                write!(
                    f,
                    "{signals} signal messages lost: the consumer fell behind"
                )
            }
            Message::QueueAlert { dropped, kinds } => {
                write!(
                    f,
                    "{dropped} messages dropped ({kinds}): the application's queue was full"
                )
            }
            Message::SignalReceiveFailure { error, count: 1 } => {
                write!(f, "signal receive failure: {error}")
            }
            Message::SignalReceiveFailure { error, count } => {
                write!(f, "{count} signal receive failures, the first: {error}")
            }
            Message::VersionMismatch { version } => write!(
                f,
                "signal message version {version}, this consumer reads version {}",
                super::signal::SIGNAL_VERSION
            ),
            Message::ProducerGone {
                producer,
                instance,
                silent_for,
            } => write!(
                f,
                "producer {producer:x} (instance {instance:x}) gone: nothing from it for {:.1} s",
                silent_for.as_secs_f64()
            ),
            Message::MappedBytesLimit {
                producer,
                ring_bytes,
                mapped,
                limit,
            } => write!(
                f,
                "producer {producer:x}'s ring ({ring_bytes} B) not mapped: this consumer maps \
                 {mapped} B of rings and its bound (max_mapped_bytes) is {limit} B; read \
                 through its read server instead"
            ),
            Message::DescriptionChanged {
                producer,
                described,
            } => {
                let d = &described.description;
                write!(
                    f,
                    "producer {producer:x} (instance {:x}) description {}: {} channels of {}, \
                     configuration '{}'",
                    described.instance, described.epoch, d.channels, d.data_type, d.config_name
                )
            }
            Message::End { status, .. } => write!(f, "end: {status:?}"),
        }
    }
}

/// A running consumer.
pub struct Consumer {
    rx: Arc<MessageQueue<Message>>,
    /// Rows offered by [`Consumer::recv_into`], shared with the worker.
    landing: Arc<Landing<Record>>,
    /// The worker's counts, as of its last round.
    stats: Arc<Mutex<ConsumerStats>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    injector: SignalInjector,
    /// The producers' stream descriptions, shared with the worker.
    descriptions: Arc<Book>,
}

/// Hands the consumer signal messages that came by other means than its
/// multicast group (an Active Message handler of a job's rank, say). The
/// bytes are checked exactly as a datagram from the group is (version,
/// stream key, layout). Cheap to clone; never blocks.
///
/// ```no_run
/// # use splitrt_vys::consumer::{Consumer, ConsumerConfig};
/// let c = Consumer::start(ConsumerConfig::without_multicast([7; 32]), |_, _, pass| pass.fill(true)).unwrap();
/// let inject = c.injector();
/// // in an AM handler: inject.inject(m.payload());
/// # let _ = inject;
/// ```
#[derive(Clone)]
pub struct SignalInjector {
    sock: Arc<UnixDatagram>,
    lost: Arc<AtomicU64>,
}

impl SignalInjector {
    /// Queue one signal message for the consumer. `false` if its queue was
    /// full (the signal is lost and reported as signal buffer starvation).
    pub fn inject(&self, signal: &[u8]) -> bool {
        match self.sock.send(signal) {
            Ok(_) => true,
            Err(_) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// The filter: given the product and the announced spectra of one signal,
/// set `pass[i]` for each spectrum to read (all start `false`).
pub trait Filter: FnMut(&Product, &[SpectrumInfo], &mut [bool]) + Send + 'static {}
impl<F: FnMut(&Product, &[SpectrumInfo], &mut [bool]) + Send + 'static> Filter for F {}

impl Consumer {
    /// Join the signal group and start the consumer's thread.
    pub fn start(cfg: ConsumerConfig, filter: impl Filter) -> io::Result<Consumer> {
        if cfg.max_spectrum_bytes == 0 || cfg.data_buffers == 0 || cfg.queue_len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "spectrum size, data buffers and queue length must be positive",
            ));
        }
        super::read_proto::check_datagram("ConsumerConfig::datagram_bytes", cfg.datagram_bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let signals = match cfg.group {
            Some(g) => Some(SignalReceiver::join(g, cfg.interface, cfg.key)?),
            None => None,
        };
        let (inj_tx, inj_rx) = UnixDatagram::pair()?;
        inj_tx.set_nonblocking(true)?;
        inj_rx.set_nonblocking(true)?;
        let injector = SignalInjector {
            sock: Arc::new(inj_tx),
            lost: Arc::new(AtomicU64::new(0)),
        };
        let rx = Arc::new(MessageQueue::new(cfg.queue_len));
        let landing = Arc::new(Landing::default());
        let live = Arc::new(Mutex::new(ConsumerStats::default()));
        let tx = rx.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let pool = Arc::new(Pool {
            free: Mutex::new((Vec::new(), 0)),
            max: cfg.data_buffers,
            size: slot_bytes(cfg.max_spectrum_bytes),
        });
        let rdma = match &cfg.rdma {
            Some(dev) => {
                let pinned = (pool.max as u64).saturating_mul(pool.size as u64);
                let verbs = dev.open("consumer", pinned)?;
                Some(RdmaReader::new(verbs, pool.max, cfg.read_timeout))
            }
            None => None,
        };
        let descriptions = Arc::new(Book::default());
        let mut w = Worker {
            descriptions: descriptions.clone(),
            rdma,
            rdma_reads: FxHashMap::default(),
            rdma_done: Vec::new(),
            cfg,
            signals,
            injected: inj_rx,
            injected_lost: injector.lost.clone(),
            inbuf: vec![0u8; 65_536],
            filter: Box::new(filter),
            tx,
            out: Vec::new(),
            out_valid: 0,
            landing: landing.clone(),
            pool,
            routes: FxHashMap::default(),
            peers: FxHashMap::default(),
            next_gone_check: Instant::now(),
            mapped: 0,
            refusals: Vec::new(),
            stats: ConsumerStats::default(),
            live: live.clone(),
            replays: Replays::default(),
            starved: 0,
            overflow_seen: 0,
            done: Vec::new(),
            finished: Vec::new(),
            pass: Vec::new(),
            fds: Vec::new(),
            bad: BadSignals::default(),
        };
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vys-consumer".into())
            .spawn(move || w.run(&st))?;
        Ok(Consumer {
            rx,
            landing,
            stats: live,
            stop,
            thread: Some(thread),
            injector,
            descriptions,
        })
    }

    /// The latest stream description heard of `producer`'s current
    /// instance (`None`: none heard yet, or the producer sets none). A
    /// producer sends its description at start, on each change and
    /// periodically (`ProducerConfig::description_every`), so a consumer
    /// that joined late has it within that period;
    /// [`Message::DescriptionChanged`] says when it is news.
    ///
    /// ```no_run
    /// # use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
    /// # use std::time::Duration;
    /// # let c = Consumer::start(ConsumerConfig::without_multicast([7; 32]), |_, _, pass| pass.fill(true)).unwrap();
    /// if let Some(Message::Valid(s)) = c.recv(Duration::from_secs(1)) {
    ///     match c.description(s.product.producer) {
    ///         Some(d) if d.epoch == s.product.description_epoch => {
    ///             let f0 = d.description.frequency(0);
    ///             println!("{} channels from {f0:?} Hz", d.description.channels);
    ///         }
    ///         _ => println!("its description is not known (yet)"),
    ///     }
    /// }
    /// ```
    pub fn description(&self, producer: u64) -> Option<Described> {
        self.descriptions.get(producer)
    }

    /// A handle to give this consumer signals received by other means.
    pub fn injector(&self) -> SignalInjector {
        self.injector.clone()
    }

    /// The next message, waiting at most `timeout`; `None` on timeout or
    /// after [`Message::End`] was taken.
    pub fn recv(&self, timeout: Duration) -> Option<Message> {
        self.rx.pop(timeout)
    }

    /// Every count so far (as of the consumer thread's last round, a few
    /// milliseconds at most; [`Message::End`] carries the final ones).
    pub fn stats(&self) -> ConsumerStats {
        *self.stats.lock()
    }

    /// The next message if one is waiting.
    pub fn try_recv(&self) -> Option<Message> {
        self.rx.pop(Duration::ZERO)
    }

    /// Valid spectra of `spectrum_bytes` bytes straight into `rows` (one
    /// spectrum per `spectrum_bytes` of it), waiting at most `timeout`:
    /// for the call's duration the consumer's thread reads (and
    /// validates) spectra of producers on this host into the next free
    /// row instead of a pool buffer, so a batch is filled with one copy
    /// (from the ring) instead of two; spectra read across hosts are
    /// copied into the rows by the consumer's thread. Spectra queued
    /// before the call are taken first (copied into rows), so the rows
    /// keep the order of [`Consumer::recv`]. What each filled row holds is
    /// appended to `spectra` (row `i`: entry `len_before + i`).
    ///
    /// Returns when every row is filled, `timeout` passed, a valid
    /// spectrum of another size was taken ([`Landed::left`], not in the
    /// rows), or the end message was taken. Other messages are given to
    /// `other` (the end message too), in order. A row is filled only with
    /// a spectrum that validated exactly as a [`Message::Valid`] one does;
    /// rows past the filled ones are untouched, but for the first, which
    /// may be zeroed. One call at a time: another waits for this one.
    pub fn recv_into(
        &self,
        rows: &mut [u8],
        spectrum_bytes: usize,
        timeout: Duration,
        spectra: &mut Vec<(Arc<Product>, SpectrumInfo)>,
        mut other: impl FnMut(Message),
    ) -> Landed {
        let now = Instant::now();
        let until = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        let mut left = None;
        let mut ended = false;
        let mut held = Vec::new();
        // SAFETY: `offer` is a local of this call, finished or dropped on
        // every path out of it (returns, `?`, a panic of `other`); it is
        // never leaked.
        let offer = unsafe { self.landing.offer(rows, spectrum_bytes) };
        let mut claimed = Vec::new();
        loop {
            let mut g = offer.lock();
            // what was queued before the rows were offered (or could not
            // land since) first, in order: the consumer's thread lands
            // nothing while data is queued, and looks under this lock;
            // rows are claimed here and filled with the lock released
            while !g.full() && left.is_none() && !ended {
                let Some(m) = self.rx.pop(Duration::ZERO) else {
                    break;
                };
                match m {
                    Message::Valid(s) => {
                        let record = (s.product.clone(), s.info);
                        match g.claim(s.data().len(), record) {
                            Some(c) => claimed.push((c, s)),
                            None => left = Some(s),
                        }
                    }
                    m => {
                        ended = matches!(m, Message::End { .. });
                        held.push(m);
                    }
                }
            }
            let done = g.full() || left.is_some() || ended || Instant::now() >= until;
            if !done && claimed.is_empty() && held.is_empty() {
                g.wait_until(until);
                continue;
            }
            drop(g);
            for (c, s) in claimed.drain(..) {
                offer.fill(c, s.data());
            }
            held.drain(..).for_each(&mut other);
            if done {
                break;
            }
        }
        let (filled, copied) = offer.finish(spectra);
        Landed {
            rows: filled,
            copied,
            left,
            ended,
        }
    }

    /// Ask the consumer to stop: it takes no more signals, finishes or
    /// fails its outstanding reads, and delivers [`Message::End`] last.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a row offered by [`Consumer::recv_into`] holds: the product and
/// the announcement of its spectrum.
type Record = (Arc<Product>, SpectrumInfo);

/// What [`Consumer::recv_into`] did.
#[derive(Debug)]
pub struct Landed {
    /// Rows filled with valid spectra (the first ones).
    pub rows: usize,
    /// Of those, rows the call copied from spectra queued before (the
    /// rest the consumer's thread read straight into them).
    pub copied: usize,
    /// A valid spectrum taken from the queue that is not in the rows (of
    /// another size): the caller's to deliver, before later ones.
    pub left: Option<Spectrum>,
    /// The end message was taken (and given to `other`).
    pub ended: bool,
}

/// The reads in flight to one producer across hosts.
struct Remote {
    ring: RemoteRing,
    reads: FxHashMap<u64, (Arc<Product>, SpectrumInfo)>,
    /// Reads go by RDMA over this queue pair (the session is then only
    /// their liveness channel).
    rdma: Option<ProducerQp>,
    /// The producer is on this host but its handover failed (busy,
    /// refused): ask for its ring again at this time.
    handover_retry: Option<Instant>,
    /// Its ring, handed over since: new reads go through it, and the
    /// route becomes local once the reads in flight are done.
    local: Option<ImportedRing>,
    /// Its ring was not mapped for the bound on mapped bytes (said once).
    over_bound: bool,
}

/// A producer id heard of: the instance read (the newest by start time)
/// and when it was last heard of.
struct Peer {
    /// (start, instance).
    instance: (u64, u64),
    heard: Instant,
}

/// Whether a signal's instance is the one read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// It is (or it is newer and now replaced the one read).
    Current,
    /// An older instance than the one read.
    Stale,
}

/// The bytes of producers' rings `r` maps.
fn mapped_by(r: &Route) -> u64 {
    match r {
        Route::Local(ring) => ring.len() as u64,
        Route::Remote(x) => x.local.as_ref().map_or(0, |l| l.len() as u64),
        Route::Unreachable { .. } => 0,
    }
}

/// The instance a route reads (proved by the handover or the session;
/// `None`: no route yet).
fn instance_of(r: &Route) -> Option<u64> {
    match r {
        Route::Local(ring) => Some(ring.instance()),
        Route::Remote(x) => Some(x.ring.instance),
        Route::Unreachable { .. } => None,
    }
}

enum Route {
    Local(ImportedRing),
    Remote(Box<Remote>),
    Unreachable { until: Instant, why: String },
}

/// Producers remembered at most (a route per producer).
const MAX_ROUTES: usize = 4096;

struct Worker {
    /// The producers' stream descriptions (shared with [`Consumer`]).
    descriptions: Arc<Book>,
    /// Declared before `pool`: dropped (queue pairs destroyed, buffers
    /// deregistered) before the buffers can be freed.
    rdma: Option<RdmaReader<Box<dyn Verbs>>>,
    /// RDMA reads in flight, by id.
    rdma_reads: FxHashMap<u64, (Arc<Product>, SpectrumInfo)>,
    /// RDMA reads failed by closing their queue pair, to report.
    rdma_done: Vec<Done>,
    cfg: ConsumerConfig,
    signals: Option<SignalReceiver>,
    injected: UnixDatagram,
    injected_lost: Arc<AtomicU64>,
    inbuf: Vec<u8>,
    filter: Box<dyn Filter>,
    tx: Arc<MessageQueue<Message>>,
    /// Messages of this round, delivered together.
    out: Vec<Message>,
    /// Valid spectra in `out` (while any is, none lands: order is kept).
    out_valid: usize,
    /// Rows offered by [`Consumer::recv_into`].
    landing: Arc<Landing<Record>>,
    pool: Arc<Pool>,
    /// Per producer id, the route to its current instance.
    routes: FxHashMap<u64, Route>,
    /// Per producer id, its current instance and when it was last heard.
    peers: FxHashMap<u64, Peer>,
    /// When silent producers are next looked for.
    next_gone_check: Instant,
    /// Bytes of rings mapped by `routes`.
    mapped: u64,
    /// Rings refused for the bound on mapped bytes since the last round:
    /// (producer, ring bytes).
    refusals: Vec<(u64, u64)>,
    stats: ConsumerStats,
    /// `stats`, published for [`Consumer::stats`] each round.
    live: Arc<Mutex<ConsumerStats>>,
    /// The signals taken, per producer instance (replays are dropped).
    replays: Replays,
    starved: u64,
    overflow_seen: u64,
    done: Vec<Done>,
    /// Reads finished in one progress round: product, announcement, read,
    /// by RDMA (kept to reuse its allocation).
    finished: Vec<(Arc<Product>, SpectrumInfo, Done, bool)>,
    /// The filter's answers for one signal (kept to reuse its allocation).
    pass: Vec<bool>,
    /// The descriptors `wait` polls (likewise).
    fds: Vec<libc::pollfd>,
    /// Bad datagrams not reported yet (see [`Worker::bad_signal`]).
    bad: BadSignals,
}

/// Longest a consumer holds back counted bad datagrams: at most one
/// [`Message::SignalReceiveFailure`] per this interval (the first at once).
pub const BAD_SIGNAL_REPORT_EVERY: Duration = Duration::from_secs(1);

/// Bad datagrams since the last [`Message::SignalReceiveFailure`].
#[derive(Default)]
struct BadSignals {
    /// How many.
    count: u64,
    /// Why the first failed.
    first: Option<String>,
    /// When the last report went.
    reported: Option<Instant>,
}

impl Worker {
    fn run(&mut self, stop: &AtomicBool) {
        let mut status = EndStatus::Shutdown;
        while !stop.load(Ordering::Acquire) {
            self.wait();
            for i in 0..256 {
                match self.signals.as_mut().and_then(|s| s.try_recv()) {
                    Some(r) => self.on_signal(r),
                    None => break,
                }
                if i % 16 == 15 {
                    // replies in between, so reads across hosts keep flowing
                    self.progress_remote();
                }
            }
            for _ in 0..256 {
                match self.injected.recv(&mut self.inbuf) {
                    Ok(n) => {
                        let r = Signal::decode(&self.inbuf[..n], &self.cfg.key);
                        self.on_signal(r)
                    }
                    Err(_) => break,
                }
            }
            if let Err(e) = self.check_socket() {
                status = EndStatus::Failed(e);
                break;
            }
            self.report_bad(false);
            self.progress_remote();
            self.check_gone();
            self.report_counts();
            self.flush();
            self.stats.mapped_bytes = self.mapped;
            *self.live.lock() = self.stats;
        }
        // drain: outstanding reads finish or time out
        let until = Instant::now() + self.cfg.read_timeout + Duration::from_millis(100);
        while Instant::now() < until && self.has_outstanding() {
            self.wait();
            self.progress_remote();
            self.flush();
        }
        self.report_bad(true);
        self.report_counts();
        self.flush();
        self.stats.mapped_bytes = self.mapped;
        let stats = self.stats;
        *self.live.lock() = stats;
        self.tx.push_last(Message::End { status, stats });
        self.landing.wake();
    }

    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let dropped = self.tx.push(&mut self.out);
        self.stats.queue_dropped += dropped;
        self.out_valid = 0;
        // a caller offering rows takes what was queued
        self.landing.wake();
    }

    /// Report a receive error of the signal socket; `Err` if the socket
    /// itself is broken (the consumer then ends).
    fn check_socket(&mut self) -> Result<(), String> {
        let Some(e) = self.signals.as_mut().and_then(|s| s.take_error()) else {
            return Ok(());
        };
        let broken = matches!(
            e.raw_os_error(),
            Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT | libc::EINVAL)
        );
        if broken {
            return Err(format!("the signal socket failed: {e}"));
        }
        self.bad_signal(|| e.to_string());
        Ok(())
    }

    /// Count a datagram that is not a usable signal, or a receive error
    /// (`why`: its cause, made only for the first of a report). Reported
    /// at once if no report went in the last [`BAD_SIGNAL_REPORT_EVERY`],
    /// else folded into the next one.
    fn bad_signal(&mut self, why: impl FnOnce() -> String) {
        self.stats.bad_signals += 1;
        self.bad.count += 1;
        if self.bad.first.is_none() {
            self.bad.first = Some(why());
        }
        self.report_bad(false);
    }

    /// Send the [`Message::SignalReceiveFailure`] of the bad datagrams
    /// counted since the last, if any and if it is due (`now`: regardless,
    /// before `End`).
    fn report_bad(&mut self, now: bool) {
        if self.bad.count == 0 {
            return;
        }
        let t = Instant::now();
        if !now
            && self
                .bad
                .reported
                .is_some_and(|r| t.duration_since(r) < BAD_SIGNAL_REPORT_EVERY)
        {
            return;
        }
        self.bad.reported = Some(t);
        let error = self.bad.first.take().unwrap_or_default();
        let count = std::mem::take(&mut self.bad.count);
        self.send(Message::SignalReceiveFailure { error, count });
    }

    fn has_outstanding(&self) -> bool {
        self.rdma_busy()
            || self
                .routes
                .values()
                .any(|r| matches!(r, Route::Remote(x) if !x.ring.idle()))
    }

    fn rdma_busy(&self) -> bool {
        !self.rdma_done.is_empty() || self.rdma.as_ref().is_some_and(|r| !r.idle())
    }

    /// Sleep until a signal or a reply arrives or a timer is due.
    fn wait(&mut self) {
        // RDMA completions have no descriptor here: poll again at once
        // while reads complete, every millisecond once they stall
        let waiting = self.rdma_busy();
        let busy = waiting
            && self
                .rdma
                .as_ref()
                .is_none_or(|r| r.quiet_for() < Duration::from_millis(1));
        let fds = &mut self.fds;
        fds.clear();
        fds.push(libc::pollfd {
            fd: self.injected.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        if let Some(s) = &self.signals {
            fds.push(libc::pollfd {
                fd: s.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let mut t = if busy {
            Duration::ZERO
        } else if waiting {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(20)
        };
        for r in self.routes.values() {
            if let Route::Remote(x) = r {
                fds.push(libc::pollfd {
                    fd: x.ring.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                t = t.min(x.ring.next_due());
            }
        }
        let ms = t.as_micros().div_ceil(1000).min(20) as libc::c_int;
        // SAFETY: fds is a live array of fds.len() pollfd structures.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// Deliver with this round's batch (dropped and counted if the
    /// application's queue is full then).
    fn send(&mut self, m: Message) {
        self.out.push(m);
        if self.out.len() >= 256 {
            self.flush();
        }
    }

    fn report_counts(&mut self) {
        for (producer, ring_bytes) in std::mem::take(&mut self.refusals) {
            self.stats.mapping_refusals += 1;
            self.send(Message::MappedBytesLimit {
                producer,
                ring_bytes,
                mapped: self.mapped,
                limit: self.cfg.max_mapped_bytes,
            });
        }
        if self.starved > 0 {
            let spectra = std::mem::take(&mut self.starved);
            self.send(Message::DataBufferStarvation { spectra });
        }
        let o = self.signals.as_ref().map_or(0, |s| s.overflowed)
            + self.injected_lost.load(Ordering::Relaxed);
        if o > self.overflow_seen {
            let signals = o - self.overflow_seen;
            self.overflow_seen = o;
            self.stats.signals_lost += signals;
            self.send(Message::SignalBufferStarvation { signals });
        }
    }

    fn on_signal(&mut self, r: Result<Signal, SignalError>) {
        let s = match r {
            Ok(s) => s,
            Err(SignalError::Version { got }) => {
                self.stats.version_mismatches += 1;
                self.send(Message::VersionMismatch { version: got });
                return;
            }
            Err(e) => {
                self.bad_signal(|| e.to_string());
                return;
            }
        };
        if !self
            .replays
            .take(s.producer, s.started, s.instance, s.sequence)
        {
            self.stats.replays += 1;
            return;
        }
        let admit = self.admit(&s);
        if admit == Admit::Current {
            self.take_description(&s);
        }
        if s.is_heartbeat() {
            self.stats.heartbeats += 1;
            return;
        }
        self.stats.signals += 1;
        let mut product = Product::of(&s);
        if s.description_epoch != 0 {
            product.description = self.descriptions.of(&s);
        }
        let product = Arc::new(product);
        let mut pass = std::mem::take(&mut self.pass);
        pass.clear();
        pass.resize(s.entries.len(), false);
        (self.filter)(&product, &s.entries, &mut pass);
        for (info, _) in s.entries.iter().zip(&pass).filter(|(_, p)| **p) {
            self.stats.chosen += 1;
            if admit == Admit::Stale {
                let e = format!(
                    "instance {:x} of producer {:x} was replaced by a newer one",
                    s.instance, s.producer
                );
                self.fail(&product, *info, e);
            } else {
                self.read(&product, *info);
            }
        }
        self.pass = pass;
    }

    /// Keep the description `s` carries; say so if it is news.
    fn take_description(&mut self, s: &Signal) {
        if let Some(described) = self.descriptions.take(s) {
            self.stats.descriptions_changed += 1;
            self.send(Message::DescriptionChanged {
                producer: s.producer,
                described,
            });
        }
    }

    /// Note that `s`'s producer instance was heard of. A newer instance
    /// than the one read (by start time) replaces it: the old one's route
    /// is dropped (its mapping, its session, its reads in flight). An
    /// older one is [`Admit::Stale`]: its spectra are not read.
    fn admit(&mut self, s: &Signal) -> Admit {
        let now = Instant::now();
        let key = (s.started, s.instance);
        if self.peers.len() >= MAX_ROUTES && !self.peers.contains_key(&s.producer) {
            // forget the producer heard of least recently
            let oldest = self
                .peers
                .iter()
                .min_by_key(|(_, p)| p.heard)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.peers.remove(&id);
                self.descriptions.forget(id);
                self.drop_route(
                    id,
                    "too many producers: the one heard of least recently forgotten",
                );
            }
        }
        let old = match self.peers.entry(s.producer) {
            Entry::Vacant(v) => {
                v.insert(Peer {
                    instance: key,
                    heard: now,
                });
                None
            }
            Entry::Occupied(mut e) => {
                let p = e.get_mut();
                if p.instance == key {
                    p.heard = now;
                    return Admit::Current;
                }
                if key < p.instance {
                    return Admit::Stale;
                }
                let old = p.instance.1;
                *p = Peer {
                    instance: key,
                    heard: now,
                };
                Some(old)
            }
        };
        // a new instance: no route of another one may serve it
        if old.is_some() {
            self.stats.restarts += 1;
            // nor its description describe the new one's spectra
            self.descriptions.forget(s.producer);
        }
        let why = format!(
            "producer {:x} restarted: instance {:x} replaced instance {:x}",
            s.producer,
            s.instance,
            old.unwrap_or(0)
        );
        if self
            .routes
            .get(&s.producer)
            .is_some_and(|r| instance_of(r).is_some_and(|i| i != s.instance))
            || old.is_some()
        {
            self.drop_route(s.producer, &why);
        }
        Admit::Current
    }

    /// Report and forget producer instances silent for longer than
    /// `producer_silence` (looked for every 50 ms at most).
    fn check_gone(&mut self) {
        let now = Instant::now();
        if now < self.next_gone_check {
            return;
        }
        self.next_gone_check = now + (self.cfg.producer_silence / 4).min(Duration::from_millis(50));
        let silence = self.cfg.producer_silence;
        let gone: Vec<(u64, u64, Duration)> = self
            .peers
            .iter()
            .filter(|(_, p)| now.duration_since(p.heard) > silence)
            .map(|(id, p)| (*id, p.instance.1, now.duration_since(p.heard)))
            .collect();
        for (producer, instance, silent_for) in gone {
            self.peers.remove(&producer);
            self.descriptions.forget(producer);
            let why = format!(
                "producer {producer:x} gone: nothing from it for {:.1} s",
                silent_for.as_secs_f64()
            );
            self.drop_route(producer, &why);
            self.stats.producers_gone += 1;
            self.send(Message::ProducerGone {
                producer,
                instance,
                silent_for,
            });
        }
    }

    /// Drop `producer`'s route: its ring unmapped, its session closed, its
    /// reads in flight failed with `why` (their buffers back in the pool).
    fn drop_route(&mut self, producer: u64, why: &str) {
        let Some(route) = self.routes.remove(&producer) else {
            return;
        };
        self.mapped = self.mapped.saturating_sub(mapped_by(&route));
        let Route::Remote(mut x) = route else {
            return;
        };
        if let (Some(p), Some(r)) = (x.rdma, self.rdma.as_mut()) {
            // its reads come back failed through `rdma_done`
            r.close(p, why, &mut self.rdma_done);
        }
        let mut done = std::mem::take(&mut self.done);
        x.ring.abandon(why, &mut done);
        for d in done.drain(..) {
            self.pool.give(d.buf);
            if let Some((p, i)) = x.reads.remove(&d.id) {
                self.fail(&p, i, why.to_string());
            }
        }
        self.done = done;
    }

    fn fail(&mut self, product: &Arc<Product>, info: SpectrumInfo, error: String) {
        self.stats.read_failures += 1;
        self.send(Message::ReadFailure {
            product: product.clone(),
            info,
            error,
        });
    }

    fn read(&mut self, product: &Arc<Product>, info: SpectrumInfo) {
        let bytes = product.spectrum_bytes as usize;
        if bytes > self.cfg.max_spectrum_bytes {
            let e = format!(
                "a spectrum of {bytes} B is larger than this consumer's buffers ({} B)",
                self.cfg.max_spectrum_bytes
            );
            return self.fail(product, info, e);
        }
        enum Next {
            Read(ReadOutcome, Vec<u8>),
            /// Read into a row offered by `recv_into` (kept there if valid).
            Landed(ReadOutcome),
            Starved,
            Fail(String),
            SessionFailed(String),
        }
        let pool = &self.pool;
        let (landing, tx, out_valid) = (&self.landing, &self.tx, self.out_valid);
        let local = |ring: &ImportedRing| {
            // straight into the caller's row if one is offered (and no
            // valid spectrum waits in the queue ahead of this one)
            let landed = landing.land(
                bytes,
                || out_valid == 0 && !tx.has_data(),
                |row| read_validated(ring.words(), bytes, &info, product.digest, row),
                || (product.clone(), info),
            );
            if let Some(o) = landed {
                return Next::Landed(o);
            }
            match pool.take() {
                Some(mut buf) => {
                    let data = &mut buf[DATA_OFFSET..DATA_OFFSET + bytes];
                    let o = read_validated(ring.words(), bytes, &info, product.digest, data);
                    Next::Read(o, buf)
                }
                None => Next::Starved,
            }
        };
        let mut reach = Reach {
            rdma: &mut self.rdma,
            cfg: &self.cfg,
            mapped: &mut self.mapped,
            refusals: &mut self.refusals,
        };
        let next = match route(&mut self.routes, &mut reach, product) {
            // a route of another instance never reads this one's spectra
            // (admit drops it first: this is the proof of it)
            r if instance_of(r).is_some_and(|i| i != product.instance) => Next::Fail(format!(
                "the route to producer {:x} reads another instance than {:x}",
                product.producer, product.instance
            )),
            Route::Local(ring) => local(ring),
            Route::Remote(x) if x.local.is_some() => local(x.local.as_ref().expect("checked")),
            Route::Remote(x) if x.rdma.is_some() => {
                let (p, r) = (
                    x.rdma.expect("checked"),
                    self.rdma.as_mut().expect("rdma route"),
                );
                match x.ring.failed().or(r.failed(p)) {
                    Some(f) => Next::SessionFailed(f.to_string()),
                    None if r.room(p) == 0 => Next::Starved,
                    None => match pool.take() {
                        None => Next::Starved,
                        Some(buf) => {
                            // SAFETY: `RdmaReader::read`'s contract: the
                            // buffer is one of the pool's, which frees none
                            // while the worker (and so the reader, declared
                            // before the pool) lives.
                            match unsafe { r.read(p, info.offset, slot_bytes(bytes), buf) } {
                                Ok(id) => {
                                    self.rdma_reads.insert(id, (product.clone(), info));
                                    return;
                                }
                                Err(buf) => {
                                    pool.give(buf);
                                    Next::Starved
                                }
                            }
                        }
                    },
                }
            }
            Route::Remote(x) => match x.ring.failed() {
                Some(f) => Next::SessionFailed(f.to_string()),
                // every read slot of that producer busy, or no buffer free
                None if x.ring.room() == 0 => Next::Starved,
                None => match pool.take() {
                    None => Next::Starved,
                    Some(buf) => match x.ring.read(info.offset, slot_bytes(bytes), info.seq, buf) {
                        Ok(id) => {
                            x.reads.insert(id, (product.clone(), info));
                            return;
                        }
                        Err(buf) => {
                            pool.give(buf);
                            Next::Starved
                        }
                    },
                },
            },
            Route::Unreachable { why, .. } => Next::Fail(format!("producer unreachable: {why}")),
        };
        match next {
            Next::Read(o, buf) => {
                self.stats.local_reads += 1;
                self.outcome(product.clone(), info, o, Some(buf))
            }
            Next::Landed(o) => {
                self.stats.local_reads += 1;
                self.outcome(product.clone(), info, o, None)
            }
            Next::Starved => {
                self.starved += 1;
                self.stats.starved += 1;
            }
            Next::Fail(e) => self.fail(product, info, e),
            Next::SessionFailed(f) => {
                // its reads in flight fail now, their buffers back
                self.drop_route(product.producer, &f);
                self.routes.insert(
                    product.producer,
                    Route::Unreachable {
                        until: Instant::now() + self.cfg.retry_after,
                        why: f.clone(),
                    },
                );
                self.fail(product, info, f)
            }
        }
    }

    /// Deliver a read's outcome. `buf`: the pool buffer it was read into
    /// (a whole slot); `None`: it was read into a row offered by
    /// [`Consumer::recv_into`] (a valid one is there already).
    fn outcome(
        &mut self,
        product: Arc<Product>,
        info: SpectrumInfo,
        o: ReadOutcome,
        buf: Option<Vec<u8>>,
    ) {
        let Some(buf) = buf else {
            if o == ReadOutcome::Valid {
                self.stats.valid += 1;
            } else {
                self.failed(product, info, o);
            }
            return;
        };
        match o {
            ReadOutcome::Valid => {
                self.stats.valid += 1;
                // into a row offered by `recv_into` if there is one (read
                // across hosts: the copy is the consumer thread's, and
                // the buffer is back in the pool at once)
                let bytes = product.spectrum_bytes as usize;
                let (tx, out_valid) = (&self.tx, self.out_valid);
                let landed = self.landing.land(
                    bytes,
                    || out_valid == 0 && !tx.has_data(),
                    |row| {
                        row.copy_from_slice(&buf[DATA_OFFSET..DATA_OFFSET + bytes]);
                        ReadOutcome::Valid
                    },
                    || (product.clone(), info),
                );
                if landed.is_some() {
                    self.pool.give(buf);
                    return;
                }
                self.out_valid += 1;
                self.send(Message::Valid(Spectrum {
                    product,
                    info,
                    buf: Some(buf),
                    pool: self.pool.clone(),
                }));
            }
            o => {
                self.pool.give(buf);
                self.failed(product, info, o);
            }
        }
    }

    /// Report a read that did not validate.
    fn failed(&mut self, product: Arc<Product>, info: SpectrumInfo, o: ReadOutcome) {
        match o {
            ReadOutcome::Valid => {}
            ReadOutcome::Overwritten | ReadOutcome::DigestMismatch => {
                self.stats.verification_failures += 1;
                let cause = if o == ReadOutcome::Overwritten {
                    Verification::Overwritten
                } else {
                    Verification::DigestMismatch
                };
                self.send(Message::VerificationFailure {
                    product,
                    info,
                    cause,
                });
            }
            ReadOutcome::OutOfRing => {
                self.fail(
                    &product,
                    info,
                    "the announced offset is not a slot of the producer's ring".into(),
                );
            }
        }
    }

    fn progress_remote(&mut self) {
        let mut finished = std::mem::take(&mut self.finished);
        let mut done = std::mem::take(&mut self.done);
        for r in self.routes.values_mut() {
            if let Route::Remote(x) = r {
                x.ring.progress(&mut done);
                for d in done.drain(..) {
                    if let Some((p, i)) = x.reads.remove(&d.id) {
                        finished.push((p, i, d, false));
                    }
                }
            }
        }
        self.done = done;
        if let Some(r) = self.rdma.as_mut() {
            if let Err(e) = r.progress(&mut self.rdma_done) {
                // the device failed: every producer read by RDMA is
                // closed (and connected again after the retry time)
                let why = format!("the RDMA device failed: {e}");
                for route in self.routes.values_mut() {
                    if let Route::Remote(x) = route {
                        if let Some(p) = x.rdma.take() {
                            r.close(p, &why, &mut self.rdma_done);
                            *route = Route::Unreachable {
                                until: Instant::now() + self.cfg.retry_after,
                                why: why.clone(),
                            };
                        }
                    }
                }
            }
        }
        for d in self.rdma_done.drain(..) {
            if let Some((p, i)) = self.rdma_reads.remove(&d.id) {
                finished.push((p, i, d, true));
            }
        }
        for (product, info, d, by_rdma) in finished.drain(..) {
            match d.result {
                ReadResult::Slot if by_rdma => {
                    self.stats.rdma_reads += 1;
                    let bytes = product.spectrum_bytes as usize;
                    let o = check_slot(&d.buf[..slot_bytes(bytes)], bytes, &info, product.digest);
                    self.outcome(product, info, o, Some(d.buf));
                }
                ReadResult::Slot => {
                    self.stats.remote_reads += 1;
                    let bytes = product.spectrum_bytes as usize;
                    let o = check_slot(&d.buf[..slot_bytes(bytes)], bytes, &info, product.digest);
                    self.outcome(product, info, o, Some(d.buf));
                }
                ReadResult::Overwritten => {
                    self.stats.remote_reads += 1;
                    self.outcome(product, info, ReadOutcome::Overwritten, Some(d.buf));
                }
                ReadResult::Failed(e) => {
                    self.pool.give(d.buf);
                    self.fail(&product, info, e);
                }
            }
        }
        self.finished = finished;
    }
}

/// What making a route needs besides the routes: the RDMA reader, the
/// settings, the bytes of rings mapped (kept up to date) and the rings
/// refused for the bound (to report).
struct Reach<'a> {
    rdma: &'a mut Option<RdmaReader<Box<dyn Verbs>>>,
    cfg: &'a ConsumerConfig,
    mapped: &'a mut u64,
    refusals: &'a mut Vec<(u64, u64)>,
}

/// What a handover to a consumer came to.
enum Handover {
    /// The ring of the signal's instance, mapped (and counted).
    Mapped(ImportedRing),
    /// Not mapped: it would pass the bound on mapped bytes.
    OverBound,
    /// Another instance of the id serves on this host (the signal's is
    /// elsewhere, or not serving yet).
    OtherInstance,
    /// The handover failed.
    Failed(io::Error),
}

impl Reach<'_> {
    /// Ask `product`'s producer on this host for its ring: mapped only if
    /// it fits under the bound on mapped bytes (checked before it is
    /// mapped; a refusal is reported once per route, through `said`) and
    /// it is the ring of `product`'s instance.
    fn handover(&mut self, product: &Product, said: &mut bool) -> Handover {
        let room = self.cfg.max_mapped_bytes.saturating_sub(*self.mapped);
        match ImportedRing::connect_producer_within(product.producer, &self.cfg.key, room) {
            Ok(ring) if ring.instance() != product.instance => Handover::OtherInstance,
            Ok(ring) => {
                *self.mapped += ring.len() as u64;
                Handover::Mapped(ring)
            }
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory => {
                let big = e
                    .get_ref()
                    .and_then(|x| x.downcast_ref::<RingTooLarge>())
                    .map(|t| t.bytes);
                match big {
                    Some(bytes) => {
                        if !*said {
                            self.refusals.push((product.producer, bytes));
                            *said = true;
                        }
                        Handover::OverBound
                    }
                    None => Handover::Failed(e),
                }
            }
            Err(e) => Handover::Failed(e),
        }
    }
}

/// The route to `product`'s producer: known, or made now (and made again
/// once an unreachable producer's retry time has come). One map lookup
/// when the route is known.
fn route<'a>(
    routes: &'a mut FxHashMap<u64, Route>,
    reach: &mut Reach<'_>,
    product: &Product,
) -> &'a mut Route {
    let p = product.producer;
    if routes.len() >= MAX_ROUTES && !routes.contains_key(&p) {
        routes.retain(|_, r| !matches!(r, Route::Unreachable { .. }));
    }
    match routes.entry(p) {
        Entry::Occupied(mut e) => {
            match e.get_mut() {
                Route::Unreachable { until, .. } if Instant::now() >= *until => {
                    e.insert(connect(reach, product));
                }
                Route::Remote(x) if x.handover_retry.is_some() || x.local.is_some() => {
                    if let Some(ring) = retry_handover(x, reach, product) {
                        e.insert(Route::Local(ring));
                    }
                }
                _ => {}
            }
            e.into_mut()
        }
        Entry::Vacant(v) => v.insert(connect(reach, product)),
    }
}

/// A producer on this host read through its read server since its
/// handover failed (or its ring would have passed the bound on mapped
/// bytes): ask for its ring again when due; the ring, once the reads in
/// flight through the server are done (the route then becomes local).
fn retry_handover(
    x: &mut Remote,
    reach: &mut Reach<'_>,
    product: &Product,
) -> Option<ImportedRing> {
    if let Some(due) = x.handover_retry {
        if Instant::now() >= due {
            let cfg = reach.cfg;
            x.handover_retry = match reach.handover(product, &mut x.over_bound) {
                Handover::Mapped(r) => {
                    x.local = Some(r);
                    None
                }
                Handover::OverBound => Some(Instant::now() + cfg.retry_after),
                // another instance serves here: this one is elsewhere
                Handover::OtherInstance => None,
                Handover::Failed(e) => handover_retry(&e, cfg),
            };
        }
    }
    if x.local.is_some() && x.reads.is_empty() && x.ring.idle() {
        return x.local.take();
    }
    None
}

/// When to ask a producer for its ring again after the handover failed
/// with `e`: never if it has no handover socket here (another host, or
/// it serves none), else after the retry time (it was busy or refused).
fn handover_retry(e: &io::Error, cfg: &ConsumerConfig) -> Option<Instant> {
    match e.kind() {
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => None,
        _ => Some(Instant::now() + cfg.retry_after),
    }
}

/// A route to `product`'s instance: its ring handed over on this host
/// (within the bound on mapped bytes), else a session with its read
/// server (which must serve that very instance), else unreachable.
fn connect(reach: &mut Reach<'_>, product: &Product) -> Route {
    let cfg = reach.cfg;
    let mut retry = None;
    let mut over_bound = false;
    if cfg.local_reads {
        match reach.handover(product, &mut over_bound) {
            Handover::Mapped(r) => return Route::Local(r),
            // over the bound: through the read server, and ask again
            Handover::OverBound => retry = Some(Instant::now() + cfg.retry_after),
            // another instance of the id serves on this host: this one is
            // on another (or not yet serving): its read server
            Handover::OtherInstance => {}
            Handover::Failed(e) => retry = handover_retry(&e, cfg),
        }
    }
    let unreachable = |why: String| Route::Unreachable {
        until: Instant::now() + cfg.retry_after,
        why,
    };
    let rdma = &mut *reach.rdma;
    // a queue pair to offer, if this consumer reads by RDMA (none: the
    // device refused one, e.g. at its limits; read through the session)
    let qp = rdma
        .as_mut()
        .and_then(|r| r.open(cfg.max_outstanding_reads).ok());
    let ring = RemoteRing::connect(
        product.address,
        &cfg.key,
        cfg.max_outstanding_reads,
        slot_bytes(cfg.max_spectrum_bytes),
        cfg.read_timeout,
        cfg.connect_timeout,
        qp.map(|(_, e)| e),
        cfg.datagram_bytes,
    );
    let mut rdma_qp = None;
    let route = match ring {
        Ok(ring) if ring.producer == product.producer && ring.instance == product.instance => {
            if let (Some((p, _)), Some(offer), Some(r)) = (qp, ring.offer, rdma.as_mut()) {
                if let Err(e) = r.connect(p, offer) {
                    r.close(p, "", &mut Vec::new());
                    return unreachable(format!("connecting the RDMA queue pair failed: {e}"));
                }
                rdma_qp = Some(p);
            }
            Route::Remote(Box::new(Remote {
                ring,
                reads: FxHashMap::default(),
                // RDMA reads stay: a producer read so is not on this host
                handover_retry: retry.filter(|_| rdma_qp.is_none()),
                rdma: rdma_qp,
                local: None,
                over_bound,
            }))
        }
        Ok(ring) => unreachable(format!(
            "the read server at {} serves instance {:x} of producer {:x}, not instance {:x} \
             of producer {:x}",
            product.address, ring.instance, ring.producer, product.instance, product.producer
        )),
        Err(e) => unreachable(e.to_string()),
    };
    // no offer (a producer without RDMA reads it through its read server)
    if let (Some((p, _)), None, Some(r)) = (qp, rdma_qp, rdma.as_mut()) {
        r.close(p, "", &mut Vec::new());
    }
    route
}

impl Alert for Message {
    fn queue_alert(dropped: [u64; KINDS]) -> Message {
        Message::QueueAlert {
            dropped: dropped.iter().sum(),
            kinds: DroppedKinds::from_counts(dropped),
        }
    }

    fn class(&self) -> Result<usize, usize> {
        match self {
            Message::Valid(_) => Ok(K_VALID),
            Message::VerificationFailure { .. } => Ok(K_VERIFICATION),
            Message::ReadFailure { .. } => Ok(K_READ),
            Message::SignalReceiveFailure { .. } => Ok(K_RECEIVE),
            Message::VersionMismatch { .. } => Ok(K_VERSION),
            Message::ProducerGone { .. } => Err(K_GONE),
            Message::MappedBytesLimit { .. } => Err(K_LIMIT),
            Message::DescriptionChanged { .. } => Err(K_DESCRIPTION),
            Message::DataBufferStarvation { .. } => Err(K_STARVED),
            Message::SignalBufferStarvation { .. } => Err(K_SIGNALS_LOST),
            Message::QueueAlert { .. } => Err(K_ALERT),
            Message::End { .. } => Err(K_END),
        }
    }

    fn folds(&self) -> bool {
        matches!(
            self,
            Message::DataBufferStarvation { .. }
                | Message::SignalBufferStarvation { .. }
                | Message::QueueAlert { .. }
        )
    }

    fn fold(&mut self, later: Message) -> Option<Message> {
        match (self, later) {
            (
                Message::DataBufferStarvation { spectra },
                Message::DataBufferStarvation { spectra: more },
            ) => *spectra += more,
            (
                Message::SignalBufferStarvation { signals },
                Message::SignalBufferStarvation { signals: more },
            ) => *signals += more,
            (
                Message::QueueAlert { dropped, kinds },
                Message::QueueAlert {
                    dropped: more,
                    kinds: more_kinds,
                },
            ) => {
                *dropped += more;
                kinds.add(&more_kinds);
            }
            (_, later) => return Some(later),
        }
        None
    }
}
