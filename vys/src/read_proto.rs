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
//! * `RDMA` (consumer to server, once, if the `WELCOME` said RDMA reads
//!   are offered): no words; payload the consumer's queue pair
//!   ([`QpEndpoint`](splitrt_runtime::fabric::rdma::verbs::QpEndpoint),
//!   26 bytes). Authentic under the session key, so the server makes a
//!   queue pair only for a holder of the stream key.
//! * `OFFER` (server to consumer, the answer): words `[status]`; with
//!   [`STATUS_OK`] the payload is the
//!   [`RingOffer`](super::rdma_export::RingOffer) (46 bytes); otherwise
//!   nothing (the device refused: read through the session instead).
//!   From then on the session carries no reads, but its keepalives tell
//!   the server the consumer still exists; the queue pair is destroyed
//!   with the session.

use splitrt_runtime::fabric::udp::proto::ProtoConfig;

/// Tag of a read request.
pub const T_READ: u16 = 1;
/// Tag of a read reply.
pub const T_DATA: u16 = 2;
/// Tag of the consumer's queue pair for RDMA reads.
pub const T_RDMA: u16 = 3;
/// Tag of the server's offer of RDMA reads.
pub const T_OFFER: u16 = 4;
/// Largest payload of a control message (`RDMA`, `OFFER`).
pub const MAX_CONTROL: usize = 64;
/// The device refused a queue pair (an `OFFER` status).
pub const STATUS_REFUSED: u64 = 3;
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
