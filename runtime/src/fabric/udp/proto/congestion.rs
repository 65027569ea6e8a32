//! Congestion control toward one peer, sans I/O: an AIMD window in bytes
//! with slow start, a delay signal (Swift-like) that ends slow start
//! before the bottleneck's queue overflows and shrinks the window while
//! the queue stands, and pacing.
//!
//! * `cwnd` bytes may be in flight to the peer (both streams together);
//!   it never exceeds the receiver's credit (`2 * window` datagrams of
//!   `mtu` bytes), and each stream keeps its own credit window as before.
//!   Its floor is a quarter datagram (one datagram in flight, paced out).
//! * Slow start: `cwnd` grows by the bytes acknowledged (doubling per
//!   round trip) up to `ssthresh`; then congestion avoidance: one datagram
//!   per window acknowledged (a quarter of one while the window is below
//!   8 datagrams). Growth only while the window is used (at least half of
//!   it in flight) and the last RTT sample was not above the target, so
//!   an idle or application-limited peer does not bank a window it never
//!   tested.
//! * Loss (fast retransmission): once per round trip (a loss of a datagram
//!   sent before the last reduction is the same congestion event),
//!   `cwnd = max(cwnd / 2, floor)` and `ssthresh = max(cwnd, 2 datagrams)`.
//!   A retransmission timeout: `ssthresh = max(cwnd / 2, 2 datagrams)`,
//!   `cwnd = min(cwnd, 1 datagram)`.
//! * Delay: the target is the smallest RTT seen (taken afresh every
//!   200 ms) plus `clamp(min_rtt / 8, 4 ms, 16 ms)`. A sample above it
//!   ends slow start (`ssthresh = cwnd`: the queue is building) and, once
//!   per round trip, shrinks `cwnd` by 0.8 of the share of the RTT spent
//!   above the target, by half at most (Swift's multiplicative decrease),
//!   never below the floor. The floor of the target keeps scheduling
//!   jitter on a loopback or a LAN from counting as queueing (on an
//!   oversubscribed host it does not: see docs/networking.md, why the
//!   controller was off by default until wire version 2). Samples follow Karn's rule: none from
//!   an acknowledgement that covers a retransmitted datagram.
//! * Pacing: with an RTT estimate, datagrams leave at most at
//!   `gain * cwnd / srtt` (gain 2 in slow start, 1.25 after), with a burst
//!   of up to a quarter of the window allowed at once; the protocol tells
//!   the driver the earliest time the next datagram may leave.
//!
//! * A retransmission timeout that the first acknowledgement after it
//!   shows to be spurious (it echoes a transmission from before the
//!   timeout, and the peer's hold time places that transmission's arrival
//!   before the timeout fired) is undone: `cwnd` and `ssthresh` go back to
//!   their values before it (Eifel, RFC 3522 / RFC 4015), unless that
//!   acknowledgement shows a hole below a selectively acknowledged
//!   datagram (a loss). The undo restores only the window: the datagrams
//!   the timeout marked stay marked and are resent, as the acknowledgement
//!   proves only the arrival of what it acknowledges.
//!   With a saturated hold (the peer stalled half a second or more, or
//!   its acknowledgements were lost that long, `hold::SATURATED`) the
//!   hold cannot place the arrival, and Eifel's own test decides (the
//!   echo times a transmission from before the timeout) on the first
//!   acknowledgement that covers the whole flight the timeout took for
//!   lost (a lost datagram is then filled by a retransmission, whose echo
//!   is from after the timeout); such an acknowledgement gives no RTT
//!   sample (`proto/mod.rs`).
//!
//! With the controller off (`ProtoConfig::cc == false`) every gate is open:
//! the fixed credit window alone limits what is in flight.

use super::hold;

/// Slow start ends when an RTT sample exceeds the smallest by this much
/// at least (ns)...
const DELAY_MIN: u64 = 4_000_000;
/// ...and at most.
const DELAY_MAX: u64 = 16_000_000;
/// The smallest RTT is taken afresh after this long (ns): a flow that
/// started while a queue stood measured the queue into its smallest RTT
/// and would hold its share against the flows that measured an empty one
/// (the latecomer advantage of delay-based control); re-measuring lets
/// them all agree on what the queue is.
const MIN_RTT_WINDOW: u64 = 200_000_000;

/// Why a datagram may not leave now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// It may.
    Open,
    /// The congestion window is full: wait for an acknowledgement.
    Window,
    /// Paced: not before this time (ns).
    Pace(u64),
}

/// One peer's congestion state (all sizes in bytes, times in ns).
#[derive(Clone, Debug)]
pub(super) struct Cc {
    on: bool,
    /// A datagram's size, the unit of growth and the floor.
    mss: u64,
    /// Upper bound: the receiver's credit for both streams.
    cap: u64,
    /// Bytes that may be in flight.
    pub cwnd: u64,
    /// Slow start below this.
    pub ssthresh: u64,
    /// Bytes sent, not acknowledged, not taken for lost.
    pub inflight: u64,
    /// Acknowledged bytes toward the next increase in congestion avoidance.
    acc: u64,
    /// When the window was last reduced: losses of datagrams sent before
    /// belong to the same congestion event.
    reduced_at: u64,
    /// Smallest RTT sample (0: none).
    pub min_rtt: u64,
    /// When `min_rtt` was taken: it is taken afresh after
    /// [`MIN_RTT_WINDOW`].
    min_rtt_at: u64,
    /// The last RTT sample was above the target (no growth then).
    over: bool,
    /// The smoothed RTT the pacing rate uses (0: none, no pacing).
    srtt: u64,
    /// The next datagram may leave from this time on.
    pace_at: u64,
    /// Before the last retransmission timeout: (`cwnd`, `ssthresh`, the
    /// timeout's time on the wire's microsecond clock, its stream, the
    /// stream's `next_tx` then: the end of the flight it took for lost),
    /// until the first acknowledgement after it that frees data of that
    /// stream tells whether it was spurious (with a saturated hold, the
    /// first one that covers the whole flight: [`on_echo`](Self::on_echo)).
    undo: Option<(u64, u64, u32, usize, u32)>,
    /// The other stream timed out while `undo` was pending: one record
    /// cannot speak for both flights, so it was dropped, and no new one
    /// is taken until an acknowledgement frees data again (the end of
    /// the stall): the reduction stands.
    undo_void: bool,
}

impl Cc {
    /// State toward a new peer: datagrams of `mtu` bytes, a credit of
    /// `credit` bytes, on or off.
    pub fn new(on: bool, mtu: usize, credit: u64) -> Cc {
        let mss = mtu as u64;
        let cap = credit.max(2 * mss);
        // RFC 3390's rule with jumbo datagrams in mind: 2 datagrams, or
        // 16 KiB when those are small
        let iw = (2 * mss).max(16 << 10).min(cap);
        Cc {
            on,
            mss,
            cap,
            cwnd: if on { iw } else { cap },
            ssthresh: cap,
            inflight: 0,
            acc: 0,
            reduced_at: 0,
            min_rtt: 0,
            min_rtt_at: 0,
            over: false,
            srtt: 0,
            pace_at: 0,
            undo: None,
            undo_void: false,
        }
    }

    /// Whether a datagram may leave at `now`.
    #[inline]
    pub fn gate(&self, now: u64) -> Gate {
        if !self.on {
            return Gate::Open;
        }
        if self.inflight > 0 && self.inflight >= self.cwnd {
            return Gate::Window;
        }
        if self.pace_at > now {
            return Gate::Pace(self.pace_at);
        }
        Gate::Open
    }

    /// A datagram of `len` bytes left at `now`.
    #[inline]
    pub fn on_sent(&mut self, now: u64, len: usize) {
        if !self.on {
            return;
        }
        self.inflight += len as u64;
        if self.srtt > 0 {
            // rate = gain * cwnd / srtt; gain 2 (8/4) in slow start, 1.25 (5/4)
            let gain4: u64 = if self.cwnd < self.ssthresh { 8 } else { 5 };
            let rate_den = gain4 * self.cwnd.max(self.mss);
            let gap = (len as u128 * self.srtt as u128 * 4 / rate_den as u128) as u64;
            // a quarter of the window may leave at once: the time a
            // quarter of it takes at the pacing rate
            let burst = self.srtt / gain4;
            self.pace_at = self.pace_at.max(now.saturating_sub(burst)) + gap;
        }
    }

    /// `len` bytes left the flight without an acknowledgement (taken for
    /// lost, to be sent again).
    #[inline]
    pub fn on_left(&mut self, len: u64) {
        self.inflight = self.inflight.saturating_sub(len);
    }

    /// The smallest window: a quarter datagram (one datagram in flight,
    /// paced to a quarter of a datagram per round trip).
    fn floor(&self) -> u64 {
        (self.mss / 4).max(1)
    }

    /// An RTT sample at `now` (Karn's rule already applied by the caller)
    /// and the smoothed estimate.
    pub fn on_rtt(&mut self, now: u64, rtt: u64, srtt: u64) {
        if !self.on {
            return;
        }
        self.srtt = srtt;
        if self.min_rtt == 0
            || rtt < self.min_rtt
            || now.saturating_sub(self.min_rtt_at) > MIN_RTT_WINDOW
        {
            self.min_rtt = rtt;
            self.min_rtt_at = now;
        }
        let target = self.min_rtt + (self.min_rtt / 8).clamp(DELAY_MIN, DELAY_MAX);
        self.over = rtt > target;
        if !self.over {
            return;
        }
        if self.cwnd < self.ssthresh {
            // the queue is building: leave slow start before it overflows
            self.ssthresh = self.cwnd;
        }
        // Swift's multiplicative decrease, once per round trip: by the
        // share of the RTT spent above the target (0.8 of it), half at most
        if now.saturating_sub(self.reduced_at) >= srtt {
            let keep = 1.0 - (0.8 * (rtt - target) as f64 / rtt as f64).min(0.5);
            self.cwnd = ((self.cwnd as f64 * keep) as u64).max(self.floor());
            self.ssthresh = self.cwnd;
            self.acc = 0;
            self.reduced_at = now.max(1);
        }
    }

    /// The smoothed RTT the pacing rate uses, from an acknowledgement
    /// that gives no delay sample (Karn's rule, or an arrival stamp that
    /// precedes the transmission: `hold::network_rtt`).
    pub fn on_srtt(&mut self, srtt: u64) {
        if self.on {
            self.srtt = srtt;
        }
    }

    /// `acked` bytes acknowledged (they left the flight already through
    /// [`on_left`](Self::on_left) or are taken from it here: `in_flight`
    /// of them were still counted).
    pub fn on_acked(&mut self, acked: u64, in_flight: u64) {
        if !self.on {
            return;
        }
        // was the window used? (growth only when it was)
        let used = 2 * (self.inflight + acked) >= self.cwnd;
        self.inflight = self.inflight.saturating_sub(in_flight);
        if !used || acked == 0 || self.over {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + acked)
                .min(self.ssthresh.max(self.cwnd))
                .min(self.cap);
        } else {
            // one datagram per round trip; a quarter of one while the
            // window is below 8 datagrams: many flows with windows of a
            // datagram or two (incast) together add a bounded share per
            // round trip, and the same share each (additive increase equal
            // across flows is what makes AIMD converge to fairness)
            self.acc += acked;
            if self.acc >= self.cwnd {
                self.acc -= self.cwnd;
                let step = if self.cwnd >= 8 * self.mss {
                    self.mss
                } else {
                    self.mss / 4
                };
                self.cwnd = (self.cwnd + step).min(self.cap);
            }
        }
    }

    /// A loss found by acknowledgements (fast retransmission) of a
    /// datagram that last left at `sent_at`. Returns whether the window
    /// was reduced (a new congestion event).
    pub fn on_loss(&mut self, now: u64, sent_at: u64) -> bool {
        if !self.on || sent_at < self.reduced_at {
            return false;
        }
        self.cwnd = (self.cwnd / 2).max(self.floor()).min(self.cap);
        self.ssthresh = self.cwnd.max(2 * self.mss);
        self.acc = 0;
        self.reduced_at = now.max(1);
        true
    }

    /// A retransmission timeout of `stream` fired at `now` (`now_us` on
    /// the wire's clock) with the stream's flight ending before sequence
    /// number `end` (its `next_tx`).
    pub fn on_timeout(&mut self, now: u64, now_us: u32, stream: usize, end: u32) {
        if !self.on {
            return;
        }
        match self.undo {
            None if !self.undo_void => {
                self.undo = Some((self.cwnd, self.ssthresh, now_us, stream, end));
            }
            Some(u) if u.3 != stream => {
                // both streams' flights timed out in one stall: the
                // record covers only the first, and the other's tail may
                // be lost while the first's acknowledgement looks clean
                self.undo = None;
                self.undo_void = true;
            }
            _ => {}
        }
        if self.cwnd > self.mss {
            self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        }
        self.cwnd = self.cwnd.min(self.mss);
        self.acc = 0;
        self.reduced_at = now.max(1);
        self.pace_at = now;
    }
}

impl Cc {
    /// An acknowledgement that freed data of `stream`, echoes the `ts` `echo` (the
    /// wire's microsecond clock), reached this rank at `arrived` (same
    /// clock) and reports the peer's hold `hold` (ns, decoded, however
    /// short): the first one after a retransmission timeout of that stream decides
    /// (with a saturated hold, the first that covers the flight: below)
    /// whether the timeout was spurious (Eifel detection, RFC 3522, with
    /// the echoed timestamp, and the peer's hold to place the arrival,
    /// `hold::reached_before`). If it times a transmission from before the
    /// timeout that reached the peer before the timeout fired, the
    /// datagram it echoes had arrived in time (a receiver descheduled, or
    /// busy, for longer than the timeout; or this rank itself, which ran
    /// its timers late): the window and `ssthresh` go back to what they
    /// were (Eifel's response, RFC 4015) and this returns `true`. It
    /// proves nothing of the flight's other unacknowledged datagrams: the
    /// caller leaves the timeout's marks on them (they are resent), and
    /// when the acknowledgement shows a hole below a datagram it
    /// selectively acknowledges (a loss) it calls [`on_hole`](Self::on_hole)
    /// first, so the reduction stands. A datagram that reached the peer
    /// only after the timeout (a network queue held it that long:
    /// congestion) or an acknowledgement of a retransmission leaves the
    /// timeout's reduction standing too.
    ///
    /// A saturated hold (`hold::SATURATED`: the peer did not read its
    /// socket for half a second or more, or its acknowledgements were
    /// lost that long) cannot place the arrival, and an acknowledgement
    /// of the flight's start proves nothing of its tail: a stalled peer
    /// whose socket overflowed dropped the tail and every retransmission
    /// and acknowledges what it kept with no selective acknowledgement
    /// above the hole. So with a saturated hold the decision waits (the
    /// undo stays pending) for the first acknowledgement whose cumulative
    /// point `una` (the stream's, after this acknowledgement) covers the
    /// whole flight the timeout took for lost; if a datagram of it was
    /// lost, the datagram that fills the hole is a retransmission, sent
    /// at or after the timeout, so that acknowledgement's echo is from
    /// then and the reduction stands (Eifel's test, RFC 3522). If the
    /// other stream also timed out while the record was pending, the
    /// record is dropped and the reduction stands (one record cannot
    /// speak for both flights).
    pub fn on_echo(&mut self, stream: usize, echo: u32, arrived: u32, hold: u64, una: u32) -> bool {
        let Some((cwnd, ssthresh, at, st, end)) = self.undo else {
            // data is acknowledged again: a later timeout may be judged
            self.undo_void = false;
            return false;
        };
        if st != stream {
            // another stream's acknowledgement says nothing of what the
            // timeout took for lost
            return false;
        }
        if hold >= hold::SATURATED && (una.wrapping_sub(end) as i32) < 0 {
            // only the start of the flight is acknowledged: wait for the
            // rest (or a hole: on_hole)
            return false;
        }
        self.undo = None;
        if echo == 0 || !hold::reached_before(arrived, echo, hold, at) {
            return false;
        }
        self.cwnd = self.cwnd.max(cwnd);
        self.ssthresh = self.ssthresh.max(ssthresh);
        true
    }

    /// The first acknowledgement of `stream` after a retransmission timeout
    /// shows a hole below a datagram it selectively acknowledges: a
    /// datagram of the flight was lost, so the timeout was no spurious
    /// one and its reduction stands ([`on_echo`](Self::on_echo) finds
    /// nothing to undo after this).
    pub fn on_hole(&mut self, stream: usize) {
        if self.undo.is_some_and(|u| u.3 == stream) {
            self.undo = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_slow_start_doubles_then_halves_on_loss() {
        let mut c = Cc::new(true, 9000, 64 * 9000);
        assert_eq!(c.cwnd, 18_000);
        // a window's worth sent and acknowledged doubles it
        c.on_sent(0, 9000);
        c.on_sent(0, 9000);
        assert_eq!(c.gate(0), Gate::Window);
        c.on_acked(18_000, 18_000);
        assert_eq!(c.cwnd, 36_000);
        assert_eq!(c.inflight, 0);
        assert!(c.on_loss(10, 5));
        assert_eq!(c.cwnd, 18_000);
        // a second loss from the same flight is the same event
        assert!(!c.on_loss(20, 7));
        assert_eq!(c.cwnd, 18_000);
        c.on_timeout(30, 1000, 0, 2);
        assert_eq!(c.cwnd, 9000);
        assert_eq!(c.ssthresh, 18_000);
        // the first acknowledgement after it times a later transmission:
        // a real loss, the window stays down
        assert!(!c.on_echo(0, 1001, 1100, 0, 2));
        assert_eq!(c.cwnd, 9000);
        // a spurious timeout (the ack times a transmission from before it,
        // which reached the peer before the timeout: its hold says so)
        // gives the window back
        c.on_timeout(40, 2000, 0, 2);
        assert_eq!(c.cwnd, 9000);
        c.cwnd = 4500;
        // (the other stream's acknowledgements do not decide)
        assert!(!c.on_echo(1, 1900, 2500, 550_000, 2));
        assert!(c.on_echo(0, 1900, 2500, 550_000, 2));
        assert_eq!((c.cwnd, c.ssthresh), (9000, 18_000));
    }

    #[test]
    fn ccfix2_a_saturated_hold_waits_for_the_whole_flight() {
        let sat = hold::SATURATED;
        let mut c = Cc::new(true, 9000, 64 * 9000);
        let (cwnd, ssthresh) = (c.cwnd, c.ssthresh);
        // a timeout at 1000 with the flight ending before 12 (wrapping
        // sequence numbers around it are compared alike)
        c.on_timeout(30, 1000, 0, 12);
        assert_eq!(c.cwnd, 9000);
        // a saturated ack of the flight's start: no decision yet
        assert!(!c.on_echo(0, 900, 600_000, sat, 11));
        assert!(c.undo.is_some(), "the undo waits for the rest");
        // the ack that covers the flight echoes a transmission from
        // before the timeout: nothing of it was lost, the window comes back
        assert!(c.on_echo(0, 900, 600_100, sat, 12));
        assert_eq!((c.cwnd, c.ssthresh), (cwnd, ssthresh));
        // the same flight across the wrap of the sequence numbers, whose
        // hole was filled by a retransmission (echo after the timeout):
        // the reduction stands
        c.on_timeout(40, 2000, 0, 2);
        assert!(!c.on_echo(0, 1900, 600_000, sat, u32::MAX));
        assert!(c.undo.is_some());
        assert!(!c.on_echo(0, 2100, 600_100, sat, 2));
        assert!(c.undo.is_none());
        assert_eq!(c.cwnd, 9000);
        // a hole decides at once
        c.on_timeout(50, 3000, 0, 20);
        assert!(!c.on_echo(0, 2900, 600_000, sat, 15));
        c.on_hole(0);
        assert!(!c.on_echo(0, 2900, 600_100, sat, 20));
        assert_eq!(c.cwnd, 9000);
    }

    #[test]
    fn cc_never_above_the_credit_and_off_is_open() {
        let mut c = Cc::new(true, 9000, 4 * 9000);
        for _ in 0..100 {
            c.on_sent(0, 9000);
            c.on_acked(9000, 9000);
        }
        assert_eq!(c.cwnd, 4 * 9000);
        let mut off = Cc::new(false, 9000, 4 * 9000);
        off.on_sent(0, 1 << 30);
        assert_eq!(off.gate(0), Gate::Open);
    }

    #[test]
    fn cc_delay_ends_slow_start_and_pacing_spaces_datagrams() {
        let mut c = Cc::new(true, 9000, 1 << 30);
        c.on_rtt(1, 100_000, 100_000);
        assert!(c.cwnd < c.ssthresh);
        let w = c.cwnd;
        c.on_rtt(1_000_000, 100_000 + 2 * DELAY_MIN, 200_000);
        assert_eq!(c.ssthresh, c.cwnd);
        assert!(c.cwnd < w, "a queue above the target shrinks the window");
        // paced: after a burst the next datagram waits
        let mut t = 1_000_000_000;
        let mut waited = false;
        for _ in 0..8 {
            match c.gate(t) {
                Gate::Pace(at) => {
                    assert!(at > t);
                    waited = true;
                    t = at;
                }
                Gate::Window => c.on_acked(9000, 9000),
                Gate::Open => c.on_sent(t, 9000),
            }
        }
        assert!(waited);
    }
}
