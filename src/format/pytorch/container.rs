//! What every container of a checkpoint gives the reader ([`Container`]: its main pickle and where
//! each storage lies), and the errors a container's reader reports.

use std::collections::HashMap;
use std::path::Path;

use super::pickle::{self, PickleError};
use crate::format::error::FormatError;

/// Largest pickle read into memory.
pub(super) const MAX_PICKLE: u64 = 1 << 30;

/// Where a storage's bytes lie in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub start: u64,
    pub len: u64,
}

/// A checkpoint's container, read: its main pickle, the storages' places, and the dangerous
/// globals of all its pickles.
pub(super) struct Container {
    pub kind: &'static str,
    pub main: pickle::Pickle,
    pub storages: HashMap<String, Span>,
    pub dangerous: Vec<String>,
}

/// An error of the checkpoint at `path`: the rule it breaks, what was found, and whether it ends
/// too soon.
pub(super) fn checkpoint(
    path: &Path,
    rule: &'static str,
    what: impl Into<String>,
    cut_short: bool,
) -> FormatError {
    FormatError::Checkpoint {
        path: path.to_path_buf(),
        rule,
        what: what.into(),
        cut_short,
    }
}

/// A pickle error, as the file's: `part` names the pickle (`data.pkl`, ...).
pub(super) fn pickle_error(path: &Path, part: &str, e: PickleError) -> FormatError {
    checkpoint(path, e.rule, format!("{part}: {e}"), e.cut_short())
}

/// Runs the pickle at the start of `bytes` (`part` names it, for messages).
pub(super) fn load(path: &Path, part: &str, bytes: &[u8]) -> Result<pickle::Pickle, FormatError> {
    pickle::load(bytes).map_err(|e| pickle_error(path, part, e))
}
