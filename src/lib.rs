//! tensormount: mount safetensors files and model directories as read-only trees of raw tensor files.
//!
//! Layers, each in its own module:
//! - [`format`]: reads and validates safetensors headers (no FUSE);
//! - [`index`]: parses the index of a sharded set;
//! - [`names`]: tensor names as file names;
//! - [`namespace`]: the immutable tree built once at mount;
//! - [`fs`]: the thin fuser adapter over that tree;
//! - [`listing`]: `--list` output;
//! - [`cli`] and [`daemon`]: options, mounting, daemonising and signals.

pub mod cli;
pub mod daemon;
pub mod format;
pub mod fs;
pub mod index;
pub mod listing;
pub mod names;
pub mod namespace;
