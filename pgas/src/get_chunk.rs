//! The size of an AM get's chunks: one request and one reply each.

/// Payload bytes a get of `len` bytes asks for per request, given the
/// largest Medium reply `max_medium` and the largest that arrives in one
/// piece `unsplit` (`Endpoint::max_medium_unsplit`, with the reply's
/// arguments; over UDP one datagram body).
///
/// * `len <= max_medium`: one chunk (one round trip), as before the
///   unsplit bound existed; cutting a 64 KiB get into 65,379 + 157 B
///   would cost a second request/reply to save one copy of 64 KiB.
/// * else `unsplit`, if it is at least half of `max_medium`: at most
///   about twice the chunks, each delivered from its receive buffer
///   instead of being reassembled (one copy of every byte saved).
/// * else `max_medium` (replies are split and reassembled as before): a
///   small datagram (`SPLITRT_UDP_MTU=1472`, 1,344 B unsplit) would turn a
///   1 MiB get into 781 round trips instead of 16.
pub(crate) fn get_chunk(len: usize, max_medium: usize, unsplit: usize) -> usize {
    let max_medium = max_medium.max(1);
    if len <= max_medium {
        len.max(1)
    } else if unsplit >= max_medium / 2 {
        unsplit.clamp(1, max_medium)
    } else {
        max_medium
    }
}

#[cfg(test)]
mod tests {
    use super::get_chunk;

    /// `max_medium_unsplit(peer, 3)` over UDP for a datagram size: the
    /// body (datagram less 64 B header and 16 B tag) less the frame header
    /// (24 B) and the 3 reply arguments.
    fn udp_unsplit(mtu: usize) -> usize {
        mtu - 64 - 16 - 24 - 3 * 8
    }

    const MEDIUM: usize = 64 << 10; // the default max Medium

    #[test]
    fn chunk_size_by_datagram_size_and_length() {
        let cases = [
            // (mtu, len, chunk, chunks)
            (65507, 64 << 10, 64 << 10, 1),
            (65507, 1 << 20, 65379, 17),
            (9000, 64 << 10, 64 << 10, 1),
            (9000, 1 << 20, 64 << 10, 16),
            (1472, 64 << 10, 64 << 10, 1),
            (1472, 1 << 20, 64 << 10, 16),
        ];
        for (mtu, len, chunk, chunks) in cases {
            let c = get_chunk(len, MEDIUM, udp_unsplit(mtu));
            assert_eq!((c, len.div_ceil(c)), (chunk, chunks), "mtu {mtu}, {len} B");
        }
        // a fabric that never splits (unsplit = max Medium), and edges
        assert_eq!(get_chunk(1 << 20, MEDIUM, MEDIUM), MEDIUM);
        assert_eq!(get_chunk(0, MEDIUM, 100), 1);
        assert_eq!(get_chunk(MEDIUM + 1, MEDIUM, MEDIUM / 2), MEDIUM / 2);
        assert_eq!(get_chunk(MEDIUM + 1, MEDIUM, MEDIUM / 2 - 1), MEDIUM);
        assert_eq!(get_chunk(10, 0, 0), 1);
    }
}
