//! Test harness (tests only): a read session's two protocol ends joined
//! in memory, sans I/O. Datagrams go from one end's `poll_transmit`
//! straight to the other's `handle_datagram` (none lost), timers run on a
//! clock the test advances, and what an end receives on a stream is
//! reassembled the way the server and the consumer reassemble it.

use super::read_proto::{session_config_for, MIN_DATAGRAM};
use splitrt_runtime::fabric::frames::Reassembler;
use splitrt_runtime::fabric::udp::proto::{Proto, ProtoConfig};
use splitrt_runtime::fabric::udp::wire::{HEADER, TAG};

/// The session key both ends use.
const KEY: [u8; 32] = [0x3c; 32];

/// The settings of a session of the smallest datagrams with a window of
/// `window` datagrams per stream (forced small, so the protocol takes
/// only part of a message when the window fills behind its first part).
pub(crate) fn config(window: u16) -> ProtoConfig {
    ProtoConfig {
        window,
        ..session_config_for(MIN_DATAGRAM)
    }
}

/// The server's end (rank 0) and the consumer's (rank 1) of one session.
pub(crate) fn ends(cfg: ProtoConfig) -> (Proto, Proto) {
    (Proto::new(0, 2, cfg, KEY, 0), Proto::new(1, 2, cfg, KEY, 0))
}

/// One message as the receiving end reassembled it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Got {
    pub tag: u16,
    pub words: Vec<u64>,
    /// The inline payload (empty for a deposit).
    pub payload: Vec<u8>,
    /// Where a deposited payload went: offset, length.
    pub deposit: Option<(u64, usize)>,
}

/// Run `from`'s timers at `now`, carry every datagram it has to `to`, and
/// run `to`'s timers.
pub(crate) fn carry(now: u64, from: &mut Proto, to: &mut Proto) {
    if now >= from.poll_timeout() {
        from.handle_timeout(now);
    }
    let mut out = Vec::new();
    from.poll_transmit(now, true, &mut |_, d| out.push(d.to_vec()));
    for d in out {
        if let Some(b) = to.handle_datagram(now, d) {
            to.recycle(b);
        }
    }
    if now >= to.poll_timeout() {
        to.handle_timeout(now);
    }
}

/// Reassemble what `p` has ready on `stream` (from rank `src`), deposits
/// into `seg`, appending each message to `got`, with inline payloads of at
/// most `max_inline` bytes (the receiving end's own limit: the consumer's
/// `MAX_CONTROL`, the server's `MAX_REQUEST`, so a message over the real
/// limit fails here as it would there); the first malformed body is the
/// error (the message half done when another starts, say).
pub(crate) fn receive(
    p: &mut Proto,
    stream: usize,
    max_inline: usize,
    reasm: &mut Reassembler,
    seg: &mut Vec<u8>,
    got: &mut Vec<Got>,
) -> Result<(), String> {
    while let Some((src, d)) = p.next_ready(stream) {
        let body = &d[HEADER..d.len() - TAG];
        let r = reasm.feed(src as usize, body, max_inline, seg, &mut |m| {
            got.push(Got {
                tag: m.tag,
                words: m.words.to_vec(),
                payload: m.payload.to_vec(),
                deposit: m.deposit.map(|d| (d.offset, d.len)),
            })
        });
        p.recycle(d);
        r?;
    }
    Ok(())
}
