//! What a `TensorProto` (or a `Constant` node's scalar and list attributes) says of its tensor, and
//! where its bytes are: `raw_data`, or a typed field that is one packed array of floats or
//! doubles, is a stretch of the file; any other typed field (varints, values split across
//! several fields or given one field each) is values computed on read, from an index of where
//! every [`EVERY`]th value starts, built once as the model is read.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::sync::Arc;

use super::error::OnnxError;
use super::wire::{At, Field, Spans, Window, Wire};
use crate::format::description::{Computed, ReadAt};
use crate::format::dtype::{Block, Dtype};

/// A mark in the index every this many values (24 bytes each: 6 bytes a million values).
const EVERY: u64 = 4096;

/// How a typed field holds values, and how many bytes each is in the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Storage {
    /// `float_data` (4): float32s, as fixed32s.
    Float,
    /// `double_data` (10): float64s, as fixed64s.
    Double,
    /// `int32_data` (5): varints, each giving its low `bytes` bytes.
    Int32(u8),
    /// `int64_data` (7): varints of 8 bytes.
    Int64,
    /// `uint64_data` (11): varints, each giving its low `bytes` bytes.
    Uint64(u8),
    /// Only `raw_data` holds it (the 6-bit types).
    RawOnly,
}

impl Storage {
    /// Its field number in a `TensorProto`.
    pub fn field(self) -> u32 {
        match self {
            Storage::Float => 4,
            Storage::Double => 10,
            Storage::Int32(_) => 5,
            Storage::Int64 => 7,
            Storage::Uint64(_) => 11,
            Storage::RawOnly => 0,
        }
    }

    /// Bytes of one value in the tensor.
    pub fn bytes(self) -> u64 {
        match self {
            Storage::Float => 4,
            Storage::Double | Storage::Int64 => 8,
            Storage::Int32(b) | Storage::Uint64(b) => b.into(),
            Storage::RawOnly => 1,
        }
    }
}

/// ONNX's element types without a safetensors dtype: packed two or four to a byte, which their
/// tensor files' `user.onnx.packed` says (`[2,1]`: two elements a byte).
static UINT4: Block = packed("UINT4", 21, 2);
static INT4: Block = packed("INT4", 22, 2);
static UINT2: Block = packed("UINT2", 25, 4);
static INT2: Block = packed("INT2", 26, 4);

const fn packed(name: &'static str, id: u32, elements: u32) -> Block {
    Block {
        name,
        id,
        elements,
        bytes: 1,
        decode: None,
        xattr: "user.onnx.packed",
    }
}

/// ONNX's element type `id` (`TensorProto.DataType`): its name, its dtype and the field that
/// holds it when `raw_data` does not. `None` for a type with no bytes to show (`STRING`,
/// `UNDEFINED`) or unknown.
pub(super) fn element_type(id: u64) -> Option<(&'static str, Dtype, Storage)> {
    use Storage::*;
    Some(match id {
        1 => ("FLOAT", Dtype::F32, Float),
        2 => ("UINT8", Dtype::U8, Int32(1)),
        3 => ("INT8", Dtype::I8, Int32(1)),
        4 => ("UINT16", Dtype::U16, Int32(2)),
        5 => ("INT16", Dtype::I16, Int32(2)),
        6 => ("INT32", Dtype::I32, Int32(4)),
        7 => ("INT64", Dtype::I64, Int64),
        9 => ("BOOL", Dtype::BOOL, Int32(1)),
        10 => ("FLOAT16", Dtype::F16, Int32(2)),
        11 => ("DOUBLE", Dtype::F64, Double),
        12 => ("UINT32", Dtype::U32, Uint64(4)),
        13 => ("UINT64", Dtype::U64, Uint64(8)),
        14 => ("COMPLEX64", Dtype::C64, Float),
        15 => ("COMPLEX128", Dtype::C128, Double),
        16 => ("BFLOAT16", Dtype::BF16, Int32(2)),
        17 => ("FLOAT8E4M3FN", Dtype::F8_E4M3, Int32(1)),
        18 => ("FLOAT8E4M3FNUZ", Dtype::F8_E4M3FNUZ, Int32(1)),
        19 => ("FLOAT8E5M2", Dtype::F8_E5M2, Int32(1)),
        20 => ("FLOAT8E5M2FNUZ", Dtype::F8_E5M2FNUZ, Int32(1)),
        21 => ("UINT4", Dtype::Block(&UINT4), Int32(1)),
        22 => ("INT4", Dtype::Block(&INT4), Int32(1)),
        23 => ("FLOAT4E2M1", Dtype::F4, Int32(1)),
        24 => ("FLOAT8E8M0", Dtype::F8_E8M0, Int32(1)),
        25 => ("UINT2", Dtype::Block(&UINT2), Int32(1)),
        26 => ("INT2", Dtype::Block(&INT2), Int32(1)),
        27 => ("FLOAT6E2M3", Dtype::F6_E2M3, RawOnly),
        28 => ("FLOAT6E3M2", Dtype::F6_E3M2, RawOnly),
        _ => return None,
    })
}

/// Where a tensor's bytes are.
#[derive(Debug)]
pub(super) enum Bytes {
    /// `len` bytes at `at`, as they are.
    Stretch { at: u64 },
    /// Values of a typed field, computed on read.
    Typed(Arc<Typed>),
    /// Bytes from `at` of the model's data file `file` (an index of its `files`).
    External { file: u32, at: u64 },
}

/// A place in a message's spans: in span `span`, at `pos`, inside a packed array that ends at
/// `chunk_end` (or between fields where `chunk_end` is 0).
#[derive(Debug, Clone, Copy)]
struct Mark {
    span: u32,
    pos: u64,
    chunk_end: u64,
}

/// The values of field `field` of the message `spans` (every occurrence, packed or not, in
/// order), each `storage.bytes()` bytes in the tensor, with a mark every [`EVERY`] values.
pub(super) struct Typed {
    spans: Spans,
    field: u32,
    storage: Storage,
    marks: Vec<Mark>,
    values: u64,
}

impl fmt::Debug for Typed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Typed {{ field: {}, values: {}, storage: {:?} }}",
            self.field, self.values, self.storage
        )
    }
}

fn whole_values(inside: &str) -> OnnxError {
    OnnxError::BadTensor {
        name: inside.to_string(),
        what: "has a packed array whose length is not a whole number of values".into(),
    }
}

/// The file's bytes as the read path gives them.
struct ReadFn<'a>(&'a mut dyn FnMut(&mut [u8], u64) -> io::Result<()>);

impl At for ReadFn<'_> {
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<()> {
        (self.0)(buf, at)
    }
}

impl Typed {
    /// Indexes the values of `field` in `spans` (`name` for messages). `bare`: `spans` is one
    /// packed array itself (a `Constant`'s `value_int`), not a message.
    pub fn index<A: At>(
        win: &mut Window<A>,
        spans: Spans,
        field: u32,
        storage: Storage,
        bare: bool,
        name: &str,
    ) -> Result<Typed, OnnxError> {
        let mut t = Typed {
            spans,
            field,
            storage,
            marks: Vec::new(),
            values: 0,
        };
        let (pos, end) = t.spans.first().copied().unwrap_or_default();
        let start = Mark {
            span: 0,
            pos,
            chunk_end: if bare { end } else { 0 },
        };
        let mut marks = Vec::new();
        let values = t.walk(win, start, u64::MAX, name, |m, i, _| {
            if i % EVERY == 0 {
                marks.push(m);
            }
        })?;
        t.marks = marks;
        t.values = values;
        Ok(t)
    }

    pub fn values(&self) -> u64 {
        self.values
    }

    /// Where its message starts (where its values are said to begin).
    pub fn start(&self) -> u64 {
        self.spans.first().map_or(0, |s| s.0)
    }

    /// Walks the values from `mark`, at most `most` of them, giving each to `each` with the mark
    /// the walk can resume from to read it again, its index from `mark`, and its value (a float's
    /// or double's bits as stored). Returns how many it walked.
    fn walk<A: At>(
        &self,
        win: &mut Window<A>,
        mark: Mark,
        most: u64,
        inside: &str,
        mut each: impl FnMut(Mark, u64, u64),
    ) -> Result<u64, OnnxError> {
        let mut n = 0;
        let mut m = mark;
        while n < most {
            // Inside a packed array: its next value, or past its end.
            if m.chunk_end != 0 {
                if m.pos >= m.chunk_end {
                    m.chunk_end = 0;
                    continue;
                }
                let here = m;
                let v = self.value(win, &mut m.pos, m.chunk_end, inside)?;
                each(here, n, v);
                n += 1;
                continue;
            }
            let Some(&(_, end)) = self.spans.get(m.span as usize) else {
                break;
            };
            if m.pos >= end {
                m.span += 1;
                m.pos = self.spans.get(m.span as usize).map_or(0, |s| s.0);
                continue;
            }
            let tag = m;
            let f: Field = win.field(&mut m.pos, end, inside)?;
            if f.number != self.field {
                continue;
            }
            match (f.wire, self.storage) {
                (Wire::Len { len, .. }, Storage::Float) if len % 4 != 0 => {
                    return Err(whole_values(inside));
                }
                (Wire::Len { len, .. }, Storage::Double) if len % 8 != 0 => {
                    return Err(whole_values(inside));
                }
                // Its values next; the walk goes on after it.
                (Wire::Len { at, len }, _) => {
                    m = Mark {
                        span: m.span,
                        pos: at,
                        chunk_end: at + len,
                    };
                }
                (Wire::Fixed32(v), Storage::Float) => {
                    each(tag, n, v.into());
                    n += 1;
                }
                (Wire::Fixed64(v), Storage::Double)
                | (Wire::Varint(v), Storage::Int32(_) | Storage::Int64 | Storage::Uint64(_)) => {
                    each(tag, n, v);
                    n += 1;
                }
                _ => {
                    return Err(OnnxError::BadTensor {
                        name: inside.to_string(),
                        what: format!(
                            "has its field {} in another wire type than its values'",
                            f.number
                        ),
                    });
                }
            }
        }
        Ok(n)
    }

    /// One value of a packed array at `*pos`, before `end`.
    fn value<A: At>(
        &self,
        win: &mut Window<A>,
        pos: &mut u64,
        end: u64,
        inside: &str,
    ) -> Result<u64, OnnxError> {
        let end = end.min(self.end());
        match self.storage {
            Storage::Float => Ok(u32::from_le_bytes(win.fixed(pos, end, inside)?).into()),
            Storage::Double => Ok(u64::from_le_bytes(win.fixed(pos, end, inside)?)),
            _ => win.varint(pos, end, inside),
        }
    }

    /// The end of the last span.
    fn end(&self) -> u64 {
        self.spans.last().map_or(0, |s| s.1)
    }
}

impl Computed for Typed {
    fn read(&self, read: &mut ReadAt<'_>, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let vb = self.storage.bytes();
        let first = offset / vb;
        let last = (offset + out.len() as u64).div_ceil(vb).min(self.values);
        let Some(&mark) = self.marks.get((first / EVERY) as usize) else {
            return Ok(());
        };
        let skip = first % EVERY;
        let mut own = |buf: &mut [u8], at: u64| read.read_at(None, &mut [IoSliceMut::new(buf)], at);
        let mut win = Window::new(ReadFn(&mut own), self.end());
        let mut bytes = vec![0u8; ((last - first) * vb) as usize];
        self.walk(
            &mut win,
            mark,
            skip + (last - first),
            "a tensor",
            |_, i, v| {
                if i >= skip {
                    let at = ((i - skip) * vb) as usize;
                    let le = v.to_le_bytes();
                    bytes[at..at + vb as usize].copy_from_slice(&le[..vb as usize]);
                }
            },
        )
        .map_err(|e| match e {
            OnnxError::Io(e) => e,
            e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        })?;
        let from = (offset - first * vb) as usize;
        let n = out.len().min(bytes.len().saturating_sub(from));
        out[..n].copy_from_slice(&bytes[from..from + n]);
        Ok(())
    }
}
