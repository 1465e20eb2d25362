//! `slowfs SOURCE MOUNTPOINT --delay-ms N`: a read-only passthrough FUSE filesystem that mirrors
//! the SOURCE tree and waits N ms before answering every lookup, getattr, open, opendir, readdir,
//! read and statfs.
//!
//! It is a stand-in for storage far away (NFS, an object store behind FUSE, a network disk), used
//! by tests and the benchmark: each request pays the delay, but requests overlap, as on a network
//! store, so 64 concurrent requests of N ms take about N ms, not 64 N. File data comes from `pread`
//! on a descriptor opened per FUSE open, attributes from `lstat` of the source path, and inode
//! numbers are the source's (the root is 1). Symbolic links and special files are left out, and
//! SOURCE should be one filesystem (inode numbers are not made unique across mounts inside it).
//!
//! It runs in the foreground until unmounted, or until SIGTERM or SIGINT, which unmount it (lazily,
//! if files are still open) and end it with exit status 0. It must run as root (it unmounts with
//! umount2).
//!
//! Build: `cargo build --release --example slowfs` (the binary is `target/release/examples/slowfs`).

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request, Session,
};

const TTL: Duration = Duration::from_secs(1);
/// Kernel requests allowed in the background (readahead) at once.
const BACKGROUND: u16 = 256;

/// The filesystem; each request is answered after the delay on a thread of its own.
struct SlowFs(Arc<Inner>);

struct Inner {
    delay: Duration,
    /// The source root's own inode number, swapped with 1 (see [`Inner::ino`]).
    root_ino: u64,
    /// Inode number → source path, filled by lookups (never forgotten: this is a test tool).
    paths: Mutex<HashMap<u64, PathBuf>>,
    /// Open files: the file handle is the index.
    files: Mutex<Vec<Option<Arc<File>>>>,
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// A source time (times before 1970 are shown as 1970).
fn time(secs: i64, nsecs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::new(secs.max(0) as u64, nsecs as u32)
}

fn kind(ft: fs::FileType) -> Option<FileType> {
    if ft.is_dir() {
        Some(FileType::Directory)
    } else if ft.is_file() {
        Some(FileType::RegularFile)
    } else {
        None // symbolic links and special files are left out
    }
}

impl Inner {
    /// The inode number shown for a source inode number: the root's is 1, and a source inode
    /// numbered 1 takes the root's.
    fn ino(&self, source_ino: u64) -> u64 {
        match source_ino {
            i if i == self.root_ino => 1,
            1 => self.root_ino,
            i => i,
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        let paths = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn attr(&self, path: &Path) -> Result<FileAttr, Errno> {
        let m = fs::symlink_metadata(path).map_err(errno)?;
        Ok(FileAttr {
            ino: INodeNo(self.ino(m.ino())),
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: kind(m.file_type()).ok_or(Errno::ENOENT)?,
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: 0,
            blksize: m.blksize() as u32,
            flags: 0,
        })
    }

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let path = self.path(parent)?.join(name);
        let attr = self.attr(&path)?;
        let mut paths = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        paths.insert(attr.ino.0, path);
        Ok(attr)
    }

    fn open(&self, ino: INodeNo) -> Result<FileHandle, Errno> {
        let file = Arc::new(File::open(self.path(ino)?).map_err(errno)?);
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let fh = files.iter().position(Option::is_none).unwrap_or_else(|| {
            files.push(None);
            files.len() - 1
        });
        files[fh] = Some(file);
        Ok(FileHandle(fh as u64))
    }

    fn read(&self, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let file = files.get(fh.0 as usize).and_then(Clone::clone);
        drop(files);
        let file = file.ok_or(Errno::EBADF)?;
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    /// The entries of a directory from `offset` on: `.`, `..`, then the source's directories and
    /// regular files in name order (listed afresh on each call, so offsets stay meaningful).
    fn readdir(&self, ino: INodeNo, offset: u64, reply: &mut ReplyDirectory) -> Result<(), Errno> {
        let dir = fs::read_dir(self.path(ino)?).map_err(errno)?;
        let mut entries: Vec<(u64, FileType, OsString)> = dir
            .flatten()
            .filter_map(|e| Some((self.ino(e.ino()), kind(e.file_type().ok()?)?, e.file_name())))
            .collect();
        entries.sort_by(|a, b| a.2.cmp(&b.2));
        let dots = [
            (ino.0, FileType::Directory, ".".into()),
            (1, FileType::Directory, "..".into()),
        ];
        let all = dots.into_iter().chain(entries);
        for (i, (ino, k, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, k, &name) {
                break;
            }
        }
        Ok(())
    }

    fn statfs(&self) -> Result<libc::statvfs, Errno> {
        let root = CString::new(self.path(INodeNo::ROOT)?.into_os_string().into_vec())
            .map_err(|_| Errno::EINVAL)?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
        // SAFETY: `root` is a NUL-terminated path and `st` a writable statvfs.
        if unsafe { libc::statvfs(root.as_ptr(), st.as_mut_ptr()) } != 0 {
            return Err(errno(std::io::Error::last_os_error()));
        }
        // SAFETY: statvfs succeeded, so it filled `st` (which was zeroed anyway).
        Ok(unsafe { st.assume_init() })
    }
}

impl SlowFs {
    /// Runs `answer` after the delay on a thread of its own, so that requests overlap as on a
    /// network store.
    fn later(&self, answer: impl FnOnce(&Inner) + Send + 'static) {
        let inner = self.0.clone();
        std::thread::spawn(move || {
            std::thread::sleep(inner.delay);
            answer(&inner);
        });
    }
}

impl Filesystem for SlowFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Lookups in one directory overlap too (the kernel serializes them otherwise), and many
        // readahead requests may be in flight at once.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_background(BACKGROUND);
        let _ = config.set_congestion_threshold(BACKGROUND * 3 / 4);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.to_os_string();
        self.later(move |fs| match fs.lookup(parent, &name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.later(move |fs| match fs.path(ino).and_then(|p| fs.attr(&p)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.later(move |fs| match fs.open(ino) {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.later(move |fs| match fs.read(fh, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut files = self.0.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = files.get_mut(fh.0 as usize) {
            *slot = None;
        }
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.later(
            move |fs| match fs.path(ino).and_then(|p| fs::read_dir(p).map_err(errno)) {
                Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(e),
            },
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.later(move |fs| match fs.readdir(ino, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.later(move |fs| match fs.statfs() {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        });
    }
}

fn signal_set() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set, then sigaddset adds valid signal numbers to it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM);
        libc::sigaddset(set.as_mut_ptr(), libc::SIGINT);
        set.assume_init()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: slowfs SOURCE MOUNTPOINT --delay-ms N";
    let (source, mnt, delay_ms) = match args.as_slice() {
        [_, s, m, flag, n] if flag == "--delay-ms" => match n.parse::<u64>() {
            Ok(n) => (s, m, n),
            Err(_) => fail(usage),
        },
        _ => fail(usage),
    };
    let source = fs::canonicalize(source).unwrap_or_else(|e| fail(&format!("{source}: {e}")));
    let root_ino = fs::metadata(&source)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", source.display())))
        .ino();
    let fs = SlowFs(Arc::new(Inner {
        delay: Duration::from_millis(delay_ms),
        root_ino,
        paths: Mutex::new(HashMap::from([(1, source)])),
        files: Mutex::new(Vec::new()),
    }));
    // Block the signals in every thread; only the signal thread below takes them.
    let set = signal_set();
    // SAFETY: `set` is an initialised signal set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::FSName("slowfs".into()),
        MountOption::DefaultPermissions,
    ];
    // Two threads take requests from the kernel; each answer waits on a thread of its own.
    config.n_threads = Some(2);
    config.clone_fd = true;
    let session = Session::new(fs, mnt, &config).unwrap_or_else(|e| fail(&format!("{mnt}: {e}")));
    let target = CString::new(mnt.as_bytes()).unwrap_or_else(|_| fail("bad MOUNTPOINT"));
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is initialised and `sig` is a valid place for the result.
        unsafe { libc::sigwait(&set, &mut sig) };
        // Detach lazily: files still open are served until closed, then the session ends.
        // SAFETY: `target` is a NUL-terminated path.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            fail(&format!("umount: {}", std::io::Error::last_os_error()));
        }
    });
    match session.run() {
        Err(e) if e.raw_os_error() != Some(libc::ECONNABORTED) => fail(&format!("{mnt}: {e}")),
        _ => {}
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("slowfs: {msg}");
    std::process::exit(2);
}
