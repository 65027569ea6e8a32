// A user's match over every variant of `Payload` without a wildcard arm
// must not compile: the enum is `#[non_exhaustive]`, so a new variant (as
// `FromSegment` was in session 14) breaks no user's code.
use splitrt_am::Payload;

fn len(p: Payload<'_>) -> usize {
    match p {
        Payload::None => 0,
        Payload::Medium(d) => d.len(),
        Payload::Long { data, .. } => data.len(),
        Payload::FromSegment(s) => s.len(),
    }
}

fn main() {
    let _ = len(Payload::None);
}
