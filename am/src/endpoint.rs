//! The endpoint: a rank's handler table plus its fabric connection to every
//! peer, the send paths and progress (poll / wait_until).

use crate::dispatch::{dispatch, in_handler};
use crate::handler::{
    Entry, Func, Kind, ReplyHandler, RequestHandler, Sig, Table, RESERVED_HANDLERS,
};
use crate::message::{Incoming, Payload};
use crate::rma::Rma;
use crate::token::Token;
use splitrt_runtime::backoff::Backoff;
use splitrt_runtime::config::Config;
use splitrt_runtime::fabric::udp::proto::Stats as UdpStats;
use splitrt_runtime::fabric::{AnyFabric, Channel, Fabric, Packet};
use splitrt_runtime::hang::{abort_error, HangWatch};
use splitrt_runtime::job::JobInfo;
use splitrt_runtime::{Error, ErrorKind, Result, World};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Collects handler registrations, then [`attach`](Self::attach)es to the job.
#[derive(Default)]
pub struct EndpointBuilder {
    table: Table,
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
    #[doc(hidden)]
    pub fn reserved_request<F>(
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
    #[doc(hidden)]
    pub fn reserved_reply<F>(
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
        let world = World::start(self.table.describe())?;
        Ok(Self::finish_attach(self.table, world, _once))
    }

    /// [`attach`](Self::attach) with an explicit job and configuration.
    pub fn attach_with(self, job: JobInfo, config: Config) -> Result<Endpoint> {
        let _once = AttachOnce::claim()?;
        let world = World::start_with(job, config, self.table.describe())?;
        Ok(Self::finish_attach(self.table, world, _once))
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
        let world = World::start_over_verbs_model(job, config, self.table.describe(), dev)?;
        let once = AttachOnce;
        let ep = Self::finish_attach(self.table, world, once);
        Ok(ep)
    }

    fn finish_attach(table: Table, world: World, once: AttachOnce) -> Endpoint {
        std::mem::forget(once); // the process stays attached
        Endpoint {
            inner: Arc::new(Inner {
                rank: world.job().rank,
                size: world.job().size,
                table_id: table.id,
                reserved: ReservedRanges::default(),
                table: table.entries,
                world,
                finished: AtomicBool::new(false),
                deferred: parking_lot::Mutex::new(None),
                has_deferred: AtomicBool::new(false),
                skipped_requests: AtomicBool::new(false),
                large_sends: AtomicU32::new(0),
            }),
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
    finished: AtomicBool,
    /// A non-fatal error met while a send waited (see `progress_while_sending`).
    deferred: parking_lot::Mutex<Option<Error>>,
    has_deferred: AtomicBool,
    /// The last `poll_all` found replies and returned before polling
    /// requests (so the next one polls both).
    skipped_requests: AtomicBool,
    /// Requests of at least [`POLL_AFTER_BYTES`] sent (wrapping).
    large_sends: AtomicU32,
}

/// A rank's Active Messages endpoint. Cheap to clone, `Send + Sync`: any
/// thread may send; whichever thread polls drives progress (one at a time,
/// others return at once).
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<Inner>,
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
        self.world.fabric()
    }

    /// The fabric, for [`Rma`](crate::Rma).
    pub(crate) fn fabric_ref(&self) -> &AnyFabric {
        self.world.fabric()
    }

    fn name(&self, id: u16) -> &str {
        self.table
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or("?", |e| e.name.as_str())
    }

    fn packet<'a>(sig: &Sig, args: &'a [u64], payload: &Payload<'a>) -> Packet<'a> {
        let (payload, deposit) = match *payload {
            Payload::None => (&[][..], None),
            Payload::Medium(d) => (d, None),
            Payload::Long { data, offset } => (data, Some(offset)),
        };
        Packet {
            tag: sig.id,
            words: args,
            payload,
            deposit,
        }
    }

    pub(crate) fn poll_channel(&self, ch: Channel) -> Result<usize> {
        let mut err = None;
        let n = self.fabric().poll(ch, &mut |d| {
            if let Err(e) = dispatch(self, ch, d) {
                err.get_or_insert(e);
            }
        })?;
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
    #[inline]
    fn check_send(
        &self,
        peer: usize,
        sig: &Sig,
        args: &[u64],
        payload: &Payload<'_>,
    ) -> Result<()> {
        if sig.table != self.table_id
            || peer >= self.size
            || args.len() != sig.nargs as usize
            || Kind::of(payload) != sig.kind
            || self.finished.load(Ordering::Relaxed)
        {
            return self.send_refused(peer, sig, args, payload);
        }
        if let Payload::Long { data, offset } = payload {
            if sig.id >= RESERVED_HANDLERS && self.reserved.overlaps(*offset, data.len() as u64) {
                return self.send_refused(peer, sig, args, payload);
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
    ) -> Result<()> {
        if sig.table != self.table_id {
            return Err(Error::usage(format!(
                "handler handle #{} comes from another EndpointBuilder, not the one this \
                 endpoint was attached with",
                sig.id
            )));
        }
        self.check_live()?;
        self.check_peer(peer)?;
        sig.check(|| self.name(sig.id), args, payload)?;
        if let Payload::Long { data, offset } = payload {
            if sig.id >= RESERVED_HANDLERS {
                self.check_user_deposit(*offset, data.len() as u64)?;
            }
        }
        Ok(())
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
    /// [`Fabric::idle_wait`]).
    fn snooze_unless(&self, backoff: &mut Backoff, done: &dyn Fn() -> bool) {
        let sleep = backoff.sleep_time();
        backoff.snooze_with(&|| self.fabric().idle_wait(sleep, done));
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

    pub(crate) fn send_request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
        block: bool,
    ) -> Result<bool> {
        let at = |e: Error| e.at_rank(self.rank).with_peer(peer);
        if in_handler() {
            return Err(at(Error::usage(
                "a request cannot be sent from inside a handler (reply through the token)",
            )));
        }
        self.check_send(peer, &h.0, args, &payload).map_err(at)?;
        let pkt = Self::packet(&h.0, args, &payload);
        // the waiting state is made only if the first try must wait
        let mut stall_backoff = None;
        let mut stall = |waits: u32| {
            let b = stall_backoff.get_or_insert_with(|| Backoff::new(self.world.config()));
            self.stall(waits, Channel::Request, b)
        };
        let mut wait: Option<(Backoff, HangWatch)> = None;
        loop {
            if self
                .fabric()
                .try_send(peer, Channel::Request, &pkt, &mut stall)?
            {
                if pkt.payload.len() >= POLL_AFTER_BYTES {
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
                return Ok(true);
            }
            if !block {
                return Ok(false);
            }
            // Out of credits: serve our own inbound traffic while we wait.
            let (backoff, watch) = wait.get_or_insert_with(|| {
                let c = self.world.config();
                (Backoff::new(c), HangWatch::new(c))
            });
            if self.progress_while_sending(Channel::Request)? == 0 {
                self.check_failure()?;
                if backoff.is_slow() && watch.due() {
                    let what = format!(
                        "sending request '{}' to rank {peer}, which has no room for it",
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
        self.check_send(peer, &h.0, args, &payload).map_err(at)?;
        let pkt = Self::packet(&h.0, args, &payload);
        // Waiting for reply room drains only replies: their handlers cannot
        // send, so this never recurses into another request handler.
        let mut stall_backoff = None;
        let mut stall = |waits: u32| {
            let b = stall_backoff.get_or_insert_with(|| Backoff::new(self.world.config()));
            self.stall(waits, Channel::Reply, b)
        };
        let mut wait: Option<(Backoff, HangWatch)> = None;
        while !self
            .fabric()
            .try_send(peer, Channel::Reply, &pkt, &mut stall)?
        {
            let (backoff, watch) = wait.get_or_insert_with(|| {
                let c = self.world.config();
                (Backoff::new(c), HangWatch::new(c))
            });
            if self.progress_while_sending(Channel::Reply)? == 0 {
                self.check_failure()?;
                if backoff.is_slow() && watch.due() {
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

    fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.world.finish(&mut || self.poll_all().map(|_| ()))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
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

    /// One-sided access to the job's segments for layers built on top
    /// (the PGAS layer): checked writes and reads, raw segment ranges.
    pub fn rma(&self) -> Rma<'_> {
        Rma { inner: &self.inner }
    }

    /// Counters of the UDP fabric, if this rank uses one (for reports).
    pub fn udp_stats(&self) -> Option<UdpStats> {
        self.inner.world.fabric().udp().map(|u| u.stats())
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
        self.inner.world.fabric()
    }

    /// Send a request, waiting (and serving inbound traffic) while `peer`
    /// has no room. The payload variant must match the handler's kind and
    /// `args` its argument count; a Long offset must lie in `peer`'s segment.
    pub fn request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
    ) -> Result<()> {
        self.inner
            .send_request(peer, h, args, payload, true)
            .map(|_| ())
    }

    /// Send a request if `peer` has room now. `Ok(false)`: back-pressure,
    /// nothing was sent; poll and try again.
    #[must_use = "Ok(false) means the request was not sent"]
    pub fn try_request(
        &self,
        peer: usize,
        h: RequestHandler,
        args: &[u64],
        payload: Payload<'_>,
    ) -> Result<bool> {
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
        let mut watch = HangWatch::new(self.config()).patient(extra);
        loop {
            if cond() {
                return Ok(());
            }
            if self.inner.poll_all()? > 0 {
                backoff.reset();
                watch.progress();
                continue;
            }
            self.inner.check_failure()?;
            self.inner.take_deferred()?;
            if backoff.is_slow() && watch.due() {
                self.inner.hang(&mut watch, &what())?;
            }
            self.inner.snooze_unless(&mut backoff, &cond);
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
    pub fn read_segment(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let seg = self.inner.fabric().local_segment();
        let off = self.segment_range(offset, buf.len(), seg.len())?;
        // SAFETY: the range was checked to lie inside the local segment,
        // mapped as long as the fabric, which `self` owns.
        unsafe { std::ptr::copy(seg.base().add(off), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy `data` into this rank's segment at `offset`.
    pub fn write_segment(&self, offset: u64, data: &[u8]) -> Result<()> {
        let seg = self.inner.fabric().local_segment();
        let off = self.segment_range(offset, data.len(), seg.len())?;
        // SAFETY: the range was checked to lie inside the local segment,
        // mapped as long as the fabric, which `self` owns; `data` may be a
        // slice of that segment (a Long payload), so memmove.
        unsafe { std::ptr::copy(data.as_ptr(), seg.base().add(off), data.len()) };
        Ok(())
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
    pub fn finish(self) -> Result<()> {
        self.inner.finish()
    }
}
