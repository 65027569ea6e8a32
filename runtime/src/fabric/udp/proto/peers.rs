//! The per-peer state of one rank's protocol, created on first contact
//! (a message sent to the peer, or an authentic datagram from it), not at
//! start: a rank of an N-rank job holds a pointer per peer plus the state
//! of the peers it talked to (docs/scale.md has the bytes).

/// One slot per rank of the job, empty until that peer is contacted.
pub(super) struct PeerTable<P> {
    slots: Vec<Option<Box<P>>>,
    /// The contacted peers, in the order they were contacted (timers walk
    /// these, not every rank of the job).
    made: Vec<u32>,
}

impl<P> PeerTable<P> {
    /// A table for `size` ranks, none contacted.
    pub fn new(size: u32) -> Self {
        PeerTable {
            slots: (0..size).map(|_| None).collect(),
            made: Vec::new(),
        }
    }

    /// Ranks of the job (contacted or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Peer `i`'s state, if contacted.
    pub fn get(&self, i: usize) -> Option<&P> {
        self.slots.get(i).and_then(|s| s.as_deref())
    }

    /// Peer `i`'s state, if contacted.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut P> {
        self.slots.get_mut(i).and_then(|s| s.as_deref_mut())
    }

    /// Peer `i`'s state, made with `make` on first contact (`i` below
    /// [`len`](Self::len)).
    pub fn get_or_make(&mut self, i: usize, make: impl FnOnce() -> P) -> &mut P {
        let s = &mut self.slots[i];
        if s.is_none() {
            self.made.push(i as u32);
        }
        s.get_or_insert_with(|| Box::new(make()))
    }

    /// Contacted peers so far.
    pub fn contacted(&self) -> usize {
        self.made.len()
    }

    /// The `k`-th contacted peer's rank (`k` below
    /// [`contacted`](Self::contacted)).
    pub fn contacted_at(&self, k: usize) -> u32 {
        self.made[k]
    }

    /// Every contacted peer: (rank, state).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &P)> + '_ {
        self.made
            .iter()
            .filter_map(|&i| Some((i, self.get(i as usize)?)))
    }
}

impl<P> std::ops::Index<usize> for PeerTable<P> {
    type Output = P;
    /// A contacted peer's state (the protocol only indexes peers it
    /// listed after contact: an absent one is a bug, not input).
    fn index(&self, i: usize) -> &P {
        self.get(i).expect("state of a contacted peer")
    }
}

impl<P> std::ops::IndexMut<usize> for PeerTable<P> {
    fn index_mut(&mut self, i: usize) -> &mut P {
        self.get_mut(i).expect("state of a contacted peer")
    }
}
