//! The full datagram tag (wire version 4): a Carter-Wegman MAC with a
//! one-time key per datagram, built as ChaCha20-Poly1305 builds its tag,
//! with keyed BLAKE3 as the key generator and POLYVAL (RFC 8452, the
//! universal hash of AES-GCM-SIV) as the hash.
//!
//! For a datagram `d` of `n` bytes before its tag:
//!
//! ```text
//! (H, s) = keyed BLAKE3 under the generator key of d[0..56]   (32 bytes: H 16, s 16)
//! tag    = POLYVAL_H(d[0..n] zero-padded to 16 bytes || L) XOR s
//! L      = 8n as u64 LE || 0u64                              (the length block)
//! ```
//!
//! `d[0..56]` is the header's identifying part: magic, version, kind,
//! flags, `hold`, body length, sender, receiver, sequence number,
//! acknowledgements, clocks and the datagram number `pn` (the bytes the
//! header tag covers). The generator key is keyed BLAKE3 of a label under
//! the job's datagram key ([`super::wire::Mac`]), which already mixes in
//! the per-job nonce (`job_nonce.rs`) or, for a vys read session, the two
//! handshake nonces of that session.
//!
//! **The precondition.** A Carter-Wegman tag is secure only if no one-time
//! key ever tags two different messages: two datagrams under one `(H, s)`
//! give away `s` and let a forger solve for `H`. Here a sender never seals
//! two different datagrams with the same first 56 bytes under one key:
//! the protocol (`proto`) gives every datagram it sends to a peer a new
//! `pn` (one more each time, retransmissions and controls included; a
//! retransmission re-seals the stored datagram under its new number), its
//! per-peer state is never dropped or reset while the `Proto` lives, one
//! `Proto` per rank is made per job (a restarted rank is a new job with a
//! new nonce, hence a new key), and `src`, `dst` are in the bytes. A vys
//! read session's key is keyed BLAKE3 of the consumer's and the server's
//! fresh 32-byte nonces (`splitrt-vys` `handshake::session_key`), so no two
//! sessions share a key, and inside one session the same `Proto` rules
//! hold. `proto::pn_unique_tests` checks that retransmissions under loss
//! never reuse identifying bytes.
//!
//! **The bound.** POLYVAL over at most `l` 16-byte blocks (padding and the
//! length block included) is `l / 2^128`-almost-XOR-universal, so with
//! `(H, s)` indistinguishable from random a forger succeeds with
//! probability at most `q * l / 2^128` over `q` attempts (`l` is 4,096 for a
//! 65,507-byte datagram: about 2^-116 each), plus its advantage against
//! keyed BLAKE3 as a PRF. Were the tag truncated to `t < 128` bits, the
//! bound would become `q * l / 2^t` (each truncated difference collects
//! `2^(128 - t)` full ones): 64 bits would give `2^-52` per attempt at
//! 64 KiB. The wire keeps all 16 bytes ([`super::wire::TAG`]).
//!
//! **The cost** (per byte, measured on an AMD EPYC with VPCLMULQDQ): the
//! `polyval` crate's POLYVAL was about 0.25 ns at 1,472 B, 0.18 at 8 KiB,
//! 0.17 at 64 KiB, against keyed BLAKE3 (pure Rust, as built here) at
//! 1.21, 0.86, 0.34. From 160 bytes on, on a CPU with VPCLMULQDQ, POLYVAL
//! is `polyval_wide` (16 blocks per reduction on 512- or 256-bit
//! registers; the same function bit for bit): the whole tag then costs
//! 0.15 ns/B at 1,472 B, 0.062 at 8 KiB and 0.046 at 64 KiB against the
//! crate-only tag's 0.26, 0.18 and 0.16 in the same run (0.57x, 0.34x,
//! 0.28x; `bench_tag` below). The one BLAKE3 block for the one-time key
//! (about 100 ns: the tag at 1,472 B less its POLYVAL) is most of what
//! remains below a few KiB.
//! docs/networking.md has the figures and the commands.

/// Bytes of the header that the one-time key is derived from (the bytes
/// the header tag covers).
pub(super) const KEYED_BY: usize = 56;

/// The label the generator key is derived with from the datagram key.
const GENERATOR_LABEL: &[u8] = b"splitrt udp one-time key v4";

/// The key that derives one-time keys, from the datagram key (kept apart
/// from the header tag's key and from the header-only tag, which use the
/// datagram key otherwise).
pub(super) fn generator_key(key: &[u8; 32]) -> [u8; 32] {
    *blake3::keyed_hash(key, GENERATOR_LABEL).as_bytes()
}

/// The one-time key `(H, s)` of the datagram whose first bytes are `head`.
fn one_time_key(gen: &[u8; 32], head: &[u8]) -> ([u8; 16], [u8; 16]) {
    let k = blake3::keyed_hash(gen, &head[..KEYED_BY.min(head.len())]);
    let k = k.as_bytes();
    let (mut h, mut s) = ([0u8; 16], [0u8; 16]);
    h.copy_from_slice(&k[..16]);
    s.copy_from_slice(&k[16..]);
    (h, s)
}

/// The 16-byte tag of `data` (the datagram before its tag, header first)
/// under the generator key `gen` (from [`generator_key`]).
pub(super) fn tag(gen: &[u8; 32], data: &[u8]) -> [u8; 16] {
    let (h, s) = one_time_key(gen, data);
    let mut len = [0u8; 16];
    len[..8].copy_from_slice(&(8 * data.len() as u64).to_le_bytes());
    let mut t = super::polyval_wide::polyval(&h, data, &len);
    for (t, s) in t.iter_mut().zip(s) {
        *t ^= s;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use polyval::universal_hash::UniversalHash;
    use polyval::Polyval;

    fn datagram(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 1) as u8).collect()
    }

    /// POLYVAL itself (RFC 8452, Appendix A): the crate computes the
    /// published value.
    #[test]
    fn mac_polyval_matches_rfc8452() {
        let hex = |s: &str| -> [u8; 16] {
            let mut b = [0u8; 16];
            for (i, x) in b.iter_mut().enumerate() {
                *x = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
            }
            b
        };
        let h = hex("25629347589242761d31f826ba4b757b");
        let mut p = Polyval::new(&h.into());
        p.update(&[
            hex("4f4f95668c83dfb6401762bb2d01a262").into(),
            hex("d1a24ddd2721d006bbe45f20d3c9f362").into(),
        ]);
        let got: [u8; 16] = p.finalize().into();
        assert_eq!(got, hex("f7a3b47b846119fae5b7866cf5e5b77e"));
    }

    /// Known answer: the tag is POLYVAL (the crate's own output) under the
    /// first half of keyed BLAKE3 of the header, over the padded datagram
    /// and the length block, XOR the second half; and a fixed vector pins
    /// the wire format.
    #[test]
    fn mac_tag_known_answer() {
        let key = [0x42u8; 32];
        let gen = generator_key(&key);
        assert_eq!(
            gen,
            *blake3::keyed_hash(&key, b"splitrt udp one-time key v4").as_bytes()
        );
        let d = datagram(100);
        let otk = blake3::keyed_hash(&gen, &d[..56]);
        let mut h = [0u8; 16];
        h.copy_from_slice(&otk.as_bytes()[..16]);
        let mut blocks = d.clone();
        blocks.resize(112, 0);
        blocks.extend_from_slice(&800u64.to_le_bytes());
        blocks.extend_from_slice(&[0; 8]);
        let mut p = Polyval::new(&h.into());
        for b in blocks.chunks(16) {
            let mut x = [0u8; 16];
            x.copy_from_slice(b);
            p.update(&[x.into()]);
        }
        let mut want: [u8; 16] = p.finalize().into();
        for (w, s) in want.iter_mut().zip(&otk.as_bytes()[16..]) {
            *w ^= s;
        }
        let t = tag(&gen, &d);
        assert_eq!(t, want);
        // the wire format, pinned: a change here is a new wire version
        let pinned: String = t.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(pinned, PINNED_100);
    }

    /// The tag of [`datagram`]`(100)` under `generator_key(&[0x42; 32])`.
    const PINNED_100: &str = "6c1aa0082882a5a2f375d6ca15b94d23";

    /// The tag as wire version 4 was first built: the `polyval` crate
    /// alone, whatever the length.
    fn tag_by_crate(gen: &[u8; 32], data: &[u8]) -> [u8; 16] {
        let (h, s) = one_time_key(gen, data);
        let mut p = Polyval::new(&h.into());
        p.update_padded(data);
        let mut len = [0u8; 16];
        len[..8].copy_from_slice(&(8 * data.len() as u64).to_le_bytes());
        p.update(&[len.into()]);
        let mut t: [u8; 16] = p.finalize().into();
        for (t, s) in t.iter_mut().zip(s) {
            *t ^= s;
        }
        t
    }

    /// Wire compatibility: [`tag`] (which takes the wide POLYVAL from
    /// `polyval_wide::WIDE_MIN` bytes on where the CPU has VPCLMULQDQ)
    /// gives what the crate alone gives, at the sizes the fabric sends;
    /// and tags computed before the wide path existed are pinned.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "under Miri tag() is the crate's (no intrinsics): nothing to compare, and 64 KiB tags are slow there"
    )]
    fn mac_tag_unchanged_by_the_wide_polyval() {
        let gen = generator_key(&[0x42u8; 32]);
        let lens = [
            56, 64, 100, 255, 256, 257, 511, 512, 513, 1472, 8192, 9000, 64_192, 65_507,
        ];
        for len in lens {
            let d = datagram(len);
            assert_eq!(tag(&gen, &d), tag_by_crate(&gen, &d), "len {len}");
        }
        for (len, pinned) in PINNED_LARGE {
            let t = tag(&gen, &datagram(len));
            let t: String = t.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(t, pinned, "len {len}");
        }
    }

    /// Tags of [`datagram`]`(len)` under `generator_key(&[0x42; 32])`, as
    /// the crate computed them before `polyval_wide`.
    const PINNED_LARGE: [(usize, &str); 3] = [
        (1472, "62728fb01f75ac113b7d23eb511e57a2"),
        (8192, "f8e4a82af584facb9da7ab8e5423ed98"),
        (65_507, "81179831770a5d769e7387b7ecde45b3"),
    ];

    #[test]
    fn mac_tag_depends_on_every_byte_the_length_and_the_key() {
        let key = generator_key(&[3u8; 32]);
        let other = generator_key(&[4u8; 32]);
        let lens: &[usize] = if cfg!(miri) {
            &[64, 80, 81, 95, 96, 200]
        } else {
            &[64, 80, 81, 95, 96, 1000, 1472, 9000, 65_507]
        };
        for &len in lens {
            let d = datagram(len);
            let t = tag(&key, &d);
            assert_ne!(t, tag(&other, &d), "len {len}: the key");
            // every byte of header and body, every bit of a few
            let step = if cfg!(miri) { 13 } else { 1 };
            for i in (0..len).step_by(step) {
                for bit in [0u8, 7] {
                    let mut e = d.clone();
                    e[i] ^= 1 << bit;
                    assert_ne!(t, tag(&key, &e), "len {len} byte {i} bit {bit}");
                }
            }
            // trailing zeros are not the same datagram, nor is one cut short
            let mut z = d.clone();
            for extra in 1..=17 {
                z.push(0);
                assert_ne!(t, tag(&key, &z), "len {len} + {extra} zeros");
            }
            assert_ne!(t, tag(&key, &d[..len - 1]), "len {len} cut");
        }
    }

    /// Calls of `f` that take about `WINDOW` (doubling from 1 until they
    /// do): every timed window is then about as long, whatever the size.
    fn calls_per_window(f: &mut dyn FnMut()) -> u32 {
        const WINDOW: std::time::Duration = std::time::Duration::from_millis(1);
        let mut n = 1u32;
        loop {
            let t = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            let e = t.elapsed();
            if e >= WINDOW / 2 || n >= 1 << 24 {
                let per = e.as_secs_f64() / f64::from(n);
                return ((WINDOW.as_secs_f64() / per) as u32).clamp(1, 1 << 24);
            }
            n *= 2;
        }
    }

    /// Best-of-`rounds` nanoseconds per call of each of `fs`, each timed
    /// over windows of about 1 ms ([`calls_per_window`]), the rounds
    /// alternating between them and reversing their order every round
    /// (so load from other work, and being first, fall on all alike).
    fn best_ns(fs: &mut [&mut dyn FnMut()], rounds: u32) -> Vec<f64> {
        let iters: Vec<u32> = fs.iter_mut().map(|f| calls_per_window(&mut **f)).collect();
        let mut best = vec![f64::INFINITY; fs.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..fs.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let t = std::time::Instant::now();
                for _ in 0..iters[i] {
                    fs[i]();
                }
                let ns = t.elapsed().as_nanos() as f64 / f64::from(iters[i]);
                best[i] = best[i].min(ns);
            }
        }
        best
    }

    /// Not a test: the cost of [`tag`] per byte against the crate-only
    /// tag, and of POLYVAL alone per backend at the sizes around
    /// `polyval_wide::WIDE_MIN` (where the wide path starts to pay),
    /// alternated in one run, with a control: the crate timed twice
    /// (`crate'`, the same code; its difference from `crate` is the
    /// method's noise). Run it in a release build:
    /// `cargo test --release -p splitrt-runtime --lib bench_tag -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: run it in a release build with --ignored --nocapture"]
    fn bench_tag() {
        use std::hint::black_box;
        let gen = generator_key(&[0x42u8; 32]);
        let rounds = 15;
        // warm up (clock, caches, the backends' detection)
        for _ in 0..2000 {
            black_box(tag(&gen, black_box(&datagram(1024))));
        }
        println!("tag() per byte: size, crate-only ns/B, crate-only' ns/B (control), new ns/B, new/crate, crate'/crate");
        for len in [64, 128, 256, 1472, 8192, 65_507, 65_536] {
            let d = datagram(len);
            let r = best_ns(
                &mut [
                    &mut || {
                        black_box(tag_by_crate(black_box(&gen), black_box(&d)));
                    },
                    &mut || {
                        black_box(tag_by_crate(black_box(&gen), black_box(&d)));
                    },
                    &mut || {
                        black_box(tag(black_box(&gen), black_box(&d)));
                    },
                ],
                rounds,
            );
            let (old, ctl, new) = (r[0] / len as f64, r[1] / len as f64, r[2] / len as f64);
            println!(
                "{len:>6} {old:.4} {ctl:.4} {new:.4} {:.2} {:.2}",
                new / old,
                ctl / old
            );
        }
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            use super::super::polyval_wide::{self, Wide};
            let h = [0x5au8; 16];
            let last = [0xa5u8; 16];
            let mut lens: Vec<usize> = (1..=16).map(|i| i * 32).collect();
            lens.extend([1472, 8192, 65_507]);
            // twice: the first pass's first rows ran on a cold CPU
            for pass in 1..=2 {
                println!("POLYVAL alone, ns per call (pass {pass}): size, crate, crate' (control), avx512, avx2");
                for &len in &lens {
                    let d = datagram(len);
                    let mut fs: Vec<Box<dyn FnMut()>> = vec![
                        Box::new(|| {
                            black_box(polyval_wide::by_crate(black_box(&h), black_box(&d), &last));
                        }),
                        Box::new(|| {
                            black_box(polyval_wide::by_crate(black_box(&h), black_box(&d), &last));
                        }),
                    ];
                    for w in [Wide::Avx512, Wide::Avx2] {
                        if w.available() {
                            let d = &d;
                            fs.push(Box::new(move || {
                                black_box(w.polyval(black_box(&h), black_box(d), &last));
                            }));
                        } else {
                            println!("(this CPU lacks {w:?}: not measured)");
                        }
                    }
                    let mut refs: Vec<&mut dyn FnMut()> = fs
                        .iter_mut()
                        .map(|f| &mut **f as &mut dyn FnMut())
                        .collect();
                    let r = best_ns(&mut refs, rounds);
                    let r: Vec<String> = r.iter().map(|x| format!("{x:.1}")).collect();
                    println!("{len:>6} {}", r.join(" "));
                }
            }
        }
    }

    /// Two datagrams alike but for the datagram number get unrelated
    /// one-time keys (so two tags never share `(H, s)`).
    #[test]
    fn mac_one_time_key_changes_with_the_datagram_number() {
        let gen = generator_key(&[9u8; 32]);
        let a = datagram(64);
        let mut b = a.clone();
        b[48] ^= 1;
        let (ha, sa) = one_time_key(&gen, &a);
        let (hb, sb) = one_time_key(&gen, &b);
        assert_ne!(ha, hb);
        assert_ne!(sa, sb);
        // bytes past the identifying part do not key it
        let mut c = a.clone();
        c[60] ^= 1;
        assert_eq!(one_time_key(&gen, &c), (ha, sa));
    }
}
