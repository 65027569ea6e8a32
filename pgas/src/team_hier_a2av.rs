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

use crate::team_area::TEAM_HALF;
use crate::team_hier::{tag, HierCall, FANOUT_LATER};
use bytemuck::Pod;
use splitrt_am::{Error, Result};

/// The counts of one host group's members, as published in area step 0.
struct GroupCounts {
    /// Member q's (group order) `send_counts`.
    send: Vec<Vec<usize>>,
    /// Member q's (group order) `recv_counts`.
    recv: Vec<Vec<usize>>,
}

impl GroupCounts {
    /// Where member q's block for team rank t starts in its send buffer.
    fn send_at(&self, q: usize, t: usize) -> usize {
        self.send[q][..t].iter().sum()
    }
}

/// Prefix sums of `counts`.
fn offsets(counts: &[usize]) -> Vec<usize> {
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

impl HierCall<'_> {
    /// A counts mismatch between team ranks `src` (sending `sent`
    /// elements to `dst`) and `dst` (expecting `want`): ends the job, as
    /// the flat form's length mismatch does (the others would wait).
    fn a2av_mismatch(&self, src: usize, dst: usize, sent: usize, want: usize) -> Error {
        let i = &self.team.pgas().inner;
        let why = format!(
            "team collective mismatch on team {:#x}, collective #{} (Team::alltoallv): rank {} \
             (team rank {src}) has send_counts[{dst}] = {sent} but rank {} (team rank {dst}) \
             has recv_counts[{src}] = {want} (the sender's send_counts and the receiver's \
             recv_counts disagree)",
            self.team.inner.id,
            self.seq,
            self.team.inner.members.at(src),
            self.team.inner.members.at(dst),
        );
        i.ep.abort(&why);
        Error::usage(why).at_rank(i.rank)
    }

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
        let buf_fits = |len: usize| len.saturating_mul(es) <= TEAM_HALF - head;
        let mut mine_data: Vec<u8> = words(send_counts)
            .chain(words(recv_counts))
            .flat_map(u64::to_ne_bytes)
            .collect();
        if buf_fits(send.len()) {
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
        for (q, &t) in g.group.iter().enumerate() {
            if gc.send[q][me] != recv_counts[t] {
                return Err(self.a2av_mismatch(t, me, gc.send[q][me], recv_counts[t]));
            }
        }
        // does this host fit: every send buffer, and the fan-out
        let fan_len: usize = (0..ga)
            .map(|q| off.iter().map(|&t| gc.recv[q][t]).sum::<usize>())
            .sum();
        let fits_host = (0..ga).all(|q| buf_fits(gc.send[q].iter().sum()))
            && fan_len.saturating_mul(es) <= TEAM_HALF - 8;
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
                let mut msg = vec![u64::from(fits_host)];
                for q in 0..ga {
                    msg.extend(groups[b].iter().map(|&t| gc.send[q][t] as u64));
                }
                self.lsend(tag(0, 1), b, &msg)?;
            }
            for s in 1..nl {
                let b = (li + nl - s) % nl;
                let mut msg = vec![0u64; 1 + groups[b].len() * ga];
                self.lrecv(tag(0, 1), b, &mut msg, 0)?;
                fits_all &= msg[0] == 1;
                for (x, &src) in groups[b].iter().enumerate() {
                    for (q, &t) in g.group.iter().enumerate() {
                        let sent = msg[1 + x * ga + q] as usize;
                        if sent != gc.recv[q][src] {
                            return Err(self.a2av_mismatch(src, t, sent, gc.recv[q][src]));
                        }
                    }
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
                for q in 0..ga {
                    for &t in &groups[b] {
                        msg.extend_from_slice(block(q, t));
                    }
                }
                if !msg.is_empty() {
                    self.lsend(tag(0, 2), b, &msg)?;
                }
            }
            // member q's blocks from other hosts, in `off` order
            let fo: Vec<usize> = offsets(
                &(0..ga)
                    .map(|q| off.iter().map(|&t| gc.recv[q][t]).sum())
                    .collect::<Vec<usize>>(),
            );
            fan = vec![T::zeroed(); fan_len];
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
                for &src in &groups[b] {
                    for (q, &fq) in fo.iter().enumerate() {
                        let c = gc.recv[q][src];
                        let part = &msg[at..at + c];
                        at += c;
                        if q == 0 {
                            recv[ro[src]..][..c].copy_from_slice(part);
                        } else {
                            let i = fq
                                + off
                                    .iter()
                                    .take_while(|&&t| t < src)
                                    .map(|&t| gc.recv[q][t])
                                    .sum::<usize>();
                            fan[i..i + c].copy_from_slice(part);
                        }
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
                let mut at: usize = (0..gme)
                    .map(|q| off.iter().map(|&t| gc.recv[q][t]).sum::<usize>())
                    .sum();
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
