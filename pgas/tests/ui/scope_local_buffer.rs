// A buffer local to the scope's closure must not be handed to `Scope::get`:
// on the AM path the reply is copied into it after the closure returned and
// the buffer was freed (use after free). `Scope` is invariant in its
// lifetime, so this does not compile.
use splitrt_pgas::{GlobalPtr, Pgas};

fn local_buffer(pg: &Pgas, p: GlobalPtr<u64>) -> splitrt_am::Result<()> {
    pg.scope(|s| {
        let mut buf = vec![0u64; 4];
        s.get(p, &mut buf)
    })
}

fn main() {
    let _ = local_buffer;
}
