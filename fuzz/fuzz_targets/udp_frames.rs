//! Message frames of arbitrary bytes into the reassembler, as several
//! datagram bodies of one stream: errors are fine, panics and writes
//! outside the segment are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splitrt_runtime::fabric::frames::Reassembler;

fuzz_target!(|data: &[u8]| {
    let mut seg = vec![0u8; 8192];
    let mut r = Reassembler::default();
    for body in data.split(|&b| b == 0xFE) {
        let _ = r.feed(2, body, 2048, &mut seg, &mut |m| {
            assert!(m.payload.len() <= 8192);
            assert!(m.words.len() <= 16);
        });
    }
});
