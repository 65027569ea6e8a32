//! The blocking wait on one signal word named by a global pointer
//! (`Pgas::signal_wait_until`). It borrows no `Signals`, so another thread
//! may free the word's array while it waits: like the vector forms'
//! pointer waits (`signal_vector.rs`), every look checks the word's array
//! under the signal registry's lock first and ends the wait with an error
//! naming the rank once it is freed, never reading the freed word.

use crate::context::Pgas;
use crate::ptr::GlobalPtr;
use crate::signal_vector::{describe_one, look_one, one_entry};
use crate::signal_word::Cmp;
use splitrt_am::{Error, Result};

impl Pgas {
    /// Wait until this rank's signal word `sig` satisfies `cmp value`
    /// (OpenSHMEM `shmem_signal_wait_until`), for a word named by a
    /// global pointer: it must be this rank's and a signal word, else an
    /// error. Returns the value that satisfied it. ([`Signals::wait_until`](crate::Signals::wait_until)
    /// and its `_any` / `_all` / `_some` forms wait by index.)
    pub fn signal_wait_until(&self, sig: GlobalPtr<u64>, cmp: Cmp, value: u64) -> Result<u64> {
        let i = &self.inner;
        i.check_signal(sig, "Pgas::signal_wait_until")?;
        if sig.rank() != i.rank {
            return Err(i.err(
                Error::usage(format!(
                    "Pgas::signal_wait_until: {sig:?} is rank {}'s word; a rank waits only on \
                     its own signal words",
                    sig.rank()
                )),
                sig.rank(),
            ));
        }
        // one entry from a global pointer: every look checks, under the
        // registry lock, that its array is still the one it was (another
        // thread may free it meanwhile), as the vector forms do
        let call = "Pgas::signal_wait_until";
        let e = one_entry(i, sig, value);
        let seen = std::cell::Cell::new(Ok(0));
        let what = || describe_one(i, call, &e, cmp);
        i.wait_through(&what, || match look_one(i, call, &e, cmp) {
            Some(r) => {
                seen.set(r);
                true
            }
            None => false,
        })?;
        seen.into_inner()
    }
}
