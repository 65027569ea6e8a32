//! Gets larger than one Medium, cut into chunks (one request and one
//! Medium reply each, `pgas/src/get_chunk.rs`): every rank fills its part
//! of a symmetric byte array with a pattern, then gets the next rank's at
//! odd offsets and lengths (several chunks, a short tail) and checks every
//! byte.
//!
//! Usage: t_get_chunks    (exit 0 = every byte right)

use splitrt::pgas::{Pgas, SymArray};
use splitrt::Error;

const N: usize = (1 << 20) + 64;

/// A byte of rank `rank`'s pattern at `i`: a hash of the whole index
/// (splitmix64's finaliser), so no shift of a chunk by any multiple of a
/// power of two gives the same bytes.
fn byte(rank: usize, i: usize) -> u8 {
    let mut x = (i as u64) ^ ((rank as u64) << 48);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u8
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_get_chunks: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let pg = Pgas::attach()?;
    let (me, n) = (pg.rank(), pg.size());
    let a: SymArray<u8> = pg.alloc_sym(N)?;
    let mine: Vec<u8> = (0..N).map(|i| byte(me, i)).collect();
    pg.write_slice(a.at(me, 0), &mine)?;
    pg.barrier()?;
    let t = (me + 1) % n;
    for (off, len) in [(5, 3 * 65379 + 17), (0, 1 << 20), (63, 1 << 20), (1, 65536)] {
        let got = pg.get(a.at(t, off), len)?.wait()?;
        if got.len() != len {
            return Err(Error::usage(format!(
                "{len} B at {off}: got {} B",
                got.len()
            )));
        }
        if let Some(i) = (0..len).find(|&i| got[i] != byte(t, off + i)) {
            return Err(Error::usage(format!(
                "{len} B at {off} from rank {t}: byte {i} is {} not {}",
                got[i],
                byte(t, off + i)
            )));
        }
    }
    pg.barrier()?;
    println!("get chunks ok");
    pg.finish()
}
