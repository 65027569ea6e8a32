//! One receive step, the same for a per-pair ring (`SPLITRT_SHM_QUEUE=pairs`,
//! [`ring`](super::ring)) and for the shared queue (`shared`,
//! [`mpq`](super::mpq)): take the cell at the consumer's tail, deliver a
//! Short straight from it, or vet a Medium, a Long or a streamed chunk
//! (reassembled per sender) and deliver it; a malformed cell is released
//! and reported as a `Protocol` error naming its sender. What differs is
//! behind [`RxCells`] and [`RxParts`]: where the sender's rank comes from
//! (fixed for a ring, the cell's own word in a queue, checked against the
//! host's ranks) and whether landing zones exist (rings only).

use super::cells::{CellView, Peek};
use super::layout::{F_DEPOSIT, F_FIRST, F_LAST, F_ZONE};
use super::mpq::QConsumer;
use super::ring::Consumer;
use super::{Reassembly, ShmFabric};
use crate::fabric::{Delivery, Deposit};
use crate::segment::PopulatedPrefix;
use crate::trace::{Clock, Stage};
use crate::{Error, Result};

/// A consumer of cells: a ring's or a queue's.
pub(super) trait RxCells {
    /// Whether the sender's rank is read from each cell (a shared queue),
    /// not fixed (a ring).
    const PER_SENDER: bool;
    /// The cell at the tail if it is a well-formed Short.
    fn peek_short(&self) -> Peek<'_>;
    /// The cell at the tail, with the sender's local rank as written (0 in
    /// a ring), `Err` when its header is malformed.
    fn peek(&self) -> Option<(usize, Result<CellView<'_>, String>)>;
    /// Free the cell at the tail.
    fn release(&mut self);
}

impl RxCells for Consumer {
    const PER_SENDER: bool = false;

    #[inline(always)]
    fn peek_short(&self) -> Peek<'_> {
        Consumer::peek_short(self)
    }

    #[inline(always)]
    fn peek(&self) -> Option<(usize, Result<CellView<'_>, String>)> {
        Consumer::peek(self).map(|v| (0, v))
    }

    #[inline(always)]
    fn release(&mut self) {
        Consumer::release(self)
    }
}

impl RxCells for QConsumer {
    const PER_SENDER: bool = true;

    #[inline(always)]
    fn peek_short(&self) -> Peek<'_> {
        QConsumer::peek_short(self)
    }

    #[inline(always)]
    fn peek(&self) -> Option<(usize, Result<CellView<'_>, String>)> {
        QConsumer::peek(self)
    }

    #[inline(always)]
    fn release(&mut self) {
        QConsumer::release(self)
    }
}

/// A sender's landing zone in this rank's file (rings only).
pub(super) struct ZoneRx<'a> {
    /// The zone's first byte.
    pub(super) base: *const u8,
    /// How far this mapping of it was faulted in.
    pub(super) populated: &'a mut PopulatedPrefix,
}

/// What one receive step works on.
pub(super) struct RxParts<'a, K: RxCells> {
    /// The cells.
    pub(super) cons: &'a mut K,
    /// Reassembly per sender: one for a ring, one per local rank for a
    /// queue.
    pub(super) reasm: &'a mut [Reassembly],
    /// The ring's sender's landing zone; `None` for a queue (a cell that
    /// names a zone is malformed).
    pub(super) zone: Option<ZoneRx<'a>>,
    /// The ring's sender (a global rank); unused for a queue.
    pub(super) src: usize,
}

impl ShmFabric {
    /// Take one cell: `Ok(None)` when none is published, `Ok(Some(true))`
    /// when a packet was delivered, `Ok(Some(false))` for a chunk of a
    /// streamed packet. A Short, the common case, takes no flag analysis:
    /// one look at the cell (plain compares), delivered from the cell.
    /// Anything else, a malformed cell included, takes
    /// [`rx_general`](Self::rx_general), which reports it.
    #[inline(always)]
    pub(super) fn rx_one<C: Clock, K: RxCells>(
        &self,
        p: &mut RxParts<'_, K>,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<Option<bool>> {
        match p.cons.peek_short() {
            Peek::Empty => return Ok(None),
            Peek::Short(pad, tag, words) => {
                let local = if K::PER_SENDER { pad } else { 0 };
                if p.reasm.get(local).is_some_and(|a| !a.active) {
                    let src = if K::PER_SENDER {
                        self.members[local]
                    } else {
                        p.src
                    };
                    let found = C::start();
                    C::record(Stage::Poll, found);
                    deliver(&Delivery {
                        src,
                        tag,
                        words,
                        payload: &[],
                        deposit: None,
                    });
                    let t = C::start();
                    p.cons.release();
                    C::record(Stage::Release, t);
                    return Ok(Some(true));
                }
            }
            Peek::Other => {}
        }
        self.rx_general::<C, K>(p, deliver)
    }

    /// [`rx_one`](Self::rx_one) for everything but a well-formed Short:
    /// Mediums, Longs, streamed chunks and malformed cells.
    pub(super) fn rx_general<C: Clock, K: RxCells>(
        &self,
        p: &mut RxParts<'_, K>,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<Option<bool>> {
        let bad = |src: Option<usize>, why: String| {
            let e = match src {
                Some(src) => Error::protocol(format!("malformed packet from rank {src}: {why}"))
                    .at_rank(self.global)
                    .with_peer(src),
                None => Error::protocol(format!("malformed packet in the shared queue: {why}"))
                    .at_rank(self.global),
            };
            Err(e)
        };
        let (local, view) = match p.cons.peek() {
            None => return Ok(None),
            Some(v) => v,
        };
        if local >= p.reasm.len() {
            p.cons.release();
            return bad(
                None,
                format!(
                    "a cell names sender {local} of {} ranks on this host",
                    self.members.len()
                ),
            );
        }
        let src = if K::PER_SENDER {
            self.members[local]
        } else {
            p.src
        };
        let view = match view {
            Ok(v) => v,
            Err(why) => {
                p.cons.release();
                p.reasm[local].active = false;
                return bad(Some(src), why);
            }
        };
        let found = C::start();
        let m = view.meta;
        if m.flags & F_ZONE != 0 && p.zone.is_none() {
            p.cons.release();
            p.reasm[local].active = false;
            return bad(
                Some(src),
                format!("cell flags {:#x} (no landing zone here)", m.flags),
            );
        }
        let (first, last) = (m.flags & F_FIRST != 0, m.flags & F_LAST != 0);
        if first && last {
            if p.reasm[local].active {
                p.reasm[local].active = false;
                p.cons.release();
                return bad(
                    Some(src),
                    "new packet while another was being reassembled".into(),
                );
            }
            let total = m.total as usize;
            let payload: &[u8] = if let (true, Some(z)) = (m.flags & F_ZONE != 0, &mut p.zone) {
                let at = m.deposit;
                let zone = self.layout.zone_len() as u64;
                if m.len != 0
                    || m.flags & F_DEPOSIT != 0
                    || total > self.max_medium
                    || at.checked_add(total as u64).is_none_or(|e| e > zone)
                {
                    p.cons.release();
                    return bad(
                        Some(src),
                        format!(
                            "Medium of {total} B at {at} of its landing zone ({zone} B, Mediums up to {} B)",
                            self.max_medium
                        ),
                    );
                }
                // SAFETY: the zone lies in our own file, mapped as long as
                // the fabric (Layout::new, connect); at + total <= zone.
                unsafe {
                    z.populated.cover(
                        z.base as *mut u8,
                        (at + total as u64) as usize,
                        zone as usize,
                    )
                };
                // SAFETY: at + total <= zone_len (checked above): an
                // in-bounds offset into this sender's zone in our own file.
                let data = unsafe { z.base.add(at as usize) };
                // SAFETY: data..data + total lies in this sender's zone in
                // our own file, mapped as long as the fabric; the sender
                // does not reuse these bytes before this cell is released
                // (after the handler), and we never write them.
                unsafe { std::slice::from_raw_parts(data, total) }
            } else if m.flags & F_DEPOSIT != 0 {
                let seg = self.segment_of(self.me);
                if m.len != 0
                    || m.deposit
                        .checked_add(total as u64)
                        .is_none_or(|e| e > seg.len as u64)
                {
                    p.cons.release();
                    return bad(
                        Some(src),
                        format!(
                            "deposit of {total} B at {:#x} outside the segment",
                            m.deposit
                        ),
                    );
                }
                // Bounds checked against the local segment just above. The
                // bytes lie in the segment, where peers deposit and store
                // concurrently: delivered as a range, never as a slice.
                &[]
            } else {
                if total != m.len as usize {
                    p.cons.release();
                    return bad(
                        Some(src),
                        format!("single cell of {} B claims {total} B", m.len),
                    );
                }
                view.chunk
            };
            C::record(Stage::Poll, found);
            deliver(&Delivery {
                src,
                tag: m.tag,
                words: view.words,
                payload,
                deposit: (m.flags & F_DEPOSIT != 0).then_some(Deposit {
                    offset: m.deposit,
                    len: total,
                }),
            });
            let t = C::start();
            p.cons.release();
            C::record(Stage::Release, t);
            return Ok(Some(true));
        }
        // A chunk of a streamed packet: copy it out and free the cell at
        // once so the sender can keep streaming.
        let a = &mut p.reasm[local];
        if first {
            if a.active || m.total as usize > self.max_medium || m.flags & F_DEPOSIT != 0 {
                a.active = false;
                p.cons.release();
                return bad(Some(src), format!("bad first chunk (total {} B)", m.total));
            }
            a.active = true;
            a.tag = m.tag;
            a.nwords = view.words.len();
            a.words[..a.nwords].copy_from_slice(view.words);
            a.total = m.total as usize;
            a.buf.clear();
            a.buf.reserve(a.total);
        } else if !a.active {
            p.cons.release();
            return bad(Some(src), "continuation chunk without a first chunk".into());
        }
        if a.buf.len() + view.chunk.len() > a.total {
            a.active = false;
            p.cons.release();
            return bad(
                Some(src),
                format!("chunks exceed the announced {} B", a.total),
            );
        }
        a.buf.extend_from_slice(view.chunk);
        p.cons.release();
        if !last {
            return Ok(Some(false));
        }
        a.active = false;
        if a.buf.len() != a.total {
            return bad(
                Some(src),
                format!("packet ended at {} of {} B", a.buf.len(), a.total),
            );
        }
        C::record(Stage::Poll, found);
        deliver(&Delivery {
            src,
            tag: a.tag,
            words: &a.words[..a.nwords],
            payload: &a.buf,
            deposit: None,
        });
        Ok(Some(true))
    }
}
