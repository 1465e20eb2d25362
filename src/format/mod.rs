//! Checkpoint formats: how a file becomes a [`Description`] of its tensors. Knows nothing of FUSE,
//! of sources that change, or of how the mount lays tensors out.
//!
//! - [`description`]: the shape every reader produces (tensors with dtype, shape and byte range,
//!   and metadata), and which format a file's name says;
//! - [`converted`]: the safetensors file a checkpoint of another format converts to, laid out
//!   as the official writer lays it out;
//! - [`reader`]: the boundary: one function that reads a file of any format;
//! - [`safetensors`]: the safetensors reader, validated by the official crate, with [`entries`],
//!   its one-pass reader of the header's JSON;
//! - [`pytorch`]: the reader of `torch.save` checkpoints (zip and legacy), whose pickle is
//!   interpreted without running any of it;
//! - [`error`]: why a file is not valid, with the rule it breaks.

mod converted;
mod description;
mod entries;
mod error;
mod pytorch;
mod reader;
mod safetensors;

pub use converted::{Converted, Part, converted_stem};
pub use description::{Description, Dtype, Format, Tensor};
pub use error::{Accident, FormatError, rule_name};
pub use reader::describe;
