//! MeerKAT X-engine style heaps into vys spectra (sans-I/O; the
//! `vys-spead ingest` command drives it).
//!
//! One heap per integration: a timestamp item (immediate, or addressed
//! with a numpy or format descriptor of at most 8 bytes), an optional
//! frequency item (the heap's first channel: its channel block becomes
//! the spectral window, `frequency / channels`), and a visibility item of
//! shape `[channels, baselines, 2]` int32 (numpy `<i4` or `>i4`, or
//! format `i32`/`f32` big-endian) or `[channels, baselines]` complex64
//! (`<c8`). Baseline `b` becomes one vys spectrum of `8 * channels`
//! bytes: its `(re, im)` pairs in channel order, little-endian (int32
//! pairs as sent, or complex64). Items are found by name through the
//! descriptors the sender sent.

use crate::descriptor::Descriptor;
use crate::heap::{Heap, Value};
use crate::wire;
use std::collections::BTreeMap;
use std::fmt;

/// The most descriptors remembered (one per item id).
pub const MAX_DESCRIPTORS: usize = 1024;

/// Which items to take, and how to name the spectra.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XengConfig {
    /// Name of the timestamp item (`timestamp`).
    pub timestamp: String,
    /// Name of the visibility item (`xeng_raw`).
    pub data: String,
    /// Name of the frequency (first channel) item (`frequency`); optional in a heap.
    pub frequency: String,
    /// Antennas: baseline `b` is the `b`-th pair `(i, j)`, `i <= j`, in
    /// row order (`(0,0), (0,1), ..., (0,n-1), (1,1), ...`); `None`:
    /// stations `[0, b]`.
    pub antennas: Option<u16>,
    /// Spectral window of a heap without a frequency item.
    pub spectral_window: u16,
    /// Stokes product of every spectrum.
    pub stokes: u16,
}

impl Default for XengConfig {
    fn default() -> XengConfig {
        XengConfig {
            timestamp: "timestamp".into(),
            data: "xeng_raw".into(),
            frequency: "frequency".into(),
            antennas: None,
            spectral_window: 0,
            stokes: 0,
        }
    }
}

/// How the visibilities are laid out in the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Little-endian 4-byte pairs (`<i4` `[c, b, 2]`, `<c8` `[c, b]`): copied.
    Little,
    /// Big-endian 4-byte pairs (`>i4`, format `i32` or `f32`): swapped to little.
    Big,
}

/// Why a heap was not published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Items present but the data or timestamp item not described (yet).
    Undescribed,
    /// No timestamp item, or one longer than 8 bytes.
    BadTimestamp,
    /// A visibility item of another type, shape or length.
    BadLayout(String),
    /// A frequency whose channel block does not fit a spectral window.
    BadFrequency,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Undescribed => f.write_str("data or timestamp item not described"),
            Skip::BadTimestamp => f.write_str("timestamp missing or too long"),
            Skip::BadLayout(s) => write!(f, "visibility item: {s}"),
            Skip::BadFrequency => f.write_str("frequency out of range"),
        }
    }
}

/// One integration taken from a heap.
#[derive(Clone, Debug)]
pub struct Integration<'h> {
    /// The heap's timestamp (the vys timestamp of its spectra).
    pub timestamp: u64,
    /// Spectral window of its spectra.
    pub spectral_window: u16,
    /// Channels.
    pub channels: usize,
    /// Baselines.
    pub baselines: usize,
    /// Layout of `data`.
    pub layout: Layout,
    data: &'h [u8],
}

impl Integration<'_> {
    /// Bytes of each spectrum.
    pub fn spectrum_bytes(&self) -> usize {
        self.channels * 8
    }

    /// Baseline `b`'s spectrum into `out` (cleared first): `channels`
    /// little-endian `(re, im)` 4-byte pairs.
    pub fn spectrum(&self, b: usize, out: &mut Vec<u8>) {
        out.clear();
        let stride = self.baselines * 8;
        for c in 0..self.channels {
            let at = c * stride + b * 8;
            let v = &self.data[at..at + 8];
            match self.layout {
                Layout::Little => out.extend_from_slice(v),
                Layout::Big => {
                    for w in v.chunks_exact(4) {
                        out.extend_from_slice(&[w[3], w[2], w[1], w[0]]);
                    }
                }
            }
        }
    }
}

/// The station pair of baseline `b` (see [`XengConfig::antennas`]).
pub fn stations(antennas: Option<u16>, b: usize) -> Option<[u16; 2]> {
    let Some(n) = antennas else {
        return Some([0, u16::try_from(b).ok()?]);
    };
    let mut left = b;
    for i in 0..n {
        let row = usize::from(n - i);
        if left < row {
            return Some([i, i + left as u16]);
        }
        left -= row;
    }
    None
}

/// The station pairs of baselines `0..baselines` in order, each in O(1)
/// (as [`stations`]; `None` past the last pair of `antennas`).
pub fn baseline_pairs(
    antennas: Option<u16>,
    baselines: usize,
) -> impl Iterator<Item = Option<[u16; 2]>> {
    let (mut i, mut j) = (0u32, 0u32);
    (0..baselines).map(move |b| match antennas {
        None => Some([0, u16::try_from(b).ok()?]),
        Some(n) => {
            let n = u32::from(n);
            if i >= n {
                return None;
            }
            let pair = [i as u16, j as u16];
            j += 1;
            if j >= n {
                i += 1;
                j = i;
            }
            Some(pair)
        }
    })
}

/// Descriptors seen, and the mapping of heaps to integrations.
pub struct Ingest {
    cfg: XengConfig,
    descriptors: BTreeMap<u16, Descriptor>,
}

impl Ingest {
    /// With this configuration and no descriptors yet.
    pub fn new(cfg: XengConfig) -> Ingest {
        Ingest {
            cfg,
            descriptors: BTreeMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &XengConfig {
        &self.cfg
    }

    /// Take the heap's descriptors; returns (taken, malformed or past
    /// [`MAX_DESCRIPTORS`]).
    pub fn descriptors(&mut self, heap: &Heap) -> (usize, usize) {
        let (mut ok, mut bad) = (0, 0);
        for it in heap.items.iter().filter(|i| i.id == wire::DESCRIPTOR_ID) {
            match heap.bytes(it).map(Descriptor::decode) {
                Some(Ok(d)) => {
                    if self.descriptors.len() >= MAX_DESCRIPTORS
                        && !self.descriptors.contains_key(&d.id)
                    {
                        bad += 1;
                    } else {
                        self.descriptors.insert(d.id, d);
                        ok += 1;
                    }
                }
                _ => bad += 1,
            }
        }
        (ok, bad)
    }

    fn named(&self, name: &str) -> Option<&Descriptor> {
        self.descriptors.values().find(|d| d.name == name)
    }

    /// The heap's integration; `Ok(None)` for a heap with no items but
    /// descriptors and stream control.
    pub fn integration<'h>(&self, heap: &'h Heap) -> Result<Option<Integration<'h>>, Skip> {
        let data_d = self.named(&self.cfg.data);
        let data_item = data_d.and_then(|d| heap.item(d.id));
        let Some(data_item) = data_item else {
            let other = heap.items.iter().any(|i| {
                i.id != wire::DESCRIPTOR_ID && i.id != wire::STREAM_CTRL_ID && i.id != wire::NULL_ID
            });
            return if other {
                Err(Skip::Undescribed)
            } else {
                Ok(None)
            };
        };
        let data_d = data_d.expect("item found by its descriptor");
        let ts_d = self.named(&self.cfg.timestamp).ok_or(Skip::Undescribed)?;
        let timestamp = scalar(heap, ts_d).ok_or(Skip::BadTimestamp)?;
        let data = heap
            .bytes(data_item)
            .ok_or_else(|| Skip::BadLayout("immediate".into()))?;
        let (layout, channels, baselines) = layout(data_d)?;
        let want = channels
            .checked_mul(baselines)
            .and_then(|n| n.checked_mul(8))
            .ok_or_else(|| Skip::BadLayout("shape too large".into()))?;
        if data.len() < want {
            return Err(Skip::BadLayout(format!(
                "{} bytes for {channels} channels x {baselines} baselines",
                data.len()
            )));
        }
        if channels == 0 || baselines == 0 {
            return Err(Skip::BadLayout("empty".into()));
        }
        if let Some(n) = self.cfg.antennas {
            let want = usize::from(n) * (usize::from(n) + 1) / 2;
            if baselines != want {
                return Err(Skip::BadLayout(format!(
                    "{baselines} baselines, {n} antennas make {want}"
                )));
            }
        } else if baselines > usize::from(u16::MAX) + 1 {
            return Err(Skip::BadLayout("more baselines than station ids".into()));
        }
        let spectral_window = match self.named(&self.cfg.frequency) {
            Some(fd) if heap.item(fd.id).is_some() => {
                let f = scalar(heap, fd).ok_or(Skip::BadFrequency)?;
                u16::try_from(f / channels as u64).map_err(|_| Skip::BadFrequency)?
            }
            _ => self.cfg.spectral_window,
        };
        Ok(Some(Integration {
            timestamp,
            spectral_window,
            channels,
            baselines,
            layout,
            data: &data[..want],
        }))
    }
}

/// An integer item: immediate, or up to 8 addressed bytes (little-endian
/// if its numpy dtype says `<`, else big-endian as SPEAD formats are).
fn scalar(heap: &Heap, d: &Descriptor) -> Option<u64> {
    let it = heap.item(d.id)?;
    match &it.value {
        Value::Immediate(v) => Some(*v),
        Value::Addressed(_) => {
            let b = heap.bytes(it)?;
            if b.is_empty() || b.len() > 8 {
                return None;
            }
            let little = d.numpy().is_some_and(|n| n.descr.starts_with('<'));
            Some(if little {
                b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x))
            } else {
                wire::be_u64(b)
            })
        }
    }
}

fn dim(v: Option<u64>) -> Result<usize, Skip> {
    v.and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| Skip::BadLayout("variable or huge dimension".into()))
}

fn layout(d: &Descriptor) -> Result<(Layout, usize, usize), Skip> {
    if let Some(n) = d.numpy() {
        if n.fortran_order {
            return Err(Skip::BadLayout("Fortran order".into()));
        }
        let shape: Vec<Option<u64>> = n.shape.iter().map(|&x| Some(x)).collect();
        return match (n.descr.as_str(), shape.as_slice()) {
            ("<i4" | "<f4", [c, b, Some(2)]) => Ok((Layout::Little, dim(*c)?, dim(*b)?)),
            (">i4" | ">f4", [c, b, Some(2)]) => Ok((Layout::Big, dim(*c)?, dim(*b)?)),
            ("<c8", [c, b]) => Ok((Layout::Little, dim(*c)?, dim(*b)?)),
            (t, s) => Err(Skip::BadLayout(format!("dtype {t} shape {}", s.len()))),
        };
    }
    match (d.format.as_slice(), d.shape.as_slice()) {
        ([(b'i' | b'f', 32)], [c, b, Some(2)]) => Ok((Layout::Big, dim(*c)?, dim(*b)?)),
        (f, s) => Err(Skip::BadLayout(format!(
            "format of {} fields, shape of {}",
            f.len(),
            s.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::NumpyHeader;
    use crate::encode::{encode_heap, HeapItem, ItemValue};
    use crate::heap::{Limits, Reassembler};

    fn desc(id: u16, name: &str, numpy: Option<(&str, &[u64])>, format: &[(u8, u32)]) -> Vec<u8> {
        Descriptor {
            id,
            name: name.into(),
            description: String::new(),
            shape: numpy
                .map(|(_, s)| s.iter().map(|&x| Some(x)).collect())
                .unwrap_or_default(),
            format: format.to_vec(),
            numpy_header: numpy.map(|(t, s)| NumpyHeader::format(t, s)),
        }
        .encode()
    }

    fn heap(items: &[HeapItem<'_>]) -> Heap {
        let mut v = Vec::new();
        encode_heap(1, items, 1472, &mut v).unwrap();
        let mut r = Reassembler::new(Limits::default());
        v.iter().find_map(|p| r.push(p).complete).unwrap()
    }

    #[test]
    fn baseline_order() {
        let got: Vec<[u16; 2]> = (0..6).map(|b| stations(Some(3), b).unwrap()).collect();
        assert_eq!(got, [[0, 0], [0, 1], [0, 2], [1, 1], [1, 2], [2, 2]]);
        assert_eq!(stations(Some(3), 6), None);
        assert_eq!(stations(None, 5), Some([0, 5]));
        for n in [None, Some(1), Some(3), Some(7)] {
            let slow: Vec<_> = (0..40).map(|b| stations(n, b)).collect();
            let fast: Vec<_> = baseline_pairs(n, 40).collect();
            assert_eq!(slow, fast, "{n:?}");
        }
    }

    #[test]
    fn integration_from_a_heap() {
        // 2 channels, 3 baselines, int32 pairs: value = 100 c + 10 b + k
        let vis: Vec<u8> = (0..2)
            .flat_map(|c| (0..3).flat_map(move |b| (0..2).map(move |k| 100 * c + 10 * b + k)))
            .flat_map(|v: i32| v.to_le_bytes())
            .collect();
        let d_ts = desc(0x1600, "timestamp", None, &[(b'u', 48)]);
        let d_f = desc(0x4103, "frequency", None, &[(b'u', 48)]);
        let d_x = desc(0x1800, "xeng_raw", Some(("<i4", &[2, 3, 2])), &[]);
        let items = [
            HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(&d_ts)),
            HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(&d_f)),
            HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(&d_x)),
            HeapItem::new(0x1600, ItemValue::Immediate(123_456)),
            HeapItem::new(0x4103, ItemValue::Immediate(4)),
            HeapItem::new(0x1800, ItemValue::Bytes(&vis)),
        ];
        let h = heap(&items);
        let mut ing = Ingest::new(XengConfig {
            antennas: Some(2),
            ..XengConfig::default()
        });
        // before its descriptors, the heap is undescribed
        assert_eq!(ing.integration(&h).unwrap_err(), Skip::Undescribed);
        assert_eq!(ing.descriptors(&h), (3, 0));
        let i = ing.integration(&h).unwrap().unwrap();
        assert_eq!(
            (i.timestamp, i.spectral_window, i.channels, i.baselines),
            (123_456, 2, 2, 3)
        );
        let mut s = Vec::new();
        i.spectrum(1, &mut s);
        let want: Vec<u8> = [10i32, 11, 110, 111]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(s, want);
        // big-endian by format: swapped to the same little-endian bytes
        let be: Vec<u8> = vis
            .chunks_exact(4)
            .flat_map(|w| [w[3], w[2], w[1], w[0]])
            .collect();
        let d_be = Descriptor {
            id: 0x1800,
            name: "xeng_raw".into(),
            description: String::new(),
            shape: vec![Some(2), Some(3), Some(2)],
            format: vec![(b'i', 32)],
            numpy_header: None,
        }
        .encode();
        let h2 = heap(&[
            HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(&d_be)),
            HeapItem::new(0x1600, ItemValue::Immediate(1)),
            HeapItem::new(0x1800, ItemValue::Bytes(&be)),
        ]);
        ing.descriptors(&h2);
        let i2 = ing.integration(&h2).unwrap().unwrap();
        assert_eq!(i2.layout, Layout::Big);
        i2.spectrum(1, &mut s);
        assert_eq!(s, want);
        // too few bytes for the shape
        let h3 = heap(&[
            HeapItem::new(0x1600, ItemValue::Immediate(1)),
            HeapItem::new(0x1800, ItemValue::Bytes(&be[..40])),
        ]);
        assert!(matches!(ing.integration(&h3), Err(Skip::BadLayout(_))));
        // antennas that do not match the baselines
        let ing3 = Ingest {
            cfg: XengConfig {
                antennas: Some(3),
                ..XengConfig::default()
            },
            descriptors: ing.descriptors.clone(),
        };
        assert!(matches!(ing3.integration(&h2), Err(Skip::BadLayout(_))));
    }
}
