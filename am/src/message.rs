//! What a handler receives and what a sender attaches.

use splitrt_runtime::fabric::SegmentBytes;
use splitrt_runtime::view::LocalView;

/// The payload of an outgoing message; its variant must match the kind the
/// target handler was registered with.
///
/// `#[non_exhaustive]`: later versions may add kinds of payload (as
/// `FromSegment` was added), so a `match` on one outside this crate needs
/// a wildcard arm; building the variants is not restricted.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
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
    /// A Medium message whose bytes lie in this rank's segment, copied
    /// from there by raw copies, with no `&[u8]` over segment memory in
    /// between (see [`SegmentBytes`]). Over UDP the fabric reads each
    /// piece as it frames it (on each try, so a send that waits for room
    /// sends the bytes as they are at the try that goes out, and a message
    /// the window cuts, whose rest waits while handlers run, may mix bytes
    /// from before and after what those handlers or a Long deposit wrote
    /// meanwhile); off UDP the AM layer copies them once, before the first
    /// try, and sends that copy (the bytes as they were at the call). The
    /// handler receives an ordinary Medium.
    FromSegment(SegmentBytes<'a>),
}

impl Payload<'_> {
    /// Payload bytes (0 for `None`).
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Medium(d) => d.len(),
            Payload::Long { data, .. } => data.len(),
            Payload::FromSegment(s) => s.len(),
        }
    }

    /// Whether it carries no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A message as its handler sees it.
///
/// Where the payload lies decides how a handler may read it:
///
/// * **Medium**: [`payload`](Self::payload) is a plain `&[u8]`, in place
///   in the ring cell or the landing zone it arrived in (or a reassembly
///   buffer). That is sound because the ring protocol keeps the sender
///   off those bytes until the handler returned: the cell (and the zone
///   bytes it announced) are released to the sender only after the
///   handler, so nobody writes them while the reference lives.
/// * **Long**: the payload was deposited in this rank's segment, which
///   native puts, stores, atomics, other Longs, other threads and other
///   ranks may write at any time, also while the handler runs. It is read
///   through a [`LocalView`] ([`long_payload`](Self::long_payload)),
///   never as a `&[u8]`.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    pub(crate) src: usize,
    pub(crate) args: &'a [u64],
    /// Medium bytes in place (empty for Short and Long).
    pub(crate) payload: &'a [u8],
    /// The deposited bytes of a Long.
    pub(crate) long: Option<LocalView<'a, u8>>,
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
    /// The payload of a Medium message, read in place (empty for Short).
    ///
    /// # Panics
    ///
    /// On a Long message: its bytes lie in this rank's segment, where
    /// others may write while the handler runs, so no `&[u8]` to them is
    /// handed out; read them through [`long_payload`](Self::long_payload).
    /// (A handler's kind is fixed at registration, so this never depends
    /// on what a peer sends.)
    pub fn payload(&self) -> &'a [u8] {
        if self.long.is_some() {
            long_as_slice()
        }
        self.payload
    }
    /// The deposited bytes of a Long message, as a view of this rank's
    /// segment (copy them out with [`LocalView::copy_to`] or
    /// [`LocalView::to_vec`]); `None` for Short and Medium.
    pub fn long_payload(&self) -> Option<LocalView<'a, u8>> {
        self.long
    }
    /// Payload bytes of any kind (0 for Short).
    pub fn payload_len(&self) -> usize {
        match self.long {
            Some(v) => v.len(),
            None => self.payload.len(),
        }
    }
    /// For Long: the segment offset the sender gave, verbatim.
    pub fn long_offset(&self) -> Option<u64> {
        self.offset
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn long_as_slice() -> ! {
    panic!(
        "Incoming::payload() on a Long message: its bytes lie in the segment, where other \
         writers may change them; read them with Incoming::long_payload()"
    )
}
