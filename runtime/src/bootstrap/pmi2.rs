//! A PMI-2 client (the wire protocol Slurm's `srun --mpi=pmi2` serves on
//! the socket named by `PMI_FD`), used only to hand rank 0's rendezvous
//! address and the job key to every rank: rank 0 puts them in the job's
//! key-value space, everyone fences, the others get them.
//!
//! Wire format: one PMI-1 style line to start
//! (`cmd=init pmi_version=2 pmi_subversion=0\n`, answered by
//! `cmd=response_to_init rc=0 ...\n`), then commands and answers framed by a
//! 6-character decimal length: `cmd=fullinit;pmijobid=J;pmirank=R;threaded=FALSE;`,
//! `cmd=kvs-put;key=K;value=V;`, `cmd=kvs-fence;`,
//! `cmd=kvs-get;jobid=J;srcid=-1;key=K;`, `cmd=finalize;`; every answer
//! carries `rc=0` on success. The process manager is trusted, but its
//! answers are still length-checked and parsed without panicking.

use crate::deadline::Deadline;
use crate::{Error, ErrorKind, Result};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether this process has taken ownership of `PMI_FD` (see
/// [`Pmi2::init`]).
static PMI_FD_TAKEN: AtomicBool = AtomicBool::new(false);

/// Largest answer accepted from the process manager.
const MAX_MSG: usize = 64 << 10;

/// Time `finalize` is given even when the exchange used up its deadline.
const FINALIZE_GRACE: Duration = Duration::from_secs(1);

/// A connection to the PMI-2 server of this job step.
pub struct Pmi2 {
    sock: UnixStream,
    /// When the whole exchange (init to the last get) must be over.
    deadline: Instant,
    /// The time the exchange was given, for messages.
    timeout: Duration,
    jobid: String,
    /// This process's rank as the process manager knows it.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
}

fn err(what: impl Into<String>) -> Error {
    Error::bootstrap(format!("PMI-2: {}", what.into()))
}

/// `key=value` fields of a `;`-separated answer.
fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.split(';').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

impl Pmi2 {
    /// Whether this process was started with a PMI-2 socket (`PMI_FD`).
    pub fn available() -> bool {
        std::env::var_os("PMI_FD").is_some()
    }

    /// Connect through `PMI_FD` and introduce this rank (`PMI_RANK`,
    /// `PMI_JOBID`). The whole exchange, from here to the last
    /// [`get`](Pmi2::get), must end within `timeout`: a process manager
    /// that trickles its answers is given up on then, not kept waiting
    /// for one read at a time.
    ///
    /// The descriptor is taken once per process: a second call (a retried
    /// attach) is an error, since the first connection closed it and its
    /// number may name an unrelated descriptor by now.
    pub fn init(timeout: Duration) -> Result<Pmi2> {
        let var = |k: &str| std::env::var(k).map_err(|_| err(format!("{k} is not set")));
        let fd: i32 = var("PMI_FD")?
            .trim()
            .parse()
            .map_err(|_| err("PMI_FD is not a file descriptor number"))?;
        let rank = var("PMI_RANK")?;
        let jobid = std::env::var("PMI_JOBID").unwrap_or_default();
        // SAFETY: `libc::stat` is plain integers: all-zero bytes are a
        // valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat(2) on any descriptor number (an unopened one gives
        // EBADF) only writes into `st`, a struct we own of the size libc
        // expects.
        let is_socket = unsafe { libc::fstat(fd, &mut st) } == 0
            && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK;
        if fd < 3 || !is_socket {
            return Err(err(format!("PMI_FD={fd} is not an open socket")));
        }
        // Once per process: after the first owner closed it, the number
        // may name any descriptor opened since (a retried attach would
        // wrap, write to and close it).
        if PMI_FD_TAKEN.swap(true, Ordering::AcqRel) {
            return Err(err(format!(
                "PMI_FD={fd} was already taken by an earlier attach in this process, and that \
                 connection is closed (the number may now name another descriptor); PMI-2 \
                 gives a process one connection, so a second attach cannot use it"
            )));
        }
        // SAFETY: the process manager handed this socket to us for PMI and
        // nothing else in the process uses it; PMI_FD_TAKEN makes this the
        // only time the number is wrapped.
        let sock = unsafe { UnixStream::from_raw_fd(fd) };
        Pmi2::over(sock, &rank, jobid, timeout)
    }

    /// [`Pmi2::init`] on a socket already taken.
    fn over(sock: UnixStream, rank: &str, jobid: String, timeout: Duration) -> Result<Pmi2> {
        let mut p = Pmi2 {
            sock,
            deadline: Instant::now() + timeout,
            timeout,
            jobid,
            rank: 0,
            size: 0,
        };
        p.timed()
            .write_all(b"cmd=init pmi_version=2 pmi_subversion=0\n")
            .map_err(|e| p.io(e))?;
        let line = p.read_line()?;
        if field(&line.replace(' ', ";"), "rc") != Some("0") {
            return Err(err(format!(
                "the process manager refused PMI version 2: {line:?}"
            )));
        }
        let a = p.call(&format!(
            "cmd=fullinit;pmijobid={};pmirank={rank};threaded=FALSE;",
            p.jobid
        ))?;
        let num = |k: &str| {
            field(&a, k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| err(format!("fullinit answer without {k}: {a:?}")))
        };
        p.rank = num("rank")?;
        p.size = num("size")?;
        Ok(p)
    }

    /// The socket, every read and write bounded by the exchange's deadline.
    fn timed(&mut self) -> Deadline<'_, UnixStream> {
        Deadline::new(&mut self.sock, self.deadline)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while b[0] != b'\n' {
            self.timed().read_exact(&mut b).map_err(|e| self.io(e))?;
            line.push(b[0]);
            if line.len() > MAX_MSG {
                return Err(err("init answer too long"));
            }
        }
        String::from_utf8(line).map_err(|_| err("init answer is not UTF-8"))
    }

    fn io(&self, e: std::io::Error) -> Error {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            Error::new(ErrorKind::Timeout(format!(
                "PMI-2: the exchange with the process manager did not complete within {:.1} s \
                 ({}; did every rank start?)",
                self.timeout.as_secs_f64(),
                crate::config::ENV_BOOTSTRAP_TIMEOUT
            )))
        } else {
            Error::io("PMI-2 socket", e)
        }
    }

    /// Send one command, return its answer; an answer with `rc` other than
    /// 0 is an error.
    fn call(&mut self, cmd: &str) -> Result<String> {
        if cmd.len() > 999_999 {
            return Err(err("command too long"));
        }
        let framed = format!("{:<6}{cmd}", cmd.len());
        self.timed()
            .write_all(framed.as_bytes())
            .map_err(|e| self.io(e))?;
        let mut len = [0u8; 6];
        self.timed().read_exact(&mut len).map_err(|e| self.io(e))?;
        let n: usize = std::str::from_utf8(&len)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|&n| n <= MAX_MSG)
            .ok_or_else(|| err(format!("bad answer length {len:?}")))?;
        let mut body = vec![0u8; n];
        self.timed().read_exact(&mut body).map_err(|e| self.io(e))?;
        let a = String::from_utf8(body).map_err(|_| err("answer is not UTF-8"))?;
        match field(&a, "rc") {
            Some("0") => Ok(a),
            _ => Err(err(format!("'{cmd}' failed: {a}"))),
        }
    }

    /// Publish `key` = `value` (no `;` or `=` in either).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        if [key, value]
            .iter()
            .any(|s| s.contains([';', '=']) || s.is_empty())
        {
            return Err(err(format!("cannot put {key:?}")));
        }
        self.call(&format!("cmd=kvs-put;key={key};value={value};"))
            .map(drop)
    }

    /// Wait until every rank's puts are visible (a collective).
    pub fn fence(&mut self) -> Result<()> {
        self.call("cmd=kvs-fence;").map(drop)
    }

    /// Read `key` (after a fence); `Ok(None)` if nobody put it.
    pub fn get(&mut self, key: &str) -> Result<Option<String>> {
        let a = self.call(&format!(
            "cmd=kvs-get;jobid={};srcid=-1;key={key};",
            self.jobid
        ))?;
        if field(&a, "found") != Some("TRUE") {
            return Ok(None);
        }
        Ok(field(&a, "value").map(str::to_string))
    }

    /// Say goodbye to the process manager (best effort, within what is
    /// left of the deadline or at least one second).
    pub fn finalize(mut self) {
        self.deadline = self.deadline.max(Instant::now() + FINALIZE_GRACE);
        let _ = self.call("cmd=finalize;");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_and_missing_ones_are_none() {
        let a = "cmd=kvs-get-response;rc=0;found=TRUE;value=1.2.3.4:5 ab;";
        assert_eq!(field(a, "rc"), Some("0"));
        assert_eq!(field(a, "value"), Some("1.2.3.4:5 ab"));
        assert_eq!(field(a, "nope"), None);
        assert_eq!(field("", "rc"), None);
        assert_eq!(field(";;==;rc", "rc"), None);
    }

    /// A process manager that answers one byte every 0.8 x the timeout
    /// (a per-read timeout never fires) must not hold the rank past the
    /// timeout: the whole exchange has one deadline.
    #[test]
    #[cfg_attr(miri, ignore = "a Unix socket pair (isolation)")]
    fn a_trickling_process_manager_is_given_up_on_at_the_timeout() {
        let timeout = Duration::from_millis(500);
        let (ours, mut pm) = UnixStream::pair().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let _ = pm.read(&mut buf);
            let answer = b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n";
            // at most ~8 s of trickle, then silence until the client is done
            for b in answer.iter().take(20) {
                if pm.write_all(&[*b]).is_err() {
                    return;
                }
                match done_rx.recv_timeout(timeout.mul_f64(0.8)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
            let _ = done_rx.recv();
        });
        let start = std::time::Instant::now();
        let r = Pmi2::over(ours, "0", String::new(), timeout);
        let took = start.elapsed();
        drop(done_tx);
        t.join().unwrap();
        let e = r.err().expect("init succeeded against a trickle");
        assert!(
            took < timeout * 3,
            "a trickling process manager held the rank {took:?} (timeout {timeout:?}): {e}"
        );
        assert!(matches!(e.kind(), ErrorKind::Timeout(_)), "{e}");
    }

    /// A fake process manager on a socket pair: the client's framing and
    /// parsing against canned answers, and a garbage answer refused.
    #[test]
    #[cfg_attr(miri, ignore = "a Unix socket pair and fstat(2) on it (isolation)")]
    fn talks_to_a_canned_process_manager_and_refuses_garbage() {
        use std::os::fd::{AsRawFd, IntoRawFd};
        let (ours, mut pm) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let n = pm.read(&mut buf).unwrap();
            assert!(std::str::from_utf8(&buf[..n])
                .unwrap()
                .starts_with("cmd=init"));
            pm.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
                .unwrap();
            let mut len = [0u8; 6];
            pm.read_exact(&mut len).unwrap();
            let n: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
            let mut cmd = vec![0u8; n];
            pm.read_exact(&mut cmd).unwrap();
            assert!(String::from_utf8(cmd).unwrap().contains("pmirank=3"));
            let a = "cmd=fullinit-response;rc=0;rank=3;size=4;";
            pm.write_all(format!("{:<6}{a}", a.len()).as_bytes())
                .unwrap();
            pm.read_exact(&mut len).unwrap();
            let n: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
            let mut cmd = vec![0u8; n];
            pm.read_exact(&mut cmd).unwrap();
            pm.write_all(b"999999garbage").unwrap();
        });
        // run init against the fake through the same code path as PMI_FD
        let fd = ours.into_raw_fd();
        std::env::set_var("PMI_FD", fd.to_string());
        std::env::set_var("PMI_RANK", "3");
        let mut p = Pmi2::init(Duration::from_secs(5)).unwrap();
        assert_eq!((p.rank, p.size), (3, 4));
        let e = p.fence().unwrap_err();
        assert!(e.to_string().contains("bad answer length"), "{e}");
        t.join().unwrap();
        // A retried attach: the first connection is gone (its descriptor
        // closed) and the number `PMI_FD` holds now names an unrelated
        // socket (here made so on purpose: a number reused by chance is
        // the same, but dup2 onto it could hit another test's descriptor).
        // Taking `PMI_FD` again would wrap, write to and close that socket.
        drop(p);
        let (other, mut peer) = UnixStream::pair().unwrap();
        std::env::set_var("PMI_FD", other.as_raw_fd().to_string());
        let e = Pmi2::init(Duration::from_millis(200))
            .err()
            .expect("a second attach adopted PMI_FD again");
        peer.set_nonblocking(true).unwrap();
        let mut b = [0u8; 64];
        let got = peer.read(&mut b).map_err(|e| e.kind());
        assert_eq!(
            got,
            Err(std::io::ErrorKind::WouldBlock),
            "the unrelated socket was written to"
        );
        assert!(e.to_string().contains("already taken"), "{e}");
        // the unrelated socket is still open: `other` closes it (an
        // abort, "owned file descriptor already closed", if init had)
        drop(other);
        std::env::remove_var("PMI_FD");
        std::env::remove_var("PMI_RANK");
    }
}
