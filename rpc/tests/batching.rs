//! A stream of small calls leaves in batches as it is made (one process,
//! a job of one rank calling itself): the target can run one batch while
//! the caller fills the next, instead of the whole stream waiting in one
//! buffer of a Medium until the caller waits.
use splitrt_am::EndpointBuilder;
use splitrt_rpc::Rpc;

#[test]
fn a_stream_of_calls_leaves_in_batches_as_it_is_made() {
    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b).unwrap();
    let inc = rpc
        .register(&mut b, "inc", |_src, x: u64| x.wrapping_add(1))
        .unwrap();
    let ep = b.attach().unwrap();
    let n = 2000u64;
    let futs: Vec<_> = (0..n).map(|x| inc.call(&ep, 0, &x).unwrap()).collect();
    let s = rpc.stats();
    // 2000 records of 14 + 1-2 B: about 32 KiB, under one Medium (so
    // nothing had to be sent before); in batches of at most 4 KiB all
    // but the last batch's calls (fewer than 300) are gone already.
    assert!(
        s.calls + 300 >= n && s.messages >= 5,
        "{} of {n} calls sent, in {} messages, before any wait",
        s.calls,
        s.messages
    );
    for (x, f) in futs.into_iter().enumerate() {
        assert_eq!(f.wait().unwrap(), x as u64 + 1);
    }
    let s = rpc.stats();
    assert_eq!(s.calls, n);
    assert!(s.messages * 20 <= n, "{} messages", s.messages);
    ep.finish().unwrap();
}
