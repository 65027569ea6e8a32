//! A call whose arguments fit a Short is kept as its `rpc:short` words
//! while it is alone in its destination's buffer; a second call to that
//! rank turns it back into a record of the batch. Every mix of the two
//! gives the same results, errors and counts as records did (one process,
//! a job of one rank calling itself).
use splitrt_am::EndpointBuilder;
use splitrt_rpc::Rpc;

#[test]
fn rpc2_a_call_kept_as_words_joins_the_batch_of_the_calls_after_it() {
    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b).unwrap();
    let inc = rpc
        .register(&mut b, "inc", |_src, x: u64| x.wrapping_add(1))
        .unwrap();
    let echo = rpc.register(&mut b, "echo", |_src, v: Vec<u8>| v).unwrap();
    let ep = b.attach().unwrap();
    let long: Vec<u8> = (0..40).collect();

    // short, then long, then short: one batch of three
    let before = rpc.stats();
    let a = inc.call(&ep, 0, &1).unwrap();
    let l = echo.call(&ep, 0, &long).unwrap();
    let c = inc.call(&ep, 0, &u64::MAX).unwrap();
    assert_eq!(c.wait().unwrap(), 0);
    assert_eq!(l.wait().unwrap(), long);
    assert_eq!(a.wait().unwrap(), 2);
    let s = rpc.stats();
    assert_eq!(
        (s.calls - before.calls, s.messages - before.messages),
        (3, 1)
    );

    // long, then short: the short one is a record at once
    let before = rpc.stats();
    let l = echo.call(&ep, 0, &long).unwrap();
    let a = inc.call(&ep, 0, &7).unwrap();
    assert_eq!(a.wait().unwrap(), 8);
    assert_eq!(l.wait().unwrap(), long);
    let s = rpc.stats();
    assert_eq!(
        (s.calls - before.calls, s.messages - before.messages),
        (2, 1)
    );

    // many short ones: the first kept as words, all sent as one batch
    let before = rpc.stats();
    let futs: Vec<_> = (0..1000u64)
        .map(|i| inc.call(&ep, 0, &i).unwrap())
        .collect();
    rpc.flush(&ep).unwrap();
    for (i, f) in futs.into_iter().enumerate() {
        assert_eq!(f.wait().unwrap(), i as u64 + 1);
    }
    let s = rpc.stats();
    assert_eq!(
        (s.calls - before.calls, s.messages - before.messages),
        (1000, 1)
    );

    // a call alone, dropped before it is sent: abandoned, the next one fine
    drop(inc.call(&ep, 0, &3).unwrap());
    assert_eq!(inc.call(&ep, 0, &4).unwrap().wait().unwrap(), 5);
    // a rank outside the job: refused at the call, nothing kept
    let e = inc.call(&ep, 1, &4).err().unwrap().to_string();
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(inc.call(&ep, 0, &9).unwrap().wait().unwrap(), 10);
    ep.finish().unwrap();
}
