//! The read server's spare reply buffers (issue 27 part 6): each `DATA`
//! reply holds a copy of its slot until the session's window takes it,
//! and a thread that kept only a few emptied buffers allocated and freed
//! one per reply (8 KiB or 64 KiB, at tens of thousands a second: a tenth
//! of the server thread's time in `malloc` in a profile). Buffers are kept
//! as many as one session's queue holds and within the same byte bound,
//! so what the thread keeps stays bounded whatever a consumer asks for.

/// Emptied reply buffers, kept for reuse within a count and a byte bound
/// (of their capacity).
pub(crate) struct ReplyBuffers {
    bufs: Vec<Vec<u8>>,
    /// Capacity of the buffers kept, in bytes.
    bytes: usize,
    max_count: usize,
    max_bytes: usize,
}

impl ReplyBuffers {
    /// Keep at most `max_count` buffers of at most `max_bytes` together.
    pub(crate) fn new(max_count: usize, max_bytes: usize) -> ReplyBuffers {
        ReplyBuffers {
            bufs: Vec::new(),
            bytes: 0,
            max_count,
            max_bytes,
        }
    }

    /// An empty buffer: a kept one if any (its capacity reused), else new.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        match self.bufs.pop() {
            Some(mut b) => {
                self.bytes -= b.capacity();
                b.clear();
                b
            }
            None => Vec::new(),
        }
    }

    /// Keep `b` for reuse if within the bounds, else free it.
    pub(crate) fn give(&mut self, b: Vec<u8>) {
        let cap = b.capacity();
        if cap == 0 || self.bufs.len() >= self.max_count || self.bytes + cap > self.max_bytes {
            return;
        }
        self.bytes += cap;
        self.bufs.push(b);
    }

    /// Buffers kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.bufs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vysspeed_reply_buffers_are_reused_within_both_bounds() {
        let mut p = ReplyBuffers::new(4, 64 << 10);
        // reused: the capacity comes back, emptied
        let mut b = p.take();
        b.extend_from_slice(&[7; 8192]);
        let cap = b.capacity();
        p.give(b);
        let b = p.take();
        assert!(b.is_empty());
        assert_eq!(b.capacity(), cap);
        p.give(b);
        // the count bound
        for _ in 0..10 {
            p.give(Vec::with_capacity(1024));
        }
        assert_eq!(p.len(), 4);
        // the byte bound: a huge buffer (a 64 MiB slot) is never kept
        let mut q = ReplyBuffers::new(64, 1 << 20);
        q.give(Vec::with_capacity(64 << 20));
        assert_eq!(q.len(), 0);
        for _ in 0..64 {
            q.give(Vec::with_capacity(64 << 10));
        }
        assert!(q.len() <= 16, "{}", q.len());
        assert!(q.bytes <= 1 << 20);
        while q.len() > 0 {
            let _ = q.take();
        }
        assert_eq!(q.bytes, 0);
        // nothing kept: a new buffer
        assert_eq!(q.take().capacity(), 0);
    }
}
