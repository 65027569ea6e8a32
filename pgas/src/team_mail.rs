//! The mailbox of team collectives: every step of a team collective is an
//! Active Message (a Medium, cut into chunks of at most the fabric's Medium
//! size) from one member to another, tagged with the team, the
//! collective's number on that team and the step, and carrying what the
//! sender called (collective, op, root, length, element size) so that the
//! receiver can name a mismatch. The reserved handler only files what
//! arrives here; the member waiting for it takes it out
//! ([`crate::team`]). It works on every fabric and both RMA paths (it
//! needs no segment), and a member may run ahead of the others: what it
//! sends waits here until they get there.
//!
//! Bounded: at most [`MAX_BYTES`] buffered bytes and [`MAX_ENTRIES`]
//! messages per rank. A peer's message that does not fit, or whose chunks
//! do not add up, is recorded as a failure of its team, never a panic:
//! that team is unusable on this rank from then on (every wait on it
//! returns an error naming the cause), its buffered messages are
//! reclaimed and later ones discarded; other teams go on. (A message too
//! short to name its team fails every team.)
//!
//! Reclaimed too: the messages of a collective this rank abandoned (a
//! non-blocking request whose schedule ended in an error), present and
//! arriving later. A request dropped before completion is not abandoned:
//! its schedule finishes in the background ([`Background`], advanced by
//! [`Mailbox::sweep`]), taking its messages as they come.

use parking_lot::Mutex;
use splitrt_am::{EndpointBuilder, Incoming, Kind, RequestHandler, Result, Token};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;

/// Reserved handler id of the team message (high in the reserved range,
/// clear of the ids the other PGAS handlers take from 0 up).
const TEAM_HANDLER_ID: u16 = 40;
/// Argument words of a team message.
pub(crate) const NARGS: usize = 10;
/// Bytes buffered at most (messages that arrived before their receiver
/// asked for them, and chunks of messages in progress).
pub(crate) const MAX_BYTES: usize = 1 << 30;
/// Messages buffered at most.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;
/// Teams whose failure is remembered (their messages discarded); past
/// this, a failure fails every team.
const MAX_FAILED_TEAMS: usize = 1024;
/// Abandoned collectives remembered (their late messages discarded);
/// past this the oldest is forgotten (its late messages, if any, are
/// filed and count against the bounds as any others).
const MAX_ABANDONED: usize = 4096;

/// Collectives remembered as touched between two sweeps (past this, the
/// next sweep advances every pending schedule).
const MAX_TOUCHED: usize = 4096;

/// A pending schedule's collective (team id, collective number) and work.
type Scheduled = ((u64, u64), Arc<dyn Background>);

/// The pending schedules: by start number, with their collective.
#[derive(Default)]
struct Pending {
    list: std::collections::BTreeMap<u64, Scheduled>,
    by_coll: HashMap<(u64, u64), u64>,
    /// Added since the last sweep (not advanced yet).
    fresh: Vec<u64>,
    next: u64,
}

/// Work on the team messages that progresses in the background: a
/// pending non-blocking collective's schedule (`team_sched.rs`).
pub(crate) trait Background: Send + Sync {
    /// Advance as far as the messages in allow, without blocking: true
    /// once finished (it is then dropped from the sweep).
    fn advance(&self) -> bool;
}

/// What a member called: every message carries its sender's, and the
/// receiver compares it with its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The collective (a [`CollKind`] code).
    pub kind: u64,
    /// The reduction operator's code (0: none).
    pub op: u64,
    /// The root's team rank (`u64::MAX`: none).
    pub root: u64,
    /// The element count that must agree (its meaning depends on `kind`).
    pub count: u64,
    /// Bytes of one element.
    pub esize: u64,
}

/// Team collectives, as carried in a [`Header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CollKind {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    Allreduce = 4,
    Gather = 5,
    Allgather = 6,
    Alltoall = 7,
    ReduceScatter = 8,
    ScanInclusive = 9,
    ScanExclusive = 10,
    Split = 11,
    Alltoallv = 12,
    ShmSetup = 13,
}

impl CollKind {
    const ALL: [CollKind; 13] = [
        CollKind::Barrier,
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Gather,
        CollKind::Allgather,
        CollKind::Alltoall,
        CollKind::ReduceScatter,
        CollKind::ScanInclusive,
        CollKind::ScanExclusive,
        CollKind::Split,
        CollKind::Alltoallv,
        CollKind::ShmSetup,
    ];

    /// The kind of code `c`, if any.
    pub(crate) fn from_code(c: u64) -> Option<CollKind> {
        Self::ALL.into_iter().find(|k| *k as u64 == c)
    }

    /// The user-facing name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CollKind::Barrier => "Team::barrier",
            CollKind::Broadcast => "Team::broadcast",
            CollKind::Reduce => "Team::reduce",
            CollKind::Allreduce => "Team::allreduce",
            CollKind::Gather => "Team::gather",
            CollKind::Allgather => "Team::allgather",
            CollKind::Alltoall => "Team::alltoall",
            CollKind::ReduceScatter => "Team::reduce_scatter",
            CollKind::ScanInclusive => "Team::scan_inclusive",
            CollKind::ScanExclusive => "Team::scan_exclusive",
            CollKind::Split => "a team split",
            CollKind::Alltoallv => "Team::alltoallv",
            CollKind::ShmSetup => "a team's shared-memory set-up (its first collective)",
        }
    }
}

impl Header {
    /// A readable account of the call, for mismatch errors.
    pub(crate) fn describe(&self, op_name: &dyn Fn(u64) -> String) -> String {
        let kind = CollKind::from_code(self.kind).map_or("an unknown collective", CollKind::name);
        let mut s = format!("{kind}(");
        let mut parts = Vec::new();
        if self.root != u64::MAX {
            parts.push(format!("root {}", self.root));
        }
        parts.push(format!("count {}", self.count));
        if self.op != 0 {
            parts.push(format!("op {}", op_name(self.op)));
        }
        parts.push(format!("{} B elements", self.esize));
        s.push_str(&parts.join(", "));
        s.push(')');
        s
    }
}

/// Which message: team, collective number on the team, step, sender's
/// world rank.
pub(crate) type Key = (u64, u64, u64, usize);

/// One message (complete or still arriving).
struct Entry {
    hdr: Header,
    buf: Vec<u8>,
    got: usize,
}

impl Entry {
    fn complete(&self) -> bool {
        self.got == self.buf.len()
    }
}

/// Counters of one team handle and its clones (on this rank).
#[derive(Debug, Default)]
pub(crate) struct TeamCounters {
    /// Collectives called on the team so far (the next one's number - 1).
    pub seq: AtomicU64,
    /// Splits of the team so far (child team ids derive from it).
    pub splits: AtomicU64,
    /// The team's shared-memory area, once set up (`team_shm.rs`).
    pub shm: crate::team_area::AreaSlot,
    /// The team's host groups, once set up (`team_hier.rs`).
    pub hier: crate::team_hosts::HierSlot,
    /// A collective number the hierarchical set-up took for a collective
    /// that then goes by messages (0: none): the next `next_seq` returns it.
    pub held_seq: AtomicU64,
    /// Team messages (chunks) sent to members whose segment is not mapped
    /// here (`Team::off_host_messages`).
    pub off_host: AtomicU64,
}

impl TeamCounters {
    /// The team's last handle here is going: drop its area and host
    /// groups now and mark them dropped in this member's blocks
    /// ([`Retired::reclaim`](crate::team_area::Retired::reclaim), which
    /// also gives `free` every retired block all members dropped), so
    /// host-mates can free theirs without this member setting up another
    /// team. An area still held elsewhere is retired when that goes and
    /// marked at a later look (a request's schedule, which holds a handle
    /// too, drops its area before its handle: `Sched.mates`). Call only
    /// while the segments are mapped (`Drop for Team`).
    pub(crate) fn drop_areas(&mut self, reg: &crate::team_area::Retired, free: impl FnMut(u64)) {
        let shm = self.shm.take().flatten();
        let hier = self.hier.take().flatten();
        if shm.is_none() && hier.is_none() {
            return;
        }
        // the team's own Arcs: the last ones retire the blocks (Drop for
        // TeamArea), which the look below marks
        drop((shm, hier));
        reg.reclaim(free);
    }
}

/// A rank's buffered team messages (see the module docs).
pub(crate) struct Mailbox {
    entries: Mutex<Inbox>,
    /// Collectives with messages buffered in `entries` (its `colls`
    /// count, read without the lock: [`mismatch`](Self::mismatch) of a
    /// rank with none buffered is one load).
    colls_held: Arc<AtomicUsize>,
    /// Something arrived (for waiters that re-check only after a change).
    pub arrivals: AtomicU64,
    /// A peer sent what cannot be filed and names no team: why (every
    /// team's waits report it).
    failure: Mutex<Option<String>>,
    /// Some failure (of a team or of all) was recorded.
    has_failure: AtomicBool,
    /// Failed teams and abandoned collectives (see the module docs).
    gone: Mutex<Gone>,
    /// `gone` is not empty.
    any_gone: AtomicBool,
    /// The first failure of any kind (for tests).
    first: Mutex<Option<String>>,
    /// Pending schedules (see [`Mailbox::sweep`]).
    background: Mutex<Pending>,
    /// Collectives a message arrived for since the last sweep (at most
    /// [`MAX_TOUCHED`]; past that, `touched_all`).
    touched: Mutex<Vec<(u64, u64)>>,
    /// Every pending schedule is to be advanced at the next sweep.
    touched_all: AtomicBool,
    /// `background`'s length.
    bg_len: AtomicUsize,
    /// `arrivals` when the last sweep began.
    swept_at: AtomicU64,
    /// Dropped requests whose schedules are still pending.
    pub orphans: AtomicUsize,
    /// The world team's counters (every handle of it shares them).
    pub world: Arc<TeamCounters>,
    /// Tasks awaiting a non-blocking team collective, by request id: all
    /// woken (and forgotten) when a message is filed; one entry per
    /// pending request, which re-registers when polled again.
    wakers: Mutex<HashMap<u64, Waker>>,
    /// The next request id.
    next_waiter: AtomicU64,
    /// The byte bound (`MAX_BYTES`; smaller in unit tests).
    max_bytes: usize,
}

impl Default for Mailbox {
    fn default() -> Self {
        let inbox = Inbox::default();
        Mailbox {
            colls_held: inbox.held.clone(),
            entries: Mutex::new(inbox),
            arrivals: AtomicU64::new(0),
            failure: Mutex::new(None),
            has_failure: AtomicBool::new(false),
            gone: Default::default(),
            any_gone: AtomicBool::new(false),
            first: Mutex::new(None),
            background: Default::default(),
            touched: Default::default(),
            touched_all: AtomicBool::new(false),
            bg_len: AtomicUsize::new(0),
            swept_at: AtomicU64::new(0),
            orphans: AtomicUsize::new(0),
            world: Default::default(),
            wakers: Default::default(),
            next_waiter: AtomicU64::new(0),
            max_bytes: MAX_BYTES,
        }
    }
}

#[derive(Default)]
struct Inbox {
    map: HashMap<Key, Entry>,
    bytes: usize,
    /// By (team, collective number): what its messages' senders called.
    colls: HashMap<(u64, u64), CollSeen>,
    /// `colls.len()`, stored after every change (`Mailbox::colls_held`).
    held: Arc<AtomicUsize>,
}

/// The headers a collective's buffered messages carry: a mismatch with a
/// member's own call is found without scanning every message.
struct CollSeen {
    /// The first message's key and header.
    key: Key,
    hdr: Header,
    /// Messages of the collective buffered.
    n: usize,
    /// A message whose header differs from `hdr`, if any came.
    other: Option<(Key, Header)>,
}

impl Inbox {
    fn insert(&mut self, key: Key, e: Entry) {
        self.bytes += e.buf.len();
        let c = self.colls.entry((key.0, key.1)).or_insert(CollSeen {
            key,
            hdr: e.hdr,
            n: 0,
            other: None,
        });
        c.n += 1;
        if e.hdr != c.hdr && c.other.is_none() {
            c.other = Some((key, e.hdr));
        }
        self.held.store(self.colls.len(), Ordering::Release);
        self.map.insert(key, e);
    }

    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let e = self.map.remove(key)?;
        self.bytes -= e.buf.len();
        let ck = (key.0, key.1);
        if let Some(c) = self.colls.get_mut(&ck) {
            c.n -= 1;
            if c.n == 0 {
                self.colls.remove(&ck);
                self.held.store(self.colls.len(), Ordering::Release);
            }
        }
        Some(e)
    }

    /// A buffered message of collective `seq` on `team` whose sender
    /// called something else than `mine`: its key and header.
    fn mismatch(&self, team: u64, seq: u64, mine: &Header) -> Option<(Key, Header)> {
        let c = self.colls.get(&(team, seq))?;
        if c.hdr != *mine {
            return Some((c.key, c.hdr));
        }
        c.other.filter(|(_, h)| h != mine)
    }

    /// Drop every entry `which` selects (by key).
    fn purge(&mut self, which: impl Fn(&Key) -> bool) {
        let gone: Vec<Key> = self.map.keys().filter(|k| which(k)).copied().collect();
        for k in gone {
            self.remove(&k);
        }
    }
}

/// Teams that failed on this rank and collectives it abandoned.
#[derive(Default)]
struct Gone {
    /// Team id → why it failed.
    teams: HashMap<u64, String>,
    /// (team id, collective number), and their order for forgetting.
    colls: HashSet<(u64, u64)>,
    order: VecDeque<(u64, u64)>,
}

/// What a waiter found for its key.
pub(crate) enum Found {
    /// Not (completely) there yet.
    Waiting,
    /// Complete; its data was copied out and the entry removed.
    Done,
    /// A message of this collective whose sender called something else:
    /// its key and header.
    Mismatch(Key, Header),
    /// The message has another length than the receiver's buffer.
    BadLength(usize),
    /// A peer sent something unfileable (see [`Mailbox::failure`]).
    Failed(String),
}

impl Mailbox {
    /// File a chunk: `args` are the message's argument words (see
    /// [`args`]), `data` its payload, `src` the sender's world rank.
    /// Anything malformed or past the bounds is recorded as a failure.
    pub(crate) fn file(&self, src: usize, args: &[u64], data: &[u8]) {
        if let Err(why) = self.try_file(src, args, data) {
            let team = (args.len() >= NARGS).then(|| args[0]);
            self.fail(team, format!("team message from rank {src}: {why}"));
            self.touched_all.store(true, Ordering::Release);
        } else if self.bg_len.load(Ordering::Acquire) > 0 {
            // the sweep advances the schedule of this collective
            self.touch(args[0], args[1]);
        }
        self.arrivals.fetch_add(1, Ordering::Release);
        let woken: Vec<Waker> = {
            let mut w = self.wakers.lock();
            if w.is_empty() {
                return;
            }
            w.drain().map(|(_, w)| w).collect()
        };
        // woken outside the lock: a waker runs executor code
        woken.into_iter().for_each(Waker::wake);
    }

    /// A fresh id for a pending request's waker.
    pub(crate) fn waiter_id(&self) -> u64 {
        self.next_waiter.fetch_add(1, Ordering::Relaxed)
    }

    /// Wake `w` at the next message filed (replacing request `id`'s
    /// earlier waker).
    pub(crate) fn wake_on_message(&self, id: u64, w: &Waker) {
        let old = self.wakers.lock().insert(id, w.clone());
        drop(old);
    }

    /// Request `id` no longer waits.
    pub(crate) fn forget_waker(&self, id: u64) {
        let old = self.wakers.lock().remove(&id);
        drop(old);
    }

    fn try_file(&self, src: usize, a: &[u64], data: &[u8]) -> std::result::Result<(), String> {
        if a.len() < NARGS {
            return Err(format!("{} argument words, {NARGS} expected", a.len()));
        }
        let key = (a[0], a[1], a[2], src);
        if self.any_gone.load(Ordering::Acquire) {
            let gone = self.gone.lock();
            if gone.teams.contains_key(&key.0) || gone.colls.contains(&(key.0, key.1)) {
                // reclaimed: a failed team's or an abandoned collective's
                return Ok(());
            }
        }
        let hdr = Header {
            kind: a[3],
            op: a[4],
            root: a[5],
            count: a[6],
            esize: a[7],
        };
        let (off, total) = (a[8], a[9]);
        let max = self.max_bytes;
        let total = usize::try_from(total)
            .ok()
            .filter(|&t| t <= max)
            .ok_or_else(|| format!("{total} B exceed the {max} B bound"))?;
        let end = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(data.len()))
            .filter(|&e| e <= total)
            .ok_or_else(|| format!("chunk at {off} + {} B past its {total} B", data.len()))?;
        let start = end - data.len();
        let mut inbox = self.entries.lock();
        let inbox = &mut *inbox;
        // Each peer's Mediums arrive in order on every fabric, so the next
        // chunk of a message starts where the last one ended: a duplicated
        // or missing chunk must never make a message "complete".
        let got = inbox.map.get(&key).map_or(0, |e| e.got);
        if start != got {
            return Err(format!(
                "chunk at {start} out of order in team {} collective #{} step {} \
                 ({got} B of {total} B filed so far)",
                key.0, key.1, key.2
            ));
        }
        if !inbox.map.contains_key(&key) {
            if inbox.map.len() >= MAX_ENTRIES || inbox.bytes + total > max {
                return Err(format!(
                    "{} messages of {} B buffered already, unclaimed (bounds: {MAX_ENTRIES} \
                     messages, {max} B)",
                    inbox.map.len(),
                    inbox.bytes
                ));
            }
            inbox.insert(
                key,
                Entry {
                    hdr,
                    buf: vec![0; total],
                    got: 0,
                },
            );
        }
        let e = inbox.map.get_mut(&key).expect("inserted above");
        if e.buf.len() != total || e.hdr != hdr || e.got + data.len() > total {
            return Err(format!(
                "chunks of team {} collective #{} step {} disagree",
                key.0, key.1, key.2
            ));
        }
        e.buf[start..end].copy_from_slice(data);
        e.got += data.len();
        Ok(())
    }

    /// Record a failure of `team` (of every team if `None`, or past
    /// [`MAX_FAILED_TEAMS`]) and reclaim its messages.
    fn fail(&self, team: Option<u64>, why: String) {
        self.first.lock().get_or_insert_with(|| why.clone());
        let mut gone = self.gone.lock();
        match team {
            Some(t) if gone.teams.contains_key(&t) => {}
            Some(t) if gone.teams.len() < MAX_FAILED_TEAMS => {
                gone.teams.insert(t, why);
                self.any_gone.store(true, Ordering::Release);
                self.entries.lock().purge(|k| k.0 == t);
            }
            _ => {
                self.failure.lock().get_or_insert(why);
            }
        }
        self.has_failure.store(true, Ordering::Release);
    }

    /// The first failure recorded, of any team or of all (for tests).
    #[cfg(test)]
    fn failure(&self) -> Option<String> {
        self.first.lock().clone()
    }

    /// Why team `team` cannot be used on this rank, if it cannot.
    fn team_failure(&self, team: u64) -> Option<String> {
        if !self.has_failure.load(Ordering::Acquire) {
            return None;
        }
        if let Some(why) = self.failure.lock().clone() {
            return Some(why);
        }
        let gone = self.gone.lock();
        let why = gone.teams.get(&team)?;
        Some(format!(
            "team {team:#x} is unusable on this rank: {why} (its messages were discarded, \
             its members' collective numbers may be out of step; other teams are not affected)"
        ))
    }

    /// This rank abandoned collective `seq` of team `team` (its schedule
    /// ended in an error): reclaim its messages, now and as they arrive.
    pub(crate) fn abandon(&self, team: u64, seq: u64) {
        let mut gone = self.gone.lock();
        self.any_gone.store(true, Ordering::Release);
        if gone.colls.insert((team, seq)) {
            gone.order.push_back((team, seq));
            if gone.order.len() > MAX_ABANDONED {
                if let Some(old) = gone.order.pop_front() {
                    gone.colls.remove(&old);
                }
            }
        }
        self.entries.lock().purge(|k| k.0 == team && k.1 == seq);
    }

    /// Add the pending schedule of collective `seq` on team `team` to
    /// the sweep (after those started before).
    pub(crate) fn push_background(&self, team: u64, seq: u64, b: Arc<dyn Background>) {
        let mut p = self.background.lock();
        let no = p.next;
        p.next += 1;
        p.list.insert(no, ((team, seq), b));
        p.by_coll.insert((team, seq), no);
        p.fresh.push(no);
        self.bg_len.store(p.list.len(), Ordering::Release);
    }

    /// Advance the pending schedules that can move (those added since
    /// the last sweep and those of the collectives a message arrived
    /// for), in start order, as far as the messages in allow; finished
    /// ones leave the sweep. If another thread is sweeping, returns at
    /// once (it will see what this one would have).
    pub(crate) fn sweep(&self) {
        if self.bg_len.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(mut p) = self.background.try_lock() else {
            return;
        };
        self.swept_at
            .store(self.arrivals.load(Ordering::Acquire), Ordering::Release);
        let touched = std::mem::take(&mut *self.touched.lock());
        let todo: std::collections::BTreeSet<u64> =
            if self.touched_all.swap(false, Ordering::AcqRel) {
                p.list.keys().copied().collect()
            } else {
                let mut todo: std::collections::BTreeSet<u64> = p.fresh.iter().copied().collect();
                todo.extend(touched.iter().filter_map(|c| p.by_coll.get(c)));
                todo
            };
        p.fresh.clear();
        for no in todo {
            let Some((coll, b)) = p.list.get(&no).cloned() else {
                continue;
            };
            if b.advance() {
                p.list.remove(&no);
                p.by_coll.remove(&coll);
            }
        }
        self.bg_len.store(p.list.len(), Ordering::Release);
    }

    /// Schedules are pending and a message arrived since the last sweep
    /// began: a wait should return to sweep.
    pub(crate) fn background_due(&self) -> bool {
        self.bg_len.load(Ordering::Acquire) > 0
            && self.arrivals.load(Ordering::Acquire) != self.swept_at.load(Ordering::Acquire)
    }

    /// Complete every pending schedule (dropped requests' included),
    /// serving traffic on `ep`: before the rank finishes, so that the
    /// other members get this one's part.
    pub(crate) fn finish_background(&self, ep: &splitrt_am::Endpoint) -> Result<()> {
        let what = || "finishing: team requests still pending in the background".to_string();
        loop {
            self.sweep();
            if self.background_len() == 0 {
                return Ok(());
            }
            ep.wait_reporting(&what, std::time::Duration::ZERO, || self.background_due())?;
        }
    }

    /// Pending schedules.
    pub(crate) fn background_len(&self) -> usize {
        self.bg_len.load(Ordering::Acquire)
    }

    /// Bytes of message `key` filed so far (a waiter's progress).
    pub(crate) fn filed(&self, key: Key) -> usize {
        self.entries.lock().map.get(&key).map_or(0, |e| e.got)
    }

    /// Whether message `key` is complete, or something is wrong with this
    /// collective: not waiting any more. (Cheap check for a wait loop.)
    pub(crate) fn ready(&self, key: Key, mine: &Header) -> bool {
        if self.team_failure(key.0).is_some() {
            return true;
        }
        let inbox = self.entries.lock();
        if inbox.map.get(&key).is_some_and(Entry::complete) {
            return true;
        }
        inbox.mismatch(key.0, key.1, mine).is_some()
    }

    /// A buffered message of collective `seq` on `team` whose sender
    /// called something else than `mine`: its key and header. For waits
    /// that take no message of that collective themselves (a step of a
    /// host group's shared-memory area, `ShmCall::sync`): a member that
    /// called another collective as this number may send here what this
    /// member never asks for (a hierarchical scan's messages go only to
    /// higher team ranks).
    /// One load when nothing is buffered (a single-host team's steps
    /// take no message): the lock and the lookup only otherwise.
    pub(crate) fn mismatch(&self, team: u64, seq: u64, mine: &Header) -> Option<(Key, Header)> {
        // a message is filed (`held` stored) before `arrivals` moves,
        // which the caller loaded before this
        if self.colls_held.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.entries.lock().mismatch(team, seq, mine)
    }

    /// Have the next sweep advance the pending schedule of collective
    /// `seq` on `team` (as if a message of it had arrived): something
    /// that is not a message changed what its waits look at (a host-mate's
    /// shared-memory step, `team_mates.rs`).
    pub(crate) fn touch(&self, team: u64, seq: u64) {
        let mut t = self.touched.lock();
        if t.len() >= MAX_TOUCHED {
            t.clear();
            self.touched_all.store(true, Ordering::Release);
        }
        t.push((team, seq));
    }

    /// Take message `key` into `out` if it is complete and as expected
    /// (see [`Found`]); a mismatching message of the same collective is
    /// reported first.
    pub(crate) fn take(&self, key: Key, mine: &Header, out: &mut [u8]) -> Found {
        if let Some(why) = self.team_failure(key.0) {
            return Found::Failed(why);
        }
        let mut inbox = self.entries.lock();
        if let Some((k, h)) = inbox.mismatch(key.0, key.1, mine) {
            return Found::Mismatch(k, h);
        }
        match inbox.map.get(&key) {
            Some(e) if e.complete() => {
                if e.buf.len() != out.len() {
                    return Found::BadLength(e.buf.len());
                }
                let Some(e) = inbox.remove(&key) else {
                    return Found::Waiting;
                };
                out.copy_from_slice(&e.buf);
                Found::Done
            }
            _ => Found::Waiting,
        }
    }

    /// Messages buffered now (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().map.len()
    }
}

/// The argument words of a chunk of `total` bytes at `off` of message
/// `(team, seq, tag)` with header `h`.
pub(crate) fn args(
    team: u64,
    seq: u64,
    tag: u64,
    h: &Header,
    off: u64,
    total: u64,
) -> [u64; NARGS] {
    [
        team, seq, tag, h.kind, h.op, h.root, h.count, h.esize, off, total,
    ]
}

/// Register the team message handler, which files into `mail`.
pub(crate) fn register(b: &mut EndpointBuilder, mail: &Arc<Mailbox>) -> Result<RequestHandler> {
    let m = mail.clone();
    let f = move |_tok: Token<'_>, msg: &Incoming<'_>| {
        let a: [u64; NARGS] = std::array::from_fn(|i| msg.arg(i));
        m.file(msg.src(), &a, msg.payload());
    };
    // SAFETY: a Medium handler of splitrt's own: it carries no deposit
    // into the segment (its payload is copied into the mailbox).
    unsafe { b.reserved_request(TEAM_HANDLER_ID, "splitrt.team", Kind::Medium, NARGS, f) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(kind: CollKind, count: u64) -> Header {
        Header {
            kind: kind as u64,
            op: 0,
            root: u64::MAX,
            count,
            esize: 8,
        }
    }

    #[test]
    fn chunks_assemble_and_are_taken_once() {
        let m = Mailbox::default();
        let hd = h(CollKind::Allgather, 2);
        m.file(3, &args(1, 1, 0, &hd, 0, 16), &[1; 8]);
        assert!(!m.ready((1, 1, 0, 3), &hd));
        m.file(3, &args(1, 1, 0, &hd, 8, 16), &[2; 8]);
        assert!(m.ready((1, 1, 0, 3), &hd));
        assert!(m.failure().is_none());
        let mut out = [0u8; 16];
        assert!(matches!(m.take((1, 1, 0, 3), &hd, &mut out), Found::Done));
        assert_eq!(&out[..8], &[1; 8]);
        assert_eq!(&out[8..], &[2; 8]);
        assert!(matches!(
            m.take((1, 1, 0, 3), &hd, &mut out),
            Found::Waiting
        ));
        assert_eq!(m.len(), 0);
        // an empty message is complete on arrival
        m.file(0, &args(1, 2, 0, &hd, 0, 0), &[]);
        assert!(matches!(m.take((1, 2, 0, 0), &hd, &mut []), Found::Done));
    }

    #[test]
    fn another_call_of_the_same_collective_is_a_mismatch() {
        let m = Mailbox::default();
        let mine = h(CollKind::Allreduce, 4);
        let theirs = h(CollKind::Allreduce, 5);
        m.file(2, &args(7, 3, 1, &theirs, 0, 40), &[0; 40]);
        assert!(m.ready((7, 3, 0, 1), &mine), "a mismatch ends the wait");
        match m.take((7, 3, 0, 1), &mine, &mut [0; 32]) {
            Found::Mismatch(k, hd) => {
                assert_eq!(k.3, 2);
                assert_eq!(hd.count, 5);
            }
            _ => panic!("no mismatch found"),
        }
        // another team's or collective's messages are not compared
        assert!(!m.ready((8, 3, 0, 1), &mine));
        assert!(!m.ready((7, 4, 0, 1), &mine));
        // a wait that takes no message of the collective finds it too
        // (scanmix: a host's shared-memory step), and only that one
        let (k, hd) = m.mismatch(7, 3, &mine).expect("a mismatch");
        assert_eq!((k.3, hd.count), (2, 5));
        assert!(m.mismatch(7, 3, &theirs).is_none());
        assert!(m.mismatch(7, 4, &mine).is_none());
        assert!(m.mismatch(8, 3, &mine).is_none());
    }

    /// A pending request's waker is woken by the next message filed, once;
    /// a forgotten one is not.
    #[test]
    fn a_message_wakes_the_registered_requests_once() {
        use std::sync::atomic::AtomicUsize;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let m = Mailbox::default();
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (ia, ib) = (m.waiter_id(), m.waiter_id());
        m.wake_on_message(ia, &Waker::from(a.clone()));
        m.wake_on_message(ib, &Waker::from(b.clone()));
        m.forget_waker(ib);
        let hd = h(CollKind::Barrier, 0);
        m.file(1, &args(1, 1, 0, &hd, 0, 0), &[]);
        m.file(1, &args(1, 1, 1, &hd, 0, 0), &[]);
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn fixes_a_duplicated_chunk_never_completes_a_message() {
        let m = Mailbox::default();
        let hd = h(CollKind::Barrier, 0);
        let key = (1, 1, 0, 2);
        // rank 2 sends the first half of a 16 B message twice
        m.file(2, &args(1, 1, 0, &hd, 0, 16), &[7; 8]);
        m.file(2, &args(1, 1, 0, &hd, 0, 16), &[7; 8]);
        let mut out = [0u8; 16];
        let found = match m.take(key, &hd, &mut out) {
            Found::Failed(why) => why,
            Found::Done => format!("a complete message {out:?}"),
            _ => "something else".into(),
        };
        assert!(found.contains("rank 2"), "a duplicated chunk gave {found}");
    }

    #[test]
    fn hostile_messages_are_failures_not_panics() {
        let m = Mailbox::default();
        let hd = h(CollKind::Barrier, 0);
        // too big, a chunk past its end, an offset that overflows, too few words
        m.file(1, &args(1, 1, 0, &hd, 0, u64::MAX), &[]);
        assert!(m.failure().unwrap().contains("exceed"));
        let m = Mailbox::default();
        m.file(1, &args(1, 1, 0, &hd, 4, 8), &[0; 8]);
        assert!(m.failure().unwrap().contains("past"));
        let m = Mailbox::default();
        m.file(1, &args(1, 1, 0, &hd, u64::MAX, 8), &[0; 8]);
        assert!(m.failure().is_some());
        let m = Mailbox::default();
        m.file(1, &[1, 2], &[]);
        assert!(m.failure().is_some());
        // the same chunk twice never completes the message (with zeros
        // where the missing chunk belongs): a failure naming the peer
        let m = Mailbox::default();
        m.file(1, &args(1, 1, 0, &hd, 0, 16), &[0; 8]);
        m.file(1, &args(1, 1, 0, &hd, 0, 16), &[0; 8]);
        assert!(m.failure().unwrap().contains("rank 1"));
        assert!(matches!(
            m.take((1, 1, 0, 1), &hd, &mut [0; 16]),
            Found::Failed(_)
        ));
        // a chunk out of order (each peer's Mediums arrive in order)
        let m = Mailbox::default();
        m.file(1, &args(1, 1, 0, &hd, 8, 16), &[0; 8]);
        assert!(m.failure().unwrap().contains("out of order"));
        // the byte bound holds (a small one: Miri runs this test)
        let m = Mailbox {
            max_bytes: 1000,
            ..Mailbox::default()
        };
        let big = 501;
        m.file(1, &args(1, 1, 0, &hd, 0, big), &[]);
        assert!(m.failure().is_none());
        m.file(1, &args(1, 1, 1, &hd, 0, big), &[]);
        assert!(m.failure().unwrap().contains("buffered already"));
    }

    /// A peer's unfileable message on one team makes that team unusable
    /// (its waits name the cause, its buffered messages are reclaimed and
    /// later ones discarded); other teams go on.
    #[test]
    fn fixes_a_failure_on_one_team_leaves_the_others_usable() {
        let m = Mailbox::default();
        let hd = h(CollKind::Allgather, 1);
        m.file(1, &args(2, 1, 0, &hd, 0, 8), &[1; 8]);
        m.file(1, &args(7, 1, 0, &hd, 0, 8), &[2; 8]);
        // team 7: a chunk out of order
        m.file(1, &args(7, 2, 0, &hd, 8, 16), &[0; 8]);
        let mut out = [0u8; 8];
        let why = match m.take((7, 1, 0, 1), &hd, &mut out) {
            Found::Failed(why) => why,
            _ => "no failure".into(),
        };
        assert!(
            why.contains("team 0x7 is unusable") && why.contains("out of order"),
            "{why}"
        );
        assert!(matches!(m.take((2, 1, 0, 1), &hd, &mut out), Found::Done));
        assert_eq!(out, [1; 8]);
        // the failed team's messages are reclaimed, later ones discarded
        assert_eq!(m.len(), 0);
        m.file(1, &args(7, 3, 0, &hd, 0, 8), &[3; 8]);
        assert_eq!(m.len(), 0);
        m.file(1, &args(2, 2, 0, &hd, 0, 8), &[4; 8]);
        assert!(matches!(m.take((2, 2, 0, 1), &hd, &mut out), Found::Done));
    }

    /// An abandoned collective's messages are reclaimed, those buffered
    /// and those arriving later; the set of abandoned collectives stays
    /// bounded over 100 000 of them.
    #[test]
    fn an_abandoned_collectives_messages_are_reclaimed() {
        let m = Mailbox::default();
        let hd = h(CollKind::Allreduce, 1);
        m.file(1, &args(1, 5, 0, &hd, 0, 8), &[1; 8]);
        m.file(1, &args(1, 6, 0, &hd, 0, 8), &[2; 8]);
        m.abandon(1, 5);
        assert_eq!(m.len(), 1);
        m.file(1, &args(1, 5, 1, &hd, 0, 8), &[3; 8]);
        assert_eq!(m.len(), 1);
        let mut out = [0u8; 8];
        assert!(matches!(m.take((1, 6, 0, 1), &hd, &mut out), Found::Done));
        assert_eq!(m.entries.lock().bytes, 0);
        // past the bound of remembered collectives (fewer under Miri,
        // which runs a hundred thousand rounds for an hour)
        let rounds = if cfg!(miri) { 64 } else { 100_000 };
        for seq in 0..rounds {
            m.file(2, &args(3, seq, 0, &hd, 0, 8), &[4; 8]);
            m.abandon(3, seq);
        }
        assert_eq!(m.len(), 0);
        assert!(m.gone.lock().colls.len() <= MAX_ABANDONED);
        assert!(m.failure().is_none());
    }

    /// The sweep advances pending work in start order and drops what
    /// finished; `background_due` says when a message came since.
    #[test]
    fn the_sweep_advances_pending_work_in_order() {
        struct W(Mutex<(usize, Vec<usize>)>, usize, Arc<Mutex<Vec<usize>>>);
        impl Background for W {
            fn advance(&self) -> bool {
                self.2.lock().push(self.1);
                let mut s = self.0.lock();
                s.0 += 1;
                s.0 >= 2
            }
        }
        let m = Mailbox::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let w = W(Mutex::new((i % 2, Vec::new())), i, log.clone());
            m.push_background(1, i as u64 + 1, Arc::new(w));
        }
        assert!(!m.background_due(), "nothing arrived yet");
        m.sweep();
        assert_eq!(*log.lock(), [0, 1, 2]);
        assert_eq!(m.background_len(), 2);
        // a message for the collective of schedule 2 (#3): only it moves
        let hd = h(CollKind::Barrier, 0);
        m.file(1, &args(1, 3, 0, &hd, 0, 0), &[]);
        assert!(m.background_due());
        m.sweep();
        assert!(!m.background_due());
        assert_eq!(*log.lock(), [0, 1, 2, 2]);
        assert_eq!(m.background_len(), 1);
        // a failure advances every schedule (so that each reports it)
        m.file(1, &args(1, 9, 0, &hd, 8, 16), &[0; 8]);
        m.sweep();
        assert_eq!(*log.lock(), [0, 1, 2, 2, 0]);
        assert_eq!(m.background_len(), 0);
    }

    /// Words of one small team-area block (256 B of control words, two
    /// halves of 64 B), 64-byte aligned.
    #[repr(C, align(64))]
    struct Block([AtomicU64; 48]);

    /// Review of the drop marks (h12-teamdrop): two ranks A and B of one
    /// split team on a host, each with its own registry. A member marked
    /// a dropped team's block only at its next team set-up, so B, which
    /// drops the team and sets up no other, never marked it and A's block
    /// stayed retired for the whole job. Now the last handle's drop
    /// (`TeamCounters::drop_areas`, from `Drop for Team`) marks it: A's
    /// block is freed by A's next look, with nothing more from B. An area
    /// still held elsewhere is not retired by that drop.
    #[test]
    fn teamdrop_the_last_handles_drop_marks_the_block() {
        use crate::team_area::{Retired, TeamArea, DROPPED};
        use splitrt_runtime::fabric::SegmentRef;
        let blocks: Vec<Block> = (0..2)
            .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        let segs: Vec<SegmentRef> = blocks
            .iter()
            // SAFETY: `blocks` outlives both areas and both registries'
            // retired copies of them (all dropped before it, at the end
            // of the test), and the areas touch only its control words,
            // atomically (no step writes or reads a data half here).
            .map(|b| unsafe { SegmentRef::new(b.0.as_ptr() as *mut u8, 48 * 8) })
            .collect();
        let regs: [Arc<Retired>; 2] = std::array::from_fn(|_| Arc::new(Retired::default()));
        let mut counters: [TeamCounters; 2] = std::array::from_fn(|_| TeamCounters::default());
        for (me, c) in counters.iter_mut().enumerate() {
            regs[me].held.store(1, Ordering::Relaxed);
            let own = Some((0, regs[me].clone()));
            let a = TeamArea::new(segs.clone(), vec![0, 0], me, 64, 7, own).unwrap();
            a.reset_own();
            c.shm.set(Some(Arc::new(a))).unwrap();
        }
        let mut freed: [Vec<u64>; 2] = Default::default();
        let done = |j: usize| blocks[j].0[1].load(Ordering::Relaxed);
        // A drops the team: its block is marked, not freed (B holds it)
        let [ca, cb] = &mut counters;
        ca.drop_areas(&regs[0], |off| freed[0].push(off));
        assert_eq!(done(0), DROPPED);
        assert!(freed[0].is_empty());
        assert_eq!(regs[0].list.lock().len(), 1);
        // B drops the team and sets nothing else up: its block is marked
        // (and freed, as A dropped it too)
        cb.drop_areas(&regs[1], |off| freed[1].push(off));
        assert_eq!(done(1), DROPPED, "B's drop did not mark its block");
        assert_eq!(freed[1], [0]);
        // only A's registry looks again: its block is freed
        regs[0].reclaim(|off| freed[0].push(off));
        assert_eq!(
            freed[0],
            [0],
            "A's block was not freed after B dropped the team"
        );
        assert_eq!(regs[0].held.load(Ordering::Relaxed), 0);
        assert!(regs[0].list.lock().is_empty());

        // an area a schedule still holds is retired only when that goes,
        // unmarked (its drop touches no segment: marked at a later look)
        for w in blocks.iter().flat_map(|b| &b.0) {
            w.store(0, Ordering::Relaxed);
        }
        let reg = Arc::new(Retired::default());
        reg.held.store(1, Ordering::Relaxed);
        let a = TeamArea::new(segs.clone(), vec![0, 0], 0, 64, 9, Some((0, reg.clone()))).unwrap();
        a.reset_own();
        let held = Arc::new(a);
        let mut c = TeamCounters::default();
        c.shm.set(Some(held.clone())).unwrap();
        c.drop_areas(&reg, |_| unreachable!("nothing is retired"));
        assert!(reg.list.lock().is_empty());
        assert_eq!(done(0), 0);
        drop(held);
        assert_eq!(reg.list.lock().len(), 1);
        assert_eq!(done(0), 0);
    }
}
