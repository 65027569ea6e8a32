//! What a handler receives and what a sender attaches.

/// The payload of an outgoing message; its variant must match the kind the
/// target handler was registered with.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// A Short message: argument words only.
    None,
    /// A Medium message: at most [`Endpoint::max_medium`] bytes, which the
    /// handler reads in place.
    ///
    /// [`Endpoint::max_medium`]: crate::Endpoint::max_medium
    Medium(&'a [u8]),
    /// A Long message: `data` is copied to `offset` in the target rank's
    /// segment before the handler runs.
    Long {
        /// Bytes to deposit.
        data: &'a [u8],
        /// Segment offset at the target (checked at the sender).
        offset: u64,
    },
}

/// A message as its handler sees it.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    pub(crate) src: usize,
    pub(crate) args: &'a [u64],
    pub(crate) payload: &'a [u8],
    pub(crate) offset: Option<u64>,
}

impl<'a> Incoming<'a> {
    /// The sending rank.
    pub fn src(&self) -> usize {
        self.src
    }
    /// The argument words.
    pub fn args(&self) -> &'a [u64] {
        self.args
    }
    /// Argument `i` (panics if the handler was registered with fewer).
    pub fn arg(&self, i: usize) -> u64 {
        self.args[i]
    }
    /// The payload: read in place for Medium; for Long, the deposited bytes
    /// in this rank's segment. Empty for Short.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// For Long: the segment offset the sender gave, verbatim.
    pub fn long_offset(&self) -> Option<u64> {
        self.offset
    }
}
