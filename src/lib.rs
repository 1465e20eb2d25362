//! tensormount: mount model directories and checkpoints (safetensors, PyTorch, GGUF, ONNX, DCP,
//! ollama stores) as read-only trees of raw tensor files, each with a virtual safetensors file.
//!
//! Layers, from the bottom up, each a folder (`doc/design.md` draws them):
//! - [`base`]: plain helpers that use nothing of the crate: the C library behind safe functions,
//!   the clock, SHA-256, calls made several at a time;
//! - [`format`]: checkpoint formats, each a reader that turns a file into a description of its
//!   tensors, with the codecs they share ([`format::kit`]) and the registry that declares them;
//! - [`source`]: source files opened, interpreted, kept open within bounds, leased and read (with
//!   the cache of decoded chunks), owned by one [`source::Sources`] value;
//! - [`namespace`]: the tree as immutable snapshots, and the writer that turns changes of SOURCE
//!   into new snapshots plus a diff;
//! - `fs` (the filesystem's operations, without fuser, with the read pool and `-o verify`) and
//!   `fuse` (the translation to and from the kernel's requests);
//! - `refresh` (the thread that finds changes and has them applied, with inotify and the kernel
//!   notifications of `invalidate`);
//! - `daemon` (mounting, daemonising, signals, the log, systemd's readiness, auto-unmount) and
//!   [`command`] (the options, the command, and `--list`, `verify` and `diff` beside the mount).

// No panic may reach the FUSE loop: errors are values, mapped to errnos at the adapter.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod base;
pub mod command;
mod daemon;
pub mod format;
mod fs;
mod fuse;
pub mod namespace;
mod refresh;
pub mod source;
