//! Handing a producer's ring to a consumer on the same host, read-only.
//!
//! The producer keeps its ring in an anonymous memory file (`memfd`), so
//! no name in `/dev/shm` exists for anyone to open. A consumer connects to
//! the producer's Unix socket and proves it holds the stream key
//! (challenge-response, keyed BLAKE3; the key never crosses the socket);
//! only then does the producer pass it a descriptor of the ring opened
//! *read-only* (`SCM_RIGHTS`), with its own proof of the key over the
//! consumer's nonce, its producer id and its instance (the random number
//! drawn at its start, which its signals carry), so a process squatting
//! the socket's name cannot pass off memory of its own as the producer's,
//! and a consumer knows which instance's ring it maps (it reads a signal
//! only from the ring of the instance that sent it). The consumer can map that ring and nothing
//! else of the producer, and cannot map it writable: the kernel refuses a
//! shared writable mapping of a read-only descriptor.
//!
//! A read-only descriptor alone is not enough: a memory file can be opened
//! again through `/proc/self/fd/N`, read-write. So the producer *seals* the
//! file once it has mapped it (`F_SEAL_FUTURE_WRITE`, `F_SEAL_SHRINK`,
//! `F_SEAL_GROW`, `F_SEAL_SEAL`): its own mapping stays writable, but no
//! one, the producer included, can write the file through a new mapping or
//! `write`, punch holes in it, or change its size (which would make the
//! producer's next write a `SIGBUS`). The consumer refuses a ring without
//! those seals, so a producer cannot shrink a ring under its consumers
//! either.
//!
//! **The socket's name** is derived from the stream key and the producer
//! id ([`handover_name`]): ids are public (every signal carries one), but
//! without the key nobody can compute the name before the producer binds
//! it, so nobody can squat it (abstract sockets have no permissions: the
//! first to bind a name owns it). Once bound the name is visible (in
//! `/proc/net/unix`), so anyone can connect.
//!
//! **Strangers on the socket.** The producer answers every connection
//! from one thread ([`HandoverServer`]) that never blocks on any: the
//! sockets are non-blocking and polled, each connection gets
//! [`HANDOVER_TIMEOUT`] for the whole exchange (not per read: a peer
//! trickling bytes is closed at the deadline all the same), and at most
//! [`MAX_UNPROVEN`] connections wait for their proof at once (a new one
//! evicts the oldest). A consumer answers its challenge at once, so
//! connections held silent or trickling by strangers neither hold it up
//! nor keep a slot past the deadline.

use super::ring::{read_validated, ReadOnlyWords, ReadOutcome};
use super::signal::{DigestKind, SpectrumInfo};
use splitrt_runtime::deadline::Deadline;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const NONCE: usize = 32;
/// The producer's reply with the descriptor: ring length, producer id,
/// instance (u64 each), its proof (32 bytes).
const HANDOVER_MSG: usize = 56;

/// The seals a ring's memory file carries before any consumer sees it: no
/// new writable mapping or `write` (the producer's own mapping stays
/// writable), no size change, no further seal change.
const RING_SEALS: libc::c_int =
    libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
/// Longest a whole handover may take, on either side, from connection to
/// the descriptor (a deadline, not a per-read timeout; a local socket:
/// anything slower is a peer that will not answer).
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections a producer keeps waiting for their proof of the key at
/// most; one more evicts the oldest.
pub const MAX_UNPROVEN: usize = 64;

fn proof(key: &[u8; 32], nonce: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"splitrt vys ring handover\0");
    h.update(nonce);
    *h.finalize().as_bytes()
}

fn producer_proof(
    key: &[u8; 32],
    nonce: &[u8],
    producer: u64,
    instance: u64,
    len: u64,
) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    // "2": the instance joined what the proof covers (issue 27)
    h.update(b"splitrt vys ring producer 2\0");
    h.update(nonce);
    h.update(&producer.to_le_bytes());
    h.update(&instance.to_le_bytes());
    h.update(&len.to_le_bytes());
    *h.finalize().as_bytes()
}

/// The abstract Unix socket name (no file anywhere; scoped to the network
/// namespace, so to the host) where producer `producer` of the stream with
/// key `key` hands its ring: `splitrt-vys-` and 32 hex digits of keyed
/// BLAKE3 of the id under the key, which nobody without the key can
/// compute (so nobody can take the name first).
pub fn handover_name(key: &[u8; 32], producer: u64) -> String {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"splitrt vys handover name\0");
    h.update(&producer.to_le_bytes());
    let tag: String = h.finalize().as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("splitrt-vys-{tag}")
}

/// The abstract socket address of [`handover_name`].
pub fn handover_addr(key: &[u8; 32], producer: u64) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(handover_name(key, producer).as_bytes())
}

/// A handover's error once its deadline has passed, in the handover's
/// words: `TimedOut` from the [`Deadline`] and `WouldBlock` from a read or
/// write whose timeout (the time that was left) fired both become
/// `TimedOut` naming [`HANDOVER_TIMEOUT`]; any other error is kept.
fn timed_out(e: io::Error) -> io::Error {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the ring handover did not complete within {} s",
                HANDOVER_TIMEOUT.as_secs()
            ),
        )
    } else {
        e
    }
}

fn words_of(base: *const u8, len: usize) -> &'static [AtomicU64] {
    // SAFETY: callers pass a live mapping of `len` bytes, page aligned (so
    // 8-byte aligned), that outlives the returned slice (it is tied to the
    // owner's lifetime by the methods that return it); AtomicU64 has the
    // size and alignment of u64, and every access through it is atomic.
    // A consumer's mapping is read-only: `ImportedRing::words` hands it on
    // only as `ReadOnlyWords` (relaxed loads, the one atomic access sound
    // there), never as the slice.
    unsafe { std::slice::from_raw_parts(base as *const AtomicU64, len / 8) }
}

/// A producer's ring memory, exportable read-only.
pub struct ExportedRing {
    file: File,
    map: memmap2::MmapMut,
    len: usize,
}

impl ExportedRing {
    /// Anonymous shared memory of `len` bytes (rounded up to 8).
    pub fn new(len: usize) -> io::Result<ExportedRing> {
        let len = len.div_ceil(8) * 8;
        let name = c"splitrt-vys-ring";
        // SAFETY: memfd_create with a valid C string and flags; the result
        // is checked before use and owned by the File.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)?;
        // SAFETY: the memfd is ours and stays open as long as the mapping;
        // others only ever get read-only views of it.
        let map = unsafe { memmap2::MmapMut::map_mut(&file)? };
        // Every page now, not at the producer's first lap: a first touch
        // of a shared page costs a fault and a page clear, which made the
        // first lap of a 256 MiB ring several times slower than the next
        // ones. Best effort (before Linux 5.14, or short of memory, the
        // pages come at first touch as before).
        let _ = map.advise(memmap2::Advice::PopulateWrite);
        // SAFETY: fcntl on a descriptor we own; the result is checked.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, RING_SEALS) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "vys producer: cannot seal the ring's memory file against writes and \
                     resizing by its readers (F_SEAL_FUTURE_WRITE needs Linux 5.1): {e}"
                ),
            ));
        }
        Ok(ExportedRing { file, map, len })
    }

    /// Bytes of the ring.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the ring has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ring's words, for a [`super::ring::RingWriter`].
    pub fn words(&self) -> &[AtomicU64] {
        words_of(self.map.as_ptr(), self.len)
    }

    /// A new descriptor of the ring that only reads.
    fn read_only_fd(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .open(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// Answer one consumer on `listener` (see [`serve`](Self::serve)).
    pub fn serve_one(
        &self,
        listener: &UnixListener,
        key: &[u8; 32],
        producer: u64,
        instance: u64,
    ) -> io::Result<bool> {
        let (s, _) = listener.accept()?;
        self.serve(s, key, producer, instance)
    }

    /// Answer one connected consumer: challenge it, and if it proves the
    /// stream key, pass it the read-only descriptor, the ring's length,
    /// the producer id and instance and the producer's proof. Returns whether it was
    /// served. The whole exchange has [`HANDOVER_TIMEOUT`]. (A producer
    /// answers its consumers with a [`HandoverServer`], which serves many
    /// at once; this one at a time.)
    pub fn serve(
        &self,
        mut s: UnixStream,
        key: &[u8; 32],
        producer: u64,
        instance: u64,
    ) -> io::Result<bool> {
        let mut by = Deadline::new(&mut s, Instant::now() + HANDOVER_TIMEOUT);
        let mut nonce = [0u8; NONCE];
        getrandom::getrandom(&mut nonce).map_err(|e| io::Error::other(e.to_string()))?;
        by.write_all(&nonce).map_err(timed_out)?;
        let mut answer = [0u8; 32 + NONCE];
        by.read_exact(&mut answer).map_err(timed_out)?;
        let left = by.left().map_err(timed_out)?;
        s.set_write_timeout(Some(left))?;
        self.answer(&s, key, (producer, instance), &nonce, &answer)
    }

    /// The reply to a consumer's `answer` to `nonce`: the descriptor and
    /// the producer's proof if it proved the key (true), else 8 zero bytes
    /// (false).
    fn answer(
        &self,
        s: &UnixStream,
        key: &[u8; 32],
        (producer, instance): (u64, u64),
        nonce: &[u8; NONCE],
        answer: &[u8; 32 + NONCE],
    ) -> io::Result<bool> {
        let want = proof(key, nonce);
        if !splitrt_runtime::key::same_mac(&answer[..32], &want) {
            let _ = (&*s).write(&[0u8; 8]);
            return Ok(false);
        }
        let len = self.len as u64;
        let mut msg = [0u8; HANDOVER_MSG];
        msg[..8].copy_from_slice(&len.to_le_bytes());
        msg[8..16].copy_from_slice(&producer.to_le_bytes());
        msg[16..24].copy_from_slice(&instance.to_le_bytes());
        msg[24..].copy_from_slice(&producer_proof(key, &answer[32..], producer, instance, len));
        let ro = self.read_only_fd()?;
        send_fd(s, ro.as_raw_fd(), &msg)?;
        Ok(true)
    }
}

/// A ring handed over but not mapped: it is larger than the room the
/// consumer has left under its bound on mapped bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingTooLarge {
    /// Bytes of the ring.
    pub bytes: u64,
    /// Bytes the consumer could still map.
    pub room: u64,
}

impl std::fmt::Display for RingTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a ring of {} B, {} B left to map under the bound",
            self.bytes, self.room
        )
    }
}

impl std::error::Error for RingTooLarge {}

/// A consumer's read-only view of a producer's ring on this host.
pub struct ImportedRing {
    map: memmap2::Mmap,
    /// The read-only descriptor the producer passed (kept: the mapping's
    /// file, e.g. to map it again).
    file: File,
    len: usize,
    producer: u64,
    instance: u64,
}

impl std::os::fd::AsFd for ImportedRing {
    /// The read-only descriptor of the ring the producer passed.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl ImportedRing {
    /// Connect to the producer's socket at `path`, prove the stream key and
    /// map the ring it hands over.
    pub fn connect(path: &Path, key: &[u8; 32]) -> io::Result<ImportedRing> {
        Self::handshake(UnixStream::connect(path)?, key, None, u64::MAX)
    }

    /// Connect to producer `producer`'s handover socket on this host
    /// ([`handover_addr`] under `key`); fails at once if it has none here
    /// (`ConnectionRefused`), else within [`HANDOVER_TIMEOUT`].
    pub fn connect_producer(producer: u64, key: &[u8; 32]) -> io::Result<ImportedRing> {
        Self::connect_producer_within(producer, key, u64::MAX)
    }

    /// [`connect_producer`](Self::connect_producer), mapping the ring
    /// only if it has at most `room` bytes: a larger one is refused
    /// before it is mapped, with an error of kind `OutOfMemory` carrying a
    /// [`RingTooLarge`].
    pub fn connect_producer_within(
        producer: u64,
        key: &[u8; 32],
        room: u64,
    ) -> io::Result<ImportedRing> {
        let s = UnixStream::connect_addr(&handover_addr(key, producer)?)?;
        Self::handshake(s, key, Some(producer), room)
    }

    fn handshake(
        mut s: UnixStream,
        key: &[u8; 32],
        producer: Option<u64>,
        room: u64,
    ) -> io::Result<ImportedRing> {
        let mut by = Deadline::new(&mut s, Instant::now() + HANDOVER_TIMEOUT);
        let mut nonce = [0u8; NONCE];
        by.read_exact(&mut nonce).map_err(timed_out)?;
        let mut mine = [0u8; NONCE];
        getrandom::getrandom(&mut mine).map_err(|e| io::Error::other(e.to_string()))?;
        let mut answer = [0u8; 32 + NONCE];
        answer[..32].copy_from_slice(&proof(key, &nonce));
        answer[32..].copy_from_slice(&mine);
        by.write_all(&answer).map_err(timed_out)?;
        let left = by.left().map_err(timed_out)?;
        let mut msg = [0u8; HANDOVER_MSG];
        s.set_read_timeout(Some(left))?;
        let fd = match recv_fd(&s, &mut msg) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the producer did not hand its ring over within {} s",
                        HANDOVER_TIMEOUT.as_secs()
                    ),
                ))
            }
            r => r,
        }?
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the producer refused the stream key",
            )
        })?;
        let file = File::from(fd);
        let len = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
        let who = u64::from_le_bytes(msg[8..16].try_into().expect("8 bytes"));
        let instance = u64::from_le_bytes(msg[16..24].try_into().expect("8 bytes"));
        if !splitrt_runtime::key::same_mac(
            &msg[24..],
            &producer_proof(key, &mine, who, instance, len),
        ) || producer.is_some_and(|p| p != who)
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the process on the handover socket is not the producer (its proof of the \
                 stream key or its producer id is wrong)",
            ));
        }
        if len > room {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                RingTooLarge { bytes: len, room },
            ));
        }
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "ring length"))?;
        // SAFETY: fcntl on the descriptor we were passed; checked.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & RING_SEALS != RING_SEALS {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the producer's ring is not sealed against writes and resizing by others \
                 (a reader could shrink it under the producer and us)",
            ));
        }
        if file.metadata()?.len() < len as u64 || !len.is_multiple_of(8) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "ring length"));
        }
        // SAFETY: a read-only shared mapping of the descriptor the producer
        // passed; the producer writes it concurrently, which every read
        // handles (atomic words, validated by sequence ids).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        if map.len() < len {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "ring length"));
        }
        // the page tables now rather than a fault per page on first reads
        // (best effort, as for the producer's side)
        let _ = map.advise(memmap2::Advice::PopulateRead);
        Ok(ImportedRing {
            map,
            file,
            len,
            producer: who,
            instance,
        })
    }

    /// The producer that handed the ring over.
    pub fn producer(&self) -> u64 {
        self.producer
    }

    /// Its instance (proved with the ring: the random number drawn at the
    /// producer's start, which its signals carry).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The ring's words, read-only: relaxed loads only, the one atomic
    /// access sound on this read-only mapping.
    pub fn words(&self) -> ReadOnlyWords<'_> {
        words_of(self.map.as_ptr(), self.len).into()
    }

    /// Bytes of the ring.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the ring is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Read and validate one spectrum (see [`read_validated`]).
    pub fn read(
        &self,
        bytes: usize,
        info: &SpectrumInfo,
        digest: DigestKind,
        out: &mut [u8],
    ) -> ReadOutcome {
        read_validated(self.words(), bytes, info, digest, out)
    }

    /// Base address of the mapping (for tests of its protection).
    pub fn base(&self) -> *const u8 {
        self.map.as_ptr()
    }
}

/// A connection to the handover socket that has not yet proved the key.
struct Unproven {
    s: UnixStream,
    nonce: [u8; NONCE],
    /// Bytes of the nonce sent.
    sent: usize,
    answer: [u8; 32 + NONCE],
    /// Bytes of the answer received.
    got: usize,
    deadline: Instant,
}

/// What became of a connection after some progress.
enum Step {
    Waiting,
    Done,
}

impl Unproven {
    /// Send what is left of the nonce, take what came of the answer, and
    /// once it is whole answer it. `Err`: the connection is finished with.
    fn step(&mut self, ring: &ExportedRing, key: &[u8; 32], who: (u64, u64)) -> io::Result<Step> {
        while self.sent < NONCE {
            match (&self.s).write(&self.nonce[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Waiting),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        while self.got < self.answer.len() {
            match (&self.s).read(&mut self.answer[self.got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Waiting),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        ring.answer(&self.s, key, who, &self.nonce, &self.answer)?;
        Ok(Step::Done)
    }
}

/// Counters of a [`HandoverServer`].
#[derive(Debug, Default)]
pub struct HandoverStats {
    /// Consumers handed the ring.
    pub served: AtomicU64,
    /// Connections closed without the ring: a wrong proof, a deadline
    /// passed, hung up, or evicted by a newer one when all
    /// [`MAX_UNPROVEN`] slots were taken.
    pub refused: AtomicU64,
    /// Of those, the ones evicted.
    pub evicted: AtomicU64,
    /// Of those, the ones whose deadline passed.
    pub expired: AtomicU64,
}

/// A producer's handover socket and the thread answering it (see the
/// module's documentation); stopped when dropped.
pub struct HandoverServer {
    name: String,
    stop: Arc<AtomicBool>,
    refuse: Arc<AtomicBool>,
    stats: Arc<HandoverStats>,
    thread: Option<JoinHandle<()>>,
}

impl HandoverServer {
    /// Bind producer `producer`'s handover name under `key` and start
    /// answering for its instance `instance`. A name taken already
    /// (another producer of this stream with this id on this host) is an
    /// error naming the socket and why.
    pub fn start(
        ring: Arc<ExportedRing>,
        key: [u8; 32],
        producer: u64,
        instance: u64,
    ) -> io::Result<HandoverServer> {
        let name = handover_name(&key, producer);
        let l = UnixListener::bind_addr(&handover_addr(&key, producer)?).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::AddrInUse {
                format!(
                    "another producer of this stream with id {producer:016x} is serving \
                     on this host (the name comes from the stream key and the id: only \
                     a holder of the key can compute it); give each producer its own id, \
                     or stop the other one"
                )
            } else {
                "the socket could not be made".to_string()
            };
            io::Error::new(
                e.kind(),
                format!(
                    "vys producer {producer:016x}: cannot bind its ring handover socket \
                     @{name} ({e}): {why}"
                ),
            )
        })?;
        l.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let refuse = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(HandoverStats::default());
        let (st, rf, ss) = (stop.clone(), refuse.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("vys-handover".into())
            .spawn(move || serve_all(&l, &ring, &key, (producer, instance), &st, &rf, &ss))?;
        Ok(HandoverServer {
            name,
            stop,
            refuse,
            stats,
            thread: Some(thread),
        })
    }

    /// The abstract socket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its counters.
    pub fn stats(&self) -> &HandoverStats {
        &self.stats
    }

    /// Tests: close every connection at once, unanswered (`true`), as a
    /// producer that cannot hand over its ring would, or answer again.
    #[doc(hidden)]
    pub fn refuse_all(&self, on: bool) {
        self.refuse.store(on, Ordering::Release);
    }
}

impl Drop for HandoverServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// New connections taken per round at most (between rounds every waiting
/// connection makes progress, so a burst of strangers cannot evict a
/// consumer before its answer is read).
const ACCEPTS_PER_ROUND: usize = 16;

/// The handover thread: accept, step every connection whose socket is
/// ready, close those past their deadline, and sleep in `poll` until a
/// socket is ready, the next deadline, or 100 ms (to see `stop`).
fn serve_all(
    l: &UnixListener,
    ring: &ExportedRing,
    key: &[u8; 32],
    who: (u64, u64),
    stop: &AtomicBool,
    refuse: &AtomicBool,
    stats: &HandoverStats,
) {
    let mut waiting: std::collections::VecDeque<Unproven> = std::collections::VecDeque::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let count = |c: &AtomicU64| {
        c.fetch_add(1, Ordering::Relaxed);
    };
    while !stop.load(Ordering::Acquire) {
        for _ in 0..ACCEPTS_PER_ROUND {
            let s = match l.accept() {
                Ok((s, _)) => s,
                Err(_) => break,
            };
            let mut nonce = [0u8; NONCE];
            if refuse.load(Ordering::Acquire)
                || s.set_nonblocking(true).is_err()
                || getrandom::getrandom(&mut nonce).is_err()
            {
                count(&stats.refused);
                continue;
            }
            if waiting.len() >= MAX_UNPROVEN {
                waiting.pop_front();
                count(&stats.refused);
                count(&stats.evicted);
            }
            waiting.push_back(Unproven {
                s,
                nonce,
                sent: 0,
                answer: [0; 32 + NONCE],
                got: 0,
                deadline: Instant::now() + HANDOVER_TIMEOUT,
            });
        }
        let now = Instant::now();
        waiting.retain_mut(|u| match u.step(ring, key, who) {
            Ok(Step::Done) => {
                count(&stats.served);
                false
            }
            Ok(Step::Waiting) if u.deadline > now => true,
            Ok(Step::Waiting) => {
                count(&stats.refused);
                count(&stats.expired);
                false
            }
            Err(_) => {
                count(&stats.refused);
                false
            }
        });
        fds.clear();
        fds.push(libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let mut wake = Duration::from_millis(100);
        for u in &waiting {
            fds.push(libc::pollfd {
                fd: u.s.as_raw_fd(),
                events: if u.sent < NONCE {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                },
                revents: 0,
            });
            wake = wake.min(u.deadline.saturating_duration_since(now));
        }
        let ms = wake.as_micros().div_ceil(1000) as libc::c_int;
        // SAFETY: fds is a live array of fds.len() pollfd structures.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }
}

fn send_fd(s: &UnixStream, fd: RawFd, data: &[u8]) -> io::Result<()> {
    send_fds(s, &[fd], data)
}

/// Send `data` with `fds` in one `SCM_RIGHTS` message (a handover passes
/// one; the tests pass several, as a broken producer could).
fn send_fds(s: &UnixStream, fds: &[RawFd], data: &[u8]) -> io::Result<()> {
    let bytes = std::mem::size_of_val(fds);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
    // 8-aligned, as a `cmsghdr` must be (a `Vec<u8>` need not be); `space`
    // of its bytes are the control buffer.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is integers and pointers: all-zero bytes are a valid
    // value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: CMSG_FIRSTHDR only reads `msg`'s control fields (`msg` is a
    // live msghdr).
    let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: space >= size_of::<cmsghdr>(), so `c` is the start of `cbuf`
    // (not null): 8-aligned, zeroed, live until the end of this function,
    // and not otherwise referenced while `hdr` is used.
    let hdr = unsafe { &mut *c };
    hdr.cmsg_level = libc::SOL_SOCKET;
    hdr.cmsg_type = libc::SCM_RIGHTS;
    // SAFETY: CMSG_LEN is a pure size computation.
    hdr.cmsg_len = unsafe { libc::CMSG_LEN(bytes as u32) } as _;
    // SAFETY: CMSG_DATA is pointer arithmetic: the first byte after the
    // header `c`, inside `cbuf` (CMSG_SPACE counted header and data).
    let data_at = unsafe { libc::CMSG_DATA(c) } as *mut RawFd;
    // SAFETY: `bytes` bytes from `data_at` lie in `cbuf` (CMSG_SPACE
    // counted them); written unaligned, as the data after a header need
    // not be aligned for an int; `fds` is a separate slice.
    unsafe { std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, data_at as *mut u8, bytes) };
    // SAFETY: sendmsg(2) only reads `msg`, whose iov names `data`
    // (data.len() bytes) and whose control names `space` bytes of `cbuf`,
    // all live for the call.
    if unsafe { libc::sendmsg(s.as_raw_fd(), &msg, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receive `data` and, if one came, the one descriptor a handover passes.
///
/// The control buffer has room for exactly one descriptor
/// (`CMSG_LEN(sizeof(int))`: `CMSG_SPACE` would round it up to room for
/// two); a message that carried more is truncated by the kernel
/// (`MSG_CTRUNC`, the descriptors that did not fit are closed by it).
/// Every descriptor that did arrive is owned at once, so a refused
/// message leaves none open, and such a message is refused: a producer
/// passes one descriptor, never more.
fn recv_fd(s: &UnixStream, data: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    const FD: usize = std::mem::size_of::<RawFd>();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: CMSG_LEN is a pure size computation.
    let one = unsafe { libc::CMSG_LEN(FD as u32) } as usize;
    // 8-aligned, as a `cmsghdr` must be; 32 bytes >= one (20)
    let mut cbuf = [0u64; 4];
    debug_assert!(one <= std::mem::size_of_val(&cbuf));
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: msghdr is integers and pointers: all-zero bytes are a valid
    // value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = one as _;
    // SAFETY: `msg`'s pointers refer to `iov` / `data` and `cbuf`, live for
    // the call, with the lengths given; the kernel writes at most those
    // (and `msg`'s own length and flag fields).
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // The control messages are walked with CMSG_FIRSTHDR / CMSG_NXTHDR,
    // which return only headers lying wholly inside the `msg_controllen`
    // bytes of `cbuf` (8-aligned), or null; the kernel set each header's
    // `cmsg_len` to cover only the data it wrote there.
    // SAFETY: CMSG_FIRSTHDR only reads `msg`'s control fields.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: a non-null header inside `cbuf` (as just said), aligned
        // and initialised (zeroed, then written by the kernel); nothing
        // writes `cbuf` while `hdr` lives.
        let hdr = unsafe { &*c };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is a pure size computation.
            let head = unsafe { libc::CMSG_LEN(0) } as usize;
            let bytes = (hdr.cmsg_len as usize).saturating_sub(head);
            // SAFETY: CMSG_DATA is pointer arithmetic: the first byte after
            // the header `c`, inside `cbuf` (its `cmsg_len` covers it).
            let at = unsafe { libc::CMSG_DATA(c) } as *const RawFd;
            // The descriptors of an SCM_RIGHTS message are the
            // `(cmsg_len - CMSG_LEN(0)) / sizeof(int)` ints after its header.
            for i in 0..bytes / FD {
                // SAFETY: i < bytes / FD: int `i` lies within the header's
                // `cmsg_len`, inside `cbuf`.
                let slot = unsafe { at.add(i) };
                // SAFETY: that int, written by the kernel; read unaligned,
                // as the data after a header need not be aligned for it.
                let raw = unsafe { std::ptr::read_unaligned(slot) };
                // SAFETY: `raw` is a fresh descriptor the kernel installed
                // for us in this recvmsg and nothing else owns: `OwnedFd`
                // owns it now (and closes it when dropped).
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        // SAFETY: CMSG_NXTHDR reads `msg`'s control fields and the header
        // `c` (inside `cbuf`, above), and returns the next header wholly
        // inside the control bytes, or null.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    let flags = msg.msg_flags;
    if flags & libc::MSG_CTRUNC != 0 || fds.len() > 1 {
        // `fds` closes every descriptor that came
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the ring handover passed {} descriptor(s){}, exactly one expected: refused \
                 (every descriptor received is closed)",
                fds.len(),
                if flags & libc::MSG_CTRUNC != 0 {
                    " and more that did not fit"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(fds.pop())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A producer holding the key that hands over a ring it did not seal:
    /// the consumer refuses it (anyone could shrink it under both).
    #[test]
    #[cfg_attr(miri, ignore = "memfd_create, mmap of it and Unix sockets (FFI)")]
    fn an_unsealed_ring_is_refused() {
        let len = 4096;
        // SAFETY: memfd_create with a valid C string and flags; checked.
        let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).unwrap();
        // SAFETY: our own memory file, mapped as long as the ring lives.
        let map = unsafe { memmap2::MmapMut::map_mut(&file).unwrap() };
        let ring = ExportedRing { file, map, len };
        let key = [7u8; 32];
        let path = sock("unsealed");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || ring.serve_one(&listener, &key, 9, 1).unwrap());
        let r = ImportedRing::connect(&path, &key);
        assert!(server.join().unwrap(), "the rogue producer served the ring");
        let _ = std::fs::remove_file(&path);
        let e = r.err().expect("an unsealed ring was accepted");
        assert!(e.to_string().contains("not sealed"), "{e}");
    }

    /// A memory file named `name` (to find it again in /proc/self/fd).
    fn probe(name: &str) -> OwnedFd {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: memfd_create with a valid C string and flags; checked.
        let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor we own.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// Descriptors of this process open on a memory file named `name`
    /// (the other tests' descriptors come and go meanwhile; these names
    /// are this test's own).
    fn open_on(name: &str) -> usize {
        let want = format!("/memfd:{name} (deleted)");
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.as_os_str() == want.as_str())
            .count()
    }

    /// A handover message carrying two (or three) descriptors instead of
    /// one is refused, and none of them stays open in the consumer.
    #[test]
    #[cfg_attr(miri, ignore = "Unix sockets and memfd_create (FFI)")]
    fn extra_descriptors_in_a_handover_are_closed_and_refused() {
        for n in [2usize, 3] {
            let names: Vec<String> = (0..n)
                .map(|i| format!("splitrt-fd-probe-{}-{n}-{i}", std::process::id()))
                .collect();
            let (a, b) = UnixStream::pair().unwrap();
            {
                let probes: Vec<OwnedFd> = names.iter().map(|m| probe(m)).collect();
                let raw: Vec<RawFd> = probes.iter().map(|p| p.as_raw_fd()).collect();
                send_fds(&a, &raw, &[9u8; 48]).unwrap();
            } // the sender's own copies closed
            let mut data = [0u8; 48];
            let got = recv_fd(&b, &mut data).map(|fd| fd.is_some());
            let open: usize = names.iter().map(|m| open_on(m)).sum();
            assert_eq!(open, 0, "{n} descriptors passed: {open} left open");
            let e = got.expect_err("a handover of several descriptors was not refused");
            assert!(e.to_string().contains("exactly one expected"), "{e}");
        }
    }

    fn sock(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("splitrt-vys-{tag}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A producer that accepts and never speaks: the consumer gives up
    /// after the handover timeout with an error, not a hang.
    #[test]
    #[cfg_attr(miri, ignore = "memfd_create, mmap of it and Unix sockets (FFI)")]
    fn a_silent_producer_does_not_hang_a_consumer() {
        let path = sock("silent-producer");
        let l = UnixListener::bind(&path).unwrap();
        let t = Instant::now();
        let r = ImportedRing::connect(&path, &[1; 32]);
        assert!(r.is_err());
        assert!(t.elapsed() < HANDOVER_TIMEOUT * 3, "{:?}", t.elapsed());
        drop(l);
        let _ = std::fs::remove_file(&path);
    }

    /// A client that connects and never answers, then one that sends
    /// garbage and hangs up: the producer gives up on each (an error, no
    /// descriptor) and then serves a real consumer.
    #[test]
    #[cfg_attr(miri, ignore = "memfd_create, mmap of it and Unix sockets (FFI)")]
    fn silent_and_garbage_clients_get_nothing_and_block_no_one() {
        let path = sock("silent-consumer");
        let l = UnixListener::bind(&path).unwrap();
        let ring = ExportedRing::new(4096).unwrap();
        let key = [5u8; 32];
        let p2 = path.clone();
        let clients = std::thread::spawn(move || {
            let silent = UnixStream::connect(&p2).unwrap();
            std::thread::sleep(HANDOVER_TIMEOUT + Duration::from_millis(500));
            drop(silent);
            let mut junk = UnixStream::connect(&p2).unwrap();
            let _ = junk.write_all(&[0xff; 7]);
            drop(junk);
            ImportedRing::connect(&p2, &key).map(|r| r.len())
        });
        let t = Instant::now();
        assert!(
            ring.serve_one(&l, &key, 1, 1).is_err(),
            "the silent client was served"
        );
        assert!(t.elapsed() < HANDOVER_TIMEOUT * 3);
        assert!(
            ring.serve_one(&l, &key, 1, 1).is_err(),
            "the garbage client was served"
        );
        assert!(ring.serve_one(&l, &key, 1, 1).unwrap());
        assert_eq!(clients.join().unwrap().unwrap(), 4096);
        let _ = std::fs::remove_file(&path);
    }
}
