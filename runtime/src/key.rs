//! The job key: a 256-bit secret made fresh for every job (by `splitrt-run`,
//! or by rank 0 under srun / mpirun, or given as `SPLITRT_JOB_KEY`). Every
//! bootstrap connection proves it holds the key before anything it sends is
//! acted on, and everything else a job needs to keep apart from other jobs
//! (shared-memory file names, later the network fabric's packet tags) is
//! derived from it. The key itself never crosses the wire.

use crate::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Environment variable carrying the job key (64 hex digits) to the ranks.
pub const ENV_JOB_KEY: &str = "SPLITRT_JOB_KEY";

/// HMAC-SHA256, the MAC every derivation and proof uses.
pub(crate) type HmacSha256 = Hmac<Sha256>;

/// A job's shared secret.
///
/// ```
/// use splitrt_runtime::key::JobKey;
/// let k = JobKey::generate().unwrap();
/// let same = JobKey::from_hex(&k.to_hex()).unwrap();
/// assert_eq!(k.file_tag(), same.file_tag());
/// assert!(JobKey::from_hex("not a key").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey([u8; 32]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never print the secret
        write!(f, "JobKey(tag {})", self.file_tag())
    }
}

impl JobKey {
    /// A fresh random key from the operating system.
    pub fn generate() -> Result<JobKey> {
        let mut k = [0u8; 32];
        getrandom::getrandom(&mut k).map_err(|e| {
            Error::io(
                "reading random bytes for the job key",
                std::io::Error::other(e.to_string()),
            )
        })?;
        Ok(JobKey(k))
    }

    /// Parse the 64-hex-digit form (as in `SPLITRT_JOB_KEY`).
    pub fn from_hex(s: &str) -> Result<JobKey> {
        let s = s.trim();
        let bad = || {
            Error::config(format!(
                "{ENV_JOB_KEY} must be 64 hexadecimal digits (a 256-bit key, e.g. from \
                 `openssl rand -hex 32`); got {} characters",
                s.len()
            ))
        };
        if s.len() != 64 || !s.is_ascii() {
            return Err(bad());
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(JobKey(k))
    }

    /// The 64-hex-digit form.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// HMAC-SHA256 of `parts` (concatenated) under a key derived from this
    /// key for `purpose`, so proofs made for one purpose never serve another.
    pub(crate) fn mac(&self, purpose: &str, parts: &[&[u8]]) -> [u8; 32] {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(purpose.as_bytes());
        m.update(&[0]);
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// A 256-bit subkey for `purpose` (e.g. the network fabric's datagram
    /// MAC key): independent of every other purpose's.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        self.mac(purpose, &[])
    }

    /// A new key: this one mixed with `value` for `purpose` (e.g. the UDP
    /// fabric's per-job nonce), so keys made with different values are
    /// independent although made from one job key.
    pub(crate) fn mixed(&self, purpose: &str, value: &[u8]) -> JobKey {
        JobKey(self.mac(purpose, &[value]))
    }

    /// A short public name for this key (12 hex digits): part of the job's
    /// shared-memory file names, so two jobs given the same job id never
    /// touch each other's files. Reveals nothing about the key.
    pub fn file_tag(&self) -> String {
        self.mac("splitrt file tag", &[])[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Constant-time comparison of two MACs.
pub fn same_mac(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_rejects() {
        let k = JobKey::generate().unwrap();
        assert_eq!(JobKey::from_hex(&k.to_hex()).unwrap(), k);
        assert!(JobKey::from_hex("").is_err());
        assert!(JobKey::from_hex(&"g".repeat(64)).is_err());
        assert!(JobKey::from_hex(&"a".repeat(63)).is_err());
        assert!(JobKey::from_hex(&"é".repeat(32)).is_err());
        assert_ne!(JobKey::generate().unwrap(), k, "keys are fresh");
    }

    #[test]
    fn purposes_are_separated_and_debug_hides_the_key() {
        let k = JobKey::from_hex(&"ab".repeat(32)).unwrap();
        assert_ne!(k.mac("a", &[b"x"]), k.mac("b", &[b"x"]));
        assert_ne!(k.mac("a", &[b"x"]), k.mac("ax", &[]));
        assert!(!format!("{k:?}").contains(&"ab".repeat(8)));
        assert!(same_mac(&[1, 2], &[1, 2]) && !same_mac(&[1, 2], &[1, 3]));
    }
}
