//! Sources open on demand: [`Opened`] is a source's descriptor and mapping while it is open, and
//! this module keeps the set of open sources, capped, and closes those left idle.
//!
//! A source is opened when it is found (its header is read through that descriptor) and whenever
//! it is read again after being closed. It is closed once idle for `-o source_idle` (checked by
//! [`start_closer`]'s thread), or sooner, oldest first, when more than [`cap`] sources are open.
//! A source is never closed while a read uses it or while a client of the mount holds one of its
//! files open. So a mount of any number of files needs neither a raised `vm.max_map_count` nor
//! more descriptors, and a backend such as `s3fs` gets its files closed. It also keeps the pages a
//! mapping has served from piling up in the daemon's address space (see [`served`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use log::{debug, warn};
use memmap2::Mmap;

use super::lease::{self, Lease};
use super::source::{Source, Warning};

/// At most this many sources are open at once (fewer where RLIMIT_NOFILE is lower).
const MAX_OPEN: usize = 4096;

/// A source's descriptor and, once it has been read through one, its mapping.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    map: OnceLock<Option<Mmap>>,
    /// Bytes sent from the mapping since its pages were last dropped (see [`served`]).
    served: AtomicU64,
    /// Whether reads may skip checking that the file is unchanged (see [`lease`](super::lease)).
    pub lease: Lease,
}

impl Opened {
    pub fn new(file: File) -> Opened {
        Opened {
            file,
            map: OnceLock::new(),
            served: AtomicU64::new(0),
            lease: Lease::default(),
        }
    }

    /// The mapping of the file (made on first call), or `None` for an empty file or one whose
    /// filesystem refuses a shared mapping (a FUSE backend with `direct_io` answers ENODEV): that
    /// source is then served with `pread`, which is said once.
    pub fn map(&self, source: &Source) -> Option<&Mmap> {
        self.map
            .get_or_init(|| {
                if source.is_empty() || source.unmappable() {
                    return None;
                }
                // SAFETY: the mapping is read-only. The daemon never dereferences it: slices of it
                // are only passed to the kernel (`writev` of a FUSE reply, `mincore`, `madvise`),
                // which reports a page that vanished (source truncated) as EFAULT instead of
                // raising SIGBUS, so later changes to the file cannot cause undefined behaviour
                // here.
                match unsafe { Mmap::map(&self.file) } {
                    Ok(m) => Some(m),
                    Err(e) => {
                        source.set_unmappable();
                        if source.first_warning(Warning::Unmappable) {
                            warn!(
                                "{}: cannot be mapped ({e}); served with pread",
                                source.path.display()
                            );
                        }
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The mapping if it has been made.
    pub fn mapped(&self) -> Option<&Mmap> {
        self.map.get().and_then(Option::as_ref)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        lease::forget(self);
    }
}

/// Whether the `len` bytes at `start` of `map` are in the page cache (`mincore`), so that sending
/// them cannot wait on storage.
pub fn resident(map: &Mmap, start: u64, len: u64) -> bool {
    const MAX_PAGES: usize = 1024;
    let page = page_size();
    let Some((first, span)) = page_span(map.len(), start, len, page) else {
        return true;
    };
    let mut vec = [0u8; MAX_PAGES];
    let pages = span.div_ceil(page);
    if pages > MAX_PAGES {
        return false;
    }
    // SAFETY: `first..first + span` lies within the mapping (page_span clamps it) and starts on a
    // page boundary; `vec` has room for one byte per page. mincore only reads page tables and the
    // page cache; it never touches the mapped bytes.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr().add(first).cast_mut().cast(),
            span,
            vec.as_mut_ptr(),
        )
    };
    rc == 0 && vec[..pages].iter().all(|b| b & 1 == 1)
}

/// Counts `len` bytes sent from `opened`'s mapping. The kernel's copy of a reply maps the pages it
/// reads into the daemon, with the pages around them (fault-around, or a whole large folio of the
/// page cache). Once [`DROP_AFTER`] bytes have been sent in all, every mapping that sent some has
/// its pages dropped from the daemon's address space (`MADV_DONTNEED`: the page cache keeps them;
/// a reply still copying from them maps them again); the closer thread does the same each tick.
/// So the daemon's resident memory does not grow with what it serves. Dropping whole mappings now
/// and then, rather than each reply's pages, lets a sequential reader's next request find the
/// pages the previous one mapped.
pub fn served(opened: &Opened, len: u64) {
    opened.served.fetch_add(len, Ordering::Relaxed);
    let total = SERVED.fetch_add(len, Ordering::Relaxed) + len;
    if total >= DROP_AFTER && SERVED.swap(0, Ordering::Relaxed) > 0 {
        drop_served();
    }
}

/// Bytes sent from all mappings since their pages were last dropped.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// See [`served`].
const DROP_AFTER: u64 = 8 << 20;

/// Drops from the daemon's address space the pages of every mapping that has sent bytes since
/// this was last done.
fn drop_served() {
    for source in open_sources() {
        let Some(opened) = source.current() else {
            continue;
        };
        if opened.served.swap(0, Ordering::Relaxed) == 0 {
            continue;
        }
        if let Some(map) = opened.mapped() {
            // SAFETY: MADV_DONTNEED on a read-only file mapping that is never written only unmaps
            // pages: the next access maps the file's bytes again, so nothing the daemon relies on
            // changes, and no reference into the mapping is invalidated.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
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

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

/// The sources that may hold a descriptor now.
pub(super) fn open_sources() -> Vec<Arc<Source>> {
    let open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    open.iter()
        .flat_map(|set| set.values())
        .filter_map(Weak::upgrade)
        .collect()
}

/// The sources that may hold a descriptor, by address.
static OPEN: Mutex<Option<HashMap<usize, Weak<Source>>>> = Mutex::new(None);

/// Counts the sources closed, for the closer's log.
static CLOSED: AtomicUsize = AtomicUsize::new(0);

/// Records that `source` now holds a descriptor; past the cap, closes the least recently used
/// idle sources.
pub fn track(source: &Arc<Source>) {
    // Closed, and the last references to sources dropped, only once the lock is released.
    let mut closed = Vec::new();
    let mut by_age: Vec<(u64, usize, Arc<Source>)> = Vec::new();
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    let set = open.get_or_insert_with(HashMap::new);
    set.insert(Arc::as_ptr(source) as usize, Arc::downgrade(source));
    if set.len() > cap() {
        let target = cap() * 3 / 4;
        by_age.extend(
            set.iter()
                .filter_map(|(&k, w)| w.upgrade().map(|s| (s.last_used(), k, s))),
        );
        set.retain(|_, w| w.strong_count() > 0);
        by_age.sort_by_key(|&(used, k, _)| (used, k));
        for (_, k, s) in &by_age {
            if set.len() <= target {
                break;
            }
            if s.close_if_unused(&mut closed) {
                set.remove(k);
            }
        }
        if set.len() > cap() {
            debug!("{} sources in use, over the cap of {}", set.len(), cap());
        }
    }
    drop(open);
    CLOSED.fetch_add(closed.len(), Ordering::Relaxed);
}

/// Closes every source unused for `idle`; returns how many are still open.
pub fn sweep(idle: Duration) -> usize {
    let now = super::source::now_ms();
    let idle = idle.as_millis() as u64;
    // Closed, and the last references to sources dropped, only once the lock is released.
    let mut closed = Vec::new();
    let mut seen = Vec::new();
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(set) = open.as_mut() else {
        return 0;
    };
    set.retain(|_, w| {
        let Some(s) = w.upgrade() else {
            return false;
        };
        let keep = now.saturating_sub(s.last_used()) < idle || !s.close_if_unused(&mut closed);
        seen.push(s);
        keep
    });
    let left = set.len();
    drop(open);
    CLOSED.fetch_add(closed.len(), Ordering::Relaxed);
    left
}

/// How many sources have been closed so far.
fn closed() -> usize {
    CLOSED.load(Ordering::Relaxed)
}

/// How many sources may be open at once: [`MAX_OPEN`], or fewer where RLIMIT_NOFILE (raised to
/// its hard limit on first use) leaves less than that plus 256 for everything else.
pub fn cap() -> usize {
    static CAP: OnceLock<usize> = OnceLock::new();
    *CAP.get_or_init(|| descriptor_budget().clamp(16, MAX_OPEN))
}

fn descriptor_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the `rlimit` struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    (lim.rlim_cur as usize).saturating_sub(256)
}

/// Starts the thread that closes sources idle for `idle` (checked every quarter of it, at most
/// every second and at least every 250 ms). Start it after the fork, like every thread.
pub fn start_closer(idle: Duration) -> io::Result<()> {
    let tick = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(1));
    std::thread::Builder::new()
        .name("closer".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                drop_served();
                let started = Instant::now();
                let before = closed();
                let left = sweep(idle);
                if closed() > before {
                    debug!(
                        "closed {} idle sources in {:?}, {left} still open",
                        closed() - before,
                        started.elapsed()
                    );
                }
            }
        })?;
    Ok(())
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
