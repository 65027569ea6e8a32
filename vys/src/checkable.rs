//! Checkable spectra: data that is a function of the spectrum's identity
//! (its product and timestamp), so a consumer can tell whether what it
//! received is exactly what the producer wrote for that spectrum (the
//! producer simulator's checkable mode, the lapping tests, the bench).
//!
//! ```
//! use splitrt_vys::checkable::{fill, matches};
//! let id = ([1, 2], 3, 0);
//! let mut d = vec![0u8; 100];
//! fill(id, 42, &mut d);
//! assert!(matches(id, 42, &d));
//! assert!(!matches(id, 43, &d));
//! ```

/// A product's identity: stations, spectral window, stokes.
pub type Identity = ([u16; 2], u16, u16);

fn seed(id: Identity, timestamp: u64) -> u64 {
    let mut x = timestamp ^ 0x9e37_79b9_7f4a_7c15;
    for v in [id.0[0], id.0[1], id.1, id.2] {
        x = (x ^ v as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 29;
    }
    x | 1
}

/// Word `i` of the spectrum of `seed`.
#[inline]
fn word(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(i as u64 + 1) ^ (i as u64).rotate_left(17)
}

/// Fill `out` with the data of spectrum (`id`, `timestamp`).
pub fn fill(id: Identity, timestamp: u64, out: &mut [u8]) {
    let s = seed(id, timestamp);
    let mut chunks = out.chunks_exact_mut(8);
    for (i, c) in chunks.by_ref().enumerate() {
        c.copy_from_slice(&word(s, i).to_le_bytes());
    }
    let n = out.len() / 8;
    let rest = &mut out[n * 8..];
    let w = word(s, n).to_le_bytes();
    let k = rest.len();
    rest.copy_from_slice(&w[..k]);
}

/// Whether `data` is exactly the data of spectrum (`id`, `timestamp`).
pub fn matches(id: Identity, timestamp: u64, data: &[u8]) -> bool {
    let s = seed(id, timestamp);
    let mut chunks = data.chunks_exact(8);
    for (i, c) in chunks.by_ref().enumerate() {
        if c != word(s, i).to_le_bytes() {
            return false;
        }
    }
    let n = data.len() / 8;
    let rest = chunks.remainder();
    rest == &word(s, n).to_le_bytes()[..rest.len()]
}
