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
#[derive(Debug)]
pub struct Error {
    rank: Option<usize>,
    peer: Option<usize>,
    kind: ErrorKind,
}

/// `Result` with the splitrt [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with no rank attached yet.
    pub fn new(kind: ErrorKind) -> Self {
        Error {
            rank: None,
            peer: None,
            kind,
        }
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
        self.rank.get_or_insert(rank);
        self
    }
    /// Attach the peer involved (keeps an existing one).
    pub fn with_peer(mut self, peer: usize) -> Self {
        self.peer.get_or_insert(peer);
        self
    }
    /// The cause.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
    /// The rank that saw the error, if known.
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }
    /// The peer involved, if any.
    pub fn peer(&self) -> Option<usize> {
        self.peer
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
        match (self.rank, self.peer) {
            (Some(r), Some(p)) => write!(f, "rank {r} (peer {p}): {}", self.kind),
            (Some(r), None) => write!(f, "rank {r}: {}", self.kind),
            (None, Some(p)) => write!(f, "peer {p}: {}", self.kind),
            (None, None) => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(_, e) => Some(e),
            _ => None,
        }
    }
}
