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

/// The setting of the largest read-session datagram (UDP payload, bytes;
/// the session protocol's header and tag included), read by
/// `ConsumerConfig::apply_settings` and `ProducerConfig::apply_settings`
/// into their `datagram_bytes`.
pub const ENV_DATAGRAM: &str = "SPLITRT_VYS_DATAGRAM";
/// The default datagram size setting: the largest, so the datagrams are
/// as large as the consumer's route to the producer carries unfragmented
/// (the consumer lowers its setting to the route's MTU less the IP and
/// UDP headers: 1472 B on a 1500-byte MTU link over IPv4, 1452 B over
/// IPv6, 8972 B on a 9000-byte one, 65 507 B on the loopback).
pub const DEFAULT_DATAGRAM: usize = MAX_DATAGRAM;
/// What a 1500-byte MTU path carries over IPv4 unfragmented (1500 - 20 B
/// IP header - 8 B UDP header): the setting for a path whose MTU the
/// hosts cannot see (a router with a smaller MTU between them).
pub const DATAGRAM_1500: usize = 1472;
/// Smallest datagram size a session uses.
pub const MIN_DATAGRAM: usize = 512;
/// Largest datagram size a session uses (the largest UDP datagram over
/// IPv4).
pub const MAX_DATAGRAM: usize = splitrt_runtime::fabric::udp::wire::MAX_DATAGRAM;

/// Check a datagram size setting: `Ok` if within
/// [`MIN_DATAGRAM`]..=[`MAX_DATAGRAM`], else a message naming `what` (the
/// setting it came from).
pub fn check_datagram(what: &str, n: usize) -> Result<usize, String> {
    if (MIN_DATAGRAM..=MAX_DATAGRAM).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{what} = {n} B: the read sessions' datagram size must be within \
             {MIN_DATAGRAM}..={MAX_DATAGRAM} B (UDP payload; {DATAGRAM_1500} fits a \
             1500-byte MTU path, 8972 a 9000-byte one)"
        ))
    }
}

/// The datagram size `get` sets under [`ENV_DATAGRAM`] (`None`: not set),
/// checked; the error names the setting.
pub fn datagram_setting(get: impl Fn(&str) -> Option<String>) -> Result<Option<usize>, String> {
    let Some(v) = get(ENV_DATAGRAM) else {
        return Ok(None);
    };
    let n = splitrt_runtime::size::parse_size(&v)
        .ok_or_else(|| format!("{ENV_DATAGRAM}={v:?} is not a byte size"))?;
    check_datagram(ENV_DATAGRAM, n).map(Some)
}

/// The protocol settings of a read session with the default datagram
/// size ([`session_config_for`]`(`[`DEFAULT_DATAGRAM`]`)`).
pub fn session_config() -> ProtoConfig {
    session_config_for(DEFAULT_DATAGRAM)
}

/// The protocol settings of a read session whose datagrams are at most
/// `datagram` bytes (both ends derive them from the size the handshake
/// agreed, so their windows match): the fabric's defaults with a shorter
/// peer timeout (a consumer that vanished frees its session in seconds),
/// keepalives to match, and a window of about 3 MiB of datagrams (128
/// at least, 2048 at most), so small datagrams keep about as many bytes
/// in flight as large ones, within the receive buffers.
pub fn session_config_for(datagram: usize) -> ProtoConfig {
    let datagram = datagram.clamp(MIN_DATAGRAM, MAX_DATAGRAM);
    ProtoConfig {
        mtu: datagram,
        window: (WINDOW_BYTES / datagram).clamp(128, 2048) as u16,
        keepalive: 500_000_000,
        peer_timeout: 5_000_000_000,
        ..ProtoConfig::default()
    }
}

/// Bytes of datagrams a session's window holds, about.
const WINDOW_BYTES: usize = 3 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_settings_are_bounded_and_named() {
        let get = |v: &'static str| move |k: &str| (k == ENV_DATAGRAM).then(|| v.to_string());
        assert_eq!(datagram_setting(|_| None), Ok(None));
        assert_eq!(datagram_setting(get("9000")), Ok(Some(9000)));
        assert_eq!(datagram_setting(get("1472")), Ok(Some(1472)));
        for bad in ["511", "65508", "1M", "lots"] {
            let e = datagram_setting(get(bad)).unwrap_err();
            assert!(e.contains(ENV_DATAGRAM), "{bad}: {e}");
        }
        for d in [MIN_DATAGRAM, DEFAULT_DATAGRAM, 9000, MAX_DATAGRAM] {
            let c = session_config_for(d);
            assert_eq!(c.mtu, d);
            assert_eq!(c.validate(), Ok(()));
        }
        assert_eq!(session_config_for(MAX_DATAGRAM).window, 128);
        assert_eq!(session_config_for(DATAGRAM_1500).window, 2048);
        assert_eq!(session_config_for(8972).window, 350);
        assert_eq!(session_config(), session_config_for(DEFAULT_DATAGRAM));
    }
}
