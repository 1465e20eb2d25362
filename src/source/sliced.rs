//! Reads of several stretches (a sharded tensor's chunks, a converted file's read across two
//! tensors) sent as slices of their sources' mappings in one reply, which the kernel copies from
//! there: one copy, as for a read of one stretch, instead of gathering them into a buffer first,
//! and from a FUSE thread where the page cache holds every byte.

use std::io::IoSlice;
use std::sync::Arc;

use super::file::Source;
use super::opened::Opened;
use crate::base::sys;

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

/// The stretches of one read, each in a source open now, to be sent as one reply of slices.
pub struct Stretches<'a> {
    /// Only what can be sent without waiting (a FUSE thread): sources open now, bytes in the
    /// page cache.
    cached: bool,
    sources: Vec<Mapped<'a>>,
    /// Each stretch: the source it is in (an index of `sources`), where, how long.
    runs: Vec<(usize, u64, u64)>,
}

impl<'a> Stretches<'a> {
    pub fn new(cached: bool) -> Stretches<'a> {
        Stretches {
            cached,
            sources: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Adds the `n` bytes at `at` of `source` (open now: see [`open`]); false where they cannot
    /// be sliced.
    pub fn add(&mut self, source: &'a Source, at: u64, n: u64) -> bool {
        let sources = &mut self.sources;
        let i = match sources.iter().position(|m| std::ptr::eq(m.source, source)) {
            Some(i) => i,
            None if sources.len() == MAX_SOURCES => return false,
            None => {
                let Some(opened) = open(source, self.cached) else {
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
        self.runs.push((i, at, n));
        self.runs.len() < sys::IOV_MAX - 1
    }

    /// Sends `head`, then the stretches, through `out` as slices of their sources' mappings,
    /// while each source's read lease is held. False, nothing sent, where a source cannot be
    /// mapped or is not leased, the stretches are too short, or (`cached`) a byte is not in the
    /// page cache.
    pub fn send(self, head: &[u8], out: &mut dyn FnMut(&[IoSlice<'_>]) -> bool) -> bool {
        let len: u64 = self.sources.iter().map(|m| m.sent).sum();
        if self.runs.is_empty() || len / (self.runs.len() as u64) < MIN_AVERAGE {
            return false;
        }
        let mut maps = Vec::with_capacity(self.sources.len());
        for m in &self.sources {
            // Mapping a file made the first time (as a plain read on the pool does) waits on no
            // storage: a FUSE thread may do it.
            let map = m.source.mapping(&m.opened);
            let Some(map) = map.filter(|map| m.high <= map.len() as u64) else {
                return false;
            };
            if self.cached && !m.opened.resident(map, m.low, m.high - m.low) {
                return false;
            }
            maps.push(map);
        }
        let mut slices = Vec::with_capacity(self.runs.len() + 1);
        slices.push(IoSlice::new(head));
        for &(i, at, n) in &self.runs {
            slices.push(IoSlice::new(&maps[i][at as usize..(at + n) as usize]));
        }
        let sent = leased(&self.sources, &mut || out(&slices)) == Some(true);
        if sent {
            for m in &self.sources {
                m.source.served(&m.opened, m.sent);
            }
        }
        sent
    }
}

/// `source` open now (if `cached`, only a source open already), if local.
fn open(source: &Source, cached: bool) -> Option<Arc<Opened>> {
    if source.remote {
        return None;
    }
    match cached {
        true => source.local_slot()?.clone(),
        false => source.opened().ok(),
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
