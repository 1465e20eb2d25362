//! The namespace: what the mount shows, as immutable [`Snapshot`]s (inodes, names, attributes,
//! xattrs and the span of a source behind every file), and how a changing source turns into new
//! snapshots plus a [`Diff`]. Model and builder only: opening and reading sources is the
//! [`source`](crate::source) layer's job, talking to the kernel the adapter's.
//!
//! The model:
//! - [`node`]: what an inode is, with its attributes;
//! - [`xattrs`]: the one table of extended attributes;
//! - [`reading`]: what a read of a file sends (a [`Reading`](crate::source::Reading));
//! - [`table`] and [`snapshot`]: one state of the tree;
//! - [`live`]: the published snapshot, the kernel's lookup counts and the entries it still holds;
//! - [`diff`]: what a refresh changed.
//!
//! The builder, driven by [`writer`]:
//! - [`scan`]: what one source directory holds, and which files are still being written;
//! - [`real`]: a directory's mirrored entries; [`single`]: a single-file SOURCE;
//! - [`generated`]: its generated directories, with [`claims`] (who gets a name), [`sets`]
//!   (a set checked against its shards: an index's, or numbered shards without one; and its index
//!   of conversions), [`data_files`] (the other files a
//!   description's tensors lie in), [`tensor_dirs`] (the tensor directories built) and
//!   [`layout`] (the files of a tensor directory, each tensor an [`entry`]);
//! - [`draft`], [`record`] and [`commit`]: a directory's wanted content, what was scanned, and
//!   drafts merged into the previous snapshot, reusing inode numbers by identity;
//! - [`options`] and [`error`]: how to build, and what stops a build.

mod claims;
mod commit;
mod data_files;
mod diff;
mod draft;
mod entry;
mod error;
mod generated;
mod layout;
mod live;
pub mod names;
mod node;
mod options;
mod reading;
mod real;
mod record;
mod scan;
mod sets;
mod single;
mod snapshot;
mod stores;
mod table;
mod tensor_dirs;
mod writer;
mod xattrs;

pub use diff::{Diff, Removed};
pub use entry::lies_in;
pub use error::BuildError;
pub use layout::{METADATA_FILE, NPY_SUFFIX, TENSOR_FILE};
pub use live::Namespace;
pub use node::{
    Attr, Content, Dir, FileError, Ino, Kind, Node, Origin, ROOT, presented, presented_name,
};
pub use options::{DEFAULT_SETTLE, Layout, Options};
pub use reading::{NotReadable, ReadAllError, tensor_bytes};
pub use sets::SetError;
pub use single::format_of as single_file_format;
pub use snapshot::{Listed, Snapshot, SnapshotReadError};
pub use stores::unreferenced_blobs;
pub use writer::Writer;
pub use xattrs::PREFIX as XATTR_PREFIX;

#[cfg(test)]
mod tests;
