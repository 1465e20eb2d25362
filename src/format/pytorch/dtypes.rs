//! torch's element types: its dtypes by the names of their `torch.<name>` globals and storage
//! classes, each with its size and the safetensors dtype it is (or why there is none).

use crate::format::Dtype;

/// An element type torch names: its size in bytes, and the safetensors dtype or why there is none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elem {
    pub name: &'static str,
    pub size: u64,
    pub dtype: Result<Dtype, &'static str>,
}

pub(super) const QUANTIZED: &str = "safetensors has no quantized dtype";
const NO_COMPLEX: &str = "safetensors has no dtype for it";

/// The element types safetensors has no name for whose tensors are still shown as files (their
/// bytes are plain little-endian numbers), by torch's name, with the name tensormount gives them.
const FILE_ONLY: &[(&str, Dtype)] = &[
    ("complex128", Dtype::C128),
    ("cdouble", Dtype::C128),
    ("complex32", Dtype::C32),
    ("chalf", Dtype::C32),
];

/// The name tensormount gives an element type safetensors has no name for, if its tensors are
/// shown as files (see [`FILE_ONLY`]).
pub(crate) fn file_only(elem: &Elem) -> Option<Dtype> {
    FILE_ONLY
        .iter()
        .find(|(torch, _)| *torch == elem.name)
        .map(|(_, ours)| *ours)
}
pub(super) const BITS: &str = "safetensors has no raw-bits dtype";

/// torch's dtypes by the names of their `torch.<name>` globals.
const DTYPES: &[(&str, u64, Result<Dtype, &str>)] = &[
    ("float64", 8, Ok(Dtype::F64)),
    ("double", 8, Ok(Dtype::F64)),
    ("float32", 4, Ok(Dtype::F32)),
    ("float", 4, Ok(Dtype::F32)),
    ("float16", 2, Ok(Dtype::F16)),
    ("half", 2, Ok(Dtype::F16)),
    ("bfloat16", 2, Ok(Dtype::BF16)),
    ("float8_e4m3fn", 1, Ok(Dtype::F8_E4M3)),
    ("float8_e5m2", 1, Ok(Dtype::F8_E5M2)),
    ("float8_e4m3fnuz", 1, Ok(Dtype::F8_E4M3FNUZ)),
    ("float8_e5m2fnuz", 1, Ok(Dtype::F8_E5M2FNUZ)),
    ("float8_e8m0fnu", 1, Ok(Dtype::F8_E8M0)),
    ("int8", 1, Ok(Dtype::I8)),
    ("int16", 2, Ok(Dtype::I16)),
    ("short", 2, Ok(Dtype::I16)),
    ("int32", 4, Ok(Dtype::I32)),
    ("int", 4, Ok(Dtype::I32)),
    ("int64", 8, Ok(Dtype::I64)),
    ("long", 8, Ok(Dtype::I64)),
    ("uint8", 1, Ok(Dtype::U8)),
    ("uint16", 2, Ok(Dtype::U16)),
    ("uint32", 4, Ok(Dtype::U32)),
    ("uint64", 8, Ok(Dtype::U64)),
    ("bool", 1, Ok(Dtype::BOOL)),
    ("complex64", 8, Ok(Dtype::C64)),
    ("cfloat", 8, Ok(Dtype::C64)),
    ("complex128", 16, Err(NO_COMPLEX)),
    ("cdouble", 16, Err(NO_COMPLEX)),
    ("complex32", 4, Err(NO_COMPLEX)),
    ("chalf", 4, Err(NO_COMPLEX)),
    ("qint8", 1, Err(QUANTIZED)),
    ("quint8", 1, Err(QUANTIZED)),
    ("qint32", 4, Err(QUANTIZED)),
    ("quint4x2", 1, Err(QUANTIZED)),
    ("quint2x4", 1, Err(QUANTIZED)),
    (
        "float4_e2m1fn_x2",
        1,
        Err("its bytes are packed pairs of 4-bit floats"),
    ),
    ("bits1x8", 1, Err(BITS)),
    ("bits2x4", 1, Err(BITS)),
    ("bits4x2", 1, Err(BITS)),
    ("bits8", 1, Err(BITS)),
    ("bits16", 2, Err(BITS)),
];

/// The storage classes of `torch.save` (`torch.FloatStorage`, ...) by the dtype of their elements;
/// `UntypedStorage` holds bytes (its tensors' dtype is an argument of `_rebuild_tensor_v3`).
const STORAGES: &[(&str, &str)] = &[
    ("DoubleStorage", "float64"),
    ("FloatStorage", "float32"),
    ("HalfStorage", "float16"),
    ("BFloat16Storage", "bfloat16"),
    ("LongStorage", "int64"),
    ("IntStorage", "int32"),
    ("ShortStorage", "int16"),
    ("CharStorage", "int8"),
    ("ByteStorage", "uint8"),
    ("BoolStorage", "bool"),
    ("ComplexFloatStorage", "complex64"),
    ("ComplexDoubleStorage", "complex128"),
    ("QInt8Storage", "qint8"),
    ("QUInt8Storage", "quint8"),
    ("QInt32Storage", "qint32"),
    ("QUInt4x2Storage", "quint4x2"),
    ("QUInt2x4Storage", "quint2x4"),
    ("UntypedStorage", "uint8"),
];

pub(super) fn dtype_named(name: &str) -> Option<Elem> {
    DTYPES
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|&(name, size, dtype)| Elem { name, size, dtype })
}

/// The element type of a `torch.<dtype>` global.
pub(crate) fn dtype_global(module: &str, name: &str) -> Option<Elem> {
    (module == "torch").then(|| dtype_named(name)).flatten()
}

/// The element type of a storage class global (`torch.FloatStorage`, `torch.cuda.HalfStorage`,
/// `torch.storage.UntypedStorage`, or a dtype as some versions write it).
pub(super) fn storage_class(module: &str, name: &str) -> Option<Elem> {
    if !["torch", "torch.cuda", "torch.storage"].contains(&module) {
        return None;
    }
    let by_class = STORAGES.iter().find(|(class, _)| *class == name);
    match by_class {
        Some((_, dtype)) => dtype_named(dtype),
        None => dtype_global(module, name),
    }
}
