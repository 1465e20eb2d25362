//! [`Settings`]: every format's own `-o NAME=VALUE`, each parsed by its format once, before any
//! file is read, and handed to that format's reader in its [`Input`](super::Input).

use std::any::Any;

use super::formats::Format;
use super::input::Parsed;

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
