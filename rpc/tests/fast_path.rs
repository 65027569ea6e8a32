//! Calls sent alone with arguments and results of at most 16 encoded
//! bytes travel in AM Shorts (`rpc:short`, `rpc:short_result`); longer
//! ones, errors and panics take the Medium path. Every case gives the
//! same result or error as before (one process, a job of one rank calling
//! itself), and `Rpc::stats` shows which calls took the fast path (the
//! results alone would be the same with it off).
use splitrt_am::EndpointBuilder;
use splitrt_rpc::Rpc;

#[test]
fn small_and_large_calls_alone_give_their_results_and_errors() {
    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b).unwrap();
    let inc = rpc
        .register(&mut b, "inc", |_src, x: u64| x.wrapping_add(1))
        .unwrap();
    let echo = rpc.register(&mut b, "echo", |_src, v: Vec<u8>| v).unwrap();
    let unit = rpc.register(&mut b, "unit", |_src, (): ()| ()).unwrap();
    let boom = rpc
        .register(&mut b, "boom", |_src, x: u64| -> u64 {
            if x == 7 {
                panic!("seven")
            }
            x
        })
        .unwrap();
    let ep = b.attach().unwrap();
    // u64::MAX: a 10 B varint, the largest u64 encoding, still fits
    for x in [0, 1, 300, u64::MAX - 1, u64::MAX] {
        assert_eq!(
            inc.call(&ep, 0, &x).unwrap().wait().unwrap(),
            x.wrapping_add(1)
        );
    }
    let s = rpc.stats();
    assert_eq!((s.calls, s.short_calls), (5, 5), "{s:?}");
    // arguments and results of 0..=40 B: both sides of 16 B
    for n in 0..=40u8 {
        let v: Vec<u8> = (0..n).collect();
        assert_eq!(echo.call(&ep, 0, &v).unwrap().wait().unwrap(), v);
    }
    // 0..=15 B encode in at most 16 B (a length byte first): in a Short
    let s = rpc.stats();
    assert_eq!((s.calls, s.short_calls), (5 + 41, 5 + 16), "{s:?}");
    unit.call(&ep, 0, &()).unwrap().wait().unwrap();
    // a panic: the message comes back (by Medium), the target lives on
    let e = boom
        .call(&ep, 0, &7)
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    assert!(e.contains("rpc 'boom'") && e.contains("seven"), "{e}");
    assert_eq!(boom.call(&ep, 0, &8).unwrap().wait().unwrap(), 8);
    // bytes that are no u64 (a varint cut short), or one left over
    for raw in [&[0xff, 0xff][..], &[1, 2][..]] {
        let e = inc
            .call_raw(&ep, 0, raw)
            .unwrap()
            .wait()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rpc 'inc'") && e.contains("did not decode"),
            "{e}"
        );
    }
    assert_eq!(inc.call(&ep, 0, &41).unwrap().wait().unwrap(), 42);
    // by .await too
    let f = inc.call(&ep, 0, &5).unwrap();
    let r = block_on(f);
    assert_eq!(r.unwrap(), 6);
    // every call alone (one message each); all but the 25 echoes of more
    // than 15 B in a Short, the panic's and the raw calls' included
    let s = rpc.stats();
    assert_eq!((s.calls, s.messages, s.short_calls), (53, 53, 28), "{s:?}");
    ep.finish().unwrap();
}

/// Poll a future to completion on this thread (no executor crate).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark()
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(10));
    }
}
