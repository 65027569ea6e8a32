//! The doorbell bridge: how a rank waits for traffic without a thread
//! that polls, so futures sleep and any executor can wait.
//!
//! Handlers run only when someone polls the endpoint. A thread that waits
//! in [`Endpoint::wait_until`](crate::Endpoint::wait_until) polls, backs
//! off and sleeps on the fabric's doorbell itself; a future cannot, since
//! its executor decides when it runs. So while some future (or a user of
//! [`Endpoint::doorbell_fd`](crate::Endpoint::doorbell_fd)) is waiting,
//! one helper thread per rank, the bridge, sleeps on the doorbell in its
//! place ([`Wakeup::await_traffic`](splitrt_runtime::fabric::Wakeup::await_traffic): on shared memory a registered
//! sleeper on the rank's futex, so peers ring it) and when traffic may
//! have arrived it
//!
//! * wakes every [`Waker`] registered with [`Bridge::wake_on_traffic`]
//!   (the futures' tasks then poll the endpoint, which runs the handlers,
//!   which wake the futures they complete), and
//! * makes the rank's `eventfd` readable ([`Bridge::fd`]), for executors
//!   that wait on descriptors (`tokio::io::unix::AsyncFd`, `epoll`).
//!
//! Both are one-shot: each fire disarms the bridge, and a waiter re-arms
//! it (registering its waker again, or [`Bridge::arm_fd`]) before it waits
//! again. A future registers under its own [`TrafficKey`] and takes its
//! waker back when it completes or is dropped ([`Bridge::forget`]), so the
//! bridge disarms as soon as nothing waits, not at the next traffic. A
//! disarmed bridge parks on a condition variable and is no sleeper of the
//! doorbell, so the ranks' ordinary paths pay nothing for
//! it: peers' rings stay one load, and no thread runs.
//!
//! Cost while armed, on shared memory: every ring of this rank's doorbell
//! is a `FUTEX_WAKE` by the peer (as for any sleeping rank), and the
//! bridge wakes once per [`splitrt_runtime::fabric::shm::doorbell::WAIT_LIMIT`]
//! (2 ms) to look into the rings (the doorbell can lose a wake-up; see its
//! module), which fires only if it finds something (or, with
//! `SPLITRT_THREADS=single`, where it may not look, always: 500 polls a
//! second). On fabrics that cannot tell when traffic arrives (no
//! [`Wakeup`](splitrt_runtime::fabric::Wakeup) capability: RDMA) it
//! fires every [`AWAIT_TRAFFIC_BLIND`] (1 ms). A failed job fires it too, so
//! every waiter sees the error.
//!
//! Counts ([`Bridge::wake_on_traffic_since`]): a waiter that read the
//! fabric's doorbell count (where the fabric has none, pure UDP: the
//! endpoint's count of poll rounds that ran handlers) before it looked at
//! its word registers with that count, and the bridge fires once the
//! count differs from `since` (so a write the waiter's look missed is
//! seen even when it left nothing for the fabric's wait to see). `since`
//! is written only under the lock of the waker list. `register` puts the
//! waiter's count there if it holds none; if it holds the same count it
//! leaves it; if it holds a different one, the two reads of the one
//! monotonic count differ, so the count moved since the older of them,
//! and `register` guesses which is older with wrapping arithmetic
//! (`(s.wrapping_sub(h) as i32) > 0`: the caller's `s` is newer than the
//! held `h`). If the caller's count is newer, the registered waiters are
//! due: they get what a fire gives them (every registered waker woken,
//! outside the lock; the eventfd, if made, written and disarmed), the
//! caller's count goes into `since` and its waker is registered (not
//! woken). If the caller's count is older, only the caller is due: its
//! waker is woken instead of registered, and the list, the eventfd and
//! `since` are left alone. `fire` and `forget` (when it takes the last
//! waker) clear `since` in the critical section that empties the list.
//! So every waker registered with a count since the last clear was
//! registered with the very count in `since`, and it is woken no later
//! than the bridge's first look after the count differs from the one its
//! owner read; a waiter is woken by another's registration only when the
//! count really moved past its own read (no early polls: 64 waiters of
//! two counts registering interleaved cost 32 wakes, not 1056). A wrong
//! guess (the count moved 2^31 times or more between the two reads) stays
//! correct: `since` then holds a count other than the present one, and
//! the bridge fires at its next look.
//!
//! Re-entrancy: `register` (so [`Bridge::wake_on_traffic_since`]) may run
//! other tasks' wakers on the caller's thread, inside the caller's poll
//! (outside the list's lock). The common executors' wakers only queue
//! the task; a waker that polls its task inline could recurse into
//! `register` again, and must not do so without bound. (The signal
//! futures also look at their word again after registering: a write
//! after their first look is then seen at once, not at the bridge's next
//! look.) (Until session 12 the count went in before `register`
//! took the lock, and a fire or forget for another waiter in between
//! cleared it, leaving the waiter registered with no count: on pure UDP
//! it slept until the next datagram. Until the review of session 12
//! `since` kept the first registered count, not the oldest, and a waiter
//! that read an older count but registered second was not woken when
//! the count had moved past it. Until the second review `register` on a
//! different count woke every registered waiter and the caller and
//! cleared `since`, without telling the eventfd: a move seen there never
//! reached a `doorbell_fd` user, and 64 interleaved waiters cost 1056
//! wakes for one move.)

use splitrt_runtime::fabric::shm::doorbell::WAIT_LIMIT;
#[cfg(doc)]
use splitrt_runtime::fabric::AWAIT_TRAFFIC_BLIND;
use splitrt_runtime::fabric::{await_traffic_blind, Fabric};
use splitrt_runtime::{Error, Result, World};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
// The waker list's lock and the counts: loom's in the unit tests under
// `--cfg loom` (loom is a dev-dependency), so its model (`loom_model`
// below) checks the real `register`, `fire` and `forget`.
#[cfg(all(test, loom))]
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(all(test, loom))]
use loom::sync::{Condvar, Mutex};
#[cfg(not(all(test, loom)))]
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
#[cfg(not(all(test, loom)))]
use std::sync::{Condvar, Mutex};
use std::task::Waker;

/// The mark of a count in `Shared::since` (0 there: no count).
const SEEN: u64 = 1 << 32;

/// One rank's bridge (owned by the endpoint; see the module docs).
#[derive(Default)]
pub(crate) struct Bridge {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<Armed>,
    cv: Condvar,
    /// `state` holds a waker or an armed fd (read without the lock by the
    /// doorbell wait, which stops sleeping once nobody waits).
    armed: AtomicBool,
    /// The endpoint is going away: the thread ends.
    stop: AtomicBool,
    /// The doorbell count every waiter registered with a count since the
    /// last clear saw before its last look (`SEEN | count`; 0: none; a
    /// different count fires in `register`): the bridge fires once the
    /// count moved (`Bridge::wake_on_traffic_since`). Written only under
    /// `state`'s lock, with the wakers it belongs to (read without it).
    since: AtomicU64,
    /// Poll rounds of this endpoint that ran handlers, on any thread
    /// ([`Bridge::count_handled`]): the count a waiter reads before its
    /// look where the fabric has no doorbell count (pure UDP), so a
    /// handler that wrote a signal word on another thread (the progress
    /// thread) after that look still moves it and the bridge fires.
    handled: AtomicU32,
    /// The eventfd, made at the first [`Bridge::fd`].
    efd: OnceLock<OwnedFd>,
}

impl Shared {
    /// Whether the count, `now` at present, moved from the one the
    /// registered waiters saw before their look (`since`); never while no
    /// count is there.
    fn moved(&self, now: u32) -> bool {
        let s = self.since.load(Ordering::SeqCst);
        s != 0 && now != s as u32
    }
}

/// Who waits for the next fire.
#[derive(Default)]
struct Armed {
    /// Registered wakers, each with its registration's key (0: anonymous,
    /// [`Bridge::wake_on_traffic`]; else a [`TrafficKey`], at most one
    /// entry per key, removed by [`Bridge::forget`]).
    wakers: Vec<(u64, Waker)>,
    fd: bool,
    /// The last key handed out.
    keys: u64,
}

/// One waiter's registration with the bridge (a future's): at most one
/// waker per key, and [`Endpoint::forget_traffic_wake`](crate::Endpoint::forget_traffic_wake)
/// takes it back, so a future that completes or is dropped leaves no
/// waker behind to keep the bridge armed. Made by
/// [`Endpoint::traffic_key`](crate::Endpoint::traffic_key).
#[derive(Debug, PartialEq, Eq)]
pub struct TrafficKey(pub(crate) u64);

/// The world the bridge thread waits on.
struct WorldRef(*const World);
// SAFETY: `World` is `Sync` (its fabric is `Send + Sync`); the pointer is
// only read as a shared reference, within the lifetime guaranteed by
// `Bridge::wake_on_traffic`'s and `Bridge::arm_fd`'s callers.
unsafe impl Send for WorldRef {}

impl Bridge {
    /// Have `waker` woken once when traffic may have arrived for this rank
    /// (or the job failed). Registering a waker that
    /// [`will_wake`](Waker::will_wake) the same task as one already
    /// registered keeps one.
    ///
    /// # Safety
    ///
    /// `world` must stay valid (not moved, not dropped) until
    /// [`stop`](Self::stop) has returned: the bridge thread reads it. The
    /// endpoint keeps its `World` in an `Arc` and stops the bridge first
    /// thing when it is dropped.
    pub(crate) unsafe fn wake_on_traffic(&self, world: &World, waker: &Waker) -> Result<()> {
        self.register(0, waker, None);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start(world) }
    }

    /// As [`wake_on_traffic`](Self::wake_on_traffic) for the registration
    /// `key`: its waker replaces the key's earlier one (if it would wake
    /// another task), so each key holds at most one.
    ///
    /// # Safety
    ///
    /// As for [`wake_on_traffic`](Self::wake_on_traffic).
    pub(crate) unsafe fn wake_on_traffic_as(
        &self,
        world: &World,
        key: &TrafficKey,
        waker: &Waker,
    ) -> Result<()> {
        self.register(key.0, waker, None);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start(world) }
    }

    /// [`wake_on_traffic_as`](Self::wake_on_traffic_as) for a waiter
    /// that read the doorbell's count `seq` (`Wakeup::traffic_seq`) before
    /// it looked at memory peers write directly (a signal word): the
    /// bridge fires as soon as the count differs from `seq`, even if the
    /// ring came before the bridge was asleep on the doorbell (such a
    /// write leaves nothing in the rings to see). The count is recorded
    /// with the waker, under one lock; if another registered waiter read
    /// a different count, the older read is due at once: if `seq` is the
    /// newer, the registered waiters are woken (and the eventfd written)
    /// and `waker` registered; if `seq` is the older, `waker` is woken
    /// instead of registered (`register`).
    ///
    /// Re-entrancy: other tasks' wakers may be woken here, on the
    /// caller's thread, inside its poll (outside the list's lock). A
    /// waker that polls its task inline may re-enter this function; it
    /// must not recurse without bound (the common executors' wakers only
    /// queue the task).
    ///
    /// # Safety
    /// As for [`wake_on_traffic`](Self::wake_on_traffic).
    pub(crate) unsafe fn wake_on_traffic_since(
        &self,
        world: &World,
        key: &TrafficKey,
        waker: &Waker,
        seq: Option<u32>,
    ) -> Result<()> {
        self.register(key.0, waker, seq);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start(world) }
    }

    /// Count a poll round that ran handlers (see `Shared::handled`).
    pub(crate) fn count_handled(&self) {
        self.shared.handled.fetch_add(1, Ordering::SeqCst);
    }

    /// The count of poll rounds that ran handlers, for a waiter's `seq`
    /// where the fabric has no doorbell count.
    pub(crate) fn handled_seq(&self) -> u32 {
        self.shared.handled.load(Ordering::SeqCst)
    }

    /// Add `waker` under `key` (0: anonymous, kept once per task), with
    /// the count `seq` its owner read before its look, if any. The count
    /// goes into `since` under the same lock as the waker, the lock under
    /// which `fire` and `forget` clear it. If `since` holds a different
    /// count (another waiter's), the count moved since the older of the
    /// two reads; which one is older is guessed with wrapping arithmetic
    /// ([`newer`]):
    ///
    /// * the caller's count is newer: the registered waiters (and an
    ///   armed eventfd) are due, and get what [`fire`] gives them (woken
    ///   outside the lock, the eventfd written and disarmed); the
    ///   caller's count goes into `since` and its waker is registered;
    /// * the caller's count is older: only the caller is due; its waker
    ///   is woken (its task polls again) and the list, the eventfd and
    ///   `since` are left alone.
    ///
    /// So every waker registered with a count since the last clear was
    /// registered with the count in `since`, and the bridge fires once the
    /// count differs from it (see the module docs). A wrong guess (2^31
    /// moves between the two reads) stays correct: `since` then holds a
    /// count other than the present one, and the bridge fires at its next
    /// look. Other tasks' wakers may run here, on the caller's thread
    /// (see [`wake_on_traffic_since`](Self::wake_on_traffic_since)).
    fn register(&self, key: u64, waker: &Waker, seq: Option<u32>) {
        #[cfg(test)]
        tests::before_register();
        let (old, due) = {
            let mut a = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            let mut due = None;
            if let Some(s) = seq {
                let mine = SEEN | u64::from(s);
                // only written under `a`'s lock, which we hold
                let held = self.shared.since.load(Ordering::SeqCst);
                if held != 0 && held != mine {
                    if !newer(s, held as u32) {
                        drop(a);
                        // the count moved past the caller's read: its
                        // task polls again (and registers with the count
                        // it then reads)
                        waker.wake_by_ref();
                        return;
                    }
                    // the count moved past `since`: its waiters are due
                    due = Some(take_due(&mut a));
                }
                if held != mine {
                    self.shared.since.store(mine, Ordering::SeqCst);
                }
            }
            let old = match a.wakers.iter_mut().find(|(k, w)| {
                if key == 0 {
                    *k == 0 && w.will_wake(waker)
                } else {
                    *k == key
                }
            }) {
                Some((_, w)) if w.will_wake(waker) => None,
                Some((_, w)) => Some(std::mem::replace(w, waker.clone())),
                None => {
                    a.wakers.push((key, waker.clone()));
                    None
                }
            };
            self.shared.armed.store(true, Ordering::SeqCst);
            (old, due)
        };
        if let Some(due) = due {
            deliver(&self.shared, due);
        }
        // another task's waker: dropped outside the lock (its drop may
        // run arbitrary executor code)
        drop(old);
    }

    /// A fresh registration key.
    pub(crate) fn key(&self) -> TrafficKey {
        let mut a = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        a.keys += 1;
        TrafficKey(a.keys)
    }

    /// Take back `key`'s waker, if it is still registered; with nothing
    /// else waiting the bridge disarms (it leaves the doorbell within one
    /// wait and parks).
    pub(crate) fn forget(&self, key: &TrafficKey) {
        let gone = {
            let mut a = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            let gone = a
                .wakers
                .iter()
                .position(|(k, _)| *k == key.0)
                .map(|i| a.wakers.swap_remove(i));
            if a.wakers.is_empty() && !a.fd {
                self.shared.armed.store(false, Ordering::SeqCst);
                self.shared.since.store(0, Ordering::SeqCst);
            }
            gone
        };
        drop(gone);
    }

    /// How many wakers wait for the next fire (for tests).
    pub(crate) fn waiters(&self) -> usize {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .wakers
            .len()
    }

    /// Make the eventfd readable at the next fire (see
    /// [`wake_on_traffic`](Self::wake_on_traffic)).
    ///
    /// # Safety
    ///
    /// As for [`wake_on_traffic`](Self::wake_on_traffic).
    pub(crate) unsafe fn arm_fd(&self, world: &World) -> Result<()> {
        self.fd()?;
        {
            let mut a = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            a.fd = true;
            self.shared.armed.store(true, Ordering::SeqCst);
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { self.start(world) }
    }

    /// The eventfd (non-blocking, close-on-exec), made on first use.
    pub(crate) fn fd(&self) -> Result<BorrowedFd<'_>> {
        if let Some(fd) = self.shared.efd.get() {
            return Ok(fd.as_fd_borrowed());
        }
        // SAFETY: eventfd takes no pointers; a non-negative result is a new
        // descriptor this process owns, given to exactly one OwnedFd.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(Error::io(
                "creating the doorbell eventfd",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // A racing caller may have made one first: theirs is kept, ours
        // is closed when `fd` drops.
        let _ = self.shared.efd.set(fd);
        let fd = self.shared.efd.get().expect("set above or by a racer");
        Ok(fd.as_fd_borrowed())
    }

    /// Empty the eventfd (it is readable until then).
    pub(crate) fn clear_fd(&self) {
        if let Some(fd) = self.shared.efd.get() {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into `v`, a valid u64 on our stack, from
            // our own non-blocking eventfd; EAGAIN (already empty) is fine.
            let _ = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
        }
    }

    /// Start the thread if it is not running; wake it if it is parked.
    ///
    /// # Safety
    ///
    /// As for [`wake_on_traffic`](Self::wake_on_traffic).
    unsafe fn start(&self, world: &World) -> Result<()> {
        let mut t = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        // A thread that ended (it should not: wakes are caught) is started
        // again rather than leaving the waiters without a bridge.
        if t.as_ref().is_some_and(|h| h.is_finished()) && !self.shared.stop.load(Ordering::SeqCst) {
            let _ = t.take().map(std::thread::JoinHandle::join);
        }
        if t.is_none() {
            let shared = self.shared.clone();
            let w = WorldRef(world);
            let h = std::thread::Builder::new()
                .name("splitrt-bridge".into())
                .spawn(move || run(&shared, w))
                .map_err(|e| Error::io("starting the doorbell bridge thread (thread limit?)", e))?;
            *t = Some(h);
        }
        drop(t);
        self.shared.cv.notify_one();
        Ok(())
    }

    /// End the thread (bounded by one doorbell wait, 2 ms) and wait for it.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _a = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.cv.notify_all();
        }
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        match t {
            // A waker run by the bridge dropped the last endpoint handle
            // (an executor that polls inside `wake`): the thread cannot
            // join itself. It reads the world no more: after waking it
            // checks `stop` before anything else.
            Some(t) if t.thread().id() == std::thread::current().id() => {}
            Some(t) => {
                let _ = t.join();
            }
            None => {}
        }
    }
}

/// `OwnedFd::as_fd` without importing `AsFd` into every caller.
trait Borrow {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_>;
}
impl Borrow for OwnedFd {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

/// The bridge thread: park while nobody waits; else wait for traffic and
/// fire. The world is borrowed only between the `stop` check and the fire
/// (a waker may drop the endpoint: see [`Bridge::stop`]).
fn run(sh: &Shared, world: WorldRef) {
    loop {
        {
            let mut a = sh.state.lock().unwrap_or_else(|p| p.into_inner());
            while a.wakers.is_empty() && !a.fd && !sh.stop.load(Ordering::SeqCst) {
                a = sh.cv.wait(a).unwrap_or_else(|p| p.into_inner());
            }
        }
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: the callers of `Bridge::start` keep the world valid
        // until `stop` has returned, and `stop` joins this thread first;
        // the one exception, `stop` called on this thread (a waker it runs
        // dropped the endpoint), happens inside `fire`, past `w`'s last
        // use, and the loop sees `stop` before it borrows again.
        let w = unsafe { &*world.0 };
        // SAFETY: only waits for traffic; sends and writes nothing.
        let wk = unsafe { w.fabric() }.wakeup();
        // the doorbell count moved since a waiter's look (the handler
        // rounds where the fabric counts nothing)
        let moved = || {
            sh.moved(
                wk.and_then(|f| f.traffic_seq())
                    .unwrap_or_else(|| sh.handled.load(Ordering::SeqCst)),
            )
        };
        let stop = || !sh.armed.load(Ordering::SeqCst) || sh.stop.load(Ordering::SeqCst) || moved();
        let maybe = match wk {
            Some(f) => f.await_traffic(WAIT_LIMIT, &stop),
            None => await_traffic_blind(WAIT_LIMIT, &stop),
        };
        if maybe || moved() || w.peer_failed() {
            fire(sh);
        }
    }
}

/// Disarm, wake every registered waker and make the eventfd readable. A
/// waker that panics is caught (the others are still woken, and the
/// thread lives on).
fn fire(sh: &Shared) {
    let wakers = {
        let mut a = sh.state.lock().unwrap_or_else(|p| p.into_inner());
        sh.armed.store(false, Ordering::SeqCst);
        sh.since.store(0, Ordering::SeqCst);
        take_due(&mut a)
    };
    deliver(sh, wakers);
}

/// Whether count `s` is newer than count `h` (read from the one
/// monotonic, wrapping count): it is ahead by less than 2^31. Wrong only
/// if the count moved 2^31 times or more between the two reads.
fn newer(s: u32, h: u32) -> bool {
    (s.wrapping_sub(h) as i32) > 0
}

/// Under the lock of the waker list `a`: take every registered waker and
/// disarm the eventfd (a fire's share of the work inside the lock; the
/// caller sets `armed` and `since`, then calls [`deliver`]).
fn take_due(a: &mut Armed) -> Vec<(u64, Waker)> {
    a.fd = false;
    std::mem::take(&mut a.wakers)
}

/// Outside the waker list's lock: make the eventfd (if made) readable and
/// wake `wakers` (taken by [`take_due`]).
fn deliver(sh: &Shared, wakers: Vec<(u64, Waker)>) {
    if let Some(fd) = sh.efd.get() {
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one` to our own eventfd; a full
        // counter (EAGAIN) is already readable, which is all we want.
        let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }
    wake_all(wakers);
}

/// Wake `wakers` (outside the waker list's lock: a wake may run
/// arbitrary executor code), catching a waker that panics so the others
/// are still woken.
fn wake_all(wakers: Vec<(u64, Waker)>) {
    for (_, w) in wakers {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    thread_local! {
        /// What [`before_register`] runs once (set by a test).
        static HOOK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            std::cell::RefCell::new(None);
    }

    /// Test hook: `register` calls it on entry, before it takes the lock,
    /// so a test can run another waiter's fire or forget in that window.
    pub(super) fn before_register() {
        if let Some(f) = HOOK.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// Run `f` at the next `register` on this thread, before its lock.
    fn at_next_register(f: impl FnOnce() + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    struct Count(AtomicUsize, bool);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            assert!(!self.1, "a waker that panics");
        }
    }

    /// A fire survives a waker that panics and still wakes the others.
    #[test]
    fn a_waker_that_panics_does_not_end_the_fire() {
        let b = Bridge::default();
        let bad = Arc::new(Count(AtomicUsize::new(0), true));
        let good = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(0, &Waker::from(bad.clone()), None);
        b.register(0, &Waker::from(good.clone()), None);
        fire(&b.shared);
        assert_eq!(bad.0.load(Ordering::SeqCst), 1);
        assert_eq!(good.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.waiters(), 0);
    }

    /// A keyed registration holds one waker, and forgetting the last one
    /// disarms the bridge (a completed future keeps it armed no longer).
    #[test]
    fn forgetting_the_last_key_disarms() {
        let b = Bridge::default();
        let (k1, k2) = (b.key(), b.key());
        assert_ne!(k1, k2);
        let c = Arc::new(Count(AtomicUsize::new(0), false));
        let d = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(k1.0, &Waker::from(c.clone()), None);
        b.register(k1.0, &Waker::from(d.clone()), None);
        b.register(k2.0, &Waker::from(c.clone()), None);
        assert_eq!(b.waiters(), 2, "one per key");
        assert_eq!(Arc::strong_count(&c), 2, "k1's waker of c was replaced");
        b.forget(&k1);
        assert!(b.shared.armed.load(Ordering::SeqCst), "k2 still waits");
        b.forget(&k2);
        assert!(!b.shared.armed.load(Ordering::SeqCst), "nobody waits");
        assert_eq!(b.waiters(), 0);
        assert_eq!(Arc::strong_count(&c), 1);
    }

    /// The lost wake-up of two racing waiters: B read its count 5 and
    /// registers while the bridge fires for A (registered with 3). B's
    /// waker stays, so its count must stay with it: once the handler
    /// round count moves past 5 (a signal handler that ran on another
    /// thread after B's look) the bridge must fire for B.
    #[test]
    fn a_fire_for_another_waiter_keeps_a_registering_waiters_count() {
        let b = Bridge::default();
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(3));
        let sh = b.shared.clone();
        // the bridge saw the count move past 3 and fires A (B's count
        // already read, B's waker not yet in)
        at_next_register(move || fire(&sh));
        b.register(kb.0, &Waker::from(wb.clone()), Some(5));
        assert_eq!(wa.0.load(Ordering::SeqCst), 1, "A fired");
        assert_eq!(b.waiters(), 1, "B registered after the fire");
        assert!(b.shared.moved(6), "B's count kept: a move past 5 fires B");
        assert!(!b.shared.moved(5), "no move since B's look");
        fire(&b.shared);
        assert_eq!(wb.0.load(Ordering::SeqCst), 1);
    }

    /// As above with a forget: A (registered without a count) completes
    /// and takes its waker back while B, whose count went in first,
    /// registers; B's count must survive A's disarming.
    #[test]
    fn a_forget_of_another_waiter_keeps_a_registering_waiters_count() {
        let b = Arc::new(Bridge::default());
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), None);
        let b2 = b.clone();
        at_next_register(move || b2.forget(&ka));
        b.register(kb.0, &Waker::from(wb.clone()), Some(7));
        assert_eq!(b.waiters(), 1, "only B waits");
        assert!(b.shared.armed.load(Ordering::SeqCst), "B keeps it armed");
        assert!(b.shared.moved(8), "B's count kept: a move past 7 fires B");
        assert_eq!(wa.0.load(Ordering::SeqCst), 0);
    }

    /// Counts read in the other order from the registrations: B read 5, a
    /// handler round moved the count to 6, A read 6 and registered first,
    /// then B with 5. `since` cannot hold both; the count has moved past
    /// B's 5, so B must be woken at once (before the first review's fix
    /// `since` kept A's 6 and nothing ever fired for B). A, whose 6 is
    /// the newer count, stays registered under it and is not woken (until
    /// the second review A was woken too: one early poll).
    #[test]
    fn an_older_count_registered_second_is_woken_at_once() {
        let b = Bridge::default();
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(6));
        b.register(kb.0, &Waker::from(wb.clone()), Some(5));
        assert_eq!(
            wb.0.load(Ordering::SeqCst),
            1,
            "B's count 5 is behind: woken at once"
        );
        assert_eq!(
            wa.0.load(Ordering::SeqCst),
            0,
            "A's 6 is current: not woken"
        );
        // every waiter registered with a count holds the count in `since`
        assert_eq!(b.waiters(), 1, "A still waits, B is not registered");
        assert_eq!(b.shared.since.load(Ordering::SeqCst), SEEN | 6);
        assert!(!b.shared.moved(6) && b.shared.moved(7));
    }

    /// The other order: A registered with 5, B reads 6 and registers. The
    /// count moved past A's 5, so A is woken (here, not only at the
    /// bridge's next look); B registers under its 6 and is not woken
    /// (until the second review B was woken too and had to register
    /// again), and not until the count moves past 6.
    #[test]
    fn a_newer_count_fires_the_older_waiters_once() {
        let b = Bridge::default();
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(5));
        b.register(kb.0, &Waker::from(wb.clone()), Some(6));
        assert_eq!(wa.0.load(Ordering::SeqCst), 1, "the count moved past A's 5");
        assert_eq!(
            wb.0.load(Ordering::SeqCst),
            0,
            "B's 6 is current: not woken"
        );
        assert_eq!(b.waiters(), 1, "B waits, A was taken off");
        b.register(kb.0, &Waker::from(wb.clone()), Some(6));
        assert_eq!(
            wb.0.load(Ordering::SeqCst),
            0,
            "B waits under its own count"
        );
        assert_eq!(b.waiters(), 1);
        assert!(!b.shared.moved(6) && b.shared.moved(7));
    }

    /// The counts are compared with wrapping arithmetic: 0 read after
    /// `u32::MAX` is the newer one.
    #[test]
    fn a_count_past_the_wrap_is_newer() {
        let b = Bridge::default();
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(u32::MAX));
        b.register(kb.0, &Waker::from(wb.clone()), Some(0));
        assert_eq!(wa.0.load(Ordering::SeqCst), 1, "MAX is behind 0");
        assert_eq!(wb.0.load(Ordering::SeqCst), 0);
        assert_eq!(b.shared.since.load(Ordering::SeqCst), SEEN);
    }

    /// A count move noticed by `register` reaches the eventfd user: fd
    /// armed, A registers with 5, an unseen ring moves the count to 6, B
    /// registers with 6. The eventfd must be readable (before the second
    /// review `register` woke A and B and cleared `since`, B registered
    /// 6 again, the bridge saw no move and never wrote the fd).
    #[test]
    #[cfg_attr(miri, ignore = "eventfd is a system call Miri does not run")]
    fn a_count_move_seen_in_register_reaches_the_fd() {
        let b = Bridge::default();
        let fd = b.fd().unwrap().as_raw_fd();
        {
            let mut a = b.shared.state.lock().unwrap();
            a.fd = true;
            b.shared.armed.store(true, Ordering::SeqCst);
        }
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(5));
        b.register(kb.0, &Waker::from(wb.clone()), Some(6));
        // re-registering under the new count (as before the fix) changes
        // nothing
        b.register(kb.0, &Waker::from(wb.clone()), Some(6));
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`, a u64 on our stack, from the
        // bridge's own non-blocking eventfd (EAGAIN if not readable).
        let n = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
        assert_eq!(n, 8, "the fd user was not told of the count move");
        assert!(v >= 1);
        assert!(!b.shared.state.lock().unwrap().fd, "the fd was disarmed");
        assert_eq!(wa.0.load(Ordering::SeqCst), 1);
    }

    /// Cost: 64 waiters, 32 that read 6 and 32 that read 5 (before the
    /// count moved), registering interleaved; a woken waiter polls again
    /// and registers with the count it then reads (6) before the next
    /// one registers. One count move must cost a bounded number of wakes
    /// (here at most one per waiter plus one per older read): before the
    /// second review each 5 woke every registered waiter, 1056 wakes.
    #[test]
    fn interleaved_counts_do_not_storm() {
        let b = Bridge::default();
        let waiters: Vec<_> = (0..64)
            .map(|_| (b.key(), Arc::new(Count(AtomicUsize::new(0), false))))
            .collect();
        // wakes each waiter has answered by registering again
        let mut seen = [0usize; 64];
        for (i, (k, c)) in waiters.iter().enumerate() {
            let first = if i % 2 == 0 { 6 } else { 5 };
            b.register(k.0, &Waker::from(c.clone()), Some(first));
            // the woken poll again (nothing found) and register with 6;
            // bounded: at most 64 rounds of at most 64 registrations
            for _ in 0..64 {
                let mut again = false;
                for (j, (k, c)) in waiters.iter().enumerate() {
                    let n = c.0.load(Ordering::SeqCst);
                    if n != seen[j] {
                        seen[j] = n;
                        again = true;
                        b.register(k.0, &Waker::from(c.clone()), Some(6));
                    }
                }
                if !again {
                    break;
                }
            }
        }
        let wakes: usize = waiters
            .iter()
            .map(|(_, c)| c.0.load(Ordering::SeqCst))
            .sum();
        assert!(wakes <= 64 + 32, "{wakes} wakes for one count move");
        assert_eq!(b.waiters(), 64, "all wait under the count 6");
        assert!(!b.shared.moved(6) && b.shared.moved(7));
    }

    /// Waiters that read the same count share it: none is woken early.
    #[test]
    fn the_same_count_wakes_nobody() {
        let b = Bridge::default();
        let (ka, kb) = (b.key(), b.key());
        let wa = Arc::new(Count(AtomicUsize::new(0), false));
        let wb = Arc::new(Count(AtomicUsize::new(0), false));
        b.register(ka.0, &Waker::from(wa.clone()), Some(9));
        b.register(kb.0, &Waker::from(wb.clone()), Some(9));
        b.register(0, &Waker::from(wb.clone()), None);
        assert_eq!(wa.0.load(Ordering::SeqCst) + wb.0.load(Ordering::SeqCst), 0);
        assert_eq!(b.waiters(), 3);
        assert!(!b.shared.moved(9) && b.shared.moved(10));
    }
}

/// The loom model of the count protocol (`RUSTFLAGS="--cfg loom" cargo
/// test -p splitrt-am --release --lib loom`): the real `register`,
/// `fire` and `forget` over loom's lock and atomics.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;

    /// A waker that does nothing (the model checks the bridge's state).
    struct Nop;
    impl std::task::Wake for Nop {
        fn wake(self: Arc<Self>) {}
    }

    /// Waiter B registers with its count 5 while another thread fires
    /// for waiter A (registered with 3) or takes A's waker back; in
    /// every interleaving, if B's waker is registered afterwards, a
    /// count is in `since` (B's: A's 3, had it stayed, would have fired
    /// B in `register`), so a move of the count past 5 fires B.
    fn b_races(other: fn(&Bridge, &TrafficKey), a_seq: Option<u32>) {
        loom::model(move || {
            let b = Arc::new(Bridge::default());
            let (ka, kb) = (b.key(), b.key());
            let w = Waker::from(Arc::new(Nop));
            b.register(ka.0, &w, a_seq);
            let b2 = b.clone();
            let t = loom::thread::spawn(move || other(&b2, &ka));
            b.register(kb.0, &w, Some(5));
            t.join().unwrap();
            let b_waits = b
                .shared
                .state
                .lock()
                .unwrap()
                .wakers
                .iter()
                .any(|(k, _)| *k == kb.0);
            if b_waits {
                assert!(
                    b.shared.moved(6),
                    "B waits with no count: its wake-up is lost"
                );
            }
        });
    }

    #[test]
    fn loom_a_fire_for_another_waiter_keeps_the_count() {
        b_races(|b, _| fire(&b.shared), Some(3));
    }

    #[test]
    fn loom_a_forget_of_another_waiter_keeps_the_count() {
        b_races(|b, k| b.forget(k), None);
        b_races(|b, k| b.forget(k), Some(3));
    }

    /// A waker that counts its wakes (loom's atomic: the model sees it).
    struct Woken(loom::sync::atomic::AtomicUsize);
    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts read in the other order from the registrations: B read 5,
    /// the count moved, A read 6; A (on another thread) and B register in
    /// either order, while a third party fires for an earlier waiter C
    /// (registered with 5) if `fire_c`. In every interleaving B is woken,
    /// or B's waker is registered and `moved(6)` holds (the bridge fires
    /// B at its next look); and every key still registered with a count
    /// holds exactly that count in `since` (a newer count in `since`
    /// would leave it unfired while the count stays there; an older one
    /// is not left by `register`'s rule). Before `register` fired on a
    /// different count this failed: A first left `since` at 6 with B
    /// registered under it.
    fn counts_out_of_order(fire_c: bool) {
        loom::model(move || {
            let b = Arc::new(Bridge::default());
            let (ka, kb, kc) = (b.key(), b.key(), b.key());
            // each key's registered count
            let counts = [(ka.0, 6u32), (kb.0, 5), (kc.0, 5)];
            let nop = Waker::from(Arc::new(Nop));
            if fire_c {
                b.register(kc.0, &nop, Some(5));
            }
            let b2 = b.clone();
            let a = loom::thread::spawn(move || {
                b2.register(ka.0, &Waker::from(Arc::new(Nop)), Some(6));
            });
            let c = fire_c.then(|| {
                let b3 = b.clone();
                loom::thread::spawn(move || fire(&b3.shared))
            });
            let wb = Arc::new(Woken(loom::sync::atomic::AtomicUsize::new(0)));
            b.register(kb.0, &Waker::from(wb.clone()), Some(5));
            a.join().unwrap();
            if let Some(c) = c {
                c.join().unwrap();
            }
            let a_ = b.shared.state.lock().unwrap();
            let b_waits = a_.wakers.iter().any(|(k, _)| *k == kb.0);
            let since = b.shared.since.load(Ordering::SeqCst);
            for (k, _) in &a_.wakers {
                let (_, c) = counts.iter().find(|(key, _)| key == k).unwrap();
                assert_eq!(
                    since,
                    SEEN | u64::from(*c),
                    "a waiter registered with {c} is not covered by since {since:#x}"
                );
            }
            drop(a_);
            let woken = wb.0.load(Ordering::SeqCst) > 0;
            assert!(
                woken || (b_waits && b.shared.moved(6)),
                "B (count 5) neither woken nor fired by a move to 6: its wake-up is lost"
            );
        });
    }

    #[test]
    fn loom_an_older_count_registered_second_is_not_lost() {
        counts_out_of_order(false);
    }

    #[test]
    fn loom_an_older_count_registered_second_is_not_lost_across_a_fire() {
        counts_out_of_order(true);
    }
}
