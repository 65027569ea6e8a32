//! A progress bar on the driver's side of long runs (`indicatif`), drawn
//! on stderr only when stderr is a terminal and the run is not `--quick`;
//! otherwise each step is announced by a plain line, so logs stay readable.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Steps of a run: jobs, peers, sizes.
pub struct Progress {
    bar: Option<ProgressBar>,
    what: String,
}

impl Progress {
    /// A bar of `steps` steps labelled `what` (hidden with `quick` or when
    /// stderr is not a terminal).
    pub fn new(what: &str, steps: usize, quick: bool) -> Progress {
        let bar = (!quick && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::new(steps as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_prefix(what.to_string());
            b
        });
        Progress {
            bar,
            what: what.to_string(),
        }
    }

    /// Announce the step about to run.
    pub fn step(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.set_message(msg.to_string()),
            None => eprintln!("{}: {msg} ...", self.what),
        }
    }

    /// The announced step is done.
    pub fn done(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
