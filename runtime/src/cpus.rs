//! The CPUs a rank may run on, and whether a host's ranks outnumber them.
//!
//! A rank that waits should spin only when it has a CPU of its own:
//! otherwise spinning steals the CPU from the rank it waits for. A launcher
//! that binds ranks (`srun --cpu-bind=cores`, `mpirun --bind-to core`, or
//! `taskset`) gives each rank a one-CPU affinity mask, so a rank's own mask
//! says nothing about its neighbours: two ranks bound to CPUs 0 and 1 are
//! not oversubscribed, eight ranks bound to the same two CPUs are. What
//! decides is the masks of all the ranks sharing the host, which every
//! rank publishes in its shared-memory file header ([`CpuSet::words`]).

/// 64-bit words in a [`CpuSet`]: 1024 CPUs, glibc's `cpu_set_t`.
pub const CPU_WORDS: usize = 16;

/// A set of CPU numbers below `64 * CPU_WORDS`.
///
/// ```
/// use splitrt_runtime::cpus::CpuSet;
/// let a = CpuSet::from_words([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
/// let b = CpuSet::from_words([2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
/// assert_eq!(a.union(&b).count(), 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSet {
    words: [u64; CPU_WORDS],
}

impl CpuSet {
    /// The CPUs this process may run on (its affinity mask), or `None` if
    /// the kernel does not say.
    pub fn of_this_process() -> Option<CpuSet> {
        // SAFETY: cpu_set_t is plain bits; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: sched_getaffinity(2) writes at most the size we pass,
        // size_of::<cpu_set_t>() bytes, into `set`, which we own.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return None;
        }
        let mut s = CpuSet::default();
        for cpu in 0..64 * CPU_WORDS {
            // SAFETY: cpu < CPU_SETSIZE (1024), the bits of `set`.
            if unsafe { libc::CPU_ISSET(cpu, &set) } {
                s.words[cpu / 64] |= 1 << (cpu % 64);
            }
        }
        (s.count() > 0).then_some(s)
    }

    /// A set from its words (bit `c % 64` of word `c / 64` is CPU `c`).
    pub fn from_words(words: [u64; CPU_WORDS]) -> CpuSet {
        CpuSet { words }
    }

    /// The words of the set, as published in a shared-memory file header.
    pub fn words(&self) -> [u64; CPU_WORDS] {
        self.words
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut words = self.words;
        for (w, o) in words.iter_mut().zip(other.words) {
            *w |= o;
        }
        CpuSet { words }
    }

    /// Number of CPUs in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether every CPU of this set is in `other`.
    pub fn is_subset_of(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(other.words).all(|(w, o)| w & !o == 0)
    }
}

/// Whether `ranks` ranks on one host outnumber the CPUs they may run on.
///
/// `masks`, when every rank on the host published one: the host is
/// oversubscribed if the ranks outnumber the union of the masks, or if
/// some rank's mask holds more ranks' whole masks than it has CPUs (two
/// ranks bound to CPU 0 beside an unbound one on 8 CPUs take turns on
/// CPU 0). Without them, the CPUs this process may use stand in (which
/// counts ranks bound one per CPU as oversubscribed). `available` is what
/// the standard library reports for this process, which also honours a
/// cgroup CPU quota: when it is below this process' own mask, the quota
/// caps the host's CPUs too.
///
/// ```
/// use splitrt_runtime::cpus::{oversubscribed, CpuSet};
/// let one = |c: usize| {
///     let mut w = [0u64; 16];
///     w[c / 64] |= 1 << (c % 64);
///     CpuSet::from_words(w)
/// };
/// // two ranks bound to CPUs 0 and 1: not oversubscribed
/// assert!(!oversubscribed(2, Some(&[one(0), one(1)]), Some(one(0)), 1));
/// // eight ranks bound to the same two CPUs: oversubscribed
/// let both = one(0).union(&one(1));
/// assert!(oversubscribed(8, Some(&[both; 8]), Some(both), 2));
/// // two ranks bound to CPU 0 beside one free to use CPUs 0..8
/// let all = (1..8).fold(one(0), |s, c| s.union(&one(c)));
/// assert!(oversubscribed(3, Some(&[one(0), one(0), all]), Some(one(0)), 1));
/// // nothing published: this process' CPUs stand in
/// assert!(oversubscribed(2, None, Some(one(0)), 1));
/// ```
pub fn oversubscribed(
    ranks: usize,
    masks: Option<&[CpuSet]>,
    mine: Option<CpuSet>,
    available: usize,
) -> bool {
    let Some(masks) = masks.filter(|m| !m.is_empty()) else {
        return ranks > available;
    };
    let host = masks.iter().fold(CpuSet::default(), |a, m| a.union(m));
    let cpus = match mine {
        // a quota below this process' own mask caps the host's CPUs too
        Some(mine) if available < mine.count() => host.count().min(available),
        _ => host.count(),
    };
    ranks > cpus
        || masks
            .iter()
            .any(|m| masks.iter().filter(|n| n.is_subset_of(m)).count() > m.count())
}

/// [`oversubscribed`] for this process: its mask and the standard
/// library's count of the CPUs it may use.
pub fn oversubscribed_here(ranks: usize, masks: Option<&[CpuSet]>) -> bool {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    oversubscribed(ranks, masks, CpuSet::of_this_process(), available)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_somewhere() {
        let s = CpuSet::of_this_process().expect("Linux reports an affinity mask");
        assert!(s.count() >= 1);
        // the standard library's count is the mask capped by a quota
        let available = std::thread::available_parallelism().unwrap().get();
        assert!(available <= s.count(), "{available} > {}", s.count());
    }

    #[test]
    fn a_quota_below_the_mask_caps_the_host() {
        let all = CpuSet::from_words([0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        // 8 CPUs in every mask, a quota of 2 CPUs: 4 ranks are too many
        assert!(oversubscribed(4, Some(&[all; 4]), Some(all), 2));
        assert!(!oversubscribed(4, Some(&[all; 4]), Some(all), 8));
    }
}
