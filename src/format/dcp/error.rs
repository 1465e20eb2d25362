//! Why a directory's `.metadata` is not a DCP checkpoint this reader shows: the rule it breaks, by
//! a short name, and what was found, naming the item, the chunk or the data file involved (never
//! the `.metadata` itself: the caller names that).

use std::fmt;

use crate::format::error::Broken;

/// The rules a DCP checkpoint breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `.metadata` (or an item's archive) names a global that is not on the allow-list: loading
    /// it with torch would import and may call it. Nothing was run.
    UnsafePickle,
    /// `.metadata` is no pickle this reader reads (the pickle machine's rule is said).
    Pickle,
    /// `.metadata` unpickles, but not to torch's `Metadata` of DCP classes as torch writes them.
    NotMetadata,
    /// A chunk or object with no storage in `storage_data`.
    NoStorage,
    /// A storage whose `relative_path` is absolute, has a `..` in it, or names no file.
    BadLocation,
    /// A data file that is missing, not a regular file, or cannot be read.
    DataFile,
    /// A chunk's bytes end past the end of its data file.
    ChunkPastFile,
    /// A chunk with `transform_descriptors` (compressed or otherwise transformed bytes).
    Transformed,
    /// Chunks past the tensor's bounds, overlapping, or leaving a hole.
    Coverage,
    /// A chunk's archive that is not one `torch.save` of one tensor of the chunk's dtype and
    /// sizes.
    ChunkArchive,
    /// More chunks, or larger sizes, than any checkpoint has.
    TooLarge,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::UnsafePickle => "UnsafePickle",
            Rule::Pickle => "Pickle",
            Rule::NotMetadata => "NotMetadata",
            Rule::NoStorage => "NoStorage",
            Rule::BadLocation => "BadLocation",
            Rule::DataFile => "DataFile",
            Rule::ChunkPastFile => "ChunkPastFile",
            Rule::Transformed => "Transformed",
            Rule::Coverage => "Coverage",
            Rule::ChunkArchive => "ChunkArchive",
            Rule::TooLarge => "TooLarge",
        }
    }
}

/// Why a DCP checkpoint is not shown: the rule, what was found, and whether a file ends too soon
/// (what a checkpoint still being written looks like).
#[derive(Debug)]
pub struct DcpError {
    pub rule: Rule,
    pub what: String,
    pub cut_short: bool,
}

impl DcpError {
    pub fn new(rule: Rule, what: impl Into<String>) -> DcpError {
        DcpError {
            rule,
            what: what.into(),
            cut_short: false,
        }
    }

    /// The same error, what was found told by `f` (to name the item it was found in).
    pub fn map_what(mut self, f: impl FnOnce(String) -> String) -> DcpError {
        self.what = f(self.what);
        self
    }
}

impl fmt::Display for DcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl Broken for DcpError {
    fn rule(&self) -> String {
        self.rule.name().into()
    }

    fn cut_short(&self) -> bool {
        self.cut_short
    }

    /// A data file missing or unreadable, too short for a chunk, or holding another archive than
    /// the metadata says: a checkpoint copied with its `.metadata` first (`cp -r`, `rsync`), or
    /// a data file replaced, is read again as its data files arrive.
    fn in_other_file(&self) -> bool {
        matches!(
            self.rule,
            Rule::DataFile | Rule::ChunkPastFile | Rule::ChunkArchive
        )
    }
}
