//! Self-describing spectra: a producer's stream description (what its
//! spectra's bytes mean: data type, channels and their frequencies,
//! polarization products, baseband and subband, configuration name, the
//! timestamps' epoch and units, integration time), versioned by an epoch
//! the producer raises at each change.
//!
//! Every signal carries the epoch of the description in force when it was
//! sent (4 bytes that were reserved: the signal did not grow), so a
//! consumer knows which description a spectrum belongs to; the
//! description itself rides in a signal with no entries, at start, on
//! each change and periodically, so a consumer that joins late learns it
//! (see `producer` and `consumer`). It is authenticated by the signal's
//! tag like the rest of the signal, and bounded: at most
//! [`MAX_DESCRIPTION`] bytes, so a signal carrying it is one datagram.
//!
//! Encoding (little-endian; format 1), the block after a signal's
//! entries, its length in the signal's header:
//!
//! ```text
//!  0 format u8 (1)        1 data type u8       2 time epoch u8   3 time unit u8
//!  4 channels u32
//!  8 baseband u16        10 subband u16       12 polarizations u8 (n, <= 16)
//! 13 name bytes u8 (<= 64)                    14 frequency kind u8 (0 first + width, 1 listed)
//! 15 reserved u8 (0)
//! 16 integration time u64 (ns)
//! 24 first channel's frequency f64 (Hz)      32 channel width f64 (Hz)   (kind 0, else 0)
//! 40 listed frequencies u16 (kind 1: = channels, <= 128; kind 0: 0)      42 reserved [u8; 6] (0)
//! 48 polarization codes [u8; n] (FITS / CASA Stokes codes)
//! .. configuration name, UTF-8 [u8; name bytes]
//! .. listed frequencies f64 (Hz) x listed
//! ```
//!
//! A received block is hostile input until checked: every length and
//! count is validated against the block's size and the bounds above,
//! every code against its table, every frequency for finiteness; a bad
//! block makes its signal malformed, never a panic.
//!
//! ```
//! use splitrt_vys::description::*;
//! let d = StreamDescription {
//!     data_type: DataType::Complex64,
//!     channels: 1024,
//!     frequencies: Frequencies::Linear { first_hz: 1.0e9, width_hz: 125.0e3 },
//!     polarizations: vec![Polarization::RR, Polarization::LL],
//!     baseband: 1,
//!     subband: 3,
//!     config_name: "TRSG0001.sb1.scan7".into(),
//!     time_epoch: TimeEpoch::Unix,
//!     time_unit: TimeUnit::Nanoseconds,
//!     integration_ns: 10_000_000,
//! };
//! let b = d.encode().unwrap();
//! assert_eq!(StreamDescription::decode(&b).unwrap(), d);
//! assert_eq!(d.frequency(1), Some(1.0e9 + 125.0e3));
//! ```

/// Format of the encoded description this code writes and reads.
pub const DESCRIPTION_FORMAT: u8 = 1;
/// Fixed bytes of an encoded description.
pub const DESCRIPTION_HEADER: usize = 48;
/// Polarization products at most.
pub const MAX_POLARIZATIONS: usize = 16;
/// Bytes of the configuration name at most (UTF-8).
pub const MAX_CONFIG_NAME: usize = 64;
/// Channel frequencies listed one by one at most (more channels: give
/// the first frequency and the width).
pub const MAX_LISTED_CHANNELS: usize = 128;
/// The longest encoded description.
pub const MAX_DESCRIPTION: usize =
    DESCRIPTION_HEADER + MAX_POLARIZATIONS + MAX_CONFIG_NAME + 8 * MAX_LISTED_CHANNELS;

const _: () = assert!(MAX_DESCRIPTION <= u16::MAX as usize);

/// What each element of a spectrum's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// Bytes of no declared meaning.
    Raw = 0,
    /// Complex, two `f32` (real, imaginary): numpy `complex64`.
    Complex64 = 1,
    /// Complex, two `f64`: numpy `complex128`.
    Complex128 = 2,
    /// Complex, two `i16` (real, imaginary).
    ComplexInt16 = 3,
    /// Complex, two `i32` (real, imaginary).
    ComplexInt32 = 4,
    /// Real `f32` (e.g. autocorrelation power).
    Float32 = 5,
    /// Real `f64`.
    Float64 = 6,
}

/// Polarization (Stokes) products, by their FITS / CASA Stokes codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the names are the products
pub enum Polarization {
    I = 1,
    Q = 2,
    U = 3,
    V = 4,
    RR = 5,
    RL = 6,
    LR = 7,
    LL = 8,
    XX = 9,
    XY = 10,
    YX = 11,
    YY = 12,
}

/// The epoch timestamps count from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeEpoch {
    /// 1970-01-01T00:00:00 UTC (the Unix epoch).
    Unix = 0,
    /// Modified Julian Date 0: 1858-11-17T00:00:00 UTC.
    Mjd = 1,
    /// The GPS epoch: 1980-01-06T00:00:00 UTC.
    Gps = 2,
    /// J2000.0: 2000-01-01T12:00:00 TT.
    J2000 = 3,
}

/// The unit of timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    /// Nanoseconds.
    Nanoseconds = 0,
    /// Microseconds.
    Microseconds = 1,
    /// Milliseconds.
    Milliseconds = 2,
    /// Seconds.
    Seconds = 3,
}

/// The channels' sky frequencies.
#[derive(Clone, Debug)]
pub enum Frequencies {
    /// Evenly spaced: channel `i` is at `first_hz + i * width_hz` (the
    /// width may be negative: a lower sideband).
    Linear {
        /// Frequency of channel 0 (Hz).
        first_hz: f64,
        /// Channel spacing (Hz).
        width_hz: f64,
    },
    /// One frequency per channel (Hz; at most [`MAX_LISTED_CHANNELS`]).
    Listed(Vec<f64>),
}

/// Frequencies are equal when their bits are (so a description is `Eq`:
/// only finite values are ever encoded or decoded).
impl PartialEq for Frequencies {
    fn eq(&self, o: &Frequencies) -> bool {
        match (self, o) {
            (
                Frequencies::Linear { first_hz, width_hz },
                Frequencies::Linear {
                    first_hz: f,
                    width_hz: w,
                },
            ) => first_hz.to_bits() == f.to_bits() && width_hz.to_bits() == w.to_bits(),
            (Frequencies::Listed(a), Frequencies::Listed(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            _ => false,
        }
    }
}
impl Eq for Frequencies {}

/// What a producer's spectra mean (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamDescription {
    /// Element type of the data.
    pub data_type: DataType,
    /// Channels per spectrum.
    pub channels: u32,
    /// The channels' frequencies.
    pub frequencies: Frequencies,
    /// Polarization products: a signal's `stokes` indexes this list.
    pub polarizations: Vec<Polarization>,
    /// Baseband id.
    pub baseband: u16,
    /// Subband id (within the baseband).
    pub subband: u16,
    /// Configuration name (at most [`MAX_CONFIG_NAME`] bytes of UTF-8).
    pub config_name: String,
    /// The epoch of the spectra's timestamps.
    pub time_epoch: TimeEpoch,
    /// The unit of the spectra's timestamps.
    pub time_unit: TimeUnit,
    /// Integration time of a spectrum (ns).
    pub integration_ns: u64,
}

/// Why bytes are not a description (or a description cannot be encoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptionError(pub String);

impl std::fmt::Display for DescriptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream description: {}", self.0)
    }
}

impl std::error::Error for DescriptionError {}

fn err<T>(m: impl Into<String>) -> Result<T, DescriptionError> {
    Err(DescriptionError(m.into()))
}

macro_rules! codes {
    ($t:ident { $($v:ident = $s:literal),* $(,)? }) => {
        impl $t {
            /// Its code on the wire.
            pub fn code(self) -> u8 {
                self as u8
            }
            /// The value of a wire code (`None`: unknown).
            pub fn from_code(c: u8) -> Option<$t> {
                $(if c == $t::$v as u8 { return Some($t::$v); })*
                None
            }
            /// Its name (as `FromStr` takes it, and Python gives it).
            pub fn name(self) -> &'static str {
                match self { $($t::$v => $s),* }
            }
        }
        impl std::str::FromStr for $t {
            type Err = DescriptionError;
            fn from_str(s: &str) -> Result<$t, DescriptionError> {
                $(if s.eq_ignore_ascii_case($s) { return Ok($t::$v); })*
                err(format!(concat!("unknown ", stringify!($t), " '{}': one of ", $($s, " ",)*), s))
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

codes!(DataType {
    Raw = "raw",
    Complex64 = "complex64",
    Complex128 = "complex128",
    ComplexInt16 = "cint16",
    ComplexInt32 = "cint32",
    Float32 = "float32",
    Float64 = "float64",
});
codes!(Polarization {
    I = "I",
    Q = "Q",
    U = "U",
    V = "V",
    RR = "RR",
    RL = "RL",
    LR = "LR",
    LL = "LL",
    XX = "XX",
    XY = "XY",
    YX = "YX",
    YY = "YY",
});
codes!(TimeEpoch {
    Unix = "unix",
    Mjd = "mjd",
    Gps = "gps",
    J2000 = "j2000",
});
codes!(TimeUnit {
    Nanoseconds = "ns",
    Microseconds = "us",
    Milliseconds = "ms",
    Seconds = "s",
});

impl DataType {
    /// Bytes of one element (0 for [`DataType::Raw`]: none declared).
    pub fn element_bytes(self) -> usize {
        match self {
            DataType::Raw => 0,
            DataType::Complex64 | DataType::ComplexInt32 | DataType::Float64 => 8,
            DataType::Complex128 => 16,
            DataType::ComplexInt16 | DataType::Float32 => 4,
        }
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(x)
}

impl StreamDescription {
    /// Frequency of channel `i` (Hz), if there is such a channel.
    pub fn frequency(&self, i: u32) -> Option<f64> {
        if i >= self.channels {
            return None;
        }
        match &self.frequencies {
            Frequencies::Linear { first_hz, width_hz } => Some(first_hz + i as f64 * width_hz),
            Frequencies::Listed(f) => f.get(i as usize).copied(),
        }
    }

    /// Whether it can be sent: every bound of the encoding holds (the
    /// same checks a consumer makes of a received one).
    pub fn check(&self) -> Result<(), DescriptionError> {
        if self.channels == 0 {
            return err("0 channels");
        }
        if self.polarizations.len() > MAX_POLARIZATIONS {
            return err(format!(
                "{} polarization products (at most {MAX_POLARIZATIONS})",
                self.polarizations.len()
            ));
        }
        if self.config_name.len() > MAX_CONFIG_NAME {
            return err(format!(
                "a configuration name of {} B (at most {MAX_CONFIG_NAME})",
                self.config_name.len()
            ));
        }
        match &self.frequencies {
            Frequencies::Linear { first_hz, width_hz } => {
                if !first_hz.is_finite() || !width_hz.is_finite() {
                    return err("a frequency that is not finite");
                }
            }
            Frequencies::Listed(f) => {
                if f.len() > MAX_LISTED_CHANNELS {
                    return err(format!(
                        "{} listed frequencies (at most {MAX_LISTED_CHANNELS}; give the first \
                         and the width instead)",
                        f.len()
                    ));
                }
                if f.len() != self.channels as usize {
                    return err(format!(
                        "{} listed frequencies for {} channels",
                        f.len(),
                        self.channels
                    ));
                }
                if f.iter().any(|x| !x.is_finite()) {
                    return err("a frequency that is not finite");
                }
            }
        }
        Ok(())
    }

    /// Its encoding (at most [`MAX_DESCRIPTION`] bytes), or why it has
    /// none ([`check`](Self::check)).
    pub fn encode(&self) -> Result<Vec<u8>, DescriptionError> {
        self.check()?;
        let listed = match &self.frequencies {
            Frequencies::Listed(f) => f.as_slice(),
            Frequencies::Linear { .. } => &[],
        };
        let mut b = vec![0u8; DESCRIPTION_HEADER];
        b[0] = DESCRIPTION_FORMAT;
        b[1] = self.data_type.code();
        b[2] = self.time_epoch.code();
        b[3] = self.time_unit.code();
        b[4..8].copy_from_slice(&self.channels.to_le_bytes());
        b[8..10].copy_from_slice(&self.baseband.to_le_bytes());
        b[10..12].copy_from_slice(&self.subband.to_le_bytes());
        b[12] = self.polarizations.len() as u8;
        b[13] = self.config_name.len() as u8;
        b[16..24].copy_from_slice(&self.integration_ns.to_le_bytes());
        match &self.frequencies {
            Frequencies::Linear { first_hz, width_hz } => {
                b[14] = 0;
                b[24..32].copy_from_slice(&first_hz.to_bits().to_le_bytes());
                b[32..40].copy_from_slice(&width_hz.to_bits().to_le_bytes());
            }
            Frequencies::Listed(f) => {
                b[14] = 1;
                b[40..42].copy_from_slice(&(f.len() as u16).to_le_bytes());
            }
        }
        b.extend(self.polarizations.iter().map(|p| p.code()));
        b.extend_from_slice(self.config_name.as_bytes());
        for f in listed {
            b.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        debug_assert!(b.len() <= MAX_DESCRIPTION);
        Ok(b)
    }

    /// Decode a received block (hostile input: every length, count and
    /// code is checked; an error, never a panic).
    pub fn decode(b: &[u8]) -> Result<StreamDescription, DescriptionError> {
        if b.len() < DESCRIPTION_HEADER || b.len() > MAX_DESCRIPTION {
            return err(format!(
                "{} B (a description has {DESCRIPTION_HEADER}..={MAX_DESCRIPTION})",
                b.len()
            ));
        }
        if b[0] != DESCRIPTION_FORMAT {
            return err(format!(
                "format {}, this code reads format {DESCRIPTION_FORMAT}",
                b[0]
            ));
        }
        if b[15] != 0 || b[42..48].iter().any(|x| *x != 0) {
            return err("reserved bytes set");
        }
        let data_type = DataType::from_code(b[1])
            .ok_or_else(|| DescriptionError(format!("data type {}", b[1])))?;
        let time_epoch = TimeEpoch::from_code(b[2])
            .ok_or_else(|| DescriptionError(format!("time epoch {}", b[2])))?;
        let time_unit = TimeUnit::from_code(b[3])
            .ok_or_else(|| DescriptionError(format!("time unit {}", b[3])))?;
        let channels = u32_at(b, 4);
        let npol = b[12] as usize;
        let nname = b[13] as usize;
        let listed = u16_at(b, 40) as usize;
        if npol > MAX_POLARIZATIONS || nname > MAX_CONFIG_NAME || listed > MAX_LISTED_CHANNELS {
            return err(format!(
                "{npol} polarizations, a name of {nname} B, {listed} listed frequencies"
            ));
        }
        let want = DESCRIPTION_HEADER + npol + nname + 8 * listed;
        if b.len() != want {
            return err(format!("{} B, its counts say {want} B", b.len()));
        }
        let at = DESCRIPTION_HEADER;
        let polarizations = b[at..at + npol]
            .iter()
            .map(|c| {
                Polarization::from_code(*c)
                    .ok_or_else(|| DescriptionError(format!("polarization code {c}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let at = at + npol;
        let config_name = std::str::from_utf8(&b[at..at + nname])
            .map_err(|_| DescriptionError("a configuration name that is not UTF-8".into()))?
            .to_string();
        let at = at + nname;
        let frequencies = match b[14] {
            0 if listed == 0 => Frequencies::Linear {
                first_hz: f64::from_bits(u64_at(b, 24)),
                width_hz: f64::from_bits(u64_at(b, 32)),
            },
            1 if u64_at(b, 24) == 0 && u64_at(b, 32) == 0 => Frequencies::Listed(
                (0..listed)
                    .map(|i| f64::from_bits(u64_at(b, at + 8 * i)))
                    .collect(),
            ),
            k => return err(format!("frequency kind {k} with {listed} listed")),
        };
        let d = StreamDescription {
            data_type,
            channels,
            frequencies,
            polarizations,
            baseband: u16_at(b, 8),
            subband: u16_at(b, 10),
            config_name,
            time_epoch,
            time_unit,
            integration_ns: u64_at(b, 16),
        };
        d.check()?;
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StreamDescription {
        StreamDescription {
            data_type: DataType::Complex64,
            channels: 4,
            frequencies: Frequencies::Listed(vec![1.0e9, 1.1e9, 1.25e9, 1.5e9]),
            polarizations: vec![
                Polarization::XX,
                Polarization::XY,
                Polarization::YX,
                Polarization::YY,
            ],
            baseband: 2,
            subband: 7,
            config_name: "vysdesc".into(),
            time_epoch: TimeEpoch::Mjd,
            time_unit: TimeUnit::Microseconds,
            integration_ns: 1_000_000,
        }
    }

    fn linear() -> StreamDescription {
        StreamDescription {
            frequencies: Frequencies::Linear {
                first_hz: 2.0e9,
                width_hz: -1.0e6,
            },
            channels: 65_536,
            ..sample()
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The exact bytes of format 1: a change of layout fails here.
    #[test]
    fn vysdesc_golden_bytes() {
        let b = linear().encode().unwrap();
        assert_eq!(
            hex(&b),
            "0101010100000100\
             0200070004070000\
             40420f0000000000\
             0000000065cddd41\
             000000008084 2ec1"
                .replace(' ', "")
                + "0000000000000000"
                + "090a0b0c"
                + &hex(b"vysdesc")
        );
        assert_eq!(StreamDescription::decode(&b).unwrap(), linear());
        let b = sample().encode().unwrap();
        assert_eq!(b.len(), DESCRIPTION_HEADER + 4 + 7 + 32);
        assert_eq!(StreamDescription::decode(&b).unwrap(), sample());
    }

    /// The largest description fits, one more of anything does not.
    #[test]
    fn vysdesc_bounds() {
        let big = StreamDescription {
            channels: MAX_LISTED_CHANNELS as u32,
            frequencies: Frequencies::Listed(vec![1.0; MAX_LISTED_CHANNELS]),
            polarizations: vec![Polarization::I; MAX_POLARIZATIONS],
            config_name: "n".repeat(MAX_CONFIG_NAME),
            ..sample()
        };
        let b = big.encode().unwrap();
        assert_eq!(b.len(), MAX_DESCRIPTION);
        assert_eq!(StreamDescription::decode(&b).unwrap(), big);
        let mut d = big.clone();
        d.config_name.push('n');
        assert!(d.encode().is_err());
        let mut d = big.clone();
        d.polarizations.push(Polarization::Q);
        assert!(d.encode().is_err());
        let d = StreamDescription {
            channels: MAX_LISTED_CHANNELS as u32 + 1,
            frequencies: Frequencies::Listed(vec![1.0; MAX_LISTED_CHANNELS + 1]),
            ..sample()
        };
        assert!(d.encode().is_err());
        let d = StreamDescription {
            channels: 3,
            ..sample()
        };
        assert!(d.encode().is_err(), "4 listed for 3 channels");
        let d = StreamDescription {
            frequencies: Frequencies::Linear {
                first_hz: f64::NAN,
                width_hz: 1.0,
            },
            ..sample()
        };
        assert!(d.encode().is_err());
        assert!(StreamDescription {
            channels: 0,
            ..linear()
        }
        .encode()
        .is_err());
    }

    /// Hostile bytes: every field and length out of range is refused, a
    /// cut or grown block too, and no byte string panics.
    #[test]
    fn vysdesc_hostile_bytes() {
        let good = sample().encode().unwrap();
        let bad = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            StreamDescription::decode(&b)
        };
        assert!(bad(&|b| b[0] = 2).is_err(), "format");
        assert!(bad(&|b| b[1] = 7).is_err(), "data type");
        assert!(bad(&|b| b[2] = 4).is_err(), "epoch");
        assert!(bad(&|b| b[3] = 4).is_err(), "unit");
        assert!(bad(&|b| b[12] = 5).is_err(), "polarization count");
        assert!(bad(&|b| b[12] = 255).is_err(), "polarization count");
        assert!(bad(&|b| b[13] = 255).is_err(), "name length");
        assert!(bad(&|b| b[13] = 6).is_err(), "name length");
        assert!(bad(&|b| b[14] = 0).is_err(), "kind 0 with listed");
        assert!(bad(&|b| b[14] = 2).is_err(), "kind");
        assert!(bad(&|b| b[15] = 1).is_err(), "reserved");
        assert!(bad(&|b| b[45] = 1).is_err(), "reserved");
        assert!(bad(&|b| b[40] = 3).is_err(), "listed count");
        assert!(bad(&|b| b[41] = 0xff).is_err(), "listed count");
        assert!(bad(&|b| b[4] = 5).is_err(), "channels != listed");
        assert!(bad(&|b| b[24] = 1).is_err(), "first with listed");
        assert!(bad(&|b| b[DESCRIPTION_HEADER] = 0).is_err(), "pol code 0");
        assert!(bad(&|b| b[DESCRIPTION_HEADER] = 13).is_err(), "pol code 13");
        assert!(bad(&|b| b[DESCRIPTION_HEADER + 4] = 0xff).is_err(), "UTF-8");
        let nan = f64::NAN.to_bits().to_le_bytes();
        assert!(bad(&|b| {
            let n = b.len();
            b[n - 8..].copy_from_slice(&nan)
        })
        .is_err());
        assert!(bad(&|b| b.push(0)).is_err(), "grown");
        for n in 0..good.len() {
            assert!(StreamDescription::decode(&good[..n]).is_err(), "cut at {n}");
        }
        assert!(StreamDescription::decode(&vec![0; MAX_DESCRIPTION + 1]).is_err());
        // every single-byte change of a valid block: an error or a
        // description that encodes to those very bytes, never a panic
        let rounds = if cfg!(miri) { 4 } else { 256 };
        for i in 0..good.len() {
            for v in (0..=255u8).step_by(256 / rounds) {
                let mut b = good.clone();
                b[i] = v;
                if let Ok(d) = StreamDescription::decode(&b) {
                    assert_eq!(d.encode().unwrap(), b);
                }
            }
        }
    }

    #[test]
    fn vysdesc_names() {
        for t in [
            DataType::Raw,
            DataType::Complex64,
            DataType::Complex128,
            DataType::ComplexInt16,
            DataType::ComplexInt32,
            DataType::Float32,
            DataType::Float64,
        ] {
            assert_eq!(t.name().parse::<DataType>().unwrap(), t);
            assert_eq!(DataType::from_code(t.code()), Some(t));
        }
        assert_eq!("rl".parse::<Polarization>().unwrap(), Polarization::RL);
        assert!("QQ".parse::<Polarization>().is_err());
        assert_eq!("ms".parse::<TimeUnit>().unwrap(), TimeUnit::Milliseconds);
        assert_eq!("MJD".parse::<TimeEpoch>().unwrap(), TimeEpoch::Mjd);
        assert_eq!(linear().frequency(2), Some(2.0e9 - 2.0e6));
        assert_eq!(sample().frequency(3), Some(1.5e9));
        assert_eq!(sample().frequency(4), None);
    }
}
