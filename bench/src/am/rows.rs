//! `splitrt-bench am --rows LIST`: which groups of measurements a run
//! makes (default: all), so one can run, e.g., just the message-rate rows
//! (`--rows rate`: the AM Short flood and the aggregated RPC rate, in
//! seconds) instead of the whole benchmark. The driver hands the list to
//! both ranks in [`ENV`] (rank 1 must know whether to play the raw
//! ping-pong's side B).

use std::fmt;

/// The variable the driver passes the selection to the ranks in.
pub const ENV: &str = "SPLITRT_BENCH_AM_ROWS";

/// A group of rows of the AM benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Raw line ping-pong, AM Short round trip and RPC round trip (with
    /// their ratios).
    Rtt,
    /// AM Medium and Long round trips by size.
    Sizes,
    /// AM Medium and Long one-way throughput.
    Bw,
    /// AM Short flood rate and the aggregated RPC rate (with their ratio).
    Rate,
    /// AM Short round trip with the peer's handlers on its progress thread.
    Progress,
}

impl Group {
    /// Every group, in the order a repetition runs them.
    pub const ALL: [Group; 5] = [
        Group::Rtt,
        Group::Sizes,
        Group::Bw,
        Group::Rate,
        Group::Progress,
    ];

    /// Its name in `--rows`.
    pub fn name(self) -> &'static str {
        match self {
            Group::Rtt => "rtt",
            Group::Sizes => "sizes",
            Group::Bw => "bw",
            Group::Rate => "rate",
            Group::Progress => "progress",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The groups selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows(u8);

impl Default for Rows {
    fn default() -> Self {
        Rows::all()
    }
}

impl Rows {
    /// Every group (the default).
    pub fn all() -> Rows {
        Rows(Group::ALL.iter().fold(0, |m, g| m | g.bit()))
    }

    /// Whether `g` runs.
    pub fn has(self, g: Group) -> bool {
        self.0 & g.bit() != 0
    }

    /// Whether every group runs.
    pub fn is_all(self) -> bool {
        self == Rows::all()
    }

    /// A comma-separated list of group names (`all` for every group).
    pub fn parse(s: &str) -> Result<Rows, String> {
        let mut m = 0;
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if w == "all" {
                m |= Rows::all().0;
                continue;
            }
            let g = Group::ALL.iter().find(|g| g.name() == w).ok_or_else(|| {
                format!(
                    "--rows: unknown group '{w}' (groups: all, {})",
                    Group::ALL.map(Group::name).join(", ")
                )
            })?;
            m |= g.bit();
        }
        if m == 0 {
            return Err("--rows: name at least one group".into());
        }
        Ok(Rows(m))
    }

    /// The selection the driver passed in [`ENV`] (all when unset).
    pub fn from_env() -> Result<Rows, String> {
        match std::env::var(ENV) {
            Ok(s) => Rows::parse(&s),
            Err(_) => Ok(Rows::all()),
        }
    }
}

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Group::ALL
            .into_iter()
            .filter(|g| self.has(*g))
            .map(Group::name)
            .collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_and_print() {
        assert!(Rows::parse("all").unwrap().is_all());
        let r = Rows::parse("rate").unwrap();
        assert!(r.has(Group::Rate) && !r.has(Group::Rtt) && !r.is_all());
        let r = Rows::parse(" rtt, rate ").unwrap();
        assert_eq!(r.to_string(), "rtt,rate");
        assert_eq!(Rows::parse(&r.to_string()), Ok(r));
        assert_eq!(Rows::parse(&Rows::all().to_string()).unwrap(), Rows::all());
        assert!(Rows::parse("rates")
            .unwrap_err()
            .contains("unknown group 'rates'"));
        assert!(Rows::parse("").is_err());
    }
}
