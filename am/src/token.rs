//! The right to reply, handed to a request handler and consumed by `reply`.

use crate::endpoint::Inner;
use crate::handler::ReplyHandler;
use crate::message::Payload;
use splitrt_runtime::Result;

/// Given to a request handler; [`reply`](Token::reply) consumes it, so a
/// handler replies at most once. Dropping it without replying is allowed.
/// The lifetime ties it to the handler call: it cannot be kept for later.
#[must_use = "a request handler replies through its token (or drops it on purpose)"]
pub struct Token<'a> {
    pub(crate) ep: &'a Inner,
    pub(crate) src: usize,
}

impl Token<'_> {
    /// The rank whose request is being handled.
    pub fn src(&self) -> usize {
        self.src
    }

    /// The segment range frozen read-only (see
    /// [`Endpoint::freeze_segment_range`](crate::Endpoint::freeze_segment_range))
    /// that `len` bytes at `offset` of this rank's segment touch, if any:
    /// for handlers that write the segment.
    pub fn frozen_segment_range(&self, offset: u64, len: u64) -> Option<std::ops::Range<u64>> {
        self.ep.frozen().find(offset, len)
    }

    /// Reply to the requester. Never blocks on the requester's user code: if
    /// its reply ring is full, this rank drains its own replies while it
    /// waits, so request/reply cycles cannot deadlock.
    pub fn reply(self, h: ReplyHandler, args: &[u64], payload: Payload<'_>) -> Result<()> {
        self.ep.send_reply(self.src, h, args, payload)
    }
}
