//! The UDP fabric's datagram path under arbitrary input: the first byte
//! chooses whether the rest arrives as it is (a stranger: the tag must
//! fail) or sealed with the job's key (an authenticated but broken or
//! malicious peer: headers, sequence numbers, acknowledgements and frames
//! of any value). Nothing may panic or write outside the segment.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splitrt_runtime::fabric::frames::Reassembler;
use splitrt_runtime::fabric::udp::proto::{Proto, ProtoConfig};
use splitrt_runtime::fabric::udp::wire::{Mac, HEADER, OVERHEAD, TAG};

const KEY: [u8; 32] = [7; 32];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let cfg = ProtoConfig { window: 4, ..ProtoConfig::default() };
    let mut p = Proto::new(1, 3, cfg, KEY, 0);
    let mut reasm: Vec<[Reassembler; 2]> = (0..3).map(|_| Default::default()).collect();
    let mut seg = vec![0u8; 4096];
    // several datagrams: split the input at 0xFF 0xFE markers
    let mut now = 1;
    for chunk in rest.split(|&b| b == 0xFE) {
        let mut d = chunk.to_vec();
        if mode & 1 == 1 && d.len() >= OVERHEAD - TAG {
            d.resize(d.len() + TAG, 0);
            // keep the length field consistent half the time
            if mode & 2 == 2 && d.len() >= OVERHEAD {
                let body = (d.len() - OVERHEAD) as u16;
                d[6..8].copy_from_slice(&body.to_le_bytes());
            }
            Mac::new(KEY).seal(&mut d);
        }
        if let Some(b) = p.handle_datagram(now, d) {
            p.recycle(b);
        }
        now += 1_000_000;
        p.handle_timeout(now);
        p.poll_transmit(now, true, &mut |_, out| assert!(out.len() >= OVERHEAD));
        for st in 0..2 {
            while let Some((src, d)) = p.next_ready(st) {
                let body = &d[HEADER..d.len() - TAG];
                let _ = reasm[src as usize][st].feed(src as usize, body, 1024, &mut seg, &mut |m| {
                    assert!(m.payload.len() <= 4096);
                });
                p.recycle(d);
            }
        }
    }
});
