//! A team's shared description, without its PGAS context: its id, its
//! members, this rank's place and its collective counters. Every handle
//! of a team (a [`Team`](crate::Team)) holds one of these beside the
//! context. The world's is made once at attach and kept in the context
//! (two of them: the one `Pgas::world` hands out and the one the world
//! collectives use, whose reports name the `Pgas` call), so a world
//! collective allocates nothing for its team, and the world is described
//! by its size: no list of every rank unless someone asks for the slice
//! ([`Members::as_slice`]).

use crate::team_mail::TeamCounters;
use std::sync::{Arc, OnceLock};

/// The world team's id (split teams get ids derived from their parent's).
pub(crate) const WORLD_ID: u64 = 1;

/// A team's members: world ranks in team order.
pub(crate) enum Members {
    /// Every rank, team rank = world rank: `n` of them. `listed` is the
    /// list, made only if someone asks for it as a slice.
    World {
        n: usize,
        listed: OnceLock<Vec<usize>>,
    },
    /// A split team's members.
    List(Vec<usize>),
}

impl Members {
    /// The world of `n` ranks.
    pub(crate) fn world(n: usize) -> Members {
        Members::World {
            n,
            listed: OnceLock::new(),
        }
    }

    /// How many.
    pub(crate) fn len(&self) -> usize {
        match self {
            Members::World { n, .. } => *n,
            Members::List(l) => l.len(),
        }
    }

    /// The world rank of team rank `i`, if `i` is one.
    pub(crate) fn get(&self, i: usize) -> Option<usize> {
        match self {
            Members::World { n, .. } => (i < *n).then_some(i),
            Members::List(l) => l.get(i).copied(),
        }
    }

    /// The world rank of team rank `i` (which must be one: team ranks
    /// come from the team's own numbering).
    pub(crate) fn at(&self, i: usize) -> usize {
        match self {
            Members::World { n, .. } => {
                debug_assert!(i < *n);
                i
            }
            Members::List(l) => l[i],
        }
    }

    /// The team rank of world rank `w`, if it is a member.
    pub(crate) fn position(&self, w: usize) -> Option<usize> {
        match self {
            Members::World { n, .. } => (w < *n).then_some(w),
            Members::List(l) => l.iter().position(|&x| x == w),
        }
    }

    /// The members as a slice (the world's is listed on the first call).
    pub(crate) fn as_slice(&self) -> &[usize] {
        match self {
            Members::World { n, listed } => listed.get_or_init(|| (0..*n).collect()),
            Members::List(l) => l,
        }
    }
}

/// What every handle of a team shares (see the module docs).
pub(crate) struct TeamInner {
    pub id: u64,
    /// World ranks of the members, in team order.
    pub members: Members,
    /// This rank's team rank, if a member.
    pub me: Option<usize>,
    pub counters: Arc<TeamCounters>,
    /// Reports name the world collectives (`Pgas::allreduce`, ...): the
    /// handle they use.
    pub pgas_names: bool,
}

/// The world's two descriptions (see the module docs), made at attach:
/// `[Pgas::world's, the world collectives']`.
pub(crate) fn world_teams(
    rank: usize,
    size: usize,
    counters: &Arc<TeamCounters>,
) -> [Arc<TeamInner>; 2] {
    [false, true].map(|pgas_names| {
        Arc::new(TeamInner {
            id: WORLD_ID,
            members: Members::world(size),
            me: Some(rank),
            counters: counters.clone(),
            pgas_names,
        })
    })
}
