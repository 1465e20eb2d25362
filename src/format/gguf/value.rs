//! Metadata values: the 13 GGUF value types, and a value of each as read.

use serde_json::Value as Json;

/// A GGUF metadata value type, with the id the file stores (gguf-py's `GGUFValueType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// Unsigned 8-bit integer.
    Uint8 = 0,
    /// Signed 8-bit integer.
    Int8 = 1,
    /// Unsigned 16-bit integer.
    Uint16 = 2,
    /// Signed 16-bit integer.
    Int16 = 3,
    /// Unsigned 32-bit integer.
    Uint32 = 4,
    /// Signed 32-bit integer.
    Int32 = 5,
    /// IEEE 754 binary32.
    Float32 = 6,
    /// One byte: 0 is false, anything else true.
    Bool = 7,
    /// A little-endian u64 length, then that many bytes.
    String = 8,
    /// A u32 element type, a u64 length, then the elements.
    Array = 9,
    /// Unsigned 64-bit integer.
    Uint64 = 10,
    /// Signed 64-bit integer.
    Int64 = 11,
    /// IEEE 754 binary64.
    Float64 = 12,
}

impl ValueType {
    /// The type a GGUF file means by `id`, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => Uint8,
            1 => Int8,
            2 => Uint16,
            3 => Int16,
            4 => Uint32,
            5 => Int32,
            6 => Float32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => Uint64,
            11 => Int64,
            12 => Float64,
            _ => return None,
        })
    }

    /// The type's name as gguf-py spells it (`GGUFValueType(id).name`): `UINT8`, `STRING`.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            Uint8 => "UINT8",
            Int8 => "INT8",
            Uint16 => "UINT16",
            Int16 => "INT16",
            Uint32 => "UINT32",
            Int32 => "INT32",
            Float32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            Uint64 => "UINT64",
            Int64 => "INT64",
            Float64 => "FLOAT64",
        }
    }

    /// The bytes one value of the type takes, or for strings and arrays the least it can take
    /// (an empty one).
    pub(super) fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            Uint8 | Int8 | Bool => 1,
            Uint16 | Int16 => 2,
            Uint32 | Int32 | Float32 => 4,
            Uint64 | Int64 | Float64 | String => 8,
            Array => 12,
        }
    }
}

/// A metadata value as read from a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A UINT8.
    U8(u8),
    /// An INT8.
    I8(i8),
    /// A UINT16.
    U16(u16),
    /// An INT16.
    I16(i16),
    /// A UINT32.
    U32(u32),
    /// An INT32.
    I32(i32),
    /// A FLOAT32.
    F32(f32),
    /// A BOOL.
    Bool(bool),
    /// A STRING, as its bytes: GGUF files in use hold tokens that are not UTF-8, which
    /// llama.cpp accepts ([`Value::as_str`] gives the text when it is UTF-8).
    String(Vec<u8>),
    /// An ARRAY.
    Array(Array),
    /// A UINT64.
    U64(u64),
    /// An INT64.
    I64(i64),
    /// A FLOAT64.
    F64(f64),
}

/// An array value: its element type and length always; its elements only when the array's
/// encoding takes at most [`KEPT_ARRAY_BYTES`](super::KEPT_ARRAY_BYTES) bytes (a tokenizer's
/// vocabulary is read and checked, but not kept).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// The type of every element.
    pub ty: ValueType,
    /// The number of elements.
    pub len: u64,
    /// The elements, when kept.
    pub values: Option<Vec<Value>>,
}

impl Value {
    /// The value's type.
    pub fn ty(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::Uint8,
            Value::I8(_) => ValueType::Int8,
            Value::U16(_) => ValueType::Uint16,
            Value::I16(_) => ValueType::Int16,
            Value::U32(_) => ValueType::Uint32,
            Value::I32(_) => ValueType::Int32,
            Value::F32(_) => ValueType::Float32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::Uint64,
            Value::I64(_) => ValueType::Int64,
            Value::F64(_) => ValueType::Float64,
        }
    }

    /// The text of a STRING value that is UTF-8; `None` for any other value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value of an integer of any of the eight integer types, when it is not negative;
    /// `None` for any other value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as JSON: integers and floats as numbers, booleans as booleans, strings as
    /// strings (bytes that are not UTF-8 become U+FFFD), arrays as arrays of their elements, or
    /// when the elements were not kept as `{"type": "STRING", "length": 150000}` (the element
    /// type spelled as gguf-py spells it).
    ///
    /// JSON has no number for a NaN or an infinity: those floats become the strings `"NaN"`,
    /// `"Infinity"` and `"-Infinity"` (the tokens Python's `json` module writes). A FLOAT32 is
    /// written as the float64 of the same value, as gguf-py's `contents()` gives it.
    pub fn to_json(&self) -> Json {
        match self {
            Value::U8(v) => Json::from(*v),
            Value::I8(v) => Json::from(*v),
            Value::U16(v) => Json::from(*v),
            Value::I16(v) => Json::from(*v),
            Value::U32(v) => Json::from(*v),
            Value::I32(v) => Json::from(*v),
            Value::U64(v) => Json::from(*v),
            Value::I64(v) => Json::from(*v),
            Value::F32(v) => float(f64::from(*v)),
            Value::F64(v) => float(*v),
            Value::Bool(v) => Json::Bool(*v),
            Value::String(b) => Json::String(String::from_utf8_lossy(b).into_owned()),
            Value::Array(a) => match &a.values {
                Some(values) => Json::Array(values.iter().map(Value::to_json).collect()),
                None => serde_json::json!({"type": a.ty.name(), "length": a.len}),
            },
        }
    }
}

/// A float as a JSON number, or for a NaN or an infinity as a string.
fn float(v: f64) -> Json {
    match serde_json::Number::from_f64(v) {
        Some(n) => Json::Number(n),
        None if v.is_nan() => Json::from("NaN"),
        None if v > 0.0 => Json::from("Infinity"),
        None => Json::from("-Infinity"),
    }
}
