//! The rendezvous host. It runs in a thread of the launcher (or of rank 0
//! under srun / mpirun): it authenticates every connection against the job
//! key, gathers every rank's [`Hello`], refuses a job whose ranks disagree
//! (size, job id, registration table) or that is incomplete by the
//! deadline, then serves barriers and tells every rank when one of them is
//! lost.
//!
//! A connection that has not proved it holds the job key can do nothing but
//! finish the handshake: it may send at most
//! [`MAX_HANDSHAKE_FRAME`](super::auth::MAX_HANDSHAKE_FRAME) bytes, must be
//! done within [`HANDSHAKE_TIMEOUT`] of being accepted (a deadline for the
//! whole exchange, not a timeout per read: trickling bytes does not extend
//! it), and at most [`MAX_PENDING`] such connections are served at once. A
//! new connection when that many are pending closes the one that has been
//! pending longest if that one has had [`EVICT_AFTER`] already (a rank's
//! handshake takes a round trip: the slots a stranger holds open are the
//! ones that go, and a rank that arrives while they are all held still
//! gets in), else the new one is closed at once (a burst of ranks
//! connecting together does not push out its own handshakes; they retry).
//! After the handshake a connection speaks only for the rank it proved to
//! be.

use super::auth::{self, Sealer};
use super::wire::{Collective, Hello, Msg, Peer};
use crate::deadline::Deadline;
use crate::key::JobKey;
use crate::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most connections served at once that have not yet authenticated.
pub const MAX_PENDING: usize = 64;

/// Handshake threads that may still be ending beyond [`MAX_PENDING`]: a
/// connection closed to make room ends its thread at its next read, which
/// on a busy host may come after new connections were accepted. Past
/// `MAX_PENDING + LINGER` threads still in their handshake, a new
/// connection is closed at once (a rank retries), so a flood of strangers
/// cannot grow the threads beyond that.
const LINGER: usize = 16;

/// Counts a connection's thread while it is in its handshake.
struct Shaking(Arc<std::sync::atomic::AtomicUsize>);

impl Shaking {
    fn new(n: &Arc<std::sync::atomic::AtomicUsize>) -> Shaking {
        n.fetch_add(1, Ordering::AcqRel);
        Shaking(n.clone())
    }
}

impl Drop for Shaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Time a new connection has, from being accepted, to complete the whole
/// handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a pending connection is safe from being closed to make room
/// for a new one: far longer than a rank's handshake takes.
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// Time a write to a rank may block (a stopped rank must not stall the
/// server for everyone).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A bootstrap rendezvous bound to a TCP port.
pub struct Server {
    listener: TcpListener,
    key: JobKey,
    culprit: Culprit,
    stats: Arc<ServerStats>,
    host: Option<usize>,
}

/// The first rank that aborted or was lost after the job started, shared
/// with the launcher so it can blame the cause rather than the ranks that
/// merely noticed.
pub type Culprit = Arc<Mutex<Option<usize>>>;

/// What the server turned away, for diagnostics and tests.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections that failed the handshake (wrong key, garbage, too slow).
    pub unauthenticated: AtomicU64,
    /// Connections closed because [`MAX_PENDING`] were pending: the oldest
    /// pending one to make room for a new one, or the new one.
    pub over_limit: AtomicU64,
    /// Authenticated connections turned away (a rank connected twice, or
    /// after the job started).
    pub turned_away: AtomicU64,
}

enum Event {
    Connected(usize, usize, TcpStream, Sealer),
    Message(usize, Msg),
    Closed(usize, Option<Error>),
}

impl Server {
    /// Bind to `addr` (use port 0 for an ephemeral port); only ranks that
    /// hold `key` will be heard.
    pub fn bind(addr: &str, key: JobKey) -> Result<Server> {
        let listener =
            TcpListener::bind(addr).map_err(|e| Error::io(format!("bootstrap bind {addr}"), e))?;
        Ok(Server {
            listener,
            key,
            culprit: Culprit::default(),
            stats: Arc::default(),
            host: None,
        })
    }

    /// This server runs inside rank `rank`'s process (srun, mpirun): once
    /// the job has failed it stops waiting for that rank's goodbye, so the
    /// hosting rank can wait for the server to finish telling the others
    /// before it exits.
    pub fn hosted_by(mut self, rank: usize) -> Server {
        self.host = Some(rank);
        self
    }

    /// Where the first failed rank will be recorded.
    pub fn culprit(&self) -> Culprit {
        self.culprit.clone()
    }

    /// Counters of what was turned away.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// The address ranks connect to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("bootstrap local_addr", e))
    }

    /// Serve a job of `size` ranks until every rank said goodbye or was lost.
    /// Returns an error if the job could not start (missing rank, mismatch)
    /// or a rank was lost; in both cases every connected rank was told why.
    pub fn run(self, size: usize, timeout: Duration) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        self.listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("bootstrap listener", e))?;
        let acceptor = {
            let (tx, stop) = (tx.clone(), stop.clone());
            let (listener, key, stats) = (self.listener, self.key, self.stats.clone());
            std::thread::Builder::new()
                .name("splitrt-boot-accept".into())
                .spawn(move || accept_loop(listener, key, tx, stop, stats))
                .map_err(|e| Error::io("spawning bootstrap thread", e))?
        };
        drop(tx);
        let result = serve(size, timeout, &rx, &self.culprit, &self.stats, self.host);
        stop.store(true, Ordering::Relaxed);
        let _ = acceptor.join();
        result
    }
}

/// The connections whose handshake is under way: id, when accepted, and a
/// handle to close it early.
type Pending = Arc<Mutex<Vec<(usize, Instant, TcpStream)>>>;

/// A connection's place among the pending ones, given up when its
/// handshake ends, however it ends.
struct PendingSlot(Pending, usize);
impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.lock().retain(|(id, _, _)| *id != self.1);
    }
}

/// Make room for one more pending connection at `now`: if [`MAX_PENDING`]
/// are pending, close the one accepted longest ago, if it has been pending
/// for [`EVICT_AFTER`] (a rank's handshake is a round trip; the oldest is
/// the likeliest to be a stranger holding a slot). Its thread's next read
/// fails at once and the thread ends. False if there is no room.
fn make_room(
    pending: &mut Vec<(usize, Instant, TcpStream)>,
    now: Instant,
    stats: &ServerStats,
) -> bool {
    while pending.len() >= MAX_PENDING {
        let Some(oldest) = (0..pending.len()).min_by_key(|&i| pending[i].1) else {
            break;
        };
        stats.over_limit.fetch_add(1, Ordering::Relaxed);
        if now.saturating_duration_since(pending[oldest].1) < EVICT_AFTER {
            return false;
        }
        let (_, _, s) = pending.swap_remove(oldest);
        let _ = s.shutdown(Shutdown::Both);
    }
    true
}

fn accept_loop(
    listener: TcpListener,
    key: JobKey,
    tx: mpsc::Sender<Event>,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
) {
    let pending = Pending::default();
    let shaking = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let accepted = Instant::now();
                if shaking.load(Ordering::Acquire) >= MAX_PENDING + LINGER {
                    stats.over_limit.fetch_add(1, Ordering::Relaxed);
                    continue; // dropped: closed at once
                }
                // A descriptor that cannot be duplicated only costs this
                // connection (dropped: closed at once).
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                let id = next;
                next += 1;
                {
                    let mut p = pending.lock();
                    if !make_room(&mut p, accepted, &stats) {
                        continue; // dropped: closed at once
                    }
                    p.push((id, accepted, handle));
                }
                let slot = PendingSlot(pending.clone(), id);
                let counted = Shaking::new(&shaking);
                let deadline = accepted + HANDSHAKE_TIMEOUT;
                let (tx, key, stats) = (tx.clone(), key.clone(), stats.clone());
                // A thread that cannot be started only costs this connection.
                let _ = std::thread::Builder::new()
                    .name("splitrt-boot-conn".into())
                    .stack_size(256 << 10)
                    .spawn(move || {
                        connection(id, stream, deadline, &key, (slot, counted), &tx, &stats)
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One connection: handshake under a deadline, then relay its frames.
fn connection(
    id: usize,
    mut stream: TcpStream,
    deadline: Instant,
    key: &JobKey,
    slot: (PendingSlot, Shaking),
    tx: &mpsc::Sender<Event>,
    stats: &ServerStats,
) {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true));
    let shaken = setup
        .map_err(|e| Error::io("bootstrap socket", e))
        .and_then(|()| auth::server(&mut Deadline::new(&mut stream, deadline), key));
    drop(slot);
    let Ok((rank, mut opener, sealer)) = shaken else {
        stats.unauthenticated.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let writer = stream
        .set_read_timeout(None)
        .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
        .and_then(|()| stream.try_clone());
    let Ok(writer) = writer else { return };
    if tx
        .send(Event::Connected(id, rank as usize, writer, sealer))
        .is_err()
    {
        return;
    }
    loop {
        let ev = match opener.recv(&mut stream) {
            Ok(Some(m)) => Event::Message(id, m),
            Ok(None) => Event::Closed(id, None),
            Err(e) => Event::Closed(id, Some(e)),
        };
        let last = matches!(ev, Event::Closed(..));
        if tx.send(ev).is_err() || last {
            return;
        }
    }
}

struct Conn {
    stream: TcpStream,
    sealer: Sealer,
    /// The rank this connection proved to be.
    rank: usize,
    /// It said hello (start-up) and so takes part in the job.
    joined: bool,
    bye: bool,
    open: bool,
}

fn send(c: &mut Conn, m: &Msg) {
    // A rank that cannot be written to is gone; its reader reports it.
    let _ = c.sealer.send(&mut c.stream, m);
}

fn broadcast(conns: &mut BTreeMap<usize, Conn>, m: &Msg) {
    for c in conns.values_mut().filter(|c| c.open) {
        send(c, m);
    }
}

fn rank_list(v: &[usize]) -> String {
    let s: Vec<String> = v.iter().map(|r| r.to_string()).collect();
    s.join(", ")
}

/// Prefix of the registration-table entries that are settings every rank
/// must share (`(setting) NAME=value`), not handlers.
const SETTING: &str = "(setting) ";

/// First difference between two registration tables, as a sentence: the
/// handlers are compared first, entry by entry (entry numbers count
/// handlers only, as on a fabric with no settings in its table), then the
/// settings, by name.
fn table_difference(a: &[String], b: &[String], rank: usize) -> Option<String> {
    let handlers = |t: &[String]| -> Vec<String> {
        t.iter()
            .filter(|e| !e.starts_with(SETTING))
            .cloned()
            .collect()
    };
    let (ha, hb) = (handlers(a), handlers(b));
    let show = |x: Option<&String>| x.map_or("nothing".to_string(), |s| format!("'{s}'"));
    if let Some(i) = (0..ha.len().max(hb.len())).find(|&i| ha.get(i) != hb.get(i)) {
        return Some(format!(
            "registration tables differ at entry {i}: rank 0 has {}, rank {rank} has {} \
             (every rank must register the same handlers in the same order)",
            show(ha.get(i)),
            show(hb.get(i))
        ));
    }
    let settings = |t: &[String]| -> BTreeMap<String, String> {
        t.iter()
            .filter_map(|e| e.strip_prefix(SETTING))
            .map(|e| match e.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (e.to_string(), String::new()),
            })
            .collect()
    };
    let (sa, sb) = (settings(a), settings(b));
    let names: std::collections::BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
    let first = names.into_iter().find(|k| sa.get(*k) != sb.get(*k));
    first.map(|k| {
        let val = |v: Option<&String>| v.map_or("no value".to_string(), |v| format!("{k}={v}"));
        format!(
            "rank 0 runs with {}, rank {rank} with {} \
                 (every rank must run with the same value of this setting)",
            val(sa.get(k)),
            val(sb.get(k))
        )
    })
}

/// Ranks that entered one barrier epoch so far.
struct Arrivals {
    kind: Collective,
    first: usize,
    ranks: Vec<bool>,
    count: usize,
}

fn serve(
    size: usize,
    timeout: Duration,
    rx: &mpsc::Receiver<Event>,
    culprit: &Culprit,
    stats: &ServerStats,
    host: Option<usize>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut conns: BTreeMap<usize, Conn> = BTreeMap::new();
    let mut hellos: BTreeMap<usize, Hello> = BTreeMap::new();
    let turn_away = |mut c: Conn, why: &str| {
        stats.turned_away.fetch_add(1, Ordering::Relaxed);
        send(&mut c, &Msg::Refuse(why.to_string()));
    };

    // Phase 1: gather.
    let refuse = |conns: &mut BTreeMap<usize, Conn>, why: String| -> Result<()> {
        broadcast(conns, &Msg::Refuse(why.clone()));
        Err(Error::bootstrap(why))
    };
    while hellos.len() < size {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = match rx.recv_timeout(left) {
            Ok(ev) => ev,
            Err(_) => {
                let missing: Vec<usize> = (0..size).filter(|r| !hellos.contains_key(r)).collect();
                return refuse(
                    &mut conns,
                    format!(
                        "rank{} {} never arrived at the bootstrap within {:.1} s ({} of {size} ranks joined)",
                        if missing.len() > 1 { "s" } else { "" },
                        rank_list(&missing),
                        timeout.as_secs_f64(),
                        hellos.len()
                    ),
                );
            }
        };
        match ev {
            Event::Connected(id, rank, stream, sealer) => {
                let c = Conn {
                    stream,
                    sealer,
                    rank,
                    joined: false,
                    bye: false,
                    open: true,
                };
                if conns.values().any(|o| o.rank == rank && o.open) {
                    turn_away(c, &format!("rank {rank} is already connected"));
                } else {
                    conns.insert(id, c);
                }
            }
            Event::Message(id, Msg::Hello(h)) => {
                let Some(c) = conns.get_mut(&id) else {
                    continue;
                };
                let r = c.rank;
                if h.rank as usize != r || c.joined {
                    let why = format!(
                        "rank {r} sent a second hello, or one for rank {} (a broken rank)",
                        h.rank
                    );
                    return refuse(&mut conns, why);
                }
                if h.size as usize != size || r >= size {
                    let why = format!(
                        "rank {r} believes the job has {} ranks, the launcher started {size}",
                        h.size
                    );
                    return refuse(&mut conns, why);
                }
                if let Some(first) = hellos.values().next() {
                    if first.job != h.job {
                        let why =
                            format!("rank {r} belongs to job '{}', not '{}'", h.job, first.job);
                        return refuse(&mut conns, why);
                    }
                }
                c.joined = true;
                hellos.insert(r, h);
            }
            Event::Message(id, Msg::Abort(_, why)) => {
                let Some(c) = conns.get_mut(&id) else {
                    continue;
                };
                c.bye = true;
                let r = c.rank;
                culprit.lock().get_or_insert(r);
                return refuse(&mut conns, format!("rank {r} aborted during start: {why}"));
            }
            Event::Message(id, m) => {
                let r = conns.get(&id).map_or(usize::MAX, |c| c.rank);
                return refuse(
                    &mut conns,
                    format!("rank {r} sent {m:?} before the job started"),
                );
            }
            Event::Closed(id, err) => {
                if let Some(c) = conns.remove(&id) {
                    if c.joined {
                        let r = c.rank;
                        // the others exit because of it: blame it
                        culprit.lock().get_or_insert(r);
                        let why = match err {
                            Some(e) => format!("rank {r} lost its bootstrap connection: {e}"),
                            None => format!("rank {r} exited during bootstrap"),
                        };
                        return refuse(&mut conns, why);
                    }
                }
            }
        }
    }

    // Every rank must have registered what rank 0 registered.
    let t0 = hellos[&0].table.clone();
    for (r, h) in &hellos {
        if let Some(why) = table_difference(&t0, &h.table, *r) {
            return refuse(&mut conns, why);
        }
    }
    let peers: Vec<Peer> = hellos
        .values()
        .map(|h| Peer {
            host: h.host.clone(),
            pid: h.pid,
            endpoint: h.endpoint.clone(),
        })
        .collect();
    drop(hellos);
    // connections that never said hello take no part in the running job
    conns.retain(|_, c| c.joined);
    broadcast(&mut conns, &Msg::Welcome(peers));
    // each rank's connection, for relays (a lookup by rank, not a scan:
    // all-to-all first contact relays ~3N(N-1) messages)
    let mut by_rank: Vec<Option<usize>> = vec![None; size];
    for (&id, c) in &conns {
        if let Some(slot) = by_rank.get_mut(c.rank).filter(|s| s.is_none() || c.open) {
            *slot = Some(id);
        }
    }

    // Phase 2: barriers, goodbyes, failures.
    let mut arrivals: BTreeMap<u64, Arrivals> = BTreeMap::new();
    let mut released: u64 = 0;
    let mut failure: Option<Error> = None;
    let fail = |conns: &mut BTreeMap<usize, Conn>, r: usize, why: String| {
        culprit.lock().get_or_insert(r);
        broadcast(conns, &Msg::Abort(r as u32, why));
    };
    // Done once every rank said goodbye or is gone. A rank hosting this
    // server keeps its own connection open while it waits for us; once the
    // job has failed it waits for us to finish telling the others, so it
    // is not waited for.
    let awaited = |c: &Conn, failed: bool| c.open && !c.bye && !(failed && Some(c.rank) == host);
    while conns.values().any(|c| awaited(c, failure.is_some())) {
        let Ok(ev) = rx.recv() else { break };
        let (id, m) = match ev {
            Event::Connected(_, _, stream, sealer) => {
                let c = Conn {
                    stream,
                    sealer,
                    rank: usize::MAX,
                    joined: false,
                    bye: true,
                    open: false,
                };
                turn_away(c, "the job has already started");
                continue;
            }
            Event::Closed(id, err) => {
                let Some(c) = conns.get_mut(&id) else {
                    continue;
                };
                c.open = false;
                if !c.bye {
                    let r = c.rank;
                    let why = match err {
                        Some(e) => format!("lost its bootstrap connection ({e})"),
                        None => "exited or was killed before finishing".to_string(),
                    };
                    failure.get_or_insert(Error::new(ErrorKind::PeerFailed(format!(
                        "rank {r} {why}"
                    ))));
                    fail(&mut conns, r, why);
                }
                continue;
            }
            Event::Message(id, m) => (id, m),
        };
        let Some(c) = conns.get_mut(&id) else {
            continue;
        };
        let r = c.rank;
        match m {
            Msg::Barrier(kind, epoch) => {
                let a = arrivals.entry(epoch).or_insert_with(|| Arrivals {
                    kind,
                    first: r,
                    ranks: vec![false; size],
                    count: 0,
                });
                let why = if epoch <= released || a.ranks[r] {
                    Some(format!("entered bootstrap barrier #{epoch} twice"))
                } else if a.kind != kind {
                    Some(format!(
                        "collective mismatch: rank {r} is in {} #{epoch} while rank {} is in {} #{epoch} \
                         (every rank must call the same collectives in the same order)",
                        kind.name(),
                        a.first,
                        a.kind.name()
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    failure.get_or_insert(Error::protocol(format!("rank {r}: {why}")));
                    fail(&mut conns, r, why);
                    continue;
                }
                a.ranks[r] = true;
                a.count += 1;
                if a.count == size {
                    arrivals.remove(&epoch);
                    released = released.max(epoch);
                    broadcast(&mut conns, &Msg::Release(epoch));
                }
            }
            Msg::Status(epoch) => {
                let (kind, missing) = match arrivals.get(&epoch) {
                    Some(a) => (
                        Some(a.kind),
                        (0..size)
                            .filter(|&q| !a.ranks[q])
                            .map(|q| q as u32)
                            .collect(),
                    ),
                    None if epoch <= released => (None, Vec::new()),
                    None => (None, (0..size as u32).collect()),
                };
                send(c, &Msg::Pending(epoch, kind, missing));
            }
            Msg::Bye => c.bye = true,
            Msg::Relay(to, msg) => {
                // forwarded as sent (the server reads nothing of it); a
                // relay to a rank outside the job is the sender's failure
                let to = to as usize;
                if to >= size {
                    let why = format!("relayed a message to rank {to} of a job of {size}");
                    failure.get_or_insert(Error::protocol(format!("rank {r} {why}")));
                    fail(&mut conns, r, why);
                    continue;
                }
                let target = by_rank[to].and_then(|t| conns.get_mut(&t));
                if let Some(t) = target.filter(|t| t.open) {
                    send(t, &Msg::Relay(r as u32, msg));
                }
            }
            Msg::Abort(_, why) => {
                c.bye = true;
                failure.get_or_insert(Error::new(ErrorKind::PeerFailed(format!(
                    "rank {r} failed: {why}"
                ))));
                fail(&mut conns, r, why);
            }
            m => {
                let why = format!("sent unexpected bootstrap message {m:?}");
                failure.get_or_insert(Error::protocol(format!("rank {r} {why}")));
                fail(&mut conns, r, why);
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A full table makes room by closing its oldest connection once that
    /// one has been pending for `EVICT_AFTER`, never a younger one (a
    /// burst of ranks does not push out its own handshakes).
    #[test]
    #[cfg_attr(miri, ignore = "sockets (isolation)")]
    fn a_full_table_closes_only_a_connection_pending_long_enough() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let now = Instant::now();
        let mut clients = Vec::new();
        let mut pending = Vec::new();
        for id in 0..MAX_PENDING {
            clients.push(TcpStream::connect(addr).unwrap());
            let (s, _) = listener.accept().unwrap();
            // the first is the oldest, but only 0.5 s old
            let age = Duration::from_millis(500) - Duration::from_millis(id as u64);
            pending.push((id, now - age, s));
        }
        let stats = ServerStats::default();
        assert!(!make_room(&mut pending, now, &stats));
        assert_eq!(pending.len(), MAX_PENDING);
        // a second later the oldest may go: its client sees the end
        let later = now + EVICT_AFTER;
        assert!(make_room(&mut pending, later, &stats));
        assert_eq!(pending.len(), MAX_PENDING - 1);
        assert!(pending.iter().all(|(id, _, _)| *id != 0));
        clients[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut clients[0], &mut b).ok(), Some(0));
        assert_eq!(stats.over_limit.load(Ordering::Relaxed), 2);
    }

    /// An extra handler is named as a handler even when settings follow
    /// the handlers in the table (udp); a setting differing by value is
    /// named with both values; equal tables have no difference.
    #[test]
    fn handlers_are_compared_before_settings() {
        let auth = "(setting) SPLITRT_UDP_AUTH=full";
        let a = t(&["#64 noop", auth]);
        let b = t(&["#64 noop", "#65 extra", auth]);
        let why = table_difference(&a, &b, 1).unwrap();
        assert!(
            why.contains("differ at entry 1: rank 0 has nothing, rank 1 has '#65 extra'")
                && why.contains("same handlers")
                && !why.contains("setting"),
            "{why}"
        );
        let c = t(&["#64 noop", "(setting) SPLITRT_UDP_AUTH=header"]);
        let why = table_difference(&a, &c, 2).unwrap();
        assert!(
            why.contains(
                "rank 0 runs with SPLITRT_UDP_AUTH=full, rank 2 with SPLITRT_UDP_AUTH=header"
            ) && why.contains("same value of this setting"),
            "{why}"
        );
        let d = t(&["#64 noop"]);
        let why = table_difference(&a, &d, 3).unwrap();
        assert!(why.contains("rank 3 with no value"), "{why}");
        assert_eq!(table_difference(&a, &a, 1), None);
        assert_eq!(table_difference(&[], &[], 1), None);
    }
}
