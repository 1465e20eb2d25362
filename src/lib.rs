//! tensormount: mount safetensors files and model directories as read-only trees of raw tensor files.
//!
//! Layers, each in its own module:
//! - [`format`]: reads and validates safetensors headers (no FUSE);
//! - [`index`]: parses the index of a sharded set;
//! - [`names`]: tensor names as file names;
//! - [`npy`]: NPY headers for the `-o npy` view;
//! - [`widen`]: exact widening of narrow floats for `-o dtype=f32|f64`;
//! - [`namespace`]: the tree as immutable snapshots, and the writer that turns changes of SOURCE
//!   into new snapshots plus a diff;
//! - [`refresh`] and [`inotify`]: the thread that finds changes and has them applied;
//! - [`fs`]: the thin fuser adapter over the current snapshot;
//! - [`pool`]: the threads that serve reads which may wait on storage;
//! - [`invalidate`]: diffs turned into kernel cache notifications, on a thread of their own;
//! - [`listing`]: `--list` output;
//! - [`cli`] and [`daemon`]: options, mounting, daemonising and signals;
//! - [`logging`] and [`notify`]: where log records go, and systemd's readiness protocol.

// No panic may reach the FUSE loop: errors are values, mapped to errnos at the adapter.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cli;
pub mod daemon;
pub mod format;
pub mod fs;
pub mod index;
pub mod inotify;
pub mod invalidate;
pub mod listing;
pub mod logging;
pub mod names;
pub mod namespace;
pub mod notify;
pub mod npy;
pub mod pool;
pub mod refresh;
pub mod widen;
