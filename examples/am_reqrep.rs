//! am_reqrep: request/reply with Medium and Long payloads.
//!
//! Every rank asks its right neighbour two questions:
//! * Medium: "sum these numbers" — the payload travels inline and the
//!   request handler reads it in place; the reply is a Short with the sum.
//! * Long: "store this block and tell me its checksum" — the block is
//!   deposited straight into the neighbour's segment at the offset we chose
//!   before its handler runs; the reply is a Medium carrying the first bytes
//!   back as proof.
//!
//!     splitrt-run -n 4 target/release/examples/am_reqrep

use splitrt::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const BLOCK: usize = 256 << 10;

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("am_reqrep: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let sum = Arc::new(AtomicU64::new(u64::MAX));
    let head = Arc::new(Mutex::new(None::<(u64, Vec<u8>)>));

    let mut b = EndpointBuilder::new();
    let s = sum.clone();
    let sum_reply = b.reply("sum_reply", Kind::Short, 1, move |m| {
        s.store(m.arg(0), Ordering::Release);
    })?;
    let sum_request = b.request("sum", Kind::Medium, 0, move |tok, m| {
        // The Medium payload is read in place: an array of little-endian u64.
        let total: u64 = m
            .payload()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .sum();
        tok.reply(sum_reply, &[total], Payload::None)
            .expect("reply");
    })?;
    let h = head.clone();
    let stored_reply = b.reply("stored_reply", Kind::Medium, 1, move |m| {
        *h.lock().unwrap() = Some((m.arg(0), m.payload().to_vec()));
    })?;
    let store_request = b.request("store", Kind::Long, 1, move |tok, m| {
        // The block is already in our segment at the offset the sender
        // gave. Others may write there while we run, so it is read through
        // a view (copied out once), never as a `&[u8]`.
        let data = m.long_payload().expect("a Long").to_vec();
        assert_eq!(m.arg(0), data.len() as u64);
        tok.reply(
            stored_reply,
            &[checksum(&data)],
            Payload::Medium(&data[..64]),
        )
        .expect("reply");
    })?;
    let ep = b.attach()?;
    let (rank, size) = (ep.rank(), ep.size());
    let right = (rank + 1) % size;

    // Medium request, Short reply.
    let numbers: Vec<u64> = (1..=100).map(|i| i * (rank as u64 + 1)).collect();
    let bytes: Vec<u8> = numbers.iter().flat_map(|n| n.to_le_bytes()).collect();
    ep.request(right, sum_request, &[], Payload::Medium(&bytes))?;
    ep.wait_until(|| sum.load(Ordering::Acquire) != u64::MAX)?;
    let got = sum.load(Ordering::Acquire);
    let want: u64 = numbers.iter().sum();
    println!("rank {right} summed my {} numbers: {got}", numbers.len());

    // Long request into the neighbour's segment, Medium reply.
    let block: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + rank) as u8).collect();
    let offset = (rank * BLOCK) as u64; // each sender its own region
    ep.request(
        right,
        store_request,
        &[BLOCK as u64],
        Payload::Long {
            data: &block,
            offset,
        },
    )?;
    ep.wait_until(|| head.lock().unwrap().is_some())?;
    let (sum_there, first) = head.lock().unwrap().take().unwrap();
    println!(
        "rank {right} stored {} KiB at offset {offset:#x}, checksum {sum_there:016x}",
        BLOCK >> 10
    );

    ep.barrier()?;
    if got != want || sum_there != checksum(&block) || first != block[..64] {
        return Err(splitrt::Error::usage(format!(
            "rank {rank}: wrong answers (sum {got} vs {want}, checksum {sum_there:x})"
        )));
    }
    ep.finish()
}
