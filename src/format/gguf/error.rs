//! Why a file is not a GGUF file this crate reads: the rule it breaks, by a short name, and what
//! was found, naming the key or tensor involved (never the file: the caller names that).

use std::fmt;

use crate::format::error::Broken;
use std::io;

/// Why a GGUF header cannot be read. [`GgufError::rule`] names the rule broken; the message
/// ([`fmt::Display`]) says what was found.
#[derive(Debug)]
pub enum GgufError {
    /// Reading failed for another reason than the end of the file.
    Io(io::Error),
    /// The first four bytes are not `GGUF`.
    BadMagic([u8; 4]),
    /// The version reads as a byte-swapped 1, 2 or 3: a big-endian GGUF file.
    BigEndian(u32),
    /// A version other than 2 and 3.
    UnsupportedVersion(u32),
    /// The file ends inside its header; `inside` says where ("tensor info 3", "the value of key
    /// 'general.name'").
    Truncated {
        /// Where in the header the file ends.
        inside: String,
    },
    /// More tensors claimed than the rest of the file can describe (each tensor info takes at
    /// least 24 bytes), by more than 1 GiB: more than a file cut short explains. (A claim that
    /// exceeds the file by less is [`GgufError::Truncated`]; so are the next three.)
    TooManyTensors {
        /// The tensor count the header claims.
        count: u64,
        /// Bytes left in the file after the count.
        remaining: u64,
    },
    /// More key/value pairs claimed than the rest of the file can hold (each takes at least 13
    /// bytes), by more than 1 GiB.
    TooManyKeys {
        /// The key/value count the header claims.
        count: u64,
        /// Bytes left in the file after the count.
        remaining: u64,
    },
    /// A string claims more bytes than are left in the file, by more than 1 GiB.
    StringTooLong {
        /// Which string ("the name of tensor 4", "the value of key 'x'").
        inside: String,
        /// Its claimed length in bytes.
        len: u64,
        /// Bytes left in the file after the length.
        remaining: u64,
    },
    /// A tensor name of 64 bytes or more: ggml's `GGML_MAX_NAME` (64) counts the terminating
    /// zero byte, and llama.cpp refuses such names.
    NameTooLong {
        /// Which name ("the name of tensor 4").
        inside: String,
        /// Its length in bytes.
        len: u64,
        /// The most allowed: 63.
        limit: u64,
    },
    /// An array claims more elements than the rest of the file can hold, by more than 1 GiB.
    ArrayTooLong {
        /// The key whose value holds the array.
        key: String,
        /// The claimed length.
        len: u64,
        /// Bytes left in the file after the length.
        remaining: u64,
    },
    /// A value type id that is not one of the 13 GGUF value types.
    UnknownValueType {
        /// The key whose value has the type.
        key: String,
        /// The type id found.
        id: u32,
    },
    /// Arrays nested deeper than the reader allows.
    NestedTooDeep {
        /// The key whose value nests them.
        key: String,
        /// The most levels allowed.
        limit: u32,
    },
    /// A key or a tensor name that is not UTF-8.
    InvalidUtf8 {
        /// Which string ("key 3", "the name of tensor 7").
        inside: String,
    },
    /// The same key twice.
    DuplicateKey(String),
    /// `general.alignment` is not a UINT32 or not a nonzero power of two; the message says
    /// which.
    BadAlignment(String),
    /// The same tensor name twice.
    DuplicateName(String),
    /// A tensor with more than 4 dimensions.
    TooManyDims {
        /// The tensor.
        tensor: String,
        /// Its dimension count.
        dims: u32,
    },
    /// A dimension above `i64::MAX`, or a product of dimensions (the element count) or a byte
    /// size that does not fit in 63 bits.
    ElementCountOverflow {
        /// The tensor.
        tensor: String,
        /// Its dimensions as stored, fastest-varying first.
        dims: Vec<u64>,
    },
    /// A ggml type id that is no type.
    UnknownType {
        /// The tensor.
        tensor: String,
        /// The type id found.
        id: u32,
    },
    /// The innermost dimension is not a multiple of the type's block size.
    BadShape {
        /// The tensor.
        tensor: String,
        /// The name of its type.
        ty: &'static str,
        /// Its innermost (first stored) dimension.
        row: u64,
        /// The type's elements per block.
        block: u32,
    },
    /// A tensor offset that is not a multiple of the alignment.
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset from the start of the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor whose data ends after the end of the file.
    DataPastEnd {
        /// The tensor.
        tensor: String,
        /// The absolute offset where its data ends.
        end: u64,
        /// The length of the file.
        file_len: u64,
    },
    /// Two tensors whose bytes overlap.
    Overlap {
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
    },
}

impl Broken for GgufError {
    /// The short name of the rule broken (`"Truncated"`, `"BadMagic"`): the variant's name.
    fn rule(&self) -> String {
        let rule = match self {
            GgufError::Io(_) => "Io",
            GgufError::BadMagic(_) => "BadMagic",
            GgufError::BigEndian(_) => "BigEndian",
            GgufError::UnsupportedVersion(_) => "UnsupportedVersion",
            GgufError::Truncated { .. } => "Truncated",
            GgufError::TooManyTensors { .. } => "TooManyTensors",
            GgufError::TooManyKeys { .. } => "TooManyKeys",
            GgufError::StringTooLong { .. } => "StringTooLong",
            GgufError::NameTooLong { .. } => "NameTooLong",
            GgufError::ArrayTooLong { .. } => "ArrayTooLong",
            GgufError::UnknownValueType { .. } => "UnknownValueType",
            GgufError::NestedTooDeep { .. } => "NestedTooDeep",
            GgufError::InvalidUtf8 { .. } => "InvalidUtf8",
            GgufError::DuplicateKey(_) => "DuplicateKey",
            GgufError::BadAlignment(_) => "BadAlignment",
            GgufError::DuplicateName(_) => "DuplicateName",
            GgufError::TooManyDims { .. } => "TooManyDims",
            GgufError::ElementCountOverflow { .. } => "ElementCountOverflow",
            GgufError::UnknownType { .. } => "UnknownType",
            GgufError::BadShape { .. } => "BadShape",
            GgufError::Misaligned { .. } => "Misaligned",
            GgufError::DataPastEnd { .. } => "DataPastEnd",
            GgufError::Overlap { .. } => "Overlap",
        };
        rule.into()
    }

    /// Whether the file ends too soon: inside its header ([`GgufError::Truncated`], which
    /// includes a count or length that exceeds the rest of the file by at most 1 GiB) or before
    /// the data of a tensor ([`GgufError::DataPastEnd`]). This is what a file still being
    /// written looks like.
    fn cut_short(&self) -> bool {
        matches!(
            self,
            GgufError::Truncated { .. } | GgufError::DataPastEnd { .. }
        )
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Io(e) => write!(f, "cannot read the GGUF header: {e}"),
            GgufError::BadMagic(m) => write!(
                f,
                "not a GGUF file: it starts with {:?}, not \"GGUF\"",
                String::from_utf8_lossy(m)
            ),
            GgufError::BigEndian(v) => write!(
                f,
                "big-endian GGUF is not supported (its version {} reads as {v} in little-endian)",
                v.swap_bytes()
            ),
            GgufError::UnsupportedVersion(1) => f.write_str(
                "GGUF version 1 is not supported (it is obsolete; only versions 2 and 3 are read)",
            ),
            GgufError::UnsupportedVersion(v) => write!(
                f,
                "GGUF version {v} is not supported (only versions 2 and 3 are)"
            ),
            GgufError::Truncated { inside } => {
                write!(f, "the file ends inside its GGUF header, in {inside}")
            }
            GgufError::TooManyTensors { count, remaining } => write!(
                f,
                "the GGUF header claims {count} tensors, more than the {remaining} bytes left in \
                 the file can describe"
            ),
            GgufError::TooManyKeys { count, remaining } => write!(
                f,
                "the GGUF header claims {count} metadata keys, more than the {remaining} bytes \
                 left in the file can hold"
            ),
            GgufError::StringTooLong {
                inside,
                len,
                remaining,
            } => write!(
                f,
                "{inside} in the GGUF header claims {len} bytes, more than the {remaining} left \
                 in the file"
            ),
            GgufError::NameTooLong { inside, len, limit } => write!(
                f,
                "{inside} in the GGUF header is {len} bytes long, more than the {limit} ggml \
                 allows"
            ),
            GgufError::ArrayTooLong {
                key,
                len,
                remaining,
            } => write!(
                f,
                "the array of GGUF key '{key}' claims {len} elements, more than the {remaining} \
                 bytes left in the file can hold"
            ),
            GgufError::UnknownValueType { key, id } => {
                write!(f, "GGUF key '{key}' has an unknown value type {id}")
            }
            GgufError::NestedTooDeep { key, limit } => write!(
                f,
                "GGUF key '{key}' nests arrays more than {limit} levels deep"
            ),
            GgufError::InvalidUtf8 { inside } => {
                write!(f, "{inside} in the GGUF header is not UTF-8")
            }
            GgufError::DuplicateKey(key) => write!(f, "GGUF key '{key}' appears twice"),
            GgufError::BadAlignment(what) => write!(f, "GGUF key 'general.alignment' {what}"),
            GgufError::DuplicateName(name) => write!(f, "GGUF tensor '{name}' appears twice"),
            GgufError::TooManyDims { tensor, dims } => write!(
                f,
                "GGUF tensor '{tensor}' has {dims} dimensions, more than the 4 ggml allows"
            ),
            GgufError::ElementCountOverflow { tensor, dims } => write!(
                f,
                "GGUF tensor '{tensor}' with dimensions {dims:?} has more elements or bytes \
                 than fit in 63 bits"
            ),
            GgufError::UnknownType { tensor, id } => {
                write!(f, "GGUF tensor '{tensor}' has an unknown ggml type {id}")
            }
            GgufError::BadShape {
                tensor,
                ty,
                row,
                block,
            } => write!(
                f,
                "GGUF tensor '{tensor}' of type {ty} has {row} elements per row, not a multiple \
                 of the type's block of {block}"
            ),
            GgufError::Misaligned {
                tensor,
                offset,
                alignment,
            } => write!(
                f,
                "GGUF tensor '{tensor}' starts at offset {offset} of the data, not a multiple of \
                 the alignment {alignment}"
            ),
            GgufError::DataPastEnd {
                tensor,
                end,
                file_len,
            } => write!(
                f,
                "the data of GGUF tensor '{tensor}' ends at byte {end}, past the end of the \
                 {file_len}-byte file"
            ),
            GgufError::Overlap { first, second } => {
                write!(f, "GGUF tensors '{first}' and '{second}' overlap")
            }
        }
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GgufError::Io(e) => Some(e),
            _ => None,
        }
    }
}
