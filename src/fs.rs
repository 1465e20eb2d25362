//! The FUSE adapter: translates kernel requests into lookups in the immutable [`Tree`] and byte
//! ranges of its sources. Nothing here decides what the tree holds.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

use log::debug;

use crate::namespace::{Attr, Ino, Kind, ReadError, Tree};

/// Nothing under a mount ever changes, so the kernel may cache names and attributes for long.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// `st_blksize`: large, so that tools which size their reads by it make few requests.
const BLKSIZE: u32 = 1 << 20;

const STATFS_BSIZE: u32 = 4096;

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

pub struct TensorFs {
    tree: Tree,
    tuning: Tuning,
    /// The mode of each mirrored file opened so far: its passthrough backing file (kept for the
    /// life of the mount; the kernel wants the same one for every open), or `None` for the page
    /// cache, served by the daemon.
    backing: Mutex<HashMap<Ino, Option<BackingId>>>,
    /// Cleared once the kernel refuses a backing file for want of privilege or support.
    passthrough_ok: AtomicBool,
}

impl TensorFs {
    pub fn new(tree: Tree, tuning: Tuning) -> TensorFs {
        TensorFs {
            tree,
            tuning,
            backing: Mutex::new(HashMap::new()),
            passthrough_ok: AtomicBool::new(tuning.passthrough),
        }
    }

    fn open_flags(&self, dir: bool) -> FopenFlags {
        match (self.tuning.keep_cache, dir) {
            (false, _) => FopenFlags::empty(),
            (true, false) => FopenFlags::FOPEN_KEEP_CACHE,
            (true, true) => FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        }
    }

    fn attr(&self, ino: Ino) -> Option<FileAttr> {
        Some(file_attr(ino, &self.tree.node(ino)?.attr))
    }

    /// Opens a file. The kernel wants every open of one inode in the same mode, passthrough or
    /// page cache (mixing them fails the open with EIO), so the first open of each mirrored file
    /// decides its mode for the life of the mount.
    fn open_file(&self, ino: Ino, reply: ReplyOpen) {
        let flags = self.open_flags(false);
        if self.tree.mirror_file(ino).is_none() {
            return reply.opened(FileHandle(0), flags);
        }
        let Ok(mut backing) = self.backing.lock() else {
            return reply.error(Errno::EIO);
        };
        let mode = match backing.entry(ino) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.open_backing(ino, &reply)),
        };
        match mode {
            // The kernel refuses passthrough combined with caching flags (the page cache is the
            // source's).
            Some(id) if self.tree.mirror_intact(ino) => {
                reply.opened_passthrough(FileHandle(0), FopenFlags::empty(), id)
            }
            // Passthrough reads never reach the daemon, so a source changed since the mount can
            // only be refused here.
            Some(_) => reply.error(Errno::EIO),
            None => reply.opened(FileHandle(0), flags),
        }
    }

    /// A passthrough backing file for a mirrored file, if the kernel and privileges allow it and
    /// the source is unchanged.
    fn open_backing(&self, ino: Ino, reply: &ReplyOpen) -> Option<BackingId> {
        if !self.passthrough_ok.load(Ordering::Relaxed) || !self.tree.mirror_intact(ino) {
            return None;
        }
        match reply.open_backing(self.tree.mirror_file(ino)?) {
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
        if self.tuning.passthrough {
            // Depth 1: backing files may not themselves be on a stacked filesystem.
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            self.passthrough_ok.store(ok, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self
            .tree
            .lookup(parent.0, name.as_bytes())
            .and_then(|ino| self.attr(ino))
        {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None if self.tree.children(parent.0).is_none() => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        match self.tree.node(ino.0).map(|n| n.attr.kind) {
            // The bytes never change: the kernel's page cache is kept across opens.
            Some(Kind::File) => self.open_file(ino.0, reply),
            Some(Kind::Dir) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
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
        // A mapped slice goes straight into the reply's writev: no copy, and no access by the
        // daemon itself.
        match self.tree.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(ReadError::NotFound) => reply.error(Errno::ENOENT),
            Err(ReadError::IsDir) => reply.error(Errno::EISDIR),
            Err(ReadError::SourceChanged | ReadError::Io) => reply.error(Errno::EIO),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.tree.children(ino.0) {
            Some(_) => reply.opened(FileHandle(0), self.open_flags(true)),
            None => reply.error(Errno::ENOTDIR),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = self.dir_entries(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let kind = file_type(self.tree.node(child).map_or(Kind::File, |n| n.attr.kind));
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
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(entries) = self.dir_entries(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let Some(attr) = self.attr(child) else {
                continue;
            };
            if reply.add(
                INodeNo(child),
                i as u64 + 1,
                OsStr::from_bytes(name),
                &TTL,
                &attr,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // A read-only image: the size of the sources, nothing free.
        let blocks = self.tree.source_bytes().div_ceil(u64::from(STATFS_BSIZE));
        let files = self.tree.node_count();
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
        if self.tree.node(ino.0).is_none() {
            return reply.error(Errno::ENOENT);
        }
        let name = name.as_bytes();
        if !name.starts_with(b"user.") {
            // Namespaces this filesystem does not serve (security., system., trusted.). Never
            // ENOSYS: the kernel would then switch off every xattr of the mount.
            return reply.error(Errno::EOPNOTSUPP);
        }
        let value = std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.tree.xattr(ino.0, n));
        match value {
            Some(v) => reply_xattr(reply, size, &v),
            None => reply.error(Errno::NO_XATTR),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if self.tree.node(ino.0).is_none() {
            return reply.error(Errno::ENOENT);
        }
        let mut list = Vec::new();
        for name in self.tree.xattr_names(ino.0) {
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

impl TensorFs {
    /// `.`, `..` and the children of a directory, in listing order.
    fn dir_entries(&self, ino: Ino) -> Option<impl Iterator<Item = (Ino, &[u8])>> {
        let children = self.tree.children(ino)?;
        let parent = self.tree.node(ino)?.parent;
        let dots = [(ino, &b"."[..]), (parent, &b".."[..])];
        let named = children
            .iter()
            .filter_map(|&c| Some((c, &self.tree.node(c)?.name[..])));
        Some(dots.into_iter().chain(named))
    }
}
