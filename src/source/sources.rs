//! [`Sources`]: the one value that owns what the daemon's source files share: the set of those
//! open now and its cap, the thread that closes idle ones, the pages their mappings have served,
//! the read leases, the clock, and the count of calls to the source that returned.
//!
//! The daemon makes one and hands it to the namespace (whose registry opens sources through it)
//! and to the threads it starts; every [`Source`](super::Source) keeps a handle on it.
//!
//! Open sources are capped: past [`Sources::cap`] open at once, the least recently used idle ones
//! are closed, down to [`CLOSE_TO_NUM`]/[`CLOSE_TO_DEN`] of the cap. A source idle for
//! `-o source_idle` is closed by the closer thread. So a mount of any number of files needs
//! neither a raised `vm.max_map_count` nor more descriptors, and a backend such as `s3fs` gets its
//! files closed.
//!
//! The kernel's copy of a reply sent from a mapping maps the pages it reads into the daemon, with
//! the pages around them (fault-around, or a whole large folio of the page cache). Once
//! [`DROP_AFTER`] bytes have been sent in all, every mapping that sent some has its pages dropped
//! from the daemon's address space (the page cache keeps them; a reply still copying from them maps
//! them again); the closer thread does the same each tick. So the daemon's resident memory does
//! not grow with what it serves. Dropping whole mappings now and then, rather than each reply's
//! pages, lets a sequential reader's next request find the pages the previous one mapped.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use log::debug;

use super::decoded::{DEFAULT_BUDGET, DecodedChunks};
use super::lease::Leases;
use super::opened::{Opened, Slot};
use crate::base::clock::Clock;
use crate::format::Settings;

/// At most this many sources are open at once (fewer where RLIMIT_NOFILE is lower).
const MAX_OPEN: usize = 4096;

/// The fewest sources the cap allows, whatever the descriptor limit: a directory's shards must be
/// open together while its set is checked.
const MIN_OPEN: usize = 16;

/// Descriptors left for everything but sources: FUSE's, inotify's, the log's, a client's
/// passthrough backing files.
const OTHER_DESCRIPTORS: u64 = 256;

/// Past the cap, idle sources are closed until this fraction of it is open, so that the next
/// opens do not each close one.
const CLOSE_TO_NUM: usize = 3;
const CLOSE_TO_DEN: usize = 4;

/// Bytes sent from mappings after which their pages are dropped from the daemon (see above).
const DROP_AFTER: u64 = 8 << 20;

/// The closer thread looks for idle sources [`CLOSER_TICKS`] times per `source_idle` (so a
/// source is closed at most a quarter late), within these bounds.
const CLOSER_TICKS: u32 = 4;
const CLOSER_TICK_MIN: Duration = Duration::from_millis(250);
const CLOSER_TICK_MAX: Duration = Duration::from_secs(1);

/// `-o source_idle=`'s default: a source unused this long is closed (a model being loaded reads
/// it again within that; a backend such as s3fs gets its files closed soon after).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);

/// How the sources are read (from `-o`): the formats' own settings, the most bytes of decoded
/// chunks kept (`decode_cache=`), and how long a source may stay unused before it is closed
/// (`source_idle=`, the closer thread's).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub settings: Settings,
    pub decode_cache: u64,
    pub idle: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            settings: Settings::default(),
            decode_cache: DEFAULT_BUDGET,
            idle: DEFAULT_IDLE,
        }
    }
}

/// The handle on what the daemon's sources share (cheap to clone).
#[derive(Debug, Clone)]
pub struct Sources(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// The formats' own settings (`-o dcp_model=`), which every reader is given.
    settings: Settings,
    /// The decoded chunks the read path keeps.
    decoded: DecodedChunks,
    clock: Clock,
    leases: Arc<Leases>,
    cap: usize,
    /// The sources that may hold a descriptor, by address of their slot.
    open: Mutex<HashMap<usize, Weak<Slot>>>,
    /// Counts the sources closed, for the closer's log.
    closed: AtomicUsize,
    /// Bytes sent from all mappings since their pages were last dropped.
    served: AtomicU64,
    /// Calls to the source that returned.
    progress: AtomicU64,
    /// SOURCE, where it is a directory: below it, and only there, readers open the data files
    /// their descriptors name.
    root: RwLock<Option<Arc<Path>>>,
}

impl Sources {
    /// `descriptors`: the RLIMIT_NOFILE in force, which bounds how many sources may be open at once
    /// (see [`Sources::cap`]).
    pub fn new(clock: Clock, descriptors: u64) -> Sources {
        Sources::configured(clock, descriptors, &Config::default())
    }

    /// [`Sources::new`], read as `config` says: its readers given the formats' own settings, its
    /// decoded chunks kept up to `config.decode_cache` bytes.
    pub fn configured(clock: Clock, descriptors: u64, config: &Config) -> Sources {
        Sources(Arc::new(Shared {
            settings: config.settings.clone(),
            decoded: DecodedChunks::new(config.decode_cache),
            leases: Leases::new(clock.clone()),
            clock,
            cap: cap_for(descriptors),
            open: Mutex::new(HashMap::new()),
            closed: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            root: RwLock::new(None),
        }))
    }

    /// Sets SOURCE, a directory, below which data files are opened (see [`Sources::root`]).
    pub fn set_root(&self, root: &Path) {
        *self.0.root.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::from(root));
    }

    /// SOURCE, where it is a directory: the bound of the data files readers open.
    pub fn root(&self) -> Option<Arc<Path>> {
        self.0
            .root
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many sources may be open at once: [`MAX_OPEN`], or fewer where the descriptor limit
    /// leaves less than that plus [`OTHER_DESCRIPTORS`].
    pub fn cap(&self) -> usize {
        self.0.cap
    }

    /// The formats' own settings, for their readers.
    pub fn settings(&self) -> &Settings {
        &self.0.settings
    }

    /// The read path's cache of decoded chunks.
    pub fn decoded(&self) -> &DecodedChunks {
        &self.0.decoded
    }

    pub fn clock(&self) -> &Clock {
        &self.0.clock
    }

    pub fn leases(&self) -> &Arc<Leases> {
        &self.0.leases
    }

    /// How many calls to the source have returned so far: a request waiting on the refresh thread
    /// tells a slow source from one that stopped answering by this.
    pub fn progress(&self) -> u64 {
        self.0.progress.load(Ordering::Relaxed)
    }

    /// Counts one call to the source that returned.
    pub fn step(&self) {
        self.0.progress.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Weak<Slot>>> {
        self.0.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slots of the sources that may hold a descriptor now.
    fn open_slots(&self) -> Vec<Arc<Slot>> {
        self.lock().values().filter_map(Weak::upgrade).collect()
    }

    /// Records that `slot` now holds a descriptor; past the cap, closes the least recently used
    /// idle sources.
    pub(super) fn track(&self, slot: &Arc<Slot>) {
        // Closed, and the last references to slots dropped, only once the lock is released.
        let mut closed = Vec::new();
        let mut by_age: Vec<(u64, usize, Arc<Slot>)> = Vec::new();
        let cap = self.cap();
        let mut open = self.lock();
        open.insert(Arc::as_ptr(slot) as usize, Arc::downgrade(slot));
        if open.len() > cap {
            let target = cap * CLOSE_TO_NUM / CLOSE_TO_DEN;
            by_age.extend(
                open.iter()
                    .filter_map(|(&k, w)| w.upgrade().map(|s| (s.last_used(), k, s))),
            );
            open.retain(|_, w| w.strong_count() > 0);
            by_age.sort_by_key(|&(used, k, _)| (used, k));
            for (_, k, s) in &by_age {
                if open.len() <= target {
                    break;
                }
                if s.close_if_unused(&mut closed) {
                    open.remove(k);
                }
            }
            if open.len() > cap {
                debug!("{} sources in use, over the cap of {cap}", open.len());
            }
        }
        drop(open);
        self.0.closed.fetch_add(closed.len(), Ordering::Relaxed);
    }

    /// Closes every source unused for `idle`; returns how many are still open.
    pub fn sweep(&self, idle: Duration) -> usize {
        let now = self.clock().ms();
        let idle = idle.as_millis() as u64;
        // Closed, and the last references to slots dropped, only once the lock is released.
        let mut closed = Vec::new();
        let mut seen = Vec::new();
        let mut open = self.lock();
        open.retain(|_, w| {
            let Some(s) = w.upgrade() else {
                return false;
            };
            let keep = now.saturating_sub(s.last_used()) < idle || !s.close_if_unused(&mut closed);
            seen.push(s);
            keep
        });
        let left = open.len();
        drop(open);
        self.0.closed.fetch_add(closed.len(), Ordering::Relaxed);
        left
    }

    /// Counts `len` bytes sent from `opened`'s mapping, and drops the pages of every mapping once
    /// [`DROP_AFTER`] bytes have been sent in all.
    pub(super) fn served(&self, opened: &Opened, len: u64) {
        opened.count_served(len);
        let total = self.0.served.fetch_add(len, Ordering::Relaxed) + len;
        if total >= DROP_AFTER && self.0.served.swap(0, Ordering::Relaxed) > 0 {
            self.drop_served();
        }
    }

    /// Drops from the daemon's address space the pages of every mapping that has sent bytes since
    /// this was last done.
    fn drop_served(&self) {
        for slot in self.open_slots() {
            if let Some(opened) = slot.current() {
                opened.drop_served();
            }
        }
    }

    /// Starts the thread that closes sources idle for `idle` (see [`CLOSER_TICKS`]). Start it
    /// after the fork, like every thread.
    pub fn start_closer(&self, idle: Duration) -> io::Result<()> {
        let tick = (idle / CLOSER_TICKS).clamp(CLOSER_TICK_MIN, CLOSER_TICK_MAX);
        let sources = self.clone();
        std::thread::Builder::new()
            .name("closer".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(tick);
                    sources.drop_served();
                    let started = Instant::now();
                    let before = sources.0.closed.load(Ordering::Relaxed);
                    let left = sources.sweep(idle);
                    let closed = sources.0.closed.load(Ordering::Relaxed) - before;
                    if closed > 0 {
                        debug!(
                            "closed {closed} idle sources in {:?}, {left} still open",
                            started.elapsed()
                        );
                    }
                }
            })?;
        Ok(())
    }

    /// Starts the thread that releases broken read leases (see [`Leases::start`]), and takes
    /// leases on the local sources already open.
    pub fn start_leases(&self) -> io::Result<()> {
        self.leases().start()?;
        for slot in self.open_slots() {
            if let Some(opened) = slot.current()
                && opened.local
            {
                self.leases().take(&opened.fd, || opened.whole());
            }
        }
        Ok(())
    }
}

/// The cap on open sources for a descriptor limit of `descriptors`.
fn cap_for(descriptors: u64) -> usize {
    let budget = descriptors.saturating_sub(OTHER_DESCRIPTORS);
    usize::try_from(budget)
        .unwrap_or(usize::MAX)
        .clamp(MIN_OPEN, MAX_OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_the_rest_within_bounds() {
        assert_eq!(cap_for(1 << 20), MAX_OPEN);
        assert_eq!(cap_for(1024), 1024 - 256);
        assert_eq!(cap_for(300), 300 - 256);
        assert_eq!(cap_for(260), MIN_OPEN);
        assert_eq!(cap_for(0), MIN_OPEN);
    }
}
