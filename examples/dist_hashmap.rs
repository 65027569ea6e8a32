//! dist_hashmap: a distributed hash map on typed RPC, Lamellar style.
//!
//! Each rank owns the keys that hash to it. `insert` and `get` are RPC
//! functions registered by name on every rank; a rank inserts its keys
//! wherever they belong (the calls to each owner are aggregated into a few
//! Medium messages), then reads back the keys another rank inserted, by
//! awaiting the futures of `get` calls under a tokio current-thread
//! runtime (the futures sleep on the endpoint's traffic waker).
//!
//!     splitrt-run -n 4 target/release/examples/dist_hashmap [KEYS_PER_RANK]

use serde::{Deserialize, Serialize};
use splitrt::rpc::Rpc;
use splitrt::EndpointBuilder;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What `insert` carries (any serde type will do).
#[derive(Serialize, Deserialize)]
struct Insert {
    key: String,
    value: u64,
}

/// The rank that owns `key` (FNV-1a, so every rank agrees).
fn owner(key: &str, ranks: usize) -> usize {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (h % ranks as u64) as usize
}

fn value_of(rank: usize, i: u64) -> u64 {
    rank as u64 * 1_000_000 + i * i
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dist_hashmap: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let keys: u64 = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .map_err(|_| format!("KEYS_PER_RANK: not a number: {s:?}"))?,
        None => 1000,
    };
    // This rank's shard, shared with the RPC functions that serve it.
    let shard = Arc::new(Mutex::new(HashMap::<String, u64>::new()));

    let mut b = EndpointBuilder::new();
    let rpc = Rpc::new(&mut b)?;
    let s = shard.clone();
    let insert = rpc.register(&mut b, "insert", move |_src, kv: Insert| {
        s.lock().unwrap().insert(kv.key, kv.value)
    })?;
    let s = shard.clone();
    let get = rpc.register(&mut b, "get", move |_src, key: String| {
        s.lock().unwrap().get(&key).copied()
    })?;
    let s = shard.clone();
    let len = rpc.register(&mut b, "len", move |_src, ()| {
        s.lock().unwrap().len() as u64
    })?;
    let ep = b.attach()?;
    let (me, n) = (ep.rank(), ep.size());
    let key = |rank: usize, i: u64| format!("key-{rank}-{i}");

    // Insert: buffered per owner, sent as few Mediums; wait for every reply.
    let inserts = (0..keys)
        .map(|i| {
            let k = key(me, i);
            let value = value_of(me, i);
            insert.call(&ep, owner(&k, n), &Insert { key: k, value })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for f in inserts {
        if f.wait()?.is_some() {
            return Err("a key was inserted twice".into());
        }
    }
    ep.barrier()?; // every rank's inserts are in

    // Get the next rank's keys back, awaiting the futures.
    let from = (me + 1) % n;
    let gets = (0..keys)
        .map(|i| get.call(&ep, owner(&key(from, i), n), &key(from, i)))
        .collect::<Result<Vec<_>, _>>()?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let found = rt.block_on(async {
        let mut found = 0;
        for (i, f) in gets.into_iter().enumerate() {
            match f.await? {
                Some(v) if v == value_of(from, i as u64) => found += 1,
                other => return Err(format!("key {} read {other:?}", key(from, i as u64)).into()),
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(found)
    })?;
    println!("rank {me}: inserted {keys} keys, read {found} of rank {from}'s back");
    ep.barrier()?;

    if me == 0 {
        let mut total = 0;
        for r in 0..n {
            total += len.call(&ep, r, &())?.wait()?;
        }
        println!("{total} keys in the map across {n} ranks");
        if total != keys * n as u64 {
            return Err(format!("expected {} keys", keys * n as u64).into());
        }
    }
    ep.finish()?;
    Ok(())
}
