//! Reading received data so it really moves to the reading core: without
//! that, a copy into memory nobody reads only measures the writer's cache.

use splitrt::pgas::LocalView;
use splitrt::Incoming;

/// Read one byte per 64-byte line of `data` (and its last byte).
pub fn touch(data: &[u8]) {
    let x = data.iter().step_by(64).fold(0u8, |a, &b| a ^ b);
    std::hint::black_box(x ^ data.last().copied().unwrap_or(0));
}

/// [`touch`] for bytes in a segment, read through their view (the same
/// loads: one byte per line and the last).
pub fn touch_view(data: LocalView<'_, u8>) {
    let x = data.iter().step_by(64).fold(0u8, |a, b| a ^ b);
    let last = data.len().checked_sub(1).map_or(0, |i| data.get(i));
    std::hint::black_box(x ^ last);
}

/// [`touch`] a handler's payload, of whatever kind.
pub fn touch_incoming(m: &Incoming<'_>) {
    match m.long_payload() {
        Some(v) => touch_view(v),
        None => touch(m.payload()),
    }
}
