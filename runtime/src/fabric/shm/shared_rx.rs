//! The receiving side of the shared queue (`SPLITRT_SHM_QUEUE=shared`,
//! [`mpq`](super::mpq)): one queue per channel holds every sender's cells
//! in the order they were claimed; the sender's local rank in each cell
//! picks its reassembly state (a streamed packet's chunks interleave with
//! other senders' packets, never with the same sender's: a sender streams
//! under its send lock). Every cell is checked as a ring's is, and its
//! sender's rank against the host's ranks: the receive step is the
//! rings' ([`receive`](super::receive)).

use super::layout::Layout;
use super::mpq::{QConsumer, Queue};
use super::receive::RxParts;
use super::{Reassembly, ShmFabric};
use crate::fabric::Delivery;
use crate::segment::{populate, ShmFile};
use crate::trace::Clock;
use crate::Result;

/// The queue of channel `ch` in `file` (where a single sender's ring of
/// that channel would be). Its cells hold their pad too
/// ([`Cells::padded`](super::cells::Cells::padded)): senders and the
/// consumer all make it here, so they agree on what a cell holds.
pub(super) fn queue(file: &ShmFile, l: &Layout, ch: usize) -> Queue {
    // SAFETY: ring_off(0, ch) + ring_stride lies inside the file
    // (Layout::new, one sender), 64-aligned (4096 + a multiple of the
    // 64-aligned ring stride); the file is mapped as long as the fabric.
    let base = unsafe { file.as_ptr().add(l.ring_off(0, ch)) };
    // SAFETY: `Queue::new`'s contract: base starts ring_stride = RING_CTRL +
    // ring_len * cell_stride(cell_size) mapped bytes, 64-aligned, kept as
    // long as the fabric; ring_len >= 2 and cell_size >= 256
    // (`Config::validate`).
    unsafe { Queue::new(base, l.cell_size, l.ring_len) }.padded()
}

/// Fault in this rank's own queues (every sender writes them: one fault
/// here rather than one per sender and page) and, on a host of at most
/// four ranks, its mappings of the peers' queues too.
pub(super) fn populate_queues(files: &[ShmFile], rank: usize, l: &Layout) {
    let few = files.len() <= 4;
    for (i, f) in files.iter().enumerate() {
        if i == rank || few {
            for ch in 0..2 {
                let (at, len) = queue(f, l, ch).span();
                // SAFETY: `populate`'s contract: the queue (its own span)
                // lies in the file, one live shared mapping.
                unsafe { populate(at, len) };
            }
        }
    }
}

/// This rank's queue on one channel and the reassembly state per sender.
pub(super) struct SharedRx {
    cons: QConsumer,
    reasm: Vec<Reassembly>,
}

impl SharedRx {
    pub(super) fn new(cons: QConsumer, senders: usize) -> Self {
        SharedRx {
            cons,
            reasm: (0..senders).map(|_| Reassembly::default()).collect(),
        }
    }

    /// Whether a cell waits.
    pub(super) fn has_next(&self) -> bool {
        self.cons.has_next()
    }
}

impl ShmFabric {
    /// Deliver what this rank's queue on a channel holds, at most a
    /// queue's length of cells; when cells were freed, ring every sender's
    /// doorbell if one found the queue full (it may sleep waiting for
    /// room), and this rank's own (another of its threads may wait for
    /// what the handlers did).
    pub(super) fn poll_shared<C: Clock>(
        &self,
        q: &mut SharedRx,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<usize> {
        let mut delivered = 0;
        let mut freed = false;
        let mut res = Ok(());
        let len = q.cons.len();
        let mut parts = RxParts {
            cons: &mut q.cons,
            reasm: &mut q.reasm,
            zone: None,
            src: 0,
        };
        for _ in 0..len {
            match self.rx_one::<C, _>(&mut parts, deliver) {
                Ok(None) => break,
                Ok(Some(done)) => {
                    delivered += done as usize;
                    freed = true;
                }
                Err(e) => {
                    freed = true;
                    res = Err(e);
                    break;
                }
            }
        }
        if freed {
            if q.cons.freed() {
                super::timeline::stamp(super::timeline::Ev::Rung, 0xff, 0);
                for (i, b) in self.bells.iter().enumerate() {
                    if i != self.me {
                        b.get().ring();
                    }
                }
            }
            if delivered > 0 {
                self.own_bell.get().ring();
            }
        }
        res.map(|()| delivered)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::{CellMeta, F_DEPOSIT, F_FIRST, F_LAST};
    use super::super::queue_choice::ShmQueue;
    use super::super::{PendingShm, Prod};
    use super::*;
    use crate::config::Config;
    use crate::fabric::{Channel, Fabric, Packet, WouldBlock};

    /// `n` ranks of one host in this process, over shared queues of `len`
    /// cells of `cell` bytes.
    fn host(tag: &str, n: usize, cell: usize, len: usize) -> Vec<ShmFabric> {
        host_of(tag, n, cell, len, true)
    }

    /// [`host`] over shared queues (`shared`) or per-pair rings.
    fn host_of(tag: &str, n: usize, cell: usize, len: usize, shared: bool) -> Vec<ShmFabric> {
        host_max(tag, n, cell, len, shared, 4096)
    }

    /// [`host_of`] with Mediums up to `max_medium` bytes.
    fn host_max(
        tag: &str,
        n: usize,
        cell: usize,
        len: usize,
        shared: bool,
        max_medium: usize,
    ) -> Vec<ShmFabric> {
        let job = format!("unitq{tag}{}", std::process::id());
        let cfg = Config {
            segment_size: 1 << 20,
            cell_size: cell,
            ring_len: len,
            max_medium,
            shm_queue: if shared {
                ShmQueue::Shared
            } else {
                ShmQueue::Pairs
            },
            ..Config::default()
        };
        let members: Vec<usize> = (0..n).collect();
        let pending: Vec<PendingShm> = (0..n)
            .map(|r| PendingShm::create(&job, r, &members, n, &cfg.shm()).unwrap())
            .collect();
        let fabrics: Vec<ShmFabric> = pending.into_iter().map(|p| p.connect().unwrap()).collect();
        for f in &fabrics {
            f.unlink_own().unwrap();
        }
        fabrics
    }

    fn collect(f: &ShmFabric, ch: Channel) -> Vec<(usize, u16, Vec<u64>, Vec<u8>)> {
        let mut got = Vec::new();
        while f
            .poll(ch, &mut |d| {
                got.push((d.src, d.tag, d.words.to_vec(), d.payload.to_vec()))
            })
            .unwrap()
            > 0
        {}
        got
    }

    /// Three ranks write into one queue: Shorts, one-cell and streamed
    /// Mediums (their chunks interleaved with the other sender's
    /// packets) and Longs all arrive whole, named by their sender, each
    /// sender's in order; a full queue refuses with `PeerRingFull` and
    /// takes packets again once polled. The file holds two queues
    /// whatever the ranks.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_senders_share_a_queue_and_everything_arrives() {
        let f = host("mix", 3, 256, 8);
        let none = &mut |_: u32| -> Result<()> { Ok(()) };
        let big: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
        for round in 0..20u64 {
            for s in [1usize, 2] {
                assert!(f[s]
                    .try_send_short(0, Channel::Request, 7, &[round, s as u64])
                    .unwrap());
            }
            let medium = Packet {
                tag: 8,
                words: &[round],
                payload: &big[..100],
                deposit: None,
            };
            assert!(f[1].try_send(0, Channel::Request, &medium, none).unwrap());
            let long = Packet {
                tag: 9,
                words: &[],
                payload: &big[..64],
                deposit: Some(round * 64),
            };
            assert!(f[2].try_send(0, Channel::Request, &long, none).unwrap());
            let got = collect(&f[0], Channel::Request);
            assert_eq!(got.len(), 4, "round {round}");
            assert!(got.contains(&(1, 7, vec![round, 1], vec![])));
            assert!(got.contains(&(2, 7, vec![round, 2], vec![])));
            assert!(got.contains(&(1, 8, vec![round], big[..100].to_vec())));
            assert!(got.iter().any(|g| g.0 == 2 && g.1 == 9));
        }
        // streamed: a 4000 B Medium over 256 B cells (18 of them, the queue
        // holds 8) from rank 1, while
        // rank 2's Shorts take cells between its chunks
        let medium = Packet {
            tag: 8,
            words: &[1, 2],
            payload: &big,
            deposit: None,
        };
        let early = std::cell::RefCell::new(Vec::new());
        let stall = &mut |waits: u32| -> Result<()> {
            assert!(waits < 1000, "the queue never drained");
            let _ = f[2].try_send_short(0, Channel::Reply, 3, &[4]).unwrap();
            early.borrow_mut().extend(collect(&f[0], Channel::Reply));
            Ok(())
        };
        assert!(f[2].try_send_short(0, Channel::Reply, 3, &[4]).unwrap());
        assert!(f[1].try_send(0, Channel::Reply, &medium, stall).unwrap());
        let mut got = early.take();
        got.extend(collect(&f[0], Channel::Reply));
        assert!(got.contains(&(1, 8, vec![1, 2], big.clone())), "{got:?}");
        assert!(got.iter().filter(|g| g.0 == 2).all(|g| g.1 == 3));
        // full: 8 cells shared by both senders
        let short = Packet {
            tag: 7,
            words: &[1],
            payload: &[],
            deposit: None,
        };
        let mut sent = 0;
        for s in (1..3).cycle().take(8) {
            assert_eq!(
                f[s].try_send_why(0, Channel::Request, &short, none)
                    .unwrap(),
                Ok(())
            );
            sent += 1;
        }
        assert_eq!(
            f[1].try_send_why(0, Channel::Request, &short, none)
                .unwrap(),
            Err(WouldBlock::PeerRingFull)
        );
        assert_eq!(f[2].credits(0, Channel::Request), Some((0, 8)));
        assert_eq!(collect(&f[0], Channel::Request).len(), sent);
        assert_eq!(f[2].credits(0, Channel::Request), Some((8, 8)));
        assert!(f[1].try_send_short(0, Channel::Request, 7, &[1]).unwrap());
        // every rank's file: header, two queues, segment
        let l = f[0].layout;
        assert_eq!(l.total, l.segment_off + (1 << 20));
        assert!(l.segment_off <= 4096 + 2 * (128 + 8 * (256 + 64)) + 4095);
    }

    /// A queue's cell holds its pad too (`Cells::padded`): over 4 KiB
    /// cells a 4 KiB Medium takes one cell (OLD: two, 4,064 B + 32 B,
    /// and a reassembly copy), up to 4,128 B less 8 per argument word
    /// does, and a 16 KiB one four cells (OLD: five); one byte more takes
    /// another cell. Each arrives whole, named by its sender. The cells
    /// taken are the sender's credits before the poll.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_a_4_kib_medium_takes_one_cell_of_4_kib() {
        let f = host_max("pad", 2, 4096, 8, true, 64 << 10);
        // a send that finds no room fails instead of spinning (nothing
        // polls while it waits): a regression that needs more cells than
        // the sender's credits is an error, not a hang (review of h15-medium)
        let mut stalls = 0u32;
        let none = &mut |_: u32| -> Result<()> {
            stalls += 1;
            if stalls > 1_000 {
                return Err(crate::error::Error::protocol(
                    "no room: the Medium took more cells",
                ));
            }
            Ok(())
        };
        let big: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        let cases: [(&[u64], usize, usize); 8] = [
            (&[], 4096, 1),
            (&[1, 2, 3, 4], 4096, 1),
            // five words: 4,096 + 40 B is over the padded room
            (&[1, 2, 3, 4, 5], 4096, 2),
            (&[], 4128, 1),
            (&[], 4129, 2),
            (&[7], 4121, 2),
            (&[], 8192, 2),
            (&[], 16384, 4),
        ];
        for (words, len, cells) in cases {
            let pkt = Packet {
                tag: 8,
                words,
                payload: &big[..len],
                deposit: None,
            };
            assert!(f[1].try_send(0, Channel::Request, &pkt, none).unwrap());
            assert_eq!(
                f[1].credits(0, Channel::Request),
                Some((8 - cells, 8)),
                "{len} B with {} words",
                words.len()
            );
            let got = collect(&f[0], Channel::Request);
            assert_eq!(got, vec![(1, 8, words.to_vec(), big[..len].to_vec())]);
            assert_eq!(f[1].credits(0, Channel::Request), Some((8, 8)));
        }
    }

    /// A sender refused for want of room, whose doorbell the consumer rang
    /// when it freed cells before the sender announced its sleep (the ring
    /// found no sleeper), still sees the room in its last look before
    /// sleeping (`has_work`, which the doorbell's wait asks after the
    /// announcement), so it does not sleep to the 2 ms limit; a queue and
    /// a ring. Before: the last look saw only inbound traffic.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_a_sleeper_waiting_for_room_sees_room_freed_before_it_slept() {
        for shared in [true, false] {
            let f = host_of(if shared { "roomq" } else { "roomr" }, 2, 256, 8, shared);
            let mut sent = 0;
            while f[1].try_send_short(0, Channel::Request, 7, &[1]).unwrap() {
                sent += 1;
                assert!(sent <= 8, "more sends than cells");
            }
            assert!(!f[1].has_work(), "no room yet, nothing inbound ({shared})");
            assert_eq!(collect(&f[0], Channel::Request).len(), sent);
            assert!(f[1].has_work(), "the freed room is work ({shared})");
            // taken: the sender tries again now
            assert!(!f[1].has_work());
            assert!(f[1].try_send_short(0, Channel::Request, 7, &[2]).unwrap());
        }
    }

    /// Cells a broken sender wrote into the queue: a sender rank beyond
    /// the host's, a landing-zone flag, a streamed chunk out of place, a
    /// deposit outside the segment, a length past the cell's pad. Each is
    /// a `Protocol` error, the queue goes on, and a good Short behind them
    /// arrives.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_hostile_cells_are_errors_and_the_queue_goes_on() {
        let f = host("bad", 2, 256, 8);
        let raw = |meta: CellMeta, src: Option<u32>| {
            let mut tx = f[1].tx[0].lock();
            let Prod::Shared(q) = &mut tx.p else {
                panic!("not a shared queue")
            };
            assert!(q.has_room());
            q.write(meta, &[], &[]);
            if let Some(src) = src {
                q.forge_src(src);
            }
            q.publish();
        };
        let cases = [
            (
                CellMeta {
                    flags: F_FIRST | F_LAST,
                    ..Default::default()
                },
                Some(7),
                "sender 7",
            ),
            (
                CellMeta {
                    flags: F_FIRST | F_LAST | 8,
                    ..Default::default()
                },
                None,
                "flags",
            ),
            (
                CellMeta {
                    flags: F_LAST,
                    len: 0,
                    total: 0,
                    ..Default::default()
                },
                None,
                "without a first",
            ),
            (
                CellMeta {
                    flags: F_FIRST | F_LAST | F_DEPOSIT,
                    total: 64,
                    deposit: 1 << 40,
                    ..Default::default()
                },
                None,
                "outside the segment",
            ),
            (
                // one byte past the cell's pad (256 + 64 - 32 B hold
                // the payload), which ends at the next cell's state word
                CellMeta {
                    flags: F_FIRST | F_LAST,
                    len: 289,
                    total: 289,
                    ..Default::default()
                },
                None,
                "cell claims 289 B, holds at most 288",
            ),
        ];
        for (meta, src, what) in cases {
            raw(meta, src);
            let e = f[0]
                .poll(Channel::Request, &mut |_| panic!("delivered a bad cell"))
                .unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        assert!(f[1].try_send_short(0, Channel::Request, 5, &[9]).unwrap());
        assert_eq!(
            collect(&f[0], Channel::Request),
            vec![(1, 5, vec![9], vec![])]
        );
    }

    /// The per-message path, for `valgrind --tool=callgrind` (not a
    /// timing: instruction counts, docs/scale.md "Session 14, continued"):
    /// `n` Shorts from rank 1 to rank 0 through the general send path (an
    /// AM reply's), each polled and delivered at once, over a queue
    /// (`shared`) or a ring; no spinning, so the count per message is
    /// exact. Asserts what arrived.
    #[inline(never)]
    fn path_loop(f: &[ShmFabric], n: u64) {
        let none = &mut |_: u32| -> Result<()> { Ok(()) };
        let mut sum = 0u64;
        for i in 0..n {
            let pkt = Packet {
                tag: 7,
                words: &[i],
                payload: &[],
                deposit: None,
            };
            assert!(f[1].try_send(0, Channel::Request, &pkt, none).unwrap());
            let got = f[0]
                .poll(Channel::Request, &mut |d| sum += d.words[0])
                .unwrap();
            assert_eq!(got, 1);
        }
        assert_eq!(sum, n * n.saturating_sub(1) / 2);
    }

    #[inline(never)]
    fn path_shared(n: u64) {
        path_loop(&host_of("cgq", 2, 256, 64, true), n);
    }

    #[inline(never)]
    fn path_pairs(n: u64) {
        path_loop(&host_of("cgr", 2, 256, 64, false), n);
    }

    /// Runs [`path_loop`] over a queue and over a ring (run it under
    /// callgrind: `path_shared` and `path_pairs` inclusive, over `n`).
    #[test]
    #[ignore = "a measurement loop for callgrind (docs/scale.md)"]
    fn shmq_path_length_loop() {
        let n = std::env::var("SHMQ_PATH_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        path_shared(n);
        path_pairs(n);
    }

    /// One Medium of `payload` from rank 1 to rank 0 (the send path alone,
    /// for callgrind's inclusive count).
    #[inline(never)]
    fn medium_send(f: &[ShmFabric], payload: &[u8], i: u64) {
        let none = &mut |_: u32| -> Result<()> { Ok(()) };
        let pkt = Packet {
            tag: 8,
            words: &[i],
            payload,
            deposit: None,
        };
        assert!(f[1].try_send(0, Channel::Request, &pkt, none).unwrap());
    }

    /// Rank 0 polls until one Medium is delivered (the receive path alone):
    /// its length and first byte.
    #[inline(never)]
    fn medium_poll(f: &[ShmFabric]) -> (usize, u8) {
        let mut got = (0, 0);
        let mut n = 0;
        while n == 0 {
            n = f[0]
                .poll(Channel::Request, &mut |d| {
                    got = (d.payload.len(), d.payload[0])
                })
                .unwrap();
        }
        got
    }

    /// The per-Medium path, for `valgrind --tool=callgrind` (docs/scale.md
    /// "Session 15: large Mediums on the shared queue"): `n` Mediums of
    /// `size` bytes from rank 1 to rank 0 over cells of 4 KiB (64 of them,
    /// the defaults), each sent ([`medium_send`]) and then polled until
    /// delivered ([`medium_poll`]) in one thread, so the counts per
    /// message are exact; a queue (`shared`) or a ring. Asserts what
    /// arrived.
    #[inline(never)]
    fn medium_loop(f: &[ShmFabric], size: usize, n: u64) {
        let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        for i in 0..n {
            medium_send(f, &payload, i);
            assert_eq!(medium_poll(f), (size, 0));
        }
    }

    #[inline(never)]
    fn medium_shared(size: usize, n: u64) {
        medium_loop(&host_max("cgmq", 2, 4096, 64, true, 64 << 10), size, n);
    }

    #[inline(never)]
    fn medium_pairs(size: usize, n: u64) {
        medium_loop(&host_max("cgmr", 2, 4096, 64, false, 64 << 10), size, n);
    }

    /// Runs [`medium_loop`] over a queue and over a ring: `SHMQ_MED_N`
    /// Mediums (default 1000) of `SHMQ_MED_SIZE` bytes (default 16384).
    /// Run it under callgrind: `medium_send` and `medium_poll` inclusive
    /// under `medium_shared` and `medium_pairs`, over `n`.
    #[test]
    #[ignore = "a measurement loop for callgrind (docs/scale.md)"]
    fn shmq_medium_path_loop() {
        let var = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let (n, size) = (var("SHMQ_MED_N", 1000), var("SHMQ_MED_SIZE", 16384));
        medium_shared(size as usize, n);
        medium_pairs(size as usize, n);
    }

    /// A rank started with `SPLITRT_SHM_QUEUE=pairs` and one with `shared`
    /// refuse each other's files (their layouts differ) with an error
    /// that names the settings, before any traffic.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_ranks_with_different_queue_settings_refuse_each_other() {
        let job = format!("unitqsetmix{}", std::process::id());
        // removes both files however the test ends
        let _clean = crate::segment::RemoveJobFilesOnDrop(job.clone());
        let cfg = |shared| Config {
            segment_size: 1 << 20,
            shm_queue: if shared {
                ShmQueue::Shared
            } else {
                ShmQueue::Pairs
            },
            ..Config::default()
        };
        let a = PendingShm::create(&job, 0, &[0, 1], 2, &cfg(false).shm()).unwrap();
        let b = PendingShm::create(&job, 1, &[0, 1], 2, &cfg(true).shm()).unwrap();
        for p in [a, b] {
            let e = p.connect().err().expect("mixed queue settings connected");
            assert!(e.to_string().contains("different settings"), "{e}");
            assert!(e.to_string().contains("SPLITRT_SHM_QUEUE"), "{e}");
            // the remedy when neither rank set anything: a build older
            // than `auto` (default pairs) beside a new one on 16+ ranks
            assert!(e.to_string().contains("the same splitrt build"), "{e}");
        }
    }

    /// `SPLITRT_SHM_QUEUE=auto` on a host of 16 ranks chooses the shared
    /// queue; one rank of them forced to `pairs` is refused at connect by
    /// every rank that checks its file, and refuses theirs, with the
    /// "different settings" error naming `SPLITRT_SHM_QUEUE` and why
    /// each side has its queue (OLD: the error named only a tuple of
    /// sizes, `(size, ...) = (1, ...), here (16, ...)`).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps 16 files in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_a_rank_forced_to_pairs_among_auto_ranks_is_refused() {
        use super::super::queue_choice::SHARED_QUEUE_FROM;
        let n = SHARED_QUEUE_FROM;
        let job = format!("unitqauto{}", std::process::id());
        // removes the 16 files however the test ends
        let _clean = crate::segment::RemoveJobFilesOnDrop(job.clone());
        let members: Vec<usize> = (0..n).collect();
        let odd = 3;
        let cfg = |q| Config {
            segment_size: 64 << 10,
            cell_size: 256,
            ring_len: 4,
            max_medium: 4096,
            shm_queue: q,
            ..Config::default()
        };
        let pending: Vec<PendingShm> = (0..n)
            .map(|r| {
                let q = if r == odd {
                    ShmQueue::Pairs
                } else {
                    ShmQueue::Auto
                };
                PendingShm::create(&job, r, &members, n, &cfg(q).shm()).unwrap()
            })
            .collect();
        for (r, p) in pending.iter().enumerate() {
            assert_eq!(p.layout.shared_queue, r != odd, "rank {r}");
        }
        for (r, p) in pending.into_iter().enumerate() {
            let e = p
                .connect()
                .err()
                .unwrap_or_else(|| panic!("rank {r} connected beside a rank of other settings"))
                .to_string();
            assert!(
                e.contains("different settings") && e.contains("SPLITRT_SHM_QUEUE"),
                "rank {r}: {e}"
            );
            if r == odd {
                assert!(
                    e.contains("uses the shared receive queue and this rank the per-pair rings")
                        && e.contains("(SPLITRT_SHM_QUEUE=pairs)"),
                    "{e}"
                );
            } else {
                assert!(
                    e.contains("rank 3 uses the per-pair rings and this rank the shared")
                        && e.contains("SPLITRT_SHM_QUEUE=auto (the default) with 16 rank(s)"),
                    "rank {r}: {e}"
                );
            }
        }
    }

    /// Ranks of one host all left to `auto` agree below and from the
    /// threshold: 15 connect over the rings, 16 over the shared queue.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps 16 files in /dev/shm (mmap of a file: FFI)"
    )]
    fn shmq_auto_ranks_agree_on_either_side_of_the_threshold() {
        use super::super::queue_choice::{QueueKind, SHARED_QUEUE_FROM};
        for (n, want) in [
            (SHARED_QUEUE_FROM - 1, QueueKind::Pairs),
            (SHARED_QUEUE_FROM, QueueKind::Shared),
        ] {
            let job = format!("unitqagree{n}x{}", std::process::id());
            // removes the files however the test ends (a rank that fails
            // to create or connect leaves the others' files otherwise)
            let _clean = crate::segment::RemoveJobFilesOnDrop(job.clone());
            let cfg = Config {
                segment_size: 64 << 10,
                cell_size: 256,
                ring_len: 4,
                max_medium: 4096,
                medium_slots: Some(0),
                ..Config::default()
            };
            assert_eq!(cfg.shm_queue, ShmQueue::Auto);
            let members: Vec<usize> = (0..n).collect();
            let pending: Vec<PendingShm> = (0..n)
                .map(|r| PendingShm::create(&job, r, &members, n, &cfg.shm()).unwrap())
                .collect();
            let fabrics: Vec<ShmFabric> =
                pending.into_iter().map(|p| p.connect().unwrap()).collect();
            for f in &fabrics {
                f.unlink_own().unwrap();
                assert_eq!(f.queue(), want, "{n} ranks");
            }
            // and they talk: rank n-1 to rank 0
            assert!(fabrics[n - 1]
                .try_send_short(0, Channel::Request, 5, &[n as u64])
                .unwrap());
            let got = collect(&fabrics[0], Channel::Request);
            assert_eq!(got.len(), 1, "{n} ranks");
            assert_eq!((got[0].0, got[0].1, got[0].2[0]), (n - 1, 5, n as u64));
        }
    }

    /// Review of the `want` move (layout v5 -> v6): a rank running
    /// another build's layout is refused with both versions and the rank
    /// named (before: "not a splitrt v6 file", the words of a file not
    /// ready or of a wrong magic number too).
    #[test]
    #[cfg_attr(miri, ignore = "shared-memory files")]
    fn shmq_a_peer_of_another_layout_version_is_named() {
        let job = format!("unitqver{}", std::process::id());
        let cfg = Config {
            segment_size: 1 << 20,
            shm_queue: ShmQueue::Shared,
            ..Config::default()
        };
        let a = PendingShm::create(&job, 0, &[0, 1], 2, &cfg.shm()).unwrap();
        let b = PendingShm::create(&job, 1, &[0, 1], 2, &cfg.shm()).unwrap();
        // rank 1's header says layout v5 (the version word follows the
        // 8-byte magic number)
        {
            use std::io::{Seek, SeekFrom, Write};
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(crate::segment::ShmFile::path_for(&job, 1))
                .unwrap();
            f.seek(SeekFrom::Start(8)).unwrap();
            f.write_all(&5u32.to_le_bytes()).unwrap();
        }
        let e = a.connect().err().expect("a v5 peer connected");
        let e = e.to_string();
        assert!(
            e.contains("rank 1 uses shared-memory layout v5")
                && e.contains(&format!("this rank v{}", super::super::layout::VERSION)),
            "{e}"
        );
        drop(b);
        for r in 0..2 {
            let _ = std::fs::remove_file(crate::segment::ShmFile::path_for(&job, r));
        }
    }
}
