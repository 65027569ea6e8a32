//! Waits on several signal words with a status mask and a compare value
//! per word (OpenSHMEM 1.5 `shmem_wait_until_{all,any,some}` with their
//! `status` array, and `shmem_wait_until_{all,any,some}_vector`).
//!
//! Every form reduces to one list of entries (a word and the value it is
//! compared with), the masked-out ones dropped, waited on by one engine:
//! the rank's ordinary wait (`Inner::wait_through`: poll the endpoint,
//! spin, yield, then sleep on the doorbell; the hang report names every
//! word, its value and what it holds). As in OpenSHMEM, a list whose
//! entries are all masked out (or an empty one) is satisfied at once:
//! `_all` returns, `_any` returns `None`, `_some` returns no index.

use crate::context::{Inner, Pgas};
use crate::ptr::GlobalPtr;
use crate::signal::Signals;
use crate::signal_word::{Cmp, Looker, Registry};
use splitrt_am::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which condition a wait on several words awaits.
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    /// Every entry holds.
    All,
    /// One entry holds (the first of them is the answer).
    Any,
    /// At least one entry holds (all that do are the answer).
    Some,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Any => "any",
            Mode::Some => "some",
        }
    }
}

/// One word to wait on: its position in the caller's list, the word, the
/// value it is compared with, and (for the hang report) its address and
/// its index in its [`Signals`] array when waited on by index.
pub(crate) struct Entry<'a> {
    pos: usize,
    word: &'a AtomicU64,
    value: u64,
    ptr: GlobalPtr<u64>,
    index: Option<usize>,
    /// For an entry from a global pointer (`index` `None`): the generation
    /// of the signal array holding the word when the entry was made
    /// (`signal_word::Registry::generation`; 0, never a generation, if it
    /// was gone already).
    generation: u64,
    /// For an entry from a global pointer: the registry's removal count
    /// read before `generation` (`signal_word::Registry::removals`).
    removals: u64,
}

/// Check the lengths of a mask and of the compare values against `n`
/// words; `call` names the call for the error.
fn check_lengths(
    rank: usize,
    call: &str,
    n: usize,
    status: Option<&[bool]>,
    values: Option<&[u64]>,
) -> Result<()> {
    if let Some(s) = status.filter(|s| s.len() != n) {
        return Err(Error::usage(format!(
            "{call}: the status mask has {} entries for {n} signal words (one per word)",
            s.len()
        ))
        .at_rank(rank));
    }
    if let Some(v) = values.filter(|v| v.len() != n) {
        return Err(Error::usage(format!(
            "{call}: {} compare values for {n} signal words (one per word)",
            v.len()
        ))
        .at_rank(rank));
    }
    Ok(())
}

/// Wait until the entries satisfy `mode` under `cmp`; the positions of
/// the entries that satisfied it (all of them for `All`, the first for
/// `Any`, every one that did at that moment for `Some`).
fn wait(
    inner: &Inner,
    call: &str,
    entries: &[Entry<'_>],
    cmp: Cmp,
    mode: Mode,
) -> Result<Vec<usize>> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = None;
    let what = || describe(inner, call, entries, cmp, mode);
    inner.wait_through(&what, || {
        out = look(inner, call, entries, cmp, mode, "this wait");
        out.is_some()
    })?;
    out.unwrap_or(Ok(Vec::new()))
}

/// One look at the entries of a wait (`call`): [`satisfied`], and for
/// entries taken from global pointers first the check of
/// [`satisfied_registered`], every time, since the pointer forms borrow
/// no [`Signals`] and another thread may free the array meanwhile. A freed
/// array's word ends the wait (`waiter`: "this wait", "this future") with
/// an error naming the rank, before the freed memory is read. Shared by
/// the blocking waits and the futures (`signal_vector_async.rs`).
pub(crate) fn look(
    inner: &Inner,
    call: &str,
    entries: &[Entry<'_>],
    cmp: Cmp,
    mode: Mode,
    waiter: &str,
) -> Option<Result<Vec<usize>>> {
    if entries.iter().all(|e| e.index.is_some()) {
        // by index: the caller borrows the `Signals`, which cannot be freed
        return satisfied(entries, cmp, mode).map(Ok);
    }
    match satisfied_registered(entries, cmp, mode, &inner.st.signals) {
        Ok(hits) => hits.map(Ok),
        Err(sig) => Some(Err(inner.err(
            Error::usage(format!(
                "{call}: {sig:?} is not a signal word (its array was freed by \
                 Pgas::free_signals while {waiter} waited)"
            )),
            sig.rank(),
        ))),
    }
}

/// Whether the entries satisfy `mode` under `cmp` now: the positions of
/// the entries that satisfied it (all of them for `All`, the first for
/// `Any`, every one that did for `Some`; none for an empty list, which is
/// satisfied at once), or `None`. Shared with the futures
/// (`signal_vector_async.rs`).
pub(crate) fn satisfied(entries: &[Entry<'_>], cmp: Cmp, mode: Mode) -> Option<Vec<usize>> {
    if entries.is_empty() {
        return Some(Vec::new());
    }
    let holds = |e: &&Entry<'_>| cmp.holds(e.word.load(Ordering::Acquire), e.value);
    match mode {
        Mode::All => entries
            .iter()
            .all(|e| holds(&e))
            .then(|| entries.iter().map(|e| e.pos).collect()),
        Mode::Any => entries.iter().find(holds).map(|e| vec![e.pos]),
        Mode::Some => {
            let hits: Vec<usize> = entries.iter().filter(holds).map(|e| e.pos).collect();
            (!hits.is_empty()).then_some(hits)
        }
    }
}

/// [`satisfied`] for the pointer forms' futures, which borrow no
/// [`Signals`] (so the caller can free the array while one is pending):
/// under the signal registry's read lock, first that every entry taken
/// from a global pointer is still a word of the signal array it was made
/// from (its range registered with the generation the entry recorded: a
/// new array allocated at the freed one's offset has another), then the
/// loads, so no word is read once `Pgas::free_signals` has removed its
/// range (it does so under the write lock, before freeing the memory).
/// `Err` holds the pointer of the first entry that is no longer one.
pub(crate) fn satisfied_registered(
    entries: &[Entry<'_>],
    cmp: Cmp,
    mode: Mode,
    registry: &Registry,
) -> std::result::Result<Option<Vec<usize>>, GlobalPtr<u64>> {
    registry.with_words_since(|gen_of, removals| {
        // no range removed since the entries were made: all still hold
        // (else look each one up; up to MAX_SIGNAL_ARRAYS ranges each); an
        // entry whose array was gone when it was made (generation 0) is
        // always looked up
        let moved = entries
            .iter()
            .any(|e| e.index.is_none() && (e.removals != removals || e.generation == 0));
        match entries
            .iter()
            .find(|e| moved && e.index.is_none() && gen_of(e.ptr.offset()) != Some(e.generation))
        {
            Some(e) => Err(e.ptr),
            None => Ok(satisfied(entries, cmp, mode)),
        }
    })
}

/// What a wait awaits, for the hang report (the first 8 words).
fn describe(inner: &Inner, call: &str, entries: &[Entry<'_>], cmp: Cmp, mode: Mode) -> String {
    let (rank, registry) = (inner.rank, &inner.st.signals);
    let held: Vec<String> = entries
        .iter()
        .take(8)
        .map(|e| {
            let at = match e.index {
                Some(i) => format!("[{i}] at {:?}", e.ptr),
                None => format!("{:?}", e.ptr),
            };
            format!(
                "{at} {} {} holds {}",
                cmp.symbol(),
                e.value,
                held(e, registry)
            )
        })
        .collect();
    let more = if entries.len() > 8 { ", ..." } else { "" };
    format!(
        "in {call}({} of {} words) on rank {rank}: {}{more}",
        mode.name(),
        entries.len(),
        held.join(", ")
    )
}

impl Signals {
    /// The entries of this rank's words `which`, without the masked ones.
    pub(crate) fn entries(
        &self,
        call: &str,
        which: &[usize],
        status: Option<&[bool]>,
        values: Values<'_>,
    ) -> Result<Vec<Entry<'_>>> {
        let me = self.pg.rank();
        check_lengths(me, call, which.len(), status, values.slice())?;
        let mut out = Vec::with_capacity(which.len());
        for (k, &i) in which.iter().enumerate() {
            // checked even where masked out, as the pointer forms are
            let word = self.word(i, call)?;
            if status.is_some_and(|s| s[k]) {
                continue;
            }
            out.push(Entry {
                pos: k,
                word,
                value: values.at(k),
                ptr: self.at(me, i),
                index: Some(i),
                generation: 0,
                removals: 0,
            });
        }
        Ok(out)
    }

    fn wait_set(
        &self,
        call: &str,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: Values<'_>,
        mode: Mode,
    ) -> Result<Vec<usize>> {
        let entries = self.entries(call, which, status, values)?;
        // positions in `which` (as OpenSHMEM returns them): they index
        // `status`, so a loop marks what it took
        wait(&self.pg.inner, call, &entries, cmp, mode)
    }

    /// Wait until every one of this rank's words `which` whose `status`
    /// entry is `false` satisfies `cmp value` (OpenSHMEM
    /// `shmem_wait_until_all` with its `status` array: entries whose
    /// status is set are skipped). `status` has one entry per word of
    /// `which`, else an error; with every entry set it returns at once.
    pub fn wait_until_all_masked(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> Result<()> {
        let call = "Signals::wait_until_all_masked";
        self.wait_set(
            call,
            which,
            Some(status),
            cmp,
            Values::One(value),
            Mode::All,
        )
        .map(drop)
    }

    /// Wait until any of this rank's words `which` whose `status` entry is
    /// `false` satisfies `cmp value` (OpenSHMEM `shmem_wait_until_any`
    /// with its `status` array); returns its **position in `which`** (the
    /// index into `status`, as OpenSHMEM returns it; the first of `which`
    /// that did), or `None` when every entry is masked out (OpenSHMEM's
    /// `SIZE_MAX`). `status` has one entry per word of `which`.
    ///
    /// The usual loop takes each word once, in the order the signals come:
    ///
    /// ```no_run
    /// # fn f(sigs: &splitrt_pgas::Signals) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// let which: Vec<usize> = (0..sigs.len()).collect();
    /// let mut done = vec![false; which.len()];
    /// while let Some(i) = sigs.wait_until_any_masked(&which, &done, Cmp::Ne, 0)? {
    ///     done[i] = true; // a position in `which` (here also the word)
    ///     // ... consume the data word i announced
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_until_any_masked(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> Result<Option<usize>> {
        let call = "Signals::wait_until_any_masked";
        self.wait_set(
            call,
            which,
            Some(status),
            cmp,
            Values::One(value),
            Mode::Any,
        )
        .map(|h| h.first().copied())
    }

    /// Wait until at least one of this rank's words `which` whose `status`
    /// entry is `false` satisfies `cmp value` (OpenSHMEM
    /// `shmem_wait_until_some` with its `status` array); returns the
    /// positions in `which` (indices into `status`) of all unmasked words
    /// that did at that moment, in order (none when every entry is masked
    /// out).
    pub fn wait_until_some_masked(
        &self,
        which: &[usize],
        status: &[bool],
        cmp: Cmp,
        value: u64,
    ) -> Result<Vec<usize>> {
        let call = "Signals::wait_until_some_masked";
        self.wait_set(
            call,
            which,
            Some(status),
            cmp,
            Values::One(value),
            Mode::Some,
        )
    }

    /// Wait until each of this rank's words `which[k]` satisfies `cmp
    /// values[k]` (OpenSHMEM `shmem_wait_until_all_vector`), skipping the
    /// words whose `status` entry is set (`None`: no mask). `values` (and
    /// `status`) have one entry per word of `which`, else an error naming
    /// the rank; an empty or fully masked list returns at once.
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas) -> splitrt_am::Result<()> {
    /// use splitrt_pgas::Cmp;
    /// // word p counts the blocks rank p sent me; rank p sends p + 1
    /// let counts = pg.alloc_signals(pg.size())?;
    /// let which: Vec<usize> = (0..pg.size()).collect();
    /// let expect: Vec<u64> = (1..=pg.size() as u64).collect();
    /// counts.wait_until_all_vector(&which, None, Cmp::Ge, &expect)?;
    /// # Ok(()) }
    /// ```
    pub fn wait_until_all_vector(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<()> {
        let call = "Signals::wait_until_all_vector";
        self.wait_set(call, which, status, cmp, Values::Each(values), Mode::All)
            .map(drop)
    }

    /// Wait until any of this rank's words `which[k]` (status unset)
    /// satisfies `cmp values[k]` (OpenSHMEM `shmem_wait_until_any_vector`);
    /// returns its position in `which` (the first that did; an index into
    /// `status` and `values`), or `None` when the list is empty or fully
    /// masked out.
    pub fn wait_until_any_vector(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<Option<usize>> {
        let call = "Signals::wait_until_any_vector";
        self.wait_set(call, which, status, cmp, Values::Each(values), Mode::Any)
            .map(|h| h.first().copied())
    }

    /// Wait until at least one of this rank's words `which[k]` (status
    /// unset) satisfies `cmp values[k]` (OpenSHMEM
    /// `shmem_wait_until_some_vector`); returns the positions in `which`
    /// of all that did at that moment, in order (none when the list is
    /// empty or fully masked out).
    pub fn wait_until_some_vector(
        &self,
        which: &[usize],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<Vec<usize>> {
        let call = "Signals::wait_until_some_vector";
        self.wait_set(call, which, status, cmp, Values::Each(values), Mode::Some)
    }
}

/// One compare value for every word, or one per word.
#[derive(Clone, Copy)]
pub(crate) enum Values<'a> {
    /// The same value for every word.
    One(u64),
    /// `values[k]` for word `k`.
    Each(&'a [u64]),
}

impl Values<'_> {
    fn slice(&self) -> Option<&[u64]> {
        match self {
            Values::One(_) => None,
            Values::Each(v) => Some(v),
        }
    }

    /// The value of entry `k` (lengths checked before).
    fn at(&self, k: usize) -> u64 {
        match self {
            Values::One(v) => *v,
            Values::Each(v) => v[k],
        }
    }
}

impl Pgas {
    /// The entries of the signal words `sigs` (each this rank's and a
    /// signal word, else an error), without the masked ones.
    pub(crate) fn sig_entries<'a>(
        &'a self,
        call: &str,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        values: &[u64],
    ) -> Result<Vec<Entry<'a>>> {
        let i = &self.inner;
        check_lengths(i.rank, call, sigs.len(), status, Some(values))?;
        let mut out = Vec::with_capacity(sigs.len());
        for (k, &sig) in sigs.iter().enumerate() {
            i.check_signal(sig, call)?;
            if sig.rank() != i.rank {
                return Err(i.err(
                    Error::usage(format!(
                        "{call}: {sig:?} is rank {}'s word; a rank waits only on its own \
                         signal words",
                        sig.rank()
                    )),
                    sig.rank(),
                ));
            }
            if status.is_some_and(|s| s[k]) {
                continue;
            }
            // the count before the generation (see `one_entry`)
            let removals = i.st.signals.removals();
            let generation = i.st.signals.generation(sig.offset()).unwrap_or(0);
            out.push(Entry {
                pos: k,
                word: i.signal_word(sig.offset()),
                value: values[k],
                ptr: sig,
                index: None,
                removals,
                generation,
            });
        }
        Ok(out)
    }

    /// Wait until each of this rank's signal words `sigs[k]` whose
    /// `status` entry is unset satisfies `cmp values[k]` (OpenSHMEM
    /// `shmem_wait_until_all_vector`, the words named by global
    /// pointers). Every pointer must be a signal word of this rank, and
    /// `values` (and `status`) have one entry per pointer, else an error
    /// naming the rank; an empty or fully masked list returns at once.
    /// ([`Signals::wait_until_all_vector`] waits by index.)
    pub fn wait_until_all_vector(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<()> {
        let call = "Pgas::wait_until_all_vector";
        let e = self.sig_entries(call, sigs, status, values)?;
        wait(&self.inner, call, &e, cmp, Mode::All).map(drop)
    }

    /// Wait until any of this rank's signal words `sigs[k]` (status
    /// unset) satisfies `cmp values[k]` (OpenSHMEM
    /// `shmem_wait_until_any_vector`); returns its position in `sigs` (the
    /// first that did), or `None` when the list is empty or fully masked.
    pub fn wait_until_any_vector(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<Option<usize>> {
        let call = "Pgas::wait_until_any_vector";
        let e = self.sig_entries(call, sigs, status, values)?;
        wait(&self.inner, call, &e, cmp, Mode::Any).map(|h| h.first().copied())
    }

    /// Wait until at least one of this rank's signal words `sigs[k]`
    /// (status unset) satisfies `cmp values[k]` (OpenSHMEM
    /// `shmem_wait_until_some_vector`); returns the positions in `sigs` of
    /// all that did at that moment, in order (none when the list is empty
    /// or fully masked).
    pub fn wait_until_some_vector(
        &self,
        sigs: &[GlobalPtr<u64>],
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[u64],
    ) -> Result<Vec<usize>> {
        let call = "Pgas::wait_until_some_vector";
        let e = self.sig_entries(call, sigs, status, values)?;
        wait(&self.inner, call, &e, cmp, Mode::Some)
    }
}

/// The entry of one of this rank's signal words named by a global pointer
/// (checked by the caller), for `Pgas::signal_wait_until`: with the
/// generation of its array, so a look ([`look_one_since`]) notices a free.
pub(crate) fn one_entry<'a>(inner: &'a Inner, sig: GlobalPtr<u64>, value: u64) -> Entry<'a> {
    // the removal count first, the generation after: a removal between
    // the two moves the count past `removals`, so the first lock-free
    // look goes to the lock and sees the array gone (read the other way
    // round, a generation of a freed array could be paired with a count
    // taken after its removal, and a look would read the freed word)
    let removals = inner.st.signals.removals();
    let generation = inner.st.signals.generation(sig.offset()).unwrap_or(0);
    Entry {
        pos: 0,
        word: inner.signal_word(sig.offset()),
        value,
        ptr: sig,
        index: None,
        removals,
        generation,
    }
}

/// One look at the single entry `e` (from [`one_entry`]) of a wait
/// (`call`), as `Pgas::signal_wait_until` looked on every round before
/// session 13, and now looks once before it takes a look slot (so a word
/// already satisfied costs no slot): under the registry's read lock, an
/// error naming the rank if its array was freed (before the freed word is
/// read), else the value it holds if that satisfies `cmp`.
pub(crate) fn look_one(inner: &Inner, call: &str, e: &Entry<'_>, cmp: Cmp) -> Option<Result<u64>> {
    let seen = inner.st.signals.with_words(|gen_of| {
        if gen_of(e.ptr.offset()) != Some(e.generation) {
            return Err(e.ptr);
        }
        Ok(e.word.load(Ordering::Acquire))
    });
    match seen {
        Ok(v) => cmp.holds(v, e.value).then_some(Ok(v)),
        Err(sig) => Some(Err(freed(inner, call, sig))),
    }
}

/// The removal count a lock-free look at `e` (from [`one_entry`]) starts
/// from: the one it was made at, or one no count equals when its array
/// was gone already (generation 0), so the first look takes the lock.
pub(crate) fn one_seen(e: &Entry<'_>) -> u64 {
    if e.generation == 0 {
        u64::MAX
    } else {
        e.removals
    }
}

/// One round of a wait on the single entry `e` (from [`one_entry`]) for
/// a rank that holds a look slot (`looker`, taken once before the loop):
/// while the registry's removal count is still `seen`, the word is read
/// without the registry's lock ([`Looker::if_unchanged`]: a removal
/// waits for the read); after a removal, one `look_one`-like check
/// under the lock, which ends the wait if the array was freed and else
/// moves `seen` on. So a wait takes the lock once per removal, not once
/// per round.
pub(crate) fn look_one_since(
    inner: &Inner,
    call: &str,
    e: &Entry<'_>,
    cmp: Cmp,
    looker: &Looker<'_>,
    seen: &std::cell::Cell<u64>,
) -> Option<Result<u64>> {
    let v = match looker.if_unchanged(seen.get(), || e.word.load(Ordering::Acquire)) {
        Some(v) => v,
        None => {
            let now = inner.st.signals.with_words_since(|gen_of, removals| {
                if gen_of(e.ptr.offset()) != Some(e.generation) {
                    return Err(e.ptr);
                }
                Ok((e.word.load(Ordering::Acquire), removals))
            });
            match now {
                Ok((v, removals)) => {
                    seen.set(removals);
                    v
                }
                Err(sig) => return Some(Err(freed(inner, call, sig))),
            }
        }
    };
    cmp.holds(v, e.value).then_some(Ok(v))
}

/// The error of a pointer wait (`call`) whose word `sig`'s array was
/// freed while it waited.
fn freed(inner: &Inner, call: &str, sig: GlobalPtr<u64>) -> Error {
    inner.err(
        Error::usage(format!(
            "{call}: {sig:?} is not a signal word (its array was freed by \
             Pgas::free_signals while this wait waited)"
        )),
        sig.rank(),
    )
}

/// What a wait on the one entry `e` awaits, for the hang report.
pub(crate) fn describe_one(inner: &Inner, call: &str, e: &Entry<'_>, cmp: Cmp) -> String {
    format!(
        "in {call}({:?} {} {}) on rank {}: it holds {}",
        e.ptr,
        cmp.symbol(),
        e.value,
        inner.rank,
        held(e, &inner.st.signals)
    )
}

/// What the word of `e` holds, for a hang report: read under the
/// registry's read lock for an entry from a global pointer, "freed" once
/// its array is gone (never a load of the freed word).
fn held(e: &Entry<'_>, registry: &Registry) -> String {
    if e.index.is_some() {
        // by index: the caller borrows the `Signals`, which cannot be freed
        return e.word.load(Ordering::Acquire).to_string();
    }
    registry.with_words(|gen_of| {
        if gen_of(e.ptr.offset()) == Some(e.generation) {
            e.word.load(Ordering::Acquire).to_string()
        } else {
            "freed".to_string()
        }
    })
}
