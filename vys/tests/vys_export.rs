//! A producer *process* exports its ring read-only to a consumer that
//! proves the stream key; the consumer's mapping cannot be made writable,
//! a consumer with another key is refused, and a million-spectrum lapping
//! run through the mapping accepts no torn spectrum (digest `none`).
//!
//! The producer is this test binary run again (`producer_child`), so the
//! two sides are separate processes sharing nothing but the handed-over
//! descriptor.

use splitrt_vys::export::{ExportedRing, ImportedRing};
use splitrt_vys::ring::{slot_bytes, ReadOutcome, RingWriter};
use splitrt_vys::signal::{DigestKind, SpectrumInfo};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x42; 32];
const BYTES: usize = 512;
const SLOTS: usize = 4;
const TOTAL: u64 = 1_000_000;

fn fill(seq: u64, out: &mut [u8]) {
    splitrt_vys::checkable::fill(([0, 0], 0, 0), seq, out)
}

/// Where the producer publishes its latest sequence id: the word after
/// the slots (a stand-in for signal messages, which have their own test).
fn latest_word() -> usize {
    SLOTS * slot_bytes(BYTES) / 8
}

/// The producer side, when run by the test below; otherwise nothing.
#[test]
fn producer_child() {
    let Ok(sock) = std::env::var("VYS_PRODUCER_SOCKET") else {
        return;
    };
    let ring = ExportedRing::new(SLOTS * slot_bytes(BYTES) + 64).unwrap();
    let listener = UnixListener::bind(&sock).unwrap();
    println!("listening");
    // the stranger first (refused), then the consumer
    assert!(!ring.serve_one(&listener, &KEY, 1, 1).unwrap());
    assert!(ring.serve_one(&listener, &KEY, 1, 1).unwrap());
    let words = ring.words();
    let mut w = RingWriter::new(&words[..latest_word()], BYTES, SLOTS, 1);
    let mut d = vec![0u8; BYTES];
    for seq in 1..=TOTAL {
        fill(seq, &mut d);
        let info = w.write(&d, seq, DigestKind::None);
        words[latest_word()].store(info.seq, Ordering::Release);
    }
    // The consumer's mapping keeps the ring alive after this process
    // exits: nothing to wait for.
}

#[test]
fn a_consumer_reads_a_producer_process_ring_read_only_and_never_torn() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let sock = dir.join(format!("vys-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "producer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VYS_PRODUCER_SOCKET", &sock)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "producer did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // a consumer without the stream key gets nothing
    let refused = ImportedRing::connect(&sock, &[0x41; 32]);
    assert!(refused.is_err(), "wrong key accepted");
    let ring = ImportedRing::connect(&sock, &KEY).expect("handover");
    // the mapping cannot be made writable: the descriptor only reads
    // SAFETY: mprotect on our own mapping; it is expected to fail.
    let r = unsafe {
        libc::mprotect(
            ring.base() as *mut libc::c_void,
            ring.len().div_ceil(4096) * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    assert_eq!(r, -1, "a consumer could make the ring writable");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EACCES)
    );
    // nor can the ring be changed through its file, opened again
    // read-write as an attacker would
    attack_the_file_behind(&ring);
    let words = ring.words();
    let (mut valid, mut overwritten) = (0u64, 0u64);
    let mut out = vec![0u8; BYTES];
    let mut expect = vec![0u8; BYTES];
    loop {
        assert!(t0.elapsed() < Duration::from_secs(120), "producer stalled");
        // (relaxed + fence: the only loads sound on the read-only mapping)
        let seq = words.load(latest_word());
        std::sync::atomic::fence(Ordering::Acquire);
        if seq == 0 {
            std::hint::spin_loop();
            continue;
        }
        for s in [seq, seq.saturating_sub(3).max(1)] {
            let slot = ((s - 1) % SLOTS as u64) as usize;
            let info = SpectrumInfo {
                offset: (slot * slot_bytes(BYTES)) as u64,
                timestamp: s,
                seq: s,
                digest: 0,
            };
            match ring.read(BYTES, &info, DigestKind::None, &mut out) {
                ReadOutcome::Valid => {
                    fill(s, &mut expect);
                    assert_eq!(out, expect, "spectrum {s} accepted torn");
                    valid += 1;
                }
                ReadOutcome::Overwritten => overwritten += 1,
                other => panic!("{other:?}"),
            }
        }
        if seq == TOTAL {
            break;
        }
    }
    let st = child.wait().unwrap();
    let _ = std::fs::remove_file(&sock);
    assert!(st.success(), "producer failed");
    assert!(valid > 1000, "valid {valid}, overwritten {overwritten}");
    println!("{valid} valid, {overwritten} overwritten, none torn");
}

/// Open the ring's file again, read-write, through `/proc/self/fd/N` of
/// the read-only descriptor the producer passed (what any consumer process
/// can do, unprivileged), and try every way to change or resize the
/// producer's ring: each must fail.
fn attack_the_file_behind(ring: &ImportedRing) {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::FileExt;
    let path = format!("/proc/self/fd/{}", ring.as_fd().as_raw_fd());
    // a memory file's mode lets its owner open it again read-write: the
    // seals, not the descriptor's mode, are what protect the ring
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("reopening {path} read-write: {e}"));
    let w = f.write_at(&[0xff; 8], 0);
    assert!(w.is_err(), "a consumer wrote the producer's ring: {w:?}");
    // SAFETY: an attempt at a shared writable mapping of the reopened
    // file; it is expected to fail, and is unmapped if it does not.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if m != libc::MAP_FAILED {
        // SAFETY: the mapping just made, 4096 bytes.
        unsafe { libc::munmap(m, 4096) };
        panic!("a consumer mapped the producer's ring writable");
    }
    // a read-only shared mapping of the read-write descriptor, then
    // mprotect to writable
    // SAFETY: a fresh read-only mapping at an address the kernel picks,
    // of the reopened file (at least 4096 bytes); no Rust memory involved.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(m, libc::MAP_FAILED, "a read-only mapping is allowed");
    // SAFETY: `m` is the 4096-byte mapping just made (checked), which no
    // reference points into; mprotect on it is expected to fail, and if it
    // did not, nothing writes through it.
    let r = unsafe { libc::mprotect(m, 4096, libc::PROT_READ | libc::PROT_WRITE) };
    // SAFETY: the mapping just made, 4096 bytes, unused from here on.
    unsafe { libc::munmap(m, 4096) };
    assert_eq!(r, -1, "a consumer made its mapping of the ring writable");
    let t = f.set_len(0);
    assert!(t.is_err(), "a consumer shrank the producer's ring");
    let t = f.set_len(1 << 30);
    assert!(t.is_err(), "a consumer grew the producer's ring");
    // SAFETY: fallocate on a descriptor we own; expected to fail.
    let p = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096,
        )
    };
    assert_eq!(p, -1, "a consumer punched a hole in the producer's ring");
    // SAFETY: fcntl on a descriptor we own; expected to fail (sealed).
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
    assert_eq!(r, -1, "a consumer changed the ring's seals");
}

/// Someone squatting producer X's handover name (only a holder of the
/// key can compute it; say it leaked): one that knows the key but is
/// another producer, one without the key, one that talks garbage.
/// A consumer asking for X is refused by each (an error naming why), and
/// maps nothing.
#[test]
fn a_squatter_on_the_handover_name_is_refused() {
    use splitrt_vys::export::handover_addr;
    use std::io::{Read, Write};
    let x = 0x5eed_0000_0000_0000 | std::process::id() as u64;
    let l = UnixListener::bind_addr(&handover_addr(&KEY, x).unwrap()).unwrap();
    let ring = ExportedRing::new(4096).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // another producer id, the right key
            let (s, _) = l.accept().unwrap();
            let _ = ring.serve(s, &KEY, x + 1, 1);
            // the wrong key
            let (s, _) = l.accept().unwrap();
            let _ = ring.serve(s, &[9; 32], x, 1);
            // garbage: a nonce, then 48 bytes and no descriptor
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(&[7; 32]);
            let mut answer = [0u8; 64];
            let _ = s.read_exact(&mut answer);
            let _ = s.write_all(&[0xee; 48]);
        });
        for why in ["not the producer", "refused", "refused"] {
            let e = ImportedRing::connect_producer(x, &KEY)
                .err()
                .unwrap_or_else(|| panic!("a squatter's ring was mapped ({why})"));
            assert!(e.to_string().contains(why), "{e}");
        }
    });
}
