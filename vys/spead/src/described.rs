//! A vys stream description as SPEAD items (what `vys-spead publish`
//! sends, docs/vys-spead.md): each field an item with its descriptor, so
//! a `spead2.ItemGroup` holds them by name. They are sent with a heap
//! when the description its spectrum belongs to is not the one sent last
//! (and again with the descriptors' refresh); spead2 keeps an item's
//! value across heaps, so the heaps in between carry only the epoch.
//!
//! ```
//! use splitrt_vys::description::*;
//! use splitrt_vys_spead::described::{items, ids};
//! let d = StreamDescription {
//!     data_type: DataType::Complex64,
//!     channels: 2,
//!     frequencies: Frequencies::Linear { first_hz: 1.0e9, width_hz: 1.0e6 },
//!     polarizations: vec![Polarization::XX],
//!     baseband: 0,
//!     subband: 1,
//!     config_name: "c".into(),
//!     time_epoch: TimeEpoch::Unix,
//!     time_unit: TimeUnit::Nanoseconds,
//!     integration_ns: 1,
//! };
//! let it = items(&d);
//! assert!(it.values.iter().any(|(id, _)| *id == ids::FREQUENCIES_HZ));
//! ```

use super::descriptor::{Descriptor, NumpyHeader};
use splitrt_vys::description::StreamDescription;

/// Item ids of the description's fields.
pub mod ids {
    /// Epoch of the description a heap's spectrum belongs to (u48,
    /// immediate; in every heap of a described stream).
    pub const DESCRIPTION_EPOCH: u16 = 0x1610;
    /// Configuration name (string).
    pub const CONFIG_NAME: u16 = 0x1611;
    /// Channels (u48, immediate).
    pub const N_CHANS: u16 = 0x1612;
    /// Each channel's frequency, Hz (`<f8`, one per channel).
    pub const FREQUENCIES_HZ: u16 = 0x1613;
    /// Polarization products, comma-separated names (string).
    pub const POLARIZATIONS: u16 = 0x1614;
    /// Integration time, ns (u64).
    pub const INT_TIME_NS: u16 = 0x1615;
    /// Baseband id (u48, immediate).
    pub const BASEBAND: u16 = 0x1616;
    /// Subband id (u48, immediate).
    pub const SUBBAND: u16 = 0x1617;
    /// Data type name (string).
    pub const DATA_TYPE: u16 = 0x1618;
    /// Timestamps' epoch name (string).
    pub const TIME_EPOCH: u16 = 0x1619;
    /// Timestamps' unit name (string).
    pub const TIME_UNIT: u16 = 0x161A;
}

/// The encoded descriptors of a description's items and their values.
pub struct DescriptionItems {
    /// Encoded descriptors (each the value of a descriptor item).
    pub descriptors: Vec<Vec<u8>>,
    /// (item id, value bytes) of the byte-valued items.
    pub values: Vec<(u16, Vec<u8>)>,
    /// (item id, value) of the immediate items.
    pub immediates: Vec<(u16, u64)>,
}

fn desc(
    id: u16,
    name: &str,
    what: &str,
    format: Vec<(u8, u32)>,
    shape: Vec<Option<u64>>,
) -> Vec<u8> {
    Descriptor {
        id,
        name: name.into(),
        description: what.into(),
        shape,
        format,
        numpy_header: None,
    }
    .encode()
}

fn string(id: u16, name: &str, what: &str) -> Vec<u8> {
    desc(id, name, what, vec![(b'c', 8)], vec![None])
}

/// The descriptor of the epoch item (sent with the data's descriptors).
pub fn epoch_descriptor() -> Vec<u8> {
    desc(
        ids::DESCRIPTION_EPOCH,
        "description_epoch",
        "epoch of the vys stream description of this spectrum",
        vec![(b'u', 48)],
        Vec::new(),
    )
}

/// `d`'s items (all but the epoch) with their descriptors.
pub fn items(d: &StreamDescription) -> DescriptionItems {
    let n = d.channels as u64;
    let freqs: Vec<u8> = (0..d.channels)
        .flat_map(|i| d.frequency(i).unwrap_or(f64::NAN).to_le_bytes())
        .collect();
    let pols: Vec<&str> = d.polarizations.iter().map(|p| p.name()).collect();
    let scalar = |id, name, what| desc(id, name, what, vec![(b'u', 48)], Vec::new());
    DescriptionItems {
        descriptors: vec![
            string(
                ids::CONFIG_NAME,
                "config_name",
                "correlator configuration name",
            ),
            scalar(ids::N_CHANS, "n_chans", "channels per spectrum"),
            Descriptor {
                id: ids::FREQUENCIES_HZ,
                name: "frequencies_hz".into(),
                description: "sky frequency of each channel, Hz".into(),
                shape: vec![Some(n)],
                format: Vec::new(),
                numpy_header: Some(NumpyHeader::format("<f8", &[n])),
            }
            .encode(),
            string(
                ids::POLARIZATIONS,
                "polarizations",
                "polarization products, by stokes index",
            ),
            desc(
                ids::INT_TIME_NS,
                "int_time_ns",
                "integration time, ns",
                vec![(b'u', 64)],
                Vec::new(),
            ),
            scalar(ids::BASEBAND, "baseband", "baseband id"),
            scalar(ids::SUBBAND, "subband", "subband id"),
            string(ids::DATA_TYPE, "data_type", "vys data type of the spectra"),
            string(ids::TIME_EPOCH, "time_epoch", "epoch of the timestamps"),
            string(ids::TIME_UNIT, "time_unit", "unit of the timestamps"),
        ],
        values: vec![
            (ids::CONFIG_NAME, d.config_name.as_bytes().to_vec()),
            (ids::FREQUENCIES_HZ, freqs),
            (ids::POLARIZATIONS, pols.join(",").into_bytes()),
            (ids::INT_TIME_NS, d.integration_ns.to_be_bytes().to_vec()),
            (ids::DATA_TYPE, d.data_type.name().as_bytes().to_vec()),
            (ids::TIME_EPOCH, d.time_epoch.name().as_bytes().to_vec()),
            (ids::TIME_UNIT, d.time_unit.name().as_bytes().to_vec()),
        ],
        immediates: vec![
            (ids::N_CHANS, n),
            (ids::BASEBAND, d.baseband as u64),
            (ids::SUBBAND, d.subband as u64),
        ],
    }
}
