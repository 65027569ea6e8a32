//! The quantities the AM benchmark measures, with their CSV identifiers.

use crate::harness::results::BenchId;

/// The measured quantities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bench {
    /// Raw cache-line ping-pong round trip.
    RawLineRtt,
    /// AM Short round trip.
    ShortRtt,
    /// AM Medium round trip (same size each way).
    MediumRtt,
    /// AM Long round trip (same size each way).
    LongRtt,
    /// AM Medium one-way throughput.
    MediumBw,
    /// AM Long one-way throughput.
    LongBw,
    /// AM Short one-way message rate.
    ShortRate,
    /// Typed RPC round trip (8 B argument, 8 B result), called and waited
    /// one at a time.
    RpcRtt,
    /// Typed RPC rate, 8 B arguments and results, aggregated (many calls
    /// outstanding, buffered per destination).
    RpcRate,
    /// AM Short round trip whose peer runs its handlers only on its
    /// progress thread (`Progress::ThreadOnly`), measured right after
    /// [`ShortRtt`](Bench::ShortRtt) (the same peer polling itself).
    ShortRttProgress,
}

impl BenchId for Bench {
    const ALL: &'static [Bench] = &[
        Bench::RawLineRtt,
        Bench::ShortRtt,
        Bench::MediumRtt,
        Bench::LongRtt,
        Bench::MediumBw,
        Bench::LongBw,
        Bench::ShortRate,
        Bench::RpcRtt,
        Bench::RpcRate,
        Bench::ShortRttProgress,
    ];

    fn id(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw_line_rtt",
            Bench::ShortRtt => "am_short_rtt",
            Bench::MediumRtt => "am_medium_rtt",
            Bench::LongRtt => "am_long_rtt",
            Bench::MediumBw => "am_medium_oneway_bw",
            Bench::LongBw => "am_long_oneway_bw",
            Bench::ShortRate => "am_short_msg_rate",
            Bench::RpcRtt => "rpc_rtt",
            Bench::RpcRate => "rpc_agg_rate",
            Bench::ShortRttProgress => "am_short_rtt_progress_thread",
        }
    }
}

impl Bench {
    /// Name in the printed table.
    pub fn label(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw line ping-pong RTT",
            Bench::ShortRtt => "AM Short RTT",
            Bench::MediumRtt => "AM Medium RTT",
            Bench::LongRtt => "AM Long RTT",
            Bench::MediumBw => "AM Medium one-way",
            Bench::LongBw => "AM Long one-way",
            Bench::ShortRate => "AM Short flood rate",
            Bench::RpcRtt => "RPC RTT",
            Bench::RpcRate => "RPC aggregated rate",
            Bench::ShortRttProgress => "AM Short RTT, peer's progress thread",
        }
    }

    /// Unit of the printed values.
    pub fn unit(self) -> &'static str {
        match self {
            Bench::MediumBw | Bench::LongBw => "MB/s",
            Bench::ShortRate | Bench::RpcRate => "msgs/s",
            _ => "us",
        }
    }
}
