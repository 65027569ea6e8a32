//! The collective a barrier arrival belongs to (shared by the collectives,
//! the barriers that count arrivals and the context that starts them).

/// Which collective a PGAS barrier belongs to. Every arrival carries it,
/// so ranks in different collectives never match each other: rank 0, which
/// counts the arrivals, ends the job with an error naming both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coll {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    Allreduce = 4,
    AllocSym = 5,
    FreeSym = 6,
    AllStoreSync = 7,
    Finish = 8,
    Freeze = 9,
    Thaw = 10,
}

impl Coll {
    pub(crate) fn from_code(c: u64) -> Option<Coll> {
        use Coll::*;
        [
            Barrier,
            Broadcast,
            Reduce,
            Allreduce,
            AllocSym,
            FreeSym,
            AllStoreSync,
            Finish,
            Freeze,
            Thaw,
        ]
        .into_iter()
        .find(|k| *k as u64 == c)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Coll::Barrier => "Pgas::barrier",
            Coll::Broadcast => "Pgas::broadcast",
            Coll::Reduce => "Pgas::reduce",
            Coll::Allreduce => "Pgas::allreduce",
            Coll::AllocSym => "Pgas::alloc_sym",
            Coll::FreeSym => "Pgas::free_sym",
            Coll::AllStoreSync => "Pgas::all_store_sync",
            Coll::Finish => "the exit barrier of Pgas::finish",
            Coll::Freeze => "Pgas::freeze",
            Coll::Thaw => "Pgas::thaw",
        }
    }
}
