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
    /// Set once an in-place change has been noticed (and warned about).
    changed: AtomicBool,
    /// The kinds of problem with this version already warned about (bits of [`Warning`]).
    warned: AtomicU8,
    /// Its tensors as a file of each format (by [`Format::position`]), read on first use. A file is
    /// only ever asked for the one format its name says.
    described: [OnceLock<Described>; Format::ALL.len()],
    /// For a valid file of its format: the count and digest of its tensor names
    /// ([`index::digest`]).
    digest: OnceLock<(usize, u64)>,
    /// For an index, on first use: what it says, in brief.
    plan: OnceLock<Result<Arc<Plan>, Arc<PlanError>>>,
    /// For a valid checkpoint of another format, on first use: what it converts to.
    converted: OnceLock<Option<Offered>>,
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
            changed: AtomicBool::new(false),
            warned: AtomicU8::new(0),
            described: Default::default(),
            digest: OnceLock::new(),
            plan: OnceLock::new(),
            converted: OnceLock::new(),
            recorded,
            verdict: OnceLock::new(),
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
        self.recorded
            .get_or_init(|| recorded::recorded(&self.entry, &self.path).map(Arc::new))
            .as_ref()
    }

    /// [`Source::recorded`] without looking anything up: `None` until it has been looked up
    /// (never for a file that cannot have a record).
    pub fn recorded_if_known(&self) -> Option<Option<&Arc<Recorded>>> {
        self.recorded.get().map(Option::as_ref)
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
        self.verdict.get().copied()
    }

    /// Records what hashing this version found (once: a version's bytes never change).
    pub fn set_verdict(&self, verdict: Verdict) {
        let _ = self.verdict.set(verdict);
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

    /// Its tensors as a file of `format` (read on first call), or why it has none.
    pub fn describe(&self, format: Format) -> &Described {
        self.describe_in(format, None)
    }

    /// Whether a description of it failed on another file it names (see
    /// [`crate::format::FormatError::in_other_file`]), which may have changed since while this
    /// version did not: the registry then opens it again, and the new source reads it again.
    pub fn read_again(&self) -> bool {
        self.described.iter().any(|d| {
            matches!(d.get(), Some(Err(e)) if matches!(&**e, DescribeError::Invalid(f) if f.in_other_file()))
        })
    }

    /// [`Source::describe`], the data files its reader opens (if it is read now) looked for in
    /// `dir`, the directory it is claimed in (which a file reached through links has several of),
    /// else where it was found.
    pub fn describe_in(&self, format: Format, dir: Option<&Path>) -> &Described {
        self.described[format.position()].get_or_init(|| {
            let unreadable = |e| DescribeError::Unreadable(self.path.clone(), e);
            let file = self.file_for_read().map_err(unreadable)?;
            let open = |name: &str| self.open_beside(dir, name);
            let mut input = Input::new(&file, &self.path, &open);
            if let Some(setting) = self.sources.settings().of(format) {
                input = input.with_setting(setting);
            }
            let description = format.read(input).map_err(DescribeError::Invalid)?;
            Ok(Arc::new(description))
        })
    }

    /// Opens the file `name` beside this one (in `dir`, else where it was found) for its reader:
    /// only below SOURCE, links followed only while they stay there (`EXDEV` for one that
    /// leaves it); nothing where SOURCE is a single file.
    fn open_beside(&self, dir: Option<&Path>, name: &str) -> std::io::Result<File> {
        let outside = || std::io::Error::from_raw_os_error(libc::EXDEV);
        let root = self.sources.root().ok_or_else(outside)?;
        let dir = dir.or(self.entry.parent()).ok_or_else(outside)?;
        let path = dir.join(name);
        let rel = path.strip_prefix(&root).map_err(|_| outside())?;
        match sys::open_beneath(&root, rel) {
            // A kernel before 5.6: the file itself, no link followed.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path),
            opened => opened,
        }
    }

    /// The safetensors file this valid file of `format` converts to, or why it is not offered as
    /// one; `None` for a safetensors file, or one that is not valid.
    pub fn converted(&self, format: Format) -> Option<&Offered> {
        self.converted
            .get_or_init(|| {
                let wanted = self.describe(format).as_ref().ok()?.conversion.as_ref()?;
                Some(match wanted {
                    Ok(conversion) => Converted::of(conversion)
                        .map(Arc::new)
                        .map_err(|e| Arc::from(format!("not offered as safetensors: {e}"))),
                    Err(why) => Err(Arc::from(why.to_string())),
                })
            })
            .as_ref()
    }

    /// The file parsed as an index, or why it is broken. Parsed anew on each call: an index of a
    /// large set is megabytes of memory; what is kept of it is its [`Plan`].
    pub fn index(&self) -> Result<Index, PlanError> {
        let file = self.file_for_read().map_err(PlanError::Unreadable)?;
        index::read(&file, self.version.size).map_err(PlanError::Invalid)
    }

    /// What this index says, in brief (parsed on first call), or why it is broken.
    pub fn plan(&self) -> &Result<Arc<Plan>, Arc<PlanError>> {
        self.plan.get_or_init(|| {
            self.index()
                .map(|idx| Arc::new(Plan::of(idx)))
                .map_err(Arc::new)
        })
    }

    /// Whether it has been interpreted as `what`.
    pub fn is_parsed(&self, what: Parse) -> bool {
        match what {
            Parse::Tensors(format) => self.described[format.position()].get().is_some(),
            Parse::Index => self.plan.get().is_some(),
        }
    }

    /// Interprets it as `what` now, for later use (claimed in the directory `dir`), and counts the
    /// call to the source.
    pub fn parse(&self, what: Parse, dir: &Path) {
        match what {
            Parse::Tensors(format) => {
                let _ = self.describe_in(format, Some(dir));
            }
            Parse::Index => {
                let _ = self.plan();
            }
        }
        self.sources.step();
    }

    /// The count and digest of the tensor names of this file of `format` (none if it is not
    /// valid).
    pub fn digest(&self, format: Format) -> (usize, u64) {
        *self.digest.get_or_init(|| match self.describe(format) {
            Ok(d) => index::digest(d.tensors.iter().map(|t| &*t.name)),
            Err(_) => (0, 0),
        })
    }

    /// Where the data its tensors' offsets are relative to starts (0 before it is described, or
    /// if it is not valid).
    pub fn data_start(&self) -> u64 {
        self.described
            .iter()
            .find_map(|d| Some(d.get()?.as_ref().ok()?.data_start))
            .unwrap_or(0)
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

    /// The format it was described in, if it has valid tensors.
    pub fn format(&self) -> Option<Format> {
        Format::ALL
            .into_iter()
            .zip(&self.described)
            .find_map(|(f, d)| d.get()?.as_ref().ok().map(|_| f))
    }

    /// What its reader found it to be (`safetensors`, `pytorch-zip`, ...), if it has valid
    /// tensors.
    pub fn kind(&self) -> Option<&'static str> {
        self.described
            .iter()
            .find_map(|d| Some(d.get()?.as_ref().ok()?.kind))
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
                if !self.changed.swap(true, Ordering::Relaxed) {
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
        if !ok && !self.changed.swap(true, Ordering::Relaxed) {
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
