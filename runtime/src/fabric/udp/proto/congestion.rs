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
//! * Retransmission timeouts that the acknowledgements after them show to
//!   be spurious are undone (Eifel, RFC 3522 / RFC 4015): `cwnd` and
//!   `ssthresh` go back to their values before the first timeout of the
//!   episode. Each stream that timed out in the episode (request, reply:
//!   a record of fixed size per stream) is judged on its own flight, and
//!   the window comes back only when every one of them is judged
//!   spurious; a loss in any keeps the reduction, and so does any other
//!   congestion response while the episode is open (a loss found by fast
//!   retransmission, the delay signal's decrease on a sample of a
//!   transmission after the first timeout: the episode ends with the
//!   reductions standing) and an episode left unjudged past its bounds
//!   (`Cc::new`'s `quiet` after its latest timeout, `episode` after its
//!   first, each at most [`EPISODE_MAX`]: it is dropped). A back-off timeout of a pending stream extends its flight
//!   to what was sent since the first timeout. A stream's flight is
//!   spurious when its first acknowledgement with an unsaturated hold
//!   echoes a transmission from before the timeout whose arrival the
//!   peer's hold places before the timeout fired (the delay was a
//!   host's, not a network queue's), and the first acknowledgement that
//!   covers the whole flight the timeout took for lost still echoes a
//!   transmission from before it (no retransmission filled a hole in it:
//!   nothing was lost), with no hole below a selectively acknowledged
//!   datagram on the way. The undo restores only the window: the
//!   datagrams the timeout marked stay marked and are resent, as an
//!   acknowledgement proves only the arrival of what it acknowledges.
//!   With a saturated hold (the peer stalled half a second or more, or
//!   its acknowledgements were lost that long, `hold::SATURATED`) the
//!   hold cannot place the arrival, and Eifel's test on the covering
//!   acknowledgement decides alone; such an acknowledgement gives no RTT
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

/// What the undo knows of one stream's flight in an episode of
/// retransmission timeouts ([`Undo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The stream did not time out in the episode.
    Quiet,
    /// It timed out at `at` (the wire's microsecond clock; its first
    /// timeout in the episode) with its flight ending before sequence
    /// number `end` (its `next_tx` at its latest timeout);
    /// `timed`: an acknowledgement's hold already placed the echoed
    /// datagram's arrival before the timeout (the delay was a host's),
    /// what is left to learn is whether a datagram of the flight was lost
    /// (on the acknowledgement that covers it all).
    Pending { at: u32, end: u32, timed: bool },
    /// Judged spurious: nothing of its flight was lost and the delay was
    /// a host's.
    Spurious,
    /// A datagram of its flight was lost (or the delay was a network
    /// queue's): the episode's reduction stands.
    Lost,
}

/// The undo record of one episode of retransmission timeouts toward a
/// peer (both streams; fixed size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Undo {
    /// `cwnd` before the episode's first timeout.
    cwnd: u64,
    /// `ssthresh` before it.
    ssthresh: u64,
    /// `reduced_at` before it: an undo puts it back, so a loss of a
    /// datagram sent before the timeout, found after the undo, is the
    /// congestion event it would have been without the timeout.
    reduced_at: u64,
    /// Per stream (request, reply).
    streams: [Verdict; 2],
    /// When the episode's first timeout fired (ns): the record is dropped,
    /// with the reduction standing, once it is older than [`Cc::episode`].
    since: u64,
    /// The same on the wire's microsecond clock: an RTT sample of a
    /// transmission from before it times the delay the episode judges and
    /// does not end it ([`Cc::on_rtt`]).
    since_us: u32,
    /// When the episode's latest timeout fired (ns): the record is
    /// dropped once no timeout fired for [`Cc::quiet`] (its streams
    /// stopped timing out and were not judged).
    last: u64,
}

/// The longest an episode of retransmission timeouts stays open (ns),
/// whatever the configuration: 2^30 us, a quarter of the wire's 32-bit
/// microsecond clock (about 17.9 minutes), so that the echoed stamps
/// compared with a timeout's time (`hold::sent_before`, whose range is
/// half the clock's wrap, 35.8 minutes) never wrap into an order that
/// undoes a real loss.
pub(super) const EPISODE_MAX: u64 = (1 << 30) * 1000;

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
    /// The undo record of the retransmission timeouts not yet judged
    /// (an episode: from the first timeout until every stream that timed
    /// out in it is judged): the window before the first, and per stream
    /// what is known of the flight its timeout took for lost
    /// ([`on_echo`](Self::on_echo)).
    undo: Option<Undo>,
    /// How long an episode may stay open (ns, at most [`EPISODE_MAX`]):
    /// one older than this is dropped with its reduction standing (a peer
    /// that never echoes a stamp, or echoes one from the future, and then
    /// idles would otherwise keep it open, blocking later undos).
    episode: u64,
    /// How long an episode may stay open after its latest timeout (ns, at
    /// most [`EPISODE_MAX`]): one whose streams stopped timing out and
    /// were not judged within this is dropped too, while a peer stalled
    /// for longer, whose streams keep timing out, is still judged.
    quiet: u64,
}

impl Cc {
    /// State toward a new peer: datagrams of `mtu` bytes, a credit of
    /// `credit` bytes, on or off; an episode of retransmission timeouts
    /// left unjudged for `quiet` ns after its latest timeout, or for
    /// `episode` ns after its first (each capped at [`EPISODE_MAX`]), is
    /// dropped with its reduction standing.
    pub fn new(on: bool, mtu: usize, credit: u64, quiet: u64, episode: u64) -> Cc {
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
            episode: episode.min(EPISODE_MAX),
            quiet: quiet.min(EPISODE_MAX),
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
    /// of a transmission at `echo` (the wire's microsecond clock) and the
    /// smoothed estimate.
    ///
    /// The multiplicative decrease ends an open episode of retransmission
    /// timeouts with its reductions standing (a queue stands), unless the
    /// sample times a transmission from before the episode's first
    /// timeout: that one times the very delay the undo judges (a host's
    /// stall, whose hold the code rounds down by up to 1/16, more than the
    /// target's 4 ms floor for holds of 64 ms or more), and if the undo
    /// finds it spurious the window comes back over both. The end of slow
    /// start alone does not end an episode: after a timeout the window is
    /// below `ssthresh`, so any sample above the target ends it.
    pub fn on_rtt(&mut self, now: u64, echo: u32, rtt: u64, srtt: u64) {
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
            // a queue stands now: an undo must not restore the window
            // from before an episode of timeouts over it (the episode
            // ends, its reduction and this one standing), unless the
            // sample times a transmission from before the episode
            if self
                .undo
                .is_some_and(|u| !hold::sent_before(echo, u.since_us))
            {
                self.undo = None;
            }
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
    ///
    /// A loss found while an episode of retransmission timeouts is open
    /// ends it with its reduction standing, whether or not it reduces the
    /// window again (a datagram sent before the timeout is the same
    /// congestion event, which an undo must not wipe out either): the
    /// undo restores the window only when nothing was lost. A loss of a
    /// datagram sent before the reduction that preceded the episode
    /// belongs to that earlier event, which the record's window already
    /// has: it leaves the episode open.
    pub fn on_loss(&mut self, now: u64, sent_at: u64) -> bool {
        if !self.on {
            return false;
        }
        if self.undo.is_some_and(|u| sent_at >= u.reduced_at) {
            self.undo = None;
        }
        if sent_at < self.reduced_at {
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
    /// number `end` (its `next_tx`). The first timeout of an episode
    /// takes the undo record (the window before it); each stream that
    /// times out in the episode is judged on its own flight
    /// ([`on_echo`](Self::on_echo)). A later timeout of a stream whose
    /// flight is pending keeps the first one's time `at` (the
    /// retransmissions leave after it) and its `timed`, but its flight now
    /// ends at the new `end`: data sent after the first timeout and lost
    /// is judged too (its hole is filled by a datagram sent after `at`,
    /// so any such data errs toward keeping the reduction). One of a
    /// stream already judged spurious is a new flight, judged again; one
    /// of a stream with a loss changes nothing (the reduction stands). An
    /// episode past the bounds given to [`new`](Self::new) is dropped
    /// first, its reduction standing, and this one opens a new episode.
    pub fn on_timeout(&mut self, now: u64, now_us: u32, stream: usize, end: u32) {
        if !self.on {
            return;
        }
        self.expire(now);
        let u = self.undo.get_or_insert(Undo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            reduced_at: self.reduced_at,
            streams: [Verdict::Quiet; 2],
            since: now,
            since_us: now_us,
            last: now,
        });
        u.last = now;
        if let Some(v) = u.streams.get_mut(stream) {
            *v = match *v {
                Verdict::Quiet | Verdict::Spurious => Verdict::Pending {
                    at: now_us,
                    end,
                    timed: false,
                },
                Verdict::Pending { at, timed, .. } => Verdict::Pending { at, end, timed },
                Verdict::Lost => Verdict::Lost,
            };
        }
        if self.cwnd > self.mss {
            self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        }
        self.cwnd = self.cwnd.min(self.mss);
        self.acc = 0;
        self.reduced_at = now.max(1);
        self.pace_at = now;
    }

    /// Drops the episode's record (its reduction stands; its echoes are
    /// no longer judged) if no timeout fired in it for [`Cc::quiet`] or
    /// it is older than [`Cc::episode`].
    fn expire(&mut self, now: u64) {
        if let Some(u) = self.undo {
            if now.saturating_sub(u.last) > self.quiet || now.saturating_sub(u.since) > self.episode
            {
                self.undo = None;
            }
        }
    }

    /// Whether an episode of retransmission timeouts is open (its record
    /// kept).
    #[cfg(test)]
    pub(super) fn episode_open(&self) -> bool {
        self.undo.is_some()
    }

    /// The episode's bounds (ns): after its latest timeout, after its
    /// first.
    #[cfg(test)]
    pub(super) fn episode_bounds(&self) -> (u64, u64) {
        (self.quiet, self.episode)
    }
}

impl Cc {
    /// An acknowledgement handled at `now` (ns) that freed data of
    /// `stream`, echoes the `ts` `echo` (the wire's microsecond clock),
    /// reached this rank at
    /// `arrived` (same clock), reports the peer's hold `hold` (ns,
    /// decoded, however short) and leaves the stream's cumulative point
    /// at `una`: it judges the flight a retransmission timeout of that
    /// stream took for lost, if one is pending (Eifel detection, RFC 3522,
    /// with the echoed timestamp, and the peer's hold to place the
    /// arrival, `hold::reached_before`). When every stream that timed out
    /// in the episode is judged spurious, the window and `ssthresh` go
    /// back to what they were before its first timeout (Eifel's response,
    /// RFC 4015) and this returns `true`; a loss in any of them ends the
    /// episode with the reduction standing.
    ///
    /// A flight is judged in two steps. (1) When: the first
    /// acknowledgement with a hold under `hold::SATURATED` must time a
    /// transmission from before the timeout that reached the peer before
    /// the timeout fired (a receiver descheduled, or busy, for longer
    /// than the timeout; or this rank itself, which ran its timers late);
    /// a datagram that reached the peer only after the timeout (a network
    /// queue held it that long: congestion) or an acknowledgement of a
    /// retransmission is a loss. A saturated hold (the peer did not read
    /// its socket for half a second or more, or its acknowledgements were
    /// lost that long) cannot place the arrival and decides nothing here.
    /// (2) Whether anything was lost: an acknowledgement of the flight's
    /// start proves nothing of its tail (a peer whose socket overflowed
    /// while it stalled, however briefly, dropped the tail and every
    /// retransmission and acknowledges what it kept with no selective
    /// acknowledgement above the hole). So the verdict waits for the first
    /// acknowledgement whose cumulative point `una` covers the whole
    /// flight; if a datagram of it was lost, the datagram that filled the
    /// hole is a retransmission, sent at or after the timeout, and that
    /// acknowledgement echoes it (Eifel's test: a loss). A hole below a
    /// selectively acknowledged datagram on the way decides at once
    /// ([`on_hole`](Self::on_hole)). The caller leaves the timeout's marks
    /// on the flight's unacknowledged datagrams (they are resent): the
    /// verdict restores only the window. An episode past the bounds
    /// given to [`new`](Self::new) is dropped unjudged, its reduction
    /// standing (past it the 32-bit stamps could wrap into an order that
    /// makes a retransmission's echo look older than the timeout).
    pub fn on_echo(
        &mut self,
        now: u64,
        stream: usize,
        echo: u32,
        arrived: u32,
        hold: u64,
        una: u32,
    ) -> bool {
        self.expire(now);
        let Some(u) = self.undo.as_mut() else {
            return false;
        };
        let Some(v) = u.streams.get_mut(stream) else {
            return false;
        };
        let Verdict::Pending { at, end, timed } = *v else {
            // another stream's acknowledgement, or one judged already:
            // it says nothing of what a timeout took for lost
            return false;
        };
        let saturated = hold >= hold::SATURATED;
        let mut timed = timed;
        if !timed && !saturated {
            if echo == 0 || !hold::reached_before(arrived, echo, hold, at) {
                *v = Verdict::Lost;
                return self.judged();
            }
            timed = true;
        }
        if (una.wrapping_sub(end) as i32) < 0 {
            // only the start of the flight is acknowledged: wait for the
            // rest (or a hole: on_hole)
            *v = Verdict::Pending { at, end, timed };
            return false;
        }
        // the flight is covered: the acknowledgement echoes a
        // transmission from before the timeout (no retransmission filled
        // a hole: Eifel's test), and its stamps agree (`hold::network_rtt`)
        let clean = echo != 0
            && hold::network_rtt(arrived, echo, hold).is_some()
            && hold::sent_before(echo, at);
        *v = if clean {
            Verdict::Spurious
        } else {
            Verdict::Lost
        };
        self.judged()
    }

    /// An acknowledgement of `stream` after a retransmission timeout,
    /// before the one that covers its flight, shows a hole below a
    /// datagram it selectively acknowledges: a datagram of the flight was
    /// lost, so the timeout was no spurious one and the episode's
    /// reduction stands ([`on_echo`](Self::on_echo) finds nothing to undo
    /// for this stream after this).
    pub fn on_hole(&mut self, stream: usize) {
        let Some(u) = self.undo.as_mut() else {
            return;
        };
        if let Some(v) = u.streams.get_mut(stream) {
            if matches!(v, Verdict::Pending { .. }) {
                *v = Verdict::Lost;
                self.judged();
            }
        }
    }

    /// After a verdict: once no stream of the episode is pending, the
    /// episode ends (its record is cleared, so the next timeout starts a
    /// new one), and if every stream that timed out in it was judged
    /// spurious the window comes back: `true` if that raised `cwnd` or
    /// `ssthresh` (a record taken when the window was already down, as
    /// after an expired episode, restores nothing and is no undo).
    fn judged(&mut self) -> bool {
        let Some(u) = self.undo else {
            return false;
        };
        if u.streams
            .iter()
            .any(|v| matches!(v, Verdict::Pending { .. }))
        {
            return false;
        }
        self.undo = None;
        if u.streams.contains(&Verdict::Lost) {
            return false;
        }
        let raised = u.cwnd > self.cwnd || u.ssthresh > self.ssthresh;
        if !raised {
            return false;
        }
        self.cwnd = self.cwnd.max(u.cwnd);
        self.ssthresh = self.ssthresh.max(u.ssthresh);
        self.reduced_at = self.reduced_at.min(u.reduced_at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The episode bounds the protocol's defaults give: 16 x 100 ms after
    /// the latest timeout, the 10 s peer timeout after the first.
    const QUIET: u64 = 1_600_000_000;
    const EPISODE: u64 = 10_000_000_000;
    /// When the acknowledgements of these tests are handled (ns): after
    /// their timeouts, well within the bound.
    const LATER: u64 = 100;

    #[test]
    fn cc_slow_start_doubles_then_halves_on_loss() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
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
        assert!(!c.on_echo(LATER, 0, 1001, 1100, 0, 2));
        assert_eq!(c.cwnd, 9000);
        // a spurious timeout (the ack times a transmission from before it,
        // which reached the peer before the timeout: its hold says so)
        // gives the window back
        c.on_timeout(40, 2000, 0, 2);
        assert_eq!(c.cwnd, 9000);
        c.cwnd = 4500;
        // (the other stream's acknowledgements do not decide)
        assert!(!c.on_echo(LATER, 1, 1900, 2500, 550_000, 2));
        assert!(c.on_echo(LATER, 0, 1900, 2500, 550_000, 2));
        assert_eq!((c.cwnd, c.ssthresh), (9000, 18_000));
    }

    #[test]
    fn ccfix2_a_saturated_hold_waits_for_the_whole_flight() {
        let sat = hold::SATURATED;
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        let (cwnd, ssthresh) = (c.cwnd, c.ssthresh);
        // a timeout at 1000 with the flight ending before 12 (wrapping
        // sequence numbers around it are compared alike)
        c.on_timeout(30, 1000, 0, 12);
        assert_eq!(c.cwnd, 9000);
        // a saturated ack of the flight's start: no decision yet
        assert!(!c.on_echo(LATER, 0, 900, 600_000, sat, 11));
        assert!(c.undo.is_some(), "the undo waits for the rest");
        // the ack that covers the flight echoes a transmission from
        // before the timeout: nothing of it was lost, the window comes back
        assert!(c.on_echo(LATER, 0, 900, 600_100, sat, 12));
        assert_eq!((c.cwnd, c.ssthresh), (cwnd, ssthresh));
        // the same flight across the wrap of the sequence numbers, whose
        // hole was filled by a retransmission (echo after the timeout):
        // the reduction stands
        c.on_timeout(40, 2000, 0, 2);
        assert!(!c.on_echo(LATER, 0, 1900, 600_000, sat, u32::MAX));
        assert!(c.undo.is_some());
        assert!(!c.on_echo(LATER, 0, 2100, 600_100, sat, 2));
        assert!(c.undo.is_none());
        assert_eq!(c.cwnd, 9000);
        // a hole decides at once
        c.on_timeout(50, 3000, 0, 20);
        assert!(!c.on_echo(LATER, 0, 2900, 600_000, sat, 15));
        c.on_hole(0);
        assert!(!c.on_echo(LATER, 0, 2900, 600_100, sat, 20));
        assert_eq!(c.cwnd, 9000);
    }

    /// An acknowledgement that covers `stream`'s flight, echoing a
    /// transmission at `echo`, with a saturated hold.
    fn clean(c: &mut Cc, stream: usize, echo: u32) -> bool {
        c.on_echo(LATER, stream, echo, 600_000, hold::SATURATED, 100)
    }

    #[test]
    fn ccundo_both_streams_must_be_spurious() {
        let sat = hold::SATURATED;
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        let before = (c.cwnd, c.ssthresh);
        // both streams time out in one stall (each flight ends before 100)
        c.on_timeout(30, 1000, 0, 100);
        c.on_timeout(31, 1001, 1, 100);
        // a back-off timeout keeps the first record's time (the flight's
        // end is the same: nothing new left in between)
        c.on_timeout(32, 3000, 0, 100);
        assert_eq!((c.cwnd, c.ssthresh), (9000, 4 * 9000));
        // the request stream's flight is clean; the reply stream's
        // decides, first with only its start acknowledged
        assert!(!clean(&mut c, 0, 900));
        assert!(!c.on_echo(LATER, 1, 950, 600_000, sat, 99));
        assert_eq!(c.cwnd, 9000, "no undo before every stream is judged");
        // (an echo of a transmission at 999: before the reply stream's
        // timeout at 1001, so no retransmission filled a hole in its
        // flight; it is before both of the request stream's too)
        assert!(clean(&mut c, 1, 999));
        assert_eq!((c.cwnd, c.ssthresh), before);
        assert!(c.undo.is_none(), "the episode ended");
        // the same order with the reply stream's tail lost (its covering
        // ack echoes the retransmission): the reduction stands
        for lost in [1, 0] {
            c.cwnd = 8 * 9000;
            c.on_timeout(40, 2000, 0, 100);
            c.on_timeout(41, 2001, 1, 100);
            let spurious = 1 - lost;
            assert!(!clean(&mut c, spurious, 1900));
            assert!(!clean(&mut c, lost, 2100));
            assert!(c.undo.is_none());
            assert_eq!(c.cwnd, 9000, "stream {lost} lost its tail");
        }
        // a loss judged first: the episode stays until the other stream
        // is judged, and a later timeout joins it without a new record
        c.cwnd = 8 * 9000;
        c.on_timeout(50, 5000, 1, 100);
        c.on_timeout(51, 5001, 0, 100);
        assert!(!clean(&mut c, 1, 5100));
        assert!(c.undo.is_some(), "the request stream is pending");
        c.on_timeout(52, 5500, 1, 100);
        assert!(!clean(&mut c, 0, 4900));
        assert!(c.undo.is_none());
        assert_eq!(c.cwnd, 9000);
        // the next episode is judged afresh
        c.cwnd = 8 * 9000;
        c.on_timeout(60, 6000, 0, 100);
        assert!(clean(&mut c, 0, 5900));
        assert_eq!(c.cwnd, 8 * 9000);
    }

    #[test]
    fn ccundo_a_timely_start_waits_for_the_flight() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        // a timeout at 1000 (flight ends before 10); the first ack echoes
        // a transmission at 800 that reached the peer by 900 (arrived at
        // 1500, held 600 us): the delay was the peer's, but only the
        // start is acknowledged
        c.on_timeout(30, 1000, 0, 10);
        assert!(!c.on_echo(LATER, 0, 800, 1500, 600_000, 5));
        assert!(c.undo.is_some());
        // the covering ack echoes the tail's retransmission: a loss
        assert!(!c.on_echo(LATER, 0, 1100, 1700, 50_000, 10));
        assert!(c.undo.is_none());
        assert_eq!(c.cwnd, 9000);
        // the same with the tail's original echoed (it was in the socket
        // behind the start): spurious
        c.cwnd = 8 * 9000;
        let before = (c.cwnd, c.ssthresh);
        c.on_timeout(40, 2000, 0, 20);
        assert!(!c.on_echo(LATER, 0, 1800, 2500, 600_000, 15));
        assert!(c.on_echo(LATER, 0, 1810, 2600, 690_000, 20));
        assert_eq!((c.cwnd, c.ssthresh), before);
        // a first ack whose datagram reached the peer after the timeout
        // (a network queue) decides at once: a loss, nothing pending
        c.cwnd = 8 * 9000;
        c.on_timeout(50, 3000, 0, 30);
        assert!(!c.on_echo(LATER, 0, 2800, 3300, 50_000, 25));
        assert!(c.undo.is_none());
        // a stream judged spurious that times out again while the other
        // is pending is judged again on its new flight
        c.cwnd = 8 * 9000;
        c.on_timeout(60, 4000, 0, 40);
        c.on_timeout(61, 4001, 1, 40);
        assert!(!c.on_echo(LATER, 0, 3900, 4300, 350_000, 40));
        c.on_timeout(62, 4500, 0, 41);
        assert!(!c.on_echo(LATER, 1, 3950, 4600, 600_000, 40));
        assert!(c.undo.is_some(), "stream 0's new flight is pending");
        assert!(c.on_echo(LATER, 0, 4400, 4900, 450_000, 41));
    }

    /// h13-ccundofix (review point 1): a reduction after the episode's
    /// first timeout ends the episode with it standing, so the pending
    /// stream's clean covering acknowledgement does not restore the
    /// window from before the timeout. (OLD: each case restored
    /// (72,000, 576,000).)
    #[test]
    fn ccundofix_a_reduction_in_the_episode_ends_it() {
        // the other stream loses a datagram sent after the timeout: fast
        // retransmission halves the window
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        c.on_timeout(30, 1000, 0, 10);
        c.cwnd = 4 * 9000;
        assert!(c.on_loss(40, 35));
        assert_eq!((c.cwnd, c.ssthresh), (18_000, 18_000));
        assert!(!c.on_echo(LATER, 0, 900, 1500, 550_000, 10));
        assert_eq!((c.cwnd, c.ssthresh), (18_000, 18_000));
        // one sent before the timeout: the same congestion event (no
        // second reduction), which the undo must not wipe out either
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        c.on_timeout(30, 1000, 0, 10);
        assert!(!c.on_loss(40, 20));
        assert!(!c.on_echo(LATER, 0, 900, 1500, 550_000, 10));
        assert_eq!((c.cwnd, c.ssthresh), (9000, 4 * 9000));
        // the delay signal: a sample above the target ends slow start
        // (ssthresh down to the window), which does not end the episode
        // (h13-ccundofix2: after a timeout the window is always below
        // ssthresh; it did end it, (9000, 9000))...
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.on_rtt(1, 0, 100_000, 100_000);
        c.cwnd = 8 * 9000;
        let before = (c.cwnd, c.ssthresh);
        c.on_timeout(30, 1000, 0, 10);
        c.on_rtt(40, 1010, 100_000 + 2 * DELAY_MIN, 200_000);
        assert_eq!((c.cwnd, c.ssthresh), (9000, 9000));
        assert!(c.on_echo(LATER, 0, 900, 1500, 550_000, 10));
        assert_eq!((c.cwnd, c.ssthresh), before);
        // ...but, a round trip after the timeout, its cut of the window
        // (of a transmission after the timeout) does
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.on_rtt(1, 0, 100_000, 100_000);
        c.cwnd = 8 * 9000;
        c.on_timeout(30, 1000, 0, 10);
        c.cwnd = 4 * 9000;
        c.ssthresh = 4 * 9000;
        c.on_rtt(300_000, 1010, 100_000 + 2 * DELAY_MIN, 200_000);
        let cut = (c.cwnd, c.ssthresh);
        assert!(cut.0 < 4 * 9000, "the delay signal cut the window");
        assert!(!c.on_echo(300_100, 0, 900, 1500, 550_000, 10));
        assert_eq!((c.cwnd, c.ssthresh), cut);
    }

    /// h13-ccundofix: an undo puts back when the window was last reduced,
    /// so a loss of a datagram sent before the (spurious) timeout, found
    /// after the undo, halves the restored window as it would have
    /// without the timeout. (OLD: `on_loss` took it for the timeout's
    /// congestion event, `false`, and the window stayed at 72,000.)
    #[test]
    fn ccundofix_a_loss_from_before_an_undone_timeout_still_counts() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        c.on_timeout(30, 1000, 0, 10);
        assert!(c.on_echo(LATER, 0, 900, 1500, 550_000, 10));
        assert!(c.on_loss(LATER + 10, 20), "sent at 20, before the timeout");
        assert_eq!(c.cwnd, 4 * 9000);
        // one from before the last real reduction is still the same event
        assert!(!c.on_loss(LATER + 20, 25));
    }

    /// h13-ccundofix (review point 2): a back-off timeout of a pending
    /// stream keeps the first timeout's time but takes the flight's new
    /// end, so data sent after the first timeout and lost is judged too.
    /// (OLD: the acknowledgement covering only the first flight undid it,
    /// `true` and (72,000, 576,000).)
    #[test]
    fn ccundofix_a_back_off_timeout_moves_the_flights_end() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        c.on_timeout(30, 1000, 0, 10);
        // the echoed datagram reached the peer in time; only the start of
        // the flight is acknowledged
        assert!(!c.on_echo(LATER, 0, 900, 1500, 550_000, 5));
        // 10 and 11 left after the timeout; a back-off timeout takes them
        // for lost as well
        c.on_timeout(40, 3000, 0, 12);
        // the first flight covered, echoing a transmission from before
        // the first timeout: 10 and 11 are not covered yet
        assert!(!c.on_echo(LATER, 0, 950, 3500, 2_000_000, 10));
        assert!(c.episode_open(), "the rest of the flight is pending");
        // the acknowledgement that covers them echoes a transmission from
        // after the first timeout: the reduction stands
        assert!(!c.on_echo(LATER, 0, 3100, 3600, 100_000, 12));
        assert!(!c.episode_open());
        assert_eq!((c.cwnd, c.ssthresh), (9000, 4 * 9000));
    }

    /// h13-ccundofix (review point 3): an episode older than its bound is
    /// dropped with its reduction standing: past the wrap of the 32-bit
    /// stamps (35.8 minutes) a retransmission's echo looks older than the
    /// timeout, and a stream that is never judged (its peer echoes
    /// nothing, then idles) must not block the undo of later episodes.
    /// (OLD: the wrapped echo undid the reduction, `true`; the late clean
    /// acknowledgement undid it; the stuck episode kept the next one's
    /// undo from happening, `false`.)
    #[test]
    fn ccundofix_an_episode_past_its_bound_is_never_undone() {
        let sat = hold::SATURATED;
        for bound in [EPISODE, u64::MAX] {
            let mut c = Cc::new(true, 9000, 64 * 9000, bound, bound);
            c.cwnd = 8 * 9000;
            c.on_timeout(30, 1000, 0, 10);
            // a retransmission 2^31 + 10 us after the timeout, covering
            // the flight: its echo wraps to before the timeout
            let echo = 1000u32.wrapping_add((1 << 31) + 10);
            assert!(hold::sent_before(echo, 1000));
            let later = 30 + ((1u64 << 31) + 10) * 1000;
            assert!(!c.on_echo(later, 0, echo, echo + 600_000, sat, 10));
            assert!(!c.episode_open());
            assert_eq!((c.cwnd, c.ssthresh), (9000, 4 * 9000));
        }
        // a clean covering acknowledgement at the bound after the latest
        // timeout undoes, one after it does not
        let t = 1_000_000_000;
        for (late, undone) in [(QUIET, true), (QUIET + 1, false)] {
            let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
            c.cwnd = 8 * 9000;
            c.on_timeout(t, 1000, 0, 10);
            assert_eq!(
                c.on_echo(t + late, 0, 900, 600_000, sat, 10),
                undone,
                "{late} ns after the timeout"
            );
        }
        // the reply stream times out and is never judged; past the bound
        // a timeout of the request stream opens a new episode of its own,
        // which its clean acknowledgement undoes
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.on_timeout(t, 1000, 1, 10);
        c.cwnd = 8 * 9000;
        c.on_timeout(t + QUIET + 1, 5000, 0, 10);
        assert!(c.on_echo(t + QUIET + 2, 0, 4900, 600_000, sat, 10));
        assert_eq!(c.cwnd, 8 * 9000);
        // h13-ccundofix2: a stream that keeps timing out keeps its
        // episode open past QUIET after the first timeout, up to EPISODE
        // after it
        for (span, undone) in [(EPISODE, true), (EPISODE + QUIET, false)] {
            let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
            c.cwnd = 8 * 9000;
            c.on_timeout(t, 1000, 0, 10);
            let mut at = t;
            while at + QUIET < t + span {
                at += QUIET;
                c.on_timeout(at, 1000 + ((at - t) / 1000) as u32, 0, 10);
            }
            assert_eq!(
                c.on_echo(t + span, 0, 900, 600_000, sat, 10),
                undone,
                "{span} ns after the first timeout"
            );
        }
        // a configuration's bounds are capped below the stamps' wrap
        let c = Cc::new(true, 9000, 9000, u64::MAX, u64::MAX);
        assert_eq!((c.quiet, c.episode), (EPISODE_MAX, EPISODE_MAX));
    }

    /// h13-ccundofix2 (review point 1): after a timeout the window is
    /// below `ssthresh`, so any sample above the target ends slow start;
    /// that must not end the episode. An intermediate acknowledgement from
    /// a host stalled ~300 ms gives a network RTT inflated by the hold's
    /// rounding (up to 1/16 of it, more than the 4 ms floor of the
    /// target): it is no queue, and the clean covering acknowledgement
    /// still undoes the timeout. (OLD: `false`, the window stayed
    /// (9000, 9000).)
    #[test]
    fn ccundofix2_a_rounded_hold_does_not_end_the_episode() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.on_rtt(1, 0, 200_000, 200_000); // target 4.2 ms
        c.cwnd = 8 * 9000;
        let before = (c.cwnd, c.ssthresh);
        c.on_timeout(30_000_000, 30_000, 0, 10);
        let h = hold::decode(hold::encode(300_000_000)); // 294.9 ms
        assert!(!c.on_echo(LATER, 0, 900, 301_100, h, 5), "timed, pending");
        let net =
            hold::network_rtt(301_150, 950, hold::host_delay(hold::encode(299_950_000))).unwrap(); // ~5.3 ms
        assert!(net > 200_000 + DELAY_MIN);
        c.on_rtt(30_400_000, 950, net, 200_000);
        assert!(c.on_echo(LATER, 0, 950, 301_200, h, 10));
        assert_eq!((c.cwnd, c.ssthresh), before);
    }

    /// h13-ccundofix2 (review point 3): an episode reopened after an
    /// expiry takes the already-reduced window as its record; its clean
    /// acknowledgement restores nothing and is no undo (no spurious
    /// timeout counted). (OLD: `true`, window (9000, 36000).)
    #[test]
    fn ccundofix2_an_undo_that_restores_nothing_is_none() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 72_000;
        c.on_timeout(0, 1000, 0, 10);
        c.on_timeout(QUIET + 1, 1_601_000, 0, 10);
        assert!(c.episode_open(), "a new episode");
        assert!(!c.on_echo(QUIET + 100, 0, 1000, 1_700_000, hold::SATURATED, 10));
        assert!(!c.episode_open());
        assert_eq!((c.cwnd, c.ssthresh), (9000, 36_000));
    }

    /// h13-ccundofix2 (review nit 4): a loss of a datagram sent before
    /// the reduction that preceded the episode belongs to that earlier
    /// event (the record's window already has it) and leaves the episode
    /// open. (OLD: it ended the episode, `false`, window (9000, 18000).)
    #[test]
    fn ccundofix2_a_loss_from_an_earlier_event_leaves_the_episode_open() {
        let mut c = Cc::new(true, 9000, 64 * 9000, QUIET, EPISODE);
        c.cwnd = 8 * 9000;
        assert!(c.on_loss(10, 5));
        c.on_timeout(30, 1000, 0, 10);
        assert_eq!((c.cwnd, c.ssthresh), (9000, 18_000));
        assert!(!c.on_loss(40, 8), "sent at 8, before the reduction at 10");
        assert!(c.episode_open());
        assert!(c.on_echo(LATER, 0, 900, 1500, 550_000, 10));
        assert_eq!((c.cwnd, c.ssthresh), (36_000, 36_000));
    }

    #[test]
    fn cc_never_above_the_credit_and_off_is_open() {
        let mut c = Cc::new(true, 9000, 4 * 9000, QUIET, EPISODE);
        for _ in 0..100 {
            c.on_sent(0, 9000);
            c.on_acked(9000, 9000);
        }
        assert_eq!(c.cwnd, 4 * 9000);
        let mut off = Cc::new(false, 9000, 4 * 9000, QUIET, EPISODE);
        off.on_sent(0, 1 << 30);
        assert_eq!(off.gate(0), Gate::Open);
    }

    #[test]
    fn cc_delay_ends_slow_start_and_pacing_spaces_datagrams() {
        let mut c = Cc::new(true, 9000, 1 << 30, QUIET, EPISODE);
        c.on_rtt(1, 0, 100_000, 100_000);
        assert!(c.cwnd < c.ssthresh);
        let w = c.cwnd;
        c.on_rtt(1_000_000, 0, 100_000 + 2 * DELAY_MIN, 200_000);
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
