//! The fuser adapter: the only code that names fuser's request and reply types. Each request
//! becomes one call of [`TensorFs`], each result one reply; [`errno`] gives every error its errno.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

use crate::fs::{self, FsError, Open, TensorFs};
use crate::names::NAME_MAX;
use crate::namespace::{Attr, Kind};

/// Entry and attribute timeouts. The bytes behind an inode never change, and a changed source
/// gives new inodes whose old names the refresh invalidates, so the kernel may cache for long.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// `st_blksize`: large, so that tools which size their reads by it make few requests.
const BLKSIZE: u32 = 1 << 20;

/// The unit `st_blocks` counts in, whatever the block size.
const BLOCK_UNIT: u64 = 512;

/// The filesystem as fuser serves it.
pub struct Fuse(pub TensorFs<BackingId>);

/// Every error's errno. Exhaustive: a new error must be given one here.
pub fn errno(e: FsError) -> Errno {
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::Stale => Errno::ESTALE,
        FsError::ReadOnly => Errno::EROFS,
        FsError::NotLink => Errno::EINVAL,
        // Never ENOSYS: the kernel would then switch off every xattr of the mount.
        FsError::OtherNamespace => Errno::EOPNOTSUPP,
        FsError::NoAttribute => Errno::NO_XATTR,
        FsError::Io => Errno::EIO,
    }
}

fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.size.div_ceil(BLOCK_UNIT),
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

fn open_flags<B>(open: &Open<B>) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    if open.keep_cache {
        flags |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if open.cache_dir {
        flags |= FopenFlags::FOPEN_CACHE_DIR;
    }
    if open.direct_io {
        flags |= FopenFlags::FOPEN_DIRECT_IO;
    }
    flags
}

/// Answers the xattr protocol: the size probe (size 0), ERANGE for a short buffer, else the bytes.
fn reply_xattr(reply: ReplyXattr, size: u32, value: Result<Vec<u8>, FsError>) {
    match value {
        Err(e) => reply.error(errno(e)),
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
    }
}

/// A GETXATTR's reply, with the size the kernel's buffer has.
struct XattrReply {
    reply: ReplyXattr,
    size: u32,
}

impl fs::xattrs::ReplyValue for XattrReply {
    fn value(self, value: Result<Vec<u8>, FsError>) {
        reply_xattr(self.reply, self.size, value);
    }
}

impl fs::ReplyData for ReplyData {
    fn data(self, bytes: &[u8]) {
        ReplyData::data(self, bytes)
    }

    fn error(self, e: FsError) {
        ReplyData::error(self, errno(e))
    }
}

/// Requests answered the same whatever they ask: `fn name(arguments) -> Reply;` gives the
/// trait's method, answering `ok` or the errno given.
macro_rules! answer {
    ($answer:ident; $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $reply:ty;)*) => {
        $(
            #[allow(clippy::too_many_arguments)]
            fn $name(&self, $($arg: $ty,)* reply: $reply) {
                answer!(@ $answer reply);
            }
        )*
    };
    (@ ok $reply:ident) => { $reply.ok() };
    (@ read_only $reply:ident) => { $reply.error(Errno::EROFS) };
}

impl Filesystem for Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let tuning = self.0.tuning();
        // List directories with their attributes in one pass where the kernel wants them (`ls -l`).
        if tuning.readdirplus {
            let _ = config.add_capabilities(
                InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            );
        }
        // Lookups and listings work on immutable snapshots: the kernel need not serialise those
        // of one directory (a lookup waiting on a slow source would hold up the others).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        if tuning.passthrough {
            // Depth 1: backing files may not themselves be on a stacked filesystem.
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            self.0.set_passthrough(ok);
        }
        // Direct I/O only where a client may still map the file (Linux 6.6+): without this,
        // mmap of a file opened with FOPEN_DIRECT_IO fails with ENODEV.
        if tuning.direct_io {
            let ok = config
                .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
                .is_ok();
            self.0.set_direct_io(ok);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.0.lookup(parent.0, name.as_bytes()) {
            Ok((ino, attr)) => reply.entry(&TTL, &file_attr(ino, &attr), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    // fuser's default `batch_forget` calls this for each inode.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.0.forget(ino.0, nlookup);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.0.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.0.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(ino.0, &attr)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.0.open(ino.0, flags.0, |file| reply.open_backing(file)) {
            Ok(o) => match &o.backing {
                Some(id) => reply.opened_passthrough(FileHandle(o.fh), open_flags(&o), id),
                None => reply.opened(FileHandle(o.fh), open_flags(&o)),
            },
            Err(e) => reply.error(errno(e)),
        }
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
        self.0.release(ino.0, fh.0);
        reply.ok();
    }

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
        self.0.read(ino.0, offset, size, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.0.opendir(ino.0) {
            Ok(o) => reply.opened(FileHandle(o.fh), open_flags(&o)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.0.releasedir(fh.0);
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
        let listed = self
            .0
            .readdir(ino.0, fh.0, offset, |child, next, kind, name| {
                reply.add(
                    INodeNo(child),
                    next,
                    file_type(kind),
                    OsStr::from_bytes(name),
                )
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let listed = self
            .0
            .readdirplus(ino.0, fh.0, offset, |child, next, name, attr| {
                reply.add(
                    INodeNo(child),
                    next,
                    OsStr::from_bytes(name),
                    &TTL,
                    &file_attr(child, attr),
                    Generation(0),
                )
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.0.statfs();
        let bsize = fs::STATFS_BSIZE;
        reply.statfs(s.blocks, 0, 0, s.files, 0, bsize, NAME_MAX as u32, bsize);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let reply = XattrReply { reply, size };
        self.0.getxattr(ino.0, name.as_bytes(), size == 0, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.0.listxattr(ino.0));
    }

    // Nothing to flush or sync in a read-only tree.
    answer! { ok;
        fn flush(_req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: fuser::LockOwner) -> ReplyEmpty;
        fn fsync(_req: &Request, _ino: INodeNo, _fh: FileHandle, _data: bool) -> ReplyEmpty;
        fn fsyncdir(_req: &Request, _ino: INodeNo, _fh: FileHandle, _data: bool) -> ReplyEmpty;
    }

    // Everything that would change the tree. The mount is read-only (MS_RDONLY), so the VFS
    // refuses these first; the answers cover a `mount -o remount,rw`.
    answer! { read_only;
        fn setxattr(_req: &Request, _ino: INodeNo, _name: &OsStr, _value: &[u8],
            _flags: i32, _position: u32) -> ReplyEmpty;
        fn removexattr(_req: &Request, _ino: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn setattr(_req: &Request, _ino: INodeNo, _mode: Option<u32>, _uid: Option<u32>,
            _gid: Option<u32>, _size: Option<u64>, _atime: Option<fuser::TimeOrNow>,
            _mtime: Option<fuser::TimeOrNow>, _ctime: Option<std::time::SystemTime>,
            _fh: Option<FileHandle>, _crtime: Option<std::time::SystemTime>,
            _chgtime: Option<std::time::SystemTime>, _bkuptime: Option<std::time::SystemTime>,
            _flags: Option<fuser::BsdFileFlags>) -> ReplyAttr;
        fn mknod(_req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32,
            _rdev: u32) -> ReplyEntry;
        fn mkdir(_req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32) -> ReplyEntry;
        fn unlink(_req: &Request, _parent: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn rmdir(_req: &Request, _parent: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn symlink(_req: &Request, _parent: INodeNo, _name: &OsStr,
            _target: &std::path::Path) -> ReplyEntry;
        fn rename(_req: &Request, _parent: INodeNo, _name: &OsStr, _newparent: INodeNo,
            _newname: &OsStr, _flags: fuser::RenameFlags) -> ReplyEmpty;
        fn link(_req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr) -> ReplyEntry;
        fn create(_req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32,
            _flags: i32) -> fuser::ReplyCreate;
        fn write(_req: &Request, _ino: INodeNo, _fh: FileHandle, _offset: u64,
            _data: &[u8], _write_flags: fuser::WriteFlags, _flags: OpenFlags,
            _lock_owner: Option<fuser::LockOwner>) -> fuser::ReplyWrite;
        fn fallocate(_req: &Request, _ino: INodeNo, _fh: FileHandle, _offset: u64,
            _length: u64, _mode: i32) -> ReplyEmpty;
    }
}
