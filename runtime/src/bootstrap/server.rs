//! The rendezvous host. It runs in a thread of the launcher: it gathers
//! every rank's [`Hello`], refuses a job whose ranks disagree (size, job id,
//! registration table) or that is incomplete by the deadline, then serves
//! barriers and tells every rank when one of them is lost.

use super::wire::{Hello, Msg, Peer};
use crate::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A bootstrap rendezvous bound to a TCP port.
pub struct Server {
    listener: TcpListener,
    culprit: Culprit,
}

/// The first rank that aborted or was lost after the job started, shared
/// with the launcher so it can blame the cause rather than the ranks that
/// merely noticed.
pub type Culprit = Arc<Mutex<Option<usize>>>;

enum Event {
    Connected(usize, TcpStream),
    Message(usize, Msg),
    Closed(usize, Option<Error>),
}

impl Server {
    /// Bind to `addr` (use port 0 for an ephemeral port).
    pub fn bind(addr: &str) -> Result<Server> {
        let listener =
            TcpListener::bind(addr).map_err(|e| Error::io(format!("bootstrap bind {addr}"), e))?;
        Ok(Server {
            listener,
            culprit: Culprit::default(),
        })
    }

    /// Where the first failed rank will be recorded.
    pub fn culprit(&self) -> Culprit {
        self.culprit.clone()
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
        let listener = self.listener;
        let acceptor = {
            let (tx, stop) = (tx.clone(), stop.clone());
            listener
                .set_nonblocking(true)
                .map_err(|e| Error::io("bootstrap listener", e))?;
            std::thread::Builder::new()
                .name("splitrt-boot-accept".into())
                .spawn(move || accept_loop(listener, tx, stop))
                .map_err(|e| Error::io("spawning bootstrap thread", e))?
        };
        drop(tx);
        let result = serve(size, timeout, &rx, &self.culprit);
        stop.store(true, Ordering::Relaxed);
        let _ = acceptor.join();
        result
    }
}

fn accept_loop(listener: TcpListener, tx: mpsc::Sender<Event>, stop: Arc<AtomicBool>) {
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_nodelay(true);
                let id = next;
                next += 1;
                let Ok(mut reader) = stream.try_clone() else {
                    continue;
                };
                if tx.send(Event::Connected(id, stream)).is_err() {
                    return;
                }
                let tx = tx.clone();
                let _ = std::thread::Builder::new()
                    .name("splitrt-boot-conn".into())
                    .spawn(move || loop {
                        match Msg::read_from(&mut reader) {
                            Ok(Some(m)) => {
                                if tx.send(Event::Message(id, m)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => return drop(tx.send(Event::Closed(id, None))),
                            Err(e) => return drop(tx.send(Event::Closed(id, Some(e)))),
                        }
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

struct Conn {
    stream: TcpStream,
    rank: Option<usize>,
    bye: bool,
    open: bool,
}

fn send(c: &mut Conn, m: &Msg) {
    // A rank that cannot be written to is gone; its reader reports it.
    let _ = c.stream.write_all(&m.encode());
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

/// First difference between two registration tables, as a sentence.
fn table_difference(a: &[String], b: &[String], rank: usize) -> Option<String> {
    let n = a.len().max(b.len());
    (0..n).find(|&i| a.get(i) != b.get(i)).map(|i| {
        let show = |x: Option<&String>| x.map_or("nothing".to_string(), |s| format!("'{s}'"));
        format!(
            "registration tables differ at entry {i}: rank 0 has {}, rank {rank} has {} \
             (every rank must register the same handlers in the same order)",
            show(a.get(i)),
            show(b.get(i))
        )
    })
}

fn serve(
    size: usize,
    timeout: Duration,
    rx: &mpsc::Receiver<Event>,
    culprit: &Culprit,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut conns: BTreeMap<usize, Conn> = BTreeMap::new();
    let mut hellos: BTreeMap<usize, Hello> = BTreeMap::new();

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
            Event::Connected(id, stream) => {
                conns.insert(
                    id,
                    Conn {
                        stream,
                        rank: None,
                        bye: false,
                        open: true,
                    },
                );
            }
            Event::Message(id, Msg::Hello(h)) => {
                let r = h.rank as usize;
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
                if hellos.contains_key(&r) {
                    return refuse(&mut conns, format!("rank {r} joined twice"));
                }
                if let Some(c) = conns.get_mut(&id) {
                    c.rank = Some(r);
                }
                hellos.insert(r, h);
            }
            Event::Message(id, Msg::Abort(r, why)) => {
                if let Some(c) = conns.get_mut(&id) {
                    c.bye = true;
                }
                return refuse(&mut conns, format!("rank {r} aborted during start: {why}"));
            }
            Event::Message(_, m) => {
                return refuse(
                    &mut conns,
                    format!("unexpected {m:?} before the job started"),
                );
            }
            Event::Closed(id, err) => {
                if let Some(c) = conns.remove(&id) {
                    if let Some(r) = c.rank {
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
    broadcast(&mut conns, &Msg::Welcome(peers));
    // connections that never said hello take no part in the running job
    conns.retain(|_, c| c.rank.is_some());

    // Phase 2: barriers, goodbyes, failures.
    let mut waiting: BTreeMap<u64, usize> = BTreeMap::new();
    let mut failure: Option<Error> = None;
    // Done once every rank said goodbye or is gone (a rank hosting this
    // server keeps its own connection open while it waits for us).
    while conns.values().any(|c| c.open && !c.bye) {
        let Ok(ev) = rx.recv() else { break };
        match ev {
            Event::Connected(_, stream) => {
                let mut c = Conn {
                    stream,
                    rank: None,
                    bye: true,
                    open: false,
                };
                send(&mut c, &Msg::Refuse("the job has already started".into()));
            }
            Event::Message(_, Msg::Barrier(epoch)) => {
                let n = waiting.entry(epoch).or_default();
                *n += 1;
                if *n == size {
                    waiting.remove(&epoch);
                    broadcast(&mut conns, &Msg::Release(epoch));
                }
            }
            Event::Message(id, Msg::Bye) => {
                if let Some(c) = conns.get_mut(&id) {
                    c.bye = true;
                }
            }
            Event::Message(id, Msg::Abort(r, why)) => {
                if let Some(c) = conns.get_mut(&id) {
                    c.bye = true;
                }
                culprit.lock().get_or_insert(r as usize);
                broadcast(&mut conns, &Msg::Abort(r, why.clone()));
                failure.get_or_insert(Error::new(ErrorKind::PeerFailed(format!(
                    "rank {r} failed: {why}"
                ))));
            }
            Event::Message(id, m) => {
                let r = conns.get(&id).and_then(|c| c.rank).unwrap_or(usize::MAX);
                let why = format!("rank {r} sent unexpected bootstrap message {m:?}");
                broadcast(&mut conns, &Msg::Abort(r as u32, why.clone()));
                failure.get_or_insert(Error::protocol(why));
            }
            Event::Closed(id, err) => {
                let Some(c) = conns.get_mut(&id) else {
                    continue;
                };
                c.open = false;
                // A connection that never said hello (a liveness probe, a
                // stray client) is nobody's: its end is no rank's failure.
                if c.rank.is_none() {
                    conns.remove(&id);
                    continue;
                }
                if !c.bye {
                    let r = c.rank.unwrap_or(usize::MAX);
                    let why = match err {
                        Some(e) => format!("lost its bootstrap connection ({e})"),
                        None => "exited or was killed before finishing".to_string(),
                    };
                    if let Some(r) = c.rank {
                        culprit.lock().get_or_insert(r);
                    }
                    broadcast(&mut conns, &Msg::Abort(r as u32, why.clone()));
                    failure.get_or_insert(Error::new(ErrorKind::PeerFailed(format!(
                        "rank {r} {why}"
                    ))));
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}
