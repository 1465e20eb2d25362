//! tensormount: mount safetensors files and model directories as read-only trees of raw tensor files.
//!
//! Layers, from the bottom up, each in its own module (`doc/design.md` draws them):
//! - [`format`]: checkpoint formats, each a reader that turns a file into a description of its
//!   tensors (safetensors, validated by the official crate), and the exact widening of narrow
//!   floats and packed blocks ([`format::widen`]), the index of a sharded set
//!   ([`format::set::index`]);
//!   [`names`]: tensor names as file names;
//! - [`source`]: source files opened, interpreted, kept open within bounds, leased and read, owned
//!   by one [`source::Sources`] value;
//! - [`namespace`]: the tree as immutable snapshots, and the writer that turns changes of SOURCE
//!   into new snapshots plus a diff;
//! - `fs` (the filesystem's operations, without fuser) and `fuse` (the translation to and from
//!   the kernel's requests), with `pool` (the threads that serve reads which may wait on storage);
//! - `refresh` and `inotify` (the thread that finds changes and has them applied) and
//!   `invalidate` (diffs turned into kernel cache notifications, on a thread of their own);
//! - `integrity` (tensor digests, and the `-o verify` thread) with `digest` (SHA-256);
//! - [`cli`], `run` and `daemon`: options, the command, mounting, daemonising and signals, with
//!   `listing` (`--list`), `logging` and `notify` (systemd's readiness protocol); `model` (a SOURCE
//!   read whole, for the commands), `verify` and `diff` (the commands beside the mount);
//! - `sys`: every call into the C library, each behind a safe function; [`clock`]: the time the
//!   timers read.

// No panic may reach the FUSE loop: errors are values, mapped to errnos at the adapter.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cli;
pub mod clock;
mod daemon;
mod diff;
mod digest;
pub mod format;
mod fs;
mod fuse;
mod inotify;
mod integrity;
mod invalidate;
mod listing;
mod logging;
mod model;
mod mounts;
pub mod names;
pub mod namespace;
mod notify;
mod parallel;
mod pool;
mod refresh;
pub mod run;
pub mod source;
mod sys;
#[cfg(test)]
mod testing;
mod tuning;
mod unmount;
mod verify;
