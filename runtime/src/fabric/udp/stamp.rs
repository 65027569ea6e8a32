//! Kernel receive timestamps (`SO_TIMESTAMPNS`): when a datagram reached
//! the socket, not when the rank got around to reading it. The difference
//! is time the receiving host added (a descheduled rank, a long handler)
//! and is reported to the sender as part of the hold time (see
//! `proto/hold.rs`), so the congestion controller does not read it as a
//! queue in the network. The timestamp comes with the datagram in the
//! same `recvmsg` call (no extra system call; for a `recvmmsg` batch,
//! `recv_batch.rs` gives each message its own control buffer and parses
//! it with [`stamp_of`]); it is on the realtime
//! clock, so the driver turns it into an age (realtime now minus stamp)
//! and subtracts that from a monotonic reading taken with the realtime
//! one ([`clocks`], [`arrival`]); not from the poll's one clock reading,
//! which a rank descheduled before its read makes older than the stamp.

use std::io;
use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Ask the kernel to stamp every datagram the socket receives. Returns
/// whether it agreed (without stamps a datagram's arrival is taken to be
/// the time it is read, as before).
pub(super) fn enable(sock: &UdpSocket) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on our own open socket with a c_int option value
    // of the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Room for the timestamp's control message (a `cmsghdr` and a
/// `timespec`, with room to spare), aligned as a `cmsghdr` wants.
#[repr(C, align(8))]
struct Control([MaybeUninit<u8>; CONTROL_LEN]);

/// Receive one datagram into `buf` (like `recv`): its length and, if the
/// kernel stamped it, how long ago (ns) it reached the socket, with the
/// monotonic clock at which that age was measured ([`arrival`]).
pub(super) fn recv(
    sock: &socket2::SockRef<'_>,
    buf: &mut [MaybeUninit<u8>],
) -> io::Result<(usize, Option<(u64, std::time::Instant)>)> {
    let mut control = Control([MaybeUninit::uninit(); CONTROL_LEN]);
    let mut bufs = [socket2::MaybeUninitSlice::new(buf)];
    let mut msg = socket2::MsgHdrMut::new()
        .with_buffers(&mut bufs)
        .with_control(&mut control.0);
    let n = sock.recvmsg(&mut msg, 0)?;
    let clen = msg.control_len().min(control.0.len());
    // SAFETY: recvmsg initialized the first `control_len` bytes of the
    // control buffer (clamped to its size).
    let c = unsafe { std::slice::from_raw_parts(control.0.as_ptr().cast::<u8>(), clen) };
    Ok((
        n,
        stamp_of(c).map(|s| {
            let (now, at) = clocks();
            (age(s, now), at)
        }),
    ))
}

/// Room for one datagram's control data in `recv_batch`'s `recvmmsg`
/// (the size of [`Control`]'s).
pub(super) const CONTROL_LEN: usize = 64;

/// The `SCM_TIMESTAMPNS` in a control buffer, as ns of the realtime clock.
/// Every byte is checked: lengths that run past the buffer, are shorter
/// than a header, have no room for a `timespec` or overflow the offsets'
/// arithmetic give `None`.
pub(super) fn stamp_of(c: &[u8]) -> Option<u64> {
    let hdr = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let ts = std::mem::size_of::<libc::timespec>();
    let mut off = 0usize;
    while off.checked_add(hdr)? <= c.len() {
        // SAFETY: `off + hdr <= c.len()`: a cmsghdr's bytes are in the
        // buffer (read unaligned: no alignment is assumed).
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(c[off..].as_ptr().cast()) };
        let len = h.cmsg_len as usize;
        // a length near usize::MAX (hostile control data) must neither
        // overflow the sum nor wrap the step to the next message
        let end = off.checked_add(len)?;
        if len < hdr || end > c.len() {
            return None;
        }
        let data = off + hdr.div_ceil(align) * align;
        if h.cmsg_level == libc::SOL_SOCKET
            && h.cmsg_type == libc::SCM_TIMESTAMPNS
            && data.checked_add(ts)? <= end
        {
            // SAFETY: `data + ts <= end = off + len <= c.len()`: the timespec's
            // bytes are in the buffer (read unaligned).
            let t: libc::timespec = unsafe { std::ptr::read_unaligned(c[data..].as_ptr().cast()) };
            let (s, ns) = (
                u64::try_from(t.tv_sec).ok()?,
                u64::try_from(t.tv_nsec).ok()?,
            );
            return s.checked_mul(1_000_000_000)?.checked_add(ns);
        }
        // `len >= hdr > 0`, so the step is positive: the walk ends
        let step = len.div_ceil(align).checked_mul(align)?;
        off = off.checked_add(step)?;
    }
    None
}

/// The realtime clock, ns (the stamps' clock; 0 if before 1970).
pub(super) fn realtime_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The realtime clock (ns, as [`realtime_now`]) and the monotonic clock,
/// read together: an age measured on the first is subtracted from the
/// second ([`arrival`]).
pub(super) fn clocks() -> (u64, std::time::Instant) {
    let real = realtime_now();
    (real, std::time::Instant::now())
}

/// When a datagram reached the socket, in ns since `t0` on the monotonic
/// clock: `waited` ns before `at` (the monotonic half of the [`clocks`]
/// reading its age was measured against).
pub(super) fn arrival(waited: u64, at: std::time::Instant, t0: std::time::Instant) -> u64 {
    (at.saturating_duration_since(t0).as_nanos() as u64).saturating_sub(waited)
}

/// How long before `now` (the realtime clock) a stamp was (0 if in the
/// future: clocks step).
pub(super) fn age(stamp: u64, now: u64) -> u64 {
    now.saturating_sub(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn stamps_give_the_time_a_datagram_waited_in_the_socket() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        assert!(enable(&a));
        // The kernel turns arrival stamping on for the whole system in a
        // deferred work item when the first socket asks: until then a
        // datagram is stamped when it is read. So a few tries (bounded);
        // each datagram waits at least 20 ms in the socket before it is
        // read, and one stamped on arrival says so.
        let mut seen = Vec::new();
        for _ in 0..50 {
            b.send_to(b"stamped", a.local_addr().unwrap()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let mut buf = [MaybeUninit::uninit(); 64];
            let (n, waited) = recv(&socket2::SockRef::from(&a), &mut buf).unwrap();
            assert_eq!(n, 7);
            let (waited, _) = waited.expect("a kernel stamp");
            assert!(waited < 10_000_000_000, "waited {waited} ns");
            seen.push(waited);
            if waited >= 15_000_000 {
                break;
            }
        }
        assert!(
            seen.last().is_some_and(|&w| w >= 15_000_000),
            "no stamp on arrival: waited {seen:?} ns"
        );
        // garbage control data is no stamp
        assert_eq!(stamp_of(&[0xff; 40]), None);
        assert_eq!(stamp_of(&[]), None);
    }

    /// A control buffer as the kernel writes it: one message of `level`,
    /// `ty`, with `data` after the (aligned) header and `cmsg_len` as given.
    fn cmsg(level: i32, ty: i32, cmsg_len: usize, data: &[u8]) -> Vec<u8> {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let align = std::mem::size_of::<usize>();
        let start = hdr.div_ceil(align) * align;
        // SAFETY: cmsghdr is plain data; all zeroes is a valid value.
        let mut h: libc::cmsghdr = unsafe { std::mem::zeroed() };
        h.cmsg_len = cmsg_len as _;
        h.cmsg_level = level;
        h.cmsg_type = ty;
        let mut c = vec![0u8; start + data.len()];
        // SAFETY: `c` has at least `hdr` bytes (written unaligned).
        unsafe { std::ptr::write_unaligned(c.as_mut_ptr().cast(), h) };
        c[start..].copy_from_slice(data);
        c
    }

    /// Every length in the control data is checked against the buffer:
    /// a well-formed stamp is read, a truncated, overlong, zero-length or
    /// foreign message is none (and nothing panics or loops).
    #[test]
    fn stamp_of_checks_every_length() {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let align = std::mem::size_of::<usize>();
        let start = hdr.div_ceil(align) * align;
        let tsl = std::mem::size_of::<libc::timespec>();
        // SAFETY: timespec is plain data; all zeroes is a valid value.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        ts.tv_sec = 1_700_000_000;
        ts.tv_nsec = 123_456_789;
        // SAFETY: reading the bytes of a plain-data value.
        let tsb =
            unsafe { std::slice::from_raw_parts((&ts as *const libc::timespec).cast::<u8>(), tsl) };
        let want = 1_700_000_000u64 * 1_000_000_000 + 123_456_789;
        let (sol, scm) = (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS);
        let good = cmsg(sol, scm, start + tsl, tsb);
        assert_eq!(stamp_of(&good), Some(want));
        // cut anywhere: no stamp
        for cut in 0..good.len() {
            assert_eq!(stamp_of(&good[..cut]), None, "cut at {cut}");
        }
        // a length past the buffer, shorter than a header, or without
        // room for the timespec
        assert_eq!(stamp_of(&cmsg(sol, scm, start + tsl + 1, tsb)), None);
        assert_eq!(stamp_of(&cmsg(sol, scm, usize::MAX >> 1, tsb)), None);
        assert_eq!(stamp_of(&cmsg(sol, scm, 0, tsb)), None);
        assert_eq!(stamp_of(&cmsg(sol, scm, hdr - 1, tsb)), None);
        assert_eq!(stamp_of(&cmsg(sol, scm, start + tsl - 1, tsb)), None);
        // another message first, then the stamp
        let mut two = cmsg(sol, libc::SCM_RIGHTS, start + 4, &[0; 8]);
        two.extend_from_slice(&good);
        assert_eq!(stamp_of(&two), Some(want));
        // a negative time is no stamp
        ts.tv_sec = -1;
        // SAFETY: as above.
        let neg =
            unsafe { std::slice::from_raw_parts((&ts as *const libc::timespec).cast::<u8>(), tsl) };
        assert_eq!(stamp_of(&cmsg(sol, scm, start + tsl, neg)), None);
        assert_eq!(age(10, 5), 0);
        assert_eq!(age(5, 10), 5);
    }

    /// A valid first message followed by one whose `cmsg_len` is near
    /// `usize::MAX` is no stamp: the offsets' sums must not overflow (a
    /// panic in debug, an endless walk in release). Run on a thread and
    /// bounded in time, so an endless walk fails the test.
    #[test]
    fn stamp_of_survives_a_length_near_usize_max() {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let align = std::mem::size_of::<usize>();
        let start = hdr.div_ceil(align) * align;
        let (sol, scm) = (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            for small in 0..2 * align {
                let mut c = cmsg(sol, libc::SCM_RIGHTS, start + 4, &[0; 8]);
                c.extend_from_slice(&cmsg(sol, scm, usize::MAX - small, &[0; 16]));
                out.push(std::panic::catch_unwind(|| stamp_of(&c)).ok());
            }
            let _ = tx.send(out);
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("stamp_of returns (no endless walk)");
        assert!(got.iter().all(|r| *r == Some(None)), "{got:?}");
    }
}
