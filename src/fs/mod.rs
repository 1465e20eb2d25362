//! The filesystem's operations, not tied to fuser: each kernel request becomes one call here that
//! returns a `Result`, and [`fuse`](crate::fuse) only translates. What is decided here:
//! - opens: write opens refused, stale inodes refused (left the tree, or their source moved, after
//!   bringing the tree up to date), sources that may stall checked within a bounded wait, and the
//!   mode of each mirrored file (passthrough or page cache) decided by its first open;
//! - reads: sent from the calling thread where nothing can wait on storage, else from the read
//!   pool;
//! - listings, each from the snapshot its directory was opened on; lookups that miss ask for a
//!   rescan; attributes, extended attributes (see `xattrs`) and `statfs`;
//! - under `-o verify`, the bytes of a file found not to be the recorded ones: refused (EIO).
//!
//! Nothing here decides what the tree holds; that is the namespace's job.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use log::debug;

use crate::fs::integrity::{Activity, TensorDigests};
use crate::fs::pool::Pool;
use crate::fs::tuning::Tuning;
use crate::namespace::{Attr, Content, Ino, Kind, Namespace, Node, Removed, Snapshot};
use crate::refresh;
use crate::refresh::invalidate::{Invalidator, Notice};
use crate::source::{Hold, Opened, ReadError, Source, Verdict};

/// Threads that serve reads which may wait on storage, and how many more reads may wait for one.
const READ_THREADS: usize = 16;
const READ_QUEUE: usize = 4096;

/// How long an open waits for the check of a source that may stall (network or FUSE) before it is
/// answered from memory.
const CHECK_WAIT: Duration = Duration::from_millis(300);

/// `statfs`: the block size sizes are counted in.
pub const STATFS_BSIZE: u32 = 4096;

/// How the operations reach the refresh machinery, when the mount follows its source.
#[derive(Debug, Clone)]
pub struct Live {
    pub refresh: refresh::Handle,
    pub invalidate: Invalidator,
}

/// An open file or directory: its handle, and how the kernel may cache it.
#[derive(Debug)]
pub struct Open<B> {
    pub fh: u64,
    /// Keep the kernel's page cache (and for a directory, its cached listing) across opens.
    pub keep_cache: bool,
    pub cache_dir: bool,
    /// Reads skip the kernel's page cache (`FOPEN_DIRECT_IO`); mappings still use it. Only for a
    /// file of a local source, whose own page cache is then the one copy of its bytes: a source
    /// on a network or FUSE filesystem may have none (`s3fs`, `sshfs -o direct_io`), and the
    /// mount's keeps rereads off the network and answers them while the backend stalls.
    pub direct_io: bool,
    /// The backing file the kernel reads a mirrored file from (passthrough), if it does.
    pub backing: Option<Arc<B>>,
}

/// `statfs` of a read-only image: the size of the sources, nothing free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub files: u64,
}

/// The filesystem. `B` is the kernel's handle on a passthrough backing file (fuser's
/// `BackingId`), dropped with the last handle open on its inode.
pub struct TensorFs<B> {
    ns: Arc<Namespace>,
    /// `None` with `-o refresh=off`: the tree never changes.
    live: Option<Live>,
    tuning: Tuning,
    /// The files open by clients, by handle: each keeps its source open.
    handles: Mutex<HashMap<u64, (Ino, Hold)>>,
    /// The mode of each mirrored file open by a client: its passthrough backing file (the kernel
    /// wants the same one for every open of an inode), or `None` for the page cache, served by the
    /// daemon; and how many handles are open on it. Dropped with the last handle, which lets the
    /// kernel close its backing file.
    backing: Mutex<HashMap<Ino, Mode<B>>>,
    /// Serves reads that may wait on storage, and checks of sources that may stall.
    pool: Pool,
    /// Cleared once the kernel refuses a backing file for want of privilege or support.
    passthrough_ok: AtomicBool,
    /// Set at FUSE INIT where direct I/O is asked for and the kernel lets such files be mapped.
    direct_io_ok: AtomicBool,
    /// The snapshot each open directory lists, so that a listing never skips or repeats an entry
    /// while the directory changes.
    dirs: Mutex<HashMap<u64, Arc<Snapshot>>>,
    next_fh: AtomicU64,
    /// Tensor files' digests, computed when asked.
    digests: Arc<TensorDigests>,
    /// `-o verify`: files whose digest SOURCE records are not passed through to the kernel, nor
    /// cached across opens, until hashed (a mismatch must reach every read); and when files were
    /// last read, which the verifier yields to.
    verify: Option<Arc<Activity>>,
}

/// How a mirrored file open by clients is served: through its passthrough backing file, or (none)
/// from the page cache; and how many handles are open on it.
struct Mode<B> {
    handles: usize,
    backing: Option<Arc<B>>,
}

/// What an open found out from the backend (see [`TensorFs::check`]).
struct Checked {
    moved: bool,
    /// The source open, if it still holds this version (and for a mirrored file, all of it).
    opened: Option<Arc<Opened>>,
    /// False where the backend did not answer in time.
    answered: bool,
}

impl<B: Send + Sync + 'static> TensorFs<B> {
    pub fn new(ns: Arc<Namespace>, live: Option<Live>, tuning: Tuning) -> TensorFs<B> {
        TensorFs {
            ns,
            live,
            tuning,
            handles: Mutex::new(HashMap::new()),
            backing: Mutex::new(HashMap::new()),
            pool: Pool::new(READ_THREADS, READ_QUEUE),
            passthrough_ok: AtomicBool::new(tuning.passthrough),
            direct_io_ok: AtomicBool::new(false),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            digests: Arc::default(),
            verify: None,
        }
    }

    /// The same filesystem under `-o verify` (see [`TensorFs::settled`]), telling `activity` of
    /// each read.
    pub fn verifying(mut self, activity: Option<Arc<Activity>>) -> TensorFs<B> {
        self.verify = activity;
        self
    }

    /// Whether what `source` holds may be handed to the kernel for good (passthrough, the page
    /// cache kept across opens): always, except under `-o verify` for a file that may have a
    /// recorded digest (or is not looked up yet) and has no verdict yet.
    fn settled(&self, source: &Source) -> bool {
        self.verify.is_none()
            || source.verdict().is_some()
            || matches!(source.recorded_if_known(), Some(None))
    }

    /// The tree it serves (to name inodes in messages).
    pub fn namespace(&self) -> &Arc<Namespace> {
        &self.ns
    }

    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Whether the kernel agreed to passthrough (at FUSE INIT).
    pub fn set_passthrough(&self, ok: bool) {
        self.passthrough_ok.store(ok, Ordering::Relaxed);
    }

    /// Whether the kernel lets files opened with direct I/O be mapped (at FUSE INIT): only then
    /// are they opened so, as a mapping of one would otherwise fail with ENODEV.
    pub fn set_direct_io(&self, ok: bool) {
        self.direct_io_ok
            .store(ok && self.tuning.direct_io, Ordering::Relaxed);
    }

    /// The node of `ino`: in the current tree, or kept for the kernel.
    fn node(&self, ino: Ino) -> Result<Node, FsError> {
        self.ns.get(ino).ok_or(FsError::NotFound)
    }

    /// Counts a reply naming `ino` (found as `name` in `parent`). If it has just left the tree,
    /// the kernel is told to forget that name again.
    fn remember(&self, parent: Ino, name: &[u8], ino: Ino, node: &Node) {
        if !self.ns.remember(ino, node)
            && let Some(live) = &self.live
        {
            live.invalidate.send(Notice::Stale(Removed {
                parent,
                name: name.into(),
                ino,
            }));
        }
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<(Ino, Attr), FsError> {
        let mut looked_again = false;
        loop {
            let snapshot = self.ns.current();
            if let Some(ino) = snapshot.lookup(parent, name)
                && let Some(node) = snapshot.node(ino)
            {
                self.remember(parent, name, ino, node);
                return Ok((ino, node.attr));
            }
            if snapshot.children(parent).is_none() {
                // Not a directory, or one that left the tree (nothing new appears in it).
                let dir = self
                    .ns
                    .get(parent)
                    .is_some_and(|n| n.attr.kind == Kind::Dir);
                return Err(if dir {
                    FsError::NotFound
                } else {
                    FsError::NotDir
                });
            }
            // A miss: the source directory may have gained that name since it was last read.
            match &self.live {
                Some(live) if !looked_again => {
                    looked_again = true;
                    let dir = snapshot.real_dir_of(parent);
                    drop(snapshot);
                    live.refresh.revalidate(dir);
                }
                _ => return Err(FsError::NotFound),
            }
        }
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        self.ns.forget(ino, n);
    }

    pub fn getattr(&self, ino: Ino) -> Result<Attr, FsError> {
        Ok(self.node(ino)?.attr)
    }

    pub fn readlink(&self, ino: Ino) -> Result<Arc<[u8]>, FsError> {
        match self.node(ino)?.content {
            Content::Link(target) => Ok(target),
            _ => Err(FsError::NotLink),
        }
    }

    /// Opens a file (`flags` as open(2) takes them) with a handle that keeps its source open.
    /// `open_backing` makes the kernel's handle on a passthrough backing file, if it is asked.
    pub fn open(
        &self,
        ino: Ino,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<B>,
    ) -> Result<Open<B>, FsError> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(FsError::ReadOnly);
        }
        let node = self.ns.get(ino).ok_or(FsError::Stale(Cause::LeftTree))?;
        if node.attr.kind == Kind::Dir {
            return Err(FsError::IsDir);
        }
        let Some(source) = node.source().cloned() else {
            // Generated bytes: nothing to check or keep open.
            return Ok(self.opened(0, false));
        };
        if refused(&source) {
            return Err(FsError::Io(Cause::Mismatch(source.path.clone())));
        }
        let mirror = matches!(node.content, Content::Mirror { .. });
        let checked = self.check(&source, mirror);
        if self.stale(ino, checked.moved) {
            return Err(FsError::Stale(if checked.moved {
                Cause::Moved(source.path.clone())
            } else {
                Cause::LeftTree
            }));
        }
        // The bytes behind an inode never change: the kernel's page cache is kept across opens.
        self.open_file(ino, &source, mirror, checked, open_backing)
    }

    /// An open served by the daemon (a file, or with `dir` a directory), in the mount's cache mode.
    fn opened(&self, fh: u64, dir: bool) -> Open<B> {
        Open {
            fh,
            keep_cache: self.tuning.keep_cache,
            cache_dir: self.tuning.keep_cache && dir,
            direct_io: !dir && self.direct_io_ok.load(Ordering::Relaxed),
            backing: None,
        }
    }

    /// An open of a file of `source` that the daemon serves: its page cache is kept across opens
    /// only once `settled` (see [`TensorFs::settled`]), and only a local source's files use
    /// direct I/O (see [`Open::direct_io`]).
    fn served(&self, fh: u64, source: &Source, settled: bool) -> Open<B> {
        let mut open = self.opened(fh, false);
        open.keep_cache &= settled;
        open.direct_io &= !source.remote;
        open
    }

    /// Whether an open of `ino` must be refused as stale: it left the tree, or its source now holds
    /// another version (`moved`, then the tree is brought up to date first). The kernel answers
    /// ESTALE from an open by looking the path up again, which finds the new inode.
    fn stale(&self, ino: Ino, moved: bool) -> bool {
        let Some(live) = &self.live else {
            return false;
        };
        let snapshot = self.ns.current();
        if snapshot.node(ino).is_none() {
            return true;
        }
        if !moved {
            return false;
        }
        let dir = snapshot.real_dir_of(ino);
        drop(snapshot);
        live.refresh.rescan(dir);
        !self.ns.is_current(ino)
    }

    /// What an open needs from the backend: whether the source moved (when the mount follows it),
    /// and the source open, so that the handle keeps reading this version whatever happens to the
    /// path later (for a mirrored file, which may use passthrough, also checked intact). Done here
    /// for a local source; for one that may stall, on the pool within [`CHECK_WAIT`], after which
    /// the open is answered from memory (unchecked, without passthrough).
    fn check(&self, source: &Arc<Source>, mirror: bool) -> Checked {
        let follow = self.live.is_some();
        let work = {
            let source = source.clone();
            move || Checked {
                moved: follow && source.moved(),
                opened: source
                    .opened()
                    .ok()
                    .filter(|o| !mirror || source.intact(o, source.len())),
                answered: true,
            }
        };
        if !source.remote {
            return work();
        }
        // While a check on this device has not answered, the next opens do not wait at all.
        let dev = source.version.id.dev;
        self.pool
            .within_unless_stalled(dev, CHECK_WAIT, work)
            .unwrap_or_else(|| {
                debug!(
                    "{}: its device did not answer within {CHECK_WAIT:?}: opened unchecked",
                    source.path.display()
                );
                Checked {
                    moved: false,
                    opened: None,
                    answered: false,
                }
            })
    }

    /// A handle that keeps `source` open. The kernel wants every open of one inode in the same
    /// mode, passthrough or page cache (mixing them fails the open with EIO), so the first open of
    /// a mirrored file decides its mode until its last handle is released.
    fn open_file(
        &self,
        ino: Ino,
        source: &Arc<Source>,
        mirror: bool,
        checked: Checked,
        open_backing: impl FnOnce(&File) -> io::Result<B>,
    ) -> Result<Open<B>, FsError> {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let hold = source.hold();
        let settled = self.settled(source);
        if !mirror {
            self.lock_handles().insert(fh, (ino, hold));
            return Ok(self.served(fh, source, settled));
        }
        let mut backing = self.backing.lock().unwrap_or_else(PoisonError::into_inner);
        let mode = backing.entry(ino).or_insert_with(|| Mode {
            handles: 0,
            backing: self
                .backing_file(
                    ino,
                    checked.opened.as_deref().filter(|_| settled),
                    open_backing,
                )
                .map(Arc::new),
        });
        mode.handles += 1;
        let usable = checked.opened.is_some() || !checked.answered;
        let open = match mode.backing.clone() {
            // The kernel refuses passthrough combined with caching flags (the page cache is the
            // source's).
            Some(id) if usable => Open {
                fh,
                keep_cache: false,
                cache_dir: false,
                direct_io: false,
                backing: Some(id),
            },
            // Passthrough reads never reach the daemon, so a source changed in place can only be
            // refused here.
            Some(_) => {
                mode.handles -= 1;
                if mode.handles == 0 {
                    backing.remove(&ino);
                }
                let e = ReadError::changed(&source.path, "changed in place since it was found");
                return Err(changed(self.live.is_some(), Cause::Read(e)));
            }
            None => self.served(fh, source, settled),
        };
        drop(backing);
        self.lock_handles().insert(fh, (ino, hold));
        Ok(open)
    }

    fn lock_handles(&self) -> MutexGuard<'_, HashMap<u64, (Ino, Hold)>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A passthrough backing file for a mirrored file, if the kernel and privileges allow it and
    /// the source is open and unchanged.
    fn backing_file(
        &self,
        ino: Ino,
        opened: Option<&Opened>,
        open_backing: impl FnOnce(&File) -> io::Result<B>,
    ) -> Option<B> {
        if !self.passthrough_ok.load(Ordering::Relaxed) {
            return None;
        }
        match open_backing(opened?.file()) {
            Ok(id) => Some(id),
            Err(err) => {
                // EPERM without CAP_SYS_ADMIN, ENOTTY/EOPNOTSUPP on old kernels, EINVAL for a
                // source on a stacked filesystem: the daemon serves the file instead.
                debug!("passthrough refused for inode {ino}: {err}");
                let hopeless = [libc::EPERM, libc::ENOTTY, libc::EOPNOTSUPP];
                if err.raw_os_error().is_some_and(|c| hopeless.contains(&c)) {
                    self.passthrough_ok.store(false, Ordering::Relaxed);
                }
                None
            }
        }
    }

    pub fn release(&self, ino: Ino, fh: u64) {
        let released = self.lock_handles().remove(&fh);
        if released.is_some() {
            let mut backing = self.backing.lock().unwrap_or_else(PoisonError::into_inner);
            if let Entry::Occupied(mut e) = backing.entry(ino) {
                e.get_mut().handles -= 1;
                if e.get().handles == 0 {
                    e.remove();
                }
            }
        }
        // The last use of a replaced source may close it: not under the locks.
        drop(released);
    }

    /// Where `lseek(offset, whence)` lands for `SEEK_DATA` and `SEEK_HOLE` (the kernel answers the
    /// others itself): every file is data from start to end, with its one hole at the end. ENXIO
    /// at or past the end, as on any filesystem.
    pub fn lseek(&self, ino: Ino, offset: i64, whence: i32) -> Result<i64, FsError> {
        let size = i64::try_from(self.node(ino)?.attr.size).unwrap_or(i64::MAX);
        if !(0..size).contains(&offset) {
            return Err(FsError::PastEnd);
        }
        Ok(if whence == libc::SEEK_HOLE {
            size
        } else {
            offset
        })
    }

    /// Opens a directory for listing: its listing is the snapshot of now, kept until released.
    pub fn opendir(&self, ino: Ino) -> Result<Open<B>, FsError> {
        let before = self.ns.current();
        let Some(node) = before.node(ino) else {
            // A directory that left the tree lists nothing new: serve what the kernel holds.
            return match self.ns.get(ino) {
                Some(n) if n.attr.kind == Kind::Dir => Ok(Open {
                    fh: 0,
                    keep_cache: false,
                    cache_dir: false,
                    direct_io: false,
                    backing: None,
                }),
                _ => Err(FsError::NotDir),
            };
        };
        if node.attr.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let mut open = self.opened(0, true);
        if let Some(live) = &self.live {
            let dir = before.real_dir_of(ino);
            drop(before);
            if live.refresh.revalidate(dir) {
                // Just changed: the kernel's cached listing may predate it.
                open.keep_cache = false;
            }
        }
        open.fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.lock_dirs().insert(open.fh, self.ns.current());
        Ok(open)
    }

    pub fn releasedir(&self, fh: u64) {
        let dropped = self.lock_dirs().remove(&fh);
        drop(dropped);
    }

    fn lock_dirs(&self) -> MutexGuard<'_, HashMap<u64, Arc<Snapshot>>> {
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The snapshot an open directory lists.
    fn listing(&self, fh: u64) -> Arc<Snapshot> {
        let dirs = self.lock_dirs();
        match dirs.get(&fh) {
            Some(s) => s.clone(),
            None => {
                drop(dirs);
                self.ns.current()
            }
        }
    }

    /// Lists the directory `ino` (open as `fh`) from the entry at `offset` (`.` is 0, `..` 1):
    /// `add` gets each entry with the offset of the next one, and returns true once the reply is
    /// full. A directory that left the tree lists nothing.
    pub fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(Ino, u64, Kind, &[u8]) -> bool,
    ) -> Result<(), FsError> {
        let snapshot = self.listing(fh);
        let Some(entries) = dir_entries(&snapshot, ino) else {
            return self.no_listing(ino);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let kind = snapshot.node(child).map_or(Kind::File, |n| n.attr.kind);
            if add(child, i as u64 + 1, kind, name) {
                break;
            }
        }
        Ok(())
    }

    /// [`TensorFs::readdir`] with each entry's attributes (READDIRPLUS); each entry but `.` and
    /// `..` counts as a lookup the kernel holds.
    pub fn readdirplus(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(Ino, u64, &[u8], &Attr) -> bool,
    ) -> Result<(), FsError> {
        let snapshot = self.listing(fh);
        let Some(entries) = dir_entries(&snapshot, ino) else {
            return self.no_listing(ino);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let Some(node) = snapshot.node(child) else {
                continue;
            };
            if add(child, i as u64 + 1, name, &node.attr) {
                break;
            }
            if i >= 2 {
                self.remember(ino, name, child, node);
            }
        }
        Ok(())
    }

    /// A listing of `ino` where the snapshot has none: a directory that left the tree lists
    /// nothing; anything else is not a directory.
    fn no_listing(&self, ino: Ino) -> Result<(), FsError> {
        match self.ns.get(ino) {
            Some(n) if n.attr.kind == Kind::Dir => Ok(()),
            _ => Err(FsError::NotDir),
        }
    }

    pub fn statfs(&self) -> StatFs {
        let snapshot = self.ns.current();
        StatFs {
            blocks: snapshot.source_bytes().div_ceil(u64::from(STATFS_BSIZE)),
            files: snapshot.node_count(),
        }
    }
}

/// The error for a read whose source changed under this version: the handle is stale when the
/// mount follows its source (`follow`: a new open sees the new version), EIO when it is frozen.
fn changed(follow: bool, cause: Cause) -> FsError {
    if follow {
        FsError::Stale(cause)
    } else {
        FsError::Io(cause)
    }
}

/// Whether the bytes of `source` are refused: `-o verify` found them not to be the recorded ones.
fn refused(source: &Source) -> bool {
    source.verdict() == Some(Verdict::Mismatch)
}

/// `.`, `..` and the children of a directory, in listing order.
fn dir_entries(snapshot: &Snapshot, ino: Ino) -> Option<impl Iterator<Item = (Ino, &[u8])>> {
    let children = snapshot.children(ino)?;
    let parent = snapshot.node(ino)?.parent;
    let dots = [(ino, &b"."[..]), (parent, &b".."[..])];
    let named = children
        .iter()
        .filter_map(|&c| Some((c, &snapshot.node(c)?.name[..])));
    Some(dots.into_iter().chain(named))
}

mod error;
pub(crate) mod integrity;
pub(crate) mod pool;
pub mod read;
#[cfg(test)]
mod tests;
pub(crate) mod tuning;
pub mod xattrs;

pub use error::{Cause, FsError};
