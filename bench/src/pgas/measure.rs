//! The quantities the PGAS benchmark measures, with their CSV identifiers.
//! Every job measures all of them on its one-sided path (`SPLITRT_RMA`).

use crate::harness::results::BenchId;

/// The measured quantities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bench {
    /// `pg.put(p, &[x]); pg.sync()` of 8 B, the same word every time.
    PutSync,
    /// `pg.read(p)` of 8 B, the same word every time.
    Read,
    /// `pg.read(p)` of 8 B in a line the peer wrote just before.
    ReadDirty,
    /// Put ping-pong round trip: put + sync, the peer polls and puts back.
    PutPingPong,
    /// `pg.sync()` with nothing outstanding.
    SyncEmpty,
    /// `pg.sync()` right after one 8 B put (timed alone).
    SyncAfterPut,
    /// Cost of reading the clock twice (subtracted from `SyncAfterPut`).
    ClockPair,
    /// Single-threaded memcpy within rank 0 (MB/s).
    Memcpy,
    /// Split-phase puts, one sync per round (MB/s).
    PutBw,
    /// Split-phase gets in a scope, one wait per round (MB/s).
    GetBw,
    /// Stores until the target's `store_sync` returns (MB/s).
    StoreBw,
    /// `put_strided` of 1000 runs of 64 B + sync (see `strided.rs`).
    StridedPut,
    /// The same 1000 runs as 1000 `put`s + sync.
    SeparatePuts,
    /// put_signal ping-pong round trip: put_signal, the peer waits for the
    /// signal and put_signals back.
    PutSignalPingPong,
    /// `Team::alltoall` of 4 KiB per pair (the world team).
    TeamAlltoall,
    /// The same all-to-all by hand: put per peer, sync, barrier.
    HandAlltoall,
    /// `Team::allgather` of 8 B per rank.
    TeamAllgather,
    /// `Pgas::allreduce` of 8 B (sum).
    PgasAllreduce,
    /// `Team::allreduce` of 8 B (sum).
    TeamAllreduce,
    /// `Team::scan_inclusive` of 8 B (sum).
    TeamScan,
    /// `Team::allreduce` of 8 B (sum) on a team split from the world with
    /// every rank in it (its own shared-memory area, not the world's).
    SplitTeamAllreduce,
}

impl BenchId for Bench {
    const ALL: &'static [Bench] = &[
        Bench::PutSync,
        Bench::Read,
        Bench::ReadDirty,
        Bench::PutPingPong,
        Bench::SyncEmpty,
        Bench::SyncAfterPut,
        Bench::ClockPair,
        Bench::Memcpy,
        Bench::PutBw,
        Bench::GetBw,
        Bench::StoreBw,
        Bench::StridedPut,
        Bench::SeparatePuts,
        Bench::PutSignalPingPong,
        Bench::TeamAlltoall,
        Bench::HandAlltoall,
        Bench::TeamAllgather,
        Bench::PgasAllreduce,
        Bench::TeamAllreduce,
        Bench::TeamScan,
        Bench::SplitTeamAllreduce,
    ];

    fn id(self) -> &'static str {
        match self {
            Bench::PutSync => "put_sync_8b",
            Bench::Read => "read_8b",
            Bench::ReadDirty => "read_peer_written_line_8b",
            Bench::PutPingPong => "put_pingpong_rtt_8b",
            Bench::SyncEmpty => "sync_empty",
            Bench::SyncAfterPut => "sync_after_put",
            Bench::ClockPair => "clock_pair",
            Bench::Memcpy => "memcpy_bw",
            Bench::PutBw => "put_bw",
            Bench::GetBw => "get_bw",
            Bench::StoreBw => "store_bw",
            Bench::StridedPut => "strided_put_1000x64b",
            Bench::SeparatePuts => "separate_puts_1000x64b",
            Bench::PutSignalPingPong => "put_signal_pingpong_rtt_8b",
            Bench::TeamAlltoall => "team_alltoall_4k",
            Bench::HandAlltoall => "hand_alltoall_4k",
            Bench::TeamAllgather => "team_allgather_8b",
            Bench::PgasAllreduce => "pgas_allreduce_8b",
            Bench::TeamAllreduce => "team_allreduce_8b",
            Bench::TeamScan => "team_scan_8b",
            Bench::SplitTeamAllreduce => "split_team_allreduce_8b",
        }
    }
}

impl Bench {
    /// Name in the printed table (the path is appended to it).
    pub fn label(self) -> &'static str {
        match self {
            Bench::PutSync => "put 8 B + sync",
            Bench::Read => "read 8 B (blocking get)",
            Bench::ReadDirty => "read 8 B of a line the peer just wrote",
            Bench::PutPingPong => "put ping-pong RTT (put+sync, peer puts back)",
            Bench::SyncEmpty => "sync with nothing outstanding",
            Bench::SyncAfterPut => "sync right after one 8 B put",
            Bench::ClockPair => "Instant::now() pair",
            Bench::Memcpy => "memcpy (rank 0, same pattern)",
            Bench::PutBw => "put",
            Bench::GetBw => "get",
            Bench::StoreBw => "store",
            Bench::StridedPut => "strided put, 1000 runs of 64 B, + sync",
            Bench::SeparatePuts => "1000 separate 64 B puts + sync",
            Bench::PutSignalPingPong => "put_signal ping-pong RTT (peer waits, put_signals back)",
            Bench::TeamAlltoall => "Team::alltoall, 4 KiB per pair",
            Bench::HandAlltoall => "all-to-all by hand (put, sync, barrier), 4 KiB per pair",
            Bench::TeamAllgather => "Team::allgather, 8 B per rank",
            Bench::PgasAllreduce => "Pgas::allreduce, 8 B",
            Bench::TeamAllreduce => "Team::allreduce, 8 B",
            Bench::TeamScan => "Team::scan_inclusive, 8 B",
            Bench::SplitTeamAllreduce => "team allreduce (a split team of every rank), 8 B",
        }
    }
}
