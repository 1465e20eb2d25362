//! Source files: how the daemon opens, interprets, keeps open and reads the files of SOURCE. Below
//! the namespace, which only says which source and span a file shows; knows nothing of FUSE.
//!
//! - [`sources`]: [`Sources`], the one value the daemon makes that owns what sources share: the
//!   open set and its cap, the idle closer, served pages, leases, the clock, progress;
//! - [`file`]: [`Source`], one version of a file, with what it holds once interpreted;
//! - [`registry`]: the same `Source` for a file as long as it is unchanged;
//! - [`opened`]: a source's descriptor and mapping while it is open;
//! - [`lease`]: read leases, which spare reads the check that their source is unchanged;
//! - [`decoded`]: the read path's cache of decoded chunks (`-o decode_cache=`);
//! - [`gather`]: where bytes that are not one stretch of their source lie;
//! - [`read`]: the one read path, waiting on storage or not;
//! - [`version`]: which file, and which version of it;
//! - [`recorded`]: the SHA-256 the source records for a weight file, found without reading it;
//! - [`error`]: this layer's errors.

mod decoded;
mod error;
mod file;
mod gather;
mod lease;
mod opened;
mod read;
mod recorded;
mod registry;
mod sliced;
mod sources;
#[cfg(test)]
mod tests;
mod version;

pub use error::{DescribeError, PlanError, ReadError, SourceError};
pub use file::{Hold, Parse, Source, Warning, is_remote};
pub use gather::Stored;
pub use lease::SIGNAL as LEASE_SIGNAL;
pub use opened::Opened;
pub use read::{Body, Out, Piece, Reading, Wait};
pub use recorded::{How, Recorded, Verdict};
pub use registry::Registry;
pub use sources::{Config, Sources};
pub use version::{FileId, Version};
