//! What a reader is given ([`Input`]): the file, its path, the opener of the files it points into,
//! and its format's own setting, parsed once at start-up (see [`super::Settings`]). Nothing a
//! reader needs comes from anywhere else: no process-wide state, so tests can pass any setting.

use std::any::Any;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::description::OpenData;

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
