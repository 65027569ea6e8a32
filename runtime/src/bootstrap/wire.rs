//! Bootstrap messages and their encoding: a frame is a little-endian `u32`
//! length and a body; a message body is a one-byte tag and its fields. On an
//! authenticated connection every body is followed by a MAC (see
//! [`auth`](super::auth)). Decoding never panics on malformed input; it
//! returns a protocol error, and a frame longer than the reader allows is
//! refused before anything is allocated for it.

use crate::{Error, Result};
use std::io::{Read, Write};

/// Largest frame accepted (bytes after the length word).
pub const MAX_FRAME: usize = 16 << 20;

/// Largest message one rank relays to another ([`Msg::Relay`]).
pub const MAX_RELAY: usize = 256;

/// A rank's introduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Global rank.
    pub rank: u32,
    /// Job size as this rank sees it.
    pub size: u32,
    /// Job id as this rank sees it.
    pub job: String,
    /// Host name (groups ranks into nodes).
    pub host: String,
    /// Process id, for diagnostics.
    pub pid: u32,
    /// The upper layer's registration table, one line an entry; every rank
    /// must send the same.
    pub table: Vec<String>,
    /// Opaque fabric endpoint description.
    pub endpoint: Vec<u8>,
}

/// What every rank learns about every other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Opaque fabric endpoint description.
    pub endpoint: Vec<u8>,
}

/// Which collective a bootstrap barrier belongs to. Barriers carry it, so
/// ranks in different collectives never match each other: a mismatch is an
/// error naming both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// Every rank created its shared-memory file (start-up).
    Setup,
    /// Every rank mapped every peer (start-up).
    Start,
    /// `Endpoint::barrier`.
    User,
    /// The exit barrier of `finish`.
    Exit,
}

impl Collective {
    /// What a user reads in an error or hang report.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Setup => "the start-up barrier (files created)",
            Collective::Start => "the start barrier",
            Collective::User => "Endpoint::barrier",
            Collective::Exit => "the exit barrier of finish",
        }
    }
    fn code(self) -> u8 {
        match self {
            Collective::Setup => 1,
            Collective::Start => 2,
            Collective::User => 3,
            Collective::Exit => 4,
        }
    }
    fn from_code(c: u8) -> Result<Self> {
        Ok(match c {
            1 => Collective::Setup,
            2 => Collective::Start,
            3 => Collective::User,
            4 => Collective::Exit,
            _ => return Err(Error::protocol(format!("unknown collective kind {c}"))),
        })
    }
}

/// A bootstrap message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// rank -> server: join.
    Hello(Hello),
    /// server -> rank: everyone arrived and agreed; here is everyone.
    Welcome(Vec<Peer>),
    /// server -> rank: the job cannot start.
    Refuse(String),
    /// rank -> server: entered barrier `epoch` of this kind.
    Barrier(Collective, u64),
    /// server -> rank: barrier `epoch` is complete.
    Release(u64),
    /// rank -> server: finished cleanly; closing.
    Bye,
    /// either way: rank `.0` failed for reason `.1`; the job is over.
    Abort(u32, String),
    /// rank -> server: who is barrier `epoch` still waiting for?
    Status(u64),
    /// server -> rank: barrier `.0` (kind `.1`, if any rank entered it) still
    /// waits for ranks `.2`.
    Pending(u64, Option<Collective>, Vec<u32>),
    /// either way: a fabric's message for another rank (at most
    /// [`MAX_RELAY`] bytes; the ibverbs fabric's connection set-up). To the
    /// server `.0` is the rank it is for; from the server, the rank that
    /// sent it.
    Relay(u32, Vec<u8>),
}

const T_HELLO: u8 = 1;
const T_WELCOME: u8 = 2;
const T_REFUSE: u8 = 3;
const T_BARRIER: u8 = 4;
const T_RELEASE: u8 = 5;
const T_BYE: u8 = 6;
const T_ABORT: u8 = 7;
const T_STATUS: u8 = 8;
const T_PENDING: u8 = 9;
const T_RELAY: u8 = 10;

struct Enc(Vec<u8>);
impl Enc {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
}

struct Dec<'a>(&'a [u8]);
impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(Error::protocol("bootstrap message truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| Error::protocol("bootstrap string is not UTF-8"))
    }
    fn count(&mut self) -> Result<usize> {
        let n = self.u32()? as usize;
        // every element takes at least 4 bytes: reject absurd counts early
        if n > self.0.len() / 4 {
            return Err(Error::protocol("bootstrap list count exceeds message"));
        }
        Ok(n)
    }
    fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Error::protocol("trailing bytes in bootstrap message"))
        }
    }
}

impl Msg {
    /// Encode the message body (tag and fields, no length word).
    pub fn encode_body(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(64));
        match self {
            Msg::Hello(h) => {
                e.0.push(T_HELLO);
                e.u32(h.rank);
                e.u32(h.size);
                e.bytes(h.job.as_bytes());
                e.bytes(h.host.as_bytes());
                e.u32(h.pid);
                e.u32(h.table.len() as u32);
                for t in &h.table {
                    e.bytes(t.as_bytes());
                }
                e.bytes(&h.endpoint);
            }
            Msg::Welcome(peers) => {
                e.0.push(T_WELCOME);
                e.u32(peers.len() as u32);
                for p in peers {
                    e.bytes(p.host.as_bytes());
                    e.u32(p.pid);
                    e.bytes(&p.endpoint);
                }
            }
            Msg::Refuse(r) => {
                e.0.push(T_REFUSE);
                e.bytes(r.as_bytes());
            }
            Msg::Barrier(k, n) => {
                e.0.push(T_BARRIER);
                e.0.push(k.code());
                e.u64(*n);
            }
            Msg::Release(n) => {
                e.0.push(T_RELEASE);
                e.u64(*n);
            }
            Msg::Bye => e.0.push(T_BYE),
            Msg::Abort(r, why) => {
                e.0.push(T_ABORT);
                e.u32(*r);
                e.bytes(why.as_bytes());
            }
            Msg::Status(n) => {
                e.0.push(T_STATUS);
                e.u64(*n);
            }
            Msg::Pending(n, k, missing) => {
                e.0.push(T_PENDING);
                e.u64(*n);
                e.0.push(k.map_or(0, Collective::code));
                e.u32(missing.len() as u32);
                for r in missing {
                    e.u32(*r);
                }
            }
            Msg::Relay(r, b) => {
                e.0.push(T_RELAY);
                e.u32(*r);
                e.bytes(b);
            }
        }
        e.0
    }

    /// Decode one frame body (tag and fields, without the length word).
    ///
    /// ```
    /// use splitrt_runtime::bootstrap::Msg;
    /// let m = Msg::Abort(3, "boom".into());
    /// assert_eq!(Msg::decode(&m.encode_body()).unwrap(), m);
    /// assert!(Msg::decode(&[99]).is_err());
    /// ```
    pub fn decode(body: &[u8]) -> Result<Msg> {
        let (&tag, rest) = body
            .split_first()
            .ok_or_else(|| Error::protocol("empty bootstrap message"))?;
        let mut d = Dec(rest);
        let m = match tag {
            T_HELLO => {
                let rank = d.u32()?;
                let size = d.u32()?;
                let job = d.string()?;
                let host = d.string()?;
                let pid = d.u32()?;
                let n = d.count()?;
                let table = (0..n).map(|_| d.string()).collect::<Result<_>>()?;
                let endpoint = d.bytes()?.to_vec();
                Msg::Hello(Hello {
                    rank,
                    size,
                    job,
                    host,
                    pid,
                    table,
                    endpoint,
                })
            }
            T_WELCOME => {
                let n = d.count()?;
                let peers = (0..n)
                    .map(|_| {
                        Ok(Peer {
                            host: d.string()?,
                            pid: d.u32()?,
                            endpoint: d.bytes()?.to_vec(),
                        })
                    })
                    .collect::<Result<_>>()?;
                Msg::Welcome(peers)
            }
            T_REFUSE => Msg::Refuse(d.string()?),
            T_BARRIER => Msg::Barrier(Collective::from_code(d.u8()?)?, d.u64()?),
            T_RELEASE => Msg::Release(d.u64()?),
            T_BYE => Msg::Bye,
            T_ABORT => Msg::Abort(d.u32()?, d.string()?),
            T_STATUS => Msg::Status(d.u64()?),
            T_PENDING => {
                let n = d.u64()?;
                let k = match d.u8()? {
                    0 => None,
                    c => Some(Collective::from_code(c)?),
                };
                let count = d.count()?;
                let missing = (0..count).map(|_| d.u32()).collect::<Result<_>>()?;
                Msg::Pending(n, k, missing)
            }
            T_RELAY => {
                let r = d.u32()?;
                let b = d.bytes()?;
                if b.len() > MAX_RELAY {
                    return Err(Error::protocol(format!(
                        "a relayed message of {} B (at most {MAX_RELAY})",
                        b.len()
                    )));
                }
                Msg::Relay(r, b.to_vec())
            }
            t => {
                return Err(Error::protocol(format!(
                    "unknown bootstrap message tag {t}"
                )))
            }
        };
        d.end()?;
        Ok(m)
    }
}

/// Write `body` as one frame (length word first).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len())
        .map_err(|_| std::io::Error::other("bootstrap frame over 4 GiB"))?;
    let mut f = Vec::with_capacity(4 + body.len());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(body);
    w.write_all(&f)
}

/// Read one frame body of at most `max` bytes; `Ok(None)` on a clean end of
/// stream before the frame. A longer frame is refused before its body is
/// read or allocated.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::io("reading bootstrap message", e)),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > max {
        return Err(Error::protocol(format!(
            "bootstrap frame of {len} B (at most {max} B allowed here)"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(|e| Error::io("reading bootstrap message", e))?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Hello(Hello {
                rank: 1,
                size: 4,
                job: "j".into(),
                host: "h".into(),
                pid: 42,
                table: vec!["a".into(), "b/Short/3".into()],
                endpoint: vec![1, 2, 3],
            }),
            Msg::Welcome(vec![Peer {
                host: "x".into(),
                pid: 7,
                endpoint: vec![9],
            }]),
            Msg::Refuse("no".into()),
            Msg::Barrier(Collective::User, 5),
            Msg::Barrier(Collective::Exit, 7),
            Msg::Release(6),
            Msg::Bye,
            Msg::Abort(2, "dead".into()),
            Msg::Status(3),
            Msg::Pending(3, Some(Collective::Start), vec![1, 4]),
            Msg::Pending(4, None, vec![]),
            Msg::Relay(3, vec![1, 1, 7]),
            Msg::Relay(0, vec![]),
        ]
    }

    #[test]
    fn lazyrdma_a_relay_longer_than_its_bound_is_refused() {
        let ok = Msg::Relay(1, vec![5; MAX_RELAY]);
        assert_eq!(Msg::decode(&ok.encode_body()).unwrap(), ok);
        let long = Msg::Relay(1, vec![5; MAX_RELAY + 1]).encode_body();
        let e = Msg::decode(&long).unwrap_err().to_string();
        assert!(e.contains("relayed message"), "{e}");
        // a length word past the body: refused, not read past
        let mut cut = Msg::Relay(1, vec![5; 8]).encode_body();
        cut.truncate(cut.len() - 1);
        assert!(Msg::decode(&cut).is_err());
    }

    #[test]
    fn roundtrip() {
        for m in samples() {
            let mut f = Vec::new();
            write_frame(&mut f, &m.encode_body()).unwrap();
            let mut r = &f[..];
            let body = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
            assert_eq!(Msg::decode(&body).unwrap(), m);
            assert!(
                read_frame(&mut &f[..], body.len() - 1).is_err(),
                "limit holds"
            );
        }
    }

    /// Truncations and random corruptions of valid frames never panic.
    #[test]
    fn decoder_survives_garbage() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for m in samples() {
            let f = m.encode_body();
            for cut in 0..f.len() {
                let _ = Msg::decode(&f[..cut]);
            }
            for _ in 0..if cfg!(miri) { 30 } else { 2000 } {
                let mut g = f.clone();
                let i = rng.gen_range(0..g.len());
                g[i] = rng.gen();
                let _ = Msg::decode(&g);
            }
        }
        for _ in 0..if cfg!(miri) { 300 } else { 20000 } {
            let n = rng.gen_range(0..64);
            let g: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let _ = Msg::decode(&g);
        }
    }
}
