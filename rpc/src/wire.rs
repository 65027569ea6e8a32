//! The byte layouts RPC messages carry in their Medium payloads, sans I/O.
//!
//! * A **call record** (in an `rpc:batch` request, several back to back):
//!   function index `u16`, call id `u64`, argument length `u32` (little
//!   endian), then the postcard-encoded arguments. The request's argument
//!   word is the number of records (the target keeps room in its reply
//!   for that many result headers; not trusted past the payload's length).
//! * A **result record** (in an `rpc:results` reply, several back to back):
//!   call id `u64`, [`Status`] `u8`, length `u32`, then the encoded result
//!   (status [`Status::Ok`]) or a UTF-8 message saying what went wrong.
//!
//! A single call travels without a record: its function's own handler
//! (`rpc:<name>`) gets the call id as its argument word and the encoded
//! arguments as its payload, and `rpc:result` answers with the call id and
//! status as words and the result (or message) as its payload.
//!
//! Decoders never panic: a truncated or over-long record ends the walk.

/// Bytes of a call record's header.
pub(crate) const CALL_HEADER: usize = 2 + 8 + 4;
/// Bytes of a result record's header.
pub(crate) const RESULT_HEADER: usize = 8 + 1 + 4;

/// How a call ended at its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Status {
    /// The function ran; the bytes are its encoded result.
    Ok = 0,
    /// The arguments did not decode as the function's argument type.
    BadArgs = 1,
    /// The function panicked (the target caught it and lives on).
    Panicked = 2,
    /// The encoded result is larger than one Medium to the caller.
    TooLarge = 3,
    /// The result did not fit the batch's reply: the target holds it until
    /// the caller fetches it (`rpc:fetch`).
    Held = 4,
    /// The record named no registered function, or was malformed, or a
    /// fetch named no held result.
    Unknown = 5,
    /// The result failed to encode.
    Unencodable = 6,
    /// (Never on the wire.) The caller's send of the call failed; the
    /// bytes are the error.
    SendFailed = 7,
}

impl Status {
    /// The status a byte on the wire names (anything unknown is `Unknown`).
    pub(crate) fn from_byte(b: u64) -> Status {
        match b {
            0 => Status::Ok,
            1 => Status::BadArgs,
            2 => Status::Panicked,
            3 => Status::TooLarge,
            4 => Status::Held,
            6 => Status::Unencodable,
            _ => Status::Unknown,
        }
    }
}

/// Append a call record's header for `len` argument bytes.
#[inline]
pub(crate) fn put_call_header(out: &mut Vec<u8>, func: u16, call: u64, len: usize) {
    let mut h = [0u8; CALL_HEADER];
    h[..2].copy_from_slice(&func.to_le_bytes());
    h[2..10].copy_from_slice(&call.to_le_bytes());
    h[10..].copy_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&h); // one copy, not three
}

/// Append a result record.
pub(crate) fn put_result(out: &mut Vec<u8>, call: u64, status: Status, bytes: &[u8]) {
    out.extend_from_slice(&call.to_le_bytes());
    out.push(status as u8);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A call record as read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CallRecord<'a> {
    pub func: u16,
    pub call: u64,
    pub args: &'a [u8],
}

/// The call records of a batch. `Err(call)` for a record whose header was
/// read but whose length runs past the end (the walk ends there; `None`
/// when not even the call id could be read).
pub(crate) struct Calls<'a> {
    rest: &'a [u8],
}

impl<'a> Calls<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Calls { rest: bytes }
    }
}

impl<'a> Iterator for Calls<'a> {
    type Item = Result<CallRecord<'a>, Option<u64>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let b = std::mem::take(&mut self.rest);
        let call = u64_at(b, 2);
        let (Some(f), Some(call), Some(len)) = (b.get(..2), call, u32_at(b, 10)) else {
            return Some(Err(call));
        };
        let end = CALL_HEADER.checked_add(len as usize);
        let Some(args) = end.and_then(|e| b.get(CALL_HEADER..e)) else {
            return Some(Err(Some(call)));
        };
        self.rest = &b[CALL_HEADER + args.len()..];
        Some(Ok(CallRecord {
            func: u16::from_le_bytes([f[0], f[1]]),
            call,
            args,
        }))
    }
}

/// A result record as read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ResultRecord<'a> {
    pub call: u64,
    pub status: Status,
    pub bytes: &'a [u8],
}

/// The result records of a batch's reply; a malformed tail ends the walk.
pub(crate) struct Results<'a> {
    rest: &'a [u8],
}

impl<'a> Results<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Results { rest: bytes }
    }
}

impl<'a> Iterator for Results<'a> {
    type Item = ResultRecord<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        let b = std::mem::take(&mut self.rest);
        let call = u64_at(b, 0)?;
        let status = Status::from_byte(u64::from(*b.get(8)?));
        let len = u32_at(b, 9)? as usize;
        let bytes = b.get(RESULT_HEADER..RESULT_HEADER.checked_add(len)?)?;
        self.rest = &b[RESULT_HEADER + len..];
        Some(ResultRecord {
            call,
            status,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_records_round_trip() {
        let mut b = Vec::new();
        for i in 0..5u16 {
            let args = vec![i as u8; i as usize];
            put_call_header(&mut b, i, 1000 + i as u64, args.len());
            b.extend_from_slice(&args);
        }
        let got: Vec<_> = Calls::new(&b).collect();
        assert_eq!(got.len(), 5);
        for (i, r) in got.into_iter().enumerate() {
            let r = r.unwrap();
            assert_eq!(
                (r.func, r.call, r.args.len()),
                (i as u16, 1000 + i as u64, i)
            );
        }
    }

    #[test]
    fn truncated_call_records_end_the_walk() {
        let mut b = Vec::new();
        put_call_header(&mut b, 1, 7, 100);
        b.extend_from_slice(&[0; 10]);
        let got: Vec<_> = Calls::new(&b).collect();
        assert_eq!(got, vec![Err(Some(7))]);
        let got: Vec<_> = Calls::new(&b[..5]).collect();
        assert_eq!(got, vec![Err(None)]);
        // u32::MAX length: no overflow, no panic
        let mut b = Vec::new();
        put_call_header(&mut b, 1, 8, u32::MAX as usize);
        assert_eq!(Calls::new(&b).collect::<Vec<_>>(), vec![Err(Some(8))]);
    }

    #[test]
    fn result_records_round_trip_and_garbage_never_panics() {
        let mut b = Vec::new();
        put_result(&mut b, 1, Status::Ok, b"abc");
        put_result(&mut b, 2, Status::BadArgs, b"why");
        let got: Vec<_> = Results::new(&b).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].status, Status::BadArgs);
        assert_eq!(got[0].bytes, b"abc");
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..2000 {
            let bytes: Vec<u8> = (0..n % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = Results::new(&bytes).count();
            let _ = Calls::new(&bytes).count();
        }
    }
}
