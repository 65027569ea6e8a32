//! Strided and indexed transfers, sans-I/O: the byte layout of a strided
//! shape and its walker, run lists, the merge of two run lists, how a
//! transfer is cut into Active Messages, and the wire header (its encoder
//! and its parser, which treats every header as hostile input).
//!
//! A transfer is two run lists of equal total length: the local side's
//! and the remote side's. Its bytes in order (the local runs' bytes, one
//! run after the other) are the *packed stream*; every AM of a transfer
//! carries (a put) or asks for (a get) a contiguous slice of it, with a
//! header naming the remote runs of that slice.
//!
//! Wire header (little-endian u64 words, at the start of a Medium payload;
//! a put's data follows it):
//!
//! * strided: `[1 | nd << 8, run, base, first, n, counts[nd], strides[nd]]`:
//!   runs `first .. first + n` (in walk order, dimension 0 fastest) of the
//!   shape with `run` bytes per run, `counts` runs per dimension and
//!   `strides` bytes between runs of each dimension, from segment offset
//!   `base`;
//! * indexed: `[2, k, (offset, len) * k]`: `k` runs at segment offsets.

/// Evaluate `$body` with `$n` standing for the run length `$run` (a
/// u64, evaluated once), a constant in its own copy of the body for the
/// common lengths (8 to 128 B, powers of two), else a local holding the
/// value: a copy loop's inline `memmove(.., $n)` then loses its per-run
/// size dispatch. `$n` is never a pattern of the match (a `const` of that
/// name in scope at the call site cannot turn the fallback into a const
/// pattern: it is bound by `let`, where such a const is a compile error).
macro_rules! with_run_len {
    ($run:expr, $n:ident => $body:expr) => {{
        let run_len: u64 = $run;
        match run_len {
            8 => {
                const $n: u64 = 8;
                $body
            }
            16 => {
                const $n: u64 = 16;
                $body
            }
            32 => {
                const $n: u64 = 32;
                $body
            }
            64 => {
                const $n: u64 = 64;
                $body
            }
            128 => {
                const $n: u64 = 128;
                $body
            }
            _ => {
                #[allow(non_snake_case)]
                let $n: u64 = run_len;
                $body
            }
        }
    }};
}
pub(crate) use with_run_len;

/// The most dimensions a strided shape may have.
pub const MAX_DIMS: usize = 8;

/// The header tag of a strided message.
const STRIDED: u64 = 1;
/// The header tag of an indexed message.
const INDEXED: u64 = 2;
/// Bytes of an indexed header before its pairs.
pub(crate) const INDEXED_HEAD: usize = 16;
/// Bytes of one indexed pair.
pub(crate) const PAIR: usize = 16;

/// The byte layout of a strided shape, relative to its base: `run` bytes
/// per run, `counts[d]` runs along dimension `d` (0 fastest), `strides[d]`
/// bytes between consecutive runs along it. Dimensions past `nd` are
/// unused (count 1, stride 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub run: u64,
    pub nd: usize,
    pub counts: [u64; MAX_DIMS],
    pub strides: [u64; MAX_DIMS],
}

impl Layout {
    /// A layout, if `counts` and `strides` have the same length, at most
    /// [`MAX_DIMS`].
    pub fn new(run: u64, counts: &[u64], strides: &[u64]) -> Option<Layout> {
        let nd = counts.len();
        if nd > MAX_DIMS || strides.len() != nd {
            return None;
        }
        let mut l = Layout {
            run,
            nd,
            counts: [1; MAX_DIMS],
            strides: [0; MAX_DIMS],
        };
        l.counts[..nd].copy_from_slice(counts);
        l.strides[..nd].copy_from_slice(strides);
        Some(l)
    }

    /// Runs in the shape (0 if a dimension is empty); `None` on overflow.
    pub fn runs(&self) -> Option<u64> {
        if self.counts[..self.nd].contains(&0) {
            return Some(0);
        }
        self.counts[..self.nd]
            .iter()
            .try_fold(1u64, |a, &c| a.checked_mul(c))
    }

    /// Bytes in the shape; `None` on overflow.
    pub fn bytes(&self) -> Option<u64> {
        self.runs()?.checked_mul(self.run)
    }

    /// One past the last byte any run touches, from the base (0 for an
    /// empty shape); `None` on overflow.
    pub fn span(&self) -> Option<u64> {
        if self.runs()? == 0 || self.run == 0 {
            return Some(0);
        }
        (0..self.nd).try_fold(self.run, |a, d| {
            (self.counts[d] - 1)
                .checked_mul(self.strides[d])
                .and_then(|x| a.checked_add(x))
        })
    }

    /// Whether no two runs share a byte, by a sufficient test: sorted by
    /// stride, each dimension's stride is at least the extent of the
    /// dimensions below it (a nested shape, as every array section is).
    /// A shape interleaving two dimensions without overlap fails it.
    pub fn disjoint(&self) -> bool {
        let mut dims = [(0u64, 0u64); MAX_DIMS];
        let mut k = 0;
        for d in (0..self.nd).filter(|&d| self.counts[d] > 1) {
            dims[k] = (self.strides[d], self.counts[d]);
            k += 1;
        }
        let dims = &mut dims[..k];
        dims.sort_unstable();
        let mut extent = self.run;
        for &mut (s, c) in dims {
            if s < extent {
                return false;
            }
            match (c - 1).checked_mul(s).and_then(|x| x.checked_add(extent)) {
                Some(e) => extent = e,
                None => return false,
            }
        }
        true
    }

    /// The offsets (from the base) of runs `first .. first + n`, in walk
    /// order. The caller checked `first + n <= runs()` and that `span()`
    /// is `Some` (every offset then fits in a u64).
    pub fn walk(&self, first: u64, n: u64) -> Walk {
        let mut idx = [0u64; MAX_DIMS];
        let mut off = 0u64;
        let mut rest = first;
        for (d, i) in idx.iter_mut().enumerate().take(self.nd) {
            let c = self.counts[d].max(1);
            *i = rest % c;
            rest /= c;
            off = off.wrapping_add(i.wrapping_mul(self.strides[d]));
        }
        Walk {
            l: *self,
            idx,
            off,
            left: n,
        }
    }

    /// Call `f(offset)` for runs `first .. first + n` (offsets from the
    /// base), in walk order: the same offsets as [`walk`](Self::walk),
    /// but the runs of dimension 0 in a plain counted loop (an add per
    /// run; the odometer moves once per row), for the hot loops that copy
    /// every run (the AM handler, packing). The caller checked what
    /// `walk` needs. `f` is called at most `n` times, whatever the
    /// arguments (exactly `n` with `nd > 0`; `pack_runs`'s writes rely
    /// on the bound).
    pub fn for_each_run(&self, first: u64, n: u64, mut f: impl FnMut(u64)) {
        if n == 0 {
            return;
        }
        if self.nd == 0 {
            // one run, at the base (as `walk`)
            f(0);
            return;
        }
        let mut idx = [0u64; MAX_DIMS];
        let mut off = 0u64;
        let mut rest = first;
        for (d, i) in idx.iter_mut().enumerate().take(self.nd) {
            let c = self.counts[d].max(1);
            *i = rest % c;
            rest /= c;
            off = off.wrapping_add(i.wrapping_mul(self.strides[d]));
        }
        let (c0, s0) = (self.counts[0].max(1), self.strides[0]);
        let mut left = n;
        loop {
            // the rest of this row: idx[0] < c0, so at least one run
            let k = (c0 - idx[0]).min(left);
            let mut o = off;
            for _ in 0..k {
                f(o);
                o = o.wrapping_add(s0);
            }
            left -= k;
            if left == 0 {
                return;
            }
            // next row: dimension 0 back to 0, carry into the others
            // (wrapping, as `Walk::next`: the true offsets lie in the span)
            off = off.wrapping_sub(idx[0].wrapping_mul(s0));
            idx[0] = 0;
            for (d, i) in idx.iter_mut().enumerate().take(self.nd).skip(1) {
                let s = self.strides[d];
                *i += 1;
                off = off.wrapping_add(s);
                if *i < self.counts[d] {
                    break;
                }
                off = off.wrapping_sub(s.wrapping_mul(self.counts[d]));
                *i = 0;
            }
        }
    }
}

/// Call `f(a_offset, b_offset)` for every run of two layouts of the same
/// shape (same `nd` and counts; `a`'s are used), in walk order: the
/// native path's loop, dimension 0 innermost (a few instructions per run,
/// no iterator state).
pub(crate) fn for_each_pair(a: &Layout, b: &Layout, mut f: impl FnMut(u64, u64)) {
    let runs = a.runs().unwrap_or(0);
    if runs == 0 {
        return;
    }
    if a.nd == 0 {
        f(0, 0);
        return;
    }
    let (c0, sa0, sb0) = (a.counts[0], a.strides[0], b.strides[0]);
    let mut idx = [0u64; MAX_DIMS];
    let (mut oa, mut ob) = (0u64, 0u64);
    for _ in 0..runs / c0 {
        let (mut x, mut y) = (oa, ob);
        for _ in 0..c0 {
            f(x, y);
            x = x.wrapping_add(sa0);
            y = y.wrapping_add(sb0);
        }
        for (d, i) in idx.iter_mut().enumerate().take(a.nd).skip(1) {
            *i += 1;
            oa = oa.wrapping_add(a.strides[d]);
            ob = ob.wrapping_add(b.strides[d]);
            if *i < a.counts[d] {
                break;
            }
            oa = oa.wrapping_sub(a.strides[d].wrapping_mul(a.counts[d]));
            ob = ob.wrapping_sub(b.strides[d].wrapping_mul(a.counts[d]));
            *i = 0;
        }
    }
}

/// The run offsets of a [`Layout`], in walk order (an odometer: O(1)
/// amortised per run).
pub(crate) struct Walk {
    l: Layout,
    idx: [u64; MAX_DIMS],
    off: u64,
    left: u64,
}

impl Iterator for Walk {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let here = self.off;
        // Wrapping: every true offset lies in the span (checked), so the
        // sums are exact once the odometer has carried.
        for d in 0..self.l.nd {
            let s = self.l.strides[d];
            self.idx[d] += 1;
            self.off = self.off.wrapping_add(s);
            if self.idx[d] < self.l.counts[d] {
                break;
            }
            self.off = self.off.wrapping_sub(s.wrapping_mul(self.l.counts[d]));
            self.idx[d] = 0;
        }
        Some(here)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// One side of a transfer: a strided shape from a base offset, or a list
/// of (offset, len) runs (no empty ones). Byte offsets.
#[derive(Clone, Debug)]
pub(crate) enum RunList<'a> {
    Strided { layout: Layout, base: u64 },
    Indexed(&'a [(u64, u64)]),
}

impl RunList<'_> {
    /// Total bytes; `None` on overflow.
    pub fn bytes(&self) -> Option<u64> {
        match self {
            RunList::Strided { layout, .. } => layout.bytes(),
            RunList::Indexed(v) => v.iter().try_fold(0u64, |a, r| a.checked_add(r.1)),
        }
    }

    /// The runs, (offset, len), in order. A strided list's layout has a
    /// span (checked by the caller).
    pub fn iter(&self) -> RunIter<'_> {
        match self {
            RunList::Strided { layout, base } => RunIter::Strided {
                walk: layout.walk(0, layout.runs().unwrap_or(0)),
                base: *base,
                run: layout.run,
            },
            RunList::Indexed(v) => RunIter::Indexed(v.iter()),
        }
    }

    /// Whether no two runs share a byte (see [`Layout::disjoint`] for a
    /// strided list; an indexed list is sorted to check).
    pub fn disjoint(&self) -> bool {
        match self {
            RunList::Strided { layout, .. } => layout.disjoint(),
            RunList::Indexed(v) => {
                let mut s: Vec<(u64, u64)> = v.to_vec();
                s.sort_unstable();
                s.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0)
            }
        }
    }
}

/// The runs of a [`RunList`] (short-lived, on the stack: the size of
/// the strided variant does not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum RunIter<'a> {
    Strided { walk: Walk, base: u64, run: u64 },
    Indexed(std::slice::Iter<'a, (u64, u64)>),
}

impl Iterator for RunIter<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            RunIter::Strided { walk, base, run } => {
                walk.next().map(|o| (base.wrapping_add(o), *run))
            }
            RunIter::Indexed(it) => it.next().copied(),
        }
    }
}

/// Two run lists of equal total length walked together: pieces
/// `(a_offset, b_offset, len)` where both sides are contiguous.
pub(crate) struct Merge<A, B> {
    a: A,
    b: B,
    ha: (u64, u64),
    hb: (u64, u64),
}

/// [`Merge`] of `a` and `b`.
pub(crate) fn merge<A, B>(a: A, b: B) -> Merge<A, B>
where
    A: Iterator<Item = (u64, u64)>,
    B: Iterator<Item = (u64, u64)>,
{
    Merge {
        a,
        b,
        ha: (0, 0),
        hb: (0, 0),
    }
}

impl<A, B> Iterator for Merge<A, B>
where
    A: Iterator<Item = (u64, u64)>,
    B: Iterator<Item = (u64, u64)>,
{
    type Item = (u64, u64, u64);
    fn next(&mut self) -> Option<(u64, u64, u64)> {
        while self.ha.1 == 0 {
            self.ha = self.a.next()?;
        }
        while self.hb.1 == 0 {
            self.hb = self.b.next()?;
        }
        let n = self.ha.1.min(self.hb.1);
        let piece = (self.ha.0, self.hb.0, n);
        self.ha = (self.ha.0.wrapping_add(n), self.ha.1 - n);
        self.hb = (self.hb.0.wrapping_add(n), self.hb.1 - n);
        Some(piece)
    }
}

/// Bytes of a strided header of `nd` dimensions.
pub(crate) fn strided_header_len(nd: usize) -> usize {
    (5 + 2 * nd) * 8
}

/// One message of a transfer: runs `first .. first + n` of a strided
/// remote side, or a list of remote pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    Strided { first: u64, n: u64 },
    Pieces(Vec<(u64, u64)>),
}

/// Cut the remote side `r` into messages of at most `budget` bytes: a
/// put's message carries its header and data, a get's request its header
/// and its reply the data (each at most `budget`). A strided side whose
/// runs fit travels as strided messages (a few header words each), else
/// as pieces of its runs. `budget` is at least 512 (the fabrics' least
/// Medium).
pub(crate) fn plan(r: &RunList<'_>, budget: usize, put: bool) -> Vec<Chunk> {
    let budget = budget as u64;
    if let RunList::Strided { layout, .. } = r {
        let runs = layout.runs().unwrap_or(0);
        let head = strided_header_len(layout.nd) as u64;
        let cap = if put {
            budget.saturating_sub(head)
        } else {
            budget
        };
        if layout.run > 0 && layout.run <= cap && head <= budget {
            let k = cap / layout.run;
            let mut out = Vec::with_capacity(runs.div_ceil(k) as usize);
            let mut first = 0;
            while first < runs {
                let n = k.min(runs - first);
                out.push(Chunk::Strided { first, n });
                first += n;
            }
            return out;
        }
    }
    plan_pieces(r.iter(), budget, put)
}

/// [`plan`] as a list of pieces, packed greedily.
fn plan_pieces(runs: impl Iterator<Item = (u64, u64)>, budget: u64, put: bool) -> Vec<Chunk> {
    let (head, pair) = (INDEXED_HEAD as u64, PAIR as u64);
    let mut out = Vec::new();
    let mut cur: Vec<(u64, u64)> = Vec::new();
    let mut data = 0u64;
    for (mut off, mut len) in runs {
        while len > 0 {
            let hdr = head + pair * (cur.len() as u64 + 1);
            let room = if put {
                budget.saturating_sub(hdr + data)
            } else if hdr <= budget {
                budget - data
            } else {
                0
            };
            if room == 0 {
                out.push(Chunk::Pieces(std::mem::take(&mut cur)));
                data = 0;
                continue;
            }
            let take = len.min(room);
            cur.push((off, take));
            data += take;
            off = off.wrapping_add(take);
            len -= take;
        }
    }
    if !cur.is_empty() {
        out.push(Chunk::Pieces(cur));
    }
    out
}

/// Bytes of the packed stream a chunk covers (its layout's run length
/// for a strided chunk).
pub(crate) fn chunk_bytes(c: &Chunk, run: u64) -> u64 {
    match c {
        Chunk::Strided { n, .. } => n * run,
        Chunk::Pieces(p) => p.iter().map(|x| x.1).sum(),
    }
}

fn put_word(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// Append the header of `chunk` of the remote side `r` to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, r: &RunList<'_>, chunk: &Chunk) {
    match (chunk, r) {
        (Chunk::Strided { first, n }, RunList::Strided { layout, base }) => {
            put_word(out, STRIDED | (layout.nd as u64) << 8);
            put_word(out, layout.run);
            put_word(out, *base);
            put_word(out, *first);
            put_word(out, *n);
            for d in 0..layout.nd {
                put_word(out, layout.counts[d]);
            }
            for d in 0..layout.nd {
                put_word(out, layout.strides[d]);
            }
        }
        (Chunk::Pieces(p), _) => {
            put_word(out, INDEXED);
            put_word(out, p.len() as u64);
            for &(o, n) in p {
                put_word(out, o);
                put_word(out, n);
            }
        }
        // a strided chunk is planned only for a strided side
        (Chunk::Strided { .. }, RunList::Indexed(_)) => {}
    }
}

/// A parsed header: the remote runs of one message.
#[derive(Debug)]
pub(crate) enum Wire<'a> {
    Strided {
        layout: Layout,
        base: u64,
        first: u64,
        n: u64,
    },
    /// `k` (offset, len) pairs, little-endian, as they came.
    Indexed { pairs: &'a [u8] },
}

/// A message of a transfer as it arrived: its runs, the bytes they cover
/// and what followed the header (a put's data).
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub wire: Wire<'a>,
    pub bytes: u64,
    pub data: &'a [u8],
}

/// Why a header was refused.
pub(crate) type Malformed = &'static str;

fn word(p: &[u8], i: usize) -> Option<u64> {
    let b = p.get(i.checked_mul(8)?..i.checked_mul(8)?.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// Parse a message's header. Hostile input: every field is checked, the
/// work is bounded by the payload's length (a strided header's runs cost
/// O(1) each to walk, and their number is bounded by the bytes they
/// cover, which the caller bounds by the payload or the reply limit), and
/// nothing panics. The segment range is checked by [`Wire::within`].
pub(crate) fn parse(p: &[u8]) -> Result<Parsed<'_>, Malformed> {
    let w0 = word(p, 0).ok_or("no header")?;
    match w0 & 0xff {
        STRIDED => {
            let nd = (w0 >> 8) as usize;
            if w0 >> 16 != 0 || nd > MAX_DIMS {
                return Err("too many dimensions");
            }
            let head = strided_header_len(nd);
            let f = |i| word(p, i).ok_or("header truncated");
            let (run, base, first, n) = (f(1)?, f(2)?, f(3)?, f(4)?);
            let mut counts = [0u64; MAX_DIMS];
            let mut strides = [0u64; MAX_DIMS];
            for d in 0..nd {
                counts[d] = f(5 + d)?;
                strides[d] = f(5 + nd + d)?;
            }
            let layout = Layout::new(run, &counts[..nd], &strides[..nd]).ok_or("bad shape")?;
            if run == 0 || counts[..nd].contains(&0) || n == 0 {
                return Err("empty run or dimension");
            }
            let runs = layout.runs().ok_or("shape too large")?;
            if first.checked_add(n).is_none_or(|e| e > runs) {
                return Err("runs beyond the shape");
            }
            layout.span().ok_or("shape too large")?;
            let bytes = n.checked_mul(run).ok_or("shape too large")?;
            Ok(Parsed {
                wire: Wire::Strided {
                    layout,
                    base,
                    first,
                    n,
                },
                bytes,
                data: &p[head.min(p.len())..],
            })
        }
        INDEXED => {
            if w0 != INDEXED {
                return Err("bad tag");
            }
            let k = word(p, 1).ok_or("header truncated")?;
            let head = usize::try_from(k)
                .ok()
                .and_then(|k| k.checked_mul(PAIR))
                .and_then(|x| x.checked_add(INDEXED_HEAD))
                .filter(|&h| h <= p.len())
                .ok_or("header truncated")?;
            if k == 0 {
                return Err("no runs");
            }
            let pairs = &p[INDEXED_HEAD..head];
            let mut bytes = 0u64;
            for pr in pairs.chunks_exact(PAIR) {
                let (o, n) = (word(pr, 0).unwrap_or(0), word(pr, 1).unwrap_or(0));
                if n == 0 {
                    return Err("empty run");
                }
                o.checked_add(n).ok_or("run beyond u64")?;
                bytes = bytes.checked_add(n).ok_or("runs too large")?;
            }
            Ok(Parsed {
                wire: Wire::Indexed { pairs },
                bytes,
                data: &p[head..],
            })
        }
        _ => Err("unknown header tag"),
    }
}

impl Wire<'_> {
    /// The message's runs, (segment offset, len), in order.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (walk, base, run, pairs) = match self {
            Wire::Strided {
                layout,
                base,
                first,
                n,
            } => (Some(layout.walk(*first, *n)), *base, layout.run, &[][..]),
            Wire::Indexed { pairs } => (None, 0, 0, *pairs),
        };
        let strided = walk
            .into_iter()
            .flatten()
            .map(move |o| (base.wrapping_add(o), run));
        let indexed = pairs
            .chunks_exact(PAIR)
            .map(|pr| (word(pr, 0).unwrap_or(0), word(pr, 1).unwrap_or(0)));
        strided.chain(indexed)
    }

    /// Call `f(segment offset, len)` for the message's runs, in order:
    /// the same runs as [`runs`](Self::runs), a strided message's in the
    /// tight loop of [`Layout::for_each_run`] (the handlers' copy loops).
    pub fn for_each_run(&self, mut f: impl FnMut(u64, u64)) {
        match self {
            Wire::Strided {
                layout,
                base,
                first,
                n,
            } => {
                with_run_len!(layout.run, RUN => {
                    layout.for_each_run(*first, *n, |o| f(base.wrapping_add(o), RUN))
                });
            }
            Wire::Indexed { pairs } => {
                for pr in pairs.chunks_exact(PAIR) {
                    f(word(pr, 0).unwrap_or(0), word(pr, 1).unwrap_or(0));
                }
            }
        }
    }

    /// A range (offset, len) holding every run of a strided message: its
    /// layout's whole span from its base (a superset of this message's
    /// runs; `None` for an indexed message or an overflowing span). What
    /// it does not touch, no run touches.
    pub fn footprint(&self) -> Option<(u64, u64)> {
        match self {
            Wire::Strided { layout, base, .. } => layout.span().map(|s| (*base, s)),
            Wire::Indexed { .. } => None,
        }
    }

    /// Whether every run lies in `lo .. hi` (bounded: a strided message
    /// is checked by its span, an indexed one run by run).
    pub fn within(&self, lo: u64, hi: u64) -> bool {
        match self {
            Wire::Strided { layout, base, .. } => layout
                .span()
                .and_then(|s| base.checked_add(s))
                .is_some_and(|e| *base >= lo && e <= hi),
            Wire::Indexed { .. } => self
                .runs()
                .all(|(o, n)| o >= lo && o.checked_add(n).is_some_and(|e| e <= hi)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lay(run: u64, counts: &[u64], strides: &[u64]) -> Layout {
        Layout::new(run, counts, strides).unwrap()
    }

    /// The walker visits every run of 1-, 2- and 3-D shapes in order
    /// (dimension 0 fastest), from any starting run.
    #[test]
    fn strided_walk_visits_runs_in_order() {
        let l = lay(8, &[3, 2, 2], &[16, 100, 1000]);
        let all: Vec<u64> = l.walk(0, 12).collect();
        let mut want = Vec::new();
        for k in 0..2 {
            for j in 0..2 {
                for i in 0..3 {
                    want.push(i * 16 + j * 100 + k * 1000);
                }
            }
        }
        assert_eq!(all, want);
        for first in 0..12 {
            let part: Vec<u64> = l.walk(first, 12 - first).collect();
            assert_eq!(part, want[first as usize..]);
        }
        assert_eq!(l.span(), Some(2 * 16 + 100 + 1000 + 8));
        assert_eq!(l.runs(), Some(12));
        assert!(l.disjoint());
        let zero = lay(8, &[3, 0, 2], &[16, 100, 1000]);
        assert_eq!(
            (zero.runs(), zero.span(), zero.bytes()),
            (Some(0), Some(0), Some(0))
        );
        assert_eq!(lay(4, &[], &[]).walk(0, 1).collect::<Vec<_>>(), [0]);
    }

    /// The tight loop visits the same runs as the walker, from every
    /// first run and for every count (rows cut anywhere), for 0- to 3-D
    /// shapes, count-1 dimensions and a stride-0 dimension; a parsed
    /// message visits the same runs either way.
    #[test]
    fn strided_run_loop_matches_the_walker() {
        for l in [
            lay(8, &[3, 2, 2], &[16, 100, 1000]),
            lay(8, &[1, 4, 1], &[0, 64, 0]),
            lay(4, &[5], &[0]),
            lay(2, &[4, 3], &[2, 8]),
            lay(4, &[], &[]),
        ] {
            let runs = l.runs().unwrap();
            for first in 0..runs {
                for n in 0..=runs - first {
                    let want: Vec<u64> = l.walk(first, n).collect();
                    let mut got = Vec::new();
                    l.for_each_run(first, n, |o| got.push(o));
                    assert_eq!(got, want, "{l:?} first {first} n {n}");
                }
            }
        }
        for p in [
            words(&[STRIDED | 2 << 8, 8, 4096, 2, 3, 3, 2, 16, 100]),
            words(&[INDEXED, 2, 100, 8, 4090, 8]),
        ] {
            let m = parse(&p).unwrap();
            let mut got = Vec::new();
            m.wire.for_each_run(|o, n| got.push((o, n)));
            assert_eq!(got, m.wire.runs().collect::<Vec<_>>());
            assert_eq!(got.len(), if got[0].0 == 100 { 2 } else { 3 });
        }
    }

    /// Overlap: a zero stride, a stride below the run, interleaved dims.
    #[test]
    fn strided_overlap_is_detected() {
        assert!(!lay(8, &[2], &[0]).disjoint());
        assert!(!lay(8, &[2], &[4]).disjoint());
        assert!(lay(8, &[2], &[8]).disjoint());
        assert!(!lay(8, &[4, 2], &[8, 16]).disjoint());
        assert!(lay(8, &[4, 2], &[8, 32]).disjoint());
        assert!(lay(8, &[1, 5], &[0, 8]).disjoint(), "a count-1 dim is free");
        assert!(Layout::new(8, &[1; MAX_DIMS + 1], &[0; MAX_DIMS + 1]).is_none());
        assert!(Layout::new(8, &[1, 2], &[0]).is_none());
        assert!(!RunList::Indexed(&[(0, 8), (4, 8)]).disjoint());
        assert!(RunList::Indexed(&[(16, 8), (0, 8)]).disjoint());
    }

    /// The native loop visits the same pairs as the walker, in order.
    #[test]
    fn strided_pair_loop_matches_the_walker() {
        for (counts, sa, sb) in [
            (
                &[3u64, 2, 2][..],
                &[16u64, 100, 1000][..],
                &[8u64, 24, 48][..],
            ),
            (&[5], &[8], &[0]),
            (&[1, 4, 1], &[0, 64, 0], &[0, 8, 0]),
            (&[], &[], &[]),
            (&[3, 0], &[8, 8], &[8, 8]),
        ] {
            let (a, b) = (lay(8, counts, sa), lay(8, counts, sb));
            let n = a.runs().unwrap();
            let want: Vec<(u64, u64)> = a.walk(0, n).zip(b.walk(0, n)).collect();
            let mut got = Vec::new();
            for_each_pair(&a, &b, |x, y| got.push((x, y)));
            assert_eq!(got, want, "{counts:?}");
        }
    }

    #[test]
    fn strided_merge_splits_at_both_sides_boundaries() {
        let a = [(0u64, 5u64), (10, 3)];
        let b = [(100u64, 2u64), (200, 6)];
        let m: Vec<_> = merge(a.iter().copied(), b.iter().copied()).collect();
        assert_eq!(m, [(0, 100, 2), (2, 200, 3), (10, 203, 3)]);
    }

    /// Every plan covers the stream exactly, each message within budget,
    /// and its header round-trips through the parser.
    #[test]
    fn strided_plans_fit_the_budget_and_parse_back() {
        // fewer runs under Miri (the same paths: several messages each)
        let k = if cfg!(miri) { 40 } else { 1 };
        let cases: Vec<(Layout, u64)> = vec![
            (lay(64, &[1000 / k], &[128]), 1 << 20),
            (lay(8, &[7, 5, 3], &[8, 100, 1000]), 1 << 20),
            (lay(3000, &[3], &[4000]), 1 << 20), // runs above the budget
            (lay(1, &[600 / k], &[2]), 1 << 20),
        ];
        let budget = if cfg!(miri) { 600 } else { 512 };
        for (l, base) in cases {
            let r = RunList::Strided { layout: l, base };
            let want: Vec<(u64, u64)> = r.iter().collect();
            for put in [true, false] {
                let chunks = plan(&r, budget, put);
                let mut got = Vec::new();
                for c in &chunks {
                    let mut msg = Vec::new();
                    encode(&mut msg, &r, c);
                    let bytes = chunk_bytes(c, l.run);
                    if put {
                        msg.extend(std::iter::repeat_n(7u8, bytes as usize));
                        assert!(msg.len() <= budget, "{c:?}");
                    } else {
                        assert!(msg.len() <= budget && bytes <= budget as u64);
                    }
                    let p = parse(&msg).expect("own header parses");
                    assert_eq!(p.bytes, bytes);
                    assert_eq!(p.data.len() as u64, if put { bytes } else { 0 });
                    assert!(p.wire.within(base, base + l.span().unwrap()));
                    got.extend(p.wire.runs());
                }
                // same bytes in the same order (pieces may split runs)
                let flat = |v: &[(u64, u64)]| -> Vec<u64> {
                    v.iter().flat_map(|&(o, n)| o..o + n).collect()
                };
                assert_eq!(flat(&got), flat(&want));
            }
        }
        let list = [(5_000_000u64, 700u64), (5_001_000, 10), (5_002_000, 1)];
        let r = RunList::Indexed(&list);
        for put in [true, false] {
            let chunks = plan(&r, 512, put);
            let mut got = Vec::new();
            for c in &chunks {
                let mut msg = Vec::new();
                encode(&mut msg, &r, c);
                got.extend(parse(&msg).unwrap().wire.runs());
            }
            let total: u64 = got.iter().map(|x| x.1).sum();
            assert_eq!(total, 711);
        }
    }

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Hostile headers: refused with a reason, never a panic, never work
    /// beyond the payload.
    #[test]
    fn strided_hostile_headers_are_refused() {
        let bad: Vec<Vec<u8>> = vec![
            vec![],
            vec![1, 2, 3],
            words(&[99]),
            words(&[STRIDED | 9 << 8]),
            words(&[STRIDED | 1 << 40]),
            words(&[STRIDED | 1 << 8, 8, 0, 0, 1]), // truncated
            words(&[STRIDED | 1 << 8, 0, 0, 0, 1, 4, 8]), // run 0
            words(&[STRIDED | 1 << 8, 8, 0, 0, 1, 0, 8]), // count 0
            words(&[STRIDED | 1 << 8, 8, 0, 3, 2, 4, 8]), // beyond
            words(&[STRIDED | 1 << 8, 8, 0, u64::MAX, 2, 4, 8]), // wraps
            words(&[STRIDED | 1 << 8, 8, 0, 0, 0, 4, 8]), // n 0
            words(&[STRIDED | 2 << 8, 8, 0, 0, 1, u64::MAX, 3, 1, 1]), // runs overflow
            words(&[STRIDED | 1 << 8, 8, 0, 0, 1, 3, u64::MAX]), // span overflow
            words(&[STRIDED | 1 << 8, u64::MAX, 0, 0, 2, 3, 1]), // bytes overflow
            words(&[INDEXED]),
            words(&[INDEXED, 0]),
            words(&[INDEXED, 1]),
            words(&[INDEXED, u64::MAX, 0, 0]),
            words(&[INDEXED, 1 << 61, 0, 0]),
            words(&[INDEXED, 1, 0, 0]),                     // empty run
            words(&[INDEXED, 1, u64::MAX, 2]),              // wraps
            words(&[INDEXED, 2, 0, u64::MAX, 1, u64::MAX]), // sum overflows
            words(&[INDEXED | 1 << 8, 1, 0, 1]),
        ];
        for (i, p) in bad.iter().enumerate() {
            assert!(parse(p).is_err(), "case {i} parsed: {:?}", parse(p));
        }
        // well-formed but outside the segment: parsed, refused by `within`
        let p = words(&[STRIDED | 1 << 8, 8, u64::MAX - 8, 0, 1, 2, 8]);
        let w = parse(&p).unwrap();
        assert!(!w.wire.within(0, u64::MAX));
        let p = words(&[INDEXED, 2, 100, 8, 4090, 8]);
        let w = parse(&p).unwrap();
        assert!(w.wire.within(100, 4098) && !w.wire.within(100, 4097));
        assert!(!w.wire.within(101, 1 << 20));
        // every truncation and every single-bit flip of good headers:
        // parsed or refused, never a panic, runs bounded by the bytes;
        // the handlers' loop (`for_each_run`) sees the runs of `runs()`,
        // which add up to the parsed bytes
        let same_runs = |p: &Parsed<'_>| {
            if p.bytes > 1 << 16 {
                return;
            }
            let n = p.wire.runs().take(1 << 17).count() as u64;
            assert!(n <= p.bytes, "runs {n} > bytes {}", p.bytes);
            let mut seen = Vec::new();
            p.wire.for_each_run(|o, len| seen.push((o, len)));
            assert_eq!(seen, p.wire.runs().collect::<Vec<_>>());
            let sum = seen.iter().map(|r| r.1).sum::<u64>();
            assert_eq!(sum, p.bytes, "runs {seen:?}");
        };
        let l = lay(8, &[3, 2], &[8, 64]);
        let r = RunList::Strided {
            layout: l,
            base: 4096,
        };
        let mut good = Vec::new();
        encode(&mut good, &r, &Chunk::Strided { first: 1, n: 4 });
        let mut idx = Vec::new();
        encode(&mut idx, &r, &Chunk::Pieces(vec![(4096, 8), (5000, 3)]));
        let step = if cfg!(miri) { 29 } else { 1 };
        for g in [good, idx] {
            for cut in 0..g.len() {
                if let Ok(p) = parse(&g[..cut]) {
                    same_runs(&p);
                }
            }
            same_runs(&parse(&g).unwrap());
            for bit in (0..g.len() * 8).step_by(step) {
                let mut m = g.clone();
                m[bit / 8] ^= 1 << (bit % 8);
                if let Ok(p) = parse(&m) {
                    let _ = p.wire.within(0, 1 << 30);
                    same_runs(&p);
                }
            }
        }
    }
}
