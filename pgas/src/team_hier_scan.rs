//! Hierarchical inclusive and exclusive scans (`team_hier.rs` decides
//! and sets up; this module runs them), for a team spanning hosts whose
//! host groups are runs of consecutive team ranks (`Layout::contiguous`;
//! the world team placed in blocks, as Slurm and the launchers place it;
//! otherwise the scans go flat on every member).
//!
//! They run the non-blocking hierarchical scan's schedule
//! (`team_hier_nb_scan.rs`, with tags of the blocking forms' range, so a
//! blocking scan never matches a non-blocking one) and wait for it: the
//! host-local prefix passed along each host's members in team-rank
//! order, the host totals exclusive-scanned by the hosts' last members,
//! each host's offset sent to its leader and on to its members. Every
//! message goes from a lower team rank to a higher one.
//!
//! They used to take two steps of the host group's shared-memory area
//! per call: every member published its data and waited for the whole
//! host; then the leader published the offset (after the earlier hosts'
//! totals came in) and every member waited for it again. A leader's
//! next call thus waited for its members' next calls, which waited for
//! the leader's offset: back-to-back scans ran in lock-step, host by
//! host (0.6-1.2 ms per call at the last of 6 ranks on 3 namespace hosts
//! where the flat scan, which pipelines, took 10-90 µs; now 7-96 µs,
//! see `docs/teams.md`).
//!
//! Member r's result is `offset op local`, where `offset` combines the
//! earlier hosts' totals along the doubling rounds and `local` is a left
//! fold over its host's members up to r: a fixed order, so integers give
//! the flat result and floating point may differ from the flat form's
//! (recursive doubling over all members) in the last bit.

use crate::reduce::{Op, Reduce};
use crate::team_hier::HierCall;
use crate::team_hier_nb_scan::BLOCKING_TAGS;
use crate::team_nb::TeamRequest;
use splitrt_am::Result;

impl HierCall<'_> {
    /// Prefix reduction in team-rank order: inclusive (members 0..=me)
    /// or exclusive (0..me; zeros on team rank 0).
    pub(crate) fn scan<T: Reduce>(self, inclusive: bool, data: &mut [T], op: Op) -> Result<()> {
        let call = (self.seq, self.h, self.g.clone());
        let s = self
            .team
            .scan_hier_sched(call, BLOCKING_TAGS, inclusive, data, op);
        TeamRequest::start(s, bytemuck::cast_slice_mut(data)).wait()
    }
}
