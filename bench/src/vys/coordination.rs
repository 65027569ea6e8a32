//! How the two ranks keep in step between measurements without burning
//! the CPUs the measurements need: a barrier, a stop order and short text
//! notes, each an Active Message, awaited by polling the endpoint once a
//! millisecond and sleeping in between (the job runs with
//! `SPLITRT_SPIN_ONLY=1`, so the runtime's own waits would spin).

use splitrt::{Endpoint, EndpointBuilder, Error, Kind, Payload, RequestHandler, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest any wait for the other rank lasts before the job fails.
const PATIENCE: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Inbox {
    /// Highest barrier epoch the other rank reached.
    arrived: AtomicU64,
    /// Highest phase the other rank said to stop.
    stop: AtomicU64,
    /// Notes in arrival order.
    notes: Mutex<VecDeque<String>>,
}

/// The registered handlers, before the endpoint exists.
pub struct Handlers {
    inbox: Arc<Inbox>,
    arrive: RequestHandler,
    stop: RequestHandler,
    note: RequestHandler,
}

/// Register the handlers (both ranks, in the same order as everything
/// else they register).
pub fn register(b: &mut EndpointBuilder) -> Result<Handlers> {
    let inbox = Arc::new(Inbox::default());
    let i = inbox.clone();
    let arrive = b.request("vys arrive", Kind::Short, 1, move |_tok, m| {
        i.arrived.fetch_max(m.arg(0), Ordering::AcqRel);
    })?;
    let i = inbox.clone();
    let stop = b.request("vys stop", Kind::Short, 1, move |_tok, m| {
        i.stop.fetch_max(m.arg(0), Ordering::AcqRel);
    })?;
    let i = inbox.clone();
    let note = b.request("vys note", Kind::Medium, 0, move |_tok, m| {
        let text = String::from_utf8_lossy(m.payload()).into_owned();
        i.notes.lock().expect("notes").push_back(text);
    })?;
    Ok(Handlers {
        inbox,
        arrive,
        stop,
        note,
    })
}

/// One rank's side of the link with the other rank (a 2-rank job).
pub struct Link {
    ep: Endpoint,
    other: usize,
    epoch: u64,
    h: Handlers,
}

impl Link {
    /// The link of this rank, once the endpoint exists.
    pub fn new(ep: Endpoint, h: Handlers) -> Link {
        let other = 1 - ep.rank();
        Link {
            ep,
            other,
            epoch: 0,
            h,
        }
    }

    /// Poll and sleep until `cond` holds; `what` names the wait if the
    /// other rank never delivers.
    pub fn idle_until(&self, what: &str, mut cond: impl FnMut() -> bool) -> Result<()> {
        let t = Instant::now();
        loop {
            self.ep.poll()?;
            if cond() {
                return Ok(());
            }
            if t.elapsed() > PATIENCE {
                return Err(Error::usage(format!(
                    "vys bench: rank {} waited {PATIENCE:?} for {what}",
                    self.ep.rank()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Wait until the other rank reaches its matching call.
    pub fn barrier(&mut self) -> Result<()> {
        self.epoch += 1;
        let e = self.epoch;
        self.ep
            .request(self.other, self.h.arrive, &[e], Payload::None)?;
        let inbox = self.h.inbox.clone();
        self.idle_until(&format!("the other rank at barrier {e}"), || {
            inbox.arrived.load(Ordering::Acquire) >= e
        })
    }

    /// Tell the other rank to stop phase `phase` (phases count from 1).
    pub fn send_stop(&self, phase: u64) -> Result<()> {
        self.ep
            .request(self.other, self.h.stop, &[phase], Payload::None)
    }

    /// Whether the other rank said to stop phase `phase` (polls once).
    pub fn stopped(&self, phase: u64) -> Result<bool> {
        self.ep.poll()?;
        Ok(self.h.inbox.stop.load(Ordering::Acquire) >= phase)
    }

    /// Send a note (at most one Medium).
    pub fn send_note(&self, text: &str) -> Result<()> {
        self.ep.request(
            self.other,
            self.h.note,
            &[],
            Payload::Medium(text.as_bytes()),
        )
    }

    /// The next note from the other rank.
    pub fn next_note(&self) -> Result<String> {
        let inbox = self.h.inbox.clone();
        let mut got = None;
        self.idle_until("a note from the other rank", || {
            got = inbox.notes.lock().expect("notes").pop_front();
            got.is_some()
        })?;
        Ok(got.expect("a note"))
    }
}
