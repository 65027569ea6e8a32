//! Byte layout of a rank's shared-memory file:
//!
//! ```text
//! [ FileHeader (48 B), Doorbell at 64, CPU mask at 128, padded to 4 KiB ]
//! [ ring (src 0, Request) ][ ring (src 0, Reply) ][ ring (src 1, Request) ] ...
//! [ Medium landing zones: per (src, channel) `medium_slots` x max Medium ]
//! [ segment, page aligned ]
//! ```
//! A Medium too large for one cell is copied by its sender into the
//! landing zone the receiver keeps for that sender and channel, and the
//! cell that announces it names its offset there ([`F_ZONE`]): the handler
//! reads the payload where it landed, in one piece. The sender fills the
//! zone as a byte ring ([`ZoneAlloc`](super::zone::ZoneAlloc)): bytes are
//! reused only after the cell that announced them was released (after its
//! handler returned), which the sender sees in the ring's tail.
//! A ring is a 128-byte control block (the consumer's published tail) and
//! `ring_len` cells of `cell_size` bytes, each followed by [`CELL_PAD`]
//! unused bytes (in a ring; the shared queue's cells fill them too). A
//! cell starts with an 8-byte
//! sequence word (published last) and a [`CellMeta`]; argument words and
//! payload follow at [`CELL_HDR`].

use crate::{Error, Result};
use static_assertions::{const_assert, const_assert_eq};
use std::mem::{align_of, size_of};
use std::sync::atomic::AtomicU32;

/// "SPLITRT1" as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SPLITRT1");
/// Layout version; bump on any change to this file or to where a
/// protocol keeps its words (6: the shared queue's `want` moved to offset
/// 8 of its control block, `mpq.rs`; a v5 rank would set it where a v6
/// consumer never looks; 7: the shared queue's cells hold their
/// [`CELL_PAD`] too, `Cells::padded`: a v6 consumer would reject a v7
/// sender's fuller cells).
pub const VERSION: u32 = 7;
/// Bytes reserved for the file header.
pub const HEADER_BYTES: usize = 4096;
/// Offset in the header of the owner's CPU affinity mask
/// ([`CpuSet::words`](crate::cpus::CpuSet::words), all zero if unknown),
/// from which every rank learns whether its host is oversubscribed.
pub const CPUS_OFF: usize = 128;
const_assert!(CPUS_OFF + 8 * crate::cpus::CPU_WORDS <= HEADER_BYTES);
/// Bytes of a ring's control block (two cache lines: no false sharing with
/// the first cell).
pub const RING_CTRL: usize = 128;
/// Bytes before a cell's argument words: sequence word + [`CellMeta`].
pub const CELL_HDR: usize = 32;

/// Bytes after every cell, so consecutive cell headers fall into
/// different L1 cache sets even when the cell size is a multiple of 4 KiB:
/// unused in a ring; the end of the cell's payload in the shared queue
/// (`Cells::padded`).
pub const CELL_PAD: usize = 64;

/// Distance between consecutive cells of a ring.
pub const fn cell_stride(cell_size: usize) -> usize {
    cell_size + CELL_PAD
}

/// Cell flag: first cell of a packet.
pub const F_FIRST: u8 = 1;
/// Cell flag: last cell of a packet.
pub const F_LAST: u8 = 2;
/// Cell flag: the payload was deposited into the segment.
pub const F_DEPOSIT: u8 = 4;
/// Cell flag: a Medium whose payload is at offset `deposit` of the
/// sender's landing zone.
pub const F_ZONE: u8 = 8;
/// Largest landing zone per sender and channel, in Medium maxima.
pub const MAX_MEDIUM_SLOTS: usize = 64;
/// Landing-zone bytes per rank's file when `SPLITRT_MEDIUM_SLOTS` is not
/// set (see [`medium_slots_for`]).
pub const ZONE_BUDGET: usize = 2 << 20;
/// Ring and landing-zone bytes a rank faults in at start-up if its rings
/// and zones are no more (2 ranks with the default sizes).
pub const EAGER_BYTES: usize = 5 << 20;
/// The page size `/dev/shm` allocates in.
const PAGE: usize = 4096;

/// The landing zone per sender and channel, in Medium maxima, when the
/// user did not choose: as much of [`ZONE_BUDGET`] as `ranks` senders x 2
/// channels share, at least 2 and at most 8. Two ranks get 8 x 64 KiB
/// each way; 8 or more ranks get 2 each. (Since Mediums stopped rotating
/// through the zone, see [`zone`](super::zone), a Medium uses at most two
/// of its sizes and a page: the rest is spare.) Small jobs'
/// zones get their pages at start-up, so the budget is start-up time too.
///
/// ```
/// use splitrt_runtime::fabric::shm::layout::medium_slots_for;
/// assert_eq!(medium_slots_for(2, 65536), 8);
/// assert_eq!(medium_slots_for(4, 65536), 4);
/// assert_eq!(medium_slots_for(16, 65536), 2);
/// assert_eq!(medium_slots_for(256, 65536), 2);
/// ```
pub fn medium_slots_for(ranks: usize, max_medium: usize) -> usize {
    let stride = max_medium.div_ceil(64) * 64;
    (ZONE_BUDGET / (2 * ranks.max(1) * stride.max(64))).clamp(2, 8)
}

/// The fixed header at the start of every rank's file.
#[repr(C)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// Owner rank.
    pub rank: u32,
    /// Senders the file's layout has rings for ([`Layout::size`]): the
    /// host's ranks with the per-pair rings, 1 in a shared-queue file.
    /// A peer's queue is recognised by it at connect (`check_peer`).
    pub size: u32,
    /// Cell size in bytes.
    pub cell_size: u32,
    /// Cells per ring.
    pub ring_len: u32,
    /// Largest Medium payload.
    pub max_medium: u32,
    /// Segment length in bytes.
    pub segment_len: u64,
    /// Set to 1 (release) once the header is complete.
    pub ready: AtomicU32,
    /// Medium landing slots per sender and channel.
    pub medium_slots: u32,
}
const_assert_eq!(size_of::<FileHeader>(), 48);

/// Everything in a cell header except the sequence word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CellMeta {
    /// Upper layer's tag.
    pub tag: u16,
    /// `F_*` flags.
    pub flags: u8,
    /// Argument words in this cell (first cell only).
    pub nwords: u8,
    /// Payload bytes in this cell.
    pub len: u32,
    /// Payload bytes of the whole packet.
    pub total: u32,
    /// Zero.
    pub pad: u32,
    /// Deposit offset (with `F_DEPOSIT`).
    pub deposit: u64,
}
const_assert_eq!(size_of::<CellMeta>() + 8, CELL_HDR);
const_assert_eq!(align_of::<CellMeta>(), 8);

impl FileHeader {
    /// A header for `rank` with layout `l`, not yet marked ready.
    pub fn new(rank: usize, l: &Layout, max_medium: usize) -> Self {
        FileHeader {
            magic: MAGIC,
            version: VERSION,
            rank: rank as u32,
            size: l.size as u32,
            cell_size: l.cell_size as u32,
            ring_len: l.ring_len as u32,
            max_medium: max_medium as u32,
            segment_len: l.segment_len as u64,
            ready: AtomicU32::new(0),
            medium_slots: l.medium_slots as u32,
        }
    }
}

/// Offsets within a rank's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Senders the file has a ring per channel for: the ranks of the host
    /// with the per-pair rings ([`Layout::new`]), 1 with the shared
    /// receive queue ([`Layout::shared`], whose two queues sit where one
    /// sender's rings would). Not the job's ranks; connect tells a peer's
    /// queue by it (a header's `size` of 1 is a shared-queue file).
    pub size: usize,
    /// Cell size.
    pub cell_size: usize,
    /// Cells per ring.
    pub ring_len: usize,
    /// Segment length.
    pub segment_len: usize,
    /// Bytes per ring (control block + cells).
    pub ring_stride: usize,
    /// Landing zone per sender and channel, in Medium maxima.
    pub medium_slots: usize,
    /// Bytes per landing slot (the Medium maximum, 64-aligned).
    pub slot_stride: usize,
    /// Offset of the first landing slot.
    pub slots_off: usize,
    /// Offset of the segment.
    pub segment_off: usize,
    /// File length.
    pub total: usize,
    /// Whether the rings are the two shared receive queues
    /// (`SPLITRT_SHM_QUEUE=shared`, [`Layout::shared`]): one queue per
    /// channel that every rank of the host writes into, no landing zones.
    pub shared_queue: bool,
}

impl Layout {
    /// Compute the layout; errors if it does not fit in memory.
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::layout::Layout;
    /// let l = Layout::new(4, 4096, 16, 1 << 20, 65536, 2).unwrap();
    /// assert_eq!(l.segment_off % 4096, 0);
    /// assert!(l.ring_off(3, 1) + l.ring_stride <= l.zone_off(0, 0));
    /// assert!(l.zone_off(3, 1) + l.zone_len() <= l.segment_off);
    /// ```
    pub fn new(
        size: usize,
        cell_size: usize,
        ring_len: usize,
        segment_len: usize,
        max_medium: usize,
        medium_slots: usize,
    ) -> Result<Self> {
        let too_big = || {
            Error::config(format!(
                "{size} ranks x 2 rings x {ring_len} cells x {cell_size} B does not fit in memory"
            ))
        };
        let ring_stride = cell_stride(cell_size)
            .checked_mul(ring_len)
            .and_then(|c| c.checked_add(RING_CTRL))
            .ok_or_else(too_big)?;
        let rings = ring_stride
            .checked_mul(2)
            .and_then(|r| r.checked_mul(size))
            .ok_or_else(too_big)?;
        let slots_off = (HEADER_BYTES + rings).div_ceil(64) * 64;
        let slot_stride = max_medium.div_ceil(64) * 64;
        let slots = slot_stride
            .checked_mul(medium_slots)
            .and_then(|s| s.checked_mul(2 * size))
            .and_then(|s| s.checked_add(slots_off))
            .ok_or_else(too_big)?;
        let segment_off = slots.div_ceil(4096) * 4096;
        let total = segment_off.checked_add(segment_len).ok_or_else(too_big)?;
        Ok(Layout {
            size,
            cell_size,
            ring_len,
            segment_len,
            ring_stride,
            medium_slots,
            slot_stride,
            slots_off,
            segment_off,
            total,
            shared_queue: false,
        })
    }

    /// The layout of a file with the shared receive queue
    /// (`SPLITRT_SHM_QUEUE=shared`): the two queues (one per channel, of
    /// `ring_len` cells, where one sender's two rings would be), no
    /// landing zones, then the segment; the same whatever the number of
    /// ranks.
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::layout::Layout;
    /// let l = Layout::shared(4096, 64, 1 << 20, 65536).unwrap();
    /// assert!(l.shared_queue && l.zone_len() == 0);
    /// assert_eq!(l.touched_at_start(), l.segment_off);
    /// ```
    pub fn shared(
        cell_size: usize,
        ring_len: usize,
        segment_len: usize,
        max_medium: usize,
    ) -> Result<Self> {
        let l = Layout::new(1, cell_size, ring_len, segment_len, max_medium, 0)?;
        Ok(Layout {
            shared_queue: true,
            ..l
        })
    }

    /// Bytes of one (sender, channel) landing zone.
    pub fn zone_len(&self) -> usize {
        self.medium_slots * self.slot_stride
    }

    /// Offset of the landing zone for `src`'s Mediums on channel `ch`.
    pub fn zone_off(&self, src: usize, ch: usize) -> usize {
        self.slots_off + (src * 2 + ch) * self.zone_len()
    }

    /// Offset of the ring carrying `src`'s packets on channel `ch` (0 or 1).
    pub fn ring_off(&self, src: usize, ch: usize) -> usize {
        HEADER_BYTES + (src * 2 + ch) * self.ring_stride
    }

    /// Whether start-up faults in the rings and landing zones a rank
    /// writes and reads (all of them, on every rank of the host): when
    /// that is cheap, at most [`EAGER_BYTES`] per rank.
    pub fn eager(&self) -> bool {
        let pairs = 2 * self.size + 2 * self.size.saturating_sub(1);
        pairs.saturating_mul(self.ring_stride + self.zone_len()) <= EAGER_BYTES
    }

    /// Bytes of a rank's file that get pages before any traffic: the
    /// header, and every ring's control block and first cell (the receiver
    /// polls them); with [`eager`](Self::eager) every ring and landing
    /// zone. The file's other pages (more ring cells, landing zones, the
    /// segment) are allocated as traffic and the program first touch them,
    /// so its length ([`total`](Self::total)) is what it can grow to, not
    /// what it takes.
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::layout::Layout;
    /// // 300 ranks with the default sizes: 291 MiB files that start
    /// // with under 5 MiB each
    /// let l = Layout::new(300, 4096, 64, 64 << 20, 65536, 2).unwrap();
    /// assert_eq!(l.total >> 20, 291);
    /// assert!(l.touched_at_start() < 5 << 20);
    /// ```
    pub fn touched_at_start(&self) -> usize {
        // (a rank faults its shared queues in whole at start-up)
        if self.eager() || self.shared_queue {
            return self.segment_off;
        }
        let pages = |off: usize, len: usize| ((off + len).div_ceil(PAGE) - off / PAGE) * PAGE;
        let head = RING_CTRL + cell_stride(self.cell_size);
        let heads: usize = (0..2 * self.size)
            .map(|r| pages(self.ring_off(r / 2, r % 2), head))
            .sum();
        // small rings share pages: never more than the rings' region
        (HEADER_BYTES + heads).min(self.slots_off.div_ceil(PAGE) * PAGE)
    }

    /// Bytes of every ring of the file (control blocks and cells).
    pub fn rings_len(&self) -> usize {
        2 * self.size * self.ring_stride
    }

    /// Bytes of every landing zone of the file.
    pub fn zones_len(&self) -> usize {
        2 * self.size * self.zone_len()
    }
}

/// What `/dev/shm` must hold for the files of the `ranks_here` ranks of a
/// host with layout `l`: without `reserve`, what they touch at start-up
/// ([`Layout::touched_at_start`]); with it, every byte of every file.
pub fn shm_needed(l: &Layout, ranks_here: usize, reserve: bool) -> u64 {
    let per_file = if reserve {
        l.total
    } else {
        l.touched_at_start()
    };
    per_file as u64 * ranks_here.max(1) as u64
}

/// How a rank's file grows, part by part, each named with the settings
/// that size it (for errors and notes about `/dev/shm`). The names are the
/// variables `config` reads (it sits above the fabrics; its tests check
/// that every one of them appears here).
pub fn shm_parts(l: &Layout, max_medium: usize) -> String {
    const ENV_SEGMENT_SIZE: &str = "SPLITRT_SEGMENT_SIZE";
    const ENV_RING_LEN: &str = "SPLITRT_RING_LEN";
    const ENV_CELL_SIZE: &str = "SPLITRT_CELL_SIZE";
    const ENV_MEDIUM_SLOTS: &str = "SPLITRT_MEDIUM_SLOTS";
    const ENV_MAX_MEDIUM: &str = "SPLITRT_MAX_MEDIUM";
    const ENV_SHM_QUEUE: &str = "SPLITRT_SHM_QUEUE";
    const FROM: usize = super::queue_choice::SHARED_QUEUE_FROM;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    if l.shared_queue {
        return format!(
            "segment {:.1} MiB ({ENV_SEGMENT_SIZE}), shared receive queues {:.1} MiB (2 \
             channels x {ENV_RING_LEN}={} cells x {ENV_CELL_SIZE}={} B: one queue per channel \
             that every rank of the node writes into, the same whatever the number of ranks; \
             {ENV_SHM_QUEUE}=shared, or auto on a node of {FROM} or more ranks; no Medium \
             landing zones)",
            mib(l.segment_len),
            mib(l.rings_len()),
            l.ring_len,
            l.cell_size,
        );
    }
    format!(
        "segment {:.1} MiB ({ENV_SEGMENT_SIZE}), rings {:.1} MiB (2 channels x {} senders x \
         {ENV_RING_LEN}={} cells x {ENV_CELL_SIZE}={} B), Medium landing zones {:.1} MiB \
         (2 channels x {} senders x {ENV_MEDIUM_SLOTS}={} x {ENV_MAX_MEDIUM}={} B; \
         {ENV_MEDIUM_SLOTS}=0 sends large Mediums through the rings instead); per-pair rings: \
         {ENV_SHM_QUEUE}=pairs, or auto on a node of fewer than {FROM} ranks \
         ({ENV_SHM_QUEUE}=shared keeps one receive queue per rank, the same whatever the \
         number of ranks)",
        mib(l.segment_len),
        mib(l.rings_len()),
        l.size,
        l.ring_len,
        l.cell_size,
        mib(l.zones_len()),
        l.size,
        l.medium_slots,
        max_medium,
    )
}

/// The error for a `/dev/shm` with `free` of `total` bytes that cannot hold
/// [`shm_needed`] for `ranks_here` ranks of layout `l`.
pub fn shm_too_small(
    l: &Layout,
    max_medium: usize,
    ranks_here: usize,
    reserve: bool,
    free: u64,
    total: u64,
) -> Error {
    const SHM: &str = "/dev/shm";
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let n = ranks_here.max(1);
    let what = if reserve {
        format!(
            "reserving every rank's whole file (SPLITRT_SHM_RESERVE=1), the {n} rank(s) of this \
             job on this node need {:.1} MiB ({:.1} MiB each)",
            mib(shm_needed(l, n, true)),
            mib(l.total as u64)
        )
    } else {
        format!(
            "the {n} rank(s) of this job on this node touch {:.1} MiB of it at start-up \
             ({:.1} MiB each: {})",
            mib(shm_needed(l, n, false)),
            mib(l.touched_at_start() as u64),
            if l.shared_queue {
                "file header and its two shared receive queues"
            } else if l.eager() {
                "file header, and with so few ranks every ring and landing zone"
            } else {
                "file header and the head of every ring"
            }
        )
    };
    Error::config(format!(
        "{SHM} is too small: {what}, and it has {:.1} MiB free of {:.1} MiB. Each rank's file \
         can grow to {:.1} MiB as it is used: {}. Enlarge {SHM} (`mount -o remount,size=<bytes> \
         {SHM}`; in a container, e.g. `--shm-size`), run fewer ranks per node, or lower those \
         settings",
        mib(free),
        mib(total),
        mib(l.total as u64),
        shm_parts(l, max_medium)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// The default sizes at 300 and 400 ranks on one host: the files'
    /// lengths add up to far more than a 24 GiB `/dev/shm` (87,427 MiB
    /// at 300, which used to be refused), what start-up touches to a
    /// small part of it.
    #[test]
    fn what_large_jobs_touch_at_start_is_a_small_part_of_their_files() {
        for (n, max_touched_mib) in [(300, 1_500), (400, 2_600)] {
            let l = Layout::new(n, 4096, 64, 64 << 20, 65536, medium_slots_for(n, 65536)).unwrap();
            let sparse = l.total as u64 * n as u64;
            assert!(sparse > 24_106 * MIB, "{n}: {}", sparse / MIB);
            let need = shm_needed(&l, n, false);
            assert!(
                need <= max_touched_mib * MIB,
                "{n} ranks: {} MiB",
                need / MIB
            );
            // header, and two or three pages per ring head
            let per = l.touched_at_start();
            assert!(per >= HEADER_BYTES + 4 * n * PAGE && per <= HEADER_BYTES + 6 * n * PAGE);
            assert_eq!(shm_needed(&l, n, true), sparse);
        }
        let l = Layout::new(300, 4096, 64, 64 << 20, 65536, 2).unwrap();
        assert_eq!((l.total as u64 * 300) / MIB, 87_426);
    }

    /// Two ranks populate every ring and landing zone at start-up; tiny
    /// rings sharing pages are never counted past their region.
    #[test]
    fn eager_and_tiny_layouts_are_counted_whole() {
        let l = Layout::new(2, 4096, 64, 64 << 20, 65536, 8).unwrap();
        assert!(l.eager());
        assert_eq!(l.touched_at_start(), l.segment_off);
        let tiny = Layout::new(64, 256, 2, 1 << 20, 512, 0).unwrap();
        assert!(tiny.touched_at_start() <= tiny.segment_off);
        assert!(tiny.touched_at_start() >= HEADER_BYTES + PAGE);
    }

    /// The error names the size free, the size touched and every setting
    /// that sizes a file, with its value.
    #[test]
    fn the_shortage_names_every_setting_that_matters() {
        let l = Layout::new(300, 4096, 64, 64 << 20, 65536, 2).unwrap();
        for reserve in [false, true] {
            let e = shm_too_small(&l, 65536, 300, reserve, 100 * MIB, 200 * MIB).to_string();
            for needle in [
                "/dev/shm is too small",
                "100.0 MiB free of 200.0 MiB",
                "SPLITRT_SEGMENT_SIZE",
                "SPLITRT_RING_LEN=64",
                "SPLITRT_CELL_SIZE=4096",
                "SPLITRT_MEDIUM_SLOTS=2",
                "SPLITRT_MAX_MEDIUM=65536",
                "SPLITRT_MEDIUM_SLOTS=0",
                "291.4 MiB",
                // how a node comes to have rings, and the way out of them
                "SPLITRT_SHM_QUEUE=pairs, or auto on a node of fewer than 16 ranks",
                "SPLITRT_SHM_QUEUE=shared keeps one receive queue per rank",
            ] {
                assert!(e.contains(needle), "{needle}: {e}");
            }
            assert_eq!(e.contains("SPLITRT_SHM_RESERVE=1"), reserve, "{e}");
        }
    }

    /// With the shared receive queue the error speaks of the two queues
    /// and the settings that size them (the same file whatever the ranks),
    /// not of rings, landing zones or `SPLITRT_MEDIUM_SLOTS`.
    #[test]
    fn the_shared_queue_shortage_names_the_queues() {
        let l = Layout::shared(4096, 64, 16 << 20, 65536).unwrap();
        assert_eq!(l.touched_at_start(), l.segment_off);
        for reserve in [false, true] {
            let e = shm_too_small(&l, 65536, 256, reserve, MIB / 2, MIB).to_string();
            for needle in [
                "/dev/shm is too small",
                "0.5 MiB free of 1.0 MiB",
                "shared receive queues 0.5 MiB",
                "SPLITRT_SEGMENT_SIZE",
                "SPLITRT_RING_LEN=64",
                "SPLITRT_CELL_SIZE=4096",
                "SPLITRT_SHM_QUEUE=shared, or auto on a node of 16 or more ranks",
            ] {
                assert!(e.contains(needle), "{needle}: {e}");
            }
            for not in ["MEDIUM_SLOTS", " ring", "landing zones 0"] {
                assert!(!e.contains(not), "{not}: {e}");
            }
        }
    }
}
