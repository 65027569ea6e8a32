//! A rank's side of the rendezvous: authenticate, join, learn the peers,
//! then a reader thread records barrier releases, failure notices and
//! status answers so waiting code can check them without blocking.

use super::auth::{self, HandshakeError, Sealer};
use super::relay::{Relay, RelayInbox};
use super::wire::{Collective, Hello, Msg, Peer};
use crate::deadline::Deadline;
use crate::key::JobKey;
use crate::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the server last said about a barrier this rank asked after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarrierStatus {
    /// Barrier epoch.
    pub epoch: u64,
    /// Which collective the ranks already in it are in.
    pub kind: Option<Collective>,
    /// Ranks that have not entered it.
    pub missing: Vec<u32>,
}

#[derive(Default)]
struct Shared {
    released: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    finishing: AtomicBool,
    status: Mutex<Option<BarrierStatus>>,
}

/// A rank's connection to the bootstrap rendezvous.
pub struct Client {
    rank: usize,
    size: usize,
    writer: Arc<Mutex<(TcpStream, Sealer)>>,
    shared: Arc<Shared>,
    relays: Arc<RelayInbox>,
}

/// Connect and authenticate, retrying while the server is not there yet or
/// busy, until `deadline`.
fn connect(
    addr: &str,
    sockaddr: SocketAddr,
    key: &JobKey,
    rank: u32,
    deadline: Instant,
    timeout: Duration,
) -> Result<(TcpStream, Sealer, auth::Opener)> {
    let mut last: Option<Error> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = last.map_or_else(String::new, |e| format!(": {e}"));
            return Err(Error::new(ErrorKind::Timeout(format!(
                "no bootstrap server answered at {addr} within {:.1} s{why}",
                timeout.as_secs_f64()
            ))));
        }
        let attempt = TcpStream::connect_timeout(&sockaddr, left.max(Duration::from_millis(10)))
            .map_err(|e| Error::io(format!("connecting to the bootstrap at {addr}"), e))
            .and_then(|mut s| {
                // one deadline for the whole handshake (a server trickling
                // its bytes cannot stretch an attempt), at most 10 s
                let t = left.clamp(Duration::from_millis(10), Duration::from_secs(10));
                s.set_nodelay(true)
                    .map_err(|e| Error::io("bootstrap socket", e))?;
                let shaken =
                    auth::client(&mut Deadline::new(&mut s, Instant::now() + t), key, rank);
                // writes after the handshake keep a timeout of their own
                s.set_write_timeout(Some(t))
                    .map_err(|e| Error::io("bootstrap socket", e))?;
                Ok(shaken.map(|(seal, open)| (s, seal, open)))
            });
        match attempt {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(HandshakeError::Rejected)) => {
                return Err(Error::bootstrap(format!(
                    "the bootstrap server at {addr} rejected this rank's job key \
                     ({} differs from the job's: a rank of another job?)",
                    crate::key::ENV_JOB_KEY
                )))
            }
            Ok(Err(HandshakeError::BadServer(why))) => {
                return Err(Error::bootstrap(format!("{addr}: {why}")))
            }
            Ok(Err(HandshakeError::Transient(e))) | Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Client {
    /// Connect to `addr`, prove this rank holds `key`, introduce ourselves,
    /// and wait (at most `timeout` plus a grace period for the server's own
    /// verdict) for every rank.
    pub fn join(
        addr: &str,
        key: &JobKey,
        hello: Hello,
        timeout: Duration,
    ) -> Result<(Client, Vec<Peer>)> {
        let rank = hello.rank as usize;
        let size = hello.size as usize;
        let deadline = Instant::now() + timeout;
        let sockaddr = addr
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("resolving bootstrap address '{addr}'"), e))?
            .next()
            .ok_or_else(|| {
                Error::bootstrap(format!("bootstrap address '{addr}' resolves to nothing"))
            })?;
        let (mut stream, mut sealer, mut opener) =
            connect(addr, sockaddr, key, hello.rank, deadline, timeout)?;
        sealer
            .send(&mut stream, &Msg::Hello(hello))
            .map_err(|e| Error::io("sending bootstrap hello", e))?;
        // The server refuses at its deadline; give it a moment past ours.
        let grace = deadline + Duration::from_secs(5);
        stream
            .set_read_timeout(Some(
                grace
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10)),
            ))
            .map_err(|e| Error::io("bootstrap socket", e))?;
        let reply = opener.recv(&mut stream).map_err(|e| match e.kind() {
            ErrorKind::Io(_, io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Error::new(ErrorKind::Timeout(format!(
                    "bootstrap at {addr} did not start the job within {:.1} s",
                    timeout.as_secs_f64()
                )))
            }
            _ => e,
        })?;
        let peers = match reply {
            Some(Msg::Welcome(p)) => p,
            Some(Msg::Refuse(why)) => return Err(Error::bootstrap(why)),
            Some(m) => {
                return Err(Error::protocol(format!(
                    "bootstrap answered {m:?} to hello"
                )))
            }
            None => {
                return Err(Error::bootstrap(format!(
                    "bootstrap at {addr} closed the connection"
                )))
            }
        };
        stream
            .set_read_timeout(None)
            .map_err(|e| Error::io("bootstrap socket", e))?;
        let shared = Arc::new(Shared::default());
        let mut reader = stream
            .try_clone()
            .map_err(|e| Error::io("bootstrap socket", e))?;
        let sh = shared.clone();
        let relays = Arc::new(RelayInbox::new(size));
        let inbox = relays.clone();
        std::thread::Builder::new()
            .name("splitrt-boot".into())
            .stack_size(256 << 10)
            .spawn(move || loop {
                let fail = |why: String| {
                    *sh.failure.lock() = Some(why);
                    sh.failed.store(true, Ordering::Release);
                };
                match opener.recv(&mut reader) {
                    Ok(Some(Msg::Release(e))) => {
                        sh.released.fetch_max(e, Ordering::AcqRel);
                    }
                    Ok(Some(Msg::Pending(epoch, kind, missing))) => {
                        *sh.status.lock() = Some(BarrierStatus {
                            epoch,
                            kind,
                            missing,
                        });
                    }
                    Ok(Some(Msg::Abort(r, why))) => return fail(format!("rank {r} failed: {why}")),
                    Ok(Some(Msg::Relay(from, msg))) => inbox.push(from as usize, msg),
                    Ok(Some(m)) => return fail(format!("unexpected bootstrap message {m:?}")),
                    Ok(None) | Err(_) => {
                        if !sh.finishing.load(Ordering::Acquire) {
                            fail(
                                "lost the connection to the bootstrap server (launcher gone?)"
                                    .into(),
                            );
                        }
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("spawning bootstrap thread", e))?;
        Ok((
            Client {
                rank,
                size,
                writer: Arc::new(Mutex::new((stream, sealer))),
                shared,
                relays,
            },
            peers,
        ))
    }

    fn send(&self, m: &Msg) -> Result<()> {
        let mut w = self.writer.lock();
        let (stream, sealer) = &mut *w;
        sealer
            .send(stream, m)
            .map_err(|e| Error::io("writing to bootstrap server", e).at_rank(self.rank))
    }

    /// Enter barrier `epoch` (epochs count up from 1) of collective `kind`.
    pub fn enter_barrier(&self, kind: Collective, epoch: u64) -> Result<()> {
        self.send(&Msg::Barrier(kind, epoch))
    }

    /// Whether barrier `epoch` is complete.
    pub fn released(&self, epoch: u64) -> bool {
        self.shared.released.load(Ordering::Acquire) >= epoch
    }

    /// Ask the server which ranks barrier `epoch` still waits for; the
    /// answer shows up in [`status`](Self::status).
    pub fn ask_status(&self, epoch: u64) -> Result<()> {
        self.send(&Msg::Status(epoch))
    }

    /// The server's latest answer to [`ask_status`](Self::ask_status).
    pub fn status(&self) -> Option<BarrierStatus> {
        self.shared.status.lock().clone()
    }

    /// Whether the job failed (one load; [`failure`](Self::failure) says why).
    #[inline]
    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// If the job failed, why.
    pub fn failure(&self) -> Option<Error> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        let why = self.shared.failure.lock().clone().unwrap_or_default();
        Some(Error::new(ErrorKind::PeerFailed(why)).at_rank(self.rank))
    }

    /// Tell the others this rank failed.
    pub fn abort(&self, why: &str) {
        self.shared.finishing.store(true, Ordering::Release);
        let _ = self.send(&Msg::Abort(self.rank as u32, why.to_string()));
    }

    /// A handle on this connection's relay (messages to and from other
    /// ranks through the rendezvous, [`Relay`]).
    pub fn relay(&self) -> Relay {
        Relay::new(
            self.rank,
            self.size,
            self.writer.clone(),
            self.relays.clone(),
        )
    }

    /// Say goodbye after the exit barrier (best effort: the job is done).
    pub fn bye(&self) {
        self.shared.finishing.store(true, Ordering::Release);
        let _ = self.send(&Msg::Bye);
    }
}
