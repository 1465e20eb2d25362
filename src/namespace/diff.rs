//! [`Diff`]: what a refresh changed, for the kernel's caches and the refresh thread's watches.

use std::path::PathBuf;
use std::sync::Arc;

use super::node::Ino;

#[derive(Debug, Default)]
pub struct Diff {
    /// The generation of the snapshot this diff leads to.
    pub generation: u64,
    /// Names that no longer lead to the inode they led to (removed, or replaced by another).
    pub removed: Vec<Removed>,
    /// Directories whose entries or attributes changed.
    pub changed_dirs: Vec<Ino>,
    /// Every inode no longer in the tree.
    pub detached: Vec<Ino>,
    /// Directories of SOURCE that entered the tree, and those that left it.
    pub new_dirs: Vec<Ino>,
    pub gone_dirs: Vec<Ino>,
    /// The directories read again.
    pub rescanned: Vec<PathBuf>,
    /// Names added, and names replaced by a new inode.
    pub added: usize,
    pub replaced: usize,
}

/// A name in `parent` that no longer leads to `ino`.
#[derive(Debug, Clone)]
pub struct Removed {
    pub parent: Ino,
    pub name: Arc<[u8]>,
    pub ino: Ino,
}

impl Diff {
    /// Whether the tree changed at all.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.changed_dirs.is_empty() && self.added == 0
    }
}
