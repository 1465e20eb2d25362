//! Why a request fails: [`FsError`], the errno's kind, and for an `EIO` or `ESTALE` its
//! [`Cause`], which the FUSE adapter logs.

use std::fmt;
use std::path::PathBuf;

use crate::source::ReadError;

/// Why a request fails; [`fuse`](crate::fuse) gives each its errno, and logs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// No such entry, or an inode the daemon does not know.
    NotFound,
    NotDir,
    IsDir,
    /// An inode that left the tree, a source that changed under a followed mount.
    Stale(Cause),
    /// A write, or any change of the tree.
    ReadOnly,
    /// `readlink` of something that is not a link.
    NotLink,
    /// An extended attribute of a namespace the mount does not serve (`security.`, `trusted.`).
    OtherNamespace,
    /// No such extended attribute.
    NoAttribute,
    /// `lseek` to data or a hole at or past the end of the file.
    PastEnd,
    /// Reading the source failed, or changed under a frozen mount.
    Io(Cause),
}

/// What made a request fail with [`FsError::Stale`] or [`FsError::Io`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The inode is no longer in the tree (its file changed, or left SOURCE).
    LeftTree,
    /// Its source is gone, or now holds another version than the one the tree was built from.
    Moved(PathBuf),
    /// A read of its source: the file, and what went wrong.
    Read(ReadError),
    /// `-o verify` found the bytes of its source not to be the recorded ones.
    Mismatch(PathBuf),
    /// Every read-pool thread is busy and its queue is full.
    Busy,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::LeftTree => f.write_str("no longer in the tree"),
            Cause::Moved(p) => write!(
                f,
                "{}: removed or replaced since the tree was built",
                p.display()
            ),
            Cause::Read(e) => write!(f, "{e}"),
            Cause::Mismatch(p) => write!(
                f,
                "{}: not the recorded bytes (SHA-256 mismatch under -o verify)",
                p.display()
            ),
            Cause::Busy => f.write_str("every read-pool thread is busy and its queue is full"),
        }
    }
}
