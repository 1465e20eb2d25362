//! Reads of several stretches (a sharded tensor's chunks, a converted file's read across two
//! tensors) sent as slices of their sources' mappings in one reply, which the kernel copies from
//! there: one copy, as for a read of one stretch, instead of gathering them into a buffer first,
//! and from a FUSE thread where the page cache holds every byte.

use std::io::IoSlice;
use std::sync::Arc;

use super::file::Source;
use super::gather::Stored;
use super::opened::Opened;
use super::read::{Body, Out, Wait, stored_runs};
use crate::sys;

/// Most sources one read is sliced from (more, rare, are gathered).
const MAX_SOURCES: usize = 8;

/// Reads whose stretches are shorter than this on average are gathered instead: the kernel
/// copies a slice a page at a time, and a short one costs as much as a page.
const MIN_AVERAGE: u64 = 2 << 10;

/// A source read, as open now, with its mapping and the span of it the read touches.
struct Mapped<'a> {
    source: &'a Source,
    opened: Arc<Opened>,
    low: u64,
    high: u64,
    /// How many bytes of it the read sends.
    sent: u64,
}

/// Sends `head`, then the presented bytes of `body`'s pieces, to `out` as slices of their
/// sources' mappings, while each source's read lease is held. False, nothing sent, where they
/// are not all stretches as stored (a widened or computed piece), a source is remote, cannot be
/// mapped or is not leased, there are too many or too short of them, or (`wait` [`Wait::No`]) a
/// byte is not in the page cache or a source not open now.
pub fn send(head: &[u8], body: &Body<'_>, wait: Wait, out: &mut impl Out) -> bool {
    let mut sources: Vec<Mapped<'_>> = Vec::new();
    // Each stretch: the source it is in (an index of `sources`), where, how long.
    let mut runs: Vec<(usize, u64, u64)> = Vec::new();
    let mut len = 0;
    for p in &body.pieces {
        if p.widen.is_some() {
            return false;
        }
        let mut ok = true;
        match &p.stored {
            Stored::Computed(tensor, data) => {
                let Some(computed) = &tensor.computed else {
                    return false;
                };
                let stored = computed.runs(p.offset, p.len, &mut |k, at, n| {
                    ok = ok
                        && data
                            .get(k as usize)
                            .is_some_and(|s| add(&mut sources, &mut runs, wait, s, at, n));
                });
                ok &= stored;
            }
            _ => {
                let source = p.source.as_ref().unwrap_or(&body.source);
                stored_runs(p, p.offset, p.len, &mut |at, n| {
                    ok = ok && add(&mut sources, &mut runs, wait, source, at, n)
                });
            }
        }
        if !ok {
            return false;
        }
        len += p.len;
    }
    if runs.is_empty() || len / (runs.len() as u64) < MIN_AVERAGE {
        return false;
    }
    let mut maps = Vec::with_capacity(sources.len());
    for m in &sources {
        // Mapping a file made the first time (as a plain read on the pool does) waits on no
        // storage: a FUSE thread may do it.
        let map = m.source.mapping(&m.opened);
        let Some(map) = map.filter(|map| m.high <= map.len() as u64) else {
            return false;
        };
        if wait == Wait::No && !m.opened.resident(map, m.low, m.high - m.low) {
            return false;
        }
        maps.push(map);
    }
    let mut slices = Vec::with_capacity(runs.len() + 1);
    slices.push(IoSlice::new(head));
    for &(i, at, n) in &runs {
        slices.push(IoSlice::new(&maps[i][at as usize..(at + n) as usize]));
    }
    let sent = leased(&sources, &mut || out.vectored(&slices)) == Some(true);
    if sent {
        for m in &sources {
            m.source.served(&m.opened, m.sent);
        }
    }
    sent
}

/// Adds the stretch of `n` bytes at `at` of `source` to `runs`, and the source to `sources` if
/// new (open now: see [`open`]); false where it cannot be sliced.
fn add<'a>(
    sources: &mut Vec<Mapped<'a>>,
    runs: &mut Vec<(usize, u64, u64)>,
    wait: Wait,
    source: &'a Source,
    at: u64,
    n: u64,
) -> bool {
    let i = match sources.iter().position(|m| std::ptr::eq(m.source, source)) {
        Some(i) => i,
        None if sources.len() == MAX_SOURCES => return false,
        None => {
            let Some(opened) = open(source, wait) else {
                return false;
            };
            sources.push(Mapped {
                source,
                opened,
                low: u64::MAX,
                high: 0,
                sent: 0,
            });
            sources.len() - 1
        }
    };
    let m = &mut sources[i];
    (m.low, m.high) = (m.low.min(at), m.high.max(at.saturating_add(n)));
    m.sent += n;
    runs.push((i, at, n));
    runs.len() < sys::IOV_MAX - 1
}

/// `source` open now (without waiting, only a local source open now), if local.
fn open(source: &Source, wait: Wait) -> Option<Arc<Opened>> {
    if source.remote {
        return None;
    }
    match wait {
        Wait::No => source.local_slot()?.clone(),
        Wait::Yes | Wait::Copied => source.opened().ok(),
    }
}

/// Runs `send` while the read lease of every one of `sources` is held (see
/// [`Source::while_leased`]); `None`, `send` not run, where one is not.
fn leased(sources: &[Mapped<'_>], send: &mut dyn FnMut() -> bool) -> Option<bool> {
    match sources.split_first() {
        None => Some(send()),
        Some((m, rest)) => m
            .source
            .while_leased(&m.opened, || leased(rest, send))
            .flatten(),
    }
}
