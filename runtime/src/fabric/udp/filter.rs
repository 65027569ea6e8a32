//! The kernel's line against strangers: a classic BPF socket filter on a
//! rank's UDP socket that accepts only datagrams whose source address and
//! port are one of the job's peers' (as announced through the bootstrap).
//! Everything else is dropped by the kernel before it reaches the
//! socket's queue, so a stranger's flood neither queues ahead of the job's
//! datagrams nor costs the rank a read (issue 24, item 7). An unprivileged
//! stranger cannot forge a source address (that takes `CAP_NET_RAW`); the
//! protocol's own checks (header, header tag, tag) stay behind it as the
//! second line.
//!
//! The program (built here without I/O, attached by [`attach`]): the IP
//! version from the network header (`SKF_NET_OFF`), then per source
//! address (IPv4 at byte 12 of the IP header, IPv6 at byte 8) the source
//! ports of the peers there, read from the UDP header (a UDP socket's
//! filter runs with the packet's data at the UDP header). Two
//! instructions per peer, four (IPv4) or thirteen (IPv6) per address:
//! [`MAX_INSNS`] (the kernel's limit) fits about 680 IPv4 hosts of one
//! rank each (about 270 IPv6), more ranks where they share an address (up
//! to about 2,000 at one address). The kernel also charges the program
//! against `net.core.optmem_max`: with 131072 (this project's test hosts)
//! about 620 IPv4 hosts attach, with 20480 (older kernels' default) about
//! 100. Above either limit the socket stays unfiltered ([`program`] or
//! [`attach`] says why) and the protocol's checks drop strangers after a
//! read, as without the filter.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// The kernel's limit on a classic BPF program (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = libc::BPF_MAXINSNS as usize;

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

/// A return value that keeps the whole datagram.
const ACCEPT: u32 = u32::MAX;
/// A return value that drops it.
const DROP: u32 = 0;

/// Offset of the network (IP) header for absolute loads.
const NET: i32 = libc::SKF_NET_OFF;

fn stmt(code: u32, k: u32) -> Insn {
    Insn {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> Insn {
    Insn {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Load the 32-bit word at `off` bytes into the IP header.
fn ld_net_word(off: i32) -> Insn {
    stmt(
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        (NET + off) as u32,
    )
}

/// `A == k`: fall through, else skip the next instruction (a `ja` to the
/// next address).
fn jeq_or_next(k: u32) -> Insn {
    jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, 1, 0)
}

fn ja(k: u32) -> Insn {
    stmt(libc::BPF_JMP | libc::BPF_JA, k)
}

fn ret(k: u32) -> Insn {
    stmt(libc::BPF_RET | libc::BPF_K, k)
}

/// The words to compare of a source address, at their offsets in the IP
/// header.
fn address_words(ip: &IpAddr) -> Vec<(i32, u32)> {
    match ip {
        IpAddr::V4(a) => vec![(12, u32::from_be_bytes(a.octets()))],
        IpAddr::V6(a) => a
            .octets()
            .chunks_exact(4)
            .enumerate()
            .map(|(i, w)| {
                (
                    8 + 4 * i as i32,
                    u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
                )
            })
            .collect(),
    }
}

/// One family's section: per address, compare its words (a mismatch
/// jumps to the next address), then the ports there (a match accepts);
/// nothing matched: drop.
fn section(out: &mut Vec<Insn>, groups: &BTreeMap<IpAddr, BTreeSet<u16>>) {
    for (ip, ports) in groups {
        let words = address_words(ip);
        // what follows a word's `ja` in this address's code: the rest of
        // its words (three instructions each), the port load, two
        // instructions per port
        let tail = |after_word: usize| 3 * (words.len() - 1 - after_word) + 1 + 2 * ports.len();
        for (i, (off, w)) in words.iter().enumerate() {
            out.push(ld_net_word(*off));
            out.push(jeq_or_next(*w));
            out.push(ja(tail(i) as u32));
        }
        out.push(stmt(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 0));
        for &port in ports {
            out.push(jump(
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                u32::from(port),
                0,
                1,
            ));
            out.push(ret(ACCEPT));
        }
    }
    out.push(ret(DROP));
}

/// The filter accepting only datagrams from `peers` (IPv4-mapped IPv6
/// addresses are matched as the IPv4 packets they arrive as), or why
/// there is none: more instructions than the kernel takes.
pub fn program(peers: &[SocketAddr]) -> Result<Vec<Insn>, String> {
    let mut v4: BTreeMap<IpAddr, BTreeSet<u16>> = BTreeMap::new();
    let mut v6: BTreeMap<IpAddr, BTreeSet<u16>> = BTreeMap::new();
    for a in peers {
        match a.ip() {
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(ip4) => v4.entry(ip4.into()).or_default().insert(a.port()),
                None => v6.entry(ip.into()).or_default().insert(a.port()),
            },
            ip => v4.entry(ip).or_default().insert(a.port()),
        };
    }
    let mut v4_code = Vec::new();
    section(&mut v4_code, &v4);
    let mut v6_code = Vec::new();
    section(&mut v6_code, &v6);
    let mut out = vec![
        // the IP version: the high nibble of the header's first byte
        stmt(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, NET as u32),
        stmt(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0xf0),
        jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0x60, 0, 1),
        ja(v4_code.len() as u32 + 2),
        jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0x40, 1, 0),
        ret(DROP),
    ];
    out.extend(v4_code);
    out.extend(v6_code);
    if out.len() > MAX_INSNS {
        return Err(format!(
            "{} peers at {} addresses need {} BPF instructions, more than the kernel's {}",
            peers.len(),
            v4.len() + v6.len(),
            out.len(),
            MAX_INSNS
        ));
    }
    Ok(out)
}

/// Attach `prog` (from [`program`]) to `sock`: from now on the kernel
/// drops what it refuses before queueing it. (Datagrams queued before
/// stay: the protocol's checks see those.)
pub fn attach(sock: &impl std::os::fd::AsRawFd, prog: &[Insn]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: setsockopt on a socket the caller owns, with a sock_fprog
    // pointing at `prog.len()` instructions that outlive the call (the
    // kernel copies them).
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Datagrams the kernel dropped on their way to `sock` (`SO_MEMINFO`'s
/// drop count: the filter's drops, and datagrams that found the receive
/// buffer full), if it says.
pub fn kernel_drops(sock: &impl std::os::fd::AsRawFd) -> Option<u64> {
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt on a socket the caller owns, into `info`, whose
    // size `len` says (the kernel writes at most that much).
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let need = (libc::SK_MEMINFO_DROPS as usize + 1) * 4;
    (r == 0 && len as usize >= need).then(|| u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    /// A classic BPF interpreter for the instructions [`program`] uses,
    /// over a packet given as its IP header (`net`) and UDP header +
    /// payload (`data`).
    fn run(prog: &[Insn], net: &[u8], data: &[u8]) -> u32 {
        let load = |k: u32, n: usize| -> Option<u32> {
            let k = k as i32;
            let (buf, at) = if k < 0 {
                (net, (k - NET) as usize)
            } else {
                (data, k as usize)
            };
            let b = buf.get(at..at + n)?;
            Some(b.iter().fold(0u32, |a, &x| a << 8 | u32::from(x)))
        };
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_B | libc::BPF_ABS => match load(i.k, 1) {
                    Some(v) => a = v,
                    None => return 0,
                },
                c if c == libc::BPF_LD | libc::BPF_H | libc::BPF_ABS => match load(i.k, 2) {
                    Some(v) => a = v,
                    None => return 0,
                },
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => match load(i.k, 4) {
                    Some(v) => a = v,
                    None => return 0,
                },
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf })
                }
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c => panic!("instruction {c:#x} not expected"),
            }
        }
    }

    fn packet(from: SocketAddr) -> (Vec<u8>, Vec<u8>) {
        let net = match from.ip() {
            IpAddr::V4(a) => {
                let mut h = vec![0x45u8; 20];
                h[12..16].copy_from_slice(&a.octets());
                h
            }
            IpAddr::V6(a) => {
                let mut h = vec![0x60u8; 40];
                h[8..24].copy_from_slice(&a.octets());
                h
            }
        };
        let mut data = vec![0u8; 12];
        data[..2].copy_from_slice(&from.port().to_be_bytes());
        (net, data)
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_peers_addresses_and_ports_pass() {
        let peers = [
            a("10.0.0.1:4000"),
            a("10.0.0.1:4001"),
            a("10.0.0.2:4000"),
            a("[fd00::1]:5000"),
            a("[fd00::2]:5001"),
            a("[::ffff:10.0.0.3]:6000"),
        ];
        let prog = program(&peers).unwrap();
        let pass = |s: &str| {
            let (net, data) = packet(a(s));
            run(&prog, &net, &data) == ACCEPT
        };
        for p in [
            "10.0.0.1:4000",
            "10.0.0.1:4001",
            "10.0.0.2:4000",
            "[fd00::1]:5000",
            "[fd00::2]:5001",
            "10.0.0.3:6000",
        ] {
            assert!(pass(p), "{p} refused");
        }
        for p in [
            "10.0.0.1:4002",
            "10.0.0.2:4001",
            "10.0.0.4:4000",
            "11.0.0.1:4000",
            "[fd00::1]:5001",
            "[fd00::3]:5000",
            "[fd00:0:0:1::1]:5000",
            "[::ffff:10.0.0.3]:6000",
            "10.0.0.3:6001",
        ] {
            assert!(!pass(p), "{p} accepted");
        }
        // neither IPv4 nor IPv6, or a truncated header
        let (mut net, data) = packet(a("10.0.0.1:4000"));
        net[0] = 0x55;
        assert_eq!(run(&prog, &net, &data), DROP);
        assert_eq!(run(&prog, &net[..1], &data), DROP);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "63 s under Miri building two programs of thousands of peers; safe code only"
    )]
    fn no_peers_refuses_everything_and_too_many_is_refused() {
        let prog = program(&[]).unwrap();
        let (net, data) = packet(a("127.0.0.1:1"));
        assert_eq!(run(&prog, &net, &data), DROP);
        let many: Vec<SocketAddr> = (0..3000u16)
            .map(|p| SocketAddr::from(([10, 0, (p / 200) as u8, 1], 1000 + p)))
            .collect();
        let why = program(&many).unwrap_err();
        assert!(why.contains("more than the kernel's 4096"), "{why}");
        let fits = program(&many[..1900]).unwrap();
        assert!(fits.len() <= MAX_INSNS);
    }

    /// Wait (bounded) until `sock` has a datagram or `limit` passed; read it.
    fn recv_within(sock: &UdpSocket, limit: Duration) -> Option<(usize, SocketAddr)> {
        sock.set_read_timeout(Some(limit)).unwrap();
        let t0 = Instant::now();
        let mut b = [0u8; 64];
        while t0.elapsed() < limit {
            if let Ok(r) = sock.recv_from(&mut b) {
                return Some(r);
            }
        }
        None
    }

    /// The real kernel: on loopback (IPv4, and IPv6 where the host has
    /// it), the peer's datagrams arrive, a stranger's from another port or
    /// another address do not, and the drops are counted.
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn the_kernel_drops_strangers_before_the_queue() {
        for (any, other) in [("127.0.0.1:0", "127.0.0.2"), ("[::1]:0", "")] {
            let Ok(me) = UdpSocket::bind(any) else {
                eprintln!("skipped {any}: no such address here");
                continue;
            };
            let peer = UdpSocket::bind(any).unwrap();
            let stranger = UdpSocket::bind(any).unwrap();
            let to = me.local_addr().unwrap();
            let prog = program(&[peer.local_addr().unwrap()]).unwrap();
            attach(&me, &prog).unwrap();
            let drops0 = kernel_drops(&me).expect("SO_MEMINFO");
            for _ in 0..10 {
                stranger.send_to(b"stranger", to).unwrap();
            }
            // the peer's own port on another loopback address
            if !other.is_empty() {
                let port = peer.local_addr().unwrap().port();
                if let Ok(s) = UdpSocket::bind((other, port)) {
                    s.send_to(b"other address", to).unwrap();
                }
            }
            peer.send_to(b"peer", to).unwrap();
            let got = recv_within(&me, Duration::from_secs(5));
            assert_eq!(got.map(|g| g.1), Some(peer.local_addr().unwrap()), "{any}");
            assert!(
                recv_within(&me, Duration::from_millis(50)).is_none(),
                "{any}: a stranger's datagram was queued"
            );
            let drops = kernel_drops(&me).unwrap() - drops0;
            assert!(drops >= 10, "{any}: {drops} kernel drops");
        }
    }
}
