//! Hierarchical alltoallv (`team_hier.rs` decides and sets up; this
//! module runs it): for a team spanning hosts, the counts are exchanged
//! inside each host first, through the host group's shared-memory area,
//! then the leaders (each host's lowest team rank) send each other the
//! counts between their hosts and, when every host's blocks fit one
//! shared-memory step, **one combined data message per leader pair**;
//! blocks between members of one host never leave it.
//!
//! | step | what |
//! |---|---|
//! | area step 0 | every member publishes its `send_counts` and `recv_counts` (16 n B) and, if it fits the rest of the half, its send buffer; each member checks the counts of its host's members against its own (a difference is named, as the flat form names it) and, if its host fits, copies its blocks from its host's members (the leader: their whole buffers) |
//! | leaders, round 1 | leader a sends leader b whether a's host fits, then the g_a · g_b counts from a's members to b's; b checks them against its members' `recv_counts` and names a difference |
//! | leaders, round 2 | if every host fits: leader a sends leader b the blocks from a's members to b's, source-major (none when all of them are empty) |
//! | area step 1 | the leader publishes the decision (hierarchical if every host fits) and each member's blocks from other hosts |
//!
//! A host **fits** when each of its members' send buffer (with the
//! counts) and the blocks its leader hands out (every member's blocks
//! from other hosts) each fit one half of the area (32 KiB). When some
//! host does not, every member (all learn the same decision in step 1)
//! exchanges the blocks
//! by the flat pairwise messages under the same collective number, where
//! large exchanges stream. Messages across hosts per call: 2 L (L - 1)
//! at most (round 2 skips leader pairs with nothing to move), instead of
//! Σ g_a (n - g_a) flat. Nothing is combined, so results are the flat
//! form's bits for every type.

use crate::team::Team;
use crate::team_area::TEAM_HALF;
use crate::team_hier::{tag, HierCall, FANOUT_LATER};
use crate::team_hier_a2a::lead_blocks;
use bytemuck::Pod;
use splitrt_am::{Error, Result};

/// The counts of one host group's members, as published in area step 0
/// (or sent to the leader: `team_hier_nb_a2a.rs`).
pub(crate) struct GroupCounts {
    /// Member q's (group order) `send_counts`.
    pub(crate) send: Vec<Vec<usize>>,
    /// Member q's (group order) `recv_counts`.
    pub(crate) recv: Vec<Vec<usize>>,
}

/// A counts mismatch: (source team rank, destination team rank, the
/// source's send count, the destination's recv count).
pub(crate) type Mismatch = (usize, usize, usize, usize);

impl GroupCounts {
    /// Where member q's block for team rank t starts in its send buffer.
    pub(crate) fn send_at(&self, q: usize, t: usize) -> usize {
        self.send[q][..t].iter().sum()
    }

    /// Elements member q gets from the team ranks `off` (the other
    /// hosts'): its part of its leader's fan-out.
    pub(crate) fn fan_of(&self, q: usize, off: &[usize]) -> usize {
        off.iter().map(|&t| self.recv[q][t]).sum()
    }

    /// Elements member q sends to the team ranks `off`.
    pub(crate) fn fan_of_send(&self, q: usize, off: &[usize]) -> usize {
        off.iter().map(|&t| self.send[q][t]).sum()
    }

    /// Elements the leader hands out (every member's blocks from `off`),
    /// `None` if the sum overflows (counts are a peer's).
    pub(crate) fn fan_len(&self, off: &[usize]) -> Option<usize> {
        (0..self.send.len()).try_fold(0usize, |sum, q| {
            sum.checked_add(total(off.iter().map(|&t| self.recv[q][t]))?)
        })
    }

    /// Whether this host **fits** (module docs): every member's send
    /// buffer after the counts of a team of `n`, and the fan-out. Counts
    /// whose sum (or size in bytes) overflows do not fit.
    pub(crate) fn fits<T>(&self, off: &[usize], n: usize) -> bool {
        let es = std::mem::size_of::<T>();
        (0..self.send.len()).all(|q| self.send_fits::<T>(q, n))
            && self
                .fan_len(off)
                .and_then(|len| len.checked_mul(es))
                .is_some_and(|b| b <= TEAM_HALF - 8)
    }

    /// Whether member q's send buffer (as its send counts say) fits area
    /// step 0 after the counts of a team of `n` (`buf_fits`; an
    /// overflowing sum does not).
    pub(crate) fn send_fits<T>(&self, q: usize, n: usize) -> bool {
        total(self.send[q].iter().copied()).is_some_and(|len| buf_fits::<T>(len, n))
    }

    /// Bytes of member q's blocks for the team ranks `off` if its send
    /// buffer fits (`send_fits`: then it sends them to its leader, and
    /// they fit too), else `None`.
    pub(crate) fn up_len<T>(&self, q: usize, off: &[usize], n: usize) -> Option<usize> {
        let es = std::mem::size_of::<T>();
        self.send_fits::<T>(q, n)
            .then(|| self.fan_of_send(q, off) * es)
    }

    /// What member q (team ranks `group`) gets from its host's members
    /// against what they send it: the first difference.
    pub(crate) fn check_host(&self, group: &[usize], q: usize) -> Option<Mismatch> {
        let me = group[q];
        group.iter().enumerate().find_map(|(p, &t)| {
            let (sent, want) = (self.send[p][me], self.recv[q][t]);
            (sent != want).then_some((t, me, sent, want))
        })
    }

    /// Leaders, round 1: the message to the leader of the host whose
    /// members are `to`: whether this host fits, then the counts from
    /// this host's members to them (`lead_blocks` order).
    pub(crate) fn lead_counts(&self, fits: bool, to: &[usize]) -> Vec<u64> {
        let mut msg = vec![u64::from(fits)];
        let q_t = lead_blocks(self.send.len(), to.len());
        msg.extend(q_t.map(|(q, x)| self.send[q][to[x]] as u64));
        msg
    }

    /// Leaders, round 1: `msg` from the leader of the host whose members
    /// are `from`, against this host's members' (`group`) recv counts:
    /// whether that host fits, or the first difference.
    pub(crate) fn check_lead(
        &self,
        msg: &[u64],
        from: &[usize],
        group: &[usize],
    ) -> std::result::Result<bool, Mismatch> {
        for (p, (x, q)) in lead_blocks(from.len(), group.len()).enumerate() {
            let sent = msg.get(1 + p).map_or(usize::MAX, |&v| v as usize);
            let want = self.recv[q][from[x]];
            if sent != want {
                return Err((from[x], group[q], sent, want));
            }
        }
        Ok(msg.first() == Some(&1))
    }
}

/// Whether a send buffer of `len` elements of `T` fits area step 0 after
/// the counts of a team of `n` (16 n B).
pub(crate) fn buf_fits<T>(len: usize, n: usize) -> bool {
    len.saturating_mul(std::mem::size_of::<T>()) <= TEAM_HALF - 16 * n
}

/// The sum of `counts`, `None` if it overflows.
pub(crate) fn total(counts: impl IntoIterator<Item = usize>) -> Option<usize> {
    counts.into_iter().try_fold(0usize, usize::checked_add)
}

/// Prefix sums of `counts`.
pub(crate) fn offsets(counts: &[usize]) -> Vec<usize> {
    let mut at = Vec::with_capacity(counts.len());
    let mut sum = 0usize;
    for &x in counts {
        at.push(sum);
        sum = sum.saturating_add(x);
    }
    at
}

/// `v` as the u64 words the area step carries.
fn words(v: &[usize]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|&x| x as u64)
}

impl Team {
    /// A counts mismatch in alltoallv #`seq` between team ranks `src`
    /// (sending `sent` elements to `dst`) and `dst` (expecting `want`):
    /// ends the job, as the flat form's length mismatch does (the others
    /// would wait).
    pub(crate) fn a2av_mismatch(&self, seq: u64, (src, dst, sent, want): Mismatch) -> Error {
        let i = &self.pgas().inner;
        let why = format!(
            "team collective mismatch on team {:#x}, collective #{seq} (Team::alltoallv): rank {} \
             (team rank {src}) has send_counts[{dst}] = {sent} but rank {} (team rank {dst}) \
             has recv_counts[{src}] = {want} (the sender's send_counts and the receiver's \
             recv_counts disagree)",
            self.inner.id,
            self.inner.members.at(src),
            self.inner.members.at(dst),
        );
        i.ep.abort(&why);
        Error::usage(why).at_rank(i.rank)
    }
}

impl HierCall<'_> {
    /// Alltoallv (the arguments as `Team::alltoallv` checked them).
    pub(crate) fn alltoallv<T: Pod>(
        self,
        (send, send_counts): (&[T], &[usize]),
        (recv, recv_counts): (&mut [T], &[usize]),
    ) -> Result<()> {
        let g = self.g.clone();
        let lay = &g.layout;
        let n = lay.group_of.len();
        let (nl, mine, gme, ga) = (self.nl(), g.my_group(), g.gme, g.group.len());
        let me = g.group[gme];
        let es = std::mem::size_of::<T>();
        let groups: Vec<Vec<usize>> = (0..nl).map(|b| lay.members_of(b)).collect();
        let off = crate::team_hier_a2a::off_host(lay, mine);
        let ro = offsets(recv_counts);

        // area step 0: the counts, then the send buffer if it fits (every
        // reader decides alike from the counts)
        let head = 16 * n;
        let mut mine_data: Vec<u8> = words(send_counts)
            .chain(words(recv_counts))
            .flat_map(u64::to_ne_bytes)
            .collect();
        if buf_fits::<T>(send.len(), n) {
            mine_data.extend_from_slice(bytemuck::cast_slice(send));
        }
        let mut gc = GroupCounts {
            send: vec![Vec::new(); ga],
            recv: vec![Vec::new(); ga],
        };
        let mut read_counts = |q: usize, w: &[u64]| {
            gc.send[q] = w[..n].iter().map(|&x| x as usize).collect();
            gc.recv[q] = w[n..].iter().map(|&x| x as usize).collect();
        };
        let mine_counts: Vec<u64> = words(send_counts).chain(words(recv_counts)).collect();
        // the leader's view of its members' blocks for other hosts:
        // member q's send buffer
        let mut bufs: Vec<Vec<T>> = vec![Vec::new(); if gme == 0 { ga } else { 0 }];
        let step0 = self.step(0, Some(&mine_data))?;
        let mut w = vec![0u64; 2 * n];
        for q in 0..ga {
            match step0 {
                Some((a, k)) if q != gme => {
                    a.read(q, k, 0, bytemuck::cast_slice_mut(&mut w));
                    read_counts(q, &w);
                }
                _ => read_counts(q, &mine_counts),
            }
        }
        // this member's blocks from its host's members
        if let Some(m) = gc.check_host(&g.group, gme) {
            return Err(self.team.a2av_mismatch(self.seq, m));
        }
        // does this host fit: every send buffer, and the fan-out
        let fits_host = gc.fits::<T>(&off, n);
        if let Some((a, k)) = step0 {
            if fits_host {
                for (q, &t) in g.group.iter().enumerate() {
                    if q == gme {
                        continue;
                    }
                    let to = &mut recv[ro[t]..][..recv_counts[t]];
                    a.read(
                        q,
                        k,
                        head + gc.send_at(q, me) * es,
                        bytemuck::cast_slice_mut(to),
                    );
                    if gme == 0 {
                        let mut b = vec![T::zeroed(); gc.send[q].iter().sum()];
                        a.read(q, k, head, bytemuck::cast_slice_mut(&mut b));
                        bufs[q] = b;
                    }
                }
            }
            a.finish(k);
        }

        // leaders, round 1: fit flags and counts between hosts
        let mut fits_all = fits_host;
        if let Some(li) = g.leader_index() {
            for s in 1..nl {
                let b = (li + s) % nl;
                self.lsend(tag(0, 1), b, &gc.lead_counts(fits_host, &groups[b]))?;
            }
            for s in 1..nl {
                let b = (li + nl - s) % nl;
                let mut msg = vec![0u64; 1 + groups[b].len() * ga];
                self.lrecv(tag(0, 1), b, &mut msg, 0)?;
                match gc.check_lead(&msg, &groups[b], &g.group) {
                    Ok(fits) => fits_all &= fits,
                    Err(m) => return Err(self.team.a2av_mismatch(self.seq, m)),
                }
            }
        }
        let so = offsets(send_counts);
        recv[ro[me]..][..recv_counts[me]].copy_from_slice(&send[so[me]..][..send_counts[me]]);

        // leaders, round 2 (when every host fits): one message per
        // leader pair with data
        let mut fan: Vec<T> = Vec::new();
        if let (Some(li), true) = (g.leader_index(), fits_all) {
            let block = |q: usize, t: usize| -> &[T] {
                let buf = if q == 0 { send } else { &bufs[q][..] };
                &buf[gc.send_at(q, t)..][..gc.send[q][t]]
            };
            for s in 1..nl {
                let b = (li + s) % nl;
                let mut msg = Vec::new();
                for (q, x) in lead_blocks(ga, groups[b].len()) {
                    msg.extend_from_slice(block(q, groups[b][x]));
                }
                if !msg.is_empty() {
                    self.lsend(tag(0, 2), b, &msg)?;
                }
            }
            // member q's blocks from other hosts, in `off` order
            let fo = offsets(&(0..ga).map(|q| gc.fan_of(q, &off)).collect::<Vec<_>>());
            // fits_all: the fan-out's sum did not overflow
            fan = vec![T::zeroed(); gc.fan_len(&off).unwrap_or(0)];
            for s in 1..nl {
                let b = (li + nl - s) % nl;
                let len: usize = groups[b]
                    .iter()
                    .map(|&src| (0..ga).map(|q| gc.recv[q][src]).sum::<usize>())
                    .sum();
                if len == 0 {
                    continue;
                }
                let mut msg = vec![T::zeroed(); len];
                self.lrecv(tag(0, 2), b, &mut msg, 0)?;
                let mut at = 0;
                for (x, q) in lead_blocks(groups[b].len(), ga) {
                    let (src, c) = (groups[b][x], gc.recv[q][groups[b][x]]);
                    let part = &msg[at..at + c];
                    at += c;
                    if q == 0 {
                        recv[ro[src]..][..c].copy_from_slice(part);
                    } else {
                        let i = fo[q] + gc.fan_of(q, &off[..off.partition_point(|&t| t < src)]);
                        fan[i..i + c].copy_from_slice(part);
                    }
                }
            }
        }

        // area step 1: the decision, and out to the members
        let mut out = u64::from(fits_all).to_ne_bytes().to_vec();
        out.extend_from_slice(bytemuck::cast_slice(&fan[..]));
        let mut go = fits_all;
        if let Some((a, k)) = self.step(FANOUT_LATER, (gme == 0).then_some(&out[..]))? {
            if gme != 0 {
                let mut flag = [0u8; 8];
                a.read(0, k, 0, &mut flag);
                go = u64::from_ne_bytes(flag) == 1;
            }
            if go && gme != 0 {
                let mut at: usize = (0..gme).map(|q| gc.fan_of(q, &off)).sum();
                for &src in &off {
                    let to = &mut recv[ro[src]..][..recv_counts[src]];
                    a.read(0, k, 8 + at * es, bytemuck::cast_slice_mut(to));
                    at += recv_counts[src];
                }
            }
            a.finish(k);
        }
        if !go {
            return self.a2av_flat((send, send_counts), (recv, recv_counts));
        }
        Ok(())
    }

    /// The flat pairwise exchange under this call's number (some host
    /// did not fit one step; every member decided alike).
    fn a2av_flat<T: Pod>(
        &self,
        (send, send_counts): (&[T], &[usize]),
        (recv, recv_counts): (&mut [T], &[usize]),
    ) -> Result<()> {
        let n = self.g.layout.group_of.len();
        let me = self.g.group[self.g.gme];
        let (so, ro) = (offsets(send_counts), offsets(recv_counts));
        for s in 1..n {
            let j = (me + s) % n;
            let b = &send[so[j]..][..send_counts[j]];
            self.team
                .send(self.seq, 0, &self.h, j, bytemuck::cast_slice(b))?;
        }
        recv[ro[me]..][..recv_counts[me]].copy_from_slice(&send[so[me]..][..send_counts[me]]);
        for s in 1..n {
            let j = (me + n - s) % n;
            let out = &mut recv[ro[j]..][..recv_counts[j]];
            self.team
                .recv(self.seq, 0, &self.h, j, bytemuck::cast_slice_mut(out), 0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from a peer (shared memory, or a member's message to its
    /// leader) whose sums overflow do not fit, rather than panicking or
    /// wrapping to a small size.
    #[test]
    fn a2afix_overflowing_counts_do_not_fit() {
        let n = 3;
        let zero = vec![0usize; n];
        // a member's send counts add up past usize::MAX
        let gc = GroupCounts {
            send: vec![zero.clone(), vec![usize::MAX, 2, 0]],
            recv: vec![zero.clone(), zero.clone()],
        };
        assert!(!gc.fits::<u64>(&[2], n));
        // the fan-out (blocks from other hosts) adds up past usize::MAX
        let gc = GroupCounts {
            send: vec![zero.clone(), zero.clone()],
            recv: vec![vec![0, 0, usize::MAX], vec![0, 0, 2]],
        };
        assert!(!gc.fits::<u64>(&[2], n));
        // one member's fan-out fits usize but not in bytes
        let gc = GroupCounts {
            send: vec![zero.clone(), zero.clone()],
            recv: vec![vec![0, 0, usize::MAX / 4], zero],
        };
        assert!(!gc.fits::<u64>(&[2], n));
    }

    /// The leader makes room for a member's blocks for other hosts only
    /// if that member's send buffer fits a step (so at most a step's
    /// bytes), whatever counts the member reported.
    #[test]
    fn a2afix_up_len_only_for_a_buffer_that_fits() {
        let n = 3;
        let zero = vec![0usize; n];
        let gc = GroupCounts {
            send: vec![
                vec![1, 2, 3],
                vec![usize::MAX, 2, 0],
                vec![0, 0, usize::MAX / 4],
                vec![0, 1, TEAM_HALF],
            ],
            recv: vec![zero; 4],
        };
        assert_eq!(gc.up_len::<u64>(0, &[2], n), Some(24));
        assert_eq!(gc.up_len::<u64>(1, &[0, 1], n), None);
        assert_eq!(gc.up_len::<u64>(2, &[2], n), None);
        assert_eq!(gc.up_len::<u8>(3, &[2], n), None);
    }
}
