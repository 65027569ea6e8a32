//! vys signal messages from arbitrary bytes: an error or a signal, never a
//! panic; signed garbage is still checked field by field.
use proptest::prelude::*;
use splitrt_vys::signal::{Signal, SignalError, SIGNAL_TAG, SIGNAL_VERSION};

const KEY: [u8; 32] = [9; 32];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let _ = Signal::decode(&b, &KEY);
    }

    #[test]
    fn signed_arbitrary_bytes(mut b in proptest::collection::vec(any::<u8>(), 2 + SIGNAL_TAG..1600)) {
        b[..2].copy_from_slice(&SIGNAL_VERSION.to_le_bytes());
        {
            let end = b.len() - SIGNAL_TAG;
            let t = blake3::keyed_hash(&KEY, &b[..end]);
            b[end..].copy_from_slice(&t.as_bytes()[..SIGNAL_TAG]);
        }
        match Signal::decode(&b, &KEY) {
            Ok(s) => {
                prop_assert!(s.entries.len() <= splitrt_vys::signal::MAX_ENTRIES);
                // what decodes re-encodes to the same bytes
                prop_assert_eq!(s.encode(&KEY), b);
            }
            Err(SignalError::Version { .. }) => prop_assert!(false, "version was set"),
            Err(SignalError::Foreign) => prop_assert!(false, "the tag was set"),
            Err(_) => {}
        }
    }
}
