//! The command: its options ([`cli`]), what it runs ([`run`]: the mount, or a subcommand), and the
//! subcommands beside the mount, which read a SOURCE whole ([`model`]): `--list` ([`list`]),
//! `verify` and `diff`.

pub mod cli;
pub(crate) mod diff;
pub(crate) mod list;
pub(crate) mod model;
pub mod run;
pub(crate) mod verify;
