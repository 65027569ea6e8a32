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
            // an instance's epochs only grow (serial-number order, so a
            // wrap past u32::MAX still counts as newer): an older one is a
            // signal the network reordered or delayed (a periodic resend
            // of the last description), not news
            if k.instance == s.instance && (s.description_epoch.wrapping_sub(k.epoch) as i32) <= 0 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::description::{DataType, Frequencies, TimeEpoch, TimeUnit};
    use crate::signal::DigestKind;

    fn described(instance: u64, epoch: u32, channels: u32) -> Signal {
        Signal {
            digest: DigestKind::Crc32c,
            channels,
            producer: 7,
            address: "127.0.0.1:4242".parse().unwrap(),
            stations: [1, 2],
            spectral_window: 0,
            stokes: 0,
            config: 0,
            spectrum_bytes: 8 * channels,
            instance,
            started: 1,
            sequence: 1,
            entries: Vec::new(),
            description_epoch: epoch,
            description: Some(Arc::new(StreamDescription {
                data_type: DataType::Complex64,
                channels,
                frequencies: Frequencies::Linear {
                    first_hz: 1.0e9,
                    width_hz: 1.0e6,
                },
                polarizations: Vec::new(),
                baseband: 0,
                subband: 0,
                config_name: String::new(),
                time_epoch: TimeEpoch::Mjd,
                time_unit: TimeUnit::Microseconds,
                integration_ns: 1_000_000,
            })),
        }
    }

    /// A delayed resend of an older epoch is not news and does not replace
    /// the newer description; a new instance's epoch 1 is news.
    #[test]
    fn fixes_an_older_epoch_never_replaces_a_newer_one() {
        let b = Book::default();
        assert!(b.take(&described(1, 1, 64)).is_some());
        assert!(b.take(&described(1, 2, 128)).is_some());
        assert!(
            b.take(&described(1, 2, 128)).is_none(),
            "the same epoch again"
        );
        assert!(
            b.take(&described(1, 1, 64)).is_none(),
            "a delayed epoch-1 signal was taken as news after epoch 2"
        );
        assert_eq!(b.get(7).map(|d| d.epoch), Some(2));
        // serial-number order across the wrap
        assert!(b.take(&described(1, u32::MAX, 1)).is_none());
        // another instance (a restart) starts over
        assert!(b.take(&described(2, 1, 64)).is_some());
        assert_eq!(b.get(7).map(|d| (d.instance, d.epoch)), Some((2, 1)));
    }
}
