//! Why a file is not a valid file of its format: the rule it breaks, as the reference
//! implementation names it, and what the file seems to be instead where that is a common accident.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use ::safetensors::SafeTensorError;

/// Length of the little-endian header-length prefix of a safetensors file.
pub(super) const PREFIX_LEN: u64 = 8;

/// Why a file is not a valid file of its format: an I/O error, each reader's own error (the
/// safetensors reader's `Invalid` and `Short`, checked by the official crate; `Pytorch`, `Gguf`,
/// `Onnx`), or a file of another kind than its name says (`Foreign`).
#[derive(Debug)]
pub enum FormatError {
    /// The file could not be read.
    Io(PathBuf, io::Error),
    /// The file breaks a rule of the format, as the official crate names it, and what the file
    /// looks like instead where that is a common accident (told in the message before the rule).
    Invalid(PathBuf, SafeTensorError, Option<Accident>),
    /// The file ends before the data its header describes (the crate's `MetadataIncompleteBuffer`,
    /// which it also reports for a file that goes on past its data): `data` bytes of data
    /// described, `present` there.
    Short {
        path: PathBuf,
        data: u64,
        present: u64,
    },
    /// A PyTorch checkpoint that cannot be read (the PyTorch reader's error): the rule it breaks (a short name, as the
    /// crate's rules have), what was found, and whether it ends too soon (what a file still being
    /// written looks like).
    Pytorch {
        path: PathBuf,
        rule: super::pytorch::Rule,
        what: String,
        cut_short: bool,
    },
    /// A GGUF file that breaks a rule of its format.
    Gguf(PathBuf, super::gguf::GgufError),
    /// An ONNX model that breaks a rule of its format.
    Onnx(PathBuf, super::onnx::OnnxError),
    /// Not a checkpoint of a kind tensormount reads (a `.bin` of something else, by its first
    /// bytes): mirrored as it is, and no error.
    Foreign(PathBuf),
}

/// What a file that is not safetensors seems to be: the usual ways a wrong file ends up with the
/// name, told in plain words because the format's rule alone (`HeaderTooLarge` for a Git LFS
/// pointer) does not say what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accident {
    /// Zero bytes.
    Empty,
    /// Fewer bytes than the 8-byte length prefix.
    TooShort(u64),
    /// The file ends inside the header it declares.
    EndsInHeader { declared: u64, present: u64 },
    /// A Git LFS pointer: the repository was cloned without fetching the large files.
    LfsPointer,
    /// HTML or XML: a server's error page saved in place of the download.
    Markup,
    /// JSON text, e.g. an index or config saved under the name.
    Json,
    /// A ZIP archive: what `torch.save` writes (`.bin`, `.pt`).
    Zip,
    /// A Python pickle: an older PyTorch checkpoint.
    Pickle,
    /// A GGUF file (llama.cpp's format).
    Gguf,
}

impl Accident {
    /// What a file that breaks a framing rule (its first 8 bytes are no usable header length)
    /// seems to be, if anything known. `start` is its first bytes, `file_len` its whole size,
    /// `declared` the header length its prefix gives.
    ///
    /// Other formats are only recognised in files whose prefix is too large a length: the start
    /// of a file cut short, or of one whose header is cut short, is a plausible length (60 is
    /// `<` and seven zero bytes), not text.
    pub(super) fn of(
        start: &[u8],
        file_len: u64,
        declared: u64,
        e: &SafeTensorError,
    ) -> Option<Accident> {
        match e {
            SafeTensorError::HeaderTooSmall if file_len == 0 => Some(Accident::Empty),
            SafeTensorError::HeaderTooSmall => Some(Accident::TooShort(file_len)),
            SafeTensorError::InvalidHeaderLength => Some(Accident::EndsInHeader {
                declared,
                present: file_len.saturating_sub(PREFIX_LEN),
            }),
            SafeTensorError::HeaderTooLarge => Accident::foreign(start),
            _ => None,
        }
    }

    /// The format a file's first bytes show, among those commonly saved as `.safetensors` by
    /// mistake.
    fn foreign(start: &[u8]) -> Option<Accident> {
        let text = start.trim_ascii_start();
        if start.starts_with(b"version https://git-lfs.github.com/spec/") {
            Some(Accident::LfsPointer)
        } else if text.starts_with(b"<") {
            Some(Accident::Markup)
        } else if text.starts_with(b"{") || text.starts_with(b"[") {
            Some(Accident::Json)
        } else if start.starts_with(b"PK\x03\x04") {
            Some(Accident::Zip)
        } else if start.starts_with(b"GGUF") {
            Some(Accident::Gguf)
        } else if matches!(start, [0x80, 2..=5, ..]) {
            Some(Accident::Pickle)
        } else {
            None
        }
    }
}

/// The guess at the cause added to the messages of files that end too soon.
const CUT_SHORT: &str = "cut short by an interrupted download or copy, or a full disk?";

impl fmt::Display for Accident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Accident::Empty => write!(f, "the file is empty ({CUT_SHORT})"),
            Accident::TooShort(n) => write!(
                f,
                "the file is only {n} bytes, too short for the 8-byte header length ({CUT_SHORT})"
            ),
            Accident::EndsInHeader { declared, present } => write!(
                f,
                "the file ends inside its header: {declared} header bytes declared, {present} \
                 there ({CUT_SHORT})"
            ),
            Accident::LfsPointer => f.write_str(
                "this is a Git LFS pointer, not the file's contents: run `git lfs pull` in its \
                 repository to download them",
            ),
            Accident::Markup => f.write_str(
                "this is an HTML or XML page, not a safetensors file: likely a server's error \
                 page saved by a failed download; download the file again",
            ),
            Accident::Json => f.write_str(
                "this is JSON text, not a safetensors file (an index or config file saved under \
                 this name?)",
            ),
            Accident::Zip => f.write_str(
                "this is a ZIP archive, not a safetensors file: likely a PyTorch checkpoint \
                 written by torch.save; convert it to safetensors",
            ),
            Accident::Pickle => f.write_str(
                "this is a Python pickle, not a safetensors file: likely an old PyTorch \
                 checkpoint; convert it to safetensors",
            ),
            Accident::Gguf => {
                f.write_str("this is a GGUF file (llama.cpp's format), not a safetensors file")
            }
        }
    }
}

impl FormatError {
    /// The reason without the path (for the `user.safetensors.error` xattr): what is wrong in
    /// plain words, then the crate's rule in brackets.
    pub fn reason(&self) -> String {
        let reason = match self {
            FormatError::Io(_, e) => format!("cannot read: {e}"),
            FormatError::Invalid(_, e, Some(accident)) => format!("{accident} [{}]", rule_name(e)),
            FormatError::Invalid(_, e, None) => format!("{e} [{}]", rule_name(e)),
            FormatError::Short { data, present, .. } => format!(
                "the file ends before its data: {data} bytes described, {present} there \
                 ({CUT_SHORT}) [MetadataIncompleteBuffer]"
            ),
            FormatError::Pytorch {
                rule,
                what,
                cut_short,
                ..
            } => {
                let guess = if *cut_short {
                    format!(" ({CUT_SHORT})")
                } else {
                    String::new()
                };
                format!("{what}{guess} [{rule}]")
            }
            FormatError::Gguf(_, e) => format!("{e} [{}]", e.rule()),
            FormatError::Onnx(_, e) => match e.cut_short() {
                true => format!("{e} ({CUT_SHORT}) [{}]", e.rule()),
                false => format!("{e} [{}]", e.rule()),
            },
            FormatError::Foreign(_) => "not a PyTorch checkpoint".into(),
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

    /// The crate's name for the rule the file breaks (none for an I/O error).
    pub fn rule(&self) -> Option<String> {
        match self {
            FormatError::Io(..) => None,
            FormatError::Invalid(_, e, _) => Some(rule_name(e)),
            FormatError::Short { .. } => Some("MetadataIncompleteBuffer".into()),
            FormatError::Pytorch { rule, .. } => Some(rule.name().into()),
            FormatError::Gguf(_, e) => Some(e.rule().into()),
            FormatError::Onnx(_, e) => Some(e.rule().into()),
            FormatError::Foreign(_) => None,
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io(p, _)
            | FormatError::Invalid(p, ..)
            | FormatError::Short { path: p, .. }
            | FormatError::Pytorch { path: p, .. }
            | FormatError::Gguf(p, _)
            | FormatError::Onnx(p, _)
            | FormatError::Foreign(p) => p,
        }
    }

    /// Whether the file ends too soon for the length prefix, the header, or the data: what a file
    /// still being written looks like.
    pub fn cut_short(&self) -> bool {
        match self {
            FormatError::Gguf(_, e) => return e.cut_short(),
            FormatError::Onnx(_, e) => return e.cut_short(),
            _ => {}
        }
        matches!(
            self,
            FormatError::Short { .. }
                | FormatError::Pytorch {
                    cut_short: true,
                    ..
                }
                | FormatError::Invalid(
                    _,
                    SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength,
                    _
                )
        )
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for FormatError {}

/// The crate's name for the rule an error breaks (its variant name, e.g. `HeaderTooLarge`). The
/// match is exhaustive: a rule the crate adds fails the build here until it is named.
pub fn rule_name(e: &SafeTensorError) -> String {
    use SafeTensorError as E;
    match e {
        E::InvalidHeader(_) => "InvalidHeader",
        E::InvalidHeaderDeserialization(_) => "InvalidHeaderDeserialization",
        E::HeaderTooLarge => "HeaderTooLarge",
        E::HeaderTooSmall => "HeaderTooSmall",
        E::InvalidHeaderLength => "InvalidHeaderLength",
        E::TensorNotFound(_) => "TensorNotFound",
        E::TensorInvalidInfo => "TensorInvalidInfo",
        E::InvalidOffset(_) => "InvalidOffset",
        E::IoError(_) => "IoError",
        E::JsonError(_) => "JsonError",
        E::InvalidTensorView(..) => "InvalidTensorView",
        E::MetadataIncompleteBuffer => "MetadataIncompleteBuffer",
        E::ValidationOverflow => "ValidationOverflow",
        E::MisalignedSlice => "MisalignedSlice",
    }
    .to_string()
}
