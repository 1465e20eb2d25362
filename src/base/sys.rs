//! Every call into the C library that Rust's standard library does not wrap, each behind a safe
//! function: the one place with `unsafe` blocks (and the only one to review for them).
//!
//! - source files: mappings, `mincore`, `madvise`, `preadv2(RWF_NOWAIT)`, `posix_fadvise`,
//!   `fstatfs`, read leases (`F_SETLEASE`);
//! - the process: `RLIMIT_NOFILE`, `malloc_trim`, signal masks and waits, `fork`, `setsid`,
//!   descriptors (`pipe2`, `dup2`, `dup3`), `pidfd_open` and `poll`;
//! - mounts: `umount2`, `statvfs`;
//! - inotify.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use memmap2::Mmap;

/// The size of a memory page.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

/// A read-only shared mapping of the whole of `file`.
///
/// The daemon never dereferences a mapping it makes: slices of it are only passed to the kernel
/// (`writev` of a FUSE reply, `mincore`, `madvise`), which reports a page that vanished (the
/// source truncated since) as EFAULT instead of raising SIGBUS. So a file that changes after it
/// was mapped cannot cause undefined behaviour, and callers must keep to that rule: hand slices of
/// the mapping to the kernel, never read them.
pub fn map_readonly(file: &File) -> io::Result<Mmap> {
    // SAFETY: the mapping is read-only and, by the rule above, only ever read by the kernel, so a
    // later change of the file (the reason `Mmap::map` is unsafe) cannot be observed by Rust code
    // as a change of memory it holds a reference to.
    unsafe { Mmap::map(file) }
}

/// Whether every page of `map[first..first + span]` is in the page cache (`mincore`). `first`
/// must be page-aligned; `pages` is scratch space of at least one byte per page. False if the
/// range is not within the mapping or `pages` is too short.
pub fn resident(map: &Mmap, first: usize, span: usize, pages: &mut [u8]) -> bool {
    let count = span.div_ceil(page_size());
    let within = first
        .checked_add(span)
        .is_some_and(|end| end <= map.len().next_multiple_of(page_size()));
    if !within || !first.is_multiple_of(page_size()) || pages.len() < count {
        return false;
    }
    // SAFETY: `first..first + span` lies within the mapping (its last page rounded up, as the
    // kernel maps it) and starts on a page boundary; `pages` has room for one byte per page.
    // mincore only reads page tables and the page cache; it never touches the mapped bytes.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr().add(first).cast_mut().cast(),
            span,
            pages.as_mut_ptr(),
        )
    };
    rc == 0 && pages[..count].iter().all(|b| b & 1 == 1)
}

/// Drops the pages of `map` from this process's address space (`MADV_DONTNEED`); the page cache
/// keeps them, and the next access maps them again.
pub fn drop_pages(map: &Mmap) {
    // SAFETY: MADV_DONTNEED on a read-only file mapping that is never written only unmaps pages:
    // the next access maps the file's bytes again, so nothing the daemon relies on changes, and no
    // reference into the mapping is invalidated.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
}

/// Fills `buf` from `file` at `offset` if every byte is in the page cache: `preadv2` with
/// `RWF_NOWAIT`, which fails with EAGAIN (or stops short) rather than wait on storage. False
/// otherwise, also where the filesystem or kernel does not support it.
pub fn read_cached(file: &File, buf: &mut [u8], offset: u64) -> bool {
    let Ok(offset) = i64::try_from(offset) else {
        return false;
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is writable and outlives the call; the descriptor is
    // open for reading. The kernel writes at most `buf.len()` bytes into it.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    usize::try_from(n).is_ok_and(|n| n == buf.len())
}

/// Fills `bufs`, one after the other, with the bytes of `file` from `offset` (`preadv2`, at most
/// [`IOV_MAX`] buffers a call): `read_exact_at` for several buffers, so that bytes that lie
/// together in the file go straight to where they belong apart. With `cached`, only from the page
/// cache (`RWF_NOWAIT`): `WouldBlock` where any byte is not there (or the kernel cannot say).
pub fn read_exact_vectored_at(
    file: &File,
    mut bufs: &mut [io::IoSliceMut<'_>],
    offset: u64,
    cached: bool,
) -> io::Result<()> {
    let mut at = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = if cached { libc::RWF_NOWAIT } else { 0 };
    io::IoSliceMut::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let count = bufs.len().min(IOV_MAX);
        let want: usize = bufs[..count].iter().map(|b| b.len()).sum();
        // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` on Unix (std guarantees it); the
        // first `count` of `bufs` describe writable memory that outlives the call, and the kernel
        // writes at most their lengths into them. The descriptor is open for reading.
        let n = unsafe {
            libc::preadv2(
                file.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                count as libc::c_int,
                at,
                flags,
            )
        };
        match usize::try_from(n) {
            Ok(n) if cached && n < want => return Err(io::ErrorKind::WouldBlock.into()),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                at = at.saturating_add(n as i64);
                io::IoSliceMut::advance_slices(&mut bufs, n);
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => {}
                    _ if cached => return Err(io::ErrorKind::WouldBlock.into()),
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// Most buffers one `preadv` or `writev` takes on Linux.
pub const IOV_MAX: usize = 1024;

/// Writes `header`, then `bufs`, to `to` in one `writev` (a message to the FUSE device, which
/// takes each whole or not at all): at most [`IOV_MAX`] buffers in all.
pub fn write_message(
    to: BorrowedFd<'_>,
    header: &[u8],
    bufs: &[io::IoSlice<'_>],
) -> io::Result<()> {
    if bufs.len() >= IOV_MAX {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut all = Vec::with_capacity(bufs.len() + 1);
    all.push(io::IoSlice::new(header));
    all.extend_from_slice(bufs);
    let want: usize = all.iter().map(|b| b.len()).sum();
    // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it); the kernel
    // only reads the buffers, which outlive the call, and there are at most IOV_MAX of them.
    let n = unsafe {
        libc::writev(
            to.as_raw_fd(),
            all.as_ptr().cast::<libc::iovec>(),
            all.len() as libc::c_int,
        )
    };
    match usize::try_from(n) {
        Ok(n) if n == want => Ok(()),
        Ok(_) => Err(io::ErrorKind::WriteZero.into()),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Starts reading `len` bytes of `file` at `start` into the page cache (`POSIX_FADV_WILLNEED`); a
/// hint, whose failure changes nothing.
pub fn will_need(file: &File, start: u64, len: u64) {
    let (Ok(start), Ok(len)) = (i64::try_from(start), i64::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), start, len, libc::POSIX_FADV_WILLNEED) };
}

/// Tells the kernel `file` is read front to back (`POSIX_FADV_SEQUENTIAL`: a larger read-ahead);
/// a hint, whose failure changes nothing.
pub fn sequential(file: &File) {
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// Puts the calling thread last for the CPU (`SCHED_IDLE`, and nice 19 should that be refused)
/// and for storage (the idle I/O class), so that whatever else the process does comes first; a
/// hint, whose failure changes nothing.
pub fn lowest_priority() {
    const IOPRIO_WHO_PROCESS: libc::c_int = 1;
    const IOPRIO_CLASS_IDLE: libc::c_int = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_int = 13;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: gettid takes no argument; setpriority, sched_setscheduler and ioprio_set only read
    // theirs (`param` outlives the call), and given this thread's id they change this thread only
    // (Linux keeps all three per thread).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param);
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        );
    }
}

/// The type of the filesystem `file` is on (`statfs.f_type`), if `fstatfs` answers.
pub fn filesystem_type(file: &File) -> Option<i64> {
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `file` is an open descriptor and `buf` a writable statfs buffer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), buf.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstatfs succeeded, so the buffer is initialised.
    let stat = unsafe { buf.assume_init() };
    // `f_type` is a long on some targets and an int on others.
    #[allow(clippy::unnecessary_cast)]
    Some(stat.f_type as i64)
}

/// Takes a read lease on `file` (`F_SETLEASE`, `F_RDLCK`).
pub fn take_read_lease(file: &File) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor that `file` owns and keeps open; F_SETLEASE takes an int.
    match unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Whether `file` still holds a read lease that is not being broken (`F_GETLEASE` answers
/// `F_RDLCK`; it answers `F_UNLCK` once a writer has started breaking it).
pub fn holds_read_lease(file: &File) -> bool {
    // SAFETY: fcntl on a descriptor that `file` owns and keeps open.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLEASE) == libc::F_RDLCK }
}

/// Releases the lease on `file`, which lets a writer waiting for it go on.
pub fn release_lease(file: &File) {
    // SAFETY: fcntl on a descriptor that `file` owns and keeps open; F_SETLEASE takes an int.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force (0 if
/// it cannot be read).
pub fn raise_descriptor_limit() -> u64 {
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
    lim.rlim_cur
}

/// Hands the heap's free memory back to the system.
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
    unsafe { libc::malloc_trim(0) };
}

/// A set of signals.
#[derive(Clone, Copy)]
pub struct Signals(libc::sigset_t);

impl Signals {
    pub fn of(signals: &[libc::c_int]) -> Signals {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set; sigaddset only adds valid signal numbers to it
        // (an invalid one is refused with EINVAL and changes nothing).
        unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for &sig in signals {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
            Signals(set.assume_init())
        }
    }

    /// Blocks these signals in the calling thread and in every thread it starts later.
    pub fn block(&self) {
        // SAFETY: the set is initialised; the old mask is not wanted.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &self.0, std::ptr::null_mut()) };
    }

    /// Waits for one of these signals (blocked beforehand) and returns it.
    pub fn wait(&self) -> libc::c_int {
        let mut sig = 0;
        // SAFETY: the set is initialised and `sig` is a valid place for the result.
        unsafe { libc::sigwait(&self.0, &mut sig) };
        sig
    }

    /// Waits at most `limit` for one of these signals (blocked beforehand): `Ok(Some(signal))`,
    /// `Ok(None)` at the end of the wait, or the error (EINTR: another signal interrupted it).
    pub fn wait_for(&self, limit: Duration) -> io::Result<Option<libc::c_int>> {
        let timeout = libc::timespec {
            tv_sec: limit.as_secs() as libc::time_t,
            tv_nsec: limit.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the set is initialised, `timeout` a valid timeout; no siginfo is asked for.
        let sig = unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), &timeout) };
        if sig >= 0 {
            return Ok(Some(sig));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(None),
            _ => Err(e),
        }
    }
}

/// Which side of a [`fork`] this is.
pub enum Forked {
    Child,
    Parent,
}

/// Forks this process, which must have one thread only (it is checked: a fork of a process with
/// other threads copies locks they may hold, held forever in the child).
pub fn fork() -> io::Result<Forked> {
    // A thread just joined may still be listed for a moment: its join returns when it clears its
    // id, before the kernel removes the exiting task from the thread group. Worker threads of the
    // mount's first scan (headers read several at a time) end right before this.
    let count = || std::fs::read_dir("/proc/self/task").map(|d| d.count());
    let mut threads = count()?;
    for _ in 0..100 {
        if threads == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        threads = count()?;
    }
    if threads != 1 {
        return Err(io::Error::other(format!(
            "cannot fork a process with {threads} threads"
        )));
    }
    // SAFETY: the process has a single thread (checked above, and no thread can start meanwhile
    // since this is it), so the child is a complete copy of it.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        _ => Ok(Forked::Parent),
    }
}

/// Starts a new session, leaving the caller's terminal and process group.
pub fn setsid() {
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe { libc::setsid() };
}

/// A pipe whose both ends close on exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes descriptor `target` a copy of `fd` (closing what `target` was), closed on exec if
/// `cloexec`.
pub fn dup_onto(fd: RawFd, target: RawFd, cloexec: bool) -> io::Result<()> {
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: dup3 only changes the descriptor table: `fd` is open (else it fails with EBADF) and
    // `target` is replaced atomically. Callers only replace descriptors that no Rust object owns
    // (the standard ones).
    match unsafe { libc::dup3(fd, target, flags) } {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// Closes every descriptor of this process from 3 up: for a process just started that must not
/// hold what its parent passed on (like `/dev/fuse`), and owns none of them.
pub fn close_inherited_descriptors() {
    let open: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => return,
    };
    for fd in open.into_iter().filter(|fd| *fd > 2) {
        // SAFETY: closing a descriptor only changes the descriptor table. Called by a process
        // that has just started, on its one thread, where no Rust object owns one of these (the
        // directory listing above is closed by now).
        unsafe { libc::close(fd) };
    }
}

/// A descriptor that becomes readable when process `pid` has exited (`pidfd_open`, Linux 5.3+).
/// Every descriptor of the process is closed by then.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: the syscall takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits until `fd` is readable (or in error), retrying after signals.
pub fn wait_readable(fd: &OwnedFd) -> io::Result<()> {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `poll` is one valid pollfd, and the count says so.
        if unsafe { libc::poll(&mut poll, 1, -1) } >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Unmounts `path`; with `detach`, lazily (`MNT_DETACH`: gone from the tree now, ended once no
/// file of it is in use).
pub fn umount(path: &Path, detach: bool) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = if detach { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path.
    match unsafe { libc::umount2(c.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The error `statvfs` of `path` gives, if any (a stale FUSE mount answers ENOTCONN even where a
/// cached `stat` succeeds).
pub fn statvfs_error(path: &Path) -> Option<io::Error> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `buf` is a writable statvfs buffer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), buf.as_mut_ptr()) };
    (rc != 0).then(io::Error::last_os_error)
}

/// A new inotify instance, closed on exec.
pub fn inotify_init() -> io::Result<File> {
    // SAFETY: inotify_init1 takes flags only.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Adds a watch of `path` for the events `mask` to the inotify instance `inotify`.
pub fn inotify_add_watch(inotify: &File, path: &Path, mask: u32) -> io::Result<i32> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated string and the descriptor is open.
    let wd = unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), c.as_ptr(), mask) };
    if wd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(wd)
}

/// Removes the watch `wd` (a stale one is refused with EINVAL, which changes nothing).
pub fn inotify_rm_watch(inotify: &File, wd: i32) {
    // SAFETY: removing a watch has no memory-safety preconditions.
    unsafe { libc::inotify_rm_watch(inotify.as_raw_fd(), wd) };
}

/// `struct open_how` of `openat2(2)` (libc's is not constructible outside it).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens `rel`, a path relative to the directory `root`, for reading, following symbolic links
/// only while they stay below `root` (`openat2` with `RESOLVE_BENEATH`): nothing outside `root`
/// is opened, whatever the links say. A path that leads outside fails with `EXDEV`; a kernel
/// before 5.6 gives `ENOSYS`.
pub fn open_beneath(root: &Path, rel: &Path) -> io::Result<File> {
    let dir = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)?;
    let rel = CString::new(rel.as_os_str().as_bytes())?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `dir` is an open descriptor, `rel` a NUL-terminated string and `how` an `open_how`
    // of the size passed, all alive for the call; the kernel only reads them.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor the call just opened, owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, IoSlice, IoSliceMut, Read};
    use std::os::fd::AsFd;

    use super::{IOV_MAX, pipe, read_exact_vectored_at, write_message};
    use crate::base::testing::TempDir;

    /// A message is its header, then each buffer in turn, written at once; one of more buffers
    /// than one `writev` takes is refused, nothing written.
    #[test]
    fn a_message_is_written_whole_or_not_at_all() {
        let (read, write) = pipe().unwrap();
        let bufs = [IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")];
        write_message(write.as_fd(), b"HEAD", &bufs).unwrap();
        let many = vec![IoSlice::new(b"x"); IOV_MAX];
        let e = write_message(write.as_fd(), b"H", &many).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        drop(write);
        let mut got = Vec::new();
        std::fs::File::from(read).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"HEADabcde");
    }

    /// Buffers filled one after the other from the offset, in one call or (past `IOV_MAX`
    /// buffers) several; past the end an error, never a short fill; from the page cache alone
    /// where the bytes are there.
    #[test]
    fn a_vectored_read_fills_each_buffer_in_turn() {
        let tmp = TempDir::new("vectored");
        let path = tmp.join("f");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        for cached in [false, true] {
            let (mut a, mut b, mut c) = (vec![0; 3], vec![0; 0], vec![0; 700]);
            let mut bufs = [
                IoSliceMut::new(&mut a),
                IoSliceMut::new(&mut b),
                IoSliceMut::new(&mut c),
            ];
            read_exact_vectored_at(&file, &mut bufs, 5, cached).unwrap();
            assert_eq!(a, bytes[5..8]);
            assert_eq!(c, bytes[8..708]);
            // 1500 buffers of one byte: more than one preadv takes.
            let mut ones = vec![0u8; 1500];
            let mut bufs: Vec<IoSliceMut> = ones.chunks_mut(1).map(IoSliceMut::new).collect();
            read_exact_vectored_at(&file, &mut bufs, 3000, cached).unwrap();
            assert_eq!(ones, bytes[3000..4500]);
            let mut past = vec![0u8; 10];
            let e = read_exact_vectored_at(&file, &mut [IoSliceMut::new(&mut past)], 4995, cached)
                .unwrap_err();
            let want = if cached {
                ErrorKind::WouldBlock
            } else {
                ErrorKind::UnexpectedEof
            };
            assert_eq!(e.kind(), want);
        }
    }
}
