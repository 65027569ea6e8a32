//! The endpoint: a rank's handler table plus its fabric connection to every
//! peer, the send paths and progress (poll / wait_until), and the
//! [`Token`] a request handler replies through (it refers to the endpoint,
//! whose table holds the handlers that take it, so the two live together).

use crate::bridge::{Bridge, TrafficKey};
use crate::dispatch::{self, dispatch, in_handler};
use crate::handler::{Func, Kind, ReplyHandler, RequestHandler, Sig, RESERVED_HANDLERS};
use crate::message::{Incoming, Payload};
use crate::progress::{self, Progress};
use splitrt_runtime::backoff::Backoff;
use splitrt_runtime::config::Config;
use splitrt_runtime::fabric::udp::proto::Stats as UdpStats;
use splitrt_runtime::fabric::{
    idle_wait_blind, AnyFabric, Channel, Fabric, Packet, SegmentBytes, Sent,
};
use splitrt_runtime::hang::{abort_error, HangWatch};
use splitrt_runtime::job::JobInfo;
use splitrt_runtime::view::LocalView;
use splitrt_runtime::{Error, ErrorKind, Result, World};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;

/// A registered request handler.
pub(crate) type RequestFn = Box<dyn Fn(Token<'_>, &Incoming<'_>) + Send + Sync>;
/// A registered reply handler.
pub(crate) type ReplyFn = Box<dyn Fn(&Incoming<'_>) + Send + Sync>;
type Table = crate::handler::Table<RequestFn, ReplyFn>;
type Entry = crate::handler::Entry<RequestFn, ReplyFn>;

/// Collects handler registrations, then [`attach`](Self::attach)es to the job.
#[derive(Default)]
pub struct EndpointBuilder {
    table: Table,
    /// The progress mode asked for (`None`: `SPLITRT_PROGRESS`).
    progress: Option<Progress>,
}

impl EndpointBuilder {
    /// An empty registration table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a request handler taking `nargs` argument words on channel
    /// `kind`. Every rank must register the same handlers in the same order.
    pub fn request<F>(
        &mut self,
        name: &str,
        kind: Kind,
        nargs: usize,
        f: F,
    ) -> Result<RequestHandler>
    where
        F: Fn(Token<'_>, &Incoming<'_>) + Send + Sync + 'static,
    {
        self.table
            .add(None, name, kind, nargs, Func::Request(Box::new(f)))
            .map(RequestHandler)
    }

    /// Run the endpoint in progress mode `mode` (see [`Progress`]): with a
    /// progress thread that runs handlers while the program computes, or
    /// none (the default). Overrides `SPLITRT_PROGRESS`, which applies
    /// when this is not called. [`Endpoint::set_progress`] changes it
    /// later.
    pub fn progress(&mut self, mode: Progress) -> &mut Self {
        self.progress = Some(mode);
        self
    }

    /// Register a reply handler. Reply handlers cannot send.
    pub fn reply<F>(&mut self, name: &str, kind: Kind, nargs: usize, f: F) -> Result<ReplyHandler>
    where
        F: Fn(&Incoming<'_>) + Send + Sync + 'static,
    {
        self.table
            .add(None, name, kind, nargs, Func::Reply(Box::new(f)))
            .map(ReplyHandler)
    }

    /// Register one of splitrt's own request handlers at a fixed id below
    /// [`RESERVED_HANDLERS`](crate::RESERVED_HANDLERS) (for the PGAS layer).
    ///
    /// # Safety
    ///
    /// A Long to a reserved id skips the check that keeps user deposits
    /// out of the ranges splitrt reserved for itself (the PGAS layer's
    /// counters and scratch at offset 0, which it reads and writes while
    /// the deposit may land): only splitrt's own layers may register
    /// here, and only handlers whose senders and whose own code check
    /// every deposit's range (the PGAS layer's put and store refuse one in
    /// the reserved area or a frozen range). Safe code cannot:
    ///
    /// ```compile_fail,E0133
    /// use splitrt_am::{EndpointBuilder, Kind};
    /// let mut b = EndpointBuilder::new();
    /// let _ = b.reserved_request(2, "mine", Kind::Long, 0, |_tok, _m| {});
    /// ```
    #[doc(hidden)]
    pub unsafe fn reserved_request<F>(
        &mut self,
        id: u16,
        name: &str,
        kind: Kind,
        nargs: usize,
        f: F,
    ) -> Result<RequestHandler>
    where
        F: Fn(Token<'_>, &Incoming<'_>) + Send + Sync + 'static,
    {
        self.table
            .add(Some(id), name, kind, nargs, Func::Request(Box::new(f)))
            .map(RequestHandler)
    }

    /// Register one of splitrt's own reply handlers at a fixed reserved id.
    ///
    /// # Safety
    ///
    /// As for [`reserved_request`](Self::reserved_request): only splitrt's
    /// own layers, with handlers that check their deposits.
    ///
    /// ```compile_fail,E0133
    /// use splitrt_am::{EndpointBuilder, Kind};
    /// let mut b = EndpointBuilder::new();
    /// let _ = b.reserved_reply(3, "mine", Kind::Long, 0, |_m| {});
    /// ```
    #[doc(hidden)]
    pub unsafe fn reserved_reply<F>(
        &mut self,
        id: u16,
        name: &str,
        kind: Kind,
        nargs: usize,
        f: F,
    ) -> Result<ReplyHandler>
    where
        F: Fn(&Incoming<'_>) + Send + Sync + 'static,
    {
        self.table
            .add(Some(id), name, kind, nargs, Func::Reply(Box::new(f)))
            .map(ReplyHandler)
    }

    /// Join the job described by the environment (splitrt-run, or none for
    /// a 1-rank job): bootstrap, check that every rank registered the same
    /// table, connect the fabric, pass the start barrier.
    ///
    /// A process joins one job once: a second attach is an error that
    /// leaves the first endpoint (and the job) untouched.
    pub fn attach(self) -> Result<Endpoint> {
        let _once = AttachOnce::claim()?;
        let mode = self.progress_mode()?;
        let world = World::start(self.table.describe())?;
        Self::finish_attach(self.table, world, _once).with_progress(mode)
    }

    /// The progress mode: the builder's, else `SPLITRT_PROGRESS`'s.
    fn progress_mode(&self) -> Result<Progress> {
        self.progress.map_or_else(Progress::from_env, Ok)
    }

    /// [`attach`](Self::attach) with an explicit job and configuration.
    pub fn attach_with(self, job: JobInfo, config: Config) -> Result<Endpoint> {
        let _once = AttachOnce::claim()?;
        let mode = self.progress_mode()?;
        let world = World::start_with(job, config, self.table.describe())?;
        Self::finish_attach(self.table, world, _once).with_progress(mode)
    }

    /// **Test double.** Join as rank `job.rank` of a job whose ranks are
    /// threads of this process, on the ibverbs fabric over the verbs model
    /// (`dev`: this rank's device of a shared
    /// [`ModelNetwork`](splitrt_runtime::fabric::rdma::model::ModelNetwork);
    /// see [`World::start_over_verbs_model`]), so the AM layer over ibverbs
    /// runs in `cargo test` without RDMA hardware. Exempt from the
    /// one-endpoint-per-process rule, which is why it exists only for tests
    /// (cargo feature `test-doubles`).
    #[cfg(feature = "test-doubles")]
    pub fn attach_over_verbs_model(
        self,
        job: JobInfo,
        config: Config,
        dev: splitrt_runtime::fabric::rdma::model::ModelDevice,
    ) -> Result<Endpoint> {
        let mode = self.progress_mode()?;
        let world = World::start_over_verbs_model(job, config, self.table.describe(), dev)?;
        let once = AttachOnce;
        let ep = Self::finish_attach(self.table, world, once);
        ep.with_progress(mode)
    }

    fn finish_attach(table: Table, world: World, once: AttachOnce) -> Endpoint {
        // the process stays attached
        std::mem::forget(once);
        // SAFETY: only asks whether the fabric counts doorbell rings;
        // sends and writes nothing.
        let counts_rings = unsafe { world.fabric() }
            .wakeup()
            .and_then(|f| f.traffic_seq())
            .is_some();
        let inner = Arc::new(Inner {
            rank: world.job().rank,
            size: world.job().size,
            table_id: table.id,
            reserved: ReservedRanges::default(),
            table: table.entries,
            world,
            finished: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            deferred: parking_lot::Mutex::new(None),
            has_deferred: AtomicBool::new(false),
            skipped_requests: AtomicBool::new(false),
            large_sends: AtomicU32::new(0),
            bridge: Bridge::default(),
            count_handler_rounds: !counts_rings,
            progress: progress::State::default(),
        });
        Endpoint {
            _owner: Arc::new(Owner(Arc::downgrade(&inner))),
            inner,
        }
    }
}

/// A few segment ranges, readable without a lock (they are set at attach
/// time, before user traffic, and never removed).
#[derive(Default)]
struct ReservedRanges {
    n: std::sync::atomic::AtomicUsize,
    ranges: [(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64); 4],
    adding: parking_lot::Mutex<()>,
}

impl ReservedRanges {
    fn add(&self, offset: u64, len: u64) -> Result<()> {
        let _one_writer = self.adding.lock();
        let n = self.n.load(Ordering::Relaxed);
        let Some((start, end)) = self.ranges.get(n) else {
            return Err(Error::usage("too many reserved segment ranges (at most 4)"));
        };
        start.store(offset, Ordering::Relaxed);
        end.store(offset.saturating_add(len), Ordering::Relaxed);
        self.n.store(n + 1, Ordering::Release);
        Ok(())
    }

    fn find(&self, offset: u64, len: u64) -> Option<std::ops::Range<u64>> {
        let end = offset.saturating_add(len);
        let n = self.n.load(Ordering::Acquire);
        self.ranges[..n]
            .iter()
            .map(|(s, e)| s.load(Ordering::Relaxed)..e.load(Ordering::Relaxed))
            .find(|r| len > 0 && offset < r.end && r.start < end)
    }

    fn overlaps(&self, offset: u64, len: u64) -> bool {
        self.find(offset, len).is_some()
    }
}

/// Why a write into a frozen range is refused.
#[cold]
#[inline(never)]
pub(crate) fn frozen_error(what: &str, offset: u64, len: u64, r: std::ops::Range<u64>) -> Error {
    Error::usage(format!(
        "{what} at segment offset {offset:#x} ({len} B) refused: bytes {:#x}..{:#x} are frozen \
         (a frozen array is read-only on every rank until it is thawed)",
        r.start, r.end
    ))
}

#[cold]
#[inline(never)]
fn finished_error() -> Error {
    Error::usage("the endpoint has finished (finish() was called); it cannot be used any more")
}

/// Whether this process has joined a job (one endpoint per process).
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// The claim on [`ATTACHED`]; released if the attach fails.
struct AttachOnce;
impl AttachOnce {
    fn claim() -> Result<AttachOnce> {
        if ATTACHED.swap(true, Ordering::AcqRel) {
            return Err(Error::usage(
                "this process has already attached an endpoint (one per process; \
                 share it by cloning the Endpoint or Pgas handle)",
            ));
        }
        Ok(AttachOnce)
    }
}
impl Drop for AttachOnce {
    fn drop(&mut self) {
        ATTACHED.store(false, Ordering::Release);
    }
}

pub(crate) struct Inner {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// Identity of the table whose handles this endpoint accepts.
    table_id: u32,
    /// Segment ranges only splitrt's own handlers may deposit into.
    reserved: ReservedRanges,
    pub(crate) table: Vec<Option<Entry>>,
    world: World,
    /// `finish` was called: no new operation starts (the exit barrier is
    /// under way or over).
    finished: AtomicBool,
    /// `finish` has returned: not even a reply goes out any more. While
    /// `finished` is set and this is not, handlers run by the exit barrier
    /// still reply.
    closed: AtomicBool,
    /// A non-fatal error met while a send waited (see `progress_while_sending`).
    deferred: parking_lot::Mutex<Option<Error>>,
    has_deferred: AtomicBool,
    /// The last `poll_all` found replies and returned before polling
    /// requests (so the next one polls both).
    skipped_requests: AtomicBool,
    /// Requests of at least [`POLL_AFTER_BYTES`] sent (wrapping).
    large_sends: AtomicU32,
    /// Waits on the doorbell for futures and `doorbell_fd` users; reads
    /// `world` from its thread, so it is stopped before `world` drops.
    bridge: Bridge,
    /// The fabric has no doorbell count (pure UDP, the verbs model): poll
    /// rounds that ran handlers are counted for the bridge instead
    /// (`Bridge::count_handled`); where it has one (shared memory,
    /// hybrid) the count is not touched on the message path.
    count_handler_rounds: bool,
    /// The progress thread's state (see [`progress`]).
    pub(crate) progress: progress::State,
}

/// A rank's Active Messages endpoint. Cheap to clone, `Send + Sync`: any
/// thread may send; whichever thread polls drives progress (one at a time,
/// others return at once).
#[derive(Clone)]
pub struct Endpoint {
    /// Dropped first: the last handle stops the progress thread (which
    /// holds `inner`), so the endpoint then finishes on this thread.
    _owner: Arc<Owner>,
    pub(crate) inner: Arc<Inner>,
}

/// Owned by the program's handles, not by the progress thread: when the
/// last handle goes, the thread is stopped and joined.
struct Owner(Weak<Inner>);

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            if let Err(e) = progress::stop(&inner.progress) {
                eprintln!("splitrt: rank {}: the progress thread: {e}", inner.rank);
            }
        }
    }
}

/// Requests with a payload of at least this many bytes are followed,
/// every [`POLL_EVERY`], by a poll of this rank's inbound traffic. Two
/// ranks flooding each other with large Mediums otherwise freed each
/// other's landing-zone room only when their own sends blocked, in
/// lockstep: 64 KiB two-way flood 1.09-1.21 -> 0.59-0.63 us per message
/// (GASNet-EX 0.73-0.9), 64 KiB Long 1.04 -> 0.59. From 4 KiB, where
/// the shm fabric's Mediums leave the ring cell for the landing zone and
/// its few slots (16 KiB until 2026-11-26: a flood of 4-16 KiB requests
/// answered by replies of the same size ran 1.06-1.38x GASNet-EX's time,
/// now 0.70-0.74x; same run, alternated builds). Smaller payloads skip
/// it: the poll would be a large part of their cost.
const POLL_AFTER_BYTES: usize = 4 << 10;

/// Of those requests, every this many is followed by the poll (each one:
/// one-way floods, whose receiver has nothing to send back, paid 20-30%;
/// every 2nd costs an 8 KiB one-way flood 0.15 -> 0.18-0.23 us, still
/// 0.66x GASNet-EX's).
const POLL_EVERY: u32 = 2;

impl Inner {
    fn fabric(&self) -> &impl Fabric {
        self.fabric_ref()
    }

    /// The fabric, for [`Rma`](crate::Rma).
    pub(crate) fn fabric_ref(&self) -> &AnyFabric {
        // SAFETY: this layer writes into peers' segments only after
        // checking the reserved and frozen ranges (`check_write`,
        // `check_user_deposit`), and reads deliveries' deposits through
        // views; callers of this function stay inside `am`.
        unsafe { self.world.fabric() }
    }

    /// Segment ranges nobody may write (frozen arrays): the World's set,
    /// which the fabrics consult too (a deposit into one is refused as it
    /// is written).
    #[inline]
    pub(crate) fn frozen(&self) -> &splitrt_runtime::frozen::FrozenRanges {
        self.world.frozen()
    }

    fn name(&self, id: u16) -> &str {
        self.table
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or("?", |e| e.name.as_str())
    }

    /// The segment source of `payload` when the fabric would copy it into
    /// a buffer on every try (it frames no segment source itself): the
    /// send loops then copy it once and send the copy as a Medium, so a
    /// full peer's retries copy nothing more. `None` for other payloads
    /// and where the fabric frames the source itself (UDP: straight from
    /// the segment into its datagrams, on each try, with no extra copy).
    /// Only for a `payload` whose send was checked (`check_send`).
    #[inline]
    fn copy_first<'p>(&self, peer: usize, payload: &Payload<'p>) -> Option<SegmentBytes<'p>> {
        match *payload {
            // (a source over the Medium maximum goes on to the fabric,
            // which refuses it before copying anything)
            Payload::FromSegment(src)
                if !self.fabric().frames_segment_sources(peer)
                    && src.len() <= self.fabric().max_inline(peer) =>
            {
                Some(src)
            }
            _ => None,
        }
    }

    /// Try to send `payload` to `peer` on `ch` once (the fabric's
    /// `try_send_why`; a Medium out of this rank's segment goes by
    /// `try_send_segment_why`, which copies the bytes straight from there).
    #[inline]
    fn try_send_payload(
        &self,
        peer: usize,
        ch: Channel,
        sig: &Sig,
        args: &[u64],
        payload: &Payload<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        let (payload, deposit) = match *payload {
            Payload::None => (&[][..], None),
            Payload::Medium(d) => (d, None),
            Payload::Long { data, offset } => (data, Some(offset)),
            Payload::FromSegment(src) => {
                return self
                    .fabric()
                    .try_send_segment_why(peer, ch, sig.id, args, src, stall)
            }
        };
        let pkt = Packet {
            tag: sig.id,
            words: args,
            payload,
            deposit,
        };
        self.fabric().try_send_why(peer, ch, &pkt, stall)
    }

    pub(crate) fn poll_channel(&self, ch: Channel) -> Result<usize> {
        let mut err = None;
        // The fabric writes deposits into the segment as it polls, after
        // checking them against the frozen ranges: announce the write
        // across the poll, so a freeze on another thread waits for a
        // deposit that passed the check (see `writers`).
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        if self.progress.diverted() {
            // handlers run only on the progress thread
            return Ok(0);
        }
        let mut ran = false;
        let polled = self.fabric().poll(ch, &mut |d| {
            ran = true;
            if let Err(e) = dispatch(self, ch, d) {
                err.get_or_insert(e);
            }
        });
        if ran && self.count_handler_rounds {
            // handlers ran (and finished), even in a round the fabric then
            // fails for another message: a waiting future's bridge sees it
            // where the fabric counts no doorbell rings (`Bridge`)
            self.bridge.count_handled();
        }
        let n = polled?;
        err.map_or(Ok(n), Err)
    }

    /// Poll replies, then requests, always both (`Endpoint::poll`).
    pub(crate) fn poll_every_channel(&self) -> Result<usize> {
        if self.skipped_requests.load(Ordering::Relaxed) {
            self.skipped_requests.store(false, Ordering::Relaxed);
        }
        Ok(self.poll_channel(Channel::Reply)? + self.poll_channel(Channel::Request)?)
    }

    /// Poll replies, then requests (for wait loops). A call that ran reply handlers returns
    /// before polling requests, unless the call before did so too: a
    /// waiter usually waits for a reply, and it learns of one a channel
    /// poll sooner (a round trip's critical path), while requests are
    /// still polled at least every other call.
    pub(crate) fn poll_all(&self) -> Result<usize> {
        let replies = self.poll_channel(Channel::Reply)?;
        let skipped = self.skipped_requests.load(Ordering::Relaxed);
        if replies > 0 && !skipped {
            self.skipped_requests.store(true, Ordering::Relaxed);
            return Ok(replies);
        }
        if skipped {
            self.skipped_requests.store(false, Ordering::Relaxed);
        }
        Ok(replies + self.poll_channel(Channel::Request)?)
    }

    /// Everything a send is checked for before anything moves: the
    /// endpoint is live, the handle is of this endpoint's table, the peer
    /// exists, the message fits the registration, and a user Long stays
    /// out of splitrt's reserved segment ranges. The common case is a few
    /// compares; the error is worded out of line.
    /// A reply (`reply`) is also allowed while `finish` serves traffic.
    #[inline]
    fn check_send(
        &self,
        peer: usize,
        sig: &Sig,
        args: &[u64],
        payload: &Payload<'_>,
        reply: bool,
    ) -> Result<()> {
        if sig.table != self.table_id
            || peer >= self.size
            || args.len() != sig.nargs as usize
            || Kind::of(payload) != sig.kind
            || self.finished.load(Ordering::Relaxed)
        {
            return self.send_refused(peer, sig, args, payload, reply);
        }
        if let Payload::Long { data, offset } = payload {
            if (sig.id >= RESERVED_HANDLERS && self.reserved.overlaps(*offset, data.len() as u64))
                || self.frozen().find(*offset, data.len() as u64).is_some()
            {
                return self.send_refused(peer, sig, args, payload, reply);
            }
        }
        Ok(())
    }

    /// Why [`check_send`](Self::check_send) refused a send.
    #[cold]
    #[inline(never)]
    fn send_refused(
        &self,
        peer: usize,
        sig: &Sig,
        args: &[u64],
        payload: &Payload<'_>,
        reply: bool,
    ) -> Result<()> {
        if sig.table != self.table_id {
            return Err(Error::usage(format!(
                "handler handle #{} comes from another EndpointBuilder, not the one this \
                 endpoint was attached with",
                sig.id
            )));
        }
        if reply {
            // a handler run by the exit barrier answers its request
            if self.closed.load(Ordering::Acquire) {
                return Err(finished_error());
            }
        } else {
            self.check_live()?;
        }
        self.check_peer(peer)?;
        sig.check(|| self.name(sig.id), args, payload)?;
        if let Payload::Long { data, offset } = payload {
            if sig.id >= RESERVED_HANDLERS {
                self.check_user_deposit(*offset, data.len() as u64)?;
            }
            let len = data.len() as u64;
            if let Some(r) = self.frozen().find(*offset, len) {
                let what = format!("a Long payload ('{}') to rank {peer}", self.name(sig.id));
                return Err(frozen_error(&what, *offset, len, r).with_peer(peer));
            }
        }
        Ok(())
    }

    /// The `len` bytes a Long deposited at `offset` of this rank's
    /// segment, as a view (see [`Incoming::long_payload`](crate::Incoming::long_payload)).
    pub(crate) fn deposited(&self, offset: u64, len: usize) -> LocalView<'_, u8> {
        let seg = self.fabric().local_segment();
        assert!(
            offset
                .checked_add(len as u64)
                .is_some_and(|e| e <= seg.len() as u64),
            "a fabric delivered a deposit outside the segment"
        );
        let at = seg.base().wrapping_add(offset as usize);
        // SAFETY: the range lies in this rank's segment (asserted above),
        // which stays mapped while the endpoint (borrowed for the view's
        // life) lives; splitrt makes no reference to segment bytes a
        // handler can reach, and views access them atomically.
        unsafe { LocalView::from_raw_parts(at, len) }
    }

    #[inline]
    fn check_live(&self) -> Result<()> {
        if self.finished.load(Ordering::Relaxed) {
            return Err(finished_error());
        }
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.size {
            return Err(Error::usage(format!(
                "rank {peer} does not exist in a job of {} ranks",
                self.size
            )));
        }
        Ok(())
    }

    /// A user deposit of `len` bytes at `offset` must not touch a reserved
    /// range.
    pub(crate) fn check_user_deposit(&self, offset: u64, len: u64) -> Result<()> {
        if let Some(r) = self.reserved.find(offset, len) {
            return Err(Error::usage(format!(
                "a Long payload at segment offset {offset} ({len} B) would overwrite bytes \
                 {}..{} that splitrt reserved for itself",
                r.start, r.end
            )));
        }
        Ok(())
    }

    #[inline]
    fn check_failure(&self) -> Result<()> {
        if !self.world.peer_failed() {
            return Ok(());
        }
        self.world.failure().map_or(Ok(()), Err)
    }

    /// A wait made no progress for the hang-report time: say what it waits
    /// for (and the send credits), or end the job if so configured.
    fn hang(&self, watch: &mut HangWatch, what: &str) -> Result<()> {
        let what = format!("{what}; {}", self.world.credit_report());
        watch.report(self.rank, &what).map_err(|why| {
            self.world.abort(&why);
            abort_error(self.rank, why)
        })
    }

    /// Back off once; past spinning and yielding, sleep in the fabric
    /// (on the shm doorbell, woken by the peer that gives us work).
    fn snooze(&self, backoff: &mut Backoff) {
        self.snooze_unless(backoff, &|| false);
    }

    /// [`snooze`](Self::snooze) that does not sleep once `done()`, asked
    /// after the sleep is announced on the doorbell (see
    /// [`Wakeup::idle_wait`](splitrt_runtime::fabric::Wakeup::idle_wait));
    /// a fabric without the wake-up capability sleeps the backoff's time.
    fn snooze_unless(&self, backoff: &mut Backoff, done: &dyn Fn() -> bool) {
        let sleep = backoff.sleep_time();
        if self.progress.watching() {
            // The progress thread sleeps on the doorbell and takes the
            // traffic: wait for its next round instead. Under
            // SPLITRT_SPIN_ONLY it spins, on this thread's core if the
            // rank is pinned (threads inherit the affinity), so this
            // thread gives the core up at once rather than spin beside it.
            if self.world.config().spin_only {
                self.progress.wait_epoch(sleep, done);
            } else {
                backoff.snooze_with(&|| self.progress.wait_epoch(sleep, done));
            }
            return;
        }
        self.idle(backoff, done);
    }

    /// Back off once on the fabric's doorbell (or a timed sleep).
    fn idle(&self, backoff: &mut Backoff, done: &dyn Fn() -> bool) {
        let sleep = backoff.sleep_time();
        let wakeup = self.fabric().wakeup();
        backoff.snooze_with(&|| match wakeup {
            Some(w) => w.idle_wait(sleep, done),
            None => idle_wait_blind(sleep, done),
        });
    }

    /// Called by the fabric while a streamed packet waits for room at the
    /// peer: serve inbound traffic (only replies when `ch` is the reply
    /// channel, i.e. inside a request handler), back off while nothing moves.
    fn stall(&self, waits: u32, ch: Channel, backoff: &mut Backoff) -> Result<()> {
        if waits == 0 {
            backoff.reset();
        }
        if self.progress_while_sending(ch)? == 0 {
            self.check_failure()?;
            self.snooze(backoff);
        }
        Ok(())
    }

    /// Poll while a send waits for room: all traffic (`Request`: main
    /// context) or only replies (`Reply`: inside a request handler). A
    /// malformed unrelated message must not abandon this send half-way (a
    /// half-streamed packet would poison the ring), so such errors are kept
    /// for the next `poll` / `wait_until`; only a failed peer ends the send.
    fn progress_while_sending(&self, ch: Channel) -> Result<usize> {
        let polled = match ch {
            Channel::Request => self.poll_all(),
            Channel::Reply => self.poll_channel(Channel::Reply),
        };
        match polled {
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), ErrorKind::PeerFailed(_)) => Err(e),
            Err(e) => {
                self.deferred.lock().get_or_insert(e);
                self.has_deferred.store(true, Ordering::Release);
                Ok(0)
            }
        }
    }

    /// An error kept while sending, reported by the next poll or wait.
    fn take_deferred(&self) -> Result<()> {
        if !self.has_deferred.load(Ordering::Acquire) {
            return Ok(());
        }
        self.has_deferred.store(false, Ordering::Release);
        self.deferred.lock().take().map_or(Ok(()), Err)
    }

    /// Whether a Short to `peer` passes every check of
    /// [`check_send`](Self::check_send): the handle is of this endpoint's
    /// table and a Short one taking `args.len()` words, the peer exists,
    /// the endpoint is live. (A Short deposits nothing: no range checks.)
    #[inline(always)]
    fn short_ok(&self, peer: usize, sig: &Sig, args: &[u64]) -> bool {
        sig.table == self.table_id
            && sig.kind == Kind::Short
            && args.len() == sig.nargs as usize
            && peer < self.size
            && !self.finished.load(Ordering::Relaxed)
    }

    /// A Short request's path: the checks, then the fabric's Short path.
    /// A refused check, a full ring (wait, serving inbound traffic) and
    /// an error go out of line to [`send_request`](Self::send_request),
    /// which words the error or waits.
    #[inline]
    pub(crate) fn request_short(&self, peer: usize, h: RequestHandler, args: &[u64]) -> Result<()> {
        if self.short_ok(peer, &h.0, args) && !in_handler() {
            let sent = self
                .fabric()
                .try_send_short(peer, Channel::Request, h.0.id, args);
            if let Ok(true) = sent {
                return Ok(());
            }
        }
        self.request_short_slow(peer, h, args)
    }

    #[cold]
    #[inline(never)]
    fn request_short_slow(&self, peer: usize, h: RequestHandler, args: &[u64]) -> Result<()> {
        self.send_request(peer, h, args, Payload::None, true)
            .map(|_| ())
    }

    /// A Short reply's path (as [`request_short`](Self::request_short);
    /// the wait serves replies only, in [`send_reply`](Self::send_reply)).
    #[inline]
    pub(crate) fn reply_short(&self, peer: usize, h: ReplyHandler, args: &[u64]) -> Result<()> {
        if self.short_ok(peer, &h.0, args) {
            let sent = self
                .fabric()
                .try_send_short(peer, Channel::Reply, h.0.id, args);
            if let Ok(true) = sent {
                return Ok(());
            }
        }
        self.reply_short_slow(peer, h, args)
    }

    #[cold]
    #[inline(never)]
    fn reply_short_slow(&self, peer: usize, h: ReplyHandler, args: &[u64]) -> Result<()> {
        self.send_reply(peer, h, args, Payload::None)
    }

    pub(crate) fn send_request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
        block: bool,
    ) -> Result<Sent> {
        let at = |e: Error| e.at_rank(self.rank).with_peer(peer);
        if in_handler() {
            return Err(at(Error::usage(
                "a request cannot be sent from inside a handler (reply through the token)",
            )));
        }
        // A Long writes into a segment (at send time on shm): announce it
        // across the frozen-range check and the send.
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing =
            matches!(payload, Payload::Long { .. }).then(|| unsafe { crate::writers::writing() });
        self.check_send(peer, &h.0, args, &payload, false)
            .map_err(at)?;
        if let Some(src) = self.copy_first(peer, &payload) {
            // one copy for all the tries back-pressure may cost
            return splitrt_runtime::fabric::send_through_bounce(src, |bytes| {
                self.send_request(peer, h, args, Payload::Medium(bytes), block)
            });
        }
        // the waiting state is made only if the first try must wait
        let mut stall_backoff = None;
        let mut stall = |waits: u32| {
            let b = stall_backoff.get_or_insert_with(|| Backoff::new(self.world.config()));
            self.stall(waits, Channel::Request, b)
        };
        let mut wait: Option<(Backoff, HangWatch)> = None;
        let mut last_why;
        loop {
            let sent =
                self.try_send_payload(peer, Channel::Request, &h.0, args, &payload, &mut stall)?;
            if let Err(why) = sent {
                if !block {
                    return Ok(Err(why));
                }
                last_why = why;
            } else {
                if payload.len() >= POLL_AFTER_BYTES {
                    // Serve our own inbound traffic every few large sends,
                    // as GASNet-EX's request injection does: a peer
                    // flooding us waits for the landing-zone room we free.
                    // (A plain load and store: the count is a heuristic.)
                    let n = self.large_sends.load(Ordering::Relaxed).wrapping_add(1);
                    self.large_sends.store(n, Ordering::Relaxed);
                    if n.is_multiple_of(POLL_EVERY) {
                        self.progress_while_sending(Channel::Request)?;
                    }
                }
                return Ok(Ok(()));
            }
            // Out of credits: serve our own inbound traffic while we wait.
            let (backoff, watch) = wait.get_or_insert_with(|| {
                let c = self.world.config();
                (Backoff::new(c), HangWatch::new(c))
            });
            if self.progress_while_sending(Channel::Request)? == 0 {
                self.check_failure()?;
                if watch.due_on_round(backoff.is_slow()) {
                    let what = format!(
                        "sending request '{}' to rank {peer}, which has no room for it ({last_why})",
                        self.name(h.0.id)
                    );
                    self.hang(watch, &what)?;
                }
                self.snooze(backoff);
            } else {
                watch.progress();
            }
        }
    }

    pub(crate) fn send_reply(
        &self,
        peer: usize,
        h: ReplyHandler,
        args: &[u64],
        payload: Payload<'_>,
    ) -> Result<()> {
        let at = |e: Error| e.at_rank(self.rank).with_peer(peer);
        // A Long writes into a segment (at send time on shm): announce it
        // across the frozen-range check and the send.
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing =
            matches!(payload, Payload::Long { .. }).then(|| unsafe { crate::writers::writing() });
        self.check_send(peer, &h.0, args, &payload, true)
            .map_err(at)?;
        if let Some(src) = self.copy_first(peer, &payload) {
            // one copy for all the tries back-pressure may cost
            return splitrt_runtime::fabric::send_through_bounce(src, |bytes| {
                self.send_reply(peer, h, args, Payload::Medium(bytes))
            });
        }
        // Waiting for reply room drains only replies: their handlers cannot
        // send, so this never recurses into another request handler.
        let mut stall_backoff = None;
        let mut stall = |waits: u32| {
            let b = stall_backoff.get_or_insert_with(|| Backoff::new(self.world.config()));
            self.stall(waits, Channel::Reply, b)
        };
        let mut wait: Option<(Backoff, HangWatch)> = None;
        while self
            .try_send_payload(peer, Channel::Reply, &h.0, args, &payload, &mut stall)?
            .is_err()
        {
            let (backoff, watch) = wait.get_or_insert_with(|| {
                let c = self.world.config();
                (Backoff::new(c), HangWatch::new(c))
            });
            if self.progress_while_sending(Channel::Reply)? == 0 {
                self.check_failure()?;
                if watch.due_on_round(backoff.is_slow()) {
                    let what = format!(
                        "replying '{}' to rank {peer}, which has no room for it",
                        self.name(h.0.id)
                    );
                    self.hang(watch, &what)?;
                }
                self.snooze(backoff);
            } else {
                watch.progress();
            }
        }
        Ok(())
    }

    /// Wait until everything this rank sent has reached its target
    /// (acknowledged over UDP, one-sided writes complete), serving inbound
    /// traffic meanwhile.
    ///
    /// Errors of unrelated messages met meanwhile (a late Long refused at
    /// a frozen range, say) are kept for the next `poll` / `wait_until`,
    /// as while sending: only a failed peer ends the wait.
    fn quiet_sends(&self) -> Result<()> {
        self.world
            .drain_network(&mut || self.progress_while_sending(Channel::Request).map(|_| ()))?;
        self.fabric().remote_memory().map_or(Ok(()), |r| r.quiet())
    }

    /// Deliver every message that has arrived (polling until a round
    /// delivers nothing), keeping unrelated errors for the next `poll` /
    /// `wait_until`, as while sending. While arrivals wait but this
    /// thread's polls deliver nothing (another thread holds the receive
    /// side), it backs off, and reports a hang through `watch`.
    fn feed_arrived(&self, watch: &mut HangWatch) -> Result<()> {
        let mut backoff = Backoff::new(self.world.config());
        loop {
            match self.poll_every_channel() {
                Ok(0) if !self.fabric_ref().arrivals_waiting() => return Ok(()),
                Ok(0) => {
                    self.check_failure()?;
                    if watch.due_on_round(backoff.is_slow()) {
                        self.hang(watch, "feeding the messages that arrived before a seal")?;
                    }
                    self.snooze(&mut backoff);
                }
                Ok(_) => watch.progress(),
                Err(e) if matches!(e.kind(), ErrorKind::PeerFailed(_)) => return Err(e),
                Err(e) => {
                    self.deferred.lock().get_or_insert(e);
                    self.has_deferred.store(true, Ordering::Release);
                    watch.progress();
                }
            }
        }
    }

    fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // The exit barrier serves traffic: handlers it runs still reply
        // (`closed` is set only once it is over).
        let r = self.world.finish(&mut || self.poll_all().map(|_| ()));
        self.closed.store(true, Ordering::Release);
        r
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // First: the bridge thread reads `world` (see `Bridge`'s contract).
        self.bridge.stop();
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        if std::thread::panicking() {
            self.world.abort("the rank panicked");
        } else if self.world.has_failed() {
            // the job has failed already; the error was (or will be)
            // reported where it was met, so nothing to finish
        } else if let Err(e) = self.finish() {
            eprintln!("splitrt: rank {}: finishing at drop failed: {e}", self.rank);
        }
    }
}

/// The progress thread's view of the endpoint (see [`progress::Driven`]).
impl progress::Driven for Inner {
    fn progress_state(&self) -> &progress::State {
        &self.progress
    }
    fn poll_once(&self) -> Result<usize> {
        self.poll_every_channel()
    }
    fn idle(&self, backoff: &mut Backoff, stop: &dyn Fn() -> bool) {
        Inner::idle(self, backoff, stop)
    }
    fn peer_failure(&self) -> Option<Error> {
        self.check_failure().err()
    }
    fn defer(&self, e: Error) {
        self.deferred.lock().get_or_insert(e);
        self.has_deferred.store(true, Ordering::Release);
    }
    fn abort(&self, why: &str) {
        self.world.abort(why)
    }
    fn config(&self) -> &Config {
        self.world.config()
    }
    fn rank(&self) -> usize {
        self.rank
    }
}

/// Dispatch's view of the endpoint (see [`dispatch::Host`]).
impl dispatch::Host for Inner {
    type Request = RequestFn;
    type Reply = ReplyFn;

    #[inline]
    fn rank(&self) -> usize {
        self.rank
    }

    #[inline]
    fn entry(&self, id: u16) -> Option<&Entry> {
        self.table.get(id as usize).and_then(Option::as_ref)
    }

    #[inline]
    fn check_deposit(&self, offset: u64, len: u64) -> Result<()> {
        self.check_user_deposit(offset, len)
    }

    #[inline]
    fn frozen_range(&self, offset: u64, len: u64) -> Option<std::ops::Range<u64>> {
        self.frozen().find(offset, len)
    }

    #[inline]
    fn deposit_view(&self, offset: u64, len: usize) -> LocalView<'_, u8> {
        self.deposited(offset, len)
    }

    #[inline]
    fn run_request(&self, f: &RequestFn, src: usize, msg: &Incoming<'_>) {
        f(Token { ep: self, src }, msg)
    }

    #[inline]
    fn run_reply(&self, f: &ReplyFn, msg: &Incoming<'_>) {
        f(msg)
    }
}

/// Given to a request handler; [`reply`](Token::reply) consumes it, so a
/// handler replies at most once. Dropping it without replying is allowed.
/// The lifetime ties it to the handler call: it cannot be kept for later.
#[must_use = "a request handler replies through its token (or drops it on purpose)"]
pub struct Token<'a> {
    pub(crate) ep: &'a Inner,
    pub(crate) src: usize,
}

impl Token<'_> {
    /// The rank whose request is being handled.
    pub fn src(&self) -> usize {
        self.src
    }

    /// The segment range frozen read-only (see
    /// [`Endpoint::freeze_segment_range`](crate::Endpoint::freeze_segment_range))
    /// that `len` bytes at `offset` of this rank's segment touch, if any:
    /// for handlers that write the segment.
    pub fn frozen_segment_range(&self, offset: u64, len: u64) -> Option<std::ops::Range<u64>> {
        self.ep.frozen().find(offset, len)
    }

    /// Largest Medium payload a reply to the requester may carry (as
    /// [`Endpoint::max_medium`] of [`src`](Self::src); GASNet-EX's
    /// `gex_Token_MaxReplyMedium`): for handlers whose reply size depends
    /// on what they computed.
    pub fn max_medium(&self) -> usize {
        self.ep.fabric().max_inline(self.src)
    }

    /// Reply to the requester. Never blocks on the requester's user code: if
    /// its reply ring is full, this rank drains its own replies while it
    /// waits, so request/reply cycles cannot deadlock. Works also while
    /// this rank is in [`Endpoint::finish`], whose exit barrier runs
    /// handlers.
    #[inline]
    pub fn reply(self, h: ReplyHandler, args: &[u64], payload: Payload<'_>) -> Result<()> {
        crate::span!(
            TRACE,
            "am.send",
            rank = self.ep.rank,
            peer = self.src,
            handler = h.0.id,
            bytes = crate::spans::bytes(&payload),
            reply = true
        );
        if let Payload::None = payload {
            return self.ep.reply_short(self.src, h, args);
        }
        self.ep.send_reply(self.src, h, args, payload)
    }
}

impl Endpoint {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Largest Medium payload to `peer` (at least 512 B); an error if
    /// `peer` is not a rank of the job.
    pub fn max_medium(&self, peer: usize) -> Result<usize> {
        self.inner
            .check_peer(peer)
            .map_err(|e| e.at_rank(self.rank()))?;
        Ok(self.inner.fabric().max_inline(peer))
    }

    /// Largest Medium payload to `peer` that, sent with `nargs` arguments,
    /// travels in one piece and is handed to its handler where it arrived
    /// (at most [`max_medium`](Self::max_medium); smaller on a fabric that
    /// splits a Medium, as UDP's into datagrams and ibverbs' into its
    /// receive buffers, and copies it back
    /// together at the receiver). A transfer moved as several Mediums
    /// sized by this saves the receiver that copy. A usage error if `peer`
    /// is not a rank of the job or `nargs` exceeds [`MAX_ARGS`].
    ///
    /// [`MAX_ARGS`]: crate::MAX_ARGS
    pub fn max_medium_unsplit(&self, peer: usize, nargs: usize) -> Result<usize> {
        self.inner
            .check_peer(peer)
            .map_err(|e| e.at_rank(self.rank()))?;
        if nargs > crate::handler::MAX_ARGS {
            return Err(Error::usage(format!(
                "max_medium_unsplit: {nargs} argument words (max {})",
                crate::handler::MAX_ARGS
            ))
            .at_rank(self.rank()));
        }
        Ok(self.inner.fabric().max_inline_unsplit(peer, nargs))
    }

    /// Largest Long payload to `peer` (its segment size); an error if
    /// `peer` is not a rank of the job.
    pub fn max_long(&self, peer: usize) -> Result<usize> {
        self.inner
            .check_peer(peer)
            .map_err(|e| e.at_rank(self.rank()))?;
        Ok(self.inner.fabric().segment_len(peer))
    }

    /// Reserve the segment range `offset..offset + len` for splitrt's own
    /// handlers (ids below [`RESERVED_HANDLERS`]): user Long payloads into
    /// it are refused at the sender. Every rank reserves the same ranges
    /// (the PGAS layer does this for its counters and scratch block).
    #[doc(hidden)]
    pub fn reserve_segment_range(&self, offset: u64, len: u64) -> Result<()> {
        self.inner
            .reserved
            .add(offset, len)
            .map_err(|e| e.at_rank(self.rank()))
    }

    /// Freeze the segment range `offset..offset + len` read-only: from now
    /// on every Long this endpoint sends into it (to any rank: ranges are
    /// symmetric) is refused at the sender, [`write_segment`] into it is
    /// refused, and a Long that arrives into it anyway is reported as a
    /// protocol error. Every rank freezes the same ranges; the PGAS
    /// layer's `Pgas::freeze` does, and refuses its own puts, stores and
    /// atomics there too. An error if the range overlaps a frozen one.
    ///
    /// Before it returns, every write into any segment that another
    /// thread of this process began before the range was marked (and
    /// announced through [`writing`](crate::writing)) has finished, and
    /// every Long this endpoint sent has been deposited at its target
    /// (see `docs/safety.md`, "Freezing").
    ///
    /// # Safety
    ///
    /// Only the freeze protocol of a layer above may call this (and
    /// [`thaw_segment_range`](Self::thaw_segment_range)): the range is
    /// the target of `&[T]` references that layer hands out, and it must
    /// keep every write out of the range on every rank while any of them
    /// lives: every rank freezes the same range before any reference is
    /// made (a barrier after this call), and thaws only after every rank
    /// has given its references up (a barrier before the thaw). Calling
    /// it elsewhere, for instance thawing a range whose frozen handle is
    /// still alive, lets a write land under a live `&[T]`:
    ///
    /// ```compile_fail,E0133
    /// fn thaw_under_a_live_slice(ep: &splitrt_am::Endpoint, off: u64) {
    ///     ep.thaw_segment_range(off, 32).unwrap(); // unsafe: not the protocol
    /// }
    /// ```
    ///
    /// (`Pgas::freeze` shows the whole case.)
    ///
    /// [`write_segment`]: Self::write_segment
    pub unsafe fn freeze_segment_range(&self, offset: u64, len: u64) -> Result<()> {
        let at = |e: Error| e.at_rank(self.rank());
        crate::writers::can_freeze().map_err(at)?;
        self.inner.frozen().add(offset, len).map_err(at)?;
        // Every write another thread began before the mark is done; every
        // later one sees it (the asymmetric fence, see `writers`). Every
        // Long this endpoint sent is deposited at its target or refused
        // there: shm deposits at send time and ibverbs places the payload
        // with a blocking write at send time (both inside the sender's
        // announcement, so the fence covered them), UDP deposits when the
        // target polls (refused there if sealed by then), one-sided writes
        // complete at the fabric's quiet. On any error the
        // range is unfrozen again: no rank has entered the barrier after
        // this call, so none holds a slice.
        let mut watch = HangWatch::new(self.config());
        let done = crate::writers::quiesce(&mut watch, &mut |w, what| self.inner.hang(w, what))
            .and_then(|()| self.inner.quiet_sends());
        if let Err(e) = done {
            let _ = self.inner.frozen().remove(offset, len);
            return Err(at(e));
        }
        Ok(())
    }

    /// Seal a range [`freeze_segment_range`](Self::freeze_segment_range)
    /// froze, once every rank has frozen and drained it (past the
    /// protocol's barrier): first every message that has arrived is fed
    /// (a Long its sender sent before its own freeze is acknowledged once
    /// stored here, and over UDP written into the
    /// segment only when this rank polls: it is part of the frozen
    /// contents), then the range is sealed, so a deposit into it that
    /// comes later is refused by the fabric as it is written (reported
    /// naming the sender; nothing written), and every write another
    /// thread began before the seal finishes before this returns. On an
    /// error the range stays frozen and (if it can be) sealed: other
    /// ranks may hold references to their part of it already.
    ///
    /// # Safety
    ///
    /// As for [`freeze_segment_range`](Self::freeze_segment_range): only
    /// the freeze protocol of a layer above, after its freeze's barrier
    /// and before it hands out references to the range.
    pub unsafe fn seal_segment_range(&self, offset: u64, len: u64) -> Result<()> {
        let at = |e: Error| e.at_rank(self.rank());
        let mut watch = HangWatch::new(self.config());
        let mut hang = |w: &mut HangWatch, what: &str| self.inner.hang(w, what);
        // Drained means: nothing waits in the receive windows and no poll
        // of another thread is in flight (it may hold datagrams it took
        // out of the windows, so `arrivals_waiting` does not see them, and
        // deposit them later). A poll runs inside a write announcement, so
        // the quiesce waits for it; what it fed may have let more arrive,
        // hence the loop.
        let mut drain = || loop {
            self.inner.feed_arrived(&mut watch)?;
            crate::writers::quiesce(&mut watch, &mut hang)?;
            if !self.inner.fabric_ref().arrivals_waiting() {
                return Ok(());
            }
        };
        let drained = drain();
        // Past the protocol's barrier other ranks may already hold slices
        // of their part of the range, so whatever fails from here on, the
        // range stays frozen and sealed on this rank (unfreezing it would
        // let this rank's puts land under those slices): the error is
        // returned, and the job is failing anyway.
        let sealed = self.inner.frozen().seal(offset, len);
        drained
            .and(sealed)
            .and_then(|()| crate::writers::quiesce(&mut watch, &mut hang))
            .map_err(at)
    }

    /// Undo [`seal_segment_range`](Self::seal_segment_range): deposits
    /// into the range land again (senders still refuse it until the
    /// thaw). The first step of a thaw, once this rank's references to
    /// the range are gone, so a write that another rank sends after it
    /// thawed is not refused here.
    ///
    /// # Safety
    ///
    /// As for [`freeze_segment_range`](Self::freeze_segment_range): only
    /// the freeze protocol of a layer above, once this rank has given up
    /// the references it made of the range.
    pub unsafe fn unseal_segment_range(&self, offset: u64, len: u64) -> Result<()> {
        self.inner
            .frozen()
            .unseal(offset, len)
            .map_err(|e| e.at_rank(self.rank()))
    }

    /// Undo [`freeze_segment_range`](Self::freeze_segment_range) of the
    /// same range (an error if it is not frozen).
    ///
    /// # Safety
    ///
    /// As for [`freeze_segment_range`](Self::freeze_segment_range): only
    /// the freeze protocol of a layer above, once every rank has given up
    /// the references it made of the range.
    pub unsafe fn thaw_segment_range(&self, offset: u64, len: u64) -> Result<()> {
        self.inner
            .frozen()
            .remove(offset, len)
            .map_err(|e| e.at_rank(self.rank()))
    }

    /// The frozen range that `len` bytes at segment offset `offset` touch,
    /// if any (one load while nothing is frozen).
    #[inline]
    pub fn frozen_segment_range(&self, offset: u64, len: u64) -> Option<std::ops::Range<u64>> {
        self.inner.frozen().find(offset, len)
    }

    /// The job description.
    pub fn job(&self) -> &JobInfo {
        self.inner.world.job()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        self.inner.world.config()
    }

    /// The runtime below. Not public: through it raw packets (any tag,
    /// deposits anywhere in a peer's segment, splitrt's reserved bytes
    /// included) could be sent from safe code; layers above use
    /// [`rma`](Self::rma).
    ///
    /// ```compile_fail,E0624
    /// fn raw(ep: &splitrt_am::Endpoint) {
    ///     let _ = ep.world();
    /// }
    /// ```
    #[allow(dead_code)]
    pub(crate) fn world(&self) -> &World {
        &self.inner.world
    }

    /// Counters of the UDP fabric, if this rank uses one (for reports).
    pub fn udp_stats(&self) -> Option<UdpStats> {
        self.inner.fabric_ref().udp().map(|u| u.stats())
    }

    /// The receive queue of this rank's host over shared memory
    /// (`SPLITRT_SHM_QUEUE`, with `auto` as chosen for the host's number
    /// of ranks), if this rank uses the shared-memory fabric (for reports).
    pub fn shm_queue(&self) -> Option<splitrt_runtime::fabric::shm::queue_choice::QueueKind> {
        self.inner.fabric_ref().shm().map(|s| s.queue())
    }

    /// Whether another rank of the job failed (one load, for polling
    /// loops; [`failure`](Self::failure) makes the error).
    #[inline]
    pub fn peer_failed(&self) -> bool {
        self.inner.world.peer_failed()
    }

    /// If another rank failed, the error naming it.
    pub fn failure(&self) -> Option<Error> {
        self.inner.world.failure()
    }

    /// End the job: tell every rank that this one failed because of `why`
    /// (best effort); their next wait returns an error naming this rank.
    /// For a layer above that found the job's state broken beyond repair
    /// (e.g. ranks that entered different collectives).
    pub fn abort(&self, why: &str) {
        self.inner.world.abort(why)
    }

    /// **Test double.** The raw fabric, through which anything can be
    /// sent (any tag, a deposit anywhere in a peer's segment): for tests
    /// of how a rank copes with what a broken peer sends. Only with the
    /// cargo feature `test-doubles`.
    #[cfg(feature = "test-doubles")]
    pub fn raw_fabric_for_tests(&self) -> &AnyFabric {
        self.inner.fabric_ref()
    }

    /// Send a request, waiting (and serving inbound traffic) while `peer`
    /// has no room. The payload variant must match the handler's kind and
    /// `args` its argument count; a Long offset must lie in `peer`'s segment.
    #[inline]
    pub fn request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
    ) -> Result<()> {
        crate::span!(
            TRACE,
            "am.send",
            rank = self.rank(),
            peer,
            handler = h.0.id,
            bytes = crate::spans::bytes(&payload)
        );
        if let Payload::None = payload {
            return self.inner.request_short(peer, h, args);
        }
        self.inner
            .send_request(peer, h, args, payload, true)
            .map(|_| ())
    }

    /// Send a request if `peer` has room now. `Ok(Err(why))`:
    /// back-pressure, nothing was sent, and [`WouldBlock`](crate::WouldBlock)
    /// says which limit the fabric met (the peer's ring or landing zone,
    /// the UDP window, RDMA credits); poll and try again. Errors (a
    /// refused message, a failed peer) are the outer `Err`.
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint, h: splitrt_am::RequestHandler) -> splitrt_am::Result<()> {
    /// use splitrt_am::{Payload, WouldBlock};
    /// while let Err(why) = ep.try_request(1, h, &[7], Payload::None)? {
    ///     if why == WouldBlock::UdpWindowFull { /* e.g. count it */ }
    ///     ep.poll()?; // frees room at the peer by serving its traffic
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use = "Ok(Err(_)) means the request was not sent"]
    pub fn try_request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
    ) -> Result<Sent> {
        crate::span!(
            TRACE,
            "am.send",
            rank = self.rank(),
            peer,
            handler = h.0.id,
            bytes = crate::spans::bytes(&payload),
            try_only = true
        );
        self.inner.send_request(peer, h, args, payload, false)
    }

    /// Run the handlers of every message that has arrived; returns how many
    /// ran. Returns `Ok(0)` at once if another thread is polling.
    pub fn poll(&self) -> Result<usize> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        if in_handler() {
            return Err(
                Error::usage("poll() cannot be called from inside a handler").at_rank(self.rank()),
            );
        }
        self.inner.take_deferred()?;
        self.inner.poll_every_channel()
    }

    /// Have `waker` woken once when traffic may have arrived for this rank
    /// (a message, room in a ring, a direct write into its segment), or the
    /// job failed: how a future that waits for a handler sleeps instead of
    /// asking to be polled again. Poll the endpoint when woken (that runs
    /// the handlers), and register again before waiting again.
    ///
    /// The first call starts this rank's doorbell bridge, a helper thread
    /// that sleeps on the doorbell while any waker (or an armed
    /// [`doorbell_fd`](Self::doorbell_fd)) waits, and parks otherwise;
    /// see `docs/safety.md` ("Futures") for what it costs.
    pub fn wake_on_traffic(&self, waker: &Waker) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        // SAFETY: `world` lives in `self.inner` (an `Arc`, never moved) and
        // `Inner::drop` stops the bridge before the world drops.
        unsafe { self.inner.bridge.wake_on_traffic(&self.inner.world, waker) }
            .map_err(|e| e.at_rank(self.rank()))
    }

    /// A fresh registration for [`wake_on_traffic_as`](Self::wake_on_traffic_as):
    /// one per waiting future.
    pub fn traffic_key(&self) -> TrafficKey {
        self.inner.bridge.key()
    }

    /// As [`wake_on_traffic`](Self::wake_on_traffic), under the
    /// registration `key`: at most one waker per key (a later one
    /// replaces it), taken back by
    /// [`forget_traffic_wake`](Self::forget_traffic_wake) when the waiter
    /// completes or is dropped, so a waiter that no longer waits does not
    /// keep the bridge armed (a doorbell sleeper: every peer's ring of
    /// this rank a `FUTEX_WAKE`).
    pub fn wake_on_traffic_as(&self, key: &TrafficKey, waker: &Waker) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        // SAFETY: as in `wake_on_traffic`.
        unsafe {
            self.inner
                .bridge
                .wake_on_traffic_as(&self.inner.world, key, waker)
        }
        .map_err(|e| e.at_rank(self.rank()))
    }

    /// This rank's doorbell count now (where the fabric has no doorbell
    /// count, e.g. pure UDP: the count of this endpoint's poll rounds that
    /// ran handlers, on any thread): read it before looking at memory
    /// peers or handlers write (a signal word), then register with
    /// [`wake_on_traffic_since`](Self::wake_on_traffic_since).
    #[doc(hidden)]
    pub fn traffic_seq(&self) -> Option<u32> {
        self.inner
            .fabric_ref()
            .wakeup()
            .and_then(|f| f.traffic_seq())
            .or_else(|| Some(self.inner.bridge.handled_seq()))
    }

    /// [`wake_on_traffic_as`](Self::wake_on_traffic_as) for a waiter that
    /// read [`traffic_seq`](Self::traffic_seq) as `seq` before its last
    /// look: woken once the count differs from `seq` (no later than the
    /// bridge's first look after that), even by a ring that came before
    /// the bridge slept (a peer's write straight into this rank's segment
    /// leaves nothing else to see). When another waiter registered with
    /// a different count, the count moved since the older of the two
    /// reads, and the waiters of the older one are woken at once: this
    /// one (not registered) if `seq` is the older, else the registered
    /// ones (and the `doorbell_fd` is made readable), this one staying
    /// registered under `seq`. Other tasks' wakers may so run on this
    /// thread inside this call; a waker that polls inline must not
    /// recurse without bound. A look at the word again after this
    /// call (as the signal futures do) finds a write that came after the
    /// first look at once rather than at the bridge's next look.
    #[doc(hidden)]
    pub fn wake_on_traffic_since(
        &self,
        key: &TrafficKey,
        waker: &Waker,
        seq: Option<u32>,
    ) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        // SAFETY: as in `wake_on_traffic`.
        unsafe {
            self.inner
                .bridge
                .wake_on_traffic_since(&self.inner.world, key, waker, seq)
        }
        .map_err(|e| e.at_rank(self.rank()))
    }

    /// Take back `key`'s waker if it is still registered (it is not after
    /// a fire); the bridge disarms once nothing waits.
    pub fn forget_traffic_wake(&self, key: &TrafficKey) {
        self.inner.bridge.forget(key);
    }

    /// How many wakers wait for the bridge's next fire (for tests: 0 once
    /// no future is pending and the bridge is disarmed).
    #[doc(hidden)]
    pub fn traffic_waiters(&self) -> usize {
        self.inner.bridge.waiters()
    }

    /// This rank's doorbell as a file descriptor (an `eventfd`) that
    /// becomes readable when traffic may have arrived since the last
    /// [`arm_doorbell`](Self::arm_doorbell): for executors that wait on
    /// descriptors (`tokio::io::unix::AsyncFd`, `epoll`, `poll`). A
    /// progress loop: arm, [`poll`](Self::poll), wait until readable,
    /// [`clear_doorbell`](Self::clear_doorbell), repeat. (Arming before
    /// polling: traffic that arrives after the poll fires the armed
    /// doorbell.) The descriptor stays readable until cleared.
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint) -> splitrt_am::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// let fd = ep.doorbell_fd()?.as_raw_fd();
    /// loop {
    ///     ep.arm_doorbell()?;
    ///     ep.poll()?;
    ///     let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    ///     // SAFETY: one valid pollfd.
    ///     unsafe { libc::poll(&mut p, 1, -1) };
    ///     ep.clear_doorbell();
    /// #   break;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn doorbell_fd(&self) -> Result<BorrowedFd<'_>> {
        self.inner.bridge.fd().map_err(|e| e.at_rank(self.rank()))
    }

    /// Arm the [`doorbell_fd`](Self::doorbell_fd): it becomes readable at
    /// the next sign of traffic for this rank (or a failed job). Starts
    /// the bridge thread if needed (see [`wake_on_traffic`](Self::wake_on_traffic)).
    pub fn arm_doorbell(&self) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        // SAFETY: as in `wake_on_traffic`.
        unsafe { self.inner.bridge.arm_fd(&self.inner.world) }.map_err(|e| e.at_rank(self.rank()))
    }

    /// Empty the [`doorbell_fd`](Self::doorbell_fd) after it was found
    /// readable (it stays readable until then).
    pub fn clear_doorbell(&self) {
        self.inner.bridge.clear_fd();
    }

    /// Poll until `cond` holds: spin briefly, then yield, then sleep, so more
    /// ranks than cores still progress. Fails if another rank dies. A wait
    /// that sees no message for `SPLITRT_HANG_REPORT` seconds says so once
    /// (see [`wait_until_described`](Self::wait_until_described)).
    pub fn wait_until(&self, cond: impl FnMut() -> bool) -> Result<()> {
        self.wait_until_described(
            &|| "in Endpoint::wait_until (a condition of the program's)".into(),
            cond,
        )
    }

    /// [`wait_until`](Self::wait_until) with a description of what is
    /// awaited for the hang report, e.g. "in Pgas::sync for 3 gets from rank
    /// 2": called only when a report is due.
    pub fn wait_until_described(
        &self,
        what: &dyn Fn() -> String,
        cond: impl FnMut() -> bool,
    ) -> Result<()> {
        self.wait_reporting(what, std::time::Duration::ZERO, cond)
    }

    /// [`wait_until_described`](Self::wait_until_described) that reports
    /// `extra` later than configured: for waiters that know less than
    /// another rank that waits too (which then reports first).
    #[doc(hidden)]
    pub fn wait_reporting(
        &self,
        what: &dyn Fn() -> String,
        extra: std::time::Duration,
        cond: impl FnMut() -> bool,
    ) -> Result<()> {
        let mut own = HangWatch::new(self.config()).patient(extra);
        self.wait_loop(what, &mut own, true, cond)
    }

    /// [`wait_reporting`](Self::wait_reporting) with the caller's hang
    /// watch, for waits that know which progress is theirs (a team
    /// collective's messages): only the caller tells the watch of progress
    /// ([`HangWatch::progress`]), so traffic this wait serves for others
    /// does not restart it, and a wait re-armed with the same watch (after
    /// waking for something else) goes on counting. The watch's clock
    /// starts at its first look.
    #[doc(hidden)]
    pub fn wait_watched(
        &self,
        what: &dyn Fn() -> String,
        watch: &mut HangWatch,
        cond: impl FnMut() -> bool,
    ) -> Result<()> {
        self.wait_loop(what, watch, false, cond)
    }

    /// The waiting loop of [`wait_reporting`](Self::wait_reporting) and
    /// [`wait_watched`](Self::wait_watched): polls until `cond`, reporting
    /// through `watch` when it is due. With `traffic_is_progress` (a wait
    /// that cannot tell its own progress) every round that served traffic,
    /// and every handler round of the progress thread, restarts the watch;
    /// else only the caller does.
    fn wait_loop(
        &self,
        what: &dyn Fn() -> String,
        watch: &mut HangWatch,
        traffic_is_progress: bool,
        cond: impl FnMut() -> bool,
    ) -> Result<()> {
        crate::span!(DEBUG, "am.wait", rank = self.rank());
        // `cond` is also asked inside the doorbell wait (so a peer's wake-up
        // is never missed); a true answer there is kept, never asked again.
        let (cond, met) = (std::cell::RefCell::new(cond), std::cell::Cell::new(false));
        let cond = || {
            met.set(met.get() || (cond.borrow_mut())());
            met.get()
        };
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        if in_handler() {
            return Err(
                Error::usage("wait_until() cannot be called from inside a handler")
                    .at_rank(self.rank()),
            );
        }
        self.inner.take_deferred()?;
        let mut backoff = Backoff::new(self.config());
        // the progress thread's rounds that ran handlers, as last seen
        let mut rounds = self.inner.progress.handler_rounds();
        loop {
            if cond() {
                return Ok(());
            }
            let busy = self.inner.poll_all()? > 0;
            if busy {
                backoff.reset();
                if traffic_is_progress {
                    watch.progress();
                }
            } else {
                self.inner.check_failure()?;
                self.inner.take_deferred()?;
                // the progress thread ran handlers for this rank meanwhile
                // (looked at on every idle round, one load: under
                // SPLITRT_SPIN_ONLY the back-off never gets slow, yet the
                // watch below still looks at the clock)
                if traffic_is_progress {
                    let now = self.inner.progress.handler_rounds();
                    if now != rounds {
                        rounds = now;
                        watch.progress();
                    }
                }
            }
            // traffic resets the backoff, so this wait may never get slow
            // (nor under SPLITRT_SPIN_ONLY): the watch is also looked at
            // every 64th round, busy or idle
            if watch.due_on_round(backoff.is_slow()) {
                self.inner.hang(watch, &what())?;
            }
            if !busy {
                self.inner.snooze_unless(&mut backoff, &cond);
            }
        }
    }

    /// Wait for every rank (through the bootstrap; serves traffic meanwhile).
    pub fn barrier(&self) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        if in_handler() {
            return Err(
                Error::usage("barrier() cannot be called from inside a handler")
                    .at_rank(self.rank()),
            );
        }
        self.inner
            .world
            .barrier(&mut || self.inner.poll_all().map(|_| ()))
    }

    /// Length of this rank's segment.
    pub fn segment_len(&self) -> usize {
        self.inner.fabric().local_segment().len()
    }

    /// Copy `buf.len()` bytes from this rank's segment at `offset`.
    ///
    /// Refused for bytes a layer above reserved for itself
    /// ([`EndpointBuilder`]'s reserved handlers' ranges, e.g. PGAS's
    /// counters, barrier words and collective scratch, which its threads
    /// access with atomics).
    pub fn read_segment(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let seg = self.inner.fabric().local_segment();
        let off = self.segment_range(offset, buf.len(), seg.len())?;
        self.check_not_reserved("Endpoint::read_segment", offset, buf.len() as u64)?;
        // SAFETY: off + buf.len() <= the segment's length (checked just
        // above): an in-bounds offset.
        let from = unsafe { seg.base().add(off) };
        // SAFETY: from..from + buf.len() lies inside the local segment,
        // mapped as long as the fabric, which `self` owns; `buf` is the
        // caller's buffer, which may be a slice of that segment: memmove.
        unsafe { std::ptr::copy(from, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy `data` into this rank's segment at `offset`.
    ///
    /// Refused for bytes of a frozen range (see
    /// [`freeze_segment_range`](Self::freeze_segment_range)) and for bytes
    /// reserved by a layer above (as for
    /// [`read_segment`](Self::read_segment)).
    pub fn write_segment(&self, offset: u64, data: &[u8]) -> Result<()> {
        let seg = self.inner.fabric().local_segment();
        let off = self.segment_range(offset, data.len(), seg.len())?;
        self.check_not_reserved("Endpoint::write_segment", offset, data.len() as u64)?;
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        if let Some(r) = self.inner.frozen().find(offset, data.len() as u64) {
            let e = frozen_error("Endpoint::write_segment", offset, data.len() as u64, r);
            return Err(e.at_rank(self.rank()));
        }
        // SAFETY: off + data.len() <= the segment's length (checked just
        // above): an in-bounds offset.
        let to = unsafe { seg.base().add(off) };
        // SAFETY: to..to + data.len() lies inside the local segment, mapped
        // as long as the fabric, which `self` owns; `data` may be a slice of
        // that segment, so memmove.
        unsafe { std::ptr::copy(data.as_ptr(), to, data.len()) };
        Ok(())
    }

    /// `what` of `len` bytes at `offset` touches no range a layer above
    /// reserved for itself.
    fn check_not_reserved(&self, what: &str, offset: u64, len: u64) -> Result<()> {
        match self.inner.reserved.find(offset, len) {
            Some(r) => Err(Error::usage(format!(
                "{what} of {len} B at segment offset {offset:#x} refused: bytes {:#x}..{:#x} \
                 are reserved by splitrt for itself",
                r.start, r.end
            ))
            .at_rank(self.rank())),
            None => Ok(()),
        }
    }

    fn segment_range(&self, offset: u64, len: usize, seg_len: usize) -> Result<usize> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= seg_len as u64 => Ok(offset as usize),
            _ => Err(Error::new(ErrorKind::OutOfBounds {
                offset,
                len: len as u64,
                segment_len: seg_len as u64,
            })
            .at_rank(self.rank())),
        }
    }

    /// Exit barrier (serving traffic meanwhile), then leave the job. Dropping
    /// the last handle does the same; calling this reports errors.
    ///
    /// From the call on, no new operation can start on any handle of this
    /// endpoint, but requests that arrive while the barrier waits for the
    /// other ranks are handled and their handlers' replies go out (a rank
    /// still running may ask this one for something).
    ///
    /// A progress thread is stopped and joined first (the exit barrier
    /// then runs handlers on the calling thread); an error it ended with
    /// is returned (after the exit barrier).
    pub fn finish(self) -> Result<()> {
        let thread = progress::stop(&self.inner.progress);
        let done = self.inner.finish();
        thread.map_err(|e| e.at_rank(self.rank())).and(done)
    }

    /// Start, change or stop (`Progress::Polling`) this rank's progress
    /// thread (see [`Progress`]). A running thread is stopped and joined
    /// first; an error it had ended with is returned, and no new thread
    /// started. Every rank may choose its own mode.
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint) -> splitrt_am::Result<()> {
    /// use splitrt_am::Progress;
    /// ep.set_progress(Progress::Thread)?; // peers' requests are served while we compute
    /// // ... a long computation that never calls into splitrt ...
    /// ep.set_progress(Progress::Polling)?; // joins the thread
    /// # Ok(()) }
    /// ```
    pub fn set_progress(&self, mode: Progress) -> Result<()> {
        self.inner
            .check_live()
            .map_err(|e| e.at_rank(self.rank()))?;
        if in_handler() || progress::on_progress_thread() {
            return Err(
                Error::usage("set_progress() cannot be called from inside a handler")
                    .at_rank(self.rank()),
            );
        }
        progress::set(&self.inner, mode).map_err(|e| e.at_rank(self.rank()))
    }

    /// The progress mode in force (see [`set_progress`](Self::set_progress)).
    pub fn progress(&self) -> Progress {
        self.inner.progress.mode()
    }

    /// Start the progress mode chosen at attach time.
    fn with_progress(self, mode: Progress) -> Result<Endpoint> {
        if mode != Progress::Polling {
            progress::set(&self.inner, mode).map_err(|e| e.at_rank(self.rank()))?;
        }
        Ok(self)
    }
}
