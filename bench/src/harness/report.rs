//! The printed table and the final CSV (`am.csv`): sections of rows, each
//! row a median over repetitions with its spread (min..max) and a noisy
//! flag when the spread exceeds [`NOISY_RATIO`](crate::harness::stats::NOISY_RATIO).

use crate::harness::stats::Summary;
use std::fmt::Write as _;

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Who produced the number: `splitrt`, `raw`, `UCX`, `GASNet-EX
    /// (reference, fixed)` or `ratio`.
    pub source: String,
    /// What the number is.
    pub measurement: String,
    /// Payload bytes, if the row has a size.
    pub size: Option<usize>,
    /// Unit of the values (`us`, `MB/s`, `Mmsg/s`, `x`).
    pub unit: String,
    /// The numbers.
    pub summary: Summary,
    /// Free text (comparisons, caveats).
    pub note: String,
}

impl Row {
    /// A row without a note.
    pub fn new(
        source: &str,
        measurement: impl Into<String>,
        size: Option<usize>,
        unit: &str,
        summary: Summary,
    ) -> Row {
        Row {
            source: source.to_string(),
            measurement: measurement.into(),
            size,
            unit: unit.to_string(),
            summary,
            note: String::new(),
        }
    }

    /// The same row with `note` appended to its note.
    pub fn with_note(mut self, note: impl AsRef<str>) -> Row {
        if note.as_ref().is_empty() {
            return self;
        }
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(note.as_ref());
        self
    }
}

/// A titled group of rows.
#[derive(Clone, Debug)]
pub struct Section {
    /// Heading printed above the rows.
    pub title: String,
    /// The rows.
    pub rows: Vec<Row>,
}

/// Human-readable size: `8 B`, `64 KiB`, `4 MiB`.
pub fn size_label(size: Option<usize>) -> String {
    match size {
        None => "-".into(),
        Some(s) if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        Some(s) if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        Some(s) => format!("{s} B"),
    }
}

/// A value with as many digits as its size warrants.
fn num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() < 10.0 {
        format!("{x:.3}")
    } else if x.abs() < 1000.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

const HEAD: [&str; 8] = [
    "measurement",
    "size",
    "unit",
    "p50/median",
    "p99",
    "spread (min..max)",
    "reps",
    "note",
];

fn cells(r: &Row) -> [String; 8] {
    let s = &r.summary;
    let mut note = r.note.clone();
    if s.noisy() {
        note = if note.is_empty() {
            "NOISY".into()
        } else {
            format!("NOISY; {note}")
        };
    }
    [
        r.measurement.clone(),
        size_label(r.size),
        r.unit.clone(),
        num(s.median),
        s.p99.map_or("-".into(), num),
        if s.reps > 1 {
            format!("{}..{}", num(s.min), num(s.max))
        } else {
            "-".into()
        },
        s.reps.to_string(),
        note,
    ]
}

/// The table as text.
pub fn table(sections: &[Section]) -> String {
    let all: Vec<[String; 8]> = sections
        .iter()
        .flat_map(|s| s.rows.iter().map(cells))
        .collect();
    let mut w = HEAD.map(str::len);
    for c in &all {
        for (i, x) in c.iter().enumerate() {
            w[i] = w[i].max(x.chars().count());
        }
    }
    let line = |c: &[String; 8]| {
        let mut s = String::new();
        for (i, x) in c.iter().enumerate() {
            let pad = w[i].saturating_sub(x.chars().count());
            if i == c.len() - 1 {
                s.push_str(x);
            } else if (1..=6).contains(&i) {
                let _ = write!(s, "{}{x}  ", " ".repeat(pad));
            } else {
                let _ = write!(s, "{x}{}  ", " ".repeat(pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEAD.map(String::from));
    // The rule spans the numeric columns, not the free-text note.
    let width: usize = w[..7].iter().sum::<usize>() + 2 * 6;
    for sec in sections {
        let _ = writeln!(
            out,
            "-- {} {}",
            sec.title,
            "-".repeat(width.saturating_sub(sec.title.len() + 4))
        );
        for r in &sec.rows {
            out.push_str(&line(&cells(r)));
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The final CSV: one line per row.
pub fn csv(sections: &[Section]) -> String {
    let mut out = String::from(
        "section,source,measurement,size_bytes,unit,median,p99,min,max,reps,noisy,note\n",
    );
    let f = |x: f64| {
        if x.is_finite() {
            format!("{x:.4}")
        } else {
            String::new()
        }
    };
    for sec in sections {
        for r in &sec.rows {
            let s = &r.summary;
            let fields = [
                csv_field(&sec.title),
                csv_field(&r.source),
                csv_field(&r.measurement),
                r.size.map_or(String::new(), |x| x.to_string()),
                csv_field(&r.unit),
                f(s.median),
                s.p99.map_or(String::new(), f),
                f(s.min),
                f(s.max),
                s.reps.to_string(),
                s.noisy().to_string(),
                csv_field(&r.note),
            ];
            out.push_str(&fields.join(","));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_table() {
        assert_eq!(size_label(Some(8)), "8 B");
        assert_eq!(size_label(Some(65536)), "64 KiB");
        assert_eq!(size_label(Some(4 << 20)), "4 MiB");
        assert_eq!(size_label(Some(1500)), "1500 B");
        let sec = Section {
            title: "t".into(),
            rows: vec![Row::new(
                "splitrt",
                "AM Short RTT",
                None,
                "us",
                Summary::latency(&[1.0, 2.0], &[3.0, 3.0]),
            )
            .with_note("a, b")],
        };
        let t = table(std::slice::from_ref(&sec));
        assert!(t.contains("NOISY; a, b"), "{t}");
        let c = csv(&[sec]);
        assert!(c.lines().nth(1).unwrap().ends_with(",true,\"a, b\""), "{c}");
    }
}
