//! Relaying a rank's output line by line with a `[rank] ` prefix.

use std::io::{BufRead, BufReader, Read, Write};
use std::thread::JoinHandle;

/// Copy `src` to stdout (or stderr) line by line, prefixing each line.
pub(super) fn relay(
    src: impl Read + Send + 'static,
    prefix: Option<String>,
    to_stderr: bool,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let write = |w: &mut dyn Write| {
                if let Some(p) = &prefix {
                    w.write_all(p.as_bytes())?;
                }
                w.write_all(&line)?;
                w.flush()
            };
            let _ = if to_stderr {
                write(&mut std::io::stderr().lock())
            } else {
                write(&mut std::io::stdout().lock())
            };
        }
    })
}
