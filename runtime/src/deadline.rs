//! A whole-exchange deadline on a blocking socket. A socket timeout bounds
//! one read or write, so a peer that sends one byte just before each
//! timeout keeps an exchange alive for as long as it likes; [`Deadline`]
//! sets each read's and write's timeout to the time left until one fixed
//! instant, and fails with [`TimedOut`](std::io::ErrorKind::TimedOut)
//! once that instant has passed.
//!
//! Used by the bootstrap (the rendezvous handshake, the PMI-2 exchange)
//! and by `splitrt-vys` (the ring handover).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A blocking socket whose per-operation timeouts can be set.
pub trait TimedSocket: Read + Write {
    /// As [`TcpStream::set_read_timeout`].
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    /// As [`TcpStream::set_write_timeout`].
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
}

impl TimedSocket for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

impl TimedSocket for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

/// `socket`, every read and write of which ends by `at`. The socket's
/// timeouts are left set to whatever the last operation needed: callers
/// that go on using the socket without a deadline set their own.
pub struct Deadline<'a, S: TimedSocket> {
    socket: &'a mut S,
    at: Instant,
}

impl<'a, S: TimedSocket> Deadline<'a, S> {
    /// Bound every operation on `socket` through the result by `at`.
    pub fn new(socket: &'a mut S, at: Instant) -> Self {
        Deadline { socket, at }
    }

    /// Time left, or `TimedOut` once the deadline has passed (for an
    /// operation outside [`Read`] / [`Write`], e.g. passing a descriptor,
    /// whose timeout the caller sets from it).
    pub fn left(&self) -> io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the exchange did not complete before its deadline",
            ))
        } else {
            Ok(left)
        }
    }
}

impl<S: TimedSocket> Read for Deadline<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.socket.read_timeout(left)?;
        self.socket.read(buf)
    }
}

impl<S: TimedSocket> Write for Deadline<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.socket.write_timeout(left)?;
        self.socket.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer trickling one byte per 60 ms never lets a 60 ms-per-read
    /// timeout fire, but a 200 ms deadline ends the read of 64 bytes in
    /// about 200 ms.
    #[test]
    #[cfg_attr(miri, ignore = "sockets and threads (isolation)")]
    fn a_trickle_ends_at_the_deadline() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                if theirs.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(60));
            }
        });
        let start = Instant::now();
        let mut buf = [0u8; 64];
        let e = Deadline::new(&mut ours, start + Duration::from_millis(200))
            .read_exact(&mut buf)
            .unwrap_err();
        let took = start.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(ours);
        t.join().unwrap();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }
}
