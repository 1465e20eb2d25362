//! How the tree is built ([`Options`], from `-o`), and how a problem with one file is treated
//! ([`Policy`]: a warning, or at mount with `-o strict` the end of the mount).

use std::time::Duration;

use log::warn;

use super::error::BuildError;
use crate::format::widen::Target;
use crate::format::{Beside, Format};

/// `-o settle=`'s default: long enough for a writer's pause between two writes of one file,
/// short enough that a finished file appears at once to a person watching.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Fail on any invalid safetensors file or broken index instead of warning (at mount).
    pub strict: bool,
    /// How tensor files are laid out in each `NAME.tensors/` directory.
    pub layout: Layout,
    /// Also show each tensor numpy can describe as `NAME.npy`.
    pub npy: bool,
    /// `-o dtype=`: narrower floats are presented widened to this type.
    pub widen: Option<Target>,
    /// A file seen changing in place is interpreted only once unchanged for this long.
    pub settle: Duration,
    /// The formats turned off (`-o pickle=off`, `-o gguf=off`): their files are plain mirrored
    /// files, with no tensor directory and no conversion.
    pub off: Vec<Format>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            strict: false,
            layout: Layout::Flat,
            npy: false,
            widen: None,
            settle: DEFAULT_SETTLE,
            off: Vec::new(),
        }
    }
}

impl Options {
    /// The format a file's name says, with its stem (see [`Format::of`]), among the formats read.
    pub fn format_of<'a>(&self, file_name: &'a [u8]) -> Option<(Format, &'a [u8])> {
        Format::of(file_name).filter(|(f, _)| self.reads(*f))
    }

    /// [`Options::format_of`] of a file among others (see [`Format::of_among`]).
    pub fn format_among<'a>(
        &self,
        file_name: &'a [u8],
        beside: &Beside<'_>,
    ) -> Option<(Format, &'a [u8])> {
        Format::of_among(file_name, beside).filter(|(f, _)| self.reads(*f))
    }

    /// Whether files of `format` are interpreted.
    pub fn reads(&self, format: Format) -> bool {
        !self.off.contains(&format)
    }
}

/// How tensor files are laid out in a tensor directory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One file per tensor, named after the whole tensor name.
    #[default]
    Flat,
    /// Tensor names split on `.` and `/` into nested directories.
    Tree,
}

/// The options, and whether the tree is being built at mount (where `strict` applies) or rebuilt
/// after it.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    pub options: &'a Options,
    pub mounting: bool,
}

impl<'a> Policy<'a> {
    pub fn new(options: &'a Options, mounting: bool) -> Policy<'a> {
        Policy { options, mounting }
    }

    /// A problem with one file: a warning, or at mount with `-o strict` the end of the mount.
    pub fn reject(&self, e: BuildError) -> Result<(), BuildError> {
        if self.options.strict && self.mounting {
            return Err(e);
        }
        warn!("{e}");
        Ok(())
    }
}
