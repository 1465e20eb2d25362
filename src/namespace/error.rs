//! [`BuildError`]: what stops a mount (or `--list`), or, with `-o strict`, a file that would only
//! be warned about otherwise. Each message starts with the path of the file at fault.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::sets::SetError;
use crate::source::{DescribeError, SourceError};

/// A tree larger than this is refused: symbolic links (to `/`, or several to one large directory)
/// can make a mirror grow without bound.
pub const MAX_NODES: usize = 1 << 24;

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
    Invalid(Arc<DescribeError>),
    /// With `strict`, at mount: a file of SOURCE is not a valid safetensors file.
    NoTensorsDir(Arc<DescribeError>),
    /// With `strict`, at mount: the set of the index `index` is refused, so its merged directory
    /// `dir` is not shown.
    NoMergedDir {
        index: PathBuf,
        dir: String,
        why: Arc<SetError>,
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
