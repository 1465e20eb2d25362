//! Sets: one model kept as several files of a format, its *shards*. A set is named either by an
//! *index* (`NAME.safetensors.index.json`, `pytorch_model.bin.index.json`: the one file the word
//! "index" means, mapping each tensor to its shard) or by the shards' own names in a *numbered*
//! set (`NAME-00001-of-00003.gguf`, no index). Its tensors are shown together in one *merged*
//! directory; where its shards convert to safetensors, an *index of conversions* names the
//! converted shards as Hugging Face names them.
//!
//! Here: what the names say ([`IndexName`], [`Numbered`]) and the index parsed ([`index`]). The
//! namespace's `sets` checks a set against its shards and makes its merged directory and its index
//! of conversions.

pub mod index;
mod names;

pub use names::{IndexName, Numbered};
