//! Which receive queue the ranks of a host use (`SPLITRT_SHM_QUEUE`):
//! the per-pair rings (`pairs`, a ring per sender and channel in every
//! rank's file), the shared receive queue (`shared`, one queue per rank
//! and channel that every sender of the host writes into, see
//! `fabric/shm/mpq.rs`), or `auto`, the default: the rings below
//! [`SHARED_QUEUE_FROM`] ranks on the host, the shared queue from there
//! up. The choice is a function of the setting and of the number of
//! ranks the shared-memory fabric connects on the host, which every rank
//! of the host sees alike (the bootstrap's list of the host's ranks), so
//! the ranks of a host agree without a word exchanged; a rank that was
//! given another setting is refused when it connects (its file's layout
//! differs, `check_peer` in the parent module).

/// The number of ranks on a host from which `SPLITRT_SHM_QUEUE=auto` (the
/// default) chooses the shared receive queue; below it the per-pair
/// rings. Why 16 (docs/scale.md, "Shared memory in O(k)" and "Session
/// 15: auto", release builds on this 2-core machine):
///
/// * Below it the rings are faster per message (2 ranks: the shared
///   queue's AM Short rows are 1.05-1.14x the rings', its flood round trip
///   1.4-1.5x) and what they take is small whatever the traffic: after
///   one Short to every rank, 0.18 MiB of `/dev/shm` a rank at 16 ranks
///   against the queue's 0.52 (its queues are populated at start); under
///   NPB IS class S (all-to-all) the rings take more than the queue from
///   about 8 ranks on (8: 3.0-6.4 MiB for the host against 4.2-4.6; 15:
///   18.9-21.8 MiB against 8.0-8.4), but tens of MiB at most.
/// * From there up the rings' growth with the square of the host's ranks
///   dominates: a rank's file holds up to 776 KiB of rings and landing
///   zones per sender (the queue: 528 KiB whatever the ranks), so NPB IS
///   class S peaks at 22.2-24.5 MiB of `/dev/shm` with the rings against
///   8.9 MiB at 16 ranks, and 388 MiB against 36.75 MiB at 64.
pub const SHARED_QUEUE_FROM: usize = 16;

/// The `SPLITRT_SHM_QUEUE` setting: a receive queue forced, or chosen
/// per host ([`ShmQueue::choose`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShmQueue {
    /// `auto` (the default): [`QueueKind::Pairs`] below
    /// [`SHARED_QUEUE_FROM`] ranks on the host, else
    /// [`QueueKind::Shared`].
    #[default]
    Auto,
    /// `pairs`: always the per-pair rings.
    Pairs,
    /// `shared`: always the shared receive queue.
    Shared,
}

/// The receive queue a host's ranks use, as chosen by [`ShmQueue::choose`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// A ring per sender and channel in every rank's file (memory grows
    /// with the square of the host's ranks).
    Pairs,
    /// One queue per rank and channel shared by every sender of the host,
    /// no landing zones (the file is the same whatever the ranks).
    Shared,
}

impl ShmQueue {
    /// The setting named `s` (`auto`, `pairs` or `shared`, surrounding
    /// blanks ignored); `None` for anything else.
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::queue_choice::ShmQueue;
    /// assert_eq!(ShmQueue::parse(" auto "), Some(ShmQueue::Auto));
    /// assert_eq!(ShmQueue::parse("mpsc"), None);
    /// ```
    pub fn parse(s: &str) -> Option<ShmQueue> {
        match s.trim() {
            "auto" => Some(ShmQueue::Auto),
            "pairs" => Some(ShmQueue::Pairs),
            "shared" => Some(ShmQueue::Shared),
            _ => None,
        }
    }

    /// The setting's value as `SPLITRT_SHM_QUEUE` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ShmQueue::Auto => "auto",
            ShmQueue::Pairs => "pairs",
            ShmQueue::Shared => "shared",
        }
    }

    /// The receive queue of a host with `ranks_here` ranks (those the
    /// shared-memory fabric connects there, this one among them).
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::queue_choice::{QueueKind, ShmQueue, SHARED_QUEUE_FROM};
    /// assert_eq!(ShmQueue::Auto.choose(SHARED_QUEUE_FROM - 1), QueueKind::Pairs);
    /// assert_eq!(ShmQueue::Auto.choose(SHARED_QUEUE_FROM), QueueKind::Shared);
    /// assert_eq!(ShmQueue::Pairs.choose(256), QueueKind::Pairs);
    /// ```
    pub fn choose(self, ranks_here: usize) -> QueueKind {
        match self {
            ShmQueue::Pairs => QueueKind::Pairs,
            ShmQueue::Shared => QueueKind::Shared,
            ShmQueue::Auto if ranks_here >= SHARED_QUEUE_FROM => QueueKind::Shared,
            ShmQueue::Auto => QueueKind::Pairs,
        }
    }

    /// Why a host of `ranks_here` ranks uses the queue it does, in the
    /// words of the setting (for errors and notes).
    ///
    /// ```
    /// use splitrt_runtime::fabric::shm::queue_choice::ShmQueue;
    /// assert_eq!(ShmQueue::Shared.why(4), "SPLITRT_SHM_QUEUE=shared");
    /// assert_eq!(
    ///     ShmQueue::Auto.why(16),
    ///     "SPLITRT_SHM_QUEUE=auto (the default) with 16 rank(s) on this node: \
    ///      shared (shared from 16 ranks on a node, pairs below)"
    /// );
    /// ```
    pub fn why(self, ranks_here: usize) -> String {
        match self {
            ShmQueue::Auto => format!(
                "SPLITRT_SHM_QUEUE=auto (the default) with {ranks_here} rank(s) on this node: \
                 {} ({} from {SHARED_QUEUE_FROM} ranks on a node, {} below)",
                self.choose(ranks_here).name(),
                QueueKind::Shared.name(),
                QueueKind::Pairs.name()
            ),
            forced => format!("SPLITRT_SHM_QUEUE={}", forced.name()),
        }
    }
}

/// The note a host's first rank prints at start (to stderr, once per
/// host) when `SPLITRT_MEDIUM_SLOTS` was set (`medium_slots_set`) but the
/// host's ranks use the shared receive queue, which has no landing zones
/// to size: the setting is ignored there, and `SPLITRT_RING_LEN` is the
/// queue's length. `None` when the setting is used (the per-pair rings)
/// or was not given. `queue` and `ranks_here` say why the queue was
/// chosen ([`ShmQueue::why`]).
///
/// ```
/// use splitrt_runtime::fabric::shm::queue_choice::{ignored_slots_note, ShmQueue};
/// assert!(ignored_slots_note(ShmQueue::Auto, 16, true).is_some());
/// assert!(ignored_slots_note(ShmQueue::Auto, 15, true).is_none());
/// assert!(ignored_slots_note(ShmQueue::Shared, 2, false).is_none());
/// ```
pub fn ignored_slots_note(
    queue: ShmQueue,
    ranks_here: usize,
    medium_slots_set: bool,
) -> Option<String> {
    if !medium_slots_set || queue.choose(ranks_here) != QueueKind::Shared {
        return None;
    }
    Some(format!(
        "splitrt: note: SPLITRT_MEDIUM_SLOTS is ignored: the ranks of this node use {} ({}), \
         which has no Medium landing zones (Mediums larger than a cell stream through it), \
         and SPLITRT_RING_LEN is that queue's length; SPLITRT_SHM_QUEUE=pairs uses the \
         per-pair rings and their landing zones instead.",
        QueueKind::Shared.described(),
        queue.why(ranks_here),
    ))
}

impl QueueKind {
    /// Its `SPLITRT_SHM_QUEUE` value.
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Pairs => "pairs",
            QueueKind::Shared => "shared",
        }
    }

    /// What it is, in words for errors.
    pub fn described(self) -> &'static str {
        match self {
            QueueKind::Pairs => "the per-pair rings",
            QueueKind::Shared => "the shared receive queue",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` flips at the threshold and nowhere else; the forced
    /// settings ignore the ranks.
    #[test]
    fn auto_chooses_pairs_below_16_ranks_and_shared_from_16() {
        assert_eq!(SHARED_QUEUE_FROM, 16);
        assert_eq!(ShmQueue::Auto.choose(15), QueueKind::Pairs);
        assert_eq!(ShmQueue::Auto.choose(16), QueueKind::Shared);
        for n in 0..SHARED_QUEUE_FROM {
            assert_eq!(ShmQueue::Auto.choose(n), QueueKind::Pairs, "{n}");
        }
        for n in [16, 17, 64, 256, 4096] {
            assert_eq!(ShmQueue::Auto.choose(n), QueueKind::Shared, "{n}");
        }
        for n in [1, 2, 15, 16, 256] {
            assert_eq!(ShmQueue::Pairs.choose(n), QueueKind::Pairs, "{n}");
            assert_eq!(ShmQueue::Shared.choose(n), QueueKind::Shared, "{n}");
        }
        assert_eq!(ShmQueue::default(), ShmQueue::Auto);
    }

    #[test]
    fn settings_parse_and_name_themselves() {
        for q in [ShmQueue::Auto, ShmQueue::Pairs, ShmQueue::Shared] {
            assert_eq!(ShmQueue::parse(q.name()), Some(q));
        }
        for bad in ["", "Auto", "pair", "shared,pairs", "1"] {
            assert_eq!(ShmQueue::parse(bad), None, "{bad:?}");
        }
        let w = ShmQueue::Auto.why(16);
        assert!(
            w.contains("SPLITRT_SHM_QUEUE=auto")
                && w.contains("16 rank(s)")
                && w.contains("shared"),
            "{w}"
        );
        assert_eq!(ShmQueue::Pairs.why(64), "SPLITRT_SHM_QUEUE=pairs");
    }

    /// The start note about an ignored `SPLITRT_MEDIUM_SLOTS` (review of
    /// `auto`: on 16+ ranks the setting was dropped without a word):
    /// given exactly when the setting was set and the shared queue
    /// chosen, forced or by `auto`, and it names the setting, why the
    /// queue was chosen and the way back to the landing zones.
    #[test]
    fn an_ignored_medium_slots_setting_is_noted_only_with_the_shared_queue() {
        for (q, n, set) in [
            (ShmQueue::Auto, SHARED_QUEUE_FROM, true),
            (ShmQueue::Auto, 256, true),
            (ShmQueue::Shared, 2, true),
        ] {
            let note = ignored_slots_note(q, n, set).unwrap_or_else(|| panic!("{q:?} {n}"));
            assert!(note.starts_with("splitrt: note: SPLITRT_MEDIUM_SLOTS is ignored"));
            assert!(note.contains(&q.why(n)), "{note}");
            assert!(
                note.contains("SPLITRT_RING_LEN is that queue's length"),
                "{note}"
            );
            assert!(note.contains("SPLITRT_SHM_QUEUE=pairs"), "{note}");
        }
        for (q, n, set) in [
            (ShmQueue::Auto, SHARED_QUEUE_FROM, false),
            (ShmQueue::Shared, 64, false),
            (ShmQueue::Auto, SHARED_QUEUE_FROM - 1, true),
            (ShmQueue::Pairs, 256, true),
        ] {
            assert_eq!(ignored_slots_note(q, n, set), None, "{q:?} {n} {set}");
        }
    }
}
