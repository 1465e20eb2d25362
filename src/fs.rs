//! The FUSE adapter: translates kernel requests into lookups in the current [`Snapshot`] (or in
//! the entries the kernel still holds) and byte ranges of their sources, asks the refresh thread
//! to look again where a request finds the tree out of date, and counts the lookups the kernel
//! holds. Nothing here decides what the tree holds.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

use log::debug;

use crate::invalidate::Notice;
use crate::namespace::{
    Attr, Content, Hold, Ino, Kind, Namespace, Node, Opened, ROOT, ReadError, Reading, Removed,
    Snapshot, Source,
};
use crate::pool::Pool;
use crate::refresh;

/// Entry and attribute timeouts. The bytes behind an inode never change, and a changed source
/// gives new inodes whose old names the refresh invalidates, so the kernel may cache for long.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// `st_blksize`: large, so that tools which size their reads by it make few requests.
const BLKSIZE: u32 = 1 << 20;

const STATFS_BSIZE: u32 = 4096;

/// Threads that serve reads which may wait on storage, and how many more reads may wait for one.
const READ_THREADS: usize = 16;
const READ_QUEUE: usize = 4096;

/// How long an open waits for the check of a source that may stall (network or FUSE) before it is
/// answered from memory.
const CHECK_WAIT: Duration = Duration::from_millis(300);

/// The root's extended attributes about the refresh.
const XATTR_GENERATION: &str = "user.tensormount.refresh_generation";
const XATTR_MODE: &str = "user.tensormount.refresh_mode";

/// How tensormount talks to the kernel. [`Tuning::default`] is what it uses; [`Tuning::baseline`]
/// (environment `TENSORMOUNT_TUNING=baseline`) is fuser's defaults with one thread, so that the
/// benchmark can show what each setting brings.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// FUSE worker threads (each with its own /dev/fuse descriptor).
    pub threads: usize,
    /// Keep the kernel's page cache of a file and of directory listings across opens.
    pub keep_cache: bool,
    /// Answer directory listings with attributes (READDIRPLUS).
    pub readdirplus: bool,
    /// Let the kernel read mirrored whole files straight from their source (FUSE passthrough,
    /// Linux 6.9+, needs CAP_SYS_ADMIN); tensors cannot use it, as it maps offsets 1:1.
    pub passthrough: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            threads: 2,
            keep_cache: true,
            readdirplus: true,
            passthrough: true,
        }
    }
}

impl Tuning {
    pub fn baseline() -> Tuning {
        Tuning {
            threads: 1,
            keep_cache: false,
            readdirplus: false,
            passthrough: false,
        }
    }

    /// The tuning chosen by the environment.
    pub fn from_env() -> Tuning {
        match std::env::var("TENSORMOUNT_TUNING").as_deref() {
            Ok("baseline") => Tuning::baseline(),
            _ => Tuning::default(),
        }
    }
}

/// How the adapter reaches the refresh machinery, when the mount follows its source.
#[derive(Debug, Clone)]
pub struct Live {
    pub refresh: refresh::Handle,
    pub invalidate: Sender<Notice>,
}

pub struct TensorFs {
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
    backing: Mutex<HashMap<Ino, (usize, Option<BackingId>)>>,
    /// Serves reads that may wait on storage, and checks of sources that may stall.
    pool: Pool,
    /// Cleared once the kernel refuses a backing file for want of privilege or support.
    passthrough_ok: AtomicBool,
    /// The snapshot each open directory lists, so that a listing never skips or repeats an entry
    /// while the directory changes.
    dirs: Mutex<HashMap<u64, Arc<Snapshot>>>,
    next_fh: AtomicU64,
}

impl TensorFs {
    pub fn new(ns: Arc<Namespace>, live: Option<Live>, tuning: Tuning) -> TensorFs {
        TensorFs {
            ns,
            live,
            tuning,
            handles: Mutex::new(HashMap::new()),
            backing: Mutex::new(HashMap::new()),
            pool: Pool::new(READ_THREADS, READ_QUEUE),
            passthrough_ok: AtomicBool::new(tuning.passthrough),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn open_flags(&self, dir: bool) -> FopenFlags {
        match (self.tuning.keep_cache, dir) {
            (false, _) => FopenFlags::empty(),
            (true, false) => FopenFlags::FOPEN_KEEP_CACHE,
            (true, true) => FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        }
    }

    /// Counts a reply naming `ino` (found in `snapshot` as `name` in `parent`). If it has just
    /// left the tree, the kernel is told to forget that name again.
    fn remember(&self, parent: Ino, name: &[u8], ino: Ino, node: &Node) {
        if !self.ns.remember(ino, node)
            && let Some(live) = &self.live
        {
            let _ = live.invalidate.send(Notice::Stale(Removed {
                parent,
                name: name.into(),
                ino,
            }));
        }
    }

    /// The error for a read whose source changed under this version: the handle is stale when
    /// the mount follows its source (a new open sees the new version), EIO when it is frozen.
    fn changed_errno(&self) -> Errno {
        if self.live.is_some() {
            Errno::ESTALE
        } else {
            Errno::EIO
        }
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

    /// Opens a file with a handle that keeps its source open. The kernel wants every open of one
    /// inode in the same mode, passthrough or page cache (mixing them fails the open with EIO), so
    /// the first open of a mirrored file decides its mode until its last handle is released.
    fn open_file(
        &self,
        ino: Ino,
        source: &Arc<Source>,
        mirror: bool,
        checked: Checked,
        reply: ReplyOpen,
    ) {
        let flags = self.open_flags(false);
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let hold = source.hold();
        if !mirror {
            self.lock_handles().insert(fh, (ino, hold));
            return reply.opened(FileHandle(fh), flags);
        }
        let mut backing = self.backing.lock().unwrap_or_else(PoisonError::into_inner);
        let (count, mode) = backing
            .entry(ino)
            .or_insert_with(|| (0, self.open_backing(ino, checked.opened.as_deref(), &reply)));
        *count += 1;
        let usable = checked.opened.is_some() || !checked.answered;
        let passthrough = mode.as_ref().map(|id| (id, usable));
        match passthrough {
            // The kernel refuses passthrough combined with caching flags (the page cache is the
            // source's).
            Some((id, true)) => reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), id),
            // Passthrough reads never reach the daemon, so a source changed in place can only be
            // refused here.
            Some((_, false)) => {
                *count -= 1;
                if *count == 0 {
                    backing.remove(&ino);
                }
                return reply.error(self.changed_errno());
            }
            None => reply.opened(FileHandle(fh), flags),
        }
        drop(backing);
        self.lock_handles().insert(fh, (ino, hold));
    }

    fn lock_handles(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Ino, Hold)>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A passthrough backing file for a mirrored file, if the kernel and privileges allow it and
    /// the source is open and unchanged.
    fn open_backing(
        &self,
        ino: Ino,
        opened: Option<&Opened>,
        reply: &ReplyOpen,
    ) -> Option<BackingId> {
        if !self.passthrough_ok.load(Ordering::Relaxed) {
            return None;
        }
        match reply.open_backing(&opened?.file) {
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

    /// The kernel forgot `n` lookups of `ino`.
    fn forget_one(&self, ino: Ino, n: u64) {
        self.ns.forget(ino, n);
    }

    /// The snapshot an open directory lists.
    fn listing(&self, fh: FileHandle) -> Arc<Snapshot> {
        let dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        match dirs.get(&fh.0) {
            Some(s) => s.clone(),
            None => {
                drop(dirs);
                self.ns.current()
            }
        }
    }

    /// A listing of `ino` where the snapshot has none: a directory that left the tree lists
    /// nothing; anything else is not a directory.
    fn no_listing(&self, ino: Ino, reply: impl EmptyListing) {
        if self.ns.get(ino).is_some_and(|n| n.attr.kind == Kind::Dir) {
            reply.empty();
        } else {
            reply.not_dir();
        }
    }

    /// The root's own extended attributes: the refresh generation and mode.
    fn root_xattr(&self, name: &[u8]) -> Option<Vec<u8>> {
        let value = match name {
            n if n == XATTR_GENERATION.as_bytes() => self.ns.applied().to_string(),
            n if n == XATTR_MODE.as_bytes() => match &self.live {
                Some(live) => live.refresh.mode().to_string(),
                None => "off".to_string(),
            },
            _ => return None,
        };
        Some(value.into_bytes())
    }
}

/// What an open found out from the backend (see [`TensorFs::check`]).
struct Checked {
    moved: bool,
    /// The source open, if it still holds this version (and for a mirrored file, all of it).
    opened: Option<Arc<Opened>>,
    /// False where the backend did not answer in time.
    answered: bool,
}

/// Replies to a read with the bytes that `send` passes on, or with its error. Gives the reply back
/// if `send` sent nothing and returned `None`.
fn serve(
    reply: ReplyData,
    changed: Errno,
    send: impl FnOnce(&mut dyn FnMut(&[u8])) -> Option<Result<(), ReadError>>,
) -> Option<ReplyData> {
    let mut reply = Some(reply);
    let sent = send(&mut |bytes| {
        if let Some(r) = reply.take() {
            r.data(bytes);
        }
    });
    match (sent, reply) {
        (Some(Err(e)), Some(r)) => r.error(read_errno(e, changed)),
        (None, reply) => return reply,
        _ => {}
    }
    None
}

fn read_errno(e: ReadError, changed: Errno) -> Errno {
    match e {
        ReadError::NotFound => Errno::ENOENT,
        ReadError::IsDir => Errno::EISDIR,
        ReadError::SourceChanged => changed,
        ReadError::Io => Errno::EIO,
    }
}

fn file_attr(ino: Ino, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: BLKSIZE,
        flags: 0,
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

/// Answers the xattr protocol: the size probe (size 0), ERANGE for a short buffer, else the bytes.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl Filesystem for TensorFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // List directories with their attributes in one pass where the kernel wants them (`ls -l`).
        if self.tuning.readdirplus {
            let _ = config.add_capabilities(
                InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            );
        }
        // Lookups and listings work on immutable snapshots: the kernel need not serialise those
        // of one directory (a lookup waiting on a slow source would hold up the others).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        if self.tuning.passthrough {
            // Depth 1: backing files may not themselves be on a stacked filesystem.
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            self.passthrough_ok.store(ok, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (parent, name) = (parent.0, name.as_bytes());
        let mut looked_again = false;
        loop {
            let snapshot = self.ns.current();
            if let Some(ino) = snapshot.lookup(parent, name)
                && let Some(node) = snapshot.node(ino)
            {
                self.remember(parent, name, ino, node);
                return reply.entry(&TTL, &file_attr(ino, &node.attr), Generation(0));
            }
            if snapshot.children(parent).is_none() {
                // Not a directory, or one that left the tree (nothing new appears in it).
                let dir = self
                    .ns
                    .get(parent)
                    .is_some_and(|n| n.attr.kind == Kind::Dir);
                return reply.error(if dir { Errno::ENOENT } else { Errno::ENOTDIR });
            }
            // A miss: the source directory may have gained that name since it was last read.
            match &self.live {
                Some(live) if !looked_again => {
                    looked_again = true;
                    let dir = snapshot.real_dir_of(parent);
                    drop(snapshot);
                    live.refresh.revalidate(dir);
                }
                _ => return reply.error(Errno::ENOENT),
            }
        }
    }

    // fuser's default `batch_forget` calls this for each inode.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_one(ino.0, nlookup);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.ns.get(ino.0).map(|n| n.content) {
            Some(Content::Link(target)) => reply.data(&target),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.ns.get(ino.0) {
            Some(node) => reply.attr(&TTL, &file_attr(ino.0, &node.attr)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let Some(node) = self.ns.get(ino.0) else {
            return reply.error(Errno::ESTALE);
        };
        if node.attr.kind == Kind::Dir {
            return reply.error(Errno::EISDIR);
        }
        let Some(source) = node.source().cloned() else {
            // Generated bytes: nothing to check or keep open.
            return reply.opened(FileHandle(0), self.open_flags(false));
        };
        let mirror = matches!(node.content, Content::Mirror { .. });
        let checked = self.check(&source, mirror);
        if self.stale(ino.0, checked.moved) {
            return reply.error(Errno::ESTALE);
        }
        // The bytes behind an inode never change: the kernel's page cache is kept across opens.
        self.open_file(ino.0, &source, mirror, checked, reply);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let released = self.lock_handles().remove(&fh.0);
        if released.is_some() {
            let mut backing = self.backing.lock().unwrap_or_else(PoisonError::into_inner);
            if let Entry::Occupied(mut e) = backing.entry(ino.0) {
                e.get_mut().0 -= 1;
                if e.get().0 == 0 {
                    e.remove();
                }
            }
        }
        drop(released);
        reply.ok();
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let Some(node) = self.ns.get(ino.0) else {
            return reply.error(Errno::ESTALE);
        };
        match node.read(offset, size) {
            Ok(Reading::Bytes(bytes)) => reply.data(bytes),
            Ok(Reading::Source {
                source,
                head,
                start,
                len,
            }) => {
                let changed = self.changed_errno();
                // Bytes in the page cache of a local source are sent from this thread; anything
                // that may wait on storage goes to the pool.
                let reply = if head.is_empty() {
                    match serve(reply, changed, |send| source.send_cached(start, len, send)) {
                        Some(reply) => reply,
                        None => return,
                    }
                } else {
                    reply
                };
                let source = source.clone();
                self.pool.submit(move |run| {
                    if run {
                        serve(reply, changed, |send| {
                            Some(source.send(&head, start, len, send))
                        });
                    } else {
                        reply.error(Errno::EIO);
                    }
                });
            }
            // As above: stored bytes in the page cache are widened on this thread.
            Ok(Reading::Widened {
                source,
                head,
                widening,
                start,
                offset,
                len,
            }) => {
                let changed = self.changed_errno();
                let reply = if head.is_empty() {
                    let cached = |send: &mut dyn FnMut(&[u8])| {
                        source.send_widened_cached(widening, start, offset, len, send)
                    };
                    match serve(reply, changed, cached) {
                        Some(reply) => reply,
                        None => return,
                    }
                } else {
                    reply
                };
                let source = source.clone();
                self.pool.submit(move |run| {
                    if run {
                        serve(reply, changed, |send| {
                            Some(source.send_widened(&head, widening, start, offset, len, send))
                        });
                    } else {
                        reply.error(Errno::EIO);
                    }
                });
            }
            Err(e) => reply.error(read_errno(e, self.changed_errno())),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let before = self.ns.current();
        let Some(node) = before.node(ino.0) else {
            // A directory that left the tree lists nothing new: serve what the kernel holds.
            return match self.ns.get(ino.0) {
                Some(n) if n.attr.kind == Kind::Dir => {
                    reply.opened(FileHandle(0), FopenFlags::empty())
                }
                _ => reply.error(Errno::ENOTDIR),
            };
        };
        if node.attr.kind != Kind::Dir {
            return reply.error(Errno::ENOTDIR);
        }
        let mut flags = self.open_flags(true);
        if let Some(live) = &self.live {
            let dir = before.real_dir_of(ino.0);
            drop(before);
            if live.refresh.revalidate(dir) {
                // Just changed: the kernel's cached listing may predate it.
                flags.remove(FopenFlags::FOPEN_KEEP_CACHE);
            }
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, self.ns.current());
        reply.opened(FileHandle(fh), flags)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let dropped = self
            .dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh.0);
        drop(dropped);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let snapshot = self.listing(fh);
        let Some(entries) = dir_entries(&snapshot, ino.0) else {
            return self.no_listing(ino.0, reply);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let kind = file_type(snapshot.node(child).map_or(Kind::File, |n| n.attr.kind));
            if reply.add(INodeNo(child), i as u64 + 1, kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let snapshot = self.listing(fh);
        let Some(entries) = dir_entries(&snapshot, ino.0) else {
            return self.no_listing(ino.0, reply);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let Some(node) = snapshot.node(child) else {
                continue;
            };
            let full = reply.add(
                INodeNo(child),
                i as u64 + 1,
                OsStr::from_bytes(name),
                &TTL,
                &file_attr(child, &node.attr),
                Generation(0),
            );
            if full {
                break;
            }
            // The kernel counts a lookup for every entry but `.` and `..`.
            if i >= 2 {
                self.remember(ino.0, name, child, node);
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // A read-only image: the size of the sources, nothing free.
        let snapshot = self.ns.current();
        let blocks = snapshot.source_bytes().div_ceil(u64::from(STATFS_BSIZE));
        let files = snapshot.node_count();
        reply.statfs(
            blocks,
            0,
            0,
            files,
            0,
            STATFS_BSIZE,
            crate::names::NAME_MAX as u32,
            STATFS_BSIZE,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(node) = self.ns.get(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let name = name.as_bytes();
        if !name.starts_with(b"user.") {
            // Namespaces this filesystem does not serve (security., system., trusted.). Never
            // ENOSYS: the kernel would then switch off every xattr of the mount.
            return reply.error(Errno::EOPNOTSUPP);
        }
        let value = match ino.0 {
            ROOT => self.root_xattr(name),
            _ => None,
        }
        .or_else(|| std::str::from_utf8(name).ok().and_then(|n| node.xattr(n)));
        match value {
            Some(v) => reply_xattr(reply, size, &v),
            None => reply.error(Errno::NO_XATTR),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let Some(node) = self.ns.get(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let mut list = Vec::new();
        let own = (ino.0 == ROOT).then_some([XATTR_GENERATION, XATTR_MODE]);
        for name in node
            .xattr_names()
            .iter()
            .map(String::as_str)
            .chain(own.into_iter().flatten())
        {
            list.extend_from_slice(name.as_bytes());
            list.push(0);
        }
        reply_xattr(reply, size, &list);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    // Everything that would modify the tree. The mount is read-only (MS_RDONLY), so the VFS refuses
    // these first; the answers below cover a `mount -o remount,rw`.

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }
}

/// The two listing replies, answered alike where there is nothing to list.
trait EmptyListing {
    fn empty(self);
    fn not_dir(self);
}

impl EmptyListing for ReplyDirectory {
    fn empty(self) {
        self.ok()
    }
    fn not_dir(self) {
        self.error(Errno::ENOTDIR)
    }
}

impl EmptyListing for ReplyDirectoryPlus {
    fn empty(self) {
        self.ok()
    }
    fn not_dir(self) {
        self.error(Errno::ENOTDIR)
    }
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
