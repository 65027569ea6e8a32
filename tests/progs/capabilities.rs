//! Which capabilities the fabric lends the PGAS layer, and that its puts
//! and gets reach their target without them: each rank puts a block into
//! its right neighbour's part of a symmetric array and gets it back.
//!
//! Prints per rank `caps: rank R load_store=B one_sided=B mapped=M
//! put_datagrams=D` (`M`: ranks whose segment is mapped here; `D`: UDP
//! datagrams sent while the put was issued and synced, `-` without a UDP
//! fabric), then `capabilities ok`.

use splitrt::pgas::Pgas;

fn main() -> splitrt::Result<()> {
    let pg = Pgas::attach()?;
    let (me, n) = (pg.rank(), pg.size());
    let rma = pg.endpoint().rma();
    let load_store = rma.load_store();
    let mapped = load_store.map_or(0, |m| {
        (0..n).filter(|&r| m.peer_segment(r).is_some()).count()
    });
    let one_sided = rma.one_sided().is_some();
    let a = pg.alloc_sym::<u64>(4)?;
    pg.barrier()?;
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let sent = || pg.endpoint().udp_stats().map(|s| s.sent);
    let before = sent();
    pg.put(a.ptr(right), &[me as u64 + 1; 4])?;
    pg.sync()?;
    let after = sent();
    pg.barrier()?;
    let here: Vec<u64> = (0..4).map(|i| a.local().get(i)).collect();
    assert_eq!(
        here,
        [left as u64 + 1; 4],
        "rank {me}: the put from rank {left}"
    );
    let back = pg.get(a.ptr(right), 4)?.wait()?;
    assert_eq!(
        back,
        [me as u64 + 1; 4],
        "rank {me}: the get from rank {right}"
    );
    let datagrams = match (before, after) {
        (Some(b), Some(a)) => (a - b).to_string(),
        _ => "-".into(),
    };
    println!(
        "caps: rank {me} load_store={} one_sided={one_sided} mapped={mapped} put_datagrams={datagrams}",
        load_store.is_some()
    );
    pg.barrier()?;
    println!("capabilities ok");
    pg.finish()
}
