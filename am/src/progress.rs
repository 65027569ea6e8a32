//! The progress thread: progress without polling.
//!
//! By default nothing moves unless a thread of the program polls the
//! endpoint (directly, or by waiting: `wait_until`, `sync`, a send that
//! waits for room). With a progress thread ([`Progress::Thread`] or
//! [`Progress::ThreadOnly`], chosen on the
//! [`EndpointBuilder`](crate::EndpointBuilder), by `SPLITRT_PROGRESS`, or
//! at run time by [`Endpoint::set_progress`](crate::Endpoint::set_progress)),
//! one thread per rank polls for the program: handlers run, requests are
//! answered and one-sided operations over Active Messages complete while
//! the program's threads compute.
//!
//! The thread polls while there is traffic and, when there is none,
//! backs off as a waiting rank does (spin briefly, yield, then sleep on
//! the fabric's doorbell where it has one: shm; a timed sleep of
//! `SPLITRT_SLEEP_US` otherwise), so it gives the CPU up and 8-16 ranks on
//! 2 cores still progress. A thread of the program that waits while the
//! progress thread runs does not sleep on the doorbell (the progress
//! thread takes the traffic): it sleeps on a condition variable the
//! progress thread signals after every round that ran handlers, or that
//! a peer's ring ended.
//!
//! Handler execution modes are per endpoint, not per registration: a
//! poll takes every message that has arrived on a channel in order, and
//! the Medium payloads in place in the fabric's buffers, so a thread that
//! may not run some handler could only copy its message aside (an
//! unbounded queue, or a ring that stops the channel) and would reorder
//! it after later messages of the same peer. Handlers are `Send + Sync`
//! already (any thread that polls runs them), so running them on the
//! progress thread needs nothing more of them.
//!
//! The thread holds the endpoint alive; the handles the program holds own
//! it, so dropping the last one (or `finish`) stops and joins it first.
//! Errors the thread meets surface to the program: a malformed message's
//! at the next `poll` / wait (as for errors met while sending), a failed
//! peer at every wait, a handler's panic (which fails the job, since a
//! half-run poll cannot be resumed) at the next wait and at `finish`.

use splitrt_runtime::backoff::Backoff;
use splitrt_runtime::config::Config;
use splitrt_runtime::{Error, ErrorKind, Result};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that chooses the progress mode when the
/// [`EndpointBuilder`](crate::EndpointBuilder) does not: `poll` (the
/// default), `thread` or `thread-only` (see [`Progress`]).
pub const ENV_PROGRESS: &str = "SPLITRT_PROGRESS";

/// How a rank makes progress, i.e. which threads run its handlers.
///
/// ```no_run
/// use splitrt_am::{EndpointBuilder, Progress};
/// # fn main() -> splitrt_am::Result<()> {
/// let mut b = EndpointBuilder::new();
/// b.progress(Progress::Thread);
/// let ep = b.attach()?;
/// // ... compute without polling: peers' requests are answered meanwhile ...
/// ep.finish() // joins the progress thread, then the exit barrier
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Progress {
    /// No progress thread (the default): handlers run on whichever thread
    /// polls the endpoint (`poll`, `wait_until`, a waiting send), and
    /// only then.
    #[default]
    Polling,
    /// A progress thread polls while the program computes; the program's
    /// threads still poll when they wait, so a handler runs on whichever
    /// thread polls first (inline).
    Thread,
    /// A progress thread, and handlers run only on it: the program's
    /// threads never poll (`Endpoint::poll` returns 0; waits watch the
    /// thread's progress). For handlers that must not interrupt the
    /// program's thread, at the cost of a thread switch on every wait.
    ThreadOnly,
}

impl Progress {
    /// Parse a value of [`ENV_PROGRESS`].
    ///
    /// ```
    /// use splitrt_am::Progress;
    /// assert_eq!(Progress::parse("thread").unwrap(), Progress::Thread);
    /// assert!(Progress::parse("sometimes").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Progress> {
        match s.trim() {
            "" | "poll" | "polling" | "off" => Ok(Progress::Polling),
            "thread" => Ok(Progress::Thread),
            "thread-only" => Ok(Progress::ThreadOnly),
            other => Err(Error::new(ErrorKind::Config(format!(
                "{ENV_PROGRESS}='{other}': expected poll, thread or thread-only"
            )))),
        }
    }

    /// The mode [`ENV_PROGRESS`] asks for (`Polling` when unset).
    pub fn from_env() -> Result<Progress> {
        match std::env::var(ENV_PROGRESS) {
            Ok(s) => Self::parse(&s),
            Err(_) => Ok(Progress::Polling),
        }
    }
}

thread_local! {
    static ON_PROGRESS_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is a progress thread.
#[inline]
pub(crate) fn on_progress_thread() -> bool {
    ON_PROGRESS_THREAD.with(|c| c.get())
}

/// What the progress thread needs of the endpoint (implemented by its
/// shared state; a callback up, so this module does not name it).
pub(crate) trait Driven: Send + Sync + 'static {
    /// The progress state kept in the endpoint.
    fn progress_state(&self) -> &State;
    /// Poll every channel once; the number of handlers run.
    fn poll_once(&self) -> Result<usize>;
    /// Back off once with nothing to do (on the fabric's doorbell where
    /// it has one), not sleeping once `stop()`.
    fn idle(&self, backoff: &mut Backoff, stop: &dyn Fn() -> bool);
    /// A failed peer's error, if one failed.
    fn peer_failure(&self) -> Option<Error>;
    /// Keep a non-fatal error for the program's next poll or wait.
    fn defer(&self, e: Error);
    /// Fail the job.
    fn abort(&self, why: &str);
    /// The configuration (back-off times).
    fn config(&self) -> &Config;
    /// This rank (the thread's name).
    fn rank(&self) -> usize;
}

/// A running thread.
struct Running {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<()>,
}

/// The progress state of one endpoint.
#[derive(Default)]
pub(crate) struct State {
    /// Handlers run only on the progress thread (mode `ThreadOnly`, while
    /// the thread runs).
    only: AtomicBool,
    /// A progress thread runs.
    live: AtomicBool,
    /// A handler panicked on the progress thread, part-way through a
    /// poll: nobody polls again (the fabric's cursor and the handler's
    /// state are unknown; the same message would be delivered again), so
    /// `only` stays set. The job has been aborted.
    poisoned: AtomicBool,
    /// Rounds of the thread that may have changed what waiters wait for.
    epoch: parking_lot::Mutex<u64>,
    /// Rounds of the thread that ran handlers (for hang reports: a wait
    /// whose rank's handlers run on the progress thread still progresses).
    handler_rounds: std::sync::atomic::AtomicU64,
    cv: parking_lot::Condvar,
    /// The thread's fatal error, for `stop`.
    error: parking_lot::Mutex<Option<Error>>,
    running: parking_lot::Mutex<Option<Running>>,
    mode: parking_lot::Mutex<Progress>,
    /// Held by [`set`] from stopping the old thread to recording the new
    /// one, so two threads setting the mode at once cannot both start a
    /// thread (one of them would run on, never stopped nor joined).
    setting: parking_lot::Mutex<()>,
}

impl State {
    /// Whether this thread must not poll (handlers run only on the
    /// progress thread, and this is not it). One load while no thread
    /// runs.
    #[inline]
    pub(crate) fn diverted(&self) -> bool {
        self.only.load(Ordering::Relaxed) && !on_progress_thread()
    }

    /// Whether a progress thread runs and this thread is not it (its
    /// waits then sleep on [`wait_epoch`](Self::wait_epoch)).
    #[inline]
    pub(crate) fn watching(&self) -> bool {
        self.live.load(Ordering::Acquire) && !on_progress_thread()
    }

    /// How many of the thread's rounds ran handlers so far.
    #[inline]
    pub(crate) fn handler_rounds(&self) -> u64 {
        self.handler_rounds.load(Ordering::Relaxed)
    }

    /// The mode in force.
    pub(crate) fn mode(&self) -> Progress {
        *self.mode.lock()
    }

    /// Tell waiters that the thread made a round.
    fn bump(&self) {
        let mut e = self.epoch.lock();
        *e = e.wrapping_add(1);
        self.cv.notify_all();
    }

    /// Sleep until the progress thread's next round, at most `limit`,
    /// unless `done()` (asked after the current round is noted, so a
    /// round that made it true is never missed). Returns whether a round
    /// ended the wait.
    pub(crate) fn wait_epoch(&self, limit: Duration, done: &dyn Fn() -> bool) -> bool {
        let e0 = *self.epoch.lock();
        if done() || !self.live.load(Ordering::Acquire) {
            return false;
        }
        let mut e = self.epoch.lock();
        if *e == e0 {
            let _ = self.cv.wait_for(&mut e, limit);
        }
        *e != e0
    }

    fn fail(&self, e: Error) {
        self.error.lock().get_or_insert(e);
        // nobody but the program's threads polls any more (nobody at all
        // after a panic)
        if !self.poisoned.load(Ordering::Relaxed) {
            self.only.store(false, Ordering::Relaxed);
        }
        self.live.store(false, Ordering::Release);
        self.bump();
    }
}

/// Start a progress thread in `mode` (stopping the one running first,
/// whose error is returned, if any, and the new one not started).
/// `Polling` only stops.
pub(crate) fn set<D: Driven>(d: &Arc<D>, mode: Progress) -> Result<()> {
    let st = d.progress_state();
    // not taken by `stop` alone: the thread itself may stop (a handler
    // dropped the last handle) while a setter joins it
    let _one = st.setting.lock();
    stop(st)?;
    if st.poisoned.load(Ordering::Relaxed) {
        return Err(Error::usage(
            "a handler panicked on the progress thread: no thread polls this endpoint again",
        ));
    }
    if mode == Progress::Polling {
        return Ok(());
    }
    if d.config().single_thread {
        return Err(Error::new(ErrorKind::Config(format!(
            "a progress thread ({mode:?}) calls splitrt from a thread of its own, which \
             SPLITRT_THREADS=single refuses: use SPLITRT_THREADS=multiple"
        ))));
    }
    let stop_flag = Arc::new(AtomicBool::new(false));
    let (driven, flag) = (d.clone(), stop_flag.clone());
    st.live.store(true, Ordering::Release);
    st.only
        .store(mode == Progress::ThreadOnly, Ordering::Relaxed);
    let handle = std::thread::Builder::new()
        .name(format!("splitrt-progress-{}", d.rank()))
        .spawn(move || run(driven, flag));
    let handle = match handle {
        Ok(h) => h,
        Err(e) => {
            st.only.store(false, Ordering::Relaxed);
            st.live.store(false, Ordering::Release);
            return Err(Error::io("starting the progress thread", e));
        }
    };
    *st.mode.lock() = mode;
    *st.running.lock() = Some(Running {
        stop: stop_flag,
        handle,
    });
    Ok(())
}

/// Stop and join the progress thread, if one runs; the error it ended
/// with, if any (taken: reported once). From the callers' side the
/// endpoint polls inline again. Called on the progress thread itself (a
/// handler dropped the last handle), it only asks the thread to end.
pub(crate) fn stop(st: &State) -> Result<()> {
    let run = st.running.lock().take();
    *st.mode.lock() = Progress::Polling;
    if let Some(run) = run {
        run.stop.store(true, Ordering::Release);
        if run.handle.thread().id() != std::thread::current().id() && run.handle.join().is_err() {
            st.fail(Error::usage("the progress thread panicked"));
        }
        if !st.poisoned.load(Ordering::Relaxed) {
            st.only.store(false, Ordering::Relaxed);
        }
        st.live.store(false, Ordering::Release);
        st.bump();
    }
    st.error.lock().take().map_or(Ok(()), Err)
}

/// The text of a panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// The thread: poll while there is traffic, back off (yielding the CPU)
/// while there is none, until stopped or the job fails.
fn run<D: Driven>(d: Arc<D>, stop: Arc<AtomicBool>) {
    ON_PROGRESS_THREAD.with(|c| c.set(true));
    let st = d.progress_state();
    let mut backoff = Backoff::new(d.config());
    let stopped = || stop.load(Ordering::Acquire);
    while !stopped() {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.poll_once())) {
            Ok(Ok(0)) => {}
            Ok(Ok(_)) => {
                backoff.reset();
                st.handler_rounds.fetch_add(1, Ordering::Relaxed);
                st.bump();
                continue;
            }
            Ok(Err(e)) if matches!(e.kind(), ErrorKind::PeerFailed(_)) => {
                st.fail(e);
                return;
            }
            Ok(Err(e)) => {
                d.defer(e);
                st.bump();
                // an error that comes back at every poll must not make
                // this thread spin: back off as when idle
                backoff.snooze();
                continue;
            }
            Err(p) => {
                // A poll cut short by a panic cannot be resumed (the
                // fabric's cursor and the handler's state are unknown):
                // nobody polls again, the job fails, and the program
                // hears why.
                st.only.store(true, Ordering::Relaxed);
                st.poisoned.store(true, Ordering::Relaxed);
                let why = format!(
                    "rank {}: a handler panicked on the progress thread: {}",
                    d.rank(),
                    panic_text(&*p)
                );
                d.abort(&why);
                d.defer(Error::usage(why.clone()));
                st.fail(Error::usage(why));
                return;
            }
        }
        if let Some(e) = d.peer_failure() {
            st.fail(e);
            return;
        }
        d.idle(&mut backoff, &stopped);
        if backoff.is_slow() {
            // a ring may have ended the sleep (room at a peer, a direct
            // write): waiters look again
            st.bump();
        }
    }
}
