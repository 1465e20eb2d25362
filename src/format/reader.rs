//! The reader boundary: every checkpoint format is one module that turns a file into a
//! [`Description`], and this is the one place that chooses among them. A new format adds a
//! [`Format`] variant and its arm here; the namespace lays out whatever a description holds.

use std::fs::File;
use std::path::Path;

use super::description::{Description, Format};
use super::error::FormatError;
use super::{pytorch, safetensors};

/// Reads `file` (whose path is `path`, for messages) as a file of `format`.
pub fn describe(format: Format, file: &File, path: &Path) -> Result<Description, FormatError> {
    match format {
        Format::Safetensors => safetensors::describe(file, path),
        Format::Pytorch => pytorch::describe(file, path),
    }
}
