//! The per-job half of the UDP datagram key.
//!
//! The job key alone is not enough to keep jobs apart on the network: one
//! `SPLITRT_JOB_KEY` may serve several jobs (one `export` before two
//! `mpirun`s), and every job numbers its datagrams from 1, so a datagram
//! captured from one job would carry a valid tag, and a new datagram
//! number, in the next. Rank 0 therefore draws a fresh random [`JobNonce`]
//! for every job and sends it with its UDP endpoint through the bootstrap
//! rendezvous (whose every frame is authenticated with the job key, see
//! [`crate::bootstrap::auth`]); every rank keys its datagrams with
//! [`JobNonce::datagram_key`], the job key mixed with that value. Only
//! rank 0's endpoint carries it, so the rendezvous grows by one value, not
//! one per rank.
//!
//! ```
//! use splitrt_runtime::fabric::udp::job_nonce::JobNonce;
//! use splitrt_runtime::key::JobKey;
//! let key = JobKey::generate().unwrap();
//! let (a, b) = (JobNonce::generate().unwrap(), JobNonce::generate().unwrap());
//! // two jobs under one job key tag their datagrams differently
//! assert_ne!(a.datagram_key(&key), b.datagram_key(&key));
//! // the value travels after the address in rank 0's endpoint
//! let e = format!("127.0.0.1:4000 {}", a.to_hex());
//! assert_eq!(JobNonce::from_rank0_endpoint(e.as_bytes()).unwrap(), a);
//! assert!(JobNonce::from_rank0_endpoint(b"127.0.0.1:4000").is_err());
//! ```

use crate::key::JobKey;
use crate::{Error, Result};

/// Bytes of a [`JobNonce`].
pub const NONCE_LEN: usize = 32;

/// A random value drawn by rank 0 for one job, known to all its ranks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobNonce([u8; NONCE_LEN]);

impl std::fmt::Debug for JobNonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobNonce({})", self.to_hex())
    }
}

impl JobNonce {
    /// A fresh value from the operating system's random source.
    pub fn generate() -> Result<JobNonce> {
        let mut n = [0u8; NONCE_LEN];
        getrandom::getrandom(&mut n).map_err(|e| {
            Error::io(
                "reading random bytes for the UDP job nonce",
                std::io::Error::other(e.to_string()),
            )
        })?;
        Ok(JobNonce(n))
    }

    /// The 64-hex-digit form sent in rank 0's endpoint.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse the 64-hex-digit form; `None` if it is not one.
    pub fn from_hex(s: &str) -> Option<JobNonce> {
        if s.len() != 2 * NONCE_LEN || !s.is_ascii() {
            return None;
        }
        let mut n = [0u8; NONCE_LEN];
        for (i, b) in n.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(JobNonce(n))
    }

    /// The value in rank 0's endpoint (`address nonce`), or an error
    /// naming what was wrong with it.
    pub fn from_rank0_endpoint(e: &[u8]) -> Result<JobNonce> {
        let s = std::str::from_utf8(e).unwrap_or("");
        let mut parts = s.split(' ');
        let _addr = parts.next();
        let bad = |why: &str| {
            Error::bootstrap(format!(
                "rank 0 sent {why} with its UDP endpoint ({} B), so this rank cannot \
                 derive the job's datagram key; are all ranks running the same splitrt?",
                e.len()
            ))
            .with_peer(0)
        };
        match (parts.next(), parts.next()) {
            (None, _) => Err(bad("no job nonce")),
            (Some(n), None) => Self::from_hex(n).ok_or_else(|| bad("a malformed job nonce")),
            (Some(_), Some(_)) => Err(bad("a malformed job nonce")),
        }
    }

    /// The key this job's datagrams are tagged with: `key` mixed with this
    /// value, so another job under the same job key (another value) can
    /// neither forge nor replay them.
    pub fn datagram_key(&self, key: &JobKey) -> JobKey {
        key.mixed("splitrt udp job nonce", &self.0)
    }
}

/// The address part of an endpoint (`address` or `address nonce`).
pub(crate) fn address_part(e: &[u8]) -> &[u8] {
    match e.iter().position(|&b| b == b' ') {
        Some(i) => &e[..i],
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_job_nonce_rejects_malformed_values() {
        let n = JobNonce::generate().unwrap();
        let ok = format!("10.0.0.1:5 {}", n.to_hex());
        assert_eq!(JobNonce::from_rank0_endpoint(ok.as_bytes()).unwrap(), n);
        for bad in [
            "10.0.0.1:5".to_string(),
            "10.0.0.1:5 ".to_string(),
            format!("10.0.0.1:5 {}", &n.to_hex()[1..]),
            format!("10.0.0.1:5 {}x", &n.to_hex()[1..]),
            format!("10.0.0.1:5 {} extra", n.to_hex()),
            format!("10.0.0.1:5 {}", "é".repeat(32)),
        ] {
            let e = JobNonce::from_rank0_endpoint(bad.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("job nonce"), "{bad:?}: {e}");
        }
        assert!(JobNonce::from_rank0_endpoint(&[0xff, b' ', 0xfe]).is_err());
        assert_eq!(address_part(ok.as_bytes()), b"10.0.0.1:5");
        assert_eq!(address_part(b"10.0.0.1:5"), b"10.0.0.1:5");
    }

    #[test]
    fn udp_job_nonce_changes_the_datagram_key() {
        let k = JobKey::generate().unwrap();
        let n = JobNonce::generate().unwrap();
        assert_eq!(n.datagram_key(&k), n.datagram_key(&k));
        assert_ne!(n.datagram_key(&k), k);
        assert_ne!(
            n.datagram_key(&k).derive("splitrt udp datagram mac"),
            k.derive("splitrt udp datagram mac")
        );
    }
}
