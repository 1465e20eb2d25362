//! Checkpoint formats: how a file becomes a [`Description`] of its tensors. Knows nothing of FUSE,
//! of sources that change, or of how the mount lays tensors out.
//!
//! - [`description`]: the shape every reader produces (tensors with dtype, shape and byte range,
//!   and metadata), and which format a file's name says;
//! - [`converted`]: the safetensors file a checkpoint of another format converts to, laid out
//!   as the official writer lays it out;
//! - [`formats`]: the boundary: each format one value ([`Format`]) that declares its names, its
//!   reader, its conversion and where its errors and metadata are shown;
//! - [`dtype`]: the element types of every format, packed blocks included, and [`widen`]: the
//!   exact widening of their values to float32 or float64 (`-o dtype=`);
//! - [`safetensors`]: the safetensors reader, validated by the official crate, with its one-pass
//!   reader of the header's JSON;
//! - [`pytorch`]: the reader of `torch.save` checkpoints (zip and legacy), whose pickle is
//!   interpreted without running any of it;
//! - [`onnx`]: the reader of ONNX models, whose protobuf is walked by `pread`, never read whole;
//! - [`kit`]: codecs several formats share (the pickle machine, the zip directory, NPY headers,
//!   notes), none of them a format's;
//! - [`input`] and [`settings`]: what a reader is given, and the formats' own options, parsed once;
//! - [`set`]: sets of files (an index and its shards, numbered shards): their names, the index
//!   parsed;
//! - [`error`]: why a file is not valid, with the rule it breaks.

mod claims;
mod converted;
mod dcp;
mod description;
mod dtype;
mod error;
mod formats;
pub mod gguf;
pub mod half;
mod input;
pub mod kit;
mod listing;
mod ollama;
mod onnx;
mod pattern;
mod pytorch;
mod safetensors;
pub mod set;
mod settings;
pub mod widen;

pub use converted::{Converted, Part};
pub use description::{
    ChunkAt, Computed, Conversion, Decode, Description, MAX_SLICES, NotOffered, OpenData, ReadAt,
    Reads, Seen, Split, Tensor,
};
pub use dtype::{Block, Dtype};
pub use error::{Broken, FormatError};
pub use formats::{
    DCP, Format, GGUF, OLLAMA, ONNX, PYTORCH, Role, SAFETENSORS, Setting, Store, conversion_key,
};
pub use input::Input;
pub use listing::{Listed, Listing};
pub use pattern::{Beside, MAGIC_LEN};
pub use safetensors::rule_name;
pub use set::{IndexName, Numbered};
pub use settings::Settings;
