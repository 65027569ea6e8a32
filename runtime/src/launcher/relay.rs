//! Relaying every rank's stdout and stderr through one thread: `poll(2)`
//! over all pipes, lines written whole with their `[rank] ` prefix in one
//! `write(2)` (so lines of different ranks never interleave), a line longer
//! than [`MAX_LINE`] written in pieces (each prefixed), and a stop that
//! flushes what is buffered: the launcher does not wait for a background
//! process that inherited a rank's output.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Longest piece of a line written at once; longer lines are split.
pub const MAX_LINE: usize = 64 << 10;

struct Stream {
    fd: OwnedFd,
    prefix: Vec<u8>,
    to_stderr: bool,
    buf: Vec<u8>,
    open: bool,
}

/// The relay thread and its stop switch.
pub(super) struct Relay {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// One output stream to relay: the pipe, its prefix, and where it goes.
pub(super) struct Source {
    pub fd: OwnedFd,
    pub prefix: Option<String>,
    pub to_stderr: bool,
}

impl Relay {
    /// Start relaying `sources`.
    pub(super) fn start(sources: Vec<Source>) -> std::io::Result<Relay> {
        let streams: Vec<Stream> = sources
            .into_iter()
            .map(|s| {
                set_nonblocking(&s.fd);
                Stream {
                    fd: s.fd,
                    prefix: s.prefix.unwrap_or_default().into_bytes(),
                    to_stderr: s.to_stderr,
                    buf: Vec::new(),
                    open: true,
                }
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("splitrt-relay".into())
            .spawn(move || run(streams, &st))?;
        Ok(Relay { stop, thread })
    }

    /// Whether every stream has ended (every writer closed it).
    pub(super) fn is_done(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stop now: write what is buffered (partial lines too) and return.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
    }
}

fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: fcntl(2) F_GETFL on a descriptor we own (`fd` is borrowed
    // for the call); no memory is involved.
    let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if fl >= 0 {
        // SAFETY: F_SETFL on the same owned descriptor, with its own flags
        // plus O_NONBLOCK; no memory is involved.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) };
    }
}

/// Write `prefix` + `body` (+ a newline if it lacks one) in one call.
fn emit(out: &mut Vec<u8>, prefix: &[u8], body: &[u8], to_stderr: bool) {
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(body);
    if out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    let _ = if to_stderr {
        std::io::stderr().lock().write_all(out)
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(out).and_then(|()| o.flush())
    };
}

/// Emit every complete line in `s.buf` (and, if `all`, the rest); lines
/// longer than [`MAX_LINE`] go out in pieces.
fn drain_lines(s: &mut Stream, out: &mut Vec<u8>, all: bool) {
    let mut start = 0;
    loop {
        let rest = &s.buf[start..];
        let cut = match rest.iter().position(|&b| b == b'\n') {
            Some(i) if i < MAX_LINE => i + 1,
            _ if rest.len() >= MAX_LINE => MAX_LINE,
            _ if all && !rest.is_empty() => rest.len(),
            _ => break,
        };
        emit(out, &s.prefix, &rest[..cut], s.to_stderr);
        start += cut;
    }
    s.buf.drain(..start);
}

fn run(mut streams: Vec<Stream>, stop: &AtomicBool) {
    let mut chunk = vec![0u8; MAX_LINE];
    let mut out = Vec::with_capacity(MAX_LINE + 64);
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(streams.len());
    let mut which: Vec<usize> = Vec::with_capacity(streams.len());
    loop {
        fds.clear();
        which.clear();
        for (i, s) in streams.iter().enumerate().filter(|(_, s)| s.open) {
            fds.push(libc::pollfd {
                fd: s.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            which.push(i);
        }
        if fds.is_empty() {
            return;
        }
        let stopping = stop.load(Ordering::Acquire);
        // SAFETY: poll(2) reads and writes only the `fds` array we own, of
        // the length we pass.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        for (p, &i) in fds.iter().zip(&which) {
            if p.revents == 0 {
                continue;
            }
            let s = &mut streams[i];
            // read what is there now (bounded per round, so one chatty rank
            // cannot starve the others)
            for _ in 0..16 {
                // SAFETY: read(2) into `chunk`, which we own, at most its length.
                let got =
                    unsafe { libc::read(s.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
                if got > 0 {
                    s.buf.extend_from_slice(&chunk[..got as usize]);
                    drain_lines(s, &mut out, false);
                    continue;
                }
                let e = std::io::Error::last_os_error().kind();
                if got < 0 && matches!(e, std::io::ErrorKind::WouldBlock) {
                    break;
                }
                if got < 0 && e == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // end of stream or a read error: flush and close
                drain_lines(s, &mut out, true);
                s.open = false;
                break;
            }
        }
        if stopping {
            for s in streams.iter_mut().filter(|s| s.open) {
                drain_lines(s, &mut out, true);
            }
            return;
        }
    }
}
