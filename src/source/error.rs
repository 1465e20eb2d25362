//! The source layer's errors: a file that cannot be opened (again) as the version found, one whose
//! contents cannot be interpreted, and a read that cannot be answered.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::FormatError;
use crate::format::set::index::IndexError;

/// Why a source file cannot be used: opened, or opened again as the version found.
#[derive(Debug)]
pub enum SourceError {
    /// Opening it (or `stat` of what was opened) failed.
    Open(io::Error),
    /// What its path leads to is not a regular file (a FIFO swapped in, a directory).
    NotRegular,
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
            SourceError::NotRegular => f.write_str("not a regular file"),
            SourceError::Reopen(e) => write!(f, "cannot reopen: {e}"),
            SourceError::Replaced => f.write_str("replaced since it was found"),
            SourceError::Changed => {
                f.write_str("changed in place since it was found (truncated or rewritten)")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// Why a file's tensors cannot be described: it cannot be read again, or it is not a valid file
/// of its format. The message starts with the file's path.
#[derive(Debug)]
pub enum DescribeError {
    Unreadable(PathBuf, SourceError),
    Invalid(FormatError),
}

impl DescribeError {
    /// The reason without the path (for the `user.safetensors.error` xattr).
    pub fn reason(&self) -> String {
        match self {
            DescribeError::Unreadable(_, e) => format!("cannot read: {e}"),
            DescribeError::Invalid(e) => e.reason(),
        }
    }

    /// Whether the file is simply of another kind than its name suggests: nothing to report.
    pub fn is_foreign(&self) -> bool {
        matches!(self, DescribeError::Invalid(e) if e.is_foreign())
    }

    /// Whether the file ends too soon: what a file still being written looks like.
    pub fn cut_short(&self) -> bool {
        match self {
            DescribeError::Unreadable(..) => false,
            DescribeError::Invalid(e) => e.cut_short(),
        }
    }
}

impl fmt::Display for DescribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescribeError::Unreadable(path, _) => {
                write!(f, "{}: {}", path.display(), self.reason())
            }
            DescribeError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DescribeError {}

/// Why an index cannot be used: it cannot be read again, or it is broken. The message leaves the
/// path out: whoever reports it adds it.
#[derive(Debug)]
pub enum PlanError {
    Unreadable(SourceError),
    Invalid(IndexError),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Unreadable(e) => write!(f, "cannot read index: {e}"),
            PlanError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlanError {}

/// Why a read of a source cannot be answered, with a message that names the file and the cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The source was truncated, modified in place or replaced since this version was found.
    Changed(Arc<str>),
    /// Reading the source failed.
    Io(Arc<str>),
}

impl ReadError {
    pub fn changed(path: &Path, why: impl fmt::Display) -> ReadError {
        ReadError::Changed(format!("{}: {why}", path.display()).into())
    }

    pub fn io(path: &Path, why: impl fmt::Display) -> ReadError {
        ReadError::Io(format!("{}: {why}", path.display()).into())
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Changed(m) | ReadError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReadError {}
