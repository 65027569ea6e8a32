//! The fast path of a call sent alone, sans I/O: arguments and a result of
//! at most [`FAST_BYTES`] encoded bytes travel in the argument words of an
//! AM Short (`rpc:short` request, `rpc:short_result` reply) instead of a
//! Medium's payload: no payload copy, no landing zone, the AM layer's
//! shortest send and receive paths.
//!
//! * request words: call id, function index `u16` | argument length << 16,
//!   then the argument bytes packed little endian into two words;
//! * reply words: call id, [`Status`] `u8` | result length << 8, then the
//!   result bytes the same way. A result that does not fit (or an error
//!   message) goes back in an `rpc:result` Medium as before.
//!
//! Decoders never panic: a length past [`FAST_BYTES`] is refused.

use crate::wire::{Status, CALL_HEADER};

/// Encoded argument (or result) bytes an AM Short carries.
pub(crate) const FAST_BYTES: usize = 16;
/// Argument words of `rpc:short` and `rpc:short_result`.
pub(crate) const FAST_WORDS: usize = 2 + FAST_BYTES / 8;

/// Pack `bytes` (at most [`FAST_BYTES`]) into two words (a byte loop:
/// a variable-length `copy_from_slice` is a `memcpy` call, dearer than
/// the at most 16 bytes it copies).
#[inline]
fn pack(bytes: &[u8]) -> [u64; 2] {
    let mut w = [0u64; 2];
    for (i, &b) in bytes.iter().take(FAST_BYTES).enumerate() {
        w[i / 8] |= u64::from(b) << (8 * (i % 8));
    }
    w
}

/// A postcard output of at most [`FAST_BYTES`] bytes on the stack: a
/// call's arguments encoded here go out in an `rpc:short`'s words with no
/// record, no buffer and no copy through the destination's outbox;
/// longer ones fail the encoding (`SerializeBufferFull`) and take the
/// buffered path.
#[derive(Default)]
pub(crate) struct Stack {
    /// The argument bytes, packed little endian as the Short's words.
    pub words: [u64; 2],
    /// Bytes written.
    pub len: usize,
    /// A result did not fit: it went to the Medium path's buffer instead.
    pub spilled: bool,
}

impl Stack {
    #[inline]
    fn put(&mut self, b: u8) -> postcard::Result<()> {
        if self.len >= FAST_BYTES {
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.words[self.len / 8] |= u64::from(b) << (8 * (self.len % 8));
        self.len += 1;
        Ok(())
    }
}

impl postcard::ser_flavors::Flavor for &mut Stack {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if self.len + data.len() > FAST_BYTES {
            return Err(postcard::Error::SerializeBufferFull);
        }
        data.iter().try_for_each(|&b| self.put(b))
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.put(data)
    }

    #[inline]
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// The words of an `rpc:short` request: call id, function, the encoded
/// arguments of `args`.
#[inline]
pub(crate) fn words_of(call: u64, func: u16, args: &Stack) -> [u64; FAST_WORDS] {
    [
        call,
        u64::from(func) | (args.len as u64) << 16,
        args.words[0],
        args.words[1],
    ]
}

/// The words of an `rpc:short_result` reply of a result encoded in
/// `result`.
#[inline]
pub(crate) fn result_words_of(call: u64, status: Status, result: &Stack) -> [u64; FAST_WORDS] {
    [
        call,
        status as u64 | (result.len as u64) << 8,
        result.words[0],
        result.words[1],
    ]
}

/// Append the call record of `rpc:short` request words `w` (as
/// [`words_of`] made them) to `out`: a call kept as words, spilled into a
/// buffer when a second call to its destination comes.
pub(crate) fn spill(w: &[u64; FAST_WORDS], out: &mut Vec<u8>) {
    let args = Stack {
        words: [w[2], w[3]],
        len: ((w[1] >> 16) as usize).min(FAST_BYTES),
        spilled: false,
    };
    put_record(out, w[1] as u16, w[0], &args);
}

/// Append the call record of `func`, `call` with the arguments encoded in
/// `args` to `out` (one fixed-size copy, then cut to length: no second
/// encoding of a small call that joins a batch, no `memcpy` call).
#[inline]
pub(crate) fn put_record(out: &mut Vec<u8>, func: u16, call: u64, args: &Stack) {
    let len = args.len.min(FAST_BYTES);
    let mut rec = [0u8; CALL_HEADER + FAST_BYTES];
    rec[..2].copy_from_slice(&func.to_le_bytes());
    rec[2..10].copy_from_slice(&call.to_le_bytes());
    rec[10..14].copy_from_slice(&(len as u32).to_le_bytes());
    rec[14..22].copy_from_slice(&args.words[0].to_le_bytes());
    rec[22..].copy_from_slice(&args.words[1].to_le_bytes());
    let start = out.len();
    out.extend_from_slice(&rec);
    out.truncate(start + CALL_HEADER + len);
}

/// Unpack two words into bytes; `len` bytes of it are meant.
fn unpack(w0: u64, w1: u64) -> [u8; FAST_BYTES] {
    let mut b = [0u8; FAST_BYTES];
    b[..8].copy_from_slice(&w0.to_le_bytes());
    b[8..].copy_from_slice(&w1.to_le_bytes());
    b
}

/// The words of an `rpc:short` request for the one call record `record`
/// (a buffer holding one call), or `None` if its arguments are longer
/// than [`FAST_BYTES`] (or the record is not one whole record).
pub(crate) fn request_words(record: &[u8]) -> Option<[u64; FAST_WORDS]> {
    let args = record.get(CALL_HEADER..)?;
    let len = u32::from_le_bytes(record.get(10..14)?.try_into().ok()?) as usize;
    if len != args.len() || len > FAST_BYTES {
        return None;
    }
    let func = u16::from_le_bytes(record.get(..2)?.try_into().ok()?);
    let call = u64::from_le_bytes(record.get(2..10)?.try_into().ok()?);
    let [a0, a1] = pack(args);
    Some([call, u64::from(func) | (len as u64) << 16, a0, a1])
}

/// An `rpc:short` request as read: call id, function index, argument
/// bytes (and how many of them are meant); `Err(call)` for a length past
/// [`FAST_BYTES`] (a hostile or broken peer).
pub(crate) fn read_request(w: &[u64]) -> Result<(u64, u16, [u8; FAST_BYTES], usize), u64> {
    let call = w.first().copied().unwrap_or(0);
    let (Some(&meta), Some(&a0), Some(&a1)) = (w.get(1), w.get(2), w.get(3)) else {
        return Err(call);
    };
    let len = (meta >> 16) as usize;
    if len > FAST_BYTES {
        return Err(call);
    }
    Ok((call, meta as u16, unpack(a0, a1), len))
}

/// The words of an `rpc:short_result` reply, or `None` if `bytes` is
/// longer than [`FAST_BYTES`] (send an `rpc:result` Medium instead).
#[cfg(test)] // the target writes a result's words with `result_words_of`
pub(crate) fn result_words(call: u64, status: Status, bytes: &[u8]) -> Option<[u64; FAST_WORDS]> {
    if bytes.len() > FAST_BYTES {
        return None;
    }
    let [r0, r1] = pack(bytes);
    Some([call, status as u64 | (bytes.len() as u64) << 8, r0, r1])
}

/// An `rpc:short_result` reply as read: call id, status, result bytes and
/// how many are meant (a length past [`FAST_BYTES`]: status `Unknown`,
/// no bytes).
pub(crate) fn read_result(w: &[u64]) -> (u64, Status, [u8; FAST_BYTES], usize) {
    let call = w.first().copied().unwrap_or(0);
    let (Some(&meta), Some(&r0), Some(&r1)) = (w.get(1), w.get(2), w.get(3)) else {
        return (call, Status::Unknown, [0; FAST_BYTES], 0);
    };
    let len = (meta >> 8) as usize;
    if len > FAST_BYTES {
        return (call, Status::Unknown, [0; FAST_BYTES], 0);
    }
    (call, Status::from_byte(meta & 0xff), unpack(r0, r1), len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::put_call_header;

    #[test]
    fn requests_round_trip_and_long_ones_take_the_medium() {
        for n in 0..=FAST_BYTES + 1 {
            let args: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            let mut rec = Vec::new();
            put_call_header(&mut rec, 7, 0x1234_5678_9abc, n);
            rec.extend_from_slice(&args);
            match request_words(&rec) {
                Some(w) => {
                    let (call, func, b, len) = read_request(&w).unwrap();
                    assert_eq!((call, func, &b[..len]), (0x1234_5678_9abc, 7, &args[..]));
                }
                None => assert!(n > FAST_BYTES),
            }
        }
        // a cut record is not sent this way
        let mut rec = Vec::new();
        put_call_header(&mut rec, 1, 2, 8);
        rec.extend_from_slice(&[1, 2]);
        assert!(request_words(&rec).is_none());
        assert!(request_words(&rec[..5]).is_none());
    }

    #[test]
    fn rpc2_stack_encodings_become_the_same_words_and_records() {
        use crate::wire::Calls;
        use postcard::ser_flavors::Flavor;
        for n in 0..=FAST_BYTES + 1 {
            let args: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
            let mut st = Stack::default();
            let fits = (&mut st).try_extend(&args).is_ok();
            assert_eq!(fits, n <= FAST_BYTES);
            if !fits {
                continue;
            }
            // the words as a record would have given them
            let mut rec = Vec::new();
            put_call_header(&mut rec, 3, 0xabcd_0001, n);
            rec.extend_from_slice(&args);
            let w = words_of(0xabcd_0001, 3, &st);
            assert_eq!(Some(w), request_words(&rec));
            // a record written from the stack, and one spilled from words,
            // decode as the call
            let mut out = vec![0xee];
            put_record(&mut out, 3, 0xabcd_0001, &st);
            spill(&w, &mut out);
            let got: Vec<_> = Calls::new(&out[1..]).collect();
            assert_eq!(got.len(), 2);
            for r in got {
                let r = r.unwrap();
                assert_eq!((r.func, r.call, r.args), (3, 0xabcd_0001, &args[..]));
            }
        }
        // postcard through the flavor: a u64 fits, 17 bytes do not
        let mut st = Stack::default();
        postcard::serialize_with_flavor(&u64::MAX, &mut st).unwrap();
        assert_eq!(st.len, 10);
        let mut st = Stack::default();
        assert!(postcard::serialize_with_flavor(&[7u8; 17], &mut st).is_err());
    }

    #[test]
    fn results_round_trip_and_garbage_never_panics() {
        let w = result_words(9, Status::Ok, b"abc").unwrap();
        let (call, st, b, len) = read_result(&w);
        assert_eq!((call, st, &b[..len]), (9, Status::Ok, &b"abc"[..]));
        assert!(result_words(9, Status::Ok, &[0; FAST_BYTES + 1]).is_none());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut w = [0u64; FAST_WORDS];
            for v in &mut w {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x;
            }
            let (_, _, _, len) = read_result(&w);
            assert!(len <= FAST_BYTES);
            if let Ok((_, _, _, len)) = read_request(&w) {
                assert!(len <= FAST_BYTES);
            }
            let _ = read_result(&w[..1]);
            let _ = read_request(&w[..2]);
        }
    }
}
