//! What a reader is given ([`Input`]): the file, its path, the opener of the files it points into,
//! and its format's own setting, parsed once at start-up ([`Settings`]). Nothing a reader needs
//! comes from anywhere else: no process-wide state, so tests can pass any setting.

use std::any::Any;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::description::OpenData;
use super::formats::Format;

/// A setting's value once parsed: the type its format's reader asks [`Input::setting`] for.
pub type Parsed = Arc<dyn Any + Send + Sync>;

/// One file to read, and all its reader may use.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub file: &'a File,
    /// Its path, for messages.
    pub path: &'a Path,
    /// Opens the data files the file names (see [`OpenData`]).
    pub open: &'a OpenData<'a>,
    /// The format's own `-o NAME=VALUE`, parsed; `None` where it was not given.
    pub(super) setting: Option<&'a (dyn Any + Send + Sync)>,
}

impl<'a> Input<'a> {
    /// The input of a file read with its format's default setting.
    pub fn new(file: &'a File, path: &'a Path, open: &'a OpenData<'a>) -> Input<'a> {
        Input {
            file,
            path,
            open,
            setting: None,
        }
    }

    /// The same input with `setting` as the format's own setting.
    pub fn with_setting(self, setting: &'a (dyn Any + Send + Sync)) -> Input<'a> {
        Input {
            setting: Some(setting),
            ..self
        }
    }

    /// The format's own setting, if it was given, as the type its parser made.
    pub fn setting<T: 'static>(&self) -> Option<&'a T> {
        self.setting?.downcast_ref()
    }
}

/// Every format's own setting (`-o NAME=VALUE`), each parsed by its format once, before any file is
/// read (see [`super::Setting`]).
/// Each keeps the value it was parsed from, by which two settings compare.
#[derive(Clone, Default)]
pub struct Settings(Vec<(Format, String, Parsed)>);

impl Settings {
    /// Parses `value` as the own setting of `format` (its last value wins), by that format's
    /// parser: the error names the option.
    pub fn set(&mut self, format: Format, value: &str) -> Result<(), String> {
        let Some(s) = format.setting() else {
            return Err(format!("{format:?} has no setting of its own"));
        };
        let parsed =
            (s.parse)(value).map_err(|e| format!("mount option `{}={value}`: {e}", s.name))?;
        self.0.retain(|(f, ..)| *f != format);
        self.0.push((format, value.to_string(), parsed));
        Ok(())
    }

    /// The setting of `format`, if one was given.
    pub fn of(&self, format: Format) -> Option<&(dyn Any + Send + Sync)> {
        self.0
            .iter()
            .find(|(f, ..)| *f == format)
            .map(|(.., parsed)| &**parsed)
    }
}

impl PartialEq for Settings {
    fn eq(&self, other: &Settings) -> bool {
        let values = |s: &Settings| {
            s.0.iter()
                .map(|(f, v, _)| (*f, v.clone()))
                .collect::<Vec<_>>()
        };
        values(self) == values(other)
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(format, value, _)| (format, value)))
            .finish()
    }
}
