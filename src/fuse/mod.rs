//! The fuser adapter: the only code that names fuser's request and reply types. Each request
//! becomes one call of [`TensorFs`], each result one reply; [`errno`] gives every error its errno.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use log::debug;

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

mod failures;
use failures::{Failures, Op};

use crate::base::sys;
use crate::fs::{self, FsError, Open, TensorFs};
use crate::namespace::names::NAME_MAX;
use crate::namespace::{Attr, Kind};

/// Entry and attribute timeouts. The bytes behind an inode never change, and a changed source
/// gives new inodes whose old names the refresh invalidates, so the kernel may cache for long.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Size of the header of a reply (`struct fuse_out_header`).
const OUT_HEADER: usize = 16;

/// `st_blksize`: large, so that tools which size their reads by it make few requests.
const BLKSIZE: u32 = 1 << 20;

/// The unit `st_blocks` counts in, whatever the block size.
const BLOCK_UNIT: u64 = 512;

/// The filesystem as fuser serves it, and the log of its failed requests.
pub struct Fuse {
    pub fs: TensorFs<BackingId>,
    failures: Arc<Failures>,
    /// The session's FUSE device, once mounted: where read replies of several slices go.
    device: Arc<OnceLock<OwnedFd>>,
}

impl Fuse {
    pub fn new(fs: TensorFs<BackingId>) -> Fuse {
        let failures = Arc::new(Failures::new(fs.namespace().clone()));
        Fuse {
            fs,
            failures,
            device: Arc::default(),
        }
    }

    /// Where the session's FUSE device is to be put once mounted (every thread of the session
    /// reads requests from that one descriptor, so a reply may be written there: see
    /// [`fs::read::ReplyData::vectored`]).
    pub fn device(&self) -> Arc<OnceLock<OwnedFd>> {
        self.device.clone()
    }

    /// The errno of a request `op` on `ino` that failed with `e`, which is logged.
    fn fail(&self, op: Op<'_>, ino: INodeNo, e: FsError) -> Errno {
        fail(&self.failures, op, ino.0, e)
    }
}

/// The errno of a failed request, logged on `failures`.
fn fail(failures: &Failures, op: Op<'_>, ino: u64, e: FsError) -> Errno {
    let (errno, name) = errno(&e);
    failures.report(op, ino, &e, name);
    errno
}

/// Every error's errno, and its name. Exhaustive: a new error must be given one here.
pub fn errno(e: &FsError) -> (Errno, &'static str) {
    match e {
        FsError::NotFound => (Errno::ENOENT, "ENOENT"),
        FsError::NotDir => (Errno::ENOTDIR, "ENOTDIR"),
        FsError::IsDir => (Errno::EISDIR, "EISDIR"),
        FsError::Stale(_) => (Errno::ESTALE, "ESTALE"),
        FsError::ReadOnly => (Errno::EROFS, "EROFS"),
        FsError::NotLink => (Errno::EINVAL, "EINVAL"),
        // Never ENOSYS: the kernel would then switch off every xattr of the mount.
        FsError::OtherNamespace => (Errno::EOPNOTSUPP, "EOPNOTSUPP"),
        FsError::NoAttribute => (Errno::NO_XATTR, "ENODATA"),
        FsError::PastEnd => (Errno::ENXIO, "ENXIO"),
        FsError::Io(_) => (Errno::EIO, "EIO"),
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

/// Answers the xattr protocol: the size probe (size 0), ERANGE for a short buffer, else the bytes
/// (a failure is `fail`'s errno).
fn reply_xattr(
    reply: ReplyXattr,
    size: u32,
    value: Result<Vec<u8>, FsError>,
    fail: impl FnOnce(FsError) -> Errno,
) {
    match value {
        Err(e) => reply.error(fail(e)),
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
    }
}

/// A GETXATTR's reply, with the size the kernel's buffer has, and what to log if it fails.
struct XattrReply {
    reply: ReplyXattr,
    size: u32,
    ino: u64,
    name: Vec<u8>,
    failures: Arc<Failures>,
}

impl fs::xattrs::ReplyValue for XattrReply {
    fn value(self, value: Result<Vec<u8>, FsError>) {
        let (ino, name, failures) = (self.ino, self.name, self.failures);
        reply_xattr(self.reply, self.size, value, |e| {
            fail(&failures, Op::Getxattr(&name), ino, e)
        });
    }
}

/// A READ's reply, with what to log if it fails.
struct ReadReply {
    reply: ReplyData,
    unique: u64,
    device: Arc<OnceLock<OwnedFd>>,
    ino: u64,
    offset: u64,
    size: u32,
    failures: Arc<Failures>,
}

impl fs::read::ReplyData for ReadReply {
    fn data(self, bytes: &[u8]) {
        self.reply.data(bytes)
    }

    fn vectored(self, bufs: &[io::IoSlice<'_>]) -> Result<(), Self> {
        let Some(device) = self.device.get().filter(|_| bufs.len() < sys::IOV_MAX) else {
            return Err(self);
        };
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let Ok(total) = u32::try_from(OUT_HEADER + len) else {
            return Err(self);
        };
        // fuse_out_header: the message's length, no error, the request it answers.
        let mut header = [0u8; OUT_HEADER];
        header[..4].copy_from_slice(&total.to_ne_bytes());
        header[8..].copy_from_slice(&self.unique.to_ne_bytes());
        match sys::write_message(device.as_fd(), &header, bufs) {
            // Sent; or ENOENT: the request is gone (interrupted), so nothing is to be sent.
            // fuser cannot be told, and would answer EIO when its reply is dropped: forgetting it
            // leaves a count on its handle of the device (an integer, nothing allocated), which
            // stays open until the daemon exits, as it would anyway.
            Ok(()) => std::mem::forget(self.reply),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => std::mem::forget(self.reply),
            // Anything else may have left the request waiting: answered EIO rather than never.
            // (Where the kernel did take it, failing the copy of a page, it answered EIO itself
            // and this reply is refused, which fuser logs.)
            Err(e) => {
                debug!("inode {}: read reply not sent: {e}", self.ino);
                self.reply.error(Errno::EIO);
            }
        }
        Ok(())
    }

    fn error(self, e: FsError) {
        let op = Op::Read {
            offset: self.offset,
            size: self.size,
        };
        self.reply.error(fail(&self.failures, op, self.ino, e))
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
        let tuning = self.fs.tuning();
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
            self.fs.set_passthrough(ok);
        }
        // Direct I/O only where a client may still map the file (Linux 6.6+): without this,
        // mmap of a file opened with FOPEN_DIRECT_IO fails with ENODEV.
        if tuning.direct_io {
            let ok = config
                .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
                .is_ok();
            self.fs.set_direct_io(ok);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name.as_bytes()) {
            Ok((ino, attr)) => reply.entry(&TTL, &file_attr(ino, &attr), Generation(0)),
            Err(e) => reply.error(self.fail(Op::Lookup(name.as_bytes()), parent, e)),
        }
    }

    // fuser's default `batch_forget` calls this for each inode.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(self.fail(Op::Readlink, ino, e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(ino.0, &attr)),
            Err(e) => reply.error(self.fail(Op::Getattr, ino, e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self
            .fs
            .open(ino.0, flags.0, |file| reply.open_backing(file))
        {
            Ok(o) => match &o.backing {
                Some(id) => reply.opened_passthrough(FileHandle(o.fh), open_flags(&o), id),
                None => reply.opened(FileHandle(o.fh), open_flags(&o)),
            },
            Err(e) => reply.error(self.fail(Op::Open, ino, e)),
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
        self.fs.release(ino.0, fh.0);
        reply.ok();
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let reply = ReadReply {
            reply,
            unique: req.unique().0,
            device: self.device.clone(),
            ino: ino.0,
            offset,
            size,
            failures: self.failures.clone(),
        };
        self.fs.read(ino.0, offset, size, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(ino.0) {
            Ok(o) => reply.opened(FileHandle(o.fh), open_flags(&o)),
            Err(e) => reply.error(self.fail(Op::Opendir, ino, e)),
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
        self.fs.releasedir(fh.0);
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
            .fs
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
            Err(e) => reply.error(self.fail(Op::Readdir, ino, e)),
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
            .fs
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
            Err(e) => reply.error(self.fail(Op::Readdir, ino, e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        let bsize = fs::STATFS_BSIZE;
        reply.statfs(s.blocks, 0, 0, s.files, 0, bsize, NAME_MAX as u32, bsize);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let reply = XattrReply {
            reply,
            size,
            ino: ino.0,
            name: name.as_bytes().to_vec(),
            failures: self.failures.clone(),
        };
        self.fs.getxattr(ino.0, name.as_bytes(), size == 0, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.fs.listxattr(ino.0), |e| {
            self.fail(Op::Listxattr, ino, e)
        });
    }

    // Only SEEK_DATA and SEEK_HOLE reach the daemon (the kernel does the others itself).
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.fs.lseek(ino.0, offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(self.fail(Op::Lseek, ino, e)),
        }
    }

    // `isatty()` (TCGETS) and every other ioctl: no such thing here, answered without a word
    // (fuser's default logs a warning for each).
    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    // The kernel then stops asking and answers poll(2) itself: always readable.
    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        reply.error(Errno::ENOSYS);
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
        fn copy_file_range(_req: &Request, _ino_in: INodeNo, _fh_in: FileHandle, _offset_in: u64,
            _ino_out: INodeNo, _fh_out: FileHandle, _offset_out: u64, _len: u64,
            _flags: fuser::CopyFileRangeFlags) -> fuser::ReplyWrite;
    }
}
