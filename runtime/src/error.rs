//! The one error type of splitrt: it names the rank, the peer (where one is
//! involved) and the cause.

use std::fmt;

/// What went wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting (flag or `SPLITRT_*` variable) is malformed or out of range.
    Config(String),
    /// The bootstrap rendezvous failed or refused the job.
    Bootstrap(String),
    /// A bounded wait ran out.
    Timeout(String),
    /// Another rank died or aborted the job.
    PeerFailed(String),
    /// An operating-system call failed.
    Io(String, std::io::Error),
    /// A malformed or unexpected message arrived.
    Protocol(String),
    /// An access falls outside a rank's segment.
    OutOfBounds {
        /// First byte of the access (segment offset).
        offset: u64,
        /// Length of the access in bytes.
        len: u64,
        /// Size of the target segment in bytes.
        segment_len: u64,
    },
    /// The API was used in a way the types could not rule out (wrong handler
    /// kind, wrong argument count, payload too large, send from a handler...).
    Usage(String),
}

/// The splitrt error: cause plus the rank that saw it and the peer involved.
///
/// ```
/// use splitrt_runtime::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::Usage("bad".into())).at_rank(2).with_peer(5);
/// assert_eq!(e.to_string(), "rank 2 (peer 5): usage error: bad");
/// ```
///
/// One pointer wide (the details are boxed): a `Result<()>` is returned in
/// a register, and the hot paths' `Ok` costs no 72-byte return slot.
pub struct Error(Box<Detail>);

struct Detail {
    rank: Option<usize>,
    peer: Option<usize>,
    kind: ErrorKind,
}

static_assertions::assert_eq_size!(Result<()>, usize);

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("rank", &self.0.rank)
            .field("peer", &self.0.peer)
            .field("kind", &self.0.kind)
            .finish()
    }
}

/// `Result` with the splitrt [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with no rank attached yet.
    pub fn new(kind: ErrorKind) -> Self {
        Error(Box::new(Detail {
            rank: None,
            peer: None,
            kind,
        }))
    }
    /// Shorthand for [`ErrorKind::Usage`].
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage(msg.into()))
    }
    /// Shorthand for [`ErrorKind::Config`].
    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config(msg.into()))
    }
    /// Shorthand for [`ErrorKind::Bootstrap`].
    pub fn bootstrap(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Bootstrap(msg.into()))
    }
    /// Shorthand for [`ErrorKind::Protocol`].
    pub fn protocol(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol(msg.into()))
    }
    /// Shorthand for [`ErrorKind::Io`] with a description of what was attempted.
    pub fn io(what: impl Into<String>, e: std::io::Error) -> Self {
        Self::new(ErrorKind::Io(what.into(), e))
    }
    /// Attach the rank that saw the error (keeps an existing one).
    pub fn at_rank(mut self, rank: usize) -> Self {
        self.0.rank.get_or_insert(rank);
        self
    }
    /// Attach the peer involved (keeps an existing one).
    pub fn with_peer(mut self, peer: usize) -> Self {
        self.0.peer.get_or_insert(peer);
        self
    }
    /// The cause.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }
    /// The rank that saw the error, if known.
    pub fn rank(&self) -> Option<usize> {
        self.0.rank
    }
    /// The peer involved, if any.
    pub fn peer(&self) -> Option<usize> {
        self.0.peer
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Config(m) => write!(f, "configuration error: {m}"),
            ErrorKind::Bootstrap(m) => write!(f, "bootstrap failed: {m}"),
            ErrorKind::Timeout(m) => write!(f, "timed out: {m}"),
            ErrorKind::PeerFailed(m) => write!(f, "job aborted: {m}"),
            ErrorKind::Io(what, e) => write!(f, "{what}: {e}"),
            ErrorKind::Protocol(m) => write!(f, "protocol error: {m}"),
            ErrorKind::OutOfBounds {
                offset,
                len,
                segment_len,
            } => write!(
                f,
                "access of {len} B at segment offset {offset:#x} is outside the {segment_len} B segment"
            ),
            ErrorKind::Usage(m) => write!(f, "usage error: {m}"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        match (d.rank, d.peer) {
            (Some(r), Some(p)) => write!(f, "rank {r} (peer {p}): {}", d.kind),
            (Some(r), None) => write!(f, "rank {r}: {}", d.kind),
            (None, Some(p)) => write!(f, "peer {p}: {}", d.kind),
            (None, None) => write!(f, "{}", d.kind),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.kind {
            ErrorKind::Io(_, e) => Some(e),
            _ => None,
        }
    }
}
