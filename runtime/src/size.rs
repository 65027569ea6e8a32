//! Parsing and printing byte sizes such as `64M`, `4KiB` or `4096`.

/// Parse a byte size: a number with an optional binary suffix
/// (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`, case-insensitive).
///
/// ```
/// use splitrt_runtime::size::parse_size;
/// assert_eq!(parse_size("4K"), Some(4096));
/// assert_eq!(parse_size("64MiB"), Some(64 << 20));
/// assert_eq!(parse_size("100"), Some(100));
/// assert_eq!(parse_size("x"), None);
/// ```
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mult: usize = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Print a byte size compactly (`512 B`, `4 KiB`, `1.5 MiB`).
///
/// ```
/// use splitrt_runtime::size::format_size;
/// assert_eq!(format_size(4096), "4 KiB");
/// assert_eq!(format_size(8), "8 B");
/// ```
pub fn format_size(n: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
