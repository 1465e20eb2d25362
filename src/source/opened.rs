//! A source's descriptor and mapping while it is open ([`Opened`]), and the [`Slot`] that holds
//! them while the source is in use.
//!
//! A source is opened when it is found (its header is read through that descriptor) and whenever
//! it is read again after being closed. It is closed once idle, or sooner when too many sources
//! are open (see [`Sources`](super::Sources)), but never while a read uses it or while a client of
//! the mount holds one of its files open.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use memmap2::Mmap;

use super::lease::Descriptor;
use super::version::Version;
use crate::base::sys;

/// [`resident`](Opened::resident) looks at no more pages than this in one call; a longer range is
/// treated as not resident (a reply is at most a few MiB, 1024 pages of 4 KiB).
const MAX_RESIDENT_PAGES: usize = 1024;

/// A source's descriptor and, once it has been read through one, its mapping.
#[derive(Debug)]
pub struct Opened {
    pub fd: Arc<Descriptor>,
    /// On a local filesystem (see [`Source::remote`](super::Source)): may take a read lease.
    pub local: bool,
    map: OnceLock<Option<Mmap>>,
    /// Bytes sent from the mapping since its pages were last dropped.
    served: AtomicU64,
    /// The size and mtime of the version it was opened as.
    size: u64,
    mtime: (i64, i64),
}

impl Opened {
    pub fn new(fd: Descriptor, version: &Version, local: bool) -> Opened {
        Opened {
            fd: Arc::new(fd),
            local,
            map: OnceLock::new(),
            served: AtomicU64::new(0),
            size: version.size,
            mtime: version.mtime,
        }
    }

    pub fn file(&self) -> &File {
        &self.fd.file
    }

    /// Whether the file still holds, up to `end`, the bytes of the version it was opened as: not
    /// shorter, and not modified since (same mtime). One `fstat`, measured within noise of a read.
    pub fn unchanged(&self, end: u64) -> bool {
        self.file().metadata().is_ok_and(|now| {
            let now = Version::of(&now);
            now.size >= end && now.mtime == self.mtime
        })
    }

    /// Whether the whole version it was opened as is still there.
    pub fn whole(&self) -> bool {
        self.unchanged(self.size)
    }

    /// The mapping, made on first call by `map` (`None`: the file is served with `pread`).
    pub fn map_with(&self, map: impl FnOnce(&File) -> Option<Mmap>) -> Option<&Mmap> {
        self.map.get_or_init(|| map(self.file())).as_ref()
    }

    /// The mapping if it has been made.
    pub fn mapped(&self) -> Option<&Mmap> {
        self.map.get().and_then(Option::as_ref)
    }

    /// Whether the `len` bytes at `start` of the mapping are in the page cache (`mincore`), so
    /// that sending them cannot wait on storage.
    pub fn resident(&self, map: &Mmap, start: u64, len: u64) -> bool {
        let page = sys::page_size();
        let Some((first, span)) = page_span(map.len(), start, len, page) else {
            return true;
        };
        let mut pages = [0u8; MAX_RESIDENT_PAGES];
        sys::resident(map, first, span, &mut pages)
    }

    /// Counts `len` bytes sent from the mapping.
    pub fn count_served(&self, len: u64) {
        self.served.fetch_add(len, Ordering::Relaxed);
    }

    /// Drops the pages of the mapping from the daemon's address space if it has sent bytes since
    /// this was last done (see [`Sources`](super::Sources)).
    pub fn drop_served(&self) {
        if self.served.swap(0, Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(map) = self.mapped() {
            sys::drop_pages(map);
        }
    }
}

/// The page-aligned range of a mapping of `map_len` bytes that covers `len` bytes at `start`.
fn page_span(map_len: usize, start: u64, len: u64, page: usize) -> Option<(usize, usize)> {
    let end = start.saturating_add(len).min(map_len as u64);
    if start >= end {
        return None;
    }
    let first = start as usize / page * page;
    Some((first, (end as usize - first).div_ceil(page) * page))
}

/// Where a source keeps its [`Opened`] while it is open, and what decides when it may close.
#[derive(Debug)]
pub struct Slot {
    open: RwLock<Option<Arc<Opened>>>,
    /// When the source was last used ([`Clock::ms`](crate::base::clock::Clock::ms)).
    used: AtomicU64,
    /// Handles on its files that clients of the mount hold open.
    holds: AtomicUsize,
    /// Set once a shared mapping has been refused: served with `pread` from then on.
    unmappable: AtomicBool,
}

impl Slot {
    pub fn new(opened: Option<Arc<Opened>>, now: u64) -> Slot {
        Slot {
            open: RwLock::new(opened),
            used: AtomicU64::new(now),
            holds: AtomicUsize::new(0),
            unmappable: AtomicBool::new(false),
        }
    }

    /// The open descriptor, waiting for an open or close in progress.
    pub fn get(&self) -> Option<Arc<Opened>> {
        self.open
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The descriptor if it is open now and not being opened or closed (never waits).
    pub fn current(&self) -> Option<Arc<Opened>> {
        self.open.try_read().ok()?.clone()
    }

    /// The slot's content if no open or close is in progress (never waits; nothing is cloned).
    pub fn try_peek(&self) -> Option<RwLockReadGuard<'_, Option<Arc<Opened>>>> {
        self.open.try_read().ok()
    }

    /// The open descriptor, or the one `open` gives (then stored, and `true` returned with it).
    pub fn get_or_open<E>(
        &self,
        open: impl FnOnce() -> Result<Opened, E>,
    ) -> Result<(Arc<Opened>, bool), E> {
        if let Some(o) = self.get() {
            return Ok((o, false));
        }
        let mut slot = self.open.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = &*slot {
            return Ok((o.clone(), false));
        }
        let o = Arc::new(open()?);
        *slot = Some(o.clone());
        Ok((o, true))
    }

    /// Takes the descriptor if nothing uses it (no read in flight, no handle held), for the caller
    /// to close once it holds no lock: closing a file of a stalled FUSE backend waits. True if the
    /// slot is empty now.
    pub fn close_if_unused(&self, closed: &mut Vec<Arc<Opened>>) -> bool {
        let Ok(mut open) = self.open.try_write() else {
            return false;
        };
        if self.holds.load(Ordering::Relaxed) > 0 {
            return false;
        }
        match open.take_if(|o| Arc::strong_count(o) == 1) {
            Some(o) => closed.push(o),
            None => return open.is_none(),
        }
        true
    }

    pub fn mark_used(&self, now: u64) {
        self.used.store(now, Ordering::Relaxed);
    }

    pub fn last_used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn hold(&self) {
        self.holds.fetch_add(1, Ordering::Relaxed);
    }

    pub fn release(&self, now: u64) {
        self.mark_used(now);
        self.holds.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn unmappable(&self) -> bool {
        self.unmappable.load(Ordering::Relaxed)
    }

    pub fn set_unmappable(&self) {
        self.unmappable.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::page_span;

    #[test]
    fn page_spans_cover_the_range_within_the_mapping() {
        assert_eq!(page_span(10_000, 0, 1, 4096), Some((0, 4096)));
        assert_eq!(page_span(10_000, 4095, 2, 4096), Some((0, 8192)));
        assert_eq!(page_span(10_000, 4096, 4096, 4096), Some((4096, 4096)));
        // Clamped to the mapping's end, rounded up to a whole page.
        assert_eq!(page_span(10_000, 9_000, 5_000, 4096), Some((8192, 4096)));
        assert_eq!(page_span(10_000, 10_000, 10, 4096), None);
        assert_eq!(page_span(10_000, 20_000, 10, 4096), None);
        assert_eq!(page_span(10_000, 5, 0, 4096), None);
    }
}
