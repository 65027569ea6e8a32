//! Reading received data so it really moves to the reading core: without
//! that, a copy into memory nobody reads only measures the writer's cache.

/// Read one byte per 64-byte line of `data` (and its last byte).
pub fn touch(data: &[u8]) {
    let x = data.iter().step_by(64).fold(0u8, |a, &b| a ^ b);
    std::hint::black_box(x ^ data.last().copied().unwrap_or(0));
}
