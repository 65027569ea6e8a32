//! One-way streams: the sender keeps up to `window` unacknowledged messages
//! in flight (the rings add their own back-pressure below that), the
//! receiver acknowledges every `ack_every` messages and the last one. The
//! clock runs from the first send to the last acknowledgement.

use splitrt::{Endpoint, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Send `msgs` messages through `send(index, msgs)` (each message tells
/// the receiver the stream length), never more than `window` ahead of the
/// acknowledgements in `acked`, so message `index` may reuse a buffer slot
/// of message `index - window`; returns the time until the last one was
/// acknowledged.
pub fn stream(
    ep: &Endpoint,
    acked: &AtomicU64,
    msgs: usize,
    window: usize,
    mut send: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Duration> {
    let (msgs, window) = (msgs as u64, window as u64);
    acked.store(0, Ordering::Relaxed);
    let t = Instant::now();
    for sent in 0..msgs {
        if sent - acked.load(Ordering::Acquire) >= window {
            ep.wait_until(|| sent - acked.load(Ordering::Acquire) < window)?;
        }
        send(sent, msgs)?;
    }
    ep.wait_until(|| acked.load(Ordering::Acquire) == msgs)?;
    Ok(t.elapsed())
}
