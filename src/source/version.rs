//! Which file, and which version of it: what `stat` says of a file of SOURCE.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

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
