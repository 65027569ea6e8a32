//! Message frames inside a datagram body, and their reassembly.
//!
//! A message (tag, argument words, payload, optional deposit offset) is
//! cut into frames that fill consecutive datagrams of one stream; several
//! small messages share a datagram (coalescing). Frames of a stream arrive
//! in order (the protocol guarantees it), so one message at a time is
//! partially reassembled per (peer, stream).
//!
//! ```text
//!  0 flags u8 (FIRST 1, LAST 2, DEPOSIT 4, PLACED 8)  1 nwords u8  2 tag u16
//!  4 len u32 (payload bytes in this frame)  8 total u32 (message payload)
//! 12 pad u32                               16 deposit u64 (segment offset)
//! 24 words (nwords * 8, first frame only), then len payload bytes
//! ```
//! A deposited (Long) payload is written into the receiver's segment frame
//! by frame, checked against the segment first (or, on the ibverbs fabric,
//! placed there by an RDMA write before a header-only `PLACED` frame); an inline (Medium) payload
//! that spans datagrams is collected into one buffer of at most the Medium
//! maximum, and one that fits a frame is delivered where it lies.

use crate::fabric::{Delivery, Deposit, SegmentBytes, SegmentRef, MAX_WORDS};
use crate::frozen::FrozenRanges;

/// Frame header bytes.
pub const FRAME_HEADER: usize = 24;
/// First frame of a message.
pub const F_FIRST: u8 = 1;
/// Last frame of a message.
pub const F_LAST: u8 = 2;
/// The payload goes into the receiver's segment.
pub const F_DEPOSIT: u8 = 4;
/// With [`F_DEPOSIT`]: the sender already placed the payload in the
/// receiver's segment (an RDMA write ordered before this frame); the frame
/// carries none of it (one frame, `len` 0, `total` the payload length).
pub const F_PLACED: u8 = 8;

/// A message to send.
#[derive(Clone, Copy, Debug)]
pub struct OutMsg<'a> {
    /// Upper layer's dispatch tag.
    pub tag: u16,
    /// Argument words (at most [`MAX_WORDS`]).
    pub words: &'a [u64],
    /// Payload.
    pub payload: &'a [u8],
    /// Segment offset for a deposited payload.
    pub deposit: Option<u64>,
}

/// Where an outgoing message's payload is read from as it is framed.
#[derive(Clone, Copy, Debug)]
pub enum PayloadSrc<'a> {
    /// The sender's own bytes.
    Bytes(&'a [u8]),
    /// A range of the sender's segment, copied out by a raw copy (no
    /// reference over it: others may write it meanwhile).
    Segment(SegmentBytes<'a>),
}

impl PayloadSrc<'_> {
    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        match self {
            PayloadSrc::Bytes(b) => b.len(),
            PayloadSrc::Segment(s) => s.len(),
        }
    }

    /// Whether it has no bytes.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append bytes `from..from + n` to `out` (panics past the end).
    #[inline(always)]
    fn copy_to_end(&self, from: usize, n: usize, out: &mut Vec<u8>) {
        match self {
            PayloadSrc::Bytes(b) => out.extend_from_slice(&b[from..from + n]),
            PayloadSrc::Segment(s) => s.copy_to_end(from, n, out),
        }
    }
}

/// A message to send whose payload is a [`PayloadSrc`]: [`OutMsg`] with
/// the payload possibly in the sender's segment.
#[derive(Clone, Copy, Debug)]
pub struct SrcMsg<'a> {
    /// Upper layer's dispatch tag.
    pub tag: u16,
    /// Argument words (at most [`MAX_WORDS`]).
    pub words: &'a [u64],
    /// Payload.
    pub payload: PayloadSrc<'a>,
    /// Segment offset for a deposited payload.
    pub deposit: Option<u64>,
}

impl<'a> From<&OutMsg<'a>> for SrcMsg<'a> {
    #[inline(always)]
    fn from(m: &OutMsg<'a>) -> Self {
        SrcMsg {
            tag: m.tag,
            words: m.words,
            payload: PayloadSrc::Bytes(m.payload),
            deposit: m.deposit,
        }
    }
}

/// Append one frame of `m` to `body`: the payload bytes from `from`, as
/// many as fit in `room` bytes of frame. Returns the payload bytes taken;
/// `None` if not even the header (and words, and one byte of a non-empty
/// remainder) fits.
#[inline]
pub fn append(body: &mut Vec<u8>, m: &OutMsg<'_>, from: usize, room: usize) -> Option<usize> {
    append_src(body, &SrcMsg::from(m), from, room)
}

/// [`append`] of a message whose payload may lie in the sender's segment:
/// its bytes are copied from there straight into `body`.
pub fn append_src(body: &mut Vec<u8>, m: &SrcMsg<'_>, from: usize, room: usize) -> Option<usize> {
    let first = from == 0;
    let words = if first { m.words.len() * 8 } else { 0 };
    let left = m.payload.len() - from;
    let fixed = FRAME_HEADER + words;
    if room < fixed || (left > 0 && room == fixed) {
        return None;
    }
    let n = left.min(room - fixed);
    let mut flags = 0;
    if first {
        flags |= F_FIRST;
    }
    if from + n == m.payload.len() {
        flags |= F_LAST;
    }
    if m.deposit.is_some() {
        flags |= F_DEPOSIT;
    }
    body.push(flags);
    body.push(if first { m.words.len() as u8 } else { 0 });
    body.extend_from_slice(&m.tag.to_le_bytes());
    body.extend_from_slice(&(n as u32).to_le_bytes());
    body.extend_from_slice(&(m.payload.len() as u32).to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&m.deposit.unwrap_or(0).to_le_bytes());
    if first {
        for w in m.words {
            body.extend_from_slice(&w.to_le_bytes());
        }
    }
    m.payload.copy_to_end(from, n, body);
    Some(n)
}

/// Append the one frame of a deposited message whose payload the sender
/// has already placed in the receiver's segment (by RDMA write, ordered
/// before this frame): header and words only. `None` if it does not fit
/// in `room`, or `m` is not a deposit.
pub fn append_placed(body: &mut Vec<u8>, m: &OutMsg<'_>, room: usize) -> Option<()> {
    let deposit = m.deposit?;
    if room < FRAME_HEADER + m.words.len() * 8 || m.payload.len() > u32::MAX as usize {
        return None;
    }
    body.push(F_FIRST | F_LAST | F_DEPOSIT | F_PLACED);
    body.push(m.words.len() as u8);
    body.extend_from_slice(&m.tag.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&(m.payload.len() as u32).to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&deposit.to_le_bytes());
    for w in m.words {
        body.extend_from_slice(&w.to_le_bytes());
    }
    Some(())
}

/// Where deposited payloads go: the receiver's segment.
///
/// The reassembler checks every deposit against [`len`](Self::len) before
/// it writes, but a safe trait cannot rely on its caller for memory
/// safety: each implementation checks the range itself and refuses one
/// outside (a hostile or broken peer's frame must never write outside).
pub trait Sink {
    /// Segment length.
    fn len(&self) -> usize;
    /// Whether the segment is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `data` to `off`. `false`, having written nothing, if
    /// `off + data.len() > len()` or the bytes touch a frozen range (see
    /// [`frozen`](Self::frozen)).
    #[must_use = "false means the bytes were refused (outside the segment, or frozen)"]
    fn write(&mut self, off: usize, data: &[u8]) -> bool;
    /// The frozen range (read-only: see [`FrozenRanges`]) that `len`
    /// bytes at `off` touch, if any; [`write`](Self::write) refuses such
    /// bytes. None by default (a sink with nothing frozen).
    fn frozen(&self, off: usize, len: usize) -> Option<std::ops::Range<u64>> {
        let _ = (off, len);
        None
    }
}

/// A segment held in a vector (the simulator's, and tests').
impl Sink for Vec<u8> {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn write(&mut self, off: usize, data: &[u8]) -> bool {
        match off
            .checked_add(data.len())
            .and_then(|end| self.get_mut(off..end))
        {
            Some(d) => {
                d.copy_from_slice(data);
                true
            }
            None => false,
        }
    }
}

/// A rank's mapped segment as a deposit target (the fabrics' own; not
/// public: it writes through a [`SegmentRef`], which only its fabric
/// knows to be alive). It refuses bytes outside the segment and bytes of
/// a frozen range: a frozen range is the target of live `&[T]`s, and a
/// deposit is written here when a thread polls, which may be after the
/// sender's freeze drained its sends (UDP acknowledges a datagram when it
/// is stored in the receive window, not when it is written). The polling
/// thread holds a write announcement across the poll (the AM layer's
/// `writing`), so a freeze waits for a write that passed this check.
pub(crate) struct SegmentSink<'a> {
    seg: SegmentRef,
    frozen: &'a FrozenRanges,
}

impl<'a> SegmentSink<'a> {
    /// The sink of `seg`, refusing the ranges of `frozen`.
    ///
    /// # Safety
    /// `seg` must stay mapped as long as the sink is used (the fabric's own
    /// segment, used inside the fabric's `poll`).
    pub(crate) unsafe fn new(seg: SegmentRef, frozen: &'a FrozenRanges) -> SegmentSink<'a> {
        SegmentSink { seg, frozen }
    }
}

impl Sink for SegmentSink<'_> {
    fn len(&self) -> usize {
        self.seg.len()
    }
    fn frozen(&self, off: usize, len: usize) -> Option<std::ops::Range<u64>> {
        self.frozen.find_sealed(off as u64, len as u64)
    }
    fn write(&mut self, off: usize, data: &[u8]) -> bool {
        // A real check (not a debug assertion): this is what keeps a peer's
        // frame inside the segment, whatever the caller checked before.
        if !self.seg.contains(off, data.len()) {
            return false;
        }
        // And out of frozen bytes (one load while nothing is frozen).
        if self
            .frozen
            .find_sealed(off as u64, data.len() as u64)
            .is_some()
        {
            return false;
        }
        // SAFETY: off + data.len() <= len was checked just above, so `off`
        // is an in-bounds offset into the segment, which stays mapped while
        // the sink is used (`new`'s contract).
        let dst = unsafe { self.seg.base().add(off) };
        // SAFETY: dst..dst + data.len() lies in the segment (as above);
        // `data` is a receive buffer, never the segment itself, so the two
        // do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }
}

#[derive(Debug)]
struct Partial {
    tag: u16,
    nwords: usize,
    words: [u64; MAX_WORDS],
    total: usize,
    got: usize,
    deposit: Option<u64>,
    buf: Vec<u8>,
    /// Why a deposit chunk of this message was refused (a sealed range):
    /// its later chunks are consumed by their length but not written, and
    /// the refusal is reported once, when its last frame arrives.
    refused: Option<String>,
}

/// Reassembly of one (peer, stream): at most one message in progress.
/// Kept per rank of the job from the start, so the message in progress is
/// boxed: a pointer per peer until a message spans frames (docs/scale.md).
#[derive(Debug, Default)]
pub struct Reassembler {
    cur: Option<Box<Partial>>,
}

/// The error of a deposit of `len` B at `off` outside a `seg_len` B segment.
fn outside(off: u64, len: usize, seg_len: usize) -> String {
    format!("a deposit of {len} B at segment offset {off} outside the {seg_len} B segment")
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl Reassembler {
    /// Whether a message is half received.
    pub fn in_progress(&self) -> bool {
        self.cur.is_some()
    }

    /// Take the frames of one datagram body from `src`, depositing into
    /// `seg` and delivering each completed message. Returns the messages
    /// delivered, or why the body is malformed (the rest of it is
    /// dropped and the half-received message abandoned).
    ///
    /// A deposit the sink refuses (bytes sealed by a freeze) is not
    /// malformed: that message's frames are still consumed by their
    /// length, in this body and later ones, without writing; every other
    /// message in the body is delivered; and the refusal is returned as
    /// the error once, after the body whose frame ended the refused
    /// message has been consumed whole.
    pub fn feed(
        &mut self,
        src: usize,
        mut body: &[u8],
        max_medium: usize,
        seg: &mut dyn Sink,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<usize, String> {
        let mut n = 0;
        let mut refused: Option<String> = None;
        while !body.is_empty() {
            match self.frame(src, body, max_medium, seg, deliver) {
                Ok((used, done, why)) => {
                    body = &body[used..];
                    n += done as usize;
                    if let Some(why) = why {
                        match &mut refused {
                            Some(all) => {
                                all.push_str("; ");
                                all.push_str(&why);
                            }
                            None => refused = Some(why),
                        }
                    }
                }
                Err(e) => {
                    self.cur = None;
                    return Err(e);
                }
            }
        }
        match refused {
            Some(why) => Err(why),
            None => Ok(n),
        }
    }

    fn frame(
        &mut self,
        src: usize,
        b: &[u8],
        max_medium: usize,
        seg: &mut dyn Sink,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<(usize, bool, Option<String>), String> {
        if b.len() < FRAME_HEADER {
            return Err(format!("a frame header cut short ({} B)", b.len()));
        }
        let flags = b[0];
        let nwords = b[1] as usize;
        let tag = u16::from_le_bytes([b[2], b[3]]);
        let len = u32_at(b, 4) as usize;
        let total = u32_at(b, 8) as usize;
        let deposit = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        let first = flags & F_FIRST != 0;
        let last = flags & F_LAST != 0;
        let is_dep = flags & F_DEPOSIT != 0;
        let placed = flags & F_PLACED != 0;
        if flags & !(F_FIRST | F_LAST | F_DEPOSIT | F_PLACED) != 0 {
            return Err(format!("unknown frame flags {flags:#x}"));
        }
        if placed && !(first && last && is_dep && len == 0) {
            return Err(format!(
                "a placed-payload frame with flags {flags:#x} and {len} B"
            ));
        }
        if nwords > MAX_WORDS || (!first && nwords != 0) {
            return Err(format!("{nwords} argument words"));
        }
        let words_len = nwords * 8;
        let end = FRAME_HEADER + words_len + len;
        if end > b.len() {
            return Err(format!("a frame of {len} B payload runs past its datagram"));
        }
        let data = &b[FRAME_HEADER + words_len..end];
        if first {
            if self.cur.is_some() {
                return Err("a new message began before the last one ended".into());
            }
            if is_dep {
                let fits = deposit
                    .checked_add(total as u64)
                    .is_some_and(|e| e <= seg.len() as u64);
                if !fits {
                    return Err(outside(deposit, total, seg.len()));
                }
            } else if total > max_medium {
                return Err(format!(
                    "a Medium payload of {total} B (max {max_medium} B)"
                ));
            }
            let mut words = [0u64; MAX_WORDS];
            for (i, w) in words.iter_mut().take(nwords).enumerate() {
                *w = u64::from_le_bytes(
                    b[FRAME_HEADER + 8 * i..FRAME_HEADER + 8 * i + 8]
                        .try_into()
                        .expect("8 bytes"),
                );
            }
            if placed {
                // bounds checked above; the payload is already in place,
                // delivered as its range (never a slice of the segment)
                deliver(&Delivery {
                    src,
                    tag,
                    words: &words[..nwords],
                    payload: &[],
                    deposit: Some(Deposit {
                        offset: deposit,
                        len: total,
                    }),
                });
                return Ok((end, true, None));
            }
            if len > total || (last != (len == total)) {
                return Err(format!(
                    "first frame of {len} B of a {total} B message, last={last}"
                ));
            }
            if last && !is_dep {
                // whole message in one frame: delivered where it lies
                deliver(&Delivery {
                    src,
                    tag,
                    words: &words[..nwords],
                    payload: data,
                    deposit: None,
                });
                return Ok((end, true, None));
            }
            self.cur = Some(Box::new(Partial {
                tag,
                nwords,
                words,
                total,
                got: 0,
                deposit: is_dep.then_some(deposit),
                buf: Vec::new(),
                refused: None,
            }));
        }
        let Some(p) = self.cur.as_deref_mut() else {
            return Err("a continuation frame with no message begun".into());
        };
        if !first
            && (tag != p.tag
                || total != p.total
                || is_dep != p.deposit.is_some()
                || (is_dep && Some(deposit) != p.deposit))
        {
            return Err("a continuation frame of another message".into());
        }
        if p.got + len > p.total || last != (p.got + len == p.total) {
            return Err(format!(
                "frame of {len} B at {} of a {} B message, last={last}",
                p.got, p.total
            ));
        }
        match p.deposit {
            Some(base) => {
                let off = base as usize + p.got;
                // once refused, the rest of the message is skipped (its
                // frames still consumed by their length)
                if p.refused.is_none() && !seg.write(off, data) {
                    p.refused = Some(match seg.frozen(off, len) {
                        Some(r) => format!(
                            "a deposit of {len} B at segment offset {off:#x} refused: bytes \
                             {:#x}..{:#x} are frozen (read-only on every rank until thawed)",
                            r.start, r.end
                        ),
                        None => outside(off as u64, len, seg.len()),
                    });
                }
            }
            None => {
                if p.buf.is_empty() {
                    p.buf.reserve_exact(p.total);
                }
                p.buf.extend_from_slice(data);
            }
        }
        p.got += len;
        if !last {
            return Ok((end, false, None));
        }
        let p = *self.cur.take().expect("in progress");
        if let Some(why) = p.refused {
            // not delivered: its bytes did not all land
            return Ok((end, false, Some(why)));
        }
        // A deposit (written in range, checked per frame above) is
        // delivered as its range, never as a slice of the segment.
        let (payload, deposit) = match p.deposit {
            Some(offset) => (
                &[][..],
                Some(Deposit {
                    offset,
                    len: p.total,
                }),
            ),
            None => (&p.buf[..], None),
        };
        deliver(&Delivery {
            src,
            tag: p.tag,
            words: &p.words[..p.nwords],
            payload,
            deposit,
        });
        Ok((end, true, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fabrics' sink refuses bytes outside its segment by itself, in
    /// every build (it was a `debug_assert!`, so a release build wrote
    /// wherever it was told): here the segment is the first 64 bytes of a
    /// 128-byte buffer, and nothing past them may change.
    #[test]
    fn the_segment_sink_refuses_bytes_outside_in_every_build() {
        let mut buf = vec![0u8; 128];
        // SAFETY: `buf` outlives the sink and is read only after its use.
        let seg = unsafe { SegmentRef::new(buf.as_mut_ptr(), 64) };
        let frozen = FrozenRanges::default();
        // SAFETY: as above.
        let mut sink = unsafe { SegmentSink::new(seg, &frozen) };
        assert!(sink.write(56, &[1; 8]), "the last 8 bytes are inside");
        assert!(!sink.write(60, &[2; 8]), "4 bytes past the end");
        assert!(
            !sink.write(usize::MAX - 2, &[3; 8]),
            "an offset that overflows"
        );
        assert_eq!(&buf[56..64], &[1; 8]);
        assert!(
            buf[64..].iter().all(|&b| b == 0),
            "written outside: {buf:?}"
        );
        // the same through the vector sink
        let mut v = vec![0u8; 64];
        assert!(!Sink::write(&mut v, 60, &[2; 8]) && v.iter().all(|&b| b == 0));
    }

    /// A payload read out of a segment ([`PayloadSrc::Segment`]) is framed
    /// byte for byte as the same bytes given as a slice, for every cut of
    /// the message into frames: seeded random segment offsets, lengths
    /// (0 to 3 frames' worth), word counts, frame rooms and what the body
    /// already holds.
    #[test]
    fn a_segment_source_frames_exactly_as_the_same_bytes_as_a_slice() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        // a cheap pattern with no short period (the random numbers go to
        // the cuts; 6000 of them cost seconds under Miri)
        let mut seg: Vec<u8> = (0..6000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let copy = seg.clone();
        // SAFETY: `seg` outlives every use below and is only read (through
        // the sources) until the end, where it is compared unchanged.
        let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
        let words = [5u64, 6, 7];
        // fewer and shorter under Miri (CI's Miri run is near its budget)
        let (rounds, longest) = if cfg!(miri) { (4, 1500) } else { (200, 4000) };
        for _ in 0..rounds {
            let len = rng.gen_range(0..longest);
            let off = rng.gen_range(0..=seg.len() - len);
            let room = rng.gen_range(FRAME_HEADER + 24 + 1..2000);
            let nw = rng.gen_range(0..=words.len());
            let lead = rng.gen_range(0..16);
            // SAFETY: as above.
            let src = unsafe { SegmentBytes::new(r, off, len) }.expect("inside");
            let mk = |payload| SrcMsg {
                tag: 9,
                words: &words[..nw],
                payload,
                deposit: None,
            };
            let (a, b) = (
                mk(PayloadSrc::Segment(src)),
                mk(PayloadSrc::Bytes(&copy[off..off + len])),
            );
            let (mut fa, mut fb) = (vec![1u8; lead], vec![1u8; lead]);
            let mut from = 0;
            loop {
                let na = append_src(&mut fa, &a, from, room);
                let nb = append_src(&mut fb, &b, from, room);
                assert_eq!(na, nb, "len {len} room {room} from {from}");
                from += na.expect("room for a frame");
                assert_eq!(fa, fb, "len {len} off {off} room {room} from {from}");
                if from == len {
                    break;
                }
            }
        }
        assert_eq!(seg, copy, "the source was written");
    }

    #[test]
    fn fragments_reassemble_and_coalesce() {
        let big: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let msgs = [
            OutMsg {
                tag: 1,
                words: &[1, 2],
                payload: &[],
                deposit: None,
            },
            OutMsg {
                tag: 2,
                words: &[3],
                payload: &big,
                deposit: None,
            },
            OutMsg {
                tag: 3,
                words: &[],
                payload: &big[..3000],
                deposit: Some(100),
            },
        ];
        let mut bodies = vec![Vec::new()];
        for m in &msgs {
            let mut from = 0;
            loop {
                let body = bodies.last_mut().unwrap();
                let room = 1400 - body.len();
                match append(body, m, from, room) {
                    Some(n) => {
                        from += n;
                        if from == m.payload.len() {
                            break;
                        }
                    }
                    None => bodies.push(Vec::new()),
                }
            }
        }
        assert!(bodies.len() > 3);
        let mut seg = vec![0u8; 4096];
        let mut r = Reassembler::default();
        let mut got = Vec::new();
        for b in &bodies {
            r.feed(7, b, 65536, &mut seg, &mut |d| got.push(d.owned()))
                .unwrap();
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (7, 1, vec![1, 2], vec![], None));
        assert_eq!(got[1].3, big);
        // the deposit arrives as its range; the bytes are in the segment
        assert!(got[2].3.is_empty());
        assert_eq!(
            got[2].4,
            Some(Deposit {
                offset: 100,
                len: 3000
            })
        );
        assert_eq!(&seg[100..3100], &big[..3000]);
    }

    #[test]
    fn a_placed_payload_is_delivered_from_the_segment() {
        let mut seg = vec![0u8; 4096];
        seg[200..210].copy_from_slice(&[9; 10]);
        let m = OutMsg {
            tag: 4,
            words: &[5],
            payload: &[9; 10],
            deposit: Some(200),
        };
        let mut b = Vec::new();
        append_placed(&mut b, &m, 100).unwrap();
        assert_eq!(b.len(), FRAME_HEADER + 8);
        let mut got = Vec::new();
        Reassembler::default()
            .feed(3, &b, 100, &mut seg, &mut |d| {
                got.push((d.tag, d.words.to_vec(), d.payload.to_vec(), d.deposit))
            })
            .unwrap();
        let want = Deposit {
            offset: 200,
            len: 10,
        };
        assert_eq!(got, vec![(4, vec![5], vec![], Some(want))]);
        // out of the segment: refused, nothing delivered
        let m = OutMsg {
            deposit: Some(4090),
            ..m
        };
        let mut b = Vec::new();
        append_placed(&mut b, &m, 100).unwrap();
        let e = Reassembler::default()
            .feed(3, &b, 100, &mut seg, &mut |_| panic!("delivered"))
            .unwrap_err();
        assert!(e.contains("outside"), "{e}");
        // a placed frame that carries bytes, or is not a deposit: malformed
        let mut bad = b.clone();
        bad[0] &= !F_DEPOSIT;
        assert!(Reassembler::default()
            .feed(3, &bad, 100, &mut seg, &mut |_| panic!("delivered"))
            .is_err());
    }

    /// A deposit into a frozen range is refused by the sink itself, chunk
    /// by chunk (the range may be frozen between two datagrams of one
    /// message), and the reassembler reports it naming the bytes; nothing
    /// is written into them.
    #[test]
    fn the_segment_sink_refuses_frozen_bytes() {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` outlives the sinks and is read only after their use.
        let seg = unsafe { SegmentRef::new(buf.as_mut_ptr(), 256) };
        let frozen = FrozenRanges::default();
        frozen.add(64, 64).unwrap();
        frozen.seal(64, 64).unwrap();
        // SAFETY: as above.
        let mut sink = unsafe { SegmentSink::new(seg, &frozen) };
        assert!(sink.write(0, &[1; 64]), "below the frozen range");
        assert!(!sink.write(60, &[2; 8]), "4 bytes into the frozen range");
        assert!(!sink.write(100, &[3; 8]), "inside the frozen range");
        assert!(sink.write(128, &[4; 8]), "just past it");
        // a message of two frames: the range is frozen after the first
        let m = OutMsg {
            tag: 1,
            words: &[],
            payload: &[9; 100],
            deposit: Some(32),
        };
        let (mut b1, mut b2) = (Vec::new(), Vec::new());
        assert_eq!(append(&mut b1, &m, 0, FRAME_HEADER + 30), Some(30));
        assert_eq!(append(&mut b2, &m, 30, 1000), Some(70));
        let mut r = Reassembler::default();
        frozen.remove(64, 64).unwrap();
        // SAFETY: as above.
        let mut sink = unsafe { SegmentSink::new(seg, &frozen) };
        r.feed(5, &b1, 100, &mut sink, &mut |_| panic!("delivered"))
            .unwrap();
        frozen.add(64, 64).unwrap();
        assert!(
            Sink::frozen(&sink, 64, 8).is_none(),
            "marked only: deposits on their way still land"
        );
        frozen.seal(64, 64).unwrap();
        let e = r
            .feed(5, &b2, 100, &mut sink, &mut |_| panic!("delivered"))
            .unwrap_err();
        assert!(e.contains("frozen"), "{e}");
        assert!(buf[32..62].iter().all(|&x| x == 9), "the first chunk");
        assert!(
            buf[64..128].iter().all(|&x| x == 0),
            "written into frozen bytes: {:?}",
            &buf[64..128]
        );
    }

    /// A refused deposit is one message's state, not a malformed body: the
    /// other messages of its datagram are delivered (they may be put
    /// replies or barrier arrivals a sync waits for), its continuation
    /// frames in later datagrams are consumed without writing, and the
    /// refusal is reported once, when its last frame arrives.
    #[test]
    fn a_refused_deposit_drops_no_other_message() {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` outlives the sink and is read only after its use.
        let seg = unsafe { SegmentRef::new(buf.as_mut_ptr(), 256) };
        let frozen = FrozenRanges::default();
        frozen.add(64, 64).unwrap();
        frozen.seal(64, 64).unwrap();
        // SAFETY: as above.
        let mut sink = unsafe { SegmentSink::new(seg, &frozen) };
        let short = |tag| OutMsg {
            tag,
            words: &[7],
            payload: &[],
            deposit: None,
        };
        let long = OutMsg {
            tag: 1,
            words: &[],
            payload: &[9; 100],
            deposit: Some(64),
        };
        let mut r = Reassembler::default();
        let mut got = Vec::new();
        // [a whole Long into the sealed range, a Short]
        let mut b = Vec::new();
        assert_eq!(append(&mut b, &long, 0, 1000), Some(100));
        append(&mut b, &short(2), 0, 1000).unwrap();
        let e = r
            .feed(5, &b, 100, &mut sink, &mut |d| got.push(d.tag))
            .unwrap_err();
        assert!(e.contains("frozen"), "{e}");
        assert_eq!(got, vec![2], "the Short after the refused Long");
        assert!(!r.in_progress());
        // [a Short, the first frame of a Long into the sealed range], then
        // [its last frame, a Short], then [a Short]
        let (mut b1, mut b2, mut b3) = (Vec::new(), Vec::new(), Vec::new());
        append(&mut b1, &short(3), 0, 1000).unwrap();
        assert_eq!(append(&mut b1, &long, 0, FRAME_HEADER + 30), Some(30));
        assert_eq!(append(&mut b2, &long, 30, 1000), Some(70));
        append(&mut b2, &short(4), 0, 1000).unwrap();
        append(&mut b3, &short(5), 0, 1000).unwrap();
        got.clear();
        let n = r.feed(5, &b1, 100, &mut sink, &mut |d| got.push(d.tag));
        assert_eq!(n, Ok(1), "reported when the message ends, not before");
        let e = r
            .feed(5, &b2, 100, &mut sink, &mut |d| got.push(d.tag))
            .unwrap_err();
        assert!(e.contains("frozen") && !e.contains("; "), "{e}");
        let n = r.feed(5, &b3, 100, &mut sink, &mut |d| got.push(d.tag));
        assert_eq!(n, Ok(1), "no second error");
        assert_eq!(got, vec![3, 4, 5]);
        assert!(
            buf[64..128].iter().all(|&x| x == 0),
            "written into frozen bytes"
        );
    }

    #[test]
    fn out_of_segment_deposit_is_refused() {
        let mut b = Vec::new();
        let m = OutMsg {
            tag: 1,
            words: &[],
            payload: &[1; 10],
            deposit: Some(4090),
        };
        append(&mut b, &m, 0, 1000).unwrap();
        let mut seg = vec![0u8; 4096];
        let e = Reassembler::default()
            .feed(0, &b, 100, &mut seg, &mut |_| panic!("delivered"))
            .unwrap_err();
        assert!(e.contains("outside"), "{e}");
        assert!(seg.iter().all(|&x| x == 0));
    }
}
