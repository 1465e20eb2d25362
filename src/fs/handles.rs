//! What clients hold open: [`Handles`], the files open by handle (each keeping its source open)
//! with the mode of each mirrored file, and the directories open for listing, each with the
//! snapshot it lists, so that a listing never skips or repeats an entry while the directory
//! changes.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::namespace::{Ino, Snapshot};
use crate::source::Hold;

/// How a mirrored file open by clients is served: through its passthrough backing file, or (none)
/// from the page cache; and how many handles are open on it.
pub(super) struct Mode<B> {
    pub handles: usize,
    pub backing: Option<Arc<B>>,
}

/// The handles clients hold.
pub(super) struct Handles<B> {
    /// The files open, by handle.
    files: Mutex<HashMap<u64, (Ino, Hold)>>,
    /// The mode of each mirrored file open: its passthrough backing file (the kernel wants the
    /// same one for every open of an inode), or `None` for the page cache, served by the daemon.
    /// Dropped with the last handle, which lets the kernel close its backing file.
    modes: Mutex<HashMap<Ino, Mode<B>>>,
    /// The directories open, by handle, with the snapshot each lists.
    dirs: Mutex<HashMap<u64, Arc<Snapshot>>>,
    next: AtomicU64,
}

impl<B> Handles<B> {
    pub fn new() -> Handles<B> {
        Handles {
            files: Mutex::new(HashMap::new()),
            modes: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// A new handle number.
    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The file `ino` open as `fh`, holding its source.
    pub fn opened(&self, fh: u64, ino: Ino, hold: Hold) {
        lock(&self.files).insert(fh, (ino, hold));
    }

    /// The modes of the mirrored files open, locked.
    pub fn modes(&self) -> MutexGuard<'_, HashMap<Ino, Mode<B>>> {
        lock(&self.modes)
    }

    /// Closes the file `ino` open as `fh`: its mirrored file's mode goes with its last handle.
    pub fn release(&self, ino: Ino, fh: u64) {
        let released = lock(&self.files).remove(&fh);
        if released.is_some()
            && let Entry::Occupied(mut e) = self.modes().entry(ino)
        {
            e.get_mut().handles -= 1;
            if e.get().handles == 0 {
                e.remove();
            }
        }
        // The last use of a replaced source may close it: not under the locks.
        drop(released);
    }

    /// The directory open as `fh` lists `snapshot`.
    pub fn opened_dir(&self, fh: u64, snapshot: Arc<Snapshot>) {
        lock(&self.dirs).insert(fh, snapshot);
    }

    pub fn release_dir(&self, fh: u64) {
        let dropped = lock(&self.dirs).remove(&fh);
        drop(dropped);
    }

    /// The snapshot the directory open as `fh` lists, if it is open.
    pub fn listing(&self, fh: u64) -> Option<Arc<Snapshot>> {
        lock(&self.dirs).get(&fh).cloned()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
