//! Mutual challenge-response on every bootstrap connection, then a MAC on
//! every frame.
//!
//! ```text
//! server -> client  Challenge  "SPLT" | version u16 | server nonce (32)
//! client -> server  Proof      rank u32 | client nonce (32) | HMAC(key, client, sn, cn, rank)
//! server -> client  Accept     HMAC(key, server, sn, cn, rank)      (or Reject: one byte)
//! ```
//!
//! The key never crosses the wire; both nonces are fresh, so a recorded
//! exchange proves nothing later. Afterwards each direction has its own
//! session key, and every frame carries a 16-byte MAC over an implicit frame
//! counter and the body, so a frame cannot be forged, replayed or reordered
//! by anyone who does not hold the job key. Before the handshake completes a
//! connection may send only [`MAX_HANDSHAKE_FRAME`] bytes per frame.

use super::wire::{read_frame, write_frame, Msg, MAX_FRAME};
use crate::key::{same_mac, HmacSha256, JobKey};
use crate::{Error, ErrorKind, Result};
use hmac::Mac;
use std::io::{Read, Write};

/// Largest frame accepted from a connection that has not authenticated.
pub const MAX_HANDSHAKE_FRAME: usize = 128;

const MAGIC: &[u8; 4] = b"SPLT";
/// Bootstrap protocol version; a rank of another version is told so.
/// Raised with the UDP datagram format too (3: the full datagram tag of
/// `fabric::udp::wire` version 4), so ranks of two releases are refused
/// here, with this message, rather than dropping each other's datagrams.
pub const VERSION: u16 = 3;
const NONCE: usize = 32;
const TAG: usize = 16;
const ACCEPT: u8 = 1;
const REJECT: u8 = 0;

fn nonce() -> Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::getrandom(&mut n)
        .map_err(|e| Error::io("reading random bytes", std::io::Error::other(e.to_string())))?;
    Ok(n)
}

/// Seals outgoing frames of one direction of an authenticated connection.
pub struct Sealer {
    key: [u8; 32],
    counter: u64,
}

/// Checks incoming frames of one direction of an authenticated connection.
pub struct Opener {
    key: [u8; 32],
    counter: u64,
}

fn frame_mac(key: &[u8; 32], counter: u64, body: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(&counter.to_le_bytes());
    m.update(body);
    m.finalize().into_bytes().into()
}

impl Sealer {
    /// Write `m` as one sealed frame.
    pub fn send(&mut self, w: &mut impl Write, m: &Msg) -> std::io::Result<()> {
        let mut body = m.encode_body();
        let tag = frame_mac(&self.key, self.counter, &body);
        self.counter += 1;
        body.extend_from_slice(&tag[..TAG]);
        write_frame(w, &body)
    }
}

impl Opener {
    /// Read one sealed frame; `Ok(None)` on a clean end of stream. A frame
    /// whose MAC does not verify is a protocol error (the connection is then
    /// useless: the counters no longer agree).
    pub fn recv(&mut self, r: &mut impl Read) -> Result<Option<Msg>> {
        let Some(mut body) = read_frame(r, MAX_FRAME + TAG)? else {
            return Ok(None);
        };
        if body.len() < TAG + 1 {
            return Err(Error::protocol("bootstrap frame too short for its MAC"));
        }
        let tag = body.split_off(body.len() - TAG);
        let want = frame_mac(&self.key, self.counter, &body);
        if !same_mac(&tag, &want[..TAG]) {
            return Err(Error::protocol(
                "bootstrap frame failed authentication (forged or corrupted)",
            ));
        }
        self.counter += 1;
        Msg::decode(&body).map(Some)
    }
}

fn session(key: &JobKey, dir: &str, sn: &[u8], cn: &[u8], rank: u32) -> [u8; 32] {
    key.mac(dir, &[sn, cn, &rank.to_le_bytes()])
}

/// How a client's handshake failed.
#[derive(Debug)]
pub enum HandshakeError {
    /// The server said our proof is wrong: a different job key.
    Rejected,
    /// The server could not prove it holds the key (a different job, or an
    /// impostor), or spoke another protocol.
    BadServer(String),
    /// The connection failed or closed early (a busy or restarting server):
    /// worth another try.
    Transient(Error),
}

/// Client side: answer the challenge and check the server's proof. Returns
/// the sealer and opener for the rest of the connection.
pub fn client(
    s: &mut (impl Read + Write),
    key: &JobKey,
    rank: u32,
) -> std::result::Result<(Sealer, Opener), HandshakeError> {
    let transient = HandshakeError::Transient;
    let ch = match read_frame(s, MAX_HANDSHAKE_FRAME) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(transient(Error::bootstrap(
                "the bootstrap server closed the connection before its challenge (busy?)",
            )))
        }
        Err(e) => return Err(transient(e)),
    };
    if ch.len() != 4 + 2 + NONCE || &ch[..4] != MAGIC {
        return Err(HandshakeError::BadServer(
            "the peer at the bootstrap address is not a splitrt bootstrap server".into(),
        ));
    }
    let v = u16::from_le_bytes([ch[4], ch[5]]);
    if v != VERSION {
        return Err(HandshakeError::BadServer(format!(
            "the bootstrap server speaks protocol version {v}, this rank {VERSION} \
             (every rank and the launcher must come from the same splitrt release)"
        )));
    }
    let sn = &ch[6..];
    let cn = nonce().map_err(transient)?;
    let proof = key.mac("splitrt boot client", &[sn, &cn, &rank.to_le_bytes()]);
    let mut msg = Vec::with_capacity(4 + NONCE + 32);
    msg.extend_from_slice(&rank.to_le_bytes());
    msg.extend_from_slice(&cn);
    msg.extend_from_slice(&proof);
    write_frame(s, &msg).map_err(|e| transient(Error::io("bootstrap handshake", e)))?;
    let ans = match read_frame(s, MAX_HANDSHAKE_FRAME) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(transient(Error::bootstrap(
                "the bootstrap server closed the connection during authentication",
            )))
        }
        Err(e) => return Err(transient(e)),
    };
    match ans.split_first() {
        Some((&REJECT, [])) => return Err(HandshakeError::Rejected),
        Some((&ACCEPT, mac)) if mac.len() == 32 => {
            let want = key.mac("splitrt boot server", &[sn, &cn, &rank.to_le_bytes()]);
            if !same_mac(mac, &want) {
                return Err(HandshakeError::BadServer(
                    "the bootstrap server could not prove it holds the job key \
                     (another job's server, or an impostor)"
                        .into(),
                ));
            }
        }
        _ => {
            return Err(HandshakeError::BadServer(
                "malformed answer to the bootstrap handshake".into(),
            ))
        }
    }
    Ok((
        Sealer {
            key: session(key, "splitrt c2s", sn, &cn, rank),
            counter: 0,
        },
        Opener {
            key: session(key, "splitrt s2c", sn, &cn, rank),
            counter: 0,
        },
    ))
}

/// Server side: challenge a new connection and check its proof. On success
/// returns the rank it proved to be, with its opener and sealer. The caller
/// bounds the time the whole exchange takes (the bootstrap server reads and
/// writes through a deadline, so a peer trickling bytes cannot stretch it).
pub fn server(s: &mut (impl Read + Write), key: &JobKey) -> Result<(u32, Opener, Sealer)> {
    let sn = nonce()?;
    let mut ch = Vec::with_capacity(4 + 2 + NONCE);
    ch.extend_from_slice(MAGIC);
    ch.extend_from_slice(&VERSION.to_le_bytes());
    ch.extend_from_slice(&sn);
    write_frame(s, &ch).map_err(|e| Error::io("bootstrap challenge", e))?;
    let p = read_frame(s, MAX_HANDSHAKE_FRAME)?
        .ok_or_else(|| Error::protocol("closed before answering the challenge"))?;
    if p.len() != 4 + NONCE + 32 {
        return Err(Error::protocol(format!(
            "handshake proof of {} B, expected {}",
            p.len(),
            4 + NONCE + 32
        )));
    }
    let rank = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
    let cn = &p[4..4 + NONCE];
    let want = key.mac("splitrt boot client", &[&sn, cn, &rank.to_le_bytes()]);
    if !same_mac(&p[4 + NONCE..], &want) {
        let _ = write_frame(s, &[REJECT]);
        return Err(Error::new(ErrorKind::Protocol(
            "handshake proof does not match the job key".into(),
        )));
    }
    let mut ok = vec![ACCEPT];
    ok.extend_from_slice(&key.mac("splitrt boot server", &[&sn, cn, &rank.to_le_bytes()]));
    write_frame(s, &ok).map_err(|e| Error::io("bootstrap handshake", e))?;
    Ok((
        rank,
        Opener {
            key: session(key, "splitrt c2s", &sn, cn, rank),
            counter: 0,
        },
        Sealer {
            key: session(key, "splitrt s2c", &sn, cn, rank),
            counter: 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    #[cfg_attr(miri, ignore = "TCP sockets (Miri isolation has no network)")]
    fn same_key_authenticates_both_ways_and_frames_flow() {
        let k = JobKey::generate().unwrap();
        let (mut c, mut s) = pair();
        let k2 = k.clone();
        let srv = std::thread::spawn(move || {
            let (rank, mut open, mut seal) = server(&mut s, &k2).unwrap();
            let m = open.recv(&mut s).unwrap().unwrap();
            seal.send(&mut s, &Msg::Release(9)).unwrap();
            (rank, m)
        });
        let (mut seal, mut open) = client(&mut c, &k, 5).unwrap();
        seal.send(&mut c, &Msg::Bye).unwrap();
        assert_eq!(open.recv(&mut c).unwrap(), Some(Msg::Release(9)));
        assert_eq!(srv.join().unwrap(), (5, Msg::Bye));
    }

    #[test]
    #[cfg_attr(miri, ignore = "TCP sockets (Miri isolation has no network)")]
    fn a_wrong_key_is_rejected_on_both_sides() {
        let (mut c, mut s) = pair();
        let srv = std::thread::spawn(move || server(&mut s, &JobKey::generate().unwrap()).is_err());
        let r = client(&mut c, &JobKey::generate().unwrap(), 0);
        assert!(matches!(r, Err(HandshakeError::Rejected)), "{:?}", r.err());
        assert!(srv.join().unwrap());
    }

    #[test]
    #[cfg_attr(miri, ignore = "TCP sockets (Miri isolation has no network)")]
    fn a_replayed_or_forged_frame_is_refused() {
        let k = JobKey::generate().unwrap();
        let (mut c, mut s) = pair();
        let k2 = k.clone();
        let srv = std::thread::spawn(move || {
            let (_, mut open, _) = server(&mut s, &k2).unwrap();
            let first = open.recv(&mut s).unwrap();
            (first, open.recv(&mut s).is_err())
        });
        let (mut seal, _) = client(&mut c, &k, 1).unwrap();
        // capture a sealed frame, send it, then replay the same bytes
        let mut frame = Vec::new();
        seal.send(
            &mut frame,
            &Msg::Barrier(super::super::wire::Collective::User, 1),
        )
        .unwrap();
        c.write_all(&frame).unwrap();
        c.write_all(&frame).unwrap();
        let (first, replay_refused) = srv.join().unwrap();
        assert!(first.is_some());
        assert!(replay_refused);
    }

    #[test]
    #[cfg_attr(miri, ignore = "TCP sockets (Miri isolation has no network)")]
    fn an_oversized_handshake_frame_is_refused_before_allocation() {
        let (mut c, mut s) = pair();
        let srv = std::thread::spawn(move || server(&mut s, &JobKey::generate().unwrap()));
        let mut ch = [0u8; 4];
        c.read_exact(&mut ch).unwrap();
        let mut rest = vec![0u8; u32::from_le_bytes(ch) as usize];
        c.read_exact(&mut rest).unwrap();
        c.write_all(&(16u32 << 20).to_le_bytes()).unwrap();
        let e = srv.join().unwrap().err().expect("refused");
        assert!(e.to_string().contains("frame"), "{e}");
    }
}
