//! What the vys end-to-end tests share.

use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerStats, Message};
use splitrt_vys::producer::ProductId;
use std::time::{Duration, Instant};

/// Take messages, asking the consumer to shut down once `expect` valid
/// spectra came, until END: (valid spectra checked, stats).
pub fn drain(c: &Consumer, want: impl Fn(&ProductId) -> bool, expect: u64) -> (u64, ConsumerStats) {
    let mut valid = 0;
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < Duration::from_secs(60), "no END");
        match c.recv(Duration::from_secs(10)) {
            Some(Message::Valid(s)) => {
                let p = &s.product;
                let id = ProductId {
                    stations: p.stations,
                    spectral_window: p.spectral_window,
                    stokes: p.stokes,
                };
                assert!(want(&id), "a spectrum the filter did not choose: {id:?}");
                assert!(
                    checkable::matches(
                        (p.stations, p.spectral_window, p.stokes),
                        s.info.timestamp,
                        s.data()
                    ),
                    "spectrum {:?} t={} has the wrong content",
                    id,
                    s.info.timestamp
                );
                valid += 1;
                if valid == expect {
                    c.shutdown();
                }
            }
            Some(Message::End { stats, .. }) => return (valid, stats),
            // a chosen spectrum that will not come: say so now
            Some(
                m @ (Message::DataBufferStarvation { .. }
                | Message::ReadFailure { .. }
                | Message::VerificationFailure { .. }),
            ) => panic!("{m} ({valid} of {expect} valid spectra came)"),
            Some(_) => {}
            None => panic!("no message for 10 s ({valid} of {expect} valid spectra came)"),
        }
    }
}
