//! Why a file is not an ONNX model this reader reads: the rule it breaks, by a short name, and
//! what was found, naming the message or tensor involved (never the file: the caller names that).

use std::fmt;

use crate::format::error::Broken;
use std::io;

/// Why an ONNX model cannot be read. [`OnnxError::rule`] names the rule broken; the message
/// ([`fmt::Display`]) says what was found.
#[derive(Debug)]
pub enum OnnxError {
    /// Reading failed.
    Io(io::Error),
    /// A field runs past the end of its message or of the file.
    Truncated {
        /// Which message (`graph`, `tensor 'w'`).
        inside: String,
    },
    /// A varint of more than ten bytes.
    BadVarint { inside: String },
    /// A field number of 0, a group, or a field of another wire type than its message declares.
    BadField { inside: String, what: String },
    /// A string or name longer than read.
    TooLong { inside: String, len: u64, max: u64 },
    /// Graphs nested deeper than read (graphs in graphs in graphs...).
    TooDeep { inside: String, depth: usize },
    /// A tensor whose bytes are not what its type and shape say, or that cannot be read.
    BadTensor { name: String, what: String },
    /// External data whose location is absolute or leaves the model's directory.
    BadLocation {
        name: String,
        location: String,
        why: &'static str,
    },
}

impl Broken for OnnxError {
    /// The rule broken, by a short name.
    fn rule(&self) -> String {
        let rule = match self {
            OnnxError::Io(_) => "Io",
            OnnxError::Truncated { .. } => "Truncated",
            OnnxError::BadVarint { .. } => "BadVarint",
            OnnxError::BadField { .. } => "BadField",
            OnnxError::TooLong { .. } => "TooLong",
            OnnxError::TooDeep { .. } => "TooDeep",
            OnnxError::BadTensor { .. } => "BadTensor",
            OnnxError::BadLocation { .. } => "BadLocation",
        };
        rule.into()
    }

    /// Whether the file ends before its messages do (what a file still being written looks
    /// like).
    fn cut_short(&self) -> bool {
        matches!(self, OnnxError::Truncated { .. })
    }
}

impl fmt::Display for OnnxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnnxError::Io(e) => write!(f, "{e}"),
            OnnxError::Truncated { inside } => write!(f, "{inside} ends past the end of the file"),
            OnnxError::BadVarint { inside } => write!(f, "{inside} has a varint of over ten bytes"),
            OnnxError::BadField { inside, what } => write!(f, "{inside} has {what}"),
            OnnxError::TooLong { inside, len, max } => {
                write!(
                    f,
                    "{inside} has a string of {len} bytes (at most {max} are read)"
                )
            }
            OnnxError::TooDeep { inside, depth } => {
                write!(
                    f,
                    "{inside} is nested {depth} messages deep, past the bound"
                )
            }
            OnnxError::BadTensor { name, what } => write!(f, "tensor `{name}` {what}"),
            OnnxError::BadLocation {
                name,
                location,
                why,
            } => write!(
                f,
                "tensor `{name}` has its data at {location:?}, {why}: nothing was opened"
            ),
        }
    }
}
