//! A rank's side of the rendezvous: join, learn the peers, then a reader
//! thread records barrier releases and failure notices so waiting code can
//! check them without blocking.

use super::wire::{Hello, Msg, Peer};
use crate::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    released: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    finishing: AtomicBool,
}

/// A rank's connection to the bootstrap rendezvous.
pub struct Client {
    rank: usize,
    stream: Mutex<TcpStream>,
    shared: Arc<Shared>,
}

impl Client {
    /// Connect to `addr`, introduce ourselves, and wait (at most `timeout`
    /// plus a grace period for the server's own verdict) for every rank.
    pub fn join(addr: &str, hello: Hello, timeout: Duration) -> Result<(Client, Vec<Peer>)> {
        let rank = hello.rank as usize;
        let deadline = Instant::now() + timeout;
        let sockaddr = addr
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("resolving bootstrap address '{addr}'"), e))?
            .next()
            .ok_or_else(|| {
                Error::bootstrap(format!("bootstrap address '{addr}' resolves to nothing"))
            })?;
        let mut stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&sockaddr, left.max(Duration::from_millis(10))) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(Error::new(ErrorKind::Timeout(format!(
                        "no bootstrap server at {addr} within {:.1} s: {e}",
                        timeout.as_secs_f64()
                    ))))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let _ = stream.set_nodelay(true);
        Msg::Hello(hello)
            .write_to(&mut stream)
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
        let reply = Msg::read_from(&mut stream).map_err(|e| match e.kind() {
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
        std::thread::Builder::new()
            .name("splitrt-boot".into())
            .spawn(move || loop {
                let fail = |why: String| {
                    *sh.failure.lock() = Some(why);
                    sh.failed.store(true, Ordering::Release);
                };
                match Msg::read_from(&mut reader) {
                    Ok(Some(Msg::Release(e))) => {
                        sh.released.fetch_max(e, Ordering::AcqRel);
                    }
                    Ok(Some(Msg::Abort(r, why))) => return fail(format!("rank {r} failed: {why}")),
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
                stream: Mutex::new(stream),
                shared,
            },
            peers,
        ))
    }

    fn send(&self, m: &Msg) -> Result<()> {
        self.stream
            .lock()
            .write_all(&m.encode())
            .map_err(|e| Error::io("writing to bootstrap server", e).at_rank(self.rank))
    }

    /// Enter barrier `epoch` (epochs count up from 1).
    pub fn enter_barrier(&self, epoch: u64) -> Result<()> {
        self.send(&Msg::Barrier(epoch))
    }

    /// Whether barrier `epoch` is complete.
    pub fn released(&self, epoch: u64) -> bool {
        self.shared.released.load(Ordering::Acquire) >= epoch
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

    /// Say goodbye after the exit barrier (best effort: the job is done).
    pub fn bye(&self) {
        self.shared.finishing.store(true, Ordering::Release);
        let _ = self.send(&Msg::Bye);
    }
}
