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

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use log::debug;

use crate::fs::integrity::{Activity, TensorDigests};
use crate::fs::pool::Pool;
use crate::fs::tuning::Tuning;
use crate::namespace::{Attr, Content, Ino, Kind, Namespace, Node, Removed, Snapshot};
use crate::refresh;
use crate::refresh::invalidate::{Invalidator, Notice};
use crate::source::{Opened, ReadError, Source, Verdict};
use handles::{Handles, Mode};

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
    /// The files and directories open by clients.
    handles: Handles<B>,
    /// Serves reads that may wait on storage, and checks of sources that may stall.
    pool: Pool,
    /// Cleared once the kernel refuses a backing file for want of privilege or support.
    passthrough_ok: AtomicBool,
    /// Set at FUSE INIT where direct I/O is asked for and the kernel lets such files be mapped.
    direct_io_ok: AtomicBool,
    /// Tensor files' digests, computed when asked.
    digests: Arc<TensorDigests>,
    /// `-o verify`: files whose digest SOURCE records are not passed through to the kernel, nor
    /// cached across opens, until hashed (a mismatch must reach every read); and when files were
    /// last read, which the verifier yields to.
    verify: Option<Arc<Activity>>,
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
            handles: Handles::new(),
            pool: Pool::new(READ_THREADS, READ_QUEUE),
            passthrough_ok: AtomicBool::new(tuning.passthrough),
            direct_io_ok: AtomicBool::new(false),
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
        open.fh = self.handles.next();
        self.handles.opened_dir(open.fh, self.ns.current());
        Ok(open)
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.release_dir(fh);
    }

    /// Walks the listing of the directory `ino` (open as `fh`, else as it is now) from the entry at
    /// `offset` (`.` is 0, `..` 1): `each` gets each entry's place, inode, name and node, and
    /// returns true once the reply is full. A directory that left the tree lists nothing.
    fn list(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        mut each: impl FnMut(usize, Ino, &[u8], Option<&Node>) -> bool,
    ) -> Result<(), FsError> {
        let snapshot = self
            .handles
            .listing(fh)
            .unwrap_or_else(|| self.ns.current());
        let Some(entries) = dir_entries(&snapshot, ino) else {
            return self.no_listing(ino);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            if each(i, child, name, snapshot.node(child)) {
                break;
            }
        }
        Ok(())
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
        self.list(ino, fh, offset, |i, child, name, node| {
            let kind = node.map_or(Kind::File, |n| n.attr.kind);
            add(child, i as u64 + 1, kind, name)
        })
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
        self.list(ino, fh, offset, |i, child, name, node| {
            let Some(node) = node else {
                return false;
            };
            if add(child, i as u64 + 1, name, &node.attr) {
                return true;
            }
            if i >= 2 {
                self.remember(ino, name, child, node);
            }
            false
        })
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
mod handles;
pub(crate) mod integrity;
mod open;
pub(crate) mod pool;
pub mod read;
#[cfg(test)]
mod tests;
pub(crate) mod tuning;
pub mod xattrs;

pub use error::{Cause, FsError};
