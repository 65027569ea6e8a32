//! The hold time a datagram reports for the datagram it echoes (wire
//! field `hold`, one byte): how long the echoing rank kept that datagram
//! (from its arrival at the socket to the moment the echo left). The
//! round trip the echo times is the network's both ways plus this hold;
//! the congestion controller's delay signal subtracts it, so a receiver
//! that was descheduled, busy in a handler or delaying its
//! acknowledgement does not look like a queue in the network (Swift
//! separates host and fabric delay the same way, with NIC timestamps).
//!
//! The code is a tiny float in microseconds: 4 bits of exponent `e`, 4 of
//! mantissa `m`; `e == 0` stands for `m` us exactly, otherwise
//! `(16 + m) << (e - 1)` us (16 us to about 0.5 s, within 1/16). Encoding
//! rounds down and saturates, so a reported hold never exceeds the real
//! one and the controller never subtracts more than the host added.

/// The code for a hold of `ns` nanoseconds (rounded down; saturates at
/// 31 << 14 us, about 0.5 s: the tests' `MAX_US`).
pub(super) fn encode(ns: u64) -> u8 {
    let us = ns / 1000;
    if us < 16 {
        return us as u8;
    }
    // the top bit's position: 4 for 16..=31, which is e = 1
    let e = 63 - us.leading_zeros() as u64 - 3;
    if e > 15 {
        return 0xff;
    }
    let m = (us >> (e - 1)) - 16;
    ((e << 4) | m) as u8
}

/// The hold a code stands for, in nanoseconds.
pub(super) fn decode(code: u8) -> u64 {
    let (e, m) = ((code >> 4) as u64, (code & 15) as u64);
    let us = if e == 0 { m } else { (16 + m) << (e - 1) };
    us * 1000
}

/// Holds shorter than this (ns) are not subtracted from the round trip:
/// a delayed acknowledgement (50 us by default) or a handler's run is
/// part of every round trip alike and far below the delay target's 4 ms
/// floor, so only a host's real stalls (descheduling, a long handler) are
/// taken out.
pub(super) const HOST_DELAY_MIN: u64 = 1_000_000;

/// The hold a code stands for if it is long enough to count as the
/// host's delay (0 otherwise), in nanoseconds.
pub(super) fn host_delay(code: u8) -> u64 {
    let ns = decode(code);
    if ns >= HOST_DELAY_MIN {
        ns
    } else {
        0
    }
}

/// The network's share of a round trip (ns): from `echo` (the wire's
/// microsecond clock when the echoed datagram left) to `arrived` (when
/// its acknowledgement reached the socket, same clock), less the peer's
/// `hold` (ns, from [`host_delay`]). `None` when the three disagree: an
/// arrival before the transmission it acknowledges (a driver that
/// converted the kernel's stamp against a clock reading taken before it
/// was descheduled; the difference would wrap around the 32-bit clock
/// into a round trip of about 71 minutes), or a hold as long as the whole
/// round trip. Such a sample says nothing about the network and must not
/// count as a queue.
pub(super) fn network_rtt(arrived: u32, echo: u32, hold: u64) -> Option<u64> {
    let rt = arrived.wrapping_sub(echo) as i32;
    if rt <= 0 {
        return None;
    }
    (rt as u64 * 1000).checked_sub(hold).filter(|&n| n > 0)
}

/// Whether an acknowledgement shows that the datagram it echoes reached
/// the peer's socket before `at` (the wire's microsecond clock, like
/// `echo` and `arrived`): the acknowledgement reached this rank at
/// `arrived` and the peer held the echoed datagram `hold` ns (the decoded
/// code, however short) before the echo left, so the datagram reached the
/// peer by `arrived - hold` at the latest (the return trip only makes it
/// earlier; the code rounds the hold down, so the bound never errs
/// early). A retransmission timeout at `at` whose first acknowledgement
/// (with a hold below [`SATURATED`]) shows this waited for a host: the
/// datagram that acknowledgement echoes had crossed the network in time,
/// and the wait was the peer's (descheduled, busy) or this rank's own (it
/// ran its timers before reading the socket); it proves nothing of the
/// flight's other unacknowledged datagrams (`Cc::on_echo` then waits for
/// the acknowledgement that covers the flight, [`sent_before`]). One
/// whose datagram reached the peer only after it (a queue in the network
/// held it that long) or was resent stands. `false` when the stamps
/// disagree (`network_rtt`).
///
/// With a saturated hold ([`SATURATED`]) the hold cannot place the
/// arrival, and this only says whether the echoed transmission left
/// before `at` (Eifel's test, RFC 3522); it does not prove the arrival
/// before `at`, nor anything of the rest of the flight, so the caller
/// (`Cc::on_echo`) applies it only to an acknowledgement that covers the
/// whole flight the timeout took for lost.
pub(super) fn reached_before(arrived: u32, echo: u32, hold: u64, at: u32) -> bool {
    if network_rtt(arrived, echo, hold).is_none() {
        return false;
    }
    if hold >= SATURATED {
        // the peer kept the echoed datagram half a second or more (it
        // did not read its socket, or sat on the acknowledgement): the
        // code cannot place the arrival, and a network queue does not
        // hold a datagram for the timeout and then a peer for half a
        // second more; Eifel's own test decides (RFC 3522: the echo
        // times a transmission from before the timeout, not its
        // retransmission), which shows no loss only for an ack that
        // covers the whole flight: Cc::on_echo waits for that one
        return sent_before(echo, at);
    }
    let latest = arrived.wrapping_sub((hold / 1000) as u32);
    (at.wrapping_sub(latest) as i32) > 0
}

/// Whether the transmission an acknowledgement echoes (`echo`, the
/// wire's microsecond clock) left before `at` (same clock, wrapping):
/// Eifel's test (RFC 3522). On the acknowledgement that covers the whole
/// flight a retransmission timeout at `at` took for lost, `true` shows
/// that no retransmission filled a hole in it: nothing of it was lost
/// (`Cc::on_echo`).
pub(super) fn sent_before(echo: u32, at: u32) -> bool {
    (at.wrapping_sub(echo) as i32) > 0
}

/// The hold of the saturated code (ns, about 0.5 s): a peer that kept
/// the echoed datagram this long or longer was stalled (busy without
/// reading its socket, asleep), or its acknowledgements were lost that
/// long (each later one reports the hold since the echoed datagram
/// arrived); the round trip times the stall or the loss, not the network
/// (docs/networking.md, a peer's stall).
pub(super) const SATURATED: u64 = (31 << 14) * 1000;

/// Whether a hold code is saturated ([`SATURATED`] or longer).
pub(super) fn saturated(code: u8) -> bool {
    decode(code) >= SATURATED
}

/// The largest hold a code carries (us).
#[cfg(test)]
const MAX_US: u64 = 31 << 14;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_codes_round_down_within_a_sixteenth_and_saturate() {
        for code in 0..=255u8 {
            assert_eq!(encode(decode(code)), code, "code {code}");
        }
        let mut us = 0u64;
        while us <= MAX_US {
            let ns = us * 1000 + 999;
            let back = decode(encode(ns));
            assert!(back <= ns, "{us} us came back as {back} ns");
            assert!(
                ns - back <= ns / 16 + 1000,
                "{us} us came back as {back} ns"
            );
            us = us * 17 / 16 + 1;
        }
        assert_eq!(decode(encode(u64::MAX)), MAX_US * 1000);
        assert_eq!(encode(0), 0);
    }

    #[test]
    fn cc_network_rtt_rejects_arrivals_before_the_transmission() {
        assert_eq!(network_rtt(150, 100, 0), Some(50_000));
        assert_eq!(network_rtt(3000, 100, 1_000_000), Some(1_900_000));
        // across the clock's wrap
        assert_eq!(network_rtt(10, u32::MAX - 9, 0), Some(20_000));
        // an arrival stamped before the echoed transmission left
        assert_eq!(network_rtt(100, 150, 0), None);
        assert_eq!(network_rtt(100, 100, 0), None);
        // a hold as long as the round trip or longer
        assert_eq!(network_rtt(150, 100, 50_000), None);
        assert_eq!(network_rtt(150, 100, 2_000_000), None);
    }

    #[test]
    fn ccundo_reached_before_bounds_the_arrival_by_the_hold() {
        // sent at 100, acknowledged at 900 after a hold of 700 us: it
        // reached the peer by 200, before a timeout at 300
        assert!(reached_before(900, 100, 700_000, 300));
        // by 250 at the latest: not proven before a timeout at 250
        assert!(!reached_before(900, 100, 650_000, 250));
        // no hold: it may have reached the peer just before the ack left
        assert!(!reached_before(900, 100, 0, 300));
        assert!(reached_before(900, 100, 0, 901));
        // a hold rounded down to the microsecond never proves more
        assert!(!reached_before(900, 100, 599_999, 301));
        // across the clock's wrap
        assert!(reached_before(10, u32::MAX - 9, 15_000, 0));
        // stamps that disagree prove nothing
        assert!(!reached_before(100, 150, 0, 1000));
        assert!(!reached_before(150, 100, 50_000, 1000));
    }

    #[test]
    fn ccidle_a_saturated_hold_is_decided_by_the_echo() {
        assert!(saturated(0xff));
        assert!(!saturated(0xfe));
        assert_eq!(decode(encode(900_000_000)), SATURATED);
        // sent at 100, a timeout at 300, acknowledged at 900,000 after a
        // saturated hold: the bound (900,000 - 507,904) is past the
        // timeout, Eifel's test decides: it echoes the original
        assert!(reached_before(900_000, 100, SATURATED, 300));
        // it echoes the retransmission (sent at 300 or later): a loss
        assert!(!reached_before(900_000, 300, SATURATED, 300));
        assert!(!reached_before(900_000, 400, SATURATED, 300));
        // a hold just under saturation still needs its bound
        assert!(!reached_before(900_000, 100, SATURATED - 1000, 300));
        // stamps that disagree still prove nothing
        assert!(!reached_before(100_000, 100, SATURATED, 300));
    }

    #[test]
    fn ccfix2_a_saturated_hold_across_the_clock_wrap() {
        // sent at u32::MAX - 10, a timeout at 5 (16 us later, past the
        // wrap), acknowledged at 600,000 after a saturated hold: the echo
        // times the original, from before the timeout
        assert!(reached_before(600_000, u32::MAX - 10, SATURATED, 5));
        // an echo at the timeout's own time (a retransmission) is no
        // proof, nor one from after it, on either side of the wrap
        assert!(!reached_before(
            600_000,
            u32::MAX - 10,
            SATURATED,
            u32::MAX - 10
        ));
        assert!(!reached_before(600_000, 5, SATURATED, 5));
        assert!(!reached_before(600_000, 6, SATURATED, u32::MAX - 10));
        assert!(!reached_before(
            600_000,
            u32::MAX - 10,
            SATURATED,
            u32::MAX - 11
        ));
    }

    #[test]
    fn ccundo_network_rtt_never_exceeds_the_round_trip() {
        // the controller's sample (network_rtt from the arrival) against
        // the retransmission timer's (from the moment the ack is handled,
        // `now >= arrived`): the former is never the larger, so the clamp
        // the controller once applied (`.min(rtt)`) never acted
        let echoes = [1u32, 999, u32::MAX - 3, u32::MAX];
        let times = [
            0u64,
            999,
            1000,
            1_500_000,
            4_294_967_295_000,
            4_294_967_296_999,
        ];
        for &e in &echoes {
            for &arrived in &times {
                for d in [0u64, 1, 999, 1000, 250_000] {
                    let now = arrived + d;
                    let rtt = super::super::us(now).wrapping_sub(e) as u64 * 1000;
                    for hold in [0u64, 16_000, 1_000_000] {
                        if let Some(net) = network_rtt(super::super::us(arrived), e, hold) {
                            assert!(net <= rtt, "echo {e} arrived {arrived} now {now}");
                        }
                    }
                }
            }
        }
    }
}
