//! A caller about to block on a call already sent first sends the calls
//! buffered for the same rank since (one process, a job of one rank
//! calling itself): the target then runs them while the caller waits,
//! instead of caller and target taking turns batch by batch.
use splitrt_am::EndpointBuilder;
use splitrt_rpc::Rpc;

#[test]
fn a_blocking_wait_sends_the_calls_buffered_behind_it() {
    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b).unwrap();
    let inc = rpc
        .register(&mut b, "inc", |_src, x: u64| x.wrapping_add(1))
        .unwrap();
    let ep = b.attach().unwrap();
    // records of 14 + 1-3 B: enough calls to fill one Medium and start
    // the next buffer
    let n = (ep.max_medium(0).unwrap() / 15 + 500) as u64;
    let mut futs: Vec<_> = (0..n).map(|x| inc.call(&ep, 0, &x).unwrap()).collect();
    let sent = rpc.stats().calls;
    assert!(0 < sent && sent < n, "{sent} of {n} calls sent");
    // call 0 went with the first (full) buffer and is not answered yet
    // (nobody polled): its wait blocks, and sends the rest first
    let rest = futs.split_off(1);
    assert_eq!(futs.pop().unwrap().wait().unwrap(), 1);
    let s = rpc.stats();
    assert_eq!(s.calls, n, "{} of {n} calls sent while waiting", s.calls);
    assert_eq!(s.messages, 2);
    for (x, f) in rest.into_iter().enumerate() {
        assert_eq!(f.wait().unwrap(), x as u64 + 2);
    }
    ep.finish().unwrap();
}
