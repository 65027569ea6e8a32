//! The aggregated path's small records, sans I/O: a result of at most
//! [`FAST_BYTES`] encoded bytes written into a batch's reply, and read
//! back at the caller, with fixed-size copies (a variable-length copy of
//! a few bytes compiles into a `memcpy` call, dearer than the bytes it
//! copies; an 8 B call's result is 1-10 bytes).

use crate::fast::{Stack, FAST_BYTES};
use crate::wire::{Status, RESULT_HEADER};

/// Append the result record ([`wire`](crate::wire)'s layout) of a
/// successful call `call` whose result was encoded into `result` (at most
/// [`FAST_BYTES`]): one fixed-size copy, then cut to length.
#[inline]
pub(crate) fn put_ok_result(out: &mut Vec<u8>, call: u64, result: &Stack) {
    let len = result.len.min(FAST_BYTES);
    let mut rec = [0u8; RESULT_HEADER + FAST_BYTES];
    rec[..8].copy_from_slice(&call.to_le_bytes());
    rec[8] = Status::Ok as u8;
    rec[9..13].copy_from_slice(&(len as u32).to_le_bytes());
    rec[13..21].copy_from_slice(&result.words[0].to_le_bytes());
    rec[21..].copy_from_slice(&result.words[1].to_le_bytes());
    let start = out.len();
    out.extend_from_slice(&rec);
    out.truncate(start + RESULT_HEADER + len);
}

/// The bytes of `result` (at most [`FAST_BYTES`]) as they would be in a
/// record: for the rare small result written the general way.
pub(crate) fn bytes_of(result: &Stack) -> ([u8; FAST_BYTES], usize) {
    let mut b = [0u8; FAST_BYTES];
    b[..8].copy_from_slice(&result.words[0].to_le_bytes());
    b[8..].copy_from_slice(&result.words[1].to_le_bytes());
    (b, result.len.min(FAST_BYTES))
}

/// `bytes` (a result of at most [`FAST_BYTES`], a sub-slice of `within`)
/// and the bytes after it, [`FAST_BYTES`] in all, by one fixed-size copy;
/// `None` when `within` ends sooner (the last record of a reply: read it
/// the general way) or `bytes` is not inside `within`.
#[inline]
pub(crate) fn padded(within: &[u8], bytes: &[u8]) -> Option<[u8; FAST_BYTES]> {
    if bytes.len() > FAST_BYTES {
        return None;
    }
    let at = (bytes.as_ptr() as usize).checked_sub(within.as_ptr() as usize)?;
    within.get(at..at.checked_add(FAST_BYTES)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{put_result, Results};

    #[test]
    fn rpcagg_small_results_write_and_read_as_general_ones() {
        use postcard::ser_flavors::Flavor;
        for n in 0..=FAST_BYTES {
            let bytes: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(41) ^ 0x3c).collect();
            let mut st = Stack::default();
            (&mut st).try_extend(&bytes).unwrap();
            let (b, len) = bytes_of(&st);
            assert_eq!(&b[..len], &bytes[..]);
            // the same record as put_result's, followed by another
            let mut fixed = vec![0xee];
            put_ok_result(&mut fixed, 0x77_0000_0005, &st);
            put_result(&mut fixed, 9, Status::BadArgs, b"why");
            let mut general = vec![0xee];
            put_result(&mut general, 0x77_0000_0005, Status::Ok, &bytes);
            put_result(&mut general, 9, Status::BadArgs, b"why");
            assert_eq!(fixed, general);
            let payload = &fixed[1..];
            let got: Vec<_> = Results::new(payload).collect();
            assert_eq!(got.len(), 2);
            assert_eq!((got[0].call, got[0].status), (0x77_0000_0005, Status::Ok));
            assert_eq!(got[0].bytes, &bytes[..]);
            // read padded: 16 bytes follow the result's start (its own
            // and the next record's)
            let p = padded(payload, got[0].bytes).unwrap();
            assert_eq!(&p[..n], &bytes[..]);
            // the last record: too few bytes after it to pad with
            assert!(padded(payload, got[1].bytes).is_none());
        }
        // longer than a small result, or before the payload: None
        let b = [0u8; 40];
        assert!(padded(&b, &b[..FAST_BYTES + 1]).is_none());
        assert!(padded(&b[1..], &b[..1]).is_none());
    }
}
