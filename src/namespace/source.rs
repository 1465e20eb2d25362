//! Source files: one [`Source`] per version of a file of SOURCE, and the [`Registry`] that hands
//! out the same `Source` for as long as the file stays unchanged, so that an unchanged file is
//! never opened, mapped or parsed twice.
//!
//! A version is what `stat` says of the file: device, inode, size, mtime and ctime. A file replaced
//! by `rename` (a new inode) or rewritten in place (a new size or mtime) is a new version, with a
//! `Source` of its own; the old `Source` lives on while nodes of an old snapshot use it, and its
//! descriptor and mapping are released with it.
//!
//! Every regular file is opened without ever blocking (a FIFO is never opened) and mapped
//! read-only. Headers and indexes are read with `pread`, never through the mapping. The descriptor
//! is kept for change checks while the process-wide descriptor budget allows, and closed otherwise
//! (a mapping outlives its descriptor).

use std::collections::HashMap;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use log::warn;
use memmap2::Mmap;

use super::ReadError;
use super::sets::{self, Plan};
use crate::format::{self, FormatError, Tensor};
use crate::index::{self, Index};

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

/// One version of a mapped source file.
#[derive(Debug)]
pub struct Source {
    /// Absolute path, links resolved (the `user.safetensors.source` xattr).
    pub path: PathBuf,
    /// The path it was found at (through links), checked again when a file of it is opened.
    entry: PathBuf,
    pub version: Version,
    /// Owner, permissions and times, for the attributes of its files.
    pub meta: Metadata,
    /// `None` for an empty file (nothing to map).
    map: Option<Mmap>,
    /// Kept open (when the descriptor budget allows) to notice an in-place rewrite.
    file: Option<File>,
    /// Set once an in-place change has been noticed (and warned about).
    changed: AtomicBool,
    /// The kinds of problem with this version already warned about (bits of [`Warning`]).
    warned: AtomicU8,
    /// For `.safetensors` files, parsed on first use: the header, or why it is invalid.
    header: OnceLock<Result<Arc<Parsed>, Arc<FormatError>>>,
    /// For a valid header: the count and digest of its tensor names (see [`sets`](super::sets)).
    digest: OnceLock<(usize, u64)>,
    /// For index files, on first use: what the index says, in brief.
    plan: OnceLock<Result<Arc<Plan>, Arc<str>>>,
}

impl Source {
    /// Opens and maps the file at `entry` (links followed): the version found open.
    fn open(entry: &Path) -> Result<Source, String> {
        let file = open_regular(entry).map_err(|e| e.to_string())?;
        let opened = file.metadata().map_err(|e| e.to_string())?;
        let version = Version::of(&opened);
        let map = if opened.len() == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process. The daemon never
            // dereferences it: slices of it are only passed to the kernel (`writev` of a FUSE
            // reply), which reports a page that vanished (source truncated) as EFAULT instead of
            // raising SIGBUS, so later changes to the file cannot cause undefined behaviour here.
            Some(unsafe { Mmap::map(&file) }.map_err(|e| e.to_string())?)
        };
        let keep = take_descriptor();
        Ok(Source {
            path: fs::canonicalize(entry).unwrap_or_else(|_| entry.to_path_buf()),
            entry: entry.to_path_buf(),
            version,
            meta: opened,
            map,
            file: keep.then_some(file),
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
    pub(super) fn index(&self) -> Result<Index, String> {
        let file = self.file_for_read()?;
        read_index(&file, self.version.size)
    }

    /// What this index says, in brief (parsed on first call), or why it is broken.
    pub(super) fn plan(&self) -> &Result<Arc<Plan>, Arc<str>> {
        self.plan.get_or_init(|| {
            self.index()
                .map(|idx| Arc::new(Plan::of(idx)))
                .map_err(Arc::from)
        })
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

    /// The kept descriptor, for kernel passthrough.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Whether the file still holds, up to `end`, the bytes of this version: not shorter, and not
    /// modified since (same mtime). One `fstat`, measured within noise of a read.
    pub fn intact(&self, end: u64) -> bool {
        let Some(file) = &self.file else {
            return true;
        };
        let ok = file.metadata().is_ok_and(|now| {
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

    /// Up to `size` bytes from `offset` of the `len` bytes at `start`, as a slice of the mapping,
    /// once checked against changes.
    pub fn range(&self, start: u64, len: u64, offset: u64, size: u32) -> Result<&[u8], ReadError> {
        let want = size.min(len.saturating_sub(offset).min(u32::MAX as u64) as u32);
        if want == 0 {
            return Ok(&[]);
        }
        let first = start + offset;
        if !self.intact(first + u64::from(want)) {
            return Err(ReadError::SourceChanged);
        }
        Ok(self.bytes(first, u64::from(want)))
    }

    /// Fills `buf` from `start` with `pread` (a copy the daemon may look at: a truncated source
    /// gives an error here, where reading the mapping would raise SIGBUS).
    pub fn read_at(&self, start: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        if !self.intact(start + buf.len() as u64) {
            return Err(ReadError::SourceChanged);
        }
        let file = self.file_for_read().map_err(|_| ReadError::SourceChanged)?;
        file.read_exact_at(buf, start).map_err(|e| {
            warn!("{}: read failed: {e}", self.path.display());
            ReadError::Io
        })
    }

    /// The kept descriptor, or (beyond the descriptor budget) the file reopened and checked to be
    /// this version.
    fn file_for_read(&self) -> Result<FileRef<'_>, String> {
        if let Some(f) = &self.file {
            return Ok(FileRef::Kept(f));
        }
        let reopened = open_regular(&self.entry).map_err(|e| format!("cannot reopen: {e}"))?;
        let now = reopened.metadata().map_err(|e| e.to_string())?;
        if !Version::of(&now).same_bytes(&self.version) {
            return Err("changed since it was found".into());
        }
        Ok(FileRef::Reopened(reopened))
    }

    /// `len` bytes (fewer at the end of the file) from `start`.
    fn bytes(&self, start: u64, len: u64) -> &[u8] {
        let Some(map) = &self.map else {
            return &[];
        };
        let start = start.min(map.len() as u64) as usize;
        let end = (start as u64).saturating_add(len).min(map.len() as u64) as usize;
        &map[start..end]
    }
}

/// A source's descriptor: the one kept, or one opened for a single use.
enum FileRef<'a> {
    Kept(&'a File),
    Reopened(File),
}

impl std::ops::Deref for FileRef<'_> {
    type Target = File;
    fn deref(&self) -> &File {
        match self {
            FileRef::Kept(f) => f,
            FileRef::Reopened(f) => f,
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if self.file.is_some() {
            DESCRIPTORS_LEFT.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Kinds of problem warned about once per version of a file.
#[derive(Debug, Clone, Copy)]
pub enum Warning {
    /// Not a valid safetensors file, or a broken index.
    Invalid,
    /// Its generated directory's name is taken.
    NameTaken,
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
    pub fn get(&mut self, entry: &Path, meta: &Metadata) -> Result<Arc<Source>, String> {
        if let Some(s) = self.live(&Version::of(meta)) {
            return Ok(s);
        }
        let source = Source::open(entry)?;
        if let Some(s) = self.live(&source.version) {
            return Ok(s);
        }
        let source = Arc::new(source);
        self.by_id
            .insert(source.version.id, Arc::downgrade(&source));
        Ok(source)
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

/// Reads an index file (bounded in size) and parses it.
fn read_index(file: &File, len: u64) -> Result<Index, String> {
    if len > index::MAX_INDEX_BYTES {
        return Err(format!(
            "index is {len} bytes, over the limit of {} bytes",
            index::MAX_INDEX_BYTES
        ));
    }
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("cannot read index: {e}"))?;
    index::parse(&bytes)
}

/// Source descriptors that may still be kept open: the soft RLIMIT_NOFILE is raised to the hard
/// limit on first use, and 256 descriptors stay free for everything else.
static DESCRIPTORS_LEFT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Takes one descriptor from the budget, if any is left.
fn take_descriptor() -> bool {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| DESCRIPTORS_LEFT.store(descriptor_budget(), Ordering::Relaxed));
    DESCRIPTORS_LEFT
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

fn descriptor_budget() -> usize {
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
    (lim.rlim_cur as usize).saturating_sub(256)
}
