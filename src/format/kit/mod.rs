//! Codecs several formats share, each with its own typed error and none of a format's rules: a
//! format that uses one maps its errors to its own.
//!
//! - [`pickle`]: the pickle machine that runs nothing, its values and its text, with the
//!   allow-list of globals passed in by the format that reads a pickle;
//! - [`zip`]: a zip archive's directory, read record by record as torch's reader (miniz) reads
//!   it, with [`zip::ZipError`];
//! - [`npy`]: NPY headers, written (`-o npy`) and parsed (a `.npz` member's);
//! - [`notes`]: what a reader notes of a file, capped.

pub(crate) mod notes;
pub mod npy;
pub(crate) mod pickle;
pub(crate) mod zip;
