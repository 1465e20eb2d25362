//! Source files: one [`Source`] per version of a file of SOURCE, and the [`Registry`] that hands
//! out the same `Source` for as long as the file stays unchanged, so that an unchanged file is
//! never parsed twice.
//!
//! A version is what `stat` says of the file: device, inode, size, mtime and ctime. A file replaced
//! by `rename` (a new inode) or rewritten in place (a new size or mtime) is a new version, with a
//! `Source` of its own; the old `Source` lives on while nodes of an old snapshot use it.
//!
//! Every regular file is opened without ever blocking (a FIFO is never opened). Headers and indexes
//! are read with `pread`. A source holds its descriptor (and, once read, its mapping) only while
//! it is in use: see [`opened`](super::opened). Reopened, it must still be the same version.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, Weak};
use std::time::Instant;

use log::warn;

use super::ReadError;
use super::lease;
use super::opened::{self, Opened};
use super::parallel;
use super::sets::{self, Plan};
use crate::format::{self, FormatError, Tensor};
use crate::index::{self, Index, IndexError};
use crate::widen::Widening;

/// A file or directory of the source filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub fn of(meta: &Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// One version of a file: a new inode, size, mtime or ctime is a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version {
    pub id: FileId,
    pub size: u64,
    /// Seconds and nanoseconds.
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Version {
    pub fn of(meta: &Metadata) -> Version {
        Version {
            id: FileId::of(meta),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the bytes can differ from `other`'s: another inode, size or mtime (a ctime change
    /// alone is a chmod, chown or rename).
    pub fn same_bytes(&self, other: &Version) -> bool {
        self.id == other.id && self.size == other.size && self.mtime == other.mtime
    }
}

/// A parsed safetensors header.
#[derive(Debug)]
pub struct Parsed {
    pub data_start: u64,
    pub tensors: Vec<Arc<Tensor>>,
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

/// Why a source file cannot be used: opened, or opened again as the version found.
#[derive(Debug)]
pub enum SourceError {
    /// Opening it (or `stat` of what was opened) failed, or it is not a regular file.
    Open(io::Error),
    /// Opening it again at the path it was found at (or `stat` of that) failed.
    Reopen(io::Error),
    /// Its path now holds another file.
    Replaced,
    /// Truncated or rewritten in place since it was found.
    Changed,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Open(e) => write!(f, "{e}"),
            SourceError::Reopen(e) => write!(f, "cannot reopen: {e}"),
            SourceError::Replaced => f.write_str("replaced since it was found"),
            SourceError::Changed => {
                f.write_str("changed in place since it was found (truncated or rewritten)")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// One version of a source file.
#[derive(Debug)]
pub struct Source {
    /// Absolute path, links resolved (the `user.safetensors.source` xattr).
    pub path: PathBuf,
    /// The path it was found at (through links), where it is reopened and checked.
    entry: PathBuf,
    pub version: Version,
    /// Owner, permissions and times, for the attributes of its files.
    pub meta: Metadata,
    /// On a filesystem that may stall (network or FUSE): reads of it always go to the read pool,
    /// and checks of it wait a bounded time.
    pub remote: bool,
    /// Its descriptor and mapping while open.
    open: RwLock<Option<Arc<Opened>>>,
    /// When it was last used, in milliseconds of [`now_ms`].
    used: AtomicU64,
    /// Handles on its files that clients of the mount hold open (see [`Hold`]).
    holds: AtomicUsize,
    /// Set once a shared mapping has been refused: served with `pread` from then on.
    unmappable: AtomicBool,
    /// Set once an in-place change has been noticed (and warned about).
    changed: AtomicBool,
    /// The kinds of problem with this version already warned about (bits of [`Warning`]).
    warned: AtomicU8,
    /// For `.safetensors` files, parsed on first use: the header, or why it is invalid.
    header: OnceLock<Result<Arc<Parsed>, Arc<FormatError>>>,
    /// For a valid header: the count and digest of its tensor names (see [`sets`](super::sets)).
    digest: OnceLock<(usize, u64)>,
    /// For index files, on first use: what the index says, in brief.
    plan: OnceLock<Result<Arc<Plan>, Arc<IndexError>>>,
}

impl Source {
    /// Opens the file at `entry` (links followed): the version found open, holding its descriptor.
    fn open(entry: &Path) -> Result<Source, SourceError> {
        let file = open_regular(entry).map_err(SourceError::Open)?;
        let opened = file.metadata().map_err(SourceError::Open)?;
        Ok(Source {
            path: fs::canonicalize(entry).unwrap_or_else(|_| entry.to_path_buf()),
            entry: entry.to_path_buf(),
            version: Version::of(&opened),
            meta: opened,
            remote: is_remote(&file),
            open: RwLock::new(Some(Arc::new(Opened::new(file)))),
            used: AtomicU64::new(now_ms()),
            holds: AtomicUsize::new(0),
            unmappable: AtomicBool::new(false),
            changed: AtomicBool::new(false),
            warned: AtomicU8::new(0),
            header: OnceLock::new(),
            digest: OnceLock::new(),
            plan: OnceLock::new(),
        })
    }

    pub fn len(&self) -> u64 {
        self.version.size
    }

    pub fn is_empty(&self) -> bool {
        self.version.size == 0
    }

    /// The parsed header (parsed on first call), or why the file is not valid safetensors.
    pub fn header(&self) -> &Result<Arc<Parsed>, Arc<FormatError>> {
        self.header.get_or_init(|| {
            let file = self
                .file_for_read()
                .map_err(|e| FormatError::Io(self.path.clone(), io::Error::other(e)))?;
            let h = format::read_header(&file, &self.path)?;
            Ok(Arc::new(Parsed {
                data_start: h.data_start,
                tensors: h.tensors.into_iter().map(Arc::new).collect(),
                metadata: h.metadata,
            }))
        })
    }

    /// The file parsed as an index, or why it is broken. Parsed anew on each call: an index of a
    /// large set is megabytes of memory; what is kept of it is its [`Plan`].
    pub(super) fn index(&self) -> Result<Index, IndexError> {
        let file = self
            .file_for_read()
            .map_err(|e| IndexError::Read(io::Error::other(e)))?;
        index::read(&file, self.version.size)
    }

    /// What this index says, in brief (parsed on first call), or why it is broken.
    pub(super) fn plan(&self) -> &Result<Arc<Plan>, Arc<IndexError>> {
        self.plan.get_or_init(|| {
            self.index()
                .map(|idx| Arc::new(Plan::of(idx)))
                .map_err(Arc::new)
        })
    }

    /// Whether its header (or for an index, its plan) has been read.
    pub(super) fn is_read(&self, index: bool) -> bool {
        match index {
            true => self.plan.get().is_some(),
            false => self.header.get().is_some(),
        }
    }

    /// Reads its header (or for an index, its plan) now, for later use.
    pub(super) fn read(&self, index: bool) {
        if index {
            let _ = self.plan();
        } else {
            let _ = self.header();
        }
        parallel::step();
    }

    /// The count and digest of this file's tensor names (none if it is not valid).
    pub(super) fn digest(&self) -> (usize, u64) {
        *self.digest.get_or_init(|| match self.header() {
            Ok(p) => sets::digest(p.tensors.iter().map(|t| &*t.name)),
            Err(_) => (0, 0),
        })
    }

    /// Where tensor data starts (0 for a file that is not a valid safetensors file).
    pub fn data_start(&self) -> u64 {
        match self.header.get() {
            Some(Ok(p)) => p.data_start,
            _ => 0,
        }
    }

    /// True the first time only: whoever warns about a problem of this kind with this version
    /// (a rescan that finds the same version again says nothing).
    pub fn first_warning(&self, kind: Warning) -> bool {
        let bit = 1 << kind as u8;
        self.warned.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// Whether the path this version was found at now holds another version (or nothing): it was
    /// replaced, rewritten, or removed. One `stat`.
    pub fn moved(&self) -> bool {
        fs::metadata(&self.entry).map_or(true, |m| Version::of(&m) != self.version)
    }

    /// Its descriptor and mapping: the ones open, or the file opened again now, if it still holds
    /// this version (else [`ReadError::SourceChanged`]).
    pub fn opened(self: &Arc<Self>) -> Result<Arc<Opened>, ReadError> {
        self.used.store(now_ms(), Ordering::Relaxed);
        if let Some(o) = &*self.open.read().unwrap_or_else(PoisonError::into_inner) {
            return Ok(o.clone());
        }
        let mut open = self.open.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = &*open {
            return Ok(o.clone());
        }
        let file = self.reopen().map_err(|e| {
            if !self.changed.swap(true, Ordering::Relaxed) {
                warn!(
                    "{}: {e}; reads of the old version fail",
                    self.path.display()
                );
            }
            // A path that no longer opens, or holds other bytes: the version read is gone.
            match e {
                SourceError::Open(_)
                | SourceError::Reopen(_)
                | SourceError::Replaced
                | SourceError::Changed => ReadError::SourceChanged,
            }
        })?;
        let o = Arc::new(Opened::new(file));
        *open = Some(o.clone());
        drop(open);
        opened::track(self);
        self.lease(&o);
        Ok(o)
    }

    /// Takes its descriptor and mapping if nothing uses them (no read in flight, no handle held),
    /// for the caller to close once it holds no lock: closing a file of a stalled FUSE backend
    /// waits. True if the source holds none now.
    pub(super) fn close_if_unused(&self, closed: &mut Vec<Arc<Opened>>) -> bool {
        let Ok(mut open) = self.open.try_write() else {
            return false;
        };
        if self.holds.load(Ordering::Relaxed) > 0 {
            return false;
        }
        match open.take_if(|o| Arc::strong_count(o) == 1) {
            Some(o) => closed.push(o),
            None => return open.is_none(),
        }
        true
    }

    /// Its descriptor and mapping if it is open now and not being opened.
    pub(super) fn current(&self) -> Option<Arc<Opened>> {
        self.open.try_read().ok()?.clone()
    }

    /// When it was last used, in milliseconds of [`now_ms`].
    pub(super) fn last_used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub(super) fn unmappable(&self) -> bool {
        self.unmappable.load(Ordering::Relaxed)
    }

    pub(super) fn set_unmappable(&self) {
        self.unmappable.store(true, Ordering::Relaxed);
    }

    /// Keeps the source open until the returned [`Hold`] is dropped: a client holds one of its
    /// files open.
    pub fn hold(self: &Arc<Self>) -> Hold {
        self.holds.fetch_add(1, Ordering::Relaxed);
        Hold(self.clone())
    }

    /// Whether the file still holds, up to `end`, the bytes of this version: not shorter, and not
    /// modified since (same mtime). One `fstat`, measured within noise of a read.
    pub fn intact(&self, opened: &Opened, end: u64) -> bool {
        let ok = opened.file.metadata().is_ok_and(|now| {
            let now = Version::of(&now);
            now.size >= end && now.mtime == self.version.mtime
        });
        if !ok && !self.changed.swap(true, Ordering::Relaxed) {
            warn!(
                "{}: changed in place since it was opened (truncated or rewritten); reads of the \
                 old version fail",
                self.path.display()
            );
        }
        ok
    }

    /// Takes a read lease on `opened`, this source's descriptor, if it is local (see [`lease`]).
    pub(super) fn lease(&self, opened: &Arc<Opened>) {
        if !self.remote {
            lease::take(opened, || self.intact(opened, self.version.size));
        }
    }

    /// The open descriptor's slot, if this source is on a local filesystem and the slot is not
    /// being changed (a reader that must not wait does not wait for the lock).
    fn open_local(&self) -> Option<std::sync::RwLockReadGuard<'_, Option<Arc<Opened>>>> {
        if self.remote {
            return None;
        }
        self.open.try_read().ok()
    }

    /// Sends the `len` bytes at `start` through `send` if that cannot wait on storage: the source
    /// is open, on a local filesystem, and those bytes are in the page cache. `None` if it could
    /// wait: the caller then sends them from a thread that may block ([`Source::send`]).
    ///
    /// Fewer than [`COPY_BELOW`] bytes are copied with `preadv2(RWF_NOWAIT)`, which fails rather
    /// than wait. Longer ranges are sent from the mapping, if `mincore` finds them resident.
    pub fn send_cached(
        &self,
        start: u64,
        len: u64,
        send: impl FnOnce(&[u8]),
    ) -> Option<Result<(), ReadError>> {
        let open = self.open_local()?;
        let opened = open.as_ref()?;
        if len < COPY_BELOW {
            return COPY.with_borrow_mut(|buf| {
                // Grown (and zeroed) only past the longest read so far.
                if buf.len() < len as usize {
                    buf.resize(len as usize, 0);
                }
                let buf = &mut buf[..len as usize];
                if !read_cached(&opened.file, buf, start) {
                    return None;
                }
                if let Err(e) = self.check(opened, start, len) {
                    return Some(Err(e));
                }
                send(buf);
                Some(Ok(()))
            });
        }
        if !opened::resident(opened.mapped()?, start, len) {
            return None;
        }
        Some(self.send_from(opened, &[], start, len, send))
    }

    /// Sends `head` followed by the `len` bytes at `start` through `send`, once checked against
    /// changes, opening the source if it is not open. [`COPY_BELOW`] bytes or more without a head
    /// go to `send` as a slice of the mapping, which the daemon never reads itself (their pages
    /// leave its address space later: see [`opened::served`]). Anything else, and everything where
    /// the file cannot be mapped, is read with `pread`: a file cut short is then an error, never a
    /// short reply. A short read of a local source is preceded by a read-ahead of the pages around
    /// it, as a page fault would do (see [`read_around`]).
    pub fn send(
        self: &Arc<Self>,
        head: &[u8],
        start: u64,
        len: u64,
        send: impl FnOnce(&[u8]),
    ) -> Result<(), ReadError> {
        let opened = self.opened()?;
        self.send_from(&opened, head, start, len, send)
    }

    /// [`Source::send`] through `opened`, this source's open descriptor and mapping.
    fn send_from(
        &self,
        opened: &Opened,
        head: &[u8],
        start: u64,
        len: u64,
        send: impl FnOnce(&[u8]),
    ) -> Result<(), ReadError> {
        self.check(opened, start, len)?;
        if head.is_empty()
            && len >= COPY_BELOW
            && let Some(map) = opened.map(self)
        {
            let from = (start as usize).min(map.len());
            let to = (start + len).min(map.len() as u64) as usize;
            send(&map[from..to]);
            opened::served(opened, len);
            return Ok(());
        }
        // On a network or FUSE filesystem every byte read ahead is fetched from far away (and a
        // direct_io backend has no page cache to fill): only what was asked is read there.
        if head.is_empty() && !self.remote {
            read_around(&opened.file, start, len);
        }
        let mut buf = Vec::with_capacity(head.len() + len as usize);
        buf.extend_from_slice(head);
        buf.resize(head.len() + len as usize, 0);
        self.pread(opened, &mut buf[head.len()..], start)?;
        send(&buf);
        Ok(())
    }

    /// Marks the source used, and fails if `[start, start + len)` no longer holds this version's
    /// bytes (see [`Source::intact`]; nothing to check while `opened` holds a read lease).
    fn check(&self, opened: &Opened, start: u64, len: u64) -> Result<(), ReadError> {
        let now = now_ms();
        self.used.store(now, Ordering::Relaxed);
        if len > 0 && !opened.lease.held(now) && !self.intact(opened, start + len) {
            return Err(ReadError::SourceChanged);
        }
        Ok(())
    }

    /// Fills `buf` from `at`: a file cut short is an error, logged, never a short read.
    fn pread(&self, opened: &Opened, buf: &mut [u8], at: u64) -> Result<(), ReadError> {
        opened.file.read_exact_at(buf, at).map_err(|e| {
            warn!("{}: read failed: {e}", self.path.display());
            ReadError::Io
        })
    }

    /// Sends `head`, then presented bytes `[offset, offset + len)` of a tensor whose stored bytes
    /// start at `start`, widened by `widening`: the stored elements under that range are read
    /// with `pread` (a file cut short is an error, never a short reply) and widened into a buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn send_widened(
        self: &Arc<Self>,
        head: &[u8],
        widening: Widening,
        start: u64,
        offset: u64,
        len: u64,
        send: impl FnOnce(&[u8]),
    ) -> Result<(), ReadError> {
        let opened = self.opened()?;
        let fill = |raw: &mut [u8], from| {
            self.check(&opened, from, raw.len() as u64)?;
            self.pread(&opened, raw, from)
        };
        widen_into(
            head,
            widening,
            offset,
            len,
            start,
            |raw, from| Some(fill(raw, from)),
            send,
        )
        .unwrap_or(Err(ReadError::Io))
    }

    /// [`Source::send_widened`] without a head, from this thread: only if the source is open, on
    /// a local filesystem, and the stored bytes are in the page cache (`preadv2(RWF_NOWAIT)`).
    /// `None` if it could wait.
    pub fn send_widened_cached(
        &self,
        widening: Widening,
        start: u64,
        offset: u64,
        len: u64,
        send: impl FnOnce(&[u8]),
    ) -> Option<Result<(), ReadError>> {
        let open = self.open_local()?;
        let opened = open.as_ref()?;
        let fill = |raw: &mut [u8], from| {
            read_cached(&opened.file, raw, from).then(|| self.check(opened, from, raw.len() as u64))
        };
        widen_into(&[], widening, offset, len, start, fill, send)
    }

    /// The open descriptor, or the file opened again for this one use.
    fn file_for_read(&self) -> Result<FileRef, SourceError> {
        let open = self.open.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = &*open {
            return Ok(FileRef::Open(o.clone()));
        }
        drop(open);
        self.reopen().map(FileRef::Reopened)
    }

    /// The file at the path it was found at, if it is still this version.
    fn reopen(&self) -> Result<File, SourceError> {
        let file = open_regular(&self.entry).map_err(SourceError::Reopen)?;
        let now = Version::of(&file.metadata().map_err(SourceError::Reopen)?);
        if now.id != self.version.id {
            return Err(SourceError::Replaced);
        }
        if !now.same_bytes(&self.version) {
            return Err(SourceError::Changed);
        }
        Ok(file)
    }
}

/// A handle on a source's file held open by a client: the source stays open meanwhile.
#[derive(Debug)]
pub struct Hold(Arc<Source>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.used.store(now_ms(), Ordering::Relaxed);
        self.0.holds.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A source's descriptor: the one open, or one opened for a single use.
enum FileRef {
    Open(Arc<Opened>),
    Reopened(File),
}

impl std::ops::Deref for FileRef {
    type Target = File;
    fn deref(&self) -> &File {
        match self {
            FileRef::Open(o) => &o.file,
            FileRef::Reopened(f) => f,
        }
    }
}

/// Milliseconds since the process first asked.
pub(super) fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Kinds of problem warned about once per version of a file.
#[derive(Debug, Clone, Copy)]
pub enum Warning {
    /// Not a valid safetensors file, or a broken index.
    Invalid,
    /// Its generated directory's name is taken.
    NameTaken,
    /// A shared mapping of it was refused.
    Unmappable,
}

/// The sources in use, by file, so that an unchanged file reached again (through another link, or
/// by a later rescan) gives the same [`Source`].
#[derive(Debug, Default)]
pub struct Registry {
    by_id: HashMap<FileId, Weak<Source>>,
}

impl Registry {
    /// The source for the file at `entry`, whose `stat` gave `meta`: the one already open if that
    /// version is, else the file opened now (whose version may be newer than `meta`'s).
    pub fn get(&mut self, entry: &Path, meta: &Metadata) -> Result<Arc<Source>, SourceError> {
        if let Some(s) = self.live(&Version::of(meta)) {
            return Ok(s);
        }
        let source = Source::open(entry)?;
        Ok(self.insert(source))
    }

    /// [`Registry::get`] for each file of a directory, those not open yet opened several at a
    /// time where the directory is `remote` (see [`parallel`]).
    pub fn get_all(
        &mut self,
        files: &[(&Path, &Metadata)],
        remote: bool,
    ) -> Vec<Result<Arc<Source>, SourceError>> {
        let known: Vec<Option<Arc<Source>>> = files
            .iter()
            .map(|(_, meta)| self.live(&Version::of(meta)))
            .collect();
        let missing: Vec<&Path> = files
            .iter()
            .zip(&known)
            .filter(|(_, k)| k.is_none())
            .map(|((path, _), _)| *path)
            .collect();
        // In batches, so that the sources just opened and not yet counted stay a fraction of
        // the cap on open sources.
        let mut opened = Vec::with_capacity(missing.len());
        for batch in missing.chunks((opened::cap() / 4).max(1)) {
            let sources = parallel::map(batch, remote, |path| {
                let s = Source::open(path);
                parallel::step();
                s
            });
            opened.extend(sources.into_iter().map(|s| s.map(|s| self.insert(s))));
        }
        let mut opened = opened.into_iter();
        known
            .into_iter()
            .map(|k| match k {
                Some(s) => Ok(s),
                None => opened.next().unwrap_or_else(|| Err(not_opened())),
            })
            .collect()
    }

    /// The source just opened, or the same version already open.
    fn insert(&mut self, source: Source) -> Arc<Source> {
        if let Some(s) = self.live(&source.version) {
            return s;
        }
        let source = Arc::new(source);
        opened::track(&source);
        if let Some(o) = source.current() {
            source.lease(&o);
        }
        self.by_id
            .insert(source.version.id, Arc::downgrade(&source));
        source
    }

    fn live(&self, version: &Version) -> Option<Arc<Source>> {
        let s = self.by_id.get(&version.id)?.upgrade()?;
        (s.version == *version).then_some(s)
    }

    /// Forgets sources no snapshot uses any more.
    pub fn prune(&mut self) {
        self.by_id.retain(|_, s| s.strong_count() > 0);
    }
}

/// The error for a file a batch of opens did not reach (never expected: each is tried).
pub(super) fn not_opened() -> SourceError {
    SourceError::Open(io::Error::other("not opened"))
}

/// Opens a file for reading without ever blocking (a FIFO swapped in would hang `open`) and checks
/// that what was opened is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Whether `file` is on a filesystem that may stall, and whose changes made elsewhere inotify
/// never reports: NFS, SMB/CIFS, FUSE, 9p, Ceph, Lustre, GPFS, AFS.
pub fn is_remote(file: &File) -> bool {
    const REMOTE: [i64; 10] = [
        0x6969,     // NFS
        0x517b,     // SMB
        0xfe534d42, // SMB2
        0xff534d42, // CIFS
        0x65735546, // FUSE
        0x01021997, // 9p
        0x00c36400, // Ceph
        0x0bd00bd0, // Lustre
        0x47504653, // GPFS
        0x5346414f, // AFS
    ];
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `file` is an open descriptor and `buf` a writable statfs buffer.
    if unsafe { libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(file), buf.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded, so the buffer is initialised.
    let stat = unsafe { buf.assume_init() };
    // `f_type` is a long on some targets and an int on others.
    #[allow(clippy::unnecessary_cast)]
    let kind = stat.f_type as i64;
    REMOTE.contains(&kind)
}

/// Reads shorter than this are copied (`pread`); longer ones are sent from the source's mapping.
/// A copy that small costs less than mapping its pages into the daemon (a fault, which also maps
/// the pages around them) and dropping them again later, and it leaves the daemon's resident
/// memory as it was.
const COPY_BELOW: u64 = 32 << 10;

/// The window a short read of storage reads ahead: what a page fault reads around the page it
/// needs (the kernel's default `read_ahead_kb`), so that random small reads through the mount
/// cost as many reads of storage as they did through the mapping.
const READ_AROUND: u64 = 128 << 10;

thread_local! {
    /// The stored bytes and the widened reply of a widened read ([`widen_into`]), kept between
    /// reads.
    static WIDEN: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    /// The buffer of a FUSE thread's copied reads.
    static COPY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Sends `head`, then presented bytes `[offset, offset + len)` of a tensor widened by `widening`
/// whose stored bytes start at `start`: `fill` reads the stored bytes under that range (given
/// their offset in the file), or returns `None` if it would wait, which is returned.
fn widen_into(
    head: &[u8],
    widening: Widening,
    offset: u64,
    len: u64,
    start: u64,
    fill: impl FnOnce(&mut [u8], u64) -> Option<Result<(), ReadError>>,
    send: impl FnOnce(&[u8]),
) -> Option<Result<(), ReadError>> {
    let stored = widening.stored_range(offset, len);
    WIDEN.with_borrow_mut(|(raw, out)| {
        raw.resize(stored.len as usize, 0);
        if let Err(e) = fill(raw, start + stored.start)? {
            return Some(Err(e));
        }
        out.clear();
        out.extend_from_slice(head);
        out.resize(head.len() + len as usize, 0);
        if !widening.convert(raw, offset, &mut out[head.len()..]) {
            return Some(Err(ReadError::Io));
        }
        send(out);
        Some(Ok(()))
    })
}

/// Fills `buf` from `file` at `offset` if every byte is in the page cache: `preadv2` with
/// `RWF_NOWAIT`, which fails with EAGAIN (or stops short) rather than wait on storage. False
/// otherwise, also where the filesystem or kernel does not support it.
fn read_cached(file: &File, buf: &mut [u8], offset: u64) -> bool {
    let Ok(offset) = i64::try_from(offset) else {
        return false;
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is writable and outlives the call; the descriptor is
    // open for reading. The kernel writes at most `buf.len()` bytes into it.
    let n = unsafe {
        libc::preadv2(
            std::os::fd::AsRawFd::as_raw_fd(file),
            &iov,
            1,
            offset,
            libc::RWF_NOWAIT,
        )
    };
    usize::try_from(n).is_ok_and(|n| n == buf.len())
}

/// Starts reading the [`READ_AROUND`]-aligned window around `len` bytes at `start` into the page
/// cache (`POSIX_FADV_WILLNEED`); a hint, whose failure changes nothing.
fn read_around(file: &File, start: u64, len: u64) {
    let from = start / READ_AROUND * READ_AROUND;
    let to = (start + len).div_ceil(READ_AROUND) * READ_AROUND;
    let (Ok(from), Ok(span)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return;
    };
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open.
    unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(file),
            from,
            span,
            libc::POSIX_FADV_WILLNEED,
        );
    }
}
