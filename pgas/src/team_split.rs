//! Splitting a team: a collective over the parent team in which every
//! member passes its arguments to every other (an allgather of four
//! words, n - 1 messages per member), checks that the arguments that must
//! agree do, and builds the new team's member list. Every member of the
//! parent gets a [`Team`]; ranks left out get a non-member handle.
//!
//! The new team's id (which tags its messages) derives from the parent's
//! id, the parent's split count and the color, the same on every member.

use crate::team::{Team, TeamInner};
use crate::team_core::Members;
use crate::team_mail::{CollKind, TeamCounters};
use splitrt_am::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Which split a member called (the first word it exchanges).
const STRIDED: u64 = 1;
const TWO_D: u64 = 2;
const COLOR: u64 = 3;

fn split_name(k: u64) -> &'static str {
    match k {
        STRIDED => "Team::split_strided",
        TWO_D => "Team::split_2d",
        COLOR => "Team::split",
        _ => "an unknown split",
    }
}

/// splitmix64's finaliser: ids of sibling and nested teams spread over
/// 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Team {
    /// Exchange split arguments `rec` ([kind, a, b, c]) with every member;
    /// every member's, in team order. Members that called another split,
    /// or (`agree`) passed other arguments, are an error naming them, the
    /// same on every member.
    fn split_exchange(&self, rec: [u64; 4], agree: bool) -> Result<Vec<[u64; 4]>> {
        let what = split_name(rec[0]);
        let me = self.member(what)?;
        let n = self.size();
        let mut all = vec![0u64; 4 * n];
        self.allgather_as(CollKind::Split, &rec, &mut all)?;
        let recs: Vec<[u64; 4]> = all
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect();
        let show = |r: &[u64; 4]| match r[0] {
            STRIDED => format!(
                "{}(start {}, stride {}, size {})",
                split_name(r[0]),
                r[1],
                r[2],
                r[3]
            ),
            TWO_D => format!("{}(xrange {})", split_name(r[0]), r[1]),
            _ => split_name(r[0]).to_string(),
        };
        let first = recs[0];
        if let Some(j) = (0..n).find(|&j| recs[j][0] != first[0] || (agree && recs[j] != first)) {
            return Err(Error::usage(format!(
                "team split arguments disagree on team {:#x}: team rank 0 (rank {}) called {} \
                 while team rank {j} (rank {}) called {} (every member must call the same \
                 split{})",
                self.inner.id,
                self.inner.members.at(0),
                show(&first),
                self.inner.members.at(j),
                show(&recs[j]),
                if agree {
                    " with the same arguments"
                } else {
                    ""
                }
            ))
            .at_rank(self.inner.members.at(me)));
        }
        Ok(recs)
    }

    /// A new team of parent ranks `ranks` (team order), with id from
    /// `color`.
    fn child(&self, split_no: u64, color: u64, ranks: Vec<usize>) -> Team {
        let members: Vec<usize> = ranks.iter().map(|&r| self.inner.members.at(r)).collect();
        let world = self.pgas().rank();
        let me = members.iter().position(|&w| w == world);
        let id = mix(mix(self.inner.id ^ mix(split_no)) ^ color) | 2;
        Team {
            inner: Arc::new(TeamInner {
                id,
                members: Members::List(members),
                me,
                counters: Arc::new(TeamCounters::default()),
                pgas_names: false,
            }),
            pg: self.pgas().clone(),
        }
    }

    fn split_error(&self, what: &str, why: String) -> Error {
        Error::usage(format!("{what}: {why}")).at_rank(self.pgas().rank())
    }

    /// OpenSHMEM `team_split_strided`: a collective over this team; the new
    /// team's members are this team's ranks `start`, `start + stride`, ...
    /// (`size` of them), in that order. Every member passes the same
    /// arguments (else an error naming who passed what, on every member).
    /// Ranks left out get a handle whose [`is_member`](Team::is_member) is
    /// false.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// let world = pg.world();
    /// let n = world.size();
    /// let evens = world.split_strided(0, 2, n.div_ceil(2))?;
    /// if evens.is_member() {
    ///     evens.barrier()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn split_strided(&self, start: usize, stride: usize, size: usize) -> Result<Team> {
        let what = split_name(STRIDED);
        self.split_exchange([STRIDED, start as u64, stride as u64, size as u64], true)?;
        let split_no = self.inner.counters.splits.fetch_add(1, Ordering::Relaxed);
        let n = self.size();
        let last = size
            .checked_sub(1)
            .and_then(|s| s.checked_mul(stride))
            .and_then(|x| x.checked_add(start));
        match last {
            None => return Err(self.split_error(what, "size 0: a team has a member".into())),
            Some(_) if stride == 0 && size > 1 => {
                return Err(self.split_error(what, "stride 0 with size > 1".into()))
            }
            Some(l) if l >= n || start >= n => {
                return Err(self.split_error(
                    what,
                    format!(
                        "start {start}, stride {stride}, size {size} reach past the team of {n}"
                    ),
                ))
            }
            Some(_) => {}
        }
        let ranks = (0..size).map(|i| start + i * stride).collect();
        Ok(self.child(split_no, 0, ranks))
    }

    /// OpenSHMEM `team_split_2d`: a collective over this team, seen as a
    /// grid of rows of `xrange` members (the last row may be short;
    /// `xrange` past the team size is the team size). Returns this
    /// member's (row team, column team): the row team holds the members
    /// with the same `rank / xrange`, the column team those with the same
    /// `rank % xrange`, each in team order. Every member passes the same
    /// `xrange`.
    pub fn split_2d(&self, xrange: usize) -> Result<(Team, Team)> {
        let what = split_name(TWO_D);
        self.split_exchange([TWO_D, xrange as u64, 0, 0], true)?;
        let split_no = self.inner.counters.splits.fetch_add(1, Ordering::Relaxed);
        if xrange == 0 {
            return Err(self.split_error(what, "xrange 0".into()));
        }
        let n = self.size();
        let xr = xrange.min(n);
        let me = self.member(what)?;
        let (row, col) = (me / xr, me % xr);
        let rows = (row * xr..((row + 1) * xr).min(n)).collect();
        let cols = (col..n).step_by(xr).collect();
        Ok((
            self.child(split_no, row as u64, rows),
            self.child(split_no, 1 << 32 | col as u64, cols),
        ))
    }

    /// `MPI_Comm_split` / `gex_TM_Split`: a collective over this team;
    /// members passing the same `color` form a new team, ordered by `key`
    /// (ties by their rank in this team). `None`: this rank joins no team
    /// (it gets a non-member handle of size 0). Every member must call
    /// `split` (not another split or collective) at this point.
    pub fn split(&self, color: Option<u32>, key: u64) -> Result<Team> {
        let c = color.map_or(0, |c| u64::from(c) + 1);
        let recs = self.split_exchange([COLOR, c, key, 0], false)?;
        let split_no = self.inner.counters.splits.fetch_add(1, Ordering::Relaxed);
        if c == 0 {
            return Ok(Team {
                inner: Arc::new(TeamInner {
                    id: 0,
                    members: Members::List(Vec::new()),
                    me: None,
                    counters: Arc::new(TeamCounters::default()),
                    pgas_names: false,
                }),
                pg: self.pgas().clone(),
            });
        }
        let mut ranks: Vec<usize> = (0..recs.len()).filter(|&j| recs[j][1] == c).collect();
        ranks.sort_by_key(|&j| (recs[j][2], j));
        Ok(self.child(split_no, c, ranks))
    }
}
