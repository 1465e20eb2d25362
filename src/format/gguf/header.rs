//! The GGUF header, read through a reader in one pass and checked: the magic, version and
//! counts, the metadata key/value pairs, the tensor infos, and where the tensors' data lies.
//!
//! Memory stays bounded by what the file holds: a claimed count or length is checked against the
//! bytes left in the file before anything is allocated for it, and large arrays (a tokenizer's
//! vocabulary) are read and checked without being kept.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read};

use super::error::GgufError;
use super::types::GgmlType;
use super::value::{Array, Value, ValueType};

/// The alignment of the data section and of each tensor in it when the header has no
/// `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The largest encoding, in bytes, of an array whose elements [`read`] keeps: larger arrays keep
/// their type and length only.
pub const KEPT_ARRAY_BYTES: u64 = 64 * 1024;

/// The deepest nesting of arrays [`read`] accepts: an array of arrays is 2 levels. gguf-py
/// accepts any depth and llama.cpp refuses any array of arrays; no file in use nests them.
pub const MAX_NESTING: u32 = 8;

/// The most bytes a count or length in the header may claim beyond the end of the file and
/// still be taken for the header of a file cut short (a file still being written): a claim of
/// more is refused as absurd. Headers in use take a few MiB (a vocabulary of 256k tokens).
const PLAUSIBLE_CLAIM: u64 = 1 << 30;

/// The most dimensions a tensor has (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// The longest tensor name in bytes: ggml's `GGML_MAX_NAME` (64) counts the terminating zero
/// byte, and llama.cpp refuses names of 64 bytes or more.
const MAX_NAME: u64 = 63;

/// The least a metadata key/value pair takes: an empty key (8 bytes), its type (4) and a
/// one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;

/// The least a tensor info takes: an empty name (8 bytes), no dimensions (4), its type (4) and
/// its offset (8).
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;

/// A GGUF header, checked: the rules [`read`] applies all hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The format version: 2 or 3.
    pub version: u32,
    /// The metadata key/value pairs, in file order; no key appears twice.
    pub metadata: Vec<(String, Value)>,
    /// The tensors, in file order (as many as the header's tensor count).
    pub tensors: Vec<TensorInfo>,
    /// The alignment of the data section and of each tensor in it: `general.alignment`, or
    /// [`DEFAULT_ALIGNMENT`].
    pub alignment: u64,
    /// The absolute offset of the data section: the end of the header, rounded up to the
    /// alignment.
    pub data_start: u64,
}

/// One tensor as the header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name: UTF-8, at most 63 bytes, unique in the file.
    pub name: String,
    /// Its dimensions as stored (ggml's `ne`): the fastest-varying first, so a matrix of R rows
    /// of C elements is `[C, R]`. At most 4; none for a scalar.
    pub dims: Vec<u64>,
    /// Its ggml type.
    pub ty: GgmlType,
    /// The offset of its data from [`Header::data_start`]: a multiple of the alignment.
    pub offset: u64,
    /// The size of its data in bytes: elements / block elements * block bytes.
    pub size: u64,
}

impl TensorInfo {
    /// The number of elements: the product of the dimensions (1 for none). It fits in 63 bits.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The split-model keys of a shard of a model split by `gguf-split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// `split.no`: the shard's index, from 0.
    pub no: u64,
    /// `split.count`: the number of shards.
    pub count: u64,
    /// `split.tensors.count`: the number of tensors in all shards together, when present.
    pub tensors: Option<u64>,
}

impl Header {
    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The text of metadata key `key` when it is a UTF-8 STRING: `general.architecture` gives
    /// `"llama"`.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The split-model keys, when `split.no` and `split.count` are both present as
    /// non-negative integers (of any integer type; `gguf-split` writes UINT16, and INT32 for
    /// `split.tensors.count`).
    pub fn split(&self) -> Option<Split> {
        let int = |key| self.get(key).and_then(Value::as_u64);
        Some(Split {
            no: int("split.no")?,
            count: int("split.count")?,
            tensors: int("split.tensors.count"),
        })
    }
}

/// Reads and checks the header of a GGUF file (version 2 or 3, little-endian) of `file_len`
/// bytes from `r`, positioned at its start; `r` is left somewhere inside the header or at its
/// end. `r` should be buffered: the header is read a few bytes at a time.
///
/// Refused, each with its own [`GgufError`]: a file that does not start with `GGUF`; a
/// big-endian one; a version other than 2 and 3; a file that ends inside its header (which
/// includes a count or length that the rest of the file cannot hold, when it exceeds it by at
/// most 1 GiB); a count or length that exceeds the rest of the file by more; a key twice; an unknown value type; arrays
/// nested too deep; a key or tensor name that is not UTF-8; a tensor name of 64 bytes or more;
/// `general.alignment` other than a UINT32 power of two; a tensor name twice; more than 4
/// dimensions; an element count beyond 63 bits; an unknown ggml type; a row that is not a
/// whole number of blocks; a tensor offset that is not a multiple of the alignment; tensor data
/// past the end of the file; overlapping tensors.
///
/// Accepted as gguf-py accepts them: dimensions of 0 (a tensor of no elements and no bytes), no
/// dimensions (a scalar), tensors in any order with gaps between them, string values that are
/// not UTF-8, and a BOOL byte other than 0 and 1 (true, as llama.cpp reads it).
pub fn read(r: &mut impl Read, file_len: u64) -> Result<Header, GgufError> {
    let mut input = Input {
        r,
        pos: 0,
        len: file_len,
        at: Place::Magic,
    };
    let magic = input.array::<4>()?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic(magic));
    }
    input.at = Place::Version;
    let version = input.u32()?;
    if version != 2 && version != 3 {
        return Err(if (1..=3).contains(&version.swap_bytes()) {
            GgufError::BigEndian(version)
        } else {
            GgufError::UnsupportedVersion(version)
        });
    }
    input.at = Place::Counts;
    let tensor_count = input.u64()?;
    let kv_count = input.u64()?;
    input.at = Place::KeyName(0);
    input.claim(kv_count.checked_mul(MIN_KV), |remaining| {
        GgufError::TooManyKeys {
            count: kv_count,
            remaining,
        }
    })?;

    let mut metadata = Vec::new();
    let mut keys = HashSet::new();
    for i in 0..kv_count {
        input.at = Place::KeyName(i);
        let key = input.text(None)?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey(key));
        }
        input.at = Place::Value(key.clone());
        let ty = input.value_type(&key)?;
        let value = input.value(ty, 0, &key)?;
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, Value::U32(a))) => {
            return Err(GgufError::BadAlignment(format!(
                "is {a}, not a nonzero power of two"
            )));
        }
        Some((_, v)) => {
            return Err(GgufError::BadAlignment(format!(
                "has type {}, not UINT32",
                v.ty().name()
            )));
        }
    };

    input.at = Place::TensorName(0);
    input.claim(tensor_count.checked_mul(MIN_TENSOR_INFO), |remaining| {
        GgufError::TooManyTensors {
            count: tensor_count,
            remaining,
        }
    })?;
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut names = HashSet::new();
    for i in 0..tensor_count {
        input.at = Place::TensorName(i);
        let name = input.text(Some(MAX_NAME))?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateName(name));
        }
        input.at = Place::Tensor(name.clone());
        tensors.push(input.tensor_info(name)?);
    }

    // The data section starts at the end of the header rounded up to the alignment; a position
    // so close to 2^64 that it cannot be rounded leaves no room for any data.
    let data_start = input
        .pos
        .checked_next_multiple_of(alignment)
        .unwrap_or(u64::MAX);
    for t in &tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.size));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::DataPastEnd {
                    tensor: t.name.clone(),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                });
            }
        }
    }
    check_overlap(&tensors)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}

/// Refuses two tensors whose bytes overlap (tensors of no bytes overlap none). Offsets and sizes
/// are known to fit in the file.
fn check_overlap(tensors: &[TensorInfo]) -> Result<(), GgufError> {
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    let mut reach: Option<(&TensorInfo, u64)> = None;
    for t in by_offset {
        match reach {
            Some((first, end)) if t.offset < end => {
                return Err(GgufError::Overlap {
                    first: first.name.clone(),
                    second: t.name.clone(),
                });
            }
            _ => reach = Some((t, t.offset.saturating_add(t.size))),
        }
    }
    Ok(())
}

/// What part of the header is being read, for the message of a file that ends there.
enum Place {
    Magic,
    Version,
    Counts,
    KeyName(u64),
    Value(String),
    TensorName(u64),
    Tensor(String),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Magic => f.write_str("the magic"),
            Place::Version => f.write_str("the version"),
            Place::Counts => f.write_str("the tensor and key counts"),
            Place::KeyName(i) => write!(f, "the name of key {i}"),
            Place::Value(key) => write!(f, "the value of key '{key}'"),
            Place::TensorName(i) => write!(f, "the name of tensor {i}"),
            Place::Tensor(name) => write!(f, "the info of tensor '{name}'"),
        }
    }
}

/// The header's bytes as read so far: the reader, the position in the file, and where in the
/// header it is.
struct Input<'r, R> {
    r: &'r mut R,
    pos: u64,
    len: u64,
    at: Place,
}

impl<R: Read> Input<'_, R> {
    /// Bytes left in the file after the position.
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn truncated(&self) -> GgufError {
        GgufError::Truncated {
            inside: self.at.to_string(),
        }
    }

    fn io(&self, e: io::Error) -> GgufError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            self.truncated()
        } else {
            GgufError::Io(e)
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        self.r.read_exact(buf).map_err(|e| self.io(e))?;
        self.pos = self.pos.saturating_add(buf.len() as u64);
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut b = [0; N];
        self.fill(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        self.array().map(u64::from_le_bytes)
    }

    /// Reads and drops `n` bytes, known to be at most the bytes left in the file.
    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        let copied =
            io::copy(&mut self.r.by_ref().take(n), &mut io::sink()).map_err(|e| self.io(e))?;
        self.pos = self.pos.saturating_add(copied);
        if copied < n {
            return Err(self.truncated());
        }
        Ok(())
    }

    /// Checks a claim that the next `need` bytes (`None`: more than 2^64) are the header's:
    /// when fewer are left, the file ends inside its header if the claim exceeds them by at
    /// most [`PLAUSIBLE_CLAIM`], and otherwise the claim is refused as `refuse` says, given the
    /// bytes left.
    fn claim(
        &self,
        need: Option<u64>,
        refuse: impl FnOnce(u64) -> GgufError,
    ) -> Result<(), GgufError> {
        let remaining = self.remaining();
        match need {
            Some(n) if n <= remaining => Ok(()),
            Some(n) if n - remaining <= PLAUSIBLE_CLAIM => Err(self.truncated()),
            _ => Err(refuse(remaining)),
        }
    }

    /// Reads a string's length and checks it against the bytes left.
    fn string_len(&mut self) -> Result<u64, GgufError> {
        let len = self.u64()?;
        self.claim_string(len)?;
        Ok(len)
    }

    /// Checks a string length against the bytes left.
    fn claim_string(&self, len: u64) -> Result<(), GgufError> {
        self.claim(Some(len), |remaining| GgufError::StringTooLong {
            inside: self.at.to_string(),
            len,
            remaining,
        })
    }

    /// Reads `len` bytes, known to be at most the bytes left in the file.
    fn bytes(&mut self, len: u64) -> Result<Vec<u8>, GgufError> {
        let mut b = vec![0; usize::try_from(len).map_err(|_| self.truncated())?];
        self.fill(&mut b)?;
        Ok(b)
    }

    /// Reads a string that must be UTF-8 (a key, or with a `limit` of [`MAX_NAME`] bytes a
    /// tensor name).
    fn text(&mut self, limit: Option<u64>) -> Result<String, GgufError> {
        let len = self.u64()?;
        if let Some(limit) = limit.filter(|&l| len > l) {
            return Err(GgufError::NameTooLong {
                inside: self.at.to_string(),
                len,
                limit,
            });
        }
        self.claim_string(len)?;
        let b = self.bytes(len)?;
        String::from_utf8(b).map_err(|_| GgufError::InvalidUtf8 {
            inside: self.at.to_string(),
        })
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType, GgufError> {
        let id = self.u32()?;
        ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_owned(),
            id,
        })
    }

    /// Reads a value of type `ty` inside `depth` arrays, of key `key`.
    fn value(&mut self, ty: ValueType, depth: u32, key: &str) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::Uint8 => Value::U8(u8::from_le_bytes(self.array()?)),
            ValueType::Int8 => Value::I8(i8::from_le_bytes(self.array()?)),
            ValueType::Uint16 => Value::U16(u16::from_le_bytes(self.array()?)),
            ValueType::Int16 => Value::I16(i16::from_le_bytes(self.array()?)),
            ValueType::Uint32 => Value::U32(u32::from_le_bytes(self.array()?)),
            ValueType::Int32 => Value::I32(i32::from_le_bytes(self.array()?)),
            ValueType::Float32 => Value::F32(f32::from_le_bytes(self.array()?)),
            ValueType::Bool => Value::Bool(self.array::<1>()? != [0]),
            ValueType::String => {
                let len = self.string_len()?;
                Value::String(self.bytes(len)?)
            }
            ValueType::Array => Value::Array(self.array_value(depth + 1, key)?),
            ValueType::Uint64 => Value::U64(u64::from_le_bytes(self.array()?)),
            ValueType::Int64 => Value::I64(i64::from_le_bytes(self.array()?)),
            ValueType::Float64 => Value::F64(f64::from_le_bytes(self.array()?)),
        })
    }

    /// Reads an array (its element type, length and elements), the `depth`th level of arrays,
    /// keeping the elements when they take at most [`KEPT_ARRAY_BYTES`].
    fn array_value(&mut self, depth: u32, key: &str) -> Result<Array, GgufError> {
        if depth > MAX_NESTING {
            return Err(GgufError::NestedTooDeep {
                key: key.to_owned(),
                limit: MAX_NESTING,
            });
        }
        let ty = self.value_type(key)?;
        let len = self.u64()?;
        let size = ty.min_size();
        self.claim(len.checked_mul(size), |remaining| GgufError::ArrayTooLong {
            key: key.to_owned(),
            len,
            remaining,
        })?;
        let fixed = !matches!(ty, ValueType::String | ValueType::Array);
        if fixed && len * size > KEPT_ARRAY_BYTES {
            // len * size <= remaining: no overflow.
            self.skip(len * size)?;
            return Ok(Array {
                ty,
                len,
                values: None,
            });
        }
        let start = self.pos;
        let mut values = Some(Vec::new());
        for _ in 0..len {
            match ty {
                ValueType::String => {
                    let n = self.string_len()?;
                    let used = self.pos.saturating_sub(start).saturating_add(n);
                    match &mut values {
                        Some(v) if used <= KEPT_ARRAY_BYTES => {
                            v.push(Value::String(self.bytes(n)?));
                        }
                        _ => {
                            values = None;
                            self.skip(n)?;
                        }
                    }
                }
                _ => {
                    let value = self.value(ty, depth, key)?;
                    if self.pos.saturating_sub(start) > KEPT_ARRAY_BYTES {
                        values = None;
                    }
                    if let Some(v) = &mut values {
                        v.push(value);
                    }
                }
            }
        }
        Ok(Array { ty, len, values })
    }

    /// Reads the rest of a tensor info after its name, and checks it.
    fn tensor_info(&mut self, name: String) -> Result<TensorInfo, GgufError> {
        let n_dims = self.u32()?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                dims: n_dims,
            });
        }
        let mut dims = Vec::with_capacity(MAX_DIMS as usize);
        for _ in 0..n_dims {
            dims.push(self.u64()?);
        }
        let id = self.u32()?;
        let offset = self.u64()?;
        let Some(ty) = GgmlType::from_id(id) else {
            return Err(GgufError::UnknownType { tensor: name, id });
        };
        // ggml reads dimensions as int64 and refuses negative ones and element counts that
        // reach 2^63.
        let limit = i64::MAX as u64;
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= limit && dims.iter().all(|&d| d <= limit));
        let Some(elements) = elements else {
            return Err(GgufError::ElementCountOverflow { tensor: name, dims });
        };
        let row = dims.first().copied().unwrap_or(1);
        let block = ty.block_elements();
        if !row.is_multiple_of(u64::from(block)) {
            return Err(GgufError::BadShape {
                tensor: name,
                ty: ty.name(),
                row,
                block,
            });
        }
        let size = (elements / u64::from(block))
            .checked_mul(u64::from(ty.block_bytes()))
            .filter(|&n| n <= limit);
        let Some(size) = size else {
            return Err(GgufError::ElementCountOverflow { tensor: name, dims });
        };
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            size,
        })
    }
}
