//! The namespace: what the mount shows, as immutable [`Snapshot`]s (inodes, names, attributes,
//! xattrs and the byte range behind every file), and how a changing source turns into new
//! snapshots plus a [`Diff`].
//!
//! - [`source`]: one [`Source`] per version of a source file, reused while the file is unchanged;
//! - [`opened`]: sources opened on demand, capped, and closed when idle;
//! - [`lease`]: read leases that spare reads the check that their source is unchanged;
//! - [`scan`]: what one source directory holds, and which files are still being written;
//! - [`claims`]: which generated directory wins a name;
//! - [`sets`]: sharded sets, their indexes checked against their shards;
//! - [`layout`]: the files of a tensor directory (flat or tree, NPY views, `__metadata__`);
//! - [`draft`]: a directory's wanted content, before inode numbers;
//! - [`commit`]: drafts merged into the previous snapshot, reusing inode numbers by identity;
//! - [`writer`]: the whole build at mount and the rescans after it;
//! - [`live`]: the published snapshot, the kernel's lookup counts and the entries it still holds.
//!
//! Inode numbers are never reused during a mount, and the bytes behind an inode never change: a
//! file whose source changes becomes a new inode. Unchanged entries keep theirs.
//!
//! The daemon never reads mapped source bytes itself: [`Source::send`] only hands slices of a
//! mapping to the FUSE adapter, which passes them to the kernel, so a source truncated later gives
//! the reader an error instead of killing the daemon with SIGBUS. The copies it makes (the tensor
//! bytes after an NPY header, sources that cannot be mapped) are read with `pread`, for the same
//! reason.

mod claims;
mod commit;
mod draft;
mod layout;
pub mod lease;
mod live;
mod opened;
mod parallel;
mod scan;
mod sets;
mod source;
mod table;
mod writer;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::format::{Dtype, FormatError, Tensor};
use crate::npy;
use crate::widen::{Target, Widening};

pub use live::Namespace;
pub use opened::{Opened, start_closer};
pub use parallel::progress;
pub use sets::SetError;
pub use source::{FileId, Hold, Source, SourceError, Version, is_remote};
pub use writer::{Diff, Removed, Writer};

use table::Table;

/// Inode number; the root is 1.
pub type Ino = u64;
pub const ROOT: Ino = 1;

/// The name of the file holding a header's `__metadata__` (a key the format reserves).
pub const METADATA_FILE: &str = "__metadata__";

/// With `layout=tree`: the name of a tensor inside the directory of the same name (a tensor whose
/// name is also a prefix of others, like bitsandbytes' `weight` beside `weight.absmax`).
pub const TENSOR_FILE: &str = "__tensor__";

/// The suffix of the NPY view of a tensor (`-o npy`).
pub const NPY_SUFFIX: &str = ".npy";

/// The kernel's limits on extended attributes (XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_LIST_MAX).
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
const XATTR_LIST_MAX: usize = 65536;

const XATTR_PREFIX: &str = "user.safetensors.";

/// A tree larger than this is refused: symbolic links (to `/`, or several to one large directory)
/// can make a mirror grow without bound.
const MAX_NODES: usize = 1 << 24;

/// Why a read cannot be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    NotFound,
    IsDir,
    /// The source was truncated or modified in place since this version was found.
    SourceChanged,
    /// Reading the source failed.
    Io,
}

/// What a read sends (see [`Node::read`]).
#[derive(Debug)]
pub enum Reading<'a> {
    /// Bytes the daemon has.
    Bytes(&'a [u8]),
    /// `head`, then the `len` bytes at `start` of `source`.
    Source {
        source: &'a Arc<Source>,
        head: Vec<u8>,
        start: u64,
        len: u64,
    },
    /// `head`, then presented bytes `[offset, offset + len)` of a widened tensor whose stored
    /// bytes start at `start` of `source` (see [`Widening`]).
    Widened {
        source: &'a Arc<Source>,
        head: Vec<u8>,
        widening: Widening,
        start: u64,
        offset: u64,
        len: u64,
    },
}

/// The dtype and size a tensor is presented with: widened, or as stored.
pub fn presented(tensor: &Tensor, widen: Option<Widening>) -> (Dtype, u64) {
    match widen {
        Some(w) => (w.target().dtype(), w.presented_len(tensor.size())),
        None => (tensor.dtype, tensor.size()),
    }
}

/// `size` bytes of `bytes` from `offset`, fewer at the end.
fn window(bytes: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = offset.min(bytes.len() as u64) as usize;
    let end = start + (size as usize).min(bytes.len() - start);
    &bytes[start..end]
}

/// A fatal problem: the mount (or `--list`) cannot go on. Each message starts with the path of
/// the file at fault.
#[derive(Debug)]
pub enum BuildError {
    /// SOURCE cannot be resolved, or `stat` of it failed.
    Source(PathBuf, io::Error),
    /// A directory of SOURCE cannot be read (SOURCE itself; the others are skipped).
    ReadDir(PathBuf, io::Error),
    /// SOURCE, a file, cannot be opened.
    Open(PathBuf, SourceError),
    /// SOURCE is neither a regular file nor a directory.
    NotFileOrDir(PathBuf),
    /// SOURCE, a file, is not a valid safetensors file.
    Invalid(Arc<FormatError>),
    /// With `strict`, at mount: a file of SOURCE is not a valid safetensors file.
    NoTensorsDir(Arc<FormatError>),
    /// With `strict`, at mount: the set of the index `index` is refused, so its merged directory
    /// `dir` is not shown.
    NoMergedDir {
        index: PathBuf,
        dir: String,
        why: SetError,
    },
    /// The tree reached [`MAX_NODES`] entries at this directory (symbolic links?).
    TooManyDirs(PathBuf),
    /// The entries of this file's (or index's) tensor directory would take the tree over
    /// [`MAX_NODES`].
    TooManyNodes(PathBuf),
    /// `layout=tree` would make over [`MAX_NODES`] entries of this file's (or index's) tensors.
    TreeTooLarge(PathBuf),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Source(p, e) => write!(f, "{}: {e}", p.display()),
            BuildError::ReadDir(p, e) => write!(f, "{}: cannot read directory: {e}", p.display()),
            BuildError::Open(p, e) => write!(f, "{}: {e}", p.display()),
            BuildError::NotFileOrDir(p) => {
                write!(f, "{}: not a regular file or directory", p.display())
            }
            BuildError::Invalid(e) => write!(f, "{e}"),
            BuildError::NoTensorsDir(e) => write!(f, "{e} (no .tensors directory)"),
            BuildError::NoMergedDir { index, dir, why } => {
                write!(f, "{}: {why} (no {dir} directory)", index.display())
            }
            BuildError::TooManyDirs(p) => write!(
                f,
                "{}: the tree has over {MAX_NODES} entries; do symbolic links pull in a large \
                 tree?",
                p.display()
            ),
            BuildError::TooManyNodes(p) => write!(
                f,
                "{}: the tree would have over {MAX_NODES} entries",
                p.display()
            ),
            BuildError::TreeTooLarge(p) => write!(
                f,
                "{}: layout=tree would make over {MAX_NODES} entries",
                p.display()
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// How to build the tree.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fail on any invalid safetensors file or broken index instead of warning (at mount).
    pub strict: bool,
    /// How tensor files are laid out in each `NAME.tensors/` directory.
    pub layout: Layout,
    /// Also show each tensor numpy can describe as `NAME.npy`.
    pub npy: bool,
    /// `-o dtype=`: narrower floats are presented widened to this type.
    pub widen: Option<Target>,
    /// A file seen changing in place is interpreted only once unchanged for this long.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            strict: false,
            layout: Layout::Flat,
            npy: false,
            widen: None,
            settle: Duration::from_secs(1),
        }
    }
}

/// How tensor files are laid out in a tensor directory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One file per tensor, named after the whole tensor name.
    #[default]
    Flat,
    /// Tensor names split on `.` and `/` into nested directories.
    Tree,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

/// What `stat` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: Kind,
    pub size: u64,
    /// Permission bits (never any write bit).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: SystemTime,
    pub nlink: u32,
}

/// A file or directory of a snapshot. Cheap to clone: its parts are shared.
#[derive(Debug, Clone)]
pub struct Node {
    /// Shared with the tensor's name when the file name is the tensor name itself.
    pub name: Arc<[u8]>,
    pub parent: Ino,
    pub attr: Attr,
    pub content: Content,
}

/// Extended attributes of a directory, by full name.
pub type Xattrs = BTreeMap<String, String>;

/// No extended attributes: one allocation shared by every directory that has none (most).
fn no_xattrs() -> Arc<Xattrs> {
    static NONE: std::sync::OnceLock<Arc<Xattrs>> = std::sync::OnceLock::new();
    NONE.get_or_init(Arc::default).clone()
}

#[derive(Debug, Clone)]
pub enum Content {
    /// Behind an `Arc`, so that the file variants (most nodes) stay small.
    Dir(Arc<Dir>),
    /// A mirrored file: the whole source, and why it is not what its name claims, if it is not.
    Mirror {
        source: Arc<Source>,
        error: Option<Arc<str>>,
    },
    /// One tensor of a source, widened if `widen` says so (`-o dtype=`).
    Tensor {
        source: Arc<Source>,
        tensor: Arc<Tensor>,
        widen: Option<Widening>,
    },
    /// One tensor of a source after a synthesized NPY header (the file size minus the presented
    /// tensor size), widened if `widen` says so.
    Npy {
        source: Arc<Source>,
        tensor: Arc<Tensor>,
        widen: Option<Widening>,
    },
    /// Generated bytes (the `__metadata__` JSON).
    Generated(Arc<[u8]>),
    /// A symbolic link of SOURCE kept as a link: its target, as written.
    Link(Arc<[u8]>),
}

#[derive(Debug, PartialEq)]
pub struct Dir {
    /// Sorted by the bytes of their names.
    pub children: Box<[Ino]>,
    pub xattrs: Arc<Xattrs>,
    pub origin: Origin,
}

/// Where a directory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A directory of SOURCE (mirrored).
    Real(FileId),
    /// Made by tensormount: `NAME.tensors/`, a merged set, a directory of the tree layout, or the
    /// root of a single-file mount.
    Generated,
}

impl Node {
    pub fn dir(&self) -> Option<&Dir> {
        match &self.content {
            Content::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// The source whose bytes this file shows.
    pub fn source(&self) -> Option<&Arc<Source>> {
        match &self.content {
            Content::Mirror { source, .. }
            | Content::Tensor { source, .. }
            | Content::Npy { source, .. } => Some(source),
            _ => None,
        }
    }

    /// What a read of up to `size` bytes from `offset` sends: bytes the daemon has, or a range of
    /// a source (see [`Source::send`]), after the NPY header's bytes for the start of an NPY view.
    pub fn read<'a>(&'a self, offset: u64, size: u32) -> Result<Reading<'a>, ReadError> {
        let widened = |source: &'a Arc<Source>,
                       tensor: &Tensor,
                       widening: Widening,
                       offset: u64,
                       head: Vec<u8>| {
            let presented = widening.presented_len(tensor.size());
            let len = u64::from(size)
                .saturating_sub(head.len() as u64)
                .min(presented.saturating_sub(offset));
            Reading::Widened {
                source,
                head,
                widening,
                start: source.data_start() + tensor.begin,
                offset: offset.min(presented),
                len,
            }
        };
        let range = |source: &'a Arc<Source>, start: u64, len: u64, offset: u64, head: Vec<u8>| {
            let want = u64::from(size)
                .saturating_sub(head.len() as u64)
                .min(len.saturating_sub(offset));
            Reading::Source {
                source,
                head,
                start: start + offset.min(len),
                len: want,
            }
        };
        Ok(match &self.content {
            Content::Mirror { source, .. } => range(source, 0, self.attr.size, offset, Vec::new()),
            Content::Tensor {
                source,
                tensor,
                widen: None,
            } => range(
                source,
                source.data_start() + tensor.begin,
                tensor.size(),
                offset,
                Vec::new(),
            ),
            Content::Tensor {
                source,
                tensor,
                widen: Some(w),
            } => widened(source, tensor, *w, offset, Vec::new()),
            Content::Npy {
                source,
                tensor,
                widen,
            } => {
                let start = source.data_start() + tensor.begin;
                let (dtype, presented) = presented(tensor, *widen);
                let header_len = self.attr.size - presented;
                let (offset, head) = if offset >= header_len {
                    (offset - header_len, Vec::new())
                } else {
                    let header = npy::header_as(dtype, tensor).ok_or(ReadError::NotFound)?;
                    (0, window(&header, offset, size).to_vec())
                };
                match widen {
                    None => range(source, start, tensor.size(), offset, head),
                    Some(w) => widened(source, tensor, *w, offset, head),
                }
            }
            Content::Generated(bytes) => Reading::Bytes(window(bytes, offset, size)),
            Content::Dir(_) => return Err(ReadError::IsDir),
            // The kernel follows a link rather than read it.
            Content::Link(_) => return Err(ReadError::NotFound),
        })
    }

    /// The names of the extended attributes, in a stable order.
    pub fn xattr_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        match &self.content {
            Content::Tensor { tensor, widen, .. } | Content::Npy { tensor, widen, .. } => {
                for key in ["dtype", "shape", "data_offsets", "offset", "source", "name"] {
                    if key != "name" || tensor.name.len() <= XATTR_SIZE_MAX {
                        names.push(format!("{XATTR_PREFIX}{key}"));
                    }
                }
                if widen.is_some() {
                    names.push(format!("{XATTR_PREFIX}source_dtype"));
                }
                if matches!(self.content, Content::Npy { .. }) {
                    names.push(format!("{XATTR_PREFIX}npy_header_len"));
                }
            }
            Content::Dir(d) => names.extend(d.xattrs.keys().cloned()),
            Content::Mirror { error: Some(_), .. } => names.push(format!("{XATTR_PREFIX}error")),
            Content::Mirror { error: None, .. } | Content::Generated(_) | Content::Link(_) => {}
        }
        names
    }

    /// The value of one extended attribute, or `None` if there is no such attribute.
    pub fn xattr(&self, name: &str) -> Option<Vec<u8>> {
        let key = name.strip_prefix(XATTR_PREFIX)?;
        let value = match &self.content {
            Content::Tensor {
                source,
                tensor,
                widen,
            }
            | Content::Npy {
                source,
                tensor,
                widen,
            } => match key {
                "dtype" => format!("{:?}", presented(tensor, *widen).0),
                "source_dtype" if widen.is_some() => tensor.dtype_name(),
                "shape" => tensor.shape_json(),
                "data_offsets" => format!("[{},{}]", tensor.begin, tensor.end),
                "offset" => (source.data_start() + tensor.begin).to_string(),
                "source" => return Some(source.path.as_os_str().as_bytes().to_vec()),
                "name" if tensor.name.len() <= XATTR_SIZE_MAX => tensor.name.to_string(),
                "npy_header_len" if matches!(self.content, Content::Npy { .. }) => {
                    (self.attr.size - presented(tensor, *widen).1).to_string()
                }
                _ => return None,
            },
            Content::Dir(d) => d.xattrs.get(name)?.clone(),
            Content::Mirror { error: Some(e), .. } if key == "error" => e.to_string(),
            _ => return None,
        };
        Some(value.into_bytes())
    }
}

/// One state of the whole tree. Immutable once published; each request works on one.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    nodes: Table,
    generation: u64,
    source_bytes: u64,
}

/// One tensor as `--list` shows it.
pub struct Listed<'a> {
    pub path: String,
    pub tensor: &'a Tensor,
    /// How it is presented, if widened (`-o dtype=`).
    pub widen: Option<Widening>,
    pub source: &'a Path,
    pub offset: u64,
}

impl Snapshot {
    pub fn node(&self, ino: Ino) -> Option<&Node> {
        self.nodes.get(ino)
    }

    /// Counts the refreshes applied: 0 for the tree built at mount.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The children of a directory, sorted by name.
    pub fn children(&self, ino: Ino) -> Option<&[Ino]> {
        Some(&self.node(ino)?.dir()?.children)
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Option<Ino> {
        let children = self.children(parent)?;
        let i = children
            .binary_search_by(|&c| self.name_of(c).cmp(name))
            .ok()?;
        Some(children[i])
    }

    fn name_of(&self, ino: Ino) -> &[u8] {
        self.node(ino).map_or(&[][..], |n| &n.name[..])
    }

    /// Up to `size` bytes of a file from `offset`, copied (see [`Node::read`]): for tests and
    /// fuzzing, which compare bytes; the FUSE adapter sends them without a copy instead.
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<Vec<u8>, ReadError> {
        match self
            .node(ino)
            .ok_or(ReadError::NotFound)?
            .read(offset, size)?
        {
            Reading::Bytes(b) => Ok(b.to_vec()),
            Reading::Source {
                source,
                head,
                start,
                len,
            } => {
                let mut out = Vec::new();
                source.send(&head, start, len, |b| out.extend_from_slice(b))?;
                Ok(out)
            }
            Reading::Widened {
                source,
                head,
                widening,
                start,
                offset,
                len,
            } => {
                let mut out = Vec::new();
                source.send_widened(&head, widening, start, offset, len, |b| {
                    out.extend_from_slice(b)
                })?;
                Ok(out)
            }
        }
    }

    pub fn xattr_names(&self, ino: Ino) -> Vec<String> {
        self.node(ino).map(Node::xattr_names).unwrap_or_default()
    }

    pub fn xattr(&self, ino: Ino, name: &str) -> Option<Vec<u8>> {
        self.node(ino)?.xattr(name)
    }

    /// Total size of all sources, for `statfs`.
    pub fn source_bytes(&self) -> u64 {
        self.source_bytes
    }

    pub fn node_count(&self) -> u64 {
        self.nodes.len() as u64
    }

    /// The nearest directory of SOURCE at or above `ino` (the root for a single-file mount): the
    /// directory to rescan when `ino` looks out of date.
    pub fn real_dir_of(&self, mut ino: Ino) -> Ino {
        while let Some(node) = self.node(ino) {
            if ino == ROOT || matches!(node.dir().map(|d| d.origin), Some(Origin::Real(_))) {
                return ino;
            }
            ino = node.parent;
        }
        ROOT
    }

    /// Every tensor file, in path order, for `--list`.
    pub fn list(&self) -> Vec<Listed<'_>> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((ino, path)) = stack.pop() {
            let Some(node) = self.node(ino) else {
                continue;
            };
            match &node.content {
                Content::Dir(d) => {
                    for &c in d.children.iter().rev() {
                        let name = String::from_utf8_lossy(self.name_of(c));
                        let child = if path.is_empty() {
                            name.into_owned()
                        } else {
                            format!("{path}/{name}")
                        };
                        stack.push((c, child));
                    }
                }
                Content::Tensor {
                    source,
                    tensor,
                    widen,
                } => out.push(Listed {
                    path,
                    tensor,
                    widen: *widen,
                    source: &source.path,
                    offset: source.data_start() + tensor.begin,
                }),
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod tests;
