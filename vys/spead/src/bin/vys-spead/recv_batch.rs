//! `vys-spead ingest`'s receive: up to [`BATCH`] datagrams per system
//! call (`recvmmsg`, waiting for the first only), handed out one by one.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Datagrams one `recvmmsg` takes at most.
pub const BATCH: usize = 32;
/// Bytes per datagram buffer (the largest UDP payload fits).
const DATAGRAM: usize = 65_536;

/// Buffers for one batch and where handing them out stands.
pub struct Receiver {
    bufs: Vec<Vec<u8>>,
    lens: [usize; BATCH],
    /// Datagrams in the current batch, and the next to hand out.
    got: usize,
    next: usize,
}

impl Receiver {
    /// Buffers for [`BATCH`] datagrams.
    pub fn with_buffers() -> Receiver {
        Receiver {
            bufs: (0..BATCH).map(|_| vec![0u8; DATAGRAM]).collect(),
            lens: [0; BATCH],
            got: 0,
            next: 0,
        }
    }

    /// The next datagram: from the current batch, else from a new one
    /// (waiting as the socket's read timeout says for its first
    /// datagram; `WouldBlock` / `TimedOut` if none came).
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<&[u8]> {
        if self.next >= self.got {
            self.fill(sock)?;
        }
        let i = self.next;
        self.next += 1;
        Ok(&self.bufs[i][..self.lens[i]])
    }

    fn fill(&mut self, sock: &UdpSocket) -> io::Result<()> {
        self.got = 0;
        self.next = 0;
        let mut iov: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all zeroes is a valid value.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs` holds BATCH headers, each pointing at one iovec
        // over a live buffer of `bufs` of the stated length; all outlive
        // the call, which writes only into those buffers and the headers'
        // length and flag fields.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (n as usize).min(BATCH);
        for (len, m) in self.lens.iter_mut().zip(&msgs[..n]) {
            *len = (m.msg_len as usize).min(DATAGRAM);
        }
        self.got = n;
        Ok(())
    }
}
