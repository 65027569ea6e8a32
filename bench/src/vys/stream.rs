//! The stream settings the driver hands both ranks through their
//! environment (the launcher forwards it to remote hosts too): the stream
//! key, where the job runs, and the base of the signal ports; and the
//! multicast group, port and interface of each phase derived from them.

use super::plan::Place;
use std::net::{Ipv4Addr, SocketAddrV4};

/// Where the job runs: `host` or `across` ([`Place::id`]).
pub const ENV_PLACE: &str = "SPLITRT_BENCH_VYS_PLACE";
/// The stream key, 64 hex digits (fresh per run).
pub const ENV_KEY: &str = "SPLITRT_BENCH_VYS_KEY";
/// A number from the driver's pid that spreads ports between runs.
pub const ENV_PORT_SEED: &str = "SPLITRT_BENCH_VYS_PORT_SEED";

/// What both ranks need to find each other's streams.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Where the job runs.
    pub place: Place,
    /// The stream key.
    pub key: [u8; 32],
    /// Spreads the ports of different runs.
    pub port_seed: u32,
    /// This rank's interface address (signals leave or are joined there,
    /// the read server listens there).
    pub interface: Ipv4Addr,
}

/// A fresh stream key, from the kernel's random source.
pub fn fresh_key() -> Result<[u8; 32], String> {
    use std::io::Read;
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    Ok(k)
}

/// 64 hex digits.
pub fn hex(k: &[u8; 32]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// The environment the driver gives the ranks.
pub fn env(place: Place) -> Result<Vec<(String, String)>, String> {
    Ok(vec![
        (ENV_PLACE.into(), place.id().into()),
        (ENV_KEY.into(), hex(&fresh_key()?)),
        (ENV_PORT_SEED.into(), std::process::id().to_string()),
    ])
}

impl Stream {
    /// The settings from this rank's environment; the interface is the
    /// local address toward the rendezvous (loopback on one host, the
    /// host's own address on a cluster).
    pub fn from_env() -> Result<Stream, String> {
        let var =
            |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set (run by the driver)"));
        let place = Place::from_id(&var(ENV_PLACE)?)
            .ok_or_else(|| format!("{ENV_PLACE}: host or across"))?;
        let key = splitrt::vys::stream_key::parse(&var(ENV_KEY)?)?;
        let port_seed = var(ENV_PORT_SEED)?
            .parse()
            .map_err(|_| format!("{ENV_PORT_SEED}: a number"))?;
        let boot = std::env::var("SPLITRT_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9".into());
        let interface = match splitrt::runtime::route::local_ip_toward(&boot) {
            Ok(std::net::IpAddr::V4(a)) => a,
            Ok(other) => {
                return Err(format!(
                    "vys signals need IPv4; the local address is {other}"
                ))
            }
            Err(e) => return Err(e.to_string()),
        };
        Ok(Stream {
            place,
            key,
            port_seed,
            interface,
        })
    }

    /// The multicast group of phase `phase`: 239.255.90-91.x (the tests
    /// use 239.255.77.x and .78.x), a port of 50000..60000 from the seed,
    /// so consecutive phases never share a group or a port.
    pub fn group(&self, phase: usize) -> SocketAddrV4 {
        let p = phase as u32;
        let port = 50_000 + (self.port_seed.wrapping_mul(7).wrapping_add(p)) % 10_000;
        let third = 90 + ((p / 250) % 2) as u8;
        SocketAddrV4::new(
            Ipv4Addr::new(239, 255, third, (p % 250) as u8 + 1),
            port as u16,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_differ_between_phases() {
        let s = Stream {
            place: Place::OneHost,
            key: [1; 32],
            port_seed: 1234,
            interface: Ipv4Addr::LOCALHOST,
        };
        let (a, b) = (s.group(0), s.group(1));
        assert!(a.ip().is_multicast() && a.ip() != b.ip() && a.port() != b.port());
        assert_eq!(s.group(250).ip().octets()[2], 91);
        assert_eq!(hex(&[0xab; 32]).len(), 64);
    }
}
