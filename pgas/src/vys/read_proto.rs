//! The messages of a read session (inside the UDP fabric's protocol, after
//! the [`super::handshake`]) and the protocol settings both ends use.
//!
//! * `READ` (consumer to server, request stream): argument words
//!   `[request id, ring offset, slot bytes, landing offset, sequence id]`,
//!   no payload.
//! * `DATA` (server to consumer, reply stream): words `[request id,
//!   status]`; with status [`STATUS_OK`] the payload is the whole slot as
//!   [`super::ring::snapshot_slot`] copied it, deposited at the landing
//!   offset the request named (straight into the consumer's buffer).
//! * `RDMA` (consumer to server, once): no words, no payload. The
//!   consumer reads by RDMA over the queue pair the `WELCOME` offered; the
//!   session carries no reads, but this first message starts its
//!   keepalives, so the server learns when the consumer is gone (and
//!   destroys the queue pair).

use splitrt_runtime::fabric::udp::proto::ProtoConfig;

/// Tag of a read request.
pub const T_READ: u16 = 1;
/// Tag of a read reply.
pub const T_DATA: u16 = 2;
/// Tag of the consumer's note that it reads by RDMA.
pub const T_RDMA: u16 = 3;
/// The slot follows.
pub const STATUS_OK: u64 = 0;
/// The range is not a slot of the ring (nothing follows).
pub const STATUS_OUT_OF_RING: u64 = 1;
/// The slot's tail already holds another sequence id: it was rewritten
/// (nothing follows; the network is not spent on a spectrum the consumer
/// would throw away).
pub const STATUS_OVERWRITTEN: u64 = 2;
/// Largest slot a read may ask for (the server refuses larger).
pub const MAX_READ: usize = 64 << 20;

/// The protocol settings of a read session: the fabric's defaults with
/// a shorter peer timeout (a consumer that vanished frees its session in
/// seconds), keepalives to match.
pub fn session_config() -> ProtoConfig {
    ProtoConfig {
        window: 128,
        keepalive: 500_000_000,
        peer_timeout: 5_000_000_000,
        ..ProtoConfig::default()
    }
}
