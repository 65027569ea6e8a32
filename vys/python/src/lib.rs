//! # splitrt_vys._native — vys for Python
//!
//! The extension module of the Python package `splitrt_vys` (PyO3 and
//! rust-numpy, built by maturin as an abi3 wheel; the package's Python
//! part, `python/splitrt_vys/__init__.py`, wraps it). It exposes the
//! vys [`Producer`](splitrt_vys::producer::Producer) and
//! [`Consumer`](splitrt_vys::consumer::Consumer):
//!
//! * the consumer's selection is declarative ([`Selection`]) and compiled
//!   into the Rust filter: no Python code runs per signal;
//! * a valid spectrum's data is a numpy view over the consumer's pool
//!   buffer ([`SpectrumBuffer`] is the array's base object, so the buffer
//!   goes back to the pool only when the last view of it dies);
//! * `recv_batch` has the consumer's thread read spectra straight into
//!   its numpy array's rows (`Consumer::recv_into`: no second copy);
//!   `read_window` copies spectra into its window; both with the GIL
//!   released while they wait and fill.
//!
//! See docs/vys-python.md.

mod description;

use numpy::ndarray::{Array4, ArrayView1};
use numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
use numpy::{
    Complex32, IntoPyArray, PyArray1, PyArray2, PyArray4, PyArrayMethods, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use splitrt_vys::consumer::{
    Consumer as RustConsumer, ConsumerConfig, ConsumerStats, EndStatus, Message as RustMessage,
    Product, Spectrum,
};
use splitrt_vys::producer::{Producer as RustProducer, ProducerConfig, ProductId};
use splitrt_vys::signal::{DigestKind, SpectrumInfo};
use std::collections::{HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of one metadata record of `recv_batch` (the layout
/// `splitrt_vys.META_DTYPE` gives, little-endian): producer u64 at 0,
/// instance u64 at 8, timestamp u64 at 16, seq u64 at 24, config u64 at
/// 32, station0 u16 at 40, station1 u16 at 42, spectral_window u16 at 44,
/// stokes u16 at 46, channels u32 at 48, spectrum_bytes u32 at 52.
pub const META_BYTES: usize = 56;

/// Messages kept for `events()` at most (older ones are dropped and
/// counted).
const MAX_EVENTS: usize = 4096;

/// Spectra of later windows kept by `read_window` at most.
const MAX_PENDING: usize = 1024;

/// Largest output of one `recv_batch` or `read_window` call (bytes of
/// its arrays): a larger request is refused before anything is allocated.
const MAX_OUT_BYTES: usize = 16 << 30;

/// Longest single wait with the GIL released, so that Ctrl-C (a signal
/// the interpreter checks between waits) stops a long call.
const WAIT_SLICE: Duration = Duration::from_millis(100);

fn os_err(e: std::io::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// A stream key from a Python value: 64 hex digits, 32 bytes, or `None`
/// (then `$SPLITRT_VYS_KEY`).
fn key_of(key: Option<&Bound<'_, PyAny>>) -> PyResult<[u8; 32]> {
    match key {
        None => splitrt_vys::stream_key::from_file_or_env(None).map_err(PyValueError::new_err),
        Some(k) => {
            if let Ok(s) = k.extract::<String>() {
                splitrt_vys::stream_key::parse(&s).map_err(PyValueError::new_err)
            } else if let Ok(b) = k.extract::<Vec<u8>>() {
                b.as_slice().try_into().map_err(|_| {
                    PyValueError::new_err(format!("a stream key is 32 bytes, got {}", b.len()))
                })
            } else {
                Err(PyTypeError::new_err(
                    "a stream key is 64 hex digits (str) or 32 bytes",
                ))
            }
        }
    }
}

fn group_of(group: &str) -> PyResult<SocketAddrV4> {
    group.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "group '{group}': an IPv4 multicast address and port, e.g. 239.255.42.99:47000"
        ))
    })
}

fn interface_of(interface: &str) -> PyResult<Ipv4Addr> {
    interface
        .parse()
        .map_err(|_| PyValueError::new_err(format!("interface '{interface}': an IPv4 address")))
}

fn duration_of(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{what}: {s} is not a duration in seconds")))
}

fn digest_of(s: &str) -> PyResult<DigestKind> {
    s.parse().map_err(PyValueError::new_err)
}

fn digest_name(d: DigestKind) -> &'static str {
    match d {
        DigestKind::None => "none",
        DigestKind::Crc32c => "crc32c",
        DigestKind::Xxh3 => "xxh3",
        DigestKind::Md5 => "md5",
    }
}

/// A producer of spectra (a correlator back-end or its simulator): writes
/// spectra into its ring and announces them by signed multicast signals.
#[pyclass(module = "splitrt_vys._native", name = "Producer")]
pub struct Producer {
    inner: Option<RustProducer>,
    spectrum_bytes: usize,
}

impl Producer {
    fn inner(&mut self) -> PyResult<&mut RustProducer> {
        self.inner
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("this producer is closed"))
    }
}

#[pymethods]
impl Producer {
    /// See `splitrt_vys.Producer`.
    #[new]
    #[pyo3(signature = (spectrum_bytes, *, key=None, group="239.255.42.99:47000",
        interface="127.0.0.1", channels=None, slots=1024, digest="crc32c",
        spectra_per_signal=8, config=0, id=None, serve_local=true, serve_remote=true,
        heartbeat=Some(1.0)))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        spectrum_bytes: usize,
        key: Option<&Bound<'_, PyAny>>,
        group: &str,
        interface: &str,
        channels: Option<u32>,
        slots: usize,
        digest: &str,
        spectra_per_signal: usize,
        config: u64,
        id: Option<u64>,
        serve_local: bool,
        serve_remote: bool,
        heartbeat: Option<f64>,
    ) -> PyResult<Producer> {
        let mut cfg = ProducerConfig::new(
            key_of(key)?,
            group_of(group)?,
            interface_of(interface)?,
            spectrum_bytes,
        );
        if let Some(c) = channels {
            cfg.channels = c;
        }
        cfg.slots = slots;
        cfg.digest = digest_of(digest)?;
        cfg.spectra_per_signal = spectra_per_signal;
        cfg.config = config;
        cfg.id = id;
        cfg.serve_local = serve_local;
        cfg.serve_remote = serve_remote;
        cfg.heartbeat = match heartbeat {
            Some(s) => Some(duration_of("heartbeat", s)?),
            None => None,
        };
        let p = RustProducer::new(cfg).map_err(os_err)?;
        Ok(Producer {
            inner: Some(p),
            spectrum_bytes,
        })
    }

    /// Write one spectrum (`data`: a contiguous numpy array or bytes-like
    /// object of exactly `spectrum_bytes` bytes, any dtype) of the
    /// product (`stations`, `spectral_window`, `stokes`) with `timestamp`;
    /// returns the spectrum's sequence id.
    fn write(
        &mut self,
        stations: (u16, u16),
        spectral_window: u16,
        stokes: u16,
        data: &Bound<'_, PyAny>,
        timestamp: u64,
    ) -> PyResult<u64> {
        let product = ProductId {
            stations: [stations.0, stations.1],
            spectral_window,
            stokes,
        };
        let p = self.inner()?;
        let info = if let Ok(a) = data.cast::<numpy::PyUntypedArray>() {
            if !a.is_c_contiguous() {
                return Err(PyValueError::new_err(
                    "data must be C-contiguous (numpy.ascontiguousarray)",
                ));
            }
            let nbytes = a.len() * numpy::PyArrayDescrMethods::itemsize(&a.dtype());
            let ptr = {
                let arr = a.as_array_ptr();
                // SAFETY: `arr` is the live array object `a` holds; reading
                // its data pointer field is what numpy's PyArray_DATA does.
                unsafe { (*arr).fields.data }
            };
            let bytes: &[u8] = if nbytes == 0 {
                &[]
            } else {
                // SAFETY: a C-contiguous array's `nbytes` bytes start at its
                // data pointer; `a` (and so its buffer) lives, with the GIL
                // held, for this call; nothing here writes the array.
                unsafe { std::slice::from_raw_parts(ptr as *const u8, nbytes) }
            };
            p.write(product, bytes, timestamp).map_err(os_err)?
        } else {
            let b = data
                .cast::<pyo3::types::PyBytes>()
                .map_err(|_| PyTypeError::new_err("data: a numpy array or bytes"))?;
            p.write(product, b.as_bytes(), timestamp).map_err(os_err)?
        };
        Ok(info.seq)
    }

    /// Write the checkable spectrum of (`stations`, `spectral_window`,
    /// `stokes`, `timestamp`) (`checkable()` gives its bytes); returns its
    /// sequence id.
    fn write_checkable(
        &mut self,
        stations: (u16, u16),
        spectral_window: u16,
        stokes: u16,
        timestamp: u64,
    ) -> PyResult<u64> {
        let mut d = vec![0u8; self.spectrum_bytes];
        splitrt_vys::checkable::fill(
            ([stations.0, stations.1], spectral_window, stokes),
            timestamp,
            &mut d,
        );
        let product = ProductId {
            stations: [stations.0, stations.1],
            spectral_window,
            stokes,
        };
        Ok(self
            .inner()?
            .write(product, &d, timestamp)
            .map_err(os_err)?
            .seq)
    }

    /// Set the stream description (a dict: see docs/vys-python.md);
    /// it is sent at once, then periodically, and every signal names its
    /// epoch. Returns the new epoch.
    fn set_description(&mut self, description: &Bound<'_, PyDict>) -> PyResult<u32> {
        let d = description::from_dict(description)?;
        self.inner()?.set_description(d).map_err(os_err)
    }

    /// Send every partial batch of announcements now.
    fn flush(&mut self) -> PyResult<()> {
        self.inner()?.flush().map_err(os_err)
    }

    /// Stop serving (the ring, the read server, the heartbeat thread).
    fn close(&mut self) {
        self.inner = None;
    }

    /// The producer id.
    #[getter]
    fn id(&mut self) -> PyResult<u64> {
        Ok(self.inner()?.id())
    }

    /// This instance (random, drawn at its start).
    #[getter]
    fn instance(&mut self) -> PyResult<u64> {
        Ok(self.inner()?.instance())
    }

    /// Its read server's address, "ip:port".
    #[getter]
    fn address(&mut self) -> PyResult<String> {
        Ok(self.inner()?.address().to_string())
    }

    /// Bytes of every spectrum.
    #[getter]
    fn spectrum_bytes(&self) -> usize {
        self.spectrum_bytes
    }

    /// Counters: spectra, signals, signal_errors, heartbeats, descriptions.
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner()?.stats();
        let d = PyDict::new(py);
        d.set_item("spectra", s.spectra)?;
        d.set_item("signals", s.signals)?;
        d.set_item("signal_errors", s.signal_errors)?;
        d.set_item("heartbeats", s.heartbeats)?;
        d.set_item("descriptions", s.descriptions)?;
        Ok(d)
    }
}

/// The bytes of the checkable spectrum of (`stations`, `spectral_window`,
/// `stokes`, `timestamp`), `nbytes` long: what `Producer.write_checkable`
/// writes.
#[pyfunction]
fn checkable<'py>(
    py: Python<'py>,
    stations: (u16, u16),
    spectral_window: u16,
    stokes: u16,
    timestamp: u64,
    nbytes: usize,
) -> Bound<'py, pyo3::types::PyBytes> {
    pyo3::types::PyBytes::new_with(py, nbytes, |b| {
        splitrt_vys::checkable::fill(
            ([stations.0, stations.1], spectral_window, stokes),
            timestamp,
            b,
        );
        Ok(())
    })
    .expect("filling bytes cannot fail")
}

/// A consumer's declarative selection, compiled into its Rust filter: a
/// spectrum is read if its product matches every criterion given and its
/// timestamp is in range; `every` keeps one chosen spectrum in N.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    producers: Option<HashSet<u64>>,
    stations: Option<HashSet<u16>>,
    baselines: Option<HashSet<[u16; 2]>>,
    spectral_windows: Option<HashSet<u16>>,
    stokes: Option<HashSet<u16>>,
    configs: Option<HashSet<u64>>,
    autocorrelations: bool,
    crosscorrelations: bool,
    time_min: Option<u64>,
    time_max: Option<u64>,
    every: u64,
}

/// A baseline as a set key: the station pair in either order.
fn baseline_key(a: u16, b: u16) -> [u16; 2] {
    [a.min(b), a.max(b)]
}

impl Selection {
    fn product_matches(&self, p: &Product) -> bool {
        let [a, b] = p.stations;
        let auto = a == b;
        (if auto {
            self.autocorrelations
        } else {
            self.crosscorrelations
        }) && self
            .producers
            .as_ref()
            .is_none_or(|s| s.contains(&p.producer))
            && self
                .stations
                .as_ref()
                .is_none_or(|s| s.contains(&a) && s.contains(&b))
            && self
                .baselines
                .as_ref()
                .is_none_or(|s| s.contains(&baseline_key(a, b)))
            && self
                .spectral_windows
                .as_ref()
                .is_none_or(|s| s.contains(&p.spectral_window))
            && self.stokes.as_ref().is_none_or(|s| s.contains(&p.stokes))
            && self.configs.as_ref().is_none_or(|s| s.contains(&p.config))
    }

    fn time_matches(&self, t: u64) -> bool {
        self.time_min.is_none_or(|m| t >= m) && self.time_max.is_none_or(|m| t < m)
    }

    /// The filter closure: runs on the consumer's thread, no Python.
    fn into_filter(self) -> impl FnMut(&Product, &[SpectrumInfo], &mut [bool]) + Send + 'static {
        let mut seen = 0u64;
        let every = self.every.max(1);
        move |p, infos, pass| {
            if !self.product_matches(p) {
                return;
            }
            for (x, i) in pass.iter_mut().zip(infos) {
                if self.time_matches(i.timestamp) {
                    *x = seen.is_multiple_of(every);
                    seen += 1;
                }
            }
        }
    }
}

fn opt_set<'py, T: FromPyObjectOwned<'py> + std::hash::Hash + Eq>(
    v: Option<Bound<'py, PyAny>>,
    what: &str,
) -> PyResult<Option<HashSet<T>>> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(one) = v.extract::<T>() {
        return Ok(Some(HashSet::from([one])));
    }
    let mut s = HashSet::new();
    for x in v.try_iter()? {
        s.insert(x?.extract::<T>().map_err(|_| {
            PyTypeError::new_err(format!("{what}: an integer or an iterable of integers"))
        })?);
    }
    Ok(Some(s))
}

/// How `data` of a valid spectrum is typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    /// complex64 where `spectrum_bytes == 8 * channels`, else uint8.
    Auto,
    /// complex64 always (a spectrum of another size is an error).
    Complex64,
    /// uint8 always.
    Raw,
}

impl Dtype {
    fn complex(self, p: &Product) -> PyResult<bool> {
        let fits = p.channels > 0 && p.spectrum_bytes as u64 == 8 * p.channels as u64;
        match self {
            Dtype::Auto => Ok(fits),
            Dtype::Raw => Ok(false),
            Dtype::Complex64 if fits => Ok(true),
            Dtype::Complex64 => Err(PyValueError::new_err(format!(
                "a spectrum of {} B and {} channels is not complex64 (8 B a channel): use dtype='raw'",
                p.spectrum_bytes, p.channels
            ))),
        }
    }
}

/// The owner of one valid spectrum's pool buffer: the base object of
/// every numpy view of it. The buffer goes back to the consumer's pool
/// when this object dies (no view and no message holds it any more).
#[pyclass(module = "splitrt_vys._native", frozen)]
pub struct SpectrumBuffer {
    spectrum: Spectrum,
}

/// One consumer message (vysmaw's kinds); a valid one holds its spectrum.
#[pyclass(module = "splitrt_vys._native", frozen, name = "Message")]
pub struct Message {
    /// valid, verification_failure, read_failure, data_buffer_starvation,
    /// signal_buffer_starvation, queue_alert, signal_receive_failure,
    /// version_mismatch, producer_gone, mapped_bytes_limit, end.
    #[pyo3(get)]
    kind: &'static str,
    product: Option<std::sync::Arc<Product>>,
    info: Option<SpectrumInfo>,
    /// Why (failures, end).
    #[pyo3(get)]
    error: Option<String>,
    /// How many (starvation, queue alert), the version (version mismatch).
    #[pyo3(get)]
    count: Option<u64>,
    /// For producer_gone / mapped_bytes_limit: which producer and details;
    /// for queue_alert: how many of each kind were dropped.
    extra: Vec<(&'static str, u64)>,
    stats: Option<ConsumerStats>,
    complex: bool,
    held: Mutex<Held>,
    /// For description_changed: the description.
    described: Option<splitrt_vys::described::Described>,
}

/// What a message holds of its spectrum until released.
#[derive(Default)]
struct Held {
    buffer: Option<Py<SpectrumBuffer>>,
    view: Option<Py<PyAny>>,
    released: bool,
}

fn stats_dict<'py>(py: Python<'py>, s: &ConsumerStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in [
        ("signals", s.signals),
        ("chosen", s.chosen),
        ("valid", s.valid),
        ("verification_failures", s.verification_failures),
        ("read_failures", s.read_failures),
        ("starved", s.starved),
        ("signals_lost", s.signals_lost),
        ("bad_signals", s.bad_signals),
        ("version_mismatches", s.version_mismatches),
        ("replays", s.replays),
        ("queue_dropped", s.queue_dropped),
        ("local_reads", s.local_reads),
        ("remote_reads", s.remote_reads),
        ("rdma_reads", s.rdma_reads),
        ("heartbeats", s.heartbeats),
        ("producers_gone", s.producers_gone),
        ("restarts", s.restarts),
        ("mapping_refusals", s.mapping_refusals),
        ("mapped_bytes", s.mapped_bytes),
        ("descriptions_changed", s.descriptions_changed),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

impl Message {
    fn new(py: Python<'_>, m: RustMessage, dtype: Dtype) -> PyResult<Message> {
        let text = m.to_string();
        let mut out = Message {
            kind: "",
            product: None,
            info: None,
            error: None,
            count: None,
            extra: Vec::new(),
            stats: None,
            complex: false,
            held: Mutex::new(Held::default()),
            described: None,
        };
        match m {
            RustMessage::Valid(s) => {
                out.kind = "valid";
                out.complex = dtype.complex(&s.product)?;
                out.product = Some(s.product.clone());
                out.info = Some(s.info);
                let b = Py::new(py, SpectrumBuffer { spectrum: s })?;
                out.held.get_mut().expect("fresh lock").buffer = Some(b);
            }
            RustMessage::VerificationFailure { product, info, .. } => {
                out.kind = "verification_failure";
                out.product = Some(product);
                out.info = Some(info);
                out.error = Some(text);
            }
            RustMessage::ReadFailure { product, info, .. } => {
                out.kind = "read_failure";
                out.product = Some(product);
                out.info = Some(info);
                out.error = Some(text);
            }
            RustMessage::DataBufferStarvation { spectra } => {
                out.kind = "data_buffer_starvation";
                out.count = Some(spectra);
                out.error = Some(text);
            }
            RustMessage::SignalBufferStarvation { signals } => {
                out.kind = "signal_buffer_starvation";
                out.count = Some(signals);
                out.error = Some(text);
            }
            RustMessage::QueueAlert { dropped, kinds } => {
                out.kind = "queue_alert";
                out.count = Some(dropped);
                out.extra = vec![
                    ("valid", kinds.valid),
                    ("verification_failures", kinds.verification_failures),
                    ("read_failures", kinds.read_failures),
                    ("signal_receive_failures", kinds.signal_receive_failures),
                    ("version_mismatches", kinds.version_mismatches),
                    ("producers_gone", kinds.producers_gone),
                    ("mapped_bytes_limits", kinds.mapped_bytes_limits),
                    ("descriptions_changed", kinds.descriptions_changed),
                ];
                out.error = Some(text);
            }
            RustMessage::SignalReceiveFailure { count, .. } => {
                out.kind = "signal_receive_failure";
                out.count = Some(count);
                out.error = Some(text);
            }
            RustMessage::VersionMismatch { version } => {
                out.kind = "version_mismatch";
                out.count = Some(version as u64);
                out.error = Some(text);
            }
            RustMessage::ProducerGone {
                producer,
                instance,
                silent_for,
            } => {
                out.kind = "producer_gone";
                out.extra = vec![
                    ("producer", producer),
                    ("instance", instance),
                    ("silent_for_ns", silent_for.as_nanos() as u64),
                ];
                out.error = Some(text);
            }
            RustMessage::MappedBytesLimit {
                producer,
                ring_bytes,
                mapped,
                limit,
            } => {
                out.kind = "mapped_bytes_limit";
                out.extra = vec![
                    ("producer", producer),
                    ("ring_bytes", ring_bytes),
                    ("mapped", mapped),
                    ("limit", limit),
                ];
                out.error = Some(text);
            }
            RustMessage::DescriptionChanged {
                producer,
                described,
            } => {
                out.kind = "description_changed";
                out.extra = vec![
                    ("producer", producer),
                    ("instance", described.instance),
                    ("epoch", described.epoch as u64),
                ];
                out.described = Some(described);
                out.error = Some(text);
            }
            RustMessage::End { status, stats } => {
                out.kind = "end";
                out.error = match status {
                    EndStatus::Shutdown => None,
                    EndStatus::Failed(e) => Some(e),
                };
                out.stats = Some(stats);
            }
        }
        Ok(out)
    }

    fn extra(&self, k: &str) -> Option<u64> {
        self.extra.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A read-only numpy view of `buffer`'s spectrum with `buffer` as its
/// base object.
fn view_of<'py>(buffer: &Bound<'py, SpectrumBuffer>, complex: bool) -> Bound<'py, PyAny> {
    let data = buffer.get().spectrum.data();
    let aligned = (data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<Complex32>());
    let arr: Bound<'py, PyAny> = if complex && aligned && data.len().is_multiple_of(8) {
        let n = data.len() / 8;
        let ptr = data.as_ptr() as *const Complex32;
        // SAFETY: `ptr` is aligned for Complex32 (checked), `n`
        // Complex32s are `data.len()` bytes of `data`, any bit pattern is
        // a valid pair of f32, and the bytes stay unchanged while the
        // view lives (below).
        let v: ArrayView1<'_, Complex32> = unsafe { ArrayView1::from_shape_ptr(n, ptr) };
        // SAFETY: the array's base is `buffer`, which owns the spectrum
        // (its pool buffer is a Vec never resized or written while the
        // spectrum lives: `Spectrum` gives only `&[u8]`), so the memory
        // outlives the array.
        let a = unsafe { PyArray1::<Complex32>::borrow_from_array(&v, buffer.clone().into_any()) };
        a.into_any()
    } else {
        let v = ArrayView1::from(data);
        // SAFETY: as above: `buffer` owns the bytes and is the base.
        let a = unsafe { PyArray1::<u8>::borrow_from_array(&v, buffer.clone().into_any()) };
        a.into_any()
    };
    let raw = arr.as_ptr() as *mut numpy::npyffi::PyArrayObject;
    // SAFETY: `raw` is the array just made, alive (held by `arr`), with
    // the GIL held; clearing WRITEABLE is what numpy's
    // PyArray_CLEARFLAGS does: the pool buffer is read-only to Python.
    unsafe { (*raw).fields.flags &= !NPY_ARRAY_WRITEABLE };
    arr
}

#[pymethods]
impl Message {
    /// The spectrum's data: a read-only numpy view (complex64 or uint8)
    /// over the pool buffer, alive as long as the array is. Raises
    /// ValueError after `release()`, or for a message with no spectrum.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut h = self.held();
        if let Some(v) = &h.view {
            return Ok(v.bind(py).clone());
        }
        let Some(b) = &h.buffer else {
            return Err(PyValueError::new_err(if h.released {
                "this message was released: its data is gone (keep the array taken before release)"
            } else {
                "this message has no spectrum"
            }));
        };
        let v = view_of(b.bind(py), self.complex);
        h.view = Some(v.clone().unbind());
        Ok(v)
    }

    /// For a description_changed message: the description, a dict (see
    /// `Consumer.description`); for a spectrum: the description of its
    /// epoch, if the consumer had it when it took the spectrum's signal;
    /// else None.
    #[getter]
    fn description<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        if let Some(d) = &self.described {
            return description::to_dict(py, d).map(Some);
        }
        let Some(p) = &self.product else {
            return Ok(None);
        };
        let Some(d) = &p.description else {
            return Ok(None);
        };
        let d = splitrt_vys::described::Described {
            instance: p.instance,
            epoch: p.description_epoch,
            description: d.clone(),
        };
        description::to_dict(py, &d).map(Some)
    }

    /// The epoch of the stream description a spectrum belongs to (0: its
    /// producer set none); for a description_changed message, the new
    /// epoch; else None.
    #[getter]
    fn description_epoch(&self) -> Option<u32> {
        match (&self.described, &self.product) {
            (Some(d), _) => Some(d.epoch),
            (None, Some(p)) => Some(p.description_epoch),
            (None, None) => None,
        }
    }

    /// Give the spectrum's buffer back (to the pool once no numpy view of
    /// it is alive). Idempotent.
    fn release(&self) {
        let mut h = self.held();
        let b = h.buffer.take();
        let v = h.view.take();
        h.released = true;
        drop(h);
        drop((v, b));
    }

    /// Whether `release()` was called.
    #[getter]
    fn released(&self) -> bool {
        self.held().released
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.release();
        false
    }

    /// Whether this is a valid spectrum.
    #[getter]
    fn valid(&self) -> bool {
        self.kind == "valid"
    }

    /// The producer id (spectrum messages, producer_gone, mapped_bytes_limit).
    #[getter]
    fn producer(&self) -> Option<u64> {
        self.product
            .as_ref()
            .map(|p| p.producer)
            .or_else(|| self.extra("producer"))
    }

    /// The producer instance.
    #[getter]
    fn instance(&self) -> Option<u64> {
        self.product
            .as_ref()
            .map(|p| p.instance)
            .or_else(|| self.extra("instance"))
    }

    /// The station pair.
    #[getter]
    fn stations(&self) -> Option<(u16, u16)> {
        self.product
            .as_ref()
            .map(|p| (p.stations[0], p.stations[1]))
    }

    /// The spectral window.
    #[getter]
    fn spectral_window(&self) -> Option<u16> {
        self.product.as_ref().map(|p| p.spectral_window)
    }

    /// The stokes product.
    #[getter]
    fn stokes(&self) -> Option<u16> {
        self.product.as_ref().map(|p| p.stokes)
    }

    /// Channels per spectrum.
    #[getter]
    fn channels(&self) -> Option<u32> {
        self.product.as_ref().map(|p| p.channels)
    }

    /// Bytes per spectrum.
    #[getter]
    fn spectrum_bytes(&self) -> Option<u32> {
        self.product.as_ref().map(|p| p.spectrum_bytes)
    }

    /// The correlator configuration id.
    #[getter]
    fn config(&self) -> Option<u64> {
        self.product.as_ref().map(|p| p.config)
    }

    /// The digest kind ("none", "crc32c", "xxh3", "md5").
    #[getter]
    fn digest(&self) -> Option<&'static str> {
        self.product.as_ref().map(|p| digest_name(p.digest))
    }

    /// The producer's read server, "ip:port".
    #[getter]
    fn address(&self) -> Option<String> {
        self.product.as_ref().map(|p| p.address.to_string())
    }

    /// The spectrum's timestamp.
    #[getter]
    fn timestamp(&self) -> Option<u64> {
        self.info.map(|i| i.timestamp)
    }

    /// The spectrum's sequence id.
    #[getter]
    fn seq(&self) -> Option<u64> {
        self.info.map(|i| i.seq)
    }

    /// Other numbers of this kind (producer_gone: silent_for_ns;
    /// mapped_bytes_limit: ring_bytes, mapped, limit).
    #[getter]
    fn details<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.extra {
            d.set_item(*k, *v)?;
        }
        Ok(d)
    }

    /// Every count (the end message only).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.stats.as_ref().map(|s| stats_dict(py, s)).transpose()
    }

    fn __repr__(&self) -> String {
        match (&self.product, &self.info) {
            (Some(p), Some(i)) => format!(
                "<Message {} producer={:x} stations={}-{} spw={} stokes={} t={} seq={}>",
                self.kind,
                p.producer,
                p.stations[0],
                p.stations[1],
                p.spectral_window,
                p.stokes,
                i.timestamp,
                i.seq
            ),
            _ => match &self.error {
                Some(e) => format!("<Message {}: {e}>", self.kind),
                None => format!("<Message {}>", self.kind),
            },
        }
    }
}

/// What a consumer keeps between calls.
#[derive(Default)]
struct State {
    /// Valid spectra taken from the queue and not delivered yet (of
    /// another size than a batch, or of a later window).
    pending: VecDeque<RustMessage>,
    /// Other messages taken by `recv_batch` / `read_window`, for
    /// `events()`.
    events: VecDeque<RustMessage>,
    /// Events dropped because `events` was full.
    events_dropped: u64,
    /// The end message was taken.
    ended: bool,
    /// The last batch's spectrum size and type (complex64 or raw): the
    /// size of the rows `recv_batch` offers before a spectrum comes.
    last_shape: Option<(usize, bool)>,
}

impl State {
    fn event(&mut self, m: RustMessage) {
        if matches!(m, RustMessage::End { .. }) {
            self.ended = true;
        }
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(m);
    }
}

/// A raw pointer that crosses into a GIL-free section; what it points to
/// is an array the caller keeps alive and no one else touches meanwhile.
#[derive(Clone, Copy)]
struct Out(*mut u8);
// SAFETY: the pointer is only used by the one thread running the
// detached closure while its owner (the calling thread) waits for it.
unsafe impl Send for Out {}
// SAFETY: as above (shared by reference with that one thread only).
unsafe impl Sync for Out {}

fn put_meta(rec: &mut [u8], p: &Product, i: &SpectrumInfo) {
    rec[0..8].copy_from_slice(&p.producer.to_le_bytes());
    rec[8..16].copy_from_slice(&p.instance.to_le_bytes());
    rec[16..24].copy_from_slice(&i.timestamp.to_le_bytes());
    rec[24..32].copy_from_slice(&i.seq.to_le_bytes());
    rec[32..40].copy_from_slice(&p.config.to_le_bytes());
    rec[40..42].copy_from_slice(&p.stations[0].to_le_bytes());
    rec[42..44].copy_from_slice(&p.stations[1].to_le_bytes());
    rec[44..46].copy_from_slice(&p.spectral_window.to_le_bytes());
    rec[46..48].copy_from_slice(&p.stokes.to_le_bytes());
    rec[48..52].copy_from_slice(&p.channels.to_le_bytes());
    rec[52..56].copy_from_slice(&p.spectrum_bytes.to_le_bytes());
}

/// The layout of `read_window`'s output.
struct Window {
    t0: u64,
    t1: u64,
    integration: u64,
    times: usize,
    baselines: Vec<[u16; 2]>,
    spws: Vec<u16>,
    stokes: Vec<u16>,
    channels: usize,
}

impl Window {
    /// The cell of a spectrum: (time, baseline, spectral window index,
    /// stokes index, conjugate), or None if it is not in the window.
    fn cell(&self, p: &Product, t: u64) -> Option<(usize, usize, usize, usize, bool)> {
        if t < self.t0 || t >= self.t1 || p.channels as usize != self.channels {
            return None;
        }
        let ti = ((t - self.t0) / self.integration) as usize;
        if ti >= self.times {
            return None;
        }
        let [a, b] = p.stations;
        let (bi, conj) = match self.baselines.iter().position(|x| *x == [a, b]) {
            Some(i) => (i, false),
            None => (self.baselines.iter().position(|x| *x == [b, a])?, true),
        };
        let si = self.spws.iter().position(|x| *x == p.spectral_window)?;
        let pi = self.stokes.iter().position(|x| *x == p.stokes)?;
        Some((ti, bi, si, pi, conj))
    }

    fn cells(&self) -> usize {
        self.times * self.baselines.len() * self.spws.len() * self.stokes.len()
    }
}

/// What `read_window` returns: data, flags, cells filled.
type WindowOut<'py> = (
    Bound<'py, PyArray4<Complex32>>,
    Bound<'py, PyArray4<bool>>,
    usize,
);

/// A consumer: takes the signals of the stream, reads the chosen spectra
/// and hands out the outcomes.
#[pyclass(module = "splitrt_vys._native", frozen, name = "Consumer")]
pub struct Consumer {
    inner: RustConsumer,
    dtype: Dtype,
    state: Mutex<State>,
}

impl Consumer {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next message (pending spectra first), waiting until `until`.
    fn next(&self, st: &mut State, until: Instant) -> Option<RustMessage> {
        if let Some(m) = st.pending.pop_front() {
            return Some(m);
        }
        if st.ended {
            return None;
        }
        let m = self
            .inner
            .recv(until.saturating_duration_since(Instant::now()));
        if matches!(m, Some(RustMessage::End { .. })) {
            st.ended = true;
        }
        m
    }

    /// The next valid spectrum until `until` (other messages go to
    /// `events`), waiting in slices so signals can be checked between.
    fn next_valid(&self, py: Python<'_>, until: Instant) -> PyResult<Option<Spectrum>> {
        loop {
            let slice = (Instant::now() + WAIT_SLICE).min(until);
            let got = py.detach(|| {
                let mut st = self.state();
                loop {
                    match self.next(&mut st, slice) {
                        Some(RustMessage::Valid(s)) => return Some(s),
                        Some(other) => st.event(other),
                        None => return None,
                    }
                }
            });
            if got.is_some() || Instant::now() >= until || self.state().ended {
                return Ok(got);
            }
            py.check_signals()?;
        }
    }
}

fn deadline(timeout: Option<f64>) -> PyResult<Instant> {
    Ok(match timeout {
        Some(s) => Instant::now() + duration_of("timeout", s)?,
        // "Forever": far enough.
        None => Instant::now() + Duration::from_secs(100 * 365 * 86_400),
    })
}

#[pymethods]
impl Consumer {
    /// See `splitrt_vys.Consumer`.
    #[new]
    #[pyo3(signature = (*, key=None, group="239.255.42.99:47000", interface="127.0.0.1",
        producers=None, stations=None, baselines=None, spectral_windows=None, stokes=None,
        configs=None, autocorrelations=true, crosscorrelations=true, time_min=None,
        time_max=None, every=1, dtype="auto", max_spectrum_bytes=65536, data_buffers=4096,
        queue_len=8192, max_outstanding_reads=256, read_timeout=2.0, connect_timeout=1.0,
        retry_after=2.0, local_reads=true, producer_silence=5.0, max_mapped_bytes=16u64<<30,
        multicast=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: Option<&Bound<'_, PyAny>>,
        group: &str,
        interface: &str,
        producers: Option<Bound<'_, PyAny>>,
        stations: Option<Bound<'_, PyAny>>,
        baselines: Option<Bound<'_, PyAny>>,
        spectral_windows: Option<Bound<'_, PyAny>>,
        stokes: Option<Bound<'_, PyAny>>,
        configs: Option<Bound<'_, PyAny>>,
        autocorrelations: bool,
        crosscorrelations: bool,
        time_min: Option<u64>,
        time_max: Option<u64>,
        every: u64,
        dtype: &str,
        max_spectrum_bytes: usize,
        data_buffers: usize,
        queue_len: usize,
        max_outstanding_reads: usize,
        read_timeout: f64,
        connect_timeout: f64,
        retry_after: f64,
        local_reads: bool,
        producer_silence: f64,
        max_mapped_bytes: u64,
        multicast: bool,
    ) -> PyResult<Consumer> {
        let baselines = match baselines {
            None => None,
            Some(b) if b.is_none() => None,
            Some(b) => {
                let mut s = HashSet::new();
                for x in b.try_iter()? {
                    let (a, c): (u16, u16) = x?.extract().map_err(|_| {
                        PyTypeError::new_err("baselines: an iterable of station pairs (a, b)")
                    })?;
                    s.insert(baseline_key(a, c));
                }
                Some(s)
            }
        };
        let sel = Selection {
            producers: opt_set(producers, "producers")?,
            stations: opt_set(stations, "stations")?,
            baselines,
            spectral_windows: opt_set(spectral_windows, "spectral_windows")?,
            stokes: opt_set(stokes, "stokes")?,
            configs: opt_set(configs, "configs")?,
            autocorrelations,
            crosscorrelations,
            time_min,
            time_max,
            every: every.max(1),
        };
        let dtype = match dtype {
            "auto" => Dtype::Auto,
            "complex64" => Dtype::Complex64,
            "raw" | "uint8" => Dtype::Raw,
            o => {
                return Err(PyValueError::new_err(format!(
                    "dtype '{o}': 'auto', 'complex64' or 'raw'"
                )))
            }
        };
        let key = key_of(key)?;
        let mut cfg = if multicast {
            ConsumerConfig::new(key, group_of(group)?, interface_of(interface)?)
        } else {
            ConsumerConfig::without_multicast(key)
        };
        cfg.max_spectrum_bytes = max_spectrum_bytes;
        cfg.data_buffers = data_buffers;
        cfg.queue_len = queue_len;
        cfg.max_outstanding_reads = max_outstanding_reads;
        cfg.read_timeout = duration_of("read_timeout", read_timeout)?;
        cfg.connect_timeout = duration_of("connect_timeout", connect_timeout)?;
        cfg.retry_after = duration_of("retry_after", retry_after)?;
        cfg.local_reads = local_reads;
        cfg.producer_silence = duration_of("producer_silence", producer_silence)?;
        cfg.max_mapped_bytes = max_mapped_bytes;
        let inner = py
            .detach(|| RustConsumer::start(cfg, sel.into_filter()))
            .map_err(os_err)?;
        Ok(Consumer {
            inner,
            dtype,
            state: Mutex::new(State::default()),
        })
    }

    /// The next message, waiting at most `timeout` seconds (None: until
    /// one comes); None on timeout or after the end message was taken.
    /// Messages kept by `recv_batch` / `read_window` (events, pending
    /// spectra) come first.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Message>> {
        let until = deadline(timeout)?;
        loop {
            let slice = (Instant::now() + WAIT_SLICE).min(until);
            let got = py.detach(|| {
                let mut st = self.state();
                if let Some(e) = st.events.pop_front() {
                    return Some(e);
                }
                self.next(&mut st, slice)
            });
            if let Some(m) = got {
                return Message::new(py, m, self.dtype).map(Some);
            }
            if Instant::now() >= until || self.state().ended {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// Up to `max` valid spectra, waiting at most `timeout` seconds in
    /// all (returns sooner when `max` came or the consumer ended):
    /// `(meta, data)`, `meta` a uint8 array of `n * META_BYTES` bytes
    /// (viewed as `META_DTYPE` by the package), `data` `[n, nchan]`
    /// complex64 (or `[n, nbytes]` uint8). Every spectrum of a batch has
    /// the first one's size; one of another size waits for the next call.
    /// The consumer's thread reads spectra straight into `data`'s rows
    /// (`Consumer::recv_into`); spectra it queued before are copied.
    /// Other messages are kept for `events()`. The GIL is released while
    /// waiting and filling.
    #[pyo3(signature = (max, timeout=None))]
    fn recv_batch<'py>(
        &self,
        py: Python<'py>,
        max: usize,
        timeout: Option<f64>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let until = deadline(timeout)?;
        let empty = |py: Python<'py>| {
            let meta = PyArray1::<u8>::zeros(py, [0], false);
            let data = PyArray2::<u8>::zeros(py, [0, 0], false);
            (meta.into_any(), data.into_any())
        };
        if max == 0 {
            return Ok(empty(py));
        }
        // Rows for the consumer's thread to fill, of a size known before
        // any spectrum comes: the last batch's (a spectrum of another
        // size ends the batch; if it is the first, the batch is planned
        // again for its size).
        loop {
            // The batch's size and type: of the first pending spectrum,
            // else of the last batch, else of the next valid spectrum.
            let (mut first, last) = {
                let mut st = self.state();
                let first = match st.pending.front() {
                    Some(RustMessage::Valid(_)) => match st.pending.pop_front() {
                        Some(RustMessage::Valid(s)) => Some(s),
                        _ => None,
                    },
                    _ => None,
                };
                (first, st.last_shape)
            };
            if first.is_none() && last.is_none() {
                first = self.next_valid(py, until)?;
                if first.is_none() {
                    return Ok(empty(py));
                }
            }
            let (nbytes, complex) = match (&first, last) {
                (Some(f), _) => (
                    f.product.spectrum_bytes as usize,
                    self.dtype.complex(&f.product)?,
                ),
                (None, Some(shape)) => shape,
                (None, None) => return Ok(empty(py)),
            };
            if max
                .checked_mul(nbytes.max(META_BYTES))
                .is_none_or(|b| b > MAX_OUT_BYTES)
            {
                // `first` goes back to the pool; the call asked too much.
                return Err(PyValueError::new_err(format!(
                    "recv_batch: {max} spectra of {nbytes} B is more than {MAX_OUT_BYTES} B"
                )));
            }
            let width = if complex { nbytes / 8 } else { nbytes };
            // SAFETY: uninitialised arrays of plain numbers (any bit
            // pattern is a value); rows are written before they are
            // returned, and only the first `n` rows are returned.
            let meta = unsafe { PyArray1::<u8>::new(py, [max * META_BYTES], false) };
            let data: Bound<'py, PyAny> = if complex {
                // SAFETY: as above.
                unsafe { PyArray2::<Complex32>::new(py, [max, width], false) }.into_any()
            } else {
                // SAFETY: as above.
                unsafe { PyArray2::<u8>::new(py, [max, width], false) }.into_any()
            };
            let mp = Out(meta.data());
            let dp = Out({
                let raw = data.as_ptr() as *mut numpy::npyffi::PyArrayObject;
                // SAFETY: `raw` is the live array `data` just made; its
                // data field is its buffer (PyArray_DATA).
                unsafe { (*raw).fields.data as *mut u8 }
            });
            let mut n = 0usize;
            // A different size ends the batch.
            let mut other_size = false;
            let mut spectra = Vec::new();
            loop {
                let slice = (Instant::now() + WAIT_SLICE).min(until);
                py.detach(|| {
                    // The wrappers, not their raw fields.
                    let (mp, dp) = (mp, dp);
                    // SAFETY: `meta` and `data` are fresh C-contiguous
                    // arrays of `max * META_BYTES` and `max * nbytes`
                    // bytes that no one else holds yet (not returned);
                    // the calling thread keeps them alive and waits for
                    // this closure.
                    let meta = unsafe { std::slice::from_raw_parts_mut(mp.0, max * META_BYTES) };
                    // SAFETY: as above.
                    let data = unsafe { std::slice::from_raw_parts_mut(dp.0, max * nbytes) };
                    let mut put = |s: &Spectrum, n: usize| {
                        put_meta(
                            &mut meta[n * META_BYTES..(n + 1) * META_BYTES],
                            &s.product,
                            &s.info,
                        );
                        data[n * nbytes..(n + 1) * nbytes].copy_from_slice(s.data());
                    };
                    if let Some(f) = first.take() {
                        put(&f, n);
                        n += 1;
                    }
                    let mut st = self.state();
                    // spectra taken from the queue before come first
                    while n < max {
                        match st.pending.pop_front() {
                            Some(RustMessage::Valid(s)) => {
                                if s.product.spectrum_bytes as usize != nbytes {
                                    st.pending.push_front(RustMessage::Valid(s));
                                    other_size = true;
                                    return;
                                }
                                put(&s, n);
                                n += 1;
                            }
                            Some(other) => st.event(other),
                            None => break,
                        }
                    }
                    if n >= max || st.ended {
                        return;
                    }
                    // the rest straight into the rows
                    let wait = slice.saturating_duration_since(Instant::now());
                    let got = self.inner.recv_into(
                        &mut data[n * nbytes..],
                        nbytes,
                        wait,
                        &mut spectra,
                        |m| st.event(m),
                    );
                    for (i, (p, info)) in spectra.drain(..).enumerate() {
                        let k = n + i;
                        put_meta(&mut meta[k * META_BYTES..(k + 1) * META_BYTES], &p, &info);
                    }
                    n += got.rows;
                    if let Some(s) = got.left {
                        st.pending.push_front(RustMessage::Valid(s));
                        other_size = true;
                    }
                });
                if n >= max || other_size || Instant::now() >= until || self.state().ended {
                    break;
                }
                py.check_signals()?;
            }
            if n == 0 && other_size {
                // planned for the last batch's size, and the first
                // spectrum has another: plan for it
                continue;
            }
            if n > 0 {
                self.state().last_shape = Some((nbytes, complex));
            }
            let meta = meta.call_method1(
                "__getitem__",
                (pyo3::types::PySlice::new(
                    py,
                    0,
                    (n * META_BYTES) as isize,
                    1,
                ),),
            )?;
            let data = data.call_method1(
                "__getitem__",
                (pyo3::types::PySlice::new(py, 0, n as isize, 1),),
            )?;
            return Ok((meta, data));
        }
    }

    /// Fill `[time, baseline, channel, pol]` complex64 data and flags
    /// (True: no valid spectrum) for times `t0 <= t < t1` in steps of
    /// `integration` (the timestamps' unit), `baselines` (station pairs;
    /// a spectrum of (b, a) for a listed (a, b) is conjugated), spectral
    /// windows `spectral_windows` of `channels` channels each placed one
    /// after the other along the channel axis, and `stokes` along the pol
    /// axis. Returns when every cell is filled or after `timeout` seconds;
    /// spectra at or past `t1` are kept for the next window, earlier
    /// ones dropped. `(data, flags, filled)`.
    #[pyo3(signature = (t0, t1, integration, baselines, spectral_windows, stokes, channels, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_window<'py>(
        &self,
        py: Python<'py>,
        t0: u64,
        t1: u64,
        integration: u64,
        baselines: Vec<(u16, u16)>,
        spectral_windows: Vec<u16>,
        stokes: Vec<u16>,
        channels: usize,
        timeout: Option<f64>,
    ) -> PyResult<WindowOut<'py>> {
        if integration == 0 || t1 <= t0 || channels == 0 {
            return Err(PyValueError::new_err(
                "need t0 < t1, integration > 0 and channels > 0",
            ));
        }
        let until = deadline(timeout)?;
        let times = (t1 - t0).div_ceil(integration);
        let cells = [
            baselines.len() as u64,
            spectral_windows.len() as u64,
            channels as u64,
            stokes.len() as u64,
            9, // 8 bytes of data and 1 of flag a cell
        ]
        .iter()
        .try_fold(times, |a, &b| a.checked_mul(b));
        if cells.is_none_or(|b| b > MAX_OUT_BYTES as u64) {
            return Err(PyValueError::new_err(format!(
                "read_window: {times} times x {} baselines x {} windows x {channels} channels x                  {} stokes is more than {MAX_OUT_BYTES} B",
                baselines.len(),
                spectral_windows.len(),
                stokes.len()
            )));
        }
        let w = Window {
            t0,
            t1,
            integration,
            times: times as usize,
            baselines: baselines.iter().map(|&(a, b)| [a, b]).collect(),
            spws: spectral_windows,
            stokes,
            channels,
        };
        let (nt, nb, nc, np) = (
            w.times,
            w.baselines.len(),
            w.spws.len() * channels,
            w.stokes.len(),
        );
        let data = PyArray4::<Complex32>::zeros(py, [nt, nb, nc, np], false);
        let flags = Array4::from_elem((nt, nb, nc, np), true).into_pyarray(py);
        let dp = Out(data.data() as *mut u8);
        let fp = Out(flags.data() as *mut u8);
        let total = w.cells();
        let mut filled = 0usize;
        let mut seen = vec![false; total];
        loop {
            let slice = (Instant::now() + WAIT_SLICE).min(until);
            py.detach(|| {
                let (dp, fp) = (dp, fp); // the wrappers, not their raw fields
                let cells = nt * nb * nc * np;
                // SAFETY: `data` and `flags` are fresh C-contiguous arrays
                // of `cells` elements that the calling thread holds and
                // does not touch while it waits for this closure.
                let data = unsafe { std::slice::from_raw_parts_mut(dp.0 as *mut Complex32, cells) };
                // SAFETY: as above (numpy bool is one byte, 0 or 1).
                let flags = unsafe { std::slice::from_raw_parts_mut(fp.0 as *mut bool, cells) };
                let mut st = self.state();
                let mut later = Vec::new();
                while filled < total {
                    let s = match self.next(&mut st, slice) {
                        Some(RustMessage::Valid(s)) => s,
                        Some(other) => {
                            st.event(other);
                            continue;
                        }
                        None => break,
                    };
                    let t = s.info.timestamp;
                    if t >= w.t1 {
                        later.push(RustMessage::Valid(s));
                        continue;
                    }
                    let Some((ti, bi, si, pi, conj)) = w.cell(&s.product, t) else {
                        continue; // before the window, or not asked for
                    };
                    if s.product.spectrum_bytes as usize != 8 * channels {
                        continue;
                    }
                    let id = ((ti * nb + bi) * w.spws.len() + si) * np + pi;
                    if !seen[id] {
                        seen[id] = true;
                        filled += 1;
                    }
                    let bytes = s.data();
                    for c in 0..channels {
                        let re = f32::from_le_bytes(bytes[8 * c..8 * c + 4].try_into().expect("4"));
                        let im =
                            f32::from_le_bytes(bytes[8 * c + 4..8 * c + 8].try_into().expect("4"));
                        let k = ((ti * nb + bi) * nc + si * channels + c) * np + pi;
                        data[k] = Complex32::new(re, if conj { -im } else { im });
                        flags[k] = false;
                    }
                }
                // Later spectra wait for the next window (bounded: the
                // oldest beyond the bound are dropped).
                for m in later.into_iter().rev() {
                    st.pending.push_front(m);
                }
                while st.pending.len() > MAX_PENDING {
                    st.pending.pop_back();
                }
            });
            if filled >= total || Instant::now() >= until || self.state().ended {
                break;
            }
            py.check_signals()?;
        }
        Ok((data, flags, filled))
    }

    /// Messages other than valid spectra that `recv_batch` or
    /// `read_window` took, oldest first (at most 4096 kept; see
    /// `events_dropped`).
    fn events(&self, py: Python<'_>) -> PyResult<Vec<Message>> {
        let ev: Vec<RustMessage> = self.state().events.drain(..).collect();
        ev.into_iter()
            .map(|m| Message::new(py, m, self.dtype))
            .collect()
    }

    /// Events dropped because `events()` was not called often enough.
    #[getter]
    fn events_dropped(&self) -> u64 {
        self.state().events_dropped
    }

    /// Whether the end message was taken.
    #[getter]
    fn ended(&self) -> bool {
        self.state().ended
    }

    /// Every count so far.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.inner.stats())
    }

    /// The latest stream description of `producer` (its id), a dict, or
    /// None if none was heard yet.
    fn description<'py>(
        &self,
        py: Python<'py>,
        producer: u64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.inner
            .description(producer)
            .map(|d| description::to_dict(py, &d))
            .transpose()
    }

    /// Stop: no more signals are taken; outstanding reads finish or fail
    /// and the end message comes last.
    fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// Give the consumer one signal message received by other means (an
    /// Active Message, a file); False if its queue was full.
    fn inject(&self, signal: &[u8]) -> bool {
        self.inner.injector().inject(signal)
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Producer>()?;
    m.add_class::<Consumer>()?;
    m.add_class::<Message>()?;
    m.add_class::<SpectrumBuffer>()?;
    m.add_function(wrap_pyfunction!(checkable, m)?)?;
    m.add("META_BYTES", META_BYTES)?;
    m.add("DATA_OFFSET", splitrt_vys::ring::DATA_OFFSET)?;
    Ok(())
}
