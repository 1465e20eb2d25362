//! Why a file is not a valid safetensors file: the rule it breaks, as the official crate names
//! it, and what the file seems to be instead where that is a common accident.

use std::fmt;

use ::safetensors::SafeTensorError;

use crate::format::error::Broken;

/// Length of the little-endian header-length prefix of a safetensors file.
pub(super) const PREFIX_LEN: u64 = 8;

/// A rule of the format the file breaks, checked by the official crate.
#[derive(Debug)]
pub enum SafetensorsError {
    /// The crate's error, and what the file looks like instead where that is a common accident
    /// (told in the message in place of the crate's).
    Invalid(SafeTensorError, Option<Accident>),
    /// The file ends before the data its header describes (the crate's `MetadataIncompleteBuffer`,
    /// which it also reports for a file that goes on past its data): `data` bytes of data
    /// described, `present` there.
    Short { data: u64, present: u64 },
}

impl Broken for SafetensorsError {
    fn rule(&self) -> String {
        match self {
            SafetensorsError::Invalid(e, _) => rule_name(e),
            SafetensorsError::Short { .. } => "MetadataIncompleteBuffer".into(),
        }
    }

    fn cut_short(&self) -> bool {
        matches!(
            self,
            SafetensorsError::Short { .. }
                | SafetensorsError::Invalid(
                    SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength,
                    _
                )
        )
    }
}

impl fmt::Display for SafetensorsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SafetensorsError::Invalid(_, Some(accident)) => write!(f, "{accident}"),
            SafetensorsError::Invalid(e, None) => write!(f, "{e}"),
            SafetensorsError::Short { data, present } => write!(
                f,
                "the file ends before its data: {data} bytes described, {present} there"
            ),
        }
    }
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

impl fmt::Display for Accident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Accident::Empty => write!(f, "the file is empty"),
            Accident::TooShort(n) => write!(
                f,
                "the file is only {n} bytes, too short for the 8-byte header length"
            ),
            Accident::EndsInHeader { declared, present } => write!(
                f,
                "the file ends inside its header: {declared} header bytes declared, {present} \
                 there"
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
