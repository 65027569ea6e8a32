//! The SPEAD bridge against spead2 (from PyPI) as the real peer, on the
//! loopback only, every step bounded in time:
//! (a) a spead2 sender -> `vys-spead ingest` -> a vys consumer, byte-exact;
//! (b) a vys producer -> `vys-spead publish` -> a `spead2.recv.Stream`, byte-exact;
//! (c) hostile datagrams into `vys-spead ingest`: counted, no crash, and
//!     a good heap after them still published.
//!
//! spead2 must be importable by `python3` (CI's .ci/run installs it;
//! elsewhere: `python3 -m pip install spead2 numpy`).

use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys_spead::descriptor::{Descriptor, NumpyHeader};
use splitrt_vys_spead::encode::{encode_control, encode_heap, HeapItem, ItemValue};
use splitrt_vys_spead::wire;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vys-spead");

fn script(name: &str) -> String {
    format!("{}/tests/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `python3` with spead2, or a failure saying how to install it.
fn need_spead2() {
    let ok = Command::new("python3")
        .args(["-c", "import spead2, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "these tests need spead2 and numpy for python3: python3 -m pip install spead2 numpy \
         (CI's .ci/run installs them)"
    );
}

/// A fresh stream: random key (hex), a random multicast group on loopback.
fn stream() -> ([u8; 32], String, SocketAddrV4) {
    let mut key = [0u8; 32];
    getrandom(&mut key);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let r = u32::from_le_bytes(key[..4].try_into().unwrap());
    let group = SocketAddrV4::new(
        Ipv4Addr::new(239, 255, 43, (r % 250) as u8 + 1),
        20000 + (r >> 8) as u16 % 40000,
    );
    (key, hex, group)
}

fn getrandom(b: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(b)
        .unwrap();
}

/// A child whose stdout lines arrive on a channel; killed on drop.
struct Proc {
    child: Child,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                eprintln!("  | {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The first line starting with `prefix`, within `t`.
    fn line(&self, prefix: &str, t: Duration) -> String {
        let end = Instant::now() + t;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => {}
                Err(e) => panic!("no `{prefix}` line within {t:?}: {e}"),
            }
        }
    }

    /// Wait for the exit, within `t`; its status must be success.
    fn finish(&mut self, t: Duration) {
        let end = Instant::now() + t;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "exit status {s}");
                return;
            }
            assert!(Instant::now() < end, "still running after {t:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait (up to 10 s) until ingest's counters say it took `n` packets.
fn took(ing: &Proc, n: u64) {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let l = ing.line("stats: ", Duration::from_secs(10));
        if fields(&l)["packets"] >= n {
            return;
        }
    }
    panic!("ingest did not take {n} packets within 10 s");
}

/// `key=value` pairs of a summary line.
fn fields(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn ingest(hex: &str, group: SocketAddrV4, antennas: u16, stats_s: &str) -> (Proc, u16) {
    let p = Proc::spawn(
        Command::new(BIN)
            .args(["ingest", "--listen", "127.0.0.1:0", "--group"])
            .arg(group.to_string())
            .args(["--antennas", &antennas.to_string()])
            .args(["--until-stop", "--duration-s", "30", "--stats-s", stats_s])
            .env("SPLITRT_VYS_KEY", hex),
    );
    let ready = p.line("ready ", Duration::from_secs(10));
    let listen = ready
        .split_whitespace()
        .find_map(|f| f.strip_prefix("listen="))
        .unwrap();
    let port = listen.rsplit(':').next().unwrap().parse().unwrap();
    (p, port)
}

fn consumer(key: [u8; 32], group: SocketAddrV4) -> Consumer {
    let cfg = ConsumerConfig::new(key, group, Ipv4Addr::LOCALHOST);
    Consumer::start(cfg, |_p, _i, pass| pass.fill(true)).unwrap()
}

/// Stations of baseline `b` of `n` antennas (the documented order).
fn pair(n: u16, b: usize) -> [u16; 2] {
    splitrt_vys_spead::xeng::stations(Some(n), b).unwrap()
}

#[test]
fn spead2_sender_into_ingest_byte_exact() {
    need_spead2();
    let (key, hex, group) = stream();
    let (antennas, channels, heaps) = (4u16, 64usize, 20usize);
    let baselines = usize::from(antennas) * (usize::from(antennas) + 1) / 2;
    let c = consumer(key, group);
    let (mut ing, port) = ingest(&hex, group, antennas, "0");
    let dir = std::env::temp_dir().join(format!("vys-spead-a-{}", std::process::id()));
    let expected = dir.with_extension("bin");
    let mut send = Proc::spawn(
        Command::new("python3")
            .arg(script("spead2_send.py"))
            .args(["--port", &port.to_string()])
            .args(["--heaps", &heaps.to_string()])
            .args(["--channels", &channels.to_string()])
            .args(["--baselines", &baselines.to_string()])
            .args(["--spw", "2"])
            .arg("--expected")
            .arg(&expected),
    );
    send.finish(Duration::from_secs(20));
    let summary = fields(&ing.line("summary: ", Duration::from_secs(10)));
    // what spead2 sent: timestamp, then [channels, baselines, 2] int32
    let bytes = std::fs::read(&expected).unwrap();
    let _ = std::fs::remove_file(&expected);
    let heap_bytes = 8 + channels * baselines * 8;
    assert_eq!(bytes.len(), heaps * heap_bytes);
    let mut want: HashMap<(u64, [u16; 2]), Vec<u8>> = HashMap::new();
    for h in bytes.chunks_exact(heap_bytes) {
        let ts = u64::from_le_bytes(h[..8].try_into().unwrap());
        let vis = &h[8..];
        for b in 0..baselines {
            let s: Vec<u8> = (0..channels)
                .flat_map(|ch| {
                    let at = (ch * baselines + b) * 8;
                    vis[at..at + 8].to_vec()
                })
                .collect();
            want.insert((ts, pair(antennas, b)), s);
        }
    }
    // every visibility and timestamp, byte for byte, through a vys consumer
    let total = heaps * baselines;
    let (mut got, mut wrong) = (0usize, 0usize);
    let end = Instant::now() + Duration::from_secs(10);
    while got < total && Instant::now() < end {
        match c.recv(Duration::from_millis(100)) {
            Some(Message::Valid(s)) => {
                assert_eq!(s.product.spectral_window, 2, "frequency / channels");
                assert_eq!(s.product.channels as usize, channels);
                match want.remove(&(s.info.timestamp, s.product.stations)) {
                    Some(w) if w == s.data() => got += 1,
                    _ => wrong += 1,
                }
            }
            Some(m) => eprintln!("consumer: {m}"),
            None => {}
        }
    }
    c.shutdown();
    ing.finish(Duration::from_secs(10));
    assert_eq!(wrong, 0);
    assert_eq!(got, total, "missing: {} spectra", want.len());
    assert_eq!(summary["published_heaps"], heaps as u64);
    assert_eq!(summary["spectra"], total as u64);
    assert_eq!(summary["incomplete"], 0);
    assert_eq!(summary["descriptors"], 3);
    assert_eq!(summary["stops"], 1);
}

#[test]
fn publish_into_a_spead2_receiver_byte_exact() {
    need_spead2();
    let (key, hex, group) = stream();
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut recv = Proc::spawn(Command::new("python3").arg(script("spead2_recv.py")).args([
        "--port",
        &port.to_string(),
        "--timeout",
        "20",
    ]));
    recv.line("ready", Duration::from_secs(20));
    let (times, spectrum_bytes) = (4u64, 512usize);
    let pairs = [[0u16, 1], [0, 2], [1, 2]];
    let chosen = pairs.len() as u64 * times; // spectral window 0 of 2
    let mut publish = Proc::spawn(
        Command::new(BIN)
            .args(["publish", "--dest", &format!("127.0.0.1:{port}"), "--group"])
            .arg(group.to_string())
            .args(["--spw", "0", "--count", &chosen.to_string()])
            .args(["--rate-mb-s", "50", "--duration-s", "20", "--stats-s", "0"])
            .env("SPLITRT_VYS_KEY", &hex),
    );
    publish.line("ready ", Duration::from_secs(10));
    let mut cfg = ProducerConfig::new(key, group, Ipv4Addr::LOCALHOST, spectrum_bytes);
    cfg.id = Some(0x5EAD);
    let mut p = Producer::new(cfg).unwrap();
    let mut want: HashMap<(u64, [u16; 2]), Vec<u8>> = HashMap::new();
    let mut data = vec![0u8; spectrum_bytes];
    for t in 0..times {
        for st in pairs {
            for spw in [0u16, 1] {
                getrandom(&mut data);
                let ts = 1_700_000_000_000 + t;
                let product = ProductId {
                    stations: st,
                    spectral_window: spw,
                    stokes: 3,
                };
                p.write(product, &data, ts).unwrap();
                if spw == 0 {
                    want.insert((ts, st), data.clone());
                }
            }
        }
    }
    p.flush().unwrap();
    let summary = fields(&publish.line("summary: ", Duration::from_secs(20)));
    assert_eq!(summary["spectra"], chosen);
    let mut got = 0;
    loop {
        let l = recv.line("", Duration::from_secs(20));
        if l == "end" {
            break;
        }
        let Some(rest) = l.strip_prefix("heap ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n: Vec<u64> = f[..6].iter().map(|x| x.parse().unwrap()).collect();
        assert_eq!(n[3], 0, "only spectral window 0 chosen");
        assert_eq!(n[4], 3, "stokes");
        assert_eq!(n[5], 0x5EAD, "producer");
        assert_eq!((f[6], f[7]), ("<c8", "64"), "dtype and shape");
        let bytes: Vec<u8> = (0..f[8].len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&f[8][i..i + 2], 16).unwrap())
            .collect();
        let w = want
            .remove(&(n[0], [n[1] as u16, n[2] as u16]))
            .expect("a spectrum sent once");
        assert_eq!(bytes, w, "byte-exact");
        got += 1;
    }
    recv.finish(Duration::from_secs(10));
    publish.finish(Duration::from_secs(10));
    assert_eq!(got, chosen);
    assert!(want.is_empty());
}

#[test]
fn hostile_datagrams_counted_no_crash() {
    let (key, hex, group) = stream();
    let c = consumer(key, group);
    // counters every 20 ms: the sender waits until ingest took what it sent
    // (so no datagram is lost to a full socket buffer and the counts are exact)
    let (mut ing, port) = ingest(&hex, group, 2, "0.02");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    // a good heap (3 baselines of 2 antennas, 4 channels), its descriptors
    let vis: Vec<u8> = (0..4 * 3 * 2)
        .flat_map(|v: i32| (v - 7).to_le_bytes())
        .collect();
    let descs: Vec<Vec<u8>> = [
        Descriptor {
            id: 0x1600,
            name: "timestamp".into(),
            description: String::new(),
            shape: vec![],
            format: vec![(b'u', 48)],
            numpy_header: None,
        },
        Descriptor {
            id: 0x1800,
            name: "xeng_raw".into(),
            description: String::new(),
            shape: vec![Some(4), Some(3), Some(2)],
            format: vec![],
            numpy_header: Some(NumpyHeader::format("<i4", &[4, 3, 2])),
        },
    ]
    .iter()
    .map(Descriptor::encode)
    .collect();
    let good = |cnt: u64, max: usize| {
        let mut items: Vec<HeapItem<'_>> = descs
            .iter()
            .map(|d| HeapItem::new(wire::DESCRIPTOR_ID, ItemValue::Bytes(d)))
            .collect();
        items.push(HeapItem::new(0x1600, ItemValue::Immediate(77)));
        items.push(HeapItem::new(0x1800, ItemValue::Bytes(&vis)));
        let mut v = Vec::new();
        encode_heap(cnt, &items, max, &mut v).unwrap();
        v
    };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut sent_malformed = 0u64;
    // random bytes, some behind a SPEAD-64-48 header
    for i in 0..300 {
        let n = (rnd() % 1400) as usize + 1;
        let mut d: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
        if i % 2 == 0 && d.len() >= 8 {
            d[..4].copy_from_slice(&[0x53, 4, 2, 6]);
            d[6] = 0xff;
        }
        s.send(&d).unwrap();
        sent_malformed += 1;
        if i % 50 == 49 {
            took(&ing, sent_malformed);
        }
    }
    // truncated packets of a good heap
    for p in good(100, 200) {
        s.send(&p[..p.len().min(8 + (rnd() as usize % 40))])
            .unwrap();
        sent_malformed += 1;
    }
    // lying heap sizes: 2^47 bytes stated; a length that changes in the heap
    let mut liar = good(200, 200);
    liar[0][8 + 8 + 2..8 + 16].copy_from_slice(&[0x80, 0, 0, 0, 0, 0]);
    s.send(&liar[0]).unwrap();
    let mut change = good(201, 200);
    change[1][8 + 8 + 7] ^= 1;
    s.send(&change[0]).unwrap();
    s.send(&change[1]).unwrap();
    took(&ing, sent_malformed + 3);
    // a heap with a packet missing: incomplete, never published
    let missing = good(300, 200);
    for (i, p) in missing.iter().enumerate() {
        if i != 1 {
            s.send(p).unwrap();
        }
    }
    // then a good heap, and the stop
    for p in good(400, 1472) {
        s.send(&p).unwrap();
    }
    let mut stop = Vec::new();
    encode_control(401, wire::CTRL_STREAM_STOP, 1472, &mut stop).unwrap();
    s.send(&stop[0]).unwrap();
    let summary = fields(&ing.line("summary: ", Duration::from_secs(10)));
    ing.finish(Duration::from_secs(10));
    assert_eq!(summary["malformed"], sent_malformed);
    assert!(summary["refused"] >= 2, "lying lengths: {summary:?}");
    assert!(
        summary["incomplete"] >= 2,
        "the heap with a hole: {summary:?}"
    );
    assert_eq!(summary["published_heaps"], 1, "only the good heap");
    assert_eq!(summary["spectra"], 3);
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(10);
    while got < 3 && Instant::now() < end {
        if let Some(Message::Valid(s)) = c.recv(Duration::from_millis(100)) {
            assert_eq!(s.info.timestamp, 77);
            got += 1;
        }
    }
    assert_eq!(got, 3);
}

/// (d) a described vys stream -> `vys-spead publish` -> spead2: the
/// stream description's fields arrive as items a `spead2.ItemGroup`
/// holds by name, the new ones after a change mid-stream.
#[test]
fn publish_a_stream_description_into_spead2() {
    use splitrt_vys::description::*;
    need_spead2();
    let (key, hex, group) = stream();
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut recv = Proc::spawn(
        Command::new("python3")
            .arg(script("spead2_recv_desc.py"))
            .args(["--port", &port.to_string(), "--timeout", "20"]),
    );
    recv.line("ready", Duration::from_secs(20));
    let mut publish = Proc::spawn(
        Command::new(BIN)
            .args(["publish", "--dest", &format!("127.0.0.1:{port}"), "--group"])
            .arg(group.to_string())
            .args(["--count", "8", "--rate-mb-s", "50", "--duration-s", "20"])
            .args(["--stats-s", "0"])
            .env("SPLITRT_VYS_KEY", &hex),
    );
    publish.line("ready ", Duration::from_secs(10));
    let (spectrum_bytes, channels) = (512usize, 64u32);
    let describe = |name: &str, first_hz: f64| StreamDescription {
        data_type: DataType::Complex64,
        channels,
        frequencies: Frequencies::Linear {
            first_hz,
            width_hz: 1.0e6,
        },
        polarizations: vec![Polarization::XX, Polarization::YY],
        baseband: 2,
        subband: 5,
        config_name: name.into(),
        time_epoch: TimeEpoch::Mjd,
        time_unit: TimeUnit::Microseconds,
        integration_ns: 250_000,
    };
    let mut cfg = ProducerConfig::new(key, group, Ipv4Addr::LOCALHOST, spectrum_bytes);
    cfg.spectra_per_signal = 1;
    cfg.description = Some(describe("first", 1.0e9));
    let mut p = Producer::new(cfg).unwrap();
    let product = ProductId {
        stations: [0, 1],
        spectral_window: 0,
        stokes: 0,
    };
    let data = vec![0u8; spectrum_bytes];
    for t in 0..4 {
        p.write(product, &data, t).unwrap();
    }
    p.set_description(describe("second", 2.0e9)).unwrap();
    for t in 4..8 {
        p.write(product, &data, t).unwrap();
    }
    p.flush().unwrap();
    let summary = fields(&publish.line("summary: ", Duration::from_secs(20)));
    assert_eq!(summary["spectra"], 8);
    let mut got = Vec::new();
    loop {
        let l = recv.line("", Duration::from_secs(20));
        if l == "end" {
            break;
        }
        if let Some(rest) = l.strip_prefix("desc ") {
            got.push(rest.to_string());
        }
    }
    recv.finish(Duration::from_secs(10));
    publish.finish(Duration::from_secs(10));
    let want = |t: u64| {
        let (e, name, f0) = if t < 4 {
            (1, "first", 1.0e9)
        } else {
            (2, "second", 2.0e9)
        };
        format!(
            "{t} {e} {name} {channels} {f0:?} {:?} XX,YY 250000 2 5 complex64 mjd us",
            f0 + 63.0e6
        )
    };
    assert_eq!(got, (0..8).map(want).collect::<Vec<_>>());
}
