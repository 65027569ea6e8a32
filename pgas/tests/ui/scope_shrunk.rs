// The same use after free, reached by shrinking the scope's lifetime
// explicitly: with a covariant `Scope<'env>`, `&Scope<'env>` coerces to
// `&Scope<'short>` and a short-lived buffer is accepted.
use splitrt_pgas::{GlobalPtr, Pgas, Scope};

fn shrink<'short, 'env: 'short>(s: &'short Scope<'env>) -> &'short Scope<'short> {
    s
}

fn main() {
    let _ = |pg: &Pgas, p: GlobalPtr<u64>| {
        pg.scope(|s| {
            let mut buf = [0u64; 4];
            shrink(s).get(p, &mut buf)
        })
    };
}
