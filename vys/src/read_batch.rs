//! Batched read requests (`READV`, issue 27 part 6): one message asks for
//! several slots (the spectra of an integration the consumer chose), so
//! a consumer with many reads queued spends one frame on them instead of
//! one each. Sans I/O: encoding and the bounded, checked decoding only;
//! [`super::read_client`] sends them, [`super::read_server`] serves them
//! exactly as it serves `READ`s (each slot copied in the validated order
//! and answered by its own `DATA`, deposited at its own landing offset).
//!
//! ```text
//! READV  words [count]   payload count x 40 bytes, each entry
//!        0 request id u64  8 ring offset u64  16 slot bytes u64
//!       24 landing offset u64  32 sequence id u64     (little-endian)
//! ```
//!
//! A `READV` with no entries, more than [`MAX_BATCH`], or a payload that
//! is not exactly `count` entries is malformed: the server ends the
//! session (as for any other malformed message).
//!
//! ```
//! use splitrt_vys::read_batch::{decode, encode, T_READV};
//! let reqs = [[1, 0, 4160, 0, 7], [2, 4160, 4160, 4160, 8]];
//! let mut payload = Vec::new();
//! encode(&reqs, &mut payload);
//! let mut back = Vec::new();
//! assert!(decode(&[2], &payload, &mut back));
//! assert_eq!(back, reqs);
//! assert!(T_READV > 4);
//! ```

/// Tag of a batched read request (after [`super::read_proto::T_OFFER`]).
pub const T_READV: u16 = 5;
/// Reads one `READV` asks for at most.
pub const MAX_BATCH: usize = 64;
/// Bytes of one entry of a `READV`'s payload.
pub const ENTRY_BYTES: usize = 40;
/// The largest `READV` payload ([`MAX_BATCH`] entries): the bound the
/// server's reassembler puts on a message that is not a deposit.
pub const MAX_PAYLOAD: usize = MAX_BATCH * ENTRY_BYTES;

/// Append the entries of `reqs` (`[request id, ring offset, slot bytes,
/// landing offset, sequence id]`, at most [`MAX_BATCH`] of them: the
/// caller's bound) to `out`; the message's one word is `reqs.len()`.
pub fn encode(reqs: &[[u64; 5]], out: &mut Vec<u8>) {
    debug_assert!(reqs.len() <= MAX_BATCH);
    for r in reqs {
        for w in r {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

/// Decode a `READV` with argument `words` and `payload` into `into`
/// (appended); `false` (nothing appended) unless it is well formed: one
/// word, a count of 1..=[`MAX_BATCH`], and exactly that many entries.
pub fn decode(words: &[u64], payload: &[u8], into: &mut Vec<[u64; 5]>) -> bool {
    let [count] = words else {
        return false;
    };
    let Ok(count) = usize::try_from(*count) else {
        return false;
    };
    if !(1..=MAX_BATCH).contains(&count) || payload.len() != count * ENTRY_BYTES {
        return false;
    }
    for e in payload.chunks_exact(ENTRY_BYTES) {
        let mut r = [0u64; 5];
        for (w, b) in r.iter_mut().zip(e.chunks_exact(8)) {
            let mut x = [0u8; 8];
            x.copy_from_slice(b);
            *w = u64::from_le_bytes(x);
        }
        into.push(r);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vysspeed_readv_round_trips_and_refuses_malformed() {
        let reqs: Vec<[u64; 5]> = (0..MAX_BATCH as u64)
            .map(|i| [i, i * 4160, 4160, i << 20, u64::MAX - i])
            .collect();
        let mut p = Vec::new();
        encode(&reqs, &mut p);
        assert_eq!(p.len(), MAX_PAYLOAD);
        let mut back = Vec::new();
        assert!(decode(&[MAX_BATCH as u64], &p, &mut back));
        assert_eq!(back, reqs);
        // hostile: every malformed form refused, nothing appended
        let mut none = Vec::new();
        let one = &p[..ENTRY_BYTES];
        assert!(!decode(&[], one, &mut none));
        assert!(!decode(&[1, 1], one, &mut none));
        assert!(!decode(&[0], &[], &mut none));
        assert!(!decode(&[2], one, &mut none));
        assert!(!decode(&[1], &p[..ENTRY_BYTES + 1], &mut none));
        assert!(!decode(&[1], &p[..ENTRY_BYTES - 1], &mut none));
        assert!(!decode(&[MAX_BATCH as u64 + 1], &p, &mut none));
        assert!(!decode(&[u64::MAX], &p, &mut none));
        assert!(none.is_empty());
    }
}
