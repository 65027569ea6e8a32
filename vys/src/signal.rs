//! The vys signal message: "what" (one data product: station pair,
//! spectral window, stokes product, channel count, configuration) and
//! "where" (producer, and a batch of spectra: buffer offset, timestamp,
//! sequence id, digest), in one datagram, authenticated by the stream key.
//!
//! Fixed little-endian layout, version first; the sizes are checked at
//! compile time and the bytes by golden tests, so the format cannot drift
//! unnoticed (vysmaw's changed size between versions):
//!
//! ```text
//!  0 version u16        2 digest kind u8   3 entry count u8
//!  4 channels u32       8 producer id u64 16 producer address [u8; 16] (IPv6 or v4-mapped)
//! 32 producer port u16 34 stations [u16; 2] 38 spectral window u16
//! 40 stokes u16        42 description bytes u16 (0: none)
//! 44 description epoch u32 (0: the producer set none)
//! 48 configuration id u64                 56 spectrum bytes u32  60 reserved u32
//! 64 instance u64 (random, drawn at each producer start)
//! 72 instance start u64 (ns since the Unix epoch)
//! 80 signal sequence number u64 (of this instance, from 1)
//! 88 entries: { offset u64, timestamp u64, sequence id u64, digest u64 } x count
//! .. the stream description (description bytes; see `description`)
//! .. tag [u8; 16]: keyed BLAKE3 (stream key) of everything before it
//! ```
//!
//! **Descriptions** (version 4). Every signal names the epoch of its
//! producer's stream description in force (the 4 bytes were reserved:
//! the signal did not grow); the description itself rides after the
//! entries of a signal, usually one with no entries, which the producer
//! sends at start, on each change and periodically. It is checked as
//! hostile input like every other field ([`StreamDescription::decode`]).
//!
//! **Freshness.** The instance, its start and the sequence number ride
//! under the tag, so nobody without the key can make a signal look new: a
//! consumer delivers each signal of an instance once and drops the same
//! bytes coming again (a replay by a stranger who recorded the group, or
//! a duplicate of the network), see `consumer`'s replay window.
//!
//! **Heartbeats.** A signal with no entries (version 3) says only that
//! its producer instance is alive: an idle producer sends one every
//! heartbeat interval, so a consumer can tell a dead producer (silent
//! past its configured silence: `ProducerGone`) from a quiet one. Its
//! product fields are zero.
//!
//! **What every version keeps** (so a datagram is authenticated before
//! its version is believed): a signal is one datagram of at most
//! [`MAX_DATAGRAM`] bytes whose last [`SIGNAL_TAG`] bytes are the keyed
//! BLAKE3 of all before them, version 1 as this one. [`Signal::decode`]
//! checks the tag first: bytes without the key's tag are foreign (or
//! malformed), whatever their first two bytes say, and only an authentic
//! signal of another version is a version mismatch.

use super::description::{StreamDescription, MAX_DESCRIPTION};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Wire format version of this code (4: the stream description's epoch
/// and bytes joined the header, the description after the entries; 3: a
/// signal may carry no entries, a heartbeat; 2: the instance, its start and the sequence number joined
/// the header; version 1 had a 64-byte header).
pub const SIGNAL_VERSION: u16 = 4;
/// Fixed header bytes.
pub const SIGNAL_HEADER: usize = 88;
/// Bytes per entry.
pub const SIGNAL_ENTRY: usize = 32;
/// Tag bytes.
pub const SIGNAL_TAG: usize = 16;
/// Longest signal datagram of any version: one 1500-byte Ethernet frame
/// (1472 bytes of UDP payload). Longer datagrams are dropped unread.
pub const MAX_DATAGRAM: usize = 1472;
/// Most entries in one signal: the message fits [`MAX_DATAGRAM`].
pub const MAX_ENTRIES: usize = (MAX_DATAGRAM - SIGNAL_HEADER - SIGNAL_TAG) / SIGNAL_ENTRY;

static_assertions::const_assert_eq!(SIGNAL_HEADER % 8, 0);
static_assertions::const_assert!(
    SIGNAL_HEADER + MAX_ENTRIES * SIGNAL_ENTRY + SIGNAL_TAG <= MAX_DATAGRAM
);
static_assertions::const_assert!(MAX_ENTRIES <= u8::MAX as usize);
// A description travels in a signal with no entries: it fits one datagram
// with the signal's header and tag.
static_assertions::const_assert!(SIGNAL_HEADER + MAX_DESCRIPTION + SIGNAL_TAG <= MAX_DATAGRAM);

/// The digest a producer computed over each spectrum's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DigestKind {
    /// No digest: the head / tail sequence ids alone validate a read.
    None = 0,
    /// CRC-32C (hardware accelerated where available).
    Crc32c = 1,
    /// xxHash XXH3-64.
    Xxh3 = 2,
    /// MD5, first 8 bytes (for compatibility with vysmaw's digests).
    Md5 = 3,
}

impl DigestKind {
    fn from_u8(b: u8) -> Option<DigestKind> {
        Some(match b {
            0 => DigestKind::None,
            1 => DigestKind::Crc32c,
            2 => DigestKind::Xxh3,
            3 => DigestKind::Md5,
            _ => return None,
        })
    }

    /// The digest of `data` (0 for [`DigestKind::None`]).
    pub fn of(self, data: &[u8]) -> u64 {
        match self {
            DigestKind::None => 0,
            DigestKind::Crc32c => crc32c::crc32c(data) as u64,
            DigestKind::Xxh3 => xxhash_rust::xxh3::xxh3_64(data),
            DigestKind::Md5 => {
                use md5::Digest;
                let d = md5::Md5::digest(data);
                u64::from_le_bytes(d[..8].try_into().expect("16-byte digest"))
            }
        }
    }
}

impl std::str::FromStr for DigestKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(DigestKind::None),
            "crc32c" => Ok(DigestKind::Crc32c),
            "xxh3" | "xxhash" => Ok(DigestKind::Xxh3),
            "md5" => Ok(DigestKind::Md5),
            _ => Err(format!("unknown digest '{s}': none, crc32c, xxh3, md5")),
        }
    }
}

/// One spectrum announced by a signal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpectrumInfo {
    /// Offset of its buffer in the producer's exported ring.
    pub offset: u64,
    /// Timestamp (producer's units, e.g. ns since the epoch).
    pub timestamp: u64,
    /// Sequence id, also written at the head and tail of the buffer.
    pub seq: u64,
    /// Digest of the data ([`DigestKind`] of the signal).
    pub digest: u64,
}

/// A decoded signal message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Digest the entries carry.
    pub digest: DigestKind,
    /// Channels per spectrum.
    pub channels: u32,
    /// Producer identity.
    pub producer: u64,
    /// Where the producer serves reads.
    pub address: SocketAddr,
    /// Station (antenna) pair.
    pub stations: [u16; 2],
    /// Spectral window.
    pub spectral_window: u16,
    /// Stokes (polarization) product.
    pub stokes: u16,
    /// Correlator configuration id.
    pub config: u64,
    /// Bytes of spectrum data per buffer.
    pub spectrum_bytes: u32,
    /// The producer instance: random, drawn each time a producer starts
    /// (a producer id may be reused; an instance is not).
    pub instance: u64,
    /// When the instance started (ns since the Unix epoch): of two
    /// instances of one producer id, consumers take the later one's.
    pub started: u64,
    /// This signal's number among its instance's (from 1): a consumer
    /// takes each number of an instance once.
    pub sequence: u64,
    /// The spectra (0 ..= [`MAX_ENTRIES`]; none: a heartbeat).
    pub entries: Vec<SpectrumInfo>,
    /// Epoch of the producer's stream description in force (0: none
    /// set): the description of these spectra.
    pub description_epoch: u32,
    /// The stream description of that epoch, if this signal carries it
    /// (then it has room for fewer entries: at most
    /// [`Signal::max_entries_with`]).
    pub description: Option<Arc<StreamDescription>>,
}

/// Why a datagram is not a signal this consumer can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignalError {
    /// Another wire format version.
    Version {
        /// The version it carries.
        got: u16,
    },
    /// The tag does not verify under the stream key (another stream, a
    /// stranger, or corruption).
    Foreign,
    /// Lengths or fields out of range.
    Malformed(String),
}

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignalError::Version { got } => write!(
                f,
                "signal message version {got}, this consumer reads version {SIGNAL_VERSION}"
            ),
            SignalError::Foreign => write!(f, "signal message not signed with this stream's key"),
            SignalError::Malformed(m) => write!(f, "malformed signal message: {m}"),
        }
    }
}

fn tag(key: &[u8; 32], data: &[u8]) -> [u8; SIGNAL_TAG] {
    let h = blake3::keyed_hash(key, data);
    let mut t = [0u8; SIGNAL_TAG];
    t.copy_from_slice(&h.as_bytes()[..SIGNAL_TAG]);
    t
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

impl Signal {
    /// Whether this is a heartbeat (no spectra: the instance is alive).
    pub fn is_heartbeat(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries a signal carrying `description` has room for.
    pub fn max_entries_with(description: &[u8]) -> usize {
        (MAX_DATAGRAM - SIGNAL_HEADER - SIGNAL_TAG).saturating_sub(description.len()) / SIGNAL_ENTRY
    }

    /// Encode and sign with the stream key. Panics if there are more than
    /// [`MAX_ENTRIES`] entries, or more than a description it carries
    /// leaves room for, or that description does not encode (a
    /// producer's own mistake: `Producer` checks its description when it
    /// is set); none is a heartbeat.
    pub fn encode(&self, key: &[u8; 32]) -> Vec<u8> {
        let mut b = Vec::new();
        self.encode_into(key, &mut b);
        b
    }

    /// [`encode`](Self::encode) into `b` (its allocation reused).
    pub fn encode_into(&self, key: &[u8; 32], b: &mut Vec<u8>) {
        let n = self.entries.len();
        assert!(
            n <= MAX_ENTRIES,
            "a signal carries 0..={MAX_ENTRIES} spectra, not {n}"
        );
        let desc = match &self.description {
            Some(d) => d.encode().expect("a description checked when it was set"),
            None => Vec::new(),
        };
        assert!(
            n <= Signal::max_entries_with(&desc),
            "{n} spectra and a description of {} B do not fit a signal",
            desc.len()
        );
        b.clear();
        b.resize(
            SIGNAL_HEADER + n * SIGNAL_ENTRY + desc.len() + SIGNAL_TAG,
            0,
        );
        b[0..2].copy_from_slice(&SIGNAL_VERSION.to_le_bytes());
        b[2] = self.digest as u8;
        b[3] = n as u8;
        b[4..8].copy_from_slice(&self.channels.to_le_bytes());
        b[8..16].copy_from_slice(&self.producer.to_le_bytes());
        let ip = match self.address.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        b[16..32].copy_from_slice(&ip.octets());
        b[32..34].copy_from_slice(&self.address.port().to_le_bytes());
        b[34..36].copy_from_slice(&self.stations[0].to_le_bytes());
        b[36..38].copy_from_slice(&self.stations[1].to_le_bytes());
        b[38..40].copy_from_slice(&self.spectral_window.to_le_bytes());
        b[40..42].copy_from_slice(&self.stokes.to_le_bytes());
        b[42..44].copy_from_slice(&(desc.len() as u16).to_le_bytes());
        b[44..48].copy_from_slice(&self.description_epoch.to_le_bytes());
        b[48..56].copy_from_slice(&self.config.to_le_bytes());
        b[56..60].copy_from_slice(&self.spectrum_bytes.to_le_bytes());
        b[64..72].copy_from_slice(&self.instance.to_le_bytes());
        b[72..80].copy_from_slice(&self.started.to_le_bytes());
        b[80..88].copy_from_slice(&self.sequence.to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let o = SIGNAL_HEADER + i * SIGNAL_ENTRY;
            b[o..o + 8].copy_from_slice(&e.offset.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&e.timestamp.to_le_bytes());
            b[o + 16..o + 24].copy_from_slice(&e.seq.to_le_bytes());
            b[o + 24..o + 32].copy_from_slice(&e.digest.to_le_bytes());
        }
        let at = SIGNAL_HEADER + n * SIGNAL_ENTRY;
        b[at..at + desc.len()].copy_from_slice(&desc);
        let end = b.len() - SIGNAL_TAG;
        let t = tag(key, &b[..end]);
        b[end..].copy_from_slice(&t);
    }

    /// Decode a datagram: the tag first (bytes that are not signed with
    /// the stream key are foreign whatever they claim to be), then the
    /// version (an authentic signal of another version says so rather
    /// than being misread), then every field.
    pub fn decode(b: &[u8], key: &[u8; 32]) -> Result<Signal, SignalError> {
        if b.len() < 2 + SIGNAL_TAG || b.len() > MAX_DATAGRAM {
            return Err(SignalError::Malformed(format!(
                "{} B (a signal has {}..={MAX_DATAGRAM})",
                b.len(),
                2 + SIGNAL_TAG
            )));
        }
        let end = b.len() - SIGNAL_TAG;
        let t = tag(key, &b[..end]);
        if !splitrt_runtime::key::same_mac(&t, &b[end..]) {
            return Err(SignalError::Foreign);
        }
        let version = u16_at(b, 0);
        if version != SIGNAL_VERSION {
            return Err(SignalError::Version { got: version });
        }
        if b.len() < SIGNAL_HEADER + SIGNAL_TAG {
            return Err(SignalError::Malformed(format!(
                "{} B is too short",
                b.len()
            )));
        }
        let n = b[3] as usize;
        let dlen = u16_at(b, 42) as usize;
        if n > MAX_ENTRIES
            || dlen > MAX_DESCRIPTION
            || end != SIGNAL_HEADER + n * SIGNAL_ENTRY + dlen
        {
            return Err(SignalError::Malformed(format!(
                "{n} entries and a description of {dlen} B in {} B",
                b.len()
            )));
        }
        let description = match dlen {
            0 => None,
            _ => {
                let at = SIGNAL_HEADER + n * SIGNAL_ENTRY;
                let d = StreamDescription::decode(&b[at..at + dlen])
                    .map_err(|e| SignalError::Malformed(e.to_string()))?;
                Some(Arc::new(d))
            }
        };
        let digest = DigestKind::from_u8(b[2])
            .ok_or_else(|| SignalError::Malformed(format!("digest kind {}", b[2])))?;
        let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[16..32]).expect("16 bytes"));
        let ip = match ip.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip),
        };
        let entries = (0..n)
            .map(|i| {
                let o = SIGNAL_HEADER + i * SIGNAL_ENTRY;
                SpectrumInfo {
                    offset: u64_at(b, o),
                    timestamp: u64_at(b, o + 8),
                    seq: u64_at(b, o + 16),
                    digest: u64_at(b, o + 24),
                }
            })
            .collect();
        Ok(Signal {
            digest,
            channels: u32_at(b, 4),
            producer: u64_at(b, 8),
            address: SocketAddr::new(ip, u16_at(b, 32)),
            stations: [u16_at(b, 34), u16_at(b, 36)],
            spectral_window: u16_at(b, 38),
            stokes: u16_at(b, 40),
            config: u64_at(b, 48),
            spectrum_bytes: u32_at(b, 56),
            instance: u64_at(b, 64),
            started: u64_at(b, 72),
            sequence: u64_at(b, 80),
            entries,
            description_epoch: u32_at(b, 44),
            description,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [0x5a; 32];

    fn sample() -> Signal {
        Signal {
            digest: DigestKind::Crc32c,
            channels: 1024,
            producer: 0x0102_0304_0506_0708,
            address: "10.231.7.11:4242".parse().unwrap(),
            stations: [3, 17],
            spectral_window: 5,
            stokes: 2,
            config: 0xdead_beef,
            spectrum_bytes: 8192,
            instance: 0x1122_3344_5566_7788,
            started: 1_700_000_000_000_000_000,
            sequence: 0x0a0b,
            description_epoch: 0,
            description: None,
            entries: vec![
                SpectrumInfo {
                    offset: 0x1000,
                    timestamp: 1_700_000_000_000,
                    seq: 41,
                    digest: 0xabcd,
                },
                SpectrumInfo {
                    offset: 0x3000,
                    timestamp: 1_700_000_000_500,
                    seq: 42,
                    digest: 0x1234,
                },
            ],
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The exact bytes: a change of layout fails here, on purpose.
    ///
    /// Version 4 (issue 27, self-describing spectra): the version word is
    /// 4; bytes 42..48, reserved before, hold the description's length and
    /// epoch (both 0 here: no description, so these bytes are as they
    /// were); the tag changed with the version word.
    ///
    /// Version 3 (issue 27): the version word is 3 (a signal may carry
    /// no entries, a heartbeat); nothing else moved.
    ///
    /// Version 2 (issue 24): the version word is 2 and the header grew
    /// from 64 to 88 bytes: instance (8877..11), instance start
    /// (00002a36fe9c9717 = 1.7e18 ns) and signal sequence number (0b0a..)
    /// after the first 64 bytes, which are unchanged but for the version;
    /// the entries are the same bytes as version 1's; the tag changed
    /// because what it covers did. Version 1's bytes are in
    /// `tests/vys_replay.rs` (an authentic signal of another version).
    #[test]
    fn golden_bytes() {
        let b = sample().encode(&KEY);
        assert_eq!(b.len(), SIGNAL_HEADER + 2 * SIGNAL_ENTRY + SIGNAL_TAG);
        assert_eq!(
            hex(&b[..SIGNAL_HEADER]),
            "0400010200040000\
             0807060504030201\
             00000000000000000000ffff0ae7070b\
             921003001100050002000000\
             00000000\
             efbeadde00000000\
             0020000000000000\
             8877665544332211\
             00002a36fe9c9717\
             0b0a000000000000"
        );
        assert_eq!(
            hex(&b[SIGNAL_HEADER..SIGNAL_HEADER + SIGNAL_ENTRY]),
            "0010000000000000\
             0068e5cf8b010000\
             2900000000000000\
             cdab000000000000"
        );
        let second = SIGNAL_HEADER + SIGNAL_ENTRY;
        assert_eq!(
            hex(&b[second..second + SIGNAL_ENTRY]),
            "0030000000000000\
             f469e5cf8b010000\
             2a00000000000000\
             3412000000000000"
        );
        // the tag: the first 16 bytes of keyed BLAKE3 over all before it,
        // pinned, so a change of MAC or of what it covers is seen too
        let end = second + SIGNAL_ENTRY;
        assert_eq!(hex(&b[end..]), "e66717dd229f3a8d1910e3d1d2b3c596");
        assert_eq!(
            &b[end..],
            &blake3::keyed_hash(&KEY, &b[..end]).as_bytes()[..SIGNAL_TAG]
        );
        assert_eq!(Signal::decode(&b, &KEY).unwrap(), sample());
    }

    #[test]
    fn version_foreign_and_malformed_are_told_apart() {
        let b = sample().encode(&KEY);
        // an authentic signal of another version: a version mismatch
        let mut v = b.clone();
        v[0] = 1;
        let end = v.len() - SIGNAL_TAG;
        let t = tag(&KEY, &v[..end]);
        v[end..].copy_from_slice(&t);
        assert_eq!(
            Signal::decode(&v, &KEY),
            Err(SignalError::Version { got: 1 })
        );
        // another version claimed without the key's tag: foreign, not a
        // version mismatch (the tag is checked first)
        let mut v = b.clone();
        v[0] = 7;
        assert_eq!(Signal::decode(&v, &KEY), Err(SignalError::Foreign));
        assert_eq!(Signal::decode(&[0xff; 3], &KEY).map(|_| ()), {
            Err(SignalError::Malformed(
                "3 B (a signal has 18..=1472)".into(),
            ))
        });
        let mut big = b.clone();
        big.resize(MAX_DATAGRAM + 1, 0);
        assert!(matches!(
            Signal::decode(&big, &KEY),
            Err(SignalError::Malformed(_))
        ));
        assert_eq!(Signal::decode(&b, &[1; 32]), Err(SignalError::Foreign));
        let mut m = b.clone();
        m[70] ^= 1;
        assert_eq!(Signal::decode(&m, &KEY), Err(SignalError::Foreign));
        assert!(matches!(
            Signal::decode(&b[..10], &KEY),
            Err(SignalError::Malformed(_))
        ));
        // cut short, it is no longer signed
        assert_eq!(Signal::decode(&b[..40], &KEY), Err(SignalError::Foreign));
        // a signed message with an inconsistent count is still refused
        let mut s = sample();
        s.entries.truncate(1);
        let mut one = s.encode(&KEY);
        one[3] = 2;
        let end = one.len() - SIGNAL_TAG;
        let t = tag(&KEY, &one[..end]);
        one[end..].copy_from_slice(&t);
        assert!(matches!(
            Signal::decode(&one, &KEY),
            Err(SignalError::Malformed(_))
        ));
    }

    fn described() -> Arc<StreamDescription> {
        use super::super::description::*;
        Arc::new(StreamDescription {
            data_type: DataType::Complex64,
            channels: 1024,
            frequencies: Frequencies::Linear {
                first_hz: 1.0e9,
                width_hz: 1.0e6,
            },
            polarizations: vec![Polarization::RR, Polarization::LL],
            baseband: 1,
            subband: 2,
            config_name: "cfg".into(),
            time_epoch: TimeEpoch::Unix,
            time_unit: TimeUnit::Nanoseconds,
            integration_ns: 5_000_000,
        })
    }

    fn sign(b: &mut [u8]) {
        let end = b.len() - SIGNAL_TAG;
        let t = tag(&KEY, &b[..end]);
        b[end..].copy_from_slice(&t);
    }

    /// A signal with a description (with entries or without) round-trips;
    /// its epoch sits in the formerly reserved bytes 44..48 (the header
    /// did not grow) and the description after the entries.
    #[test]
    fn vysdesc_signal_carries_a_description() {
        let mut s = sample();
        s.description_epoch = 0x0102_0304;
        let b = s.encode(&KEY);
        assert_eq!(b.len(), SIGNAL_HEADER + 2 * SIGNAL_ENTRY + SIGNAL_TAG);
        assert_eq!(hex(&b[42..48]), "000004030201");
        assert_eq!(Signal::decode(&b, &KEY).unwrap(), s);
        s.description = Some(described());
        let d = described().encode().unwrap();
        let b = s.encode(&KEY);
        assert_eq!(
            b.len(),
            SIGNAL_HEADER + 2 * SIGNAL_ENTRY + d.len() + SIGNAL_TAG
        );
        assert_eq!(u16_at(&b, 42) as usize, d.len());
        let at = SIGNAL_HEADER + 2 * SIGNAL_ENTRY;
        assert_eq!(&b[at..at + d.len()], &d[..]);
        assert_eq!(Signal::decode(&b, &KEY).unwrap(), s);
        s.entries.clear();
        let b = s.encode(&KEY);
        let got = Signal::decode(&b, &KEY).unwrap();
        assert!(got.is_heartbeat());
        assert_eq!(got, s);
        assert_eq!(Signal::max_entries_with(&[]), MAX_ENTRIES);
        assert!(Signal::max_entries_with(&d) < MAX_ENTRIES);
    }

    /// Authentic signals whose description bytes lie (a producer with the
    /// key, or a bug) are malformed, never a panic: a length past the
    /// datagram, past the bound, short of the block, a bad block.
    #[test]
    fn vysdesc_signal_hostile_description() {
        let mut s = sample();
        s.description = Some(described());
        s.description_epoch = 1;
        let good = s.encode(&KEY);
        let dlen = u16_at(&good, 42);
        for claim in [
            dlen + 1,
            dlen - 1,
            0,
            u16::MAX,
            (MAX_DESCRIPTION + 1) as u16,
        ] {
            let mut b = good.clone();
            b[42..44].copy_from_slice(&claim.to_le_bytes());
            sign(&mut b);
            assert!(
                matches!(Signal::decode(&b, &KEY), Err(SignalError::Malformed(_))),
                "claimed {claim}"
            );
        }
        // a bad block inside (an unknown data type), signed
        let mut b = good.clone();
        b[SIGNAL_HEADER + 2 * SIGNAL_ENTRY + 1] = 99;
        sign(&mut b);
        assert!(matches!(
            Signal::decode(&b, &KEY),
            Err(SignalError::Malformed(_))
        ));
        // every byte of the block changed, signed again: decoded or
        // malformed, never a panic
        let at = SIGNAL_HEADER + 2 * SIGNAL_ENTRY;
        let step = if cfg!(miri) { 64 } else { 1 };
        for i in (at..good.len() - SIGNAL_TAG).step_by(step) {
            let mut b = good.clone();
            b[i] ^= 0xa5;
            sign(&mut b);
            let _ = Signal::decode(&b, &KEY);
        }
    }

    /// A heartbeat: the header and the tag, no entries; it round-trips.
    #[test]
    fn a_heartbeat_has_no_entries() {
        let mut s = sample();
        s.entries.clear();
        let b = s.encode(&KEY);
        assert_eq!(b.len(), SIGNAL_HEADER + SIGNAL_TAG);
        assert_eq!(b[3], 0);
        let d = Signal::decode(&b, &KEY).unwrap();
        assert!(d.is_heartbeat());
        assert_eq!(d, s);
    }

    #[test]
    fn digests_differ_and_repeat() {
        let d = vec![7u8; 4096];
        for k in [DigestKind::Crc32c, DigestKind::Xxh3, DigestKind::Md5] {
            assert_eq!(k.of(&d), k.of(&d));
            let mut e = d.clone();
            e[100] ^= 1;
            assert_ne!(k.of(&d), k.of(&e), "{k:?}");
        }
        assert_eq!(DigestKind::None.of(&d), 0);
    }
}
