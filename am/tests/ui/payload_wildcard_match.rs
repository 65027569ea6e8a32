// What users do with `Payload` still compiles with it `#[non_exhaustive]`:
// build each safe variant (struct-like `Long` too) and match with a
// wildcard arm.
use splitrt_am::Payload;

fn main() {
    let b = [1u8; 4];
    let all = [
        Payload::None,
        Payload::Medium(&b),
        Payload::Long {
            data: &b,
            offset: 64,
        },
    ];
    for p in all {
        let n = match p {
            Payload::None => 0,
            Payload::Medium(d) => d.len(),
            Payload::Long { data, .. } => data.len(),
            _ => p.len(),
        };
        assert_eq!(n, p.len());
    }
}
