//! Which host this is, and which of its addresses the others reach.

use crate::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs, UdpSocket};

/// This host's name (`localhost` if the kernel does not say).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The local address that routes toward `target` (`host:port`): where
/// processes there can reach this one. A connected UDP socket sends
/// nothing; it only asks the kernel for the route's source address.
///
/// ```
/// let ip = splitrt_runtime::route::local_ip_toward("127.0.0.1:9").unwrap();
/// assert!(ip.is_loopback());
/// ```
pub fn local_ip_toward(target: &str) -> Result<IpAddr> {
    let to = target
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving '{target}'"), e))?
        .next()
        .ok_or_else(|| Error::usage(format!("'{target}' resolves to no address")))?;
    let ip = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect(to).map(|_| s))
        .and_then(|s| s.local_addr())
        .map_err(|e| Error::io(format!("finding the local address toward '{target}'"), e))?
        .ip();
    Ok(if ip.is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        ip
    })
}
