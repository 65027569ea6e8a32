//! The consumer's book of stream descriptions: per producer id, the
//! latest description heard of its current instance (shared with the
//! application's handle: `Consumer::description`). Bounded: one entry per
//! producer the consumer knows of (the consumer forgets an entry with its
//! producer), and each description is bounded by its encoding.

use super::description::StreamDescription;
use super::signal::Signal;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A producer's stream description as a consumer knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// The producer instance that sent it.
    pub instance: u64,
    /// Its epoch (spectra name the epoch of their description:
    /// `Product::description_epoch`).
    pub epoch: u32,
    /// The description.
    pub description: Arc<StreamDescription>,
}

/// Descriptions by producer id (see the module's documentation).
#[derive(Default)]
pub(crate) struct Book {
    by_producer: Mutex<FxHashMap<u64, Described>>,
}

/// Producer ids with a description kept at most (as the consumer's
/// routes; past it, a new producer's description is not kept, but still
/// delivered in its message).
const MAX_DESCRIBED: usize = 4096;

impl Book {
    /// Take the description `s` carries, if any, for its (current)
    /// instance: `Some` if it is news (another instance or epoch than the
    /// one kept).
    pub(crate) fn take(&self, s: &Signal) -> Option<Described> {
        let d = s.description.as_ref()?;
        let mut g = self.by_producer.lock();
        if let Some(k) = g.get(&s.producer) {
            if k.instance == s.instance && k.epoch == s.description_epoch {
                return None;
            }
        }
        let new = Described {
            instance: s.instance,
            epoch: s.description_epoch,
            description: d.clone(),
        };
        if g.len() < MAX_DESCRIBED || g.contains_key(&s.producer) {
            g.insert(s.producer, new.clone());
        }
        Some(new)
    }

    /// The description kept for `producer`.
    pub(crate) fn get(&self, producer: u64) -> Option<Described> {
        self.by_producer.lock().get(&producer).cloned()
    }

    /// The description `s`'s spectra belong to (its producer, instance
    /// and epoch), if it is the one kept.
    pub(crate) fn of(&self, s: &Signal) -> Option<Arc<StreamDescription>> {
        let g = self.by_producer.lock();
        let k = g.get(&s.producer)?;
        (k.instance == s.instance && k.epoch == s.description_epoch).then(|| k.description.clone())
    }

    /// Forget `producer`'s description (it is gone, forgotten, or a new
    /// instance of it replaced the one described).
    pub(crate) fn forget(&self, producer: u64) {
        self.by_producer.lock().remove(&producer);
    }
}
