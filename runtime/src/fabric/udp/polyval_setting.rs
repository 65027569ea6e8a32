//! The setting that chooses the UDP full tag's POLYVAL
//! ([`ENV_UDP_POLYVAL`]): read by the tag itself once per process, and
//! checked by [`crate::config::Config`] at start.

use crate::{Error, Result};

/// Which POLYVAL the UDP full tag uses: `auto`, `512`, `256` or `crate`
/// ([`UdpPolyval`]; read once per process).
pub const ENV_UDP_POLYVAL: &str = "SPLITRT_UDP_POLYVAL";

/// Which POLYVAL the UDP full tag uses ([`ENV_UDP_POLYVAL`]). A backend
/// the CPU lacks is never used: `512` falls back as `auto` does, `256`
/// to the crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UdpPolyval {
    /// 512-bit VPCLMULQDQ where the CPU has it, else 256-bit, else the
    /// `polyval` crate.
    #[default]
    Auto,
    /// 512-bit registers (AVX-512) where the CPU has them.
    W512,
    /// 256-bit registers (AVX2), also on a CPU with AVX-512 (some Intel
    /// cores lower their clock on 512-bit code).
    W256,
    /// The `polyval` crate (128-bit PCLMULQDQ) at every length.
    Crate,
}

impl std::str::FromStr for UdpPolyval {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "auto" => Ok(UdpPolyval::Auto),
            "512" => Ok(UdpPolyval::W512),
            "256" => Ok(UdpPolyval::W256),
            "crate" => Ok(UdpPolyval::Crate),
            _ => Err(Error::config(format!(
                "{ENV_UDP_POLYVAL}={s:?}: expected 'auto', '512', '256' or 'crate'"
            ))),
        }
    }
}
