// The sound use: buffers that outlive the scope call compile.
use splitrt_pgas::{GlobalPtr, Pgas};

fn outer_buffer(pg: &Pgas, p: GlobalPtr<u64>) -> splitrt_am::Result<u64> {
    let mut buf = vec![0u64; 4];
    let mut one = [0u64; 1];
    pg.scope(|s| {
        s.get(p, &mut buf)?;
        s.get(p.add(4), &mut one)
    })?;
    Ok(buf[0] + one[0])
}

fn main() {
    let _ = outer_buffer;
}
