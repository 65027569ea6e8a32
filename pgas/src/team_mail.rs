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
//! do not add up, is recorded as a failure (returned by the next team
//! collective's wait), never a panic.

use parking_lot::Mutex;
use splitrt_am::{EndpointBuilder, Incoming, Kind, RequestHandler, Result, Token};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
}

/// A rank's buffered team messages (see the module docs).
pub(crate) struct Mailbox {
    entries: Mutex<Inbox>,
    /// Something arrived (for waiters that re-check only after a change).
    pub arrivals: AtomicU64,
    /// A peer sent what cannot be filed: why (kept until a wait reports it).
    failure: Mutex<Option<String>>,
    has_failure: AtomicBool,
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
        Mailbox {
            entries: Default::default(),
            arrivals: AtomicU64::new(0),
            failure: Mutex::new(None),
            has_failure: AtomicBool::new(false),
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
            self.fail(format!("team message from rank {src}: {why}"));
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
            inbox.bytes += total;
            inbox.map.insert(
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

    fn fail(&self, why: String) {
        self.failure.lock().get_or_insert(why);
        self.has_failure.store(true, Ordering::Release);
    }

    /// The failure a peer's message caused, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.has_failure.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().clone()
    }

    /// Whether message `key` is complete, or something is wrong with this
    /// collective: not waiting any more. (Cheap check for a wait loop.)
    pub(crate) fn ready(&self, key: Key, mine: &Header) -> bool {
        if self.has_failure.load(Ordering::Acquire) {
            return true;
        }
        let inbox = self.entries.lock();
        if inbox.map.get(&key).is_some_and(Entry::complete) {
            return true;
        }
        inbox
            .map
            .iter()
            .any(|(k, e)| k.0 == key.0 && k.1 == key.1 && e.hdr != *mine)
    }

    /// Take message `key` into `out` if it is complete and as expected
    /// (see [`Found`]); a mismatching message of the same collective is
    /// reported first.
    pub(crate) fn take(&self, key: Key, mine: &Header, out: &mut [u8]) -> Found {
        if let Some(why) = self.failure() {
            return Found::Failed(why);
        }
        let mut inbox = self.entries.lock();
        if let Some((k, e)) = inbox
            .map
            .iter()
            .filter(|(k, e)| k.0 == key.0 && k.1 == key.1 && e.hdr != *mine)
            .min_by_key(|(k, _)| (k.3, k.2))
        {
            return Found::Mismatch(*k, e.hdr);
        }
        match inbox.map.get(&key) {
            Some(e) if e.complete() => {
                if e.buf.len() != out.len() {
                    return Found::BadLength(e.buf.len());
                }
                let e = inbox.map.remove(&key).expect("present");
                inbox.bytes -= e.buf.len();
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
}
