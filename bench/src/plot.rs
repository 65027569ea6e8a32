//! SVG line charts (the `plotters` crate, SVG backend only): x is a size on
//! a log scale, y linear or log; one series per measurement. Charts are
//! small, self-contained SVG files that can be committed next to the docs.

use crate::harness::report::{Row, Section};
use plotters::prelude::*;
use std::path::Path;

/// One line of a chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points; points with a non-positive or non-finite coordinate
    /// are dropped (log axes).
    pub points: Vec<(f64, f64)>,
}

/// What a chart shows.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// Label of the x axis.
    pub x_label: &'a str,
    /// Label of the y axis.
    pub y_label: &'a str,
    /// Log scale on x (sizes).
    pub log_x: bool,
    /// Log scale on y.
    pub log_y: bool,
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Tick label of a size axis: `1 B`, `64 KiB`, `16 MiB`.
fn size_tick(x: f64) -> String {
    let v = x.round();
    if v >= (1u64 << 20) as f64 {
        format!("{}M", trim(v / (1u64 << 20) as f64))
    } else if v >= 1024.0 {
        format!("{}K", trim(v / 1024.0))
    } else {
        trim(v)
    }
}

/// Tick label at `v` on a log2 axis: the size 2^v at whole powers, else none.
fn pow2_tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        size_tick(2f64.powi(v.round() as i32))
    } else {
        String::new()
    }
}

fn trim(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else {
        format!("{x:.1}")
    }
}

fn value_tick(y: f64) -> String {
    if y == 0.0 {
        "0".into()
    } else if y.abs() >= 1e6 {
        format!("{}M", trim(y / 1e6))
    } else if y.abs() >= 1e4 {
        format!("{}k", trim(y / 1e3))
    } else if y.abs() < 1e-2 {
        format!("{y:.1e}")
    } else if y.abs() >= 10.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.2}")
    }
}

fn range(v: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    if log {
        if hi / lo < 1.5 {
            (lo / 1.5, hi * 1.5)
        } else {
            (lo / 1.1, hi * 1.1)
        }
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.05).max(1e-9);
        (if lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad)
    }
}

/// Draw `series` to the SVG file `path`. A chart with no plottable point
/// still gets a file (an empty frame saying so), so callers can rely on it.
pub fn draw(path: &Path, chart: &Chart<'_>, series: &[Series]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let ok = |x: f64, log: bool| x.is_finite() && (!log || x > 0.0);
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| ok(x, chart.log_x) && ok(y, chart.log_y))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // A log x axis is drawn as log2(x) on a linear axis labelled 2^v: every
    // size and ring length here is a power of two, and plotters' own log
    // axis labels only powers of ten (nothing below 10 on a 2..64 scan).
    let series: Vec<Series> = if chart.log_x {
        series
            .into_iter()
            .map(|s| Series {
                name: s.name,
                points: s.points.into_iter().map(|(x, y)| (x.log2(), y)).collect(),
            })
            .collect()
    } else {
        series
    };
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = if chart.log_x {
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
        if lo.is_finite() {
            (lo - 0.3, hi + 0.3)
        } else {
            (0.0, 4.0)
        }
    } else {
        range(xs, false)
    };
    let (y0, y1) = range(ys, chart.log_y);
    let mut b = ChartBuilder::on(&root);
    b.caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70);
    // The four axis combinations are distinct types in plotters.
    macro_rules! body {
        ($ctx:expr, $xfmt:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .x_labels(26)
                .x_label_formatter(&$xfmt)
                .y_label_formatter(&|y: &f64| value_tick(*y))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                ctx.draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| err(&e))?;
            }
            if series.is_empty() {
                root.draw(&Text::new(
                    "no data",
                    (420, 270),
                    ("sans-serif", 24).into_font(),
                ))
                .map_err(|e| err(&e))?;
            } else {
                ctx.configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 13))
                    .draw()
                    .map_err(|e| err(&e))?;
            }
        }};
    }
    let xfmt: fn(&f64) -> String = if chart.log_x {
        |v| pow2_tick(*v)
    } else {
        |v| value_tick(*v)
    };
    if chart.log_y {
        body!(
            b.build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(|e| err(&e))?,
            xfmt
        )
    } else {
        body!(
            b.build_cartesian_2d(x0..x1, y0..y1).map_err(|e| err(&e))?,
            xfmt
        )
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Series from table rows: every row with a size and unit `unit` becomes a
/// point (size, median) of the series named by its measurement.
pub fn series_from_rows<'a>(rows: impl IntoIterator<Item = &'a Row>, unit: &str) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows {
        let (Some(size), true) = (r.size, r.unit == unit) else {
            continue;
        };
        let name = if r.source == "splitrt" || r.measurement.contains(&r.source) {
            r.measurement.clone()
        } else {
            format!("{}: {}", r.source, r.measurement)
        };
        let p = (size.max(1) as f64, r.summary.median);
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(p),
            None => out.push(Series {
                name,
                points: vec![p],
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Draw the rows of `sections` with unit `unit` against size (log x) into
/// `path`; returns the path for the "wrote" line.
pub fn sections_by_size(
    path: &Path,
    title: &str,
    sections: &[Section],
    unit: &str,
    y_label: &str,
    log_y: bool,
) -> Result<std::path::PathBuf, String> {
    let series = series_from_rows(sections.iter().flat_map(|s| &s.rows), unit);
    draw(
        path,
        &Chart {
            title,
            x_label: "message size (bytes)",
            y_label,
            log_x: true,
            log_y,
        },
        &series,
    )?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks() {
        assert_eq!(size_tick(1.0), "1");
        assert_eq!(size_tick(65536.0), "64K");
        assert_eq!(size_tick(16.0 * 1048576.0), "16M");
        assert_eq!(value_tick(0.5), "0.50");
    }

    #[test]
    fn draws_a_file() {
        let dir = std::env::temp_dir().join(format!("splitrt-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.svg");
        let s = vec![Series {
            name: "a".into(),
            points: vec![(1.0, 2.0), (1024.0, 5.0), (1e6, 0.0)],
        }];
        for (lx, ly) in [(true, true), (true, false), (false, false), (false, true)] {
            let c = Chart {
                title: "t",
                x_label: "x",
                y_label: "y",
                log_x: lx,
                log_y: ly,
            };
            draw(&p, &c, &s).unwrap();
            assert!(std::fs::read_to_string(&p).unwrap().contains("<svg"));
            draw(&p, &c, &[]).unwrap();
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
