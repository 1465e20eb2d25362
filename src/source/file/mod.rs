//! [`Source`]: one version of a file of SOURCE, what it holds once interpreted (its tensors, or for
//! an index its plan), and its descriptor while it is open.
//!
//! A version is what `stat` says of the file: device, inode, size, mtime and ctime. A file replaced
//! by `rename` (a new inode) or rewritten in place (a new size or mtime) is a new version, with a
//! `Source` of its own; the old `Source` lives on while nodes of an old snapshot use it.
//!
//! Every regular file is opened without ever blocking (a FIFO is never opened). Headers and indexes
//! are read with `pread`. A source holds its descriptor (and, once read, its mapping) only while it
//! is in use (see [`Sources`]); reopened, it must still be the same version.

use std::fs::{self, File, Metadata};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLockReadGuard};

use log::warn;
use memmap2::Mmap;

use super::error::{DescribeError, PlanError, ReadError, SourceError};
use super::opened::{Opened, Slot};
use super::recorded::{self, Recorded, Verdict};
use super::sources::Sources;
use super::version::Version;
use crate::base::digest::{self, Sha256};
use crate::base::sys;
use crate::format::set::index::{self, Index, Plan};
use crate::format::{Converted, Description, Format, Input, MAGIC_LEN};

mod interpreted;

/// Filesystem types (`statfs.f_type`) that may stall and whose changes made elsewhere inotify
/// never reports: NFS, SMB, SMB2, CIFS, FUSE, 9p, Ceph, Lustre, GPFS, AFS.
const REMOTE: [i64; 10] = [
    0x6969, 0x517b, 0xfe534d42, 0xff534d42, 0x65735546, 0x01021997, 0x00c36400, 0x0bd00bd0,
    0x47504653, 0x5346414f,
];

/// What a file is interpreted as, and so what is read of it ahead of use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// Its tensors, as a file of this format.
    Tensors(Format),
    /// Its plan, as an index of a sharded set.
    Index,
}

/// Kinds of problem warned about once per version of a file.
#[derive(Debug, Clone, Copy)]
pub enum Warning {
    /// Not a valid file of its format, or a broken index.
    Invalid,
    /// Its generated directory's name is taken.
    NameTaken,
    /// The numbered set it is the first shard of is not whole.
    Unmerged,
    /// A shared mapping of it was refused.
    Unmappable,
    /// What its reader left out or found odd.
    Notes,
    /// Tensors in data files it names that are not shown (outside a single-file SOURCE).
    DataLeftOut,
}

type Described = Result<Arc<Description>, Arc<DescribeError>>;

/// The safetensors file a checkpoint converts to, or why it is not offered as one.
pub type Offered = Result<Arc<Converted>, Arc<str>>;

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
    sources: Sources,
    /// Its descriptor and mapping while open.
    slot: Arc<Slot>,
    noticed: Noticed,
    interpreted: Interpreted,
    integrity: Integrity,
}

/// What has been noticed of a version, and said once.
#[derive(Debug, Default)]
struct Noticed {
    /// Set once an in-place change has been noticed (and warned about).
    changed: AtomicBool,
    /// The kinds of problem with this version already warned about (bits of [`Warning`]).
    warned: AtomicU8,
}

/// What a version holds once interpreted, each read on first use.
#[derive(Debug, Default)]
struct Interpreted {
    /// Its tensors as a file of each format it is asked for (by [`Format::position`]): the one
    /// its name says, and others where names of other formats reach it (hard links, symbolic
    /// links of other names), each read on first use.
    described: [OnceLock<Described>; Format::ALL.len()],
    /// For a valid file of its format: the count and digest of its tensor names
    /// ([`index::digest`]).
    digest: OnceLock<(usize, u64)>,
    /// For an index: what it says, in brief.
    plan: OnceLock<Result<Arc<Plan>, Arc<PlanError>>>,
    /// For a valid checkpoint of another format: what it converts to.
    converted: OnceLock<Option<Offered>>,
}

/// What is known of whether its bytes are the published ones.
#[derive(Debug)]
struct Integrity {
    /// For a weight file, on first use: the SHA-256 its source records (see [`recorded`]).
    recorded: OnceLock<Option<Arc<Recorded>>>,
    /// Under `-o verify`, once its bytes were hashed: whether they are the recorded ones.
    verdict: OnceLock<Verdict>,
}

impl Source {
    /// Opens the file at `entry` (links followed): the version found open, holding its descriptor.
    pub(super) fn open(entry: &Path, sources: &Sources) -> Result<Source, SourceError> {
        let file = open_regular(entry)?;
        let meta = file.metadata().map_err(SourceError::Open)?;
        let version = Version::of(&meta);
        let remote = is_remote(&file);
        let opened = Opened::new(sources.leases().descriptor(file), &version, !remote);
        let path = fs::canonicalize(entry).unwrap_or_else(|_| entry.to_path_buf());
        // Decided once: whether a digest may be recorded for this file at all (a weight file by
        // either name, or a cache blob). Where none can be, it is known now that there is none.
        let recorded = match recorded::worth_looking_up(entry, &path) {
            true => OnceLock::new(),
            false => OnceLock::from(None),
        };
        Ok(Source {
            path,
            entry: entry.to_path_buf(),
            version,
            meta,
            remote,
            sources: sources.clone(),
            slot: Arc::new(Slot::new(Some(Arc::new(opened)), sources.clock().ms())),
            noticed: Noticed::default(),
            interpreted: Interpreted::default(),
            integrity: Integrity {
                recorded,
                verdict: OnceLock::new(),
            },
        })
    }

    /// Counts the source among those open, and leases it (see [`Sources`]): done once it is the
    /// registry's version of its file.
    pub(super) fn track(&self) {
        self.sources.track(&self.slot);
        if let Some(o) = self.slot.current() {
            self.lease(&o);
        }
    }

    /// The SHA-256 that SOURCE records for this file (a cache's blob name, a download's metadata,
    /// a checksum file), looked up on first use: a few small reads beside it, never its bytes.
    /// Only a weight file or a cache blob may have one; any other file has none, known at once.
    pub fn recorded(&self) -> Option<&Arc<Recorded>> {
        self.integrity
            .recorded
            .get_or_init(|| recorded::recorded(&self.entry, &self.path).map(Arc::new))
            .as_ref()
    }

    /// [`Source::recorded`] without looking anything up: `None` until it has been looked up
    /// (never for a file that cannot have a record).
    pub fn recorded_if_known(&self) -> Option<Option<&Arc<Recorded>>> {
        self.integrity.recorded.get().map(Option::as_ref)
    }

    /// The SHA-256 of this version's bytes and of each `(start, len)` span of them, from one pass
    /// front to back (`progress` is told the length of each chunk read): [`ReadError::Changed`]
    /// where the file did not hold this version throughout (truncated, rewritten or replaced),
    /// [`ReadError::Io`] where reading failed.
    pub fn sha256(
        &self,
        spans: &[(u64, u64)],
        progress: &mut dyn FnMut(u64),
    ) -> Result<(Sha256, Vec<Sha256>), ReadError> {
        let opened = self.opened()?;
        let hashed = digest::file(opened.file(), self.len(), spans, progress);
        self.check(&opened, 0, self.len())?;
        if self.moved() {
            return Err(ReadError::changed(&self.path, SourceError::Replaced));
        }
        hashed.map_err(|e| self.read_failed(&e))
    }

    /// Whether this version's bytes were found to be the recorded ones, once hashed.
    pub fn verdict(&self) -> Option<Verdict> {
        self.integrity.verdict.get().copied()
    }

    /// Records what hashing this version found (once: a version's bytes never change).
    pub fn set_verdict(&self, verdict: Verdict) {
        let _ = self.integrity.verdict.set(verdict);
    }

    pub fn len(&self) -> u64 {
        self.version.size
    }

    /// What the daemon's sources share.
    pub(super) fn sources(&self) -> &Sources {
        &self.sources
    }

    pub fn is_empty(&self) -> bool {
        self.version.size == 0
    }

    /// Its bytes, the first `max` of them at most (a small file read whole: a store's descriptor,
    /// the text of a template).
    pub fn bytes(&self, max: u64) -> Result<Vec<u8>, SourceError> {
        let file = self.file_for_read()?;
        let mut out = vec![0; self.version.size.min(max) as usize];
        file.read_exact_at(&mut out, 0)
            .map_err(SourceError::Reopen)?;
        Ok(out)
    }

    /// Its first bytes, as many as a format's magic needs to be told (fewer for a shorter file,
    /// none for one that cannot be read).
    pub fn start(&self) -> Vec<u8> {
        let mut start = vec![0; MAGIC_LEN.min(self.version.size as usize)];
        let read = self.file_for_read().ok().map(|f| f.read_at(&mut start, 0));
        start.truncate(read.and_then(Result::ok).unwrap_or(0));
        start
    }

    /// True the first time only: whoever warns about a problem of this kind with this version
    /// (a rescan that finds the same version again says nothing).
    pub fn first_warning(&self, kind: Warning) -> bool {
        let bit = 1 << kind as u8;
        self.noticed.warned.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// Whether the path this version was found at now holds another version (or nothing): it was
    /// replaced, rewritten, or removed. One `stat`.
    pub fn moved(&self) -> bool {
        fs::metadata(&self.entry).map_or(true, |m| Version::of(&m) != self.version)
    }

    /// Its descriptor and mapping: the ones open, or the file opened again now, if it still holds
    /// this version (else [`ReadError::Changed`]).
    pub fn opened(&self) -> Result<Arc<Opened>, ReadError> {
        self.slot.mark_used(self.sources.clock().ms());
        let (opened, new) = self
            .slot
            .get_or_open(|| {
                let file = self.reopen()?;
                let fd = self.sources.leases().descriptor(file);
                Ok(Opened::new(fd, &self.version, !self.remote))
            })
            .map_err(|e: SourceError| {
                if !self.noticed.changed.swap(true, Ordering::Relaxed) {
                    warn!(
                        "{}: {e}; reads of the old version fail",
                        self.path.display()
                    );
                }
                // A path that no longer opens, or holds other bytes: the version read is gone.
                ReadError::changed(&self.path, e)
            })?;
        if new {
            self.sources.track(&self.slot);
            self.lease(&opened);
        }
        Ok(opened)
    }

    /// Keeps the source open until the returned [`Hold`] is dropped: a client holds one of its
    /// files open.
    pub fn hold(self: &Arc<Self>) -> Hold {
        self.slot.hold();
        Hold(self.clone())
    }

    /// Whether `opened` still holds, up to `end`, the bytes of this version (see
    /// [`Opened::unchanged`]); warns once when it does not.
    pub fn intact(&self, opened: &Opened, end: u64) -> bool {
        let ok = opened.unchanged(end);
        if !ok && !self.noticed.changed.swap(true, Ordering::Relaxed) {
            warn!(
                "{}: changed in place since it was opened (truncated or rewritten); reads of the \
                 old version fail",
                self.path.display()
            );
        }
        ok
    }

    /// Takes a read lease on `opened`, this source's descriptor, if it is local (see
    /// [`Leases`](super::lease::Leases)).
    fn lease(&self, opened: &Opened) {
        if opened.local {
            self.sources
                .leases()
                .take(&opened.fd, || self.intact(opened, self.version.size));
        }
    }

    /// Marks the source used, and fails if `[start, start + len)` no longer holds this version's
    /// bytes (see [`Source::intact`]; nothing to check while `opened` holds a read lease).
    pub(super) fn check(&self, opened: &Opened, start: u64, len: u64) -> Result<(), ReadError> {
        let now = self.sources.clock().ms();
        self.slot.mark_used(now);
        if len > 0 && !opened.fd.leased(now) && !self.intact(opened, start + len) {
            return Err(ReadError::changed(
                &self.path,
                "changed in place since it was opened (truncated or rewritten)",
            ));
        }
        Ok(())
    }

    /// Runs `send` if the read lease on `opened` is held, keeping it held until `send` returns
    /// (see [`Descriptor::while_leased`](super::lease::Descriptor::while_leased)).
    pub(super) fn while_leased<T>(&self, opened: &Opened, send: impl FnOnce() -> T) -> Option<T> {
        let now = self.sources.clock().ms();
        self.slot.mark_used(now);
        opened.fd.while_leased(now, send)
    }

    /// The error for a read of this source that failed (a file cut short included: never a
    /// short reply). Whoever asked for the read reports it.
    pub(super) fn read_failed(&self, e: &std::io::Error) -> ReadError {
        ReadError::io(&self.path, format_args!("read failed: {e}"))
    }

    /// The mapping of `opened`, made on first call, or `None` for an empty file or one whose
    /// filesystem refuses a shared mapping (a FUSE backend with `direct_io` answers ENODEV): that
    /// source is then served with `pread`, which is said once.
    pub(super) fn mapping<'a>(&self, opened: &'a Opened) -> Option<&'a Mmap> {
        opened.map_with(|file| {
            if self.is_empty() || self.slot.unmappable() {
                return None;
            }
            match sys::map_readonly(file) {
                Ok(m) => Some(m),
                Err(e) => {
                    self.slot.set_unmappable();
                    if self.first_warning(Warning::Unmappable) {
                        warn!(
                            "{}: cannot be mapped ({e}); served with pread",
                            self.path.display()
                        );
                    }
                    None
                }
            }
        })
    }

    /// The descriptor's slot, if this source is on a local filesystem and no open or close of it
    /// is in progress (a reader that must not wait does not wait for the lock).
    pub(super) fn local_slot(&self) -> Option<RwLockReadGuard<'_, Option<Arc<Opened>>>> {
        if self.remote {
            return None;
        }
        self.slot.try_peek()
    }

    /// Counts `len` bytes sent from `opened`'s mapping (see [`Sources`]).
    pub(super) fn served(&self, opened: &Opened, len: u64) {
        self.sources.served(opened, len);
    }

    /// The open descriptor, or the file opened again for this one use.
    fn file_for_read(&self) -> Result<FileRef, SourceError> {
        if let Some(o) = self.slot.get() {
            return Ok(FileRef::Open(o));
        }
        self.reopen().map(FileRef::Reopened)
    }

    /// The file at the path it was found at, if it is still this version.
    fn reopen(&self) -> Result<File, SourceError> {
        let file = open_regular(&self.entry).map_err(|e| match e {
            SourceError::Open(e) => SourceError::Reopen(e),
            other => other,
        })?;
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
        self.0.slot.release(self.0.sources.clock().ms());
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
            FileRef::Open(o) => o.file(),
            FileRef::Reopened(f) => f,
        }
    }
}

/// Opens a file for reading without ever blocking (a FIFO swapped in would hang `open`) and checks
/// that what was opened is a regular file.
fn open_regular(path: &Path) -> Result<File, SourceError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(SourceError::Open)?;
    if !file.metadata().map_err(SourceError::Open)?.is_file() {
        return Err(SourceError::NotRegular);
    }
    Ok(file)
}

/// Whether `file` is on a filesystem that may stall, and whose changes made elsewhere inotify
/// never reports (see [`REMOTE`]).
pub fn is_remote(file: &File) -> bool {
    sys::filesystem_type(file).is_some_and(|kind| REMOTE.contains(&kind))
}
