//! Facts about the machine and the build, printed in report headers.

/// The 1, 5 and 15 minute load averages (`?` if unknown).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The CPU model name (`?` if unknown).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "?".into())
}

/// `debug` or `release`: how this binary was built.
pub fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// CPU 0's data and unified caches, e.g. `L1d 48K, L2 2048K, L3 32768K`
/// (`?` if unknown).
pub fn caches() -> String {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let read = |p: std::path::PathBuf| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut v: Vec<(String, String)> = (0..8)
        .filter_map(|i| {
            let d = dir.join(format!("index{i}"));
            let (level, kind, size) = (
                read(d.join("level"))?,
                read(d.join("type"))?,
                read(d.join("size"))?,
            );
            let name = match kind.as_str() {
                "Data" => format!("L{level}d"),
                "Unified" => format!("L{level}"),
                _ => return None,
            };
            Some((name, size))
        })
        .collect();
    v.sort();
    if v.is_empty() {
        return "?".into();
    }
    v.into_iter()
        .map(|(n, s)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The job settings every benchmark records beside its numbers (its own
/// plan's settings are added by each benchmark).
pub fn job_config(ep: &splitrt::Endpoint, max_medium: usize) -> Vec<(&'static str, String)> {
    let c = ep.config();
    vec![
        ("ranks_pinned_to_cpus", "0,1".to_string()),
        ("spin_only", c.spin_only.to_string()),
        ("cell_size", c.cell_size.to_string()),
        ("ring_len", c.ring_len.to_string()),
        ("max_medium", max_medium.to_string()),
        ("segment_size", ep.segment_len().to_string()),
        ("build", build().to_string()),
    ]
}
