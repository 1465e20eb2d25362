//! Why a file is not a valid file of its format, whichever the format: it cannot be read, it
//! breaks a rule of its format (each reader's own typed error, behind [`Broken`]), or it is a file
//! of another kind than its name says.

use std::any::Any;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why a file is not a valid file of its format.
#[derive(Debug)]
pub enum FormatError {
    /// The file could not be read.
    Io(PathBuf, io::Error),
    /// The file breaks a rule of its format: its reader's own error.
    Invalid(PathBuf, Box<dyn Broken>),
    /// Not a checkpoint of a kind tensormount reads (a `.bin` of something else, by its first
    /// bytes): mirrored as it is, and no error.
    Foreign(PathBuf),
}

/// A reader's own error: what is wrong in plain words (its `Display`), the rule it breaks, as the
/// format's reference implementation names it where it has names, and whether the file merely ends
/// too soon.
pub trait Broken: fmt::Display + fmt::Debug + Send + Sync + Any {
    /// The rule's name (`HeaderTooLarge`, `UnsafePickle`, `DataPastEnd`).
    fn rule(&self) -> String;
    /// Whether the file ends too soon for what it declares: what a file still being written
    /// looks like.
    fn cut_short(&self) -> bool;
    /// Whether what is wrong lies in another file the file names (a data file missing, too
    /// short, or not what the file says), which may yet change while the file stays the same:
    /// the file is read again once that file's directory changes.
    fn in_other_file(&self) -> bool {
        false
    }
}

/// The guess at the cause added to the messages of files that end too soon.
const CUT_SHORT: &str = "cut short by an interrupted download or copy, or a full disk?";

impl FormatError {
    /// The error of the file at `path` that breaks a rule of its format.
    pub fn invalid(path: &Path, e: impl Broken) -> FormatError {
        FormatError::Invalid(path.to_path_buf(), Box::new(e))
    }

    /// The reason without the path (for the error xattr): what is wrong in plain words, a guess at
    /// the cause for a file cut short, then the rule in brackets.
    pub fn reason(&self) -> String {
        let reason = match self {
            FormatError::Io(_, e) => format!("cannot read: {e}"),
            FormatError::Invalid(_, e) if e.cut_short() => {
                format!("{e} ({CUT_SHORT}) [{}]", e.rule())
            }
            FormatError::Invalid(_, e) => format!("{e} [{}]", e.rule()),
            FormatError::Foreign(_) => "not a file of the format its name says".into(),
        };
        // One line, whatever the names in it hold (a tensor named `a\nb`).
        if reason.contains(char::is_control) {
            return reason
                .chars()
                .map(|c| match c.is_control() {
                    true => c.escape_debug().to_string(),
                    false => c.to_string(),
                })
                .collect();
        }
        reason
    }

    /// Whether the file is simply of another kind than its name suggests (see
    /// [`FormatError::Foreign`]): nothing to report.
    pub fn is_foreign(&self) -> bool {
        matches!(self, FormatError::Foreign(_))
    }

    /// The name of the rule the file breaks (none for an I/O error).
    pub fn rule(&self) -> Option<String> {
        match self {
            FormatError::Invalid(_, e) => Some(e.rule()),
            FormatError::Io(..) | FormatError::Foreign(_) => None,
        }
    }

    /// The reader's own error, if the file breaks a rule of a format whose errors are `T`s.
    pub fn broken<T: Broken>(&self) -> Option<&T> {
        match self {
            FormatError::Invalid(_, e) => (&**e as &dyn Any).downcast_ref(),
            _ => None,
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io(p, _) | FormatError::Invalid(p, _) | FormatError::Foreign(p) => p,
        }
    }

    /// Whether the file ends too soon for what it declares: what a file still being written
    /// looks like.
    pub fn cut_short(&self) -> bool {
        matches!(self, FormatError::Invalid(_, e) if e.cut_short())
    }

    /// Whether what is wrong lies in another file the file names (see [`Broken::in_other_file`]).
    pub fn in_other_file(&self) -> bool {
        matches!(self, FormatError::Invalid(_, e) if e.in_other_file())
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for FormatError {}
