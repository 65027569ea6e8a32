//! A payload source that is a range of this rank's segment, read by the
//! fabric as it frames the message: the bytes go from the segment straight
//! into the fabric's own buffer (a UDP datagram), one copy, with no `&[u8]`
//! over segment memory in between.
//!
//! A safe reference to segment bytes would be unsound: native puts,
//! stores, atomics, Long deposits, other threads and other ranks may write
//! them at any time (see `SegmentRef`). So the range is held as a raw
//! pointer and a length, like [`SegmentRef`] itself, and the only thing
//! anyone can do with it is copy its bytes out through a raw copy
//! ([`copy_to_end`](SegmentBytes::copy_to_end)): no reference ever aliases
//! a write. A write racing the copy from another process (a peer's put
//! through the shm mapping, an RDMA NIC) tears it, as any get racing a
//! put does; a write racing it from another thread of this process is a
//! data race by the letter of Rust's memory model, the same one a native
//! get accepts and for the same reason (`docs/safety.md`, "What remains
//! outside the reference model": closing it needs an atomic `memcpy`,
//! RFC 3301). Building one is `unsafe` and only from a [`SegmentRef`] and a
//! range checked against it, so no safe caller can make the fabric read an
//! address of its choosing.

use std::marker::PhantomData;

use super::SegmentRef;

/// `len` bytes at offset `off` of a mapped segment, to send as a Medium
/// payload (see [`Fabric::try_send_segment_why`](super::Fabric::try_send_segment_why)).
///
/// ```
/// # use splitrt_runtime::fabric::{SegmentBytes, SegmentRef};
/// let mut seg = vec![0u8; 64];
/// seg[8..12].copy_from_slice(b"abcd");
/// // SAFETY: `seg` outlives both references, and nothing else writes it.
/// let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
/// // SAFETY: as above: the segment stays allocated while `src` is used.
/// let src = unsafe { SegmentBytes::new(r, 8, 4) }.expect("inside");
/// let mut out = b"x".to_vec();
/// src.copy_to_end(1, 3, &mut out);
/// assert_eq!(out, b"xbcd");
/// // SAFETY: as above.
/// assert!(unsafe { SegmentBytes::new(r, 62, 4) }.is_none());
/// ```
///
/// Safe code cannot make one (which a fabric would then read from):
///
/// ```compile_fail,E0133
/// # use splitrt_runtime::fabric::{SegmentBytes, SegmentRef};
/// let src = SegmentBytes::new(SegmentRef::empty(), 0, 0);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SegmentBytes<'a> {
    /// First byte (inside the segment it was built from).
    ptr: *const u8,
    /// Length in bytes.
    len: usize,
    /// Ties the value to `'a`, the span the constructor's caller promised
    /// (under [`new`](Self::new)'s `unsafe` contract) to keep the mapping
    /// alive: nothing is borrowed (`new` takes the `SegmentRef` by value),
    /// so the compiler checks no more than that promise's lifetime.
    _mapped: PhantomData<&'a SegmentRef>,
}

impl<'a> SegmentBytes<'a> {
    /// The `len` bytes at offset `off` of `seg`, or `None` if they do not
    /// all lie inside it.
    ///
    /// # Safety
    /// `seg` must be a live mapping (as [`SegmentRef::new`] requires, or
    /// one a fabric handed out whose fabric is alive) and stay mapped and
    /// readable for all of `'a`, and the caller must hold no `&mut`
    /// reference to these bytes during `'a`. Other processes may write the
    /// range meanwhile (a copy out of it then sees some mix of old and new
    /// bytes); another thread of this process writing it while a copy runs
    /// is the data race `docs/safety.md` ("What remains outside the
    /// reference model") accepts for native gets, not a defined mix.
    #[inline]
    pub unsafe fn new(seg: SegmentRef, off: usize, len: usize) -> Option<Self> {
        if !seg.contains(off, len) {
            return None;
        }
        Some(Self {
            ptr: seg.base().cast_const().wrapping_add(off),
            len,
            _mapped: PhantomData,
        })
    }

    /// Length in bytes.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append its bytes `from..from + n` to `out`, by one raw copy out of
    /// the segment.
    ///
    /// # Panics
    /// If `from + n` exceeds [`len`](Self::len) (a caller's bug: the range
    /// is the sender's own, never a peer's).
    #[inline]
    pub fn copy_to_end(&self, from: usize, n: usize, out: &mut Vec<u8>) {
        assert!(
            from.checked_add(n).is_some_and(|e| e <= self.len),
            "bytes {from}+{n} of a {} B segment range",
            self.len
        );
        out.reserve(n);
        let at = out.len();
        let (src, dst) = (
            self.ptr.wrapping_add(from),
            out.as_mut_ptr().wrapping_add(at),
        );
        // SAFETY: `from + n <= len` (checked above), and `ptr..ptr + len`
        // lies in a segment the constructor's caller keeps mapped for 'a
        // (its contract), so the source is readable for n bytes; `out` has
        // room for n more bytes past `at` (reserved above) and is this
        // caller's own vector, never the segment, so the two do not
        // overlap (memmove would cope if they did).
        unsafe { crate::memmove::memmove(src, dst, n) };
        // SAFETY: the copy initialised bytes at..at + n, inside the
        // capacity reserved above.
        unsafe { out.set_len(at + n) };
    }
}

thread_local! {
    /// The buffer [`send_through_bounce`] copies into, kept between sends.
    static BOUNCE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(any(test, feature = "test-doubles"))]
thread_local! {
    /// Copies [`send_through_bounce`] made on this thread (for tests).
    static BOUNCE_COPIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// **Test double.** How many times [`send_through_bounce`] copied a
/// segment source into its buffer on this thread (every copy through it:
/// the [`Fabric`](super::Fabric) trait's default `try_send_segment_why`,
/// and the AM layer's copy for fabrics that frame no segment source
/// themselves). Exists with the cargo feature `test-doubles`.
#[cfg(any(test, feature = "test-doubles"))]
pub fn bounce_copies() -> u64 {
    BOUNCE_COPIES.try_with(|n| n.get()).unwrap_or(0)
}

/// Run `send` on the bytes of `src`, after one copy into a buffer of this
/// thread: how a fabric that frames no segment source itself sends one
/// (the [`Fabric`](super::Fabric) trait's default `try_send_segment_why`),
/// and how the AM layer sends one to such a fabric, copying once for all
/// the tries a full peer makes it retry. The buffer is taken out of the
/// thread-local while in use (a send nested in `send`, from a handler run
/// while waiting, makes its own) and kept for the next send unless it
/// grew past 1 MiB. The caller bounds `src.len()` (checks it against
/// the fabric's Medium maximum, [`Fabric::max_inline`](super::Fabric::max_inline))
/// before calling: this copies whatever it is given, however long.
pub fn send_through_bounce<T>(
    src: SegmentBytes<'_>,
    send: impl FnOnce(&[u8]) -> crate::Result<T>,
) -> crate::Result<T> {
    // During the thread's teardown (a send from another thread-local's
    // destructor) the buffer may be gone already: a fresh one then, and
    // none kept.
    let mut buf = BOUNCE.try_with(|b| b.take()).unwrap_or_default();
    buf.clear();
    src.copy_to_end(0, src.len(), &mut buf);
    #[cfg(any(test, feature = "test-doubles"))]
    let _ = BOUNCE_COPIES.try_with(|n| n.set(n.get() + 1));
    let r = send(&buf);
    if buf.capacity() <= 1 << 20 {
        // a failed put-back (teardown) drops the buffer here
        let _ = BOUNCE.try_with(|b| b.set(buf));
    }
    r
}

// SAFETY: an address range, read only through raw copies (see the type's
// documentation), like `SegmentRef`; moving it to another thread changes
// nothing about who keeps the mapping alive ('a).
unsafe impl Send for SegmentBytes<'_> {}
// SAFETY: as above; `&SegmentBytes` only reads the pointer and length.
unsafe impl Sync for SegmentBytes<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_exactly_the_range_and_refuses_ranges_outside() {
        let mut seg: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        // SAFETY: `seg` outlives every use below; nothing else writes it.
        let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
        for (off, len) in [(0, 0), (0, 1000), (999, 1), (300, 457)] {
            // SAFETY: as above.
            let s = unsafe { SegmentBytes::new(r, off, len) }.expect("inside");
            assert_eq!(s.len(), len);
            let mut out = vec![7];
            s.copy_to_end(0, len, &mut out);
            assert_eq!(out[0], 7);
            assert_eq!(&out[1..], &seg[off..off + len]);
            if len > 2 {
                let mut part = Vec::new();
                s.copy_to_end(1, len - 2, &mut part);
                assert_eq!(&part[..], &seg[off + 1..off + len - 1]);
            }
        }
        for (off, len) in [(1000, 1), (999, 2), (usize::MAX, 2), (0, 1001)] {
            // SAFETY: as above (and nothing is built).
            assert!(unsafe { SegmentBytes::new(r, off, len) }.is_none());
        }
    }

    #[test]
    #[should_panic(expected = "segment range")]
    fn a_copy_past_the_range_panics_instead_of_reading_past_it() {
        let mut seg = vec![0u8; 16];
        // SAFETY: `seg` outlives every use below.
        let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
        // SAFETY: as above.
        let s = unsafe { SegmentBytes::new(r, 8, 4) }.expect("inside");
        s.copy_to_end(2, 3, &mut Vec::new());
    }

    /// What [`SendsAtTeardown`] saw: whether the bounce buffer was
    /// already destroyed, and what its send sent.
    type Seen = std::sync::Arc<std::sync::Mutex<Option<(bool, Option<Vec<u8>>)>>>;

    /// A thread-local whose destructor sends through the bounce buffer,
    /// recording what the send saw.
    struct SendsAtTeardown(Seen);

    impl Drop for SendsAtTeardown {
        fn drop(&mut self) {
            let mut seg = vec![3u8, 1, 4, 1, 5];
            // SAFETY: `seg` outlives `src` (both locals here); nothing
            // else reads or writes it.
            let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
            // SAFETY: as above.
            let src = unsafe { SegmentBytes::new(r, 1, 3) }.expect("inside");
            // the test means the path where the buffer is gone: record it
            let bounce_gone = BOUNCE.try_with(|_| ()).is_err();
            let got = send_through_bounce(src, |b| Ok(b.to_vec())).ok();
            *self.0.lock().unwrap() = Some((bounce_gone, got));
        }
    }

    thread_local! {
        static AT_TEARDOWN: std::cell::RefCell<Option<SendsAtTeardown>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Review of h14-bouncefix: a send from another thread-local's
    /// destructor, after the bounce buffer's own was destroyed (it was
    /// registered later, so it goes first), copies into a fresh buffer.
    /// OLD: `BOUNCE.take()` panicked there ("cannot access a Thread Local
    /// Storage value during or after destruction"), which aborts the
    /// process.
    #[test]
    fn a_send_during_thread_teardown_uses_a_fresh_buffer() {
        let seen: Seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            // registered first, so destroyed after the bounce buffer
            AT_TEARDOWN.with(|t| *t.borrow_mut() = Some(SendsAtTeardown(s2)));
            let mut seg = vec![9u8; 4];
            // SAFETY: `seg` outlives `src`; nothing else touches it.
            let r = unsafe { SegmentRef::new(seg.as_mut_ptr(), seg.len()) };
            // SAFETY: as above.
            let src = unsafe { SegmentBytes::new(r, 0, 4) }.expect("inside");
            // the bounce buffer is in use on this thread (its destructor
            // registered)
            assert_eq!(send_through_bounce(src, |b| Ok(b.len())).unwrap(), 4);
        })
        .join()
        .expect("the thread ended without a panic");
        let seen = seen.lock().unwrap().take().expect("the destructor ran");
        // (review of session 14: without this the test would pass on the
        // old code too if thread-locals were destroyed in another order)
        assert!(seen.0, "the bounce buffer was still alive at the send");
        assert_eq!(seen.1.as_deref(), Some(&[1u8, 4, 1][..]));
    }
}
