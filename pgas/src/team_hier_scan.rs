//! Hierarchical inclusive and exclusive scans (`team_hier.rs` decides
//! and sets up; this module runs them), for a team spanning hosts whose
//! host groups are runs of consecutive team ranks (`Layout::contiguous`;
//! the world team placed in blocks, as Slurm and the launchers place it;
//! otherwise the scans go flat on every member):
//!
//! 1. every member publishes its data in its host group's shared-memory
//!    area and combines its group's members before it (and itself, for
//!    the inclusive scan) in team-rank order; the leader (the group's
//!    lowest team rank) combines all of them: the host's total;
//! 2. the leaders exclusive-scan their hosts' totals by recursive
//!    doubling (Hillis–Steele, ≤ ⌈log2 L⌉ messages per leader);
//! 3. each leader but the first host's publishes that offset in its
//!    group's area and every member puts it on the left of its own
//!    host-local result.
//!
//! Member r's result is `offset op local`, where `offset` combines the
//! earlier hosts' totals along the leaders' doubling rounds and `local`
//! is a left fold over its host's members up to r: a fixed order, so
//! integers give the flat result and floating point may differ from the
//! flat form's (recursive doubling over all members) in the last bit.

use crate::reduce::{Op, Reduce};
use crate::team_hier::{combine, tag, HierCall, FANOUT_LATER};
use crate::team_shm::steps;
use splitrt_am::Result;

impl HierCall<'_> {
    /// Prefix reduction in team-rank order: inclusive (members 0..=me)
    /// or exclusive (0..me; zeros on team rank 0).
    pub(crate) fn scan<T: Reduce>(self, inclusive: bool, data: &mut [T], op: Op) -> Result<()> {
        let g = self.g.clone();
        let (nl, mine, gme) = (self.nl(), g.my_group(), g.gme);
        let ga = g.group.len();
        let per = (crate::team_area::TEAM_HALF / std::mem::size_of::<T>().max(1)).max(1);
        let upto = if inclusive { gme + 1 } else { gme };
        for (c, r) in steps(data.len(), per).enumerate() {
            let m = r.len();
            // this member's host-local prefix, and the leader's host total
            let mut local: Option<Vec<T>> = None;
            let mut total: Option<Vec<T>> = None;
            let mut tmp = vec![T::zeroed(); m];
            let fold = |acc: &mut Option<Vec<T>>, part: &[T]| match acc {
                None => *acc = Some(part.to_vec()),
                Some(a) => combine(op, a, part),
            };
            match self.step(0, Some(bytemuck::cast_slice(&data[r.clone()])))? {
                Some((a, k)) => {
                    let last = if gme == 0 { ga } else { upto };
                    for q in 0..last {
                        let part: &[T] = if q == gme {
                            &data[r.clone()]
                        } else {
                            a.read(q, k, 0, bytemuck::cast_slice_mut(&mut tmp));
                            &tmp
                        };
                        if q < upto {
                            fold(&mut local, part);
                        }
                        if gme == 0 {
                            fold(&mut total, part);
                        }
                    }
                    a.finish(k);
                }
                None => {
                    if inclusive {
                        local = Some(data[r.clone()].to_vec());
                    }
                    total = Some(data[r.clone()].to_vec());
                }
            }
            // the leaders: what the hosts before this one add up to
            let mut below: Option<Vec<T>> = None;
            if let (Some(li), Some(mut partial)) = (g.leader_index(), total) {
                let (mut d, mut t) = (1usize, 0u64);
                while d < nl {
                    if li + d < nl {
                        self.lsend(tag(c, 1 + t), li + d, &partial)?;
                    }
                    if li >= d {
                        self.lrecv(tag(c, 1 + t), li - d, &mut tmp, t as u32)?;
                        // what came from below goes on the left
                        if let Some(b) = &mut below {
                            let mut x = tmp.clone();
                            combine(op, &mut x, b);
                            *b = x;
                        } else {
                            below = Some(tmp.clone());
                        }
                        let mut x = tmp.clone();
                        combine(op, &mut x, &partial);
                        partial = x;
                    }
                    d <<= 1;
                    t += 1;
                }
            }
            // out to the group (the first host has no offset)
            if mine != 0 {
                let out = below.as_deref().map(bytemuck::cast_slice);
                if let Some((a, k)) = self.step(FANOUT_LATER, out)? {
                    if gme != 0 {
                        a.read(0, k, 0, bytemuck::cast_slice_mut(&mut tmp));
                        below = Some(tmp.clone());
                    }
                    a.finish(k);
                }
            }
            let result = match (below, local) {
                (Some(mut b), Some(l)) => {
                    combine(op, &mut b, &l);
                    b
                }
                (Some(b), None) => b,
                (None, Some(l)) => l,
                (None, None) => vec![T::zeroed(); m],
            };
            data[r].copy_from_slice(&result);
        }
        Ok(())
    }
}
