//! A GGUF file as a [`Description`]: its tensors with the element types tensormount names
//! (F16, F32, ... as they are; the quantized types as blocks that [`dequantize`] decodes), their
//! shapes row-major (ggml's `ne` reversed, as numpy and gguf-py give them), and its metadata.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::{GgmlType, Header, Value, dequantize, read};
use crate::format::description::{Conversion, Description, NotOffered, Split, Tensor};
use crate::format::dtype::{Block, Decode, Dtype};
use crate::format::error::FormatError;

/// Reads the header of `file` (whose path is `path`, for messages).
pub fn describe(file: &File, path: &Path) -> Result<Description, FormatError> {
    let len = file
        .metadata()
        .map_err(|e| FormatError::Io(path.to_path_buf(), e))?
        .len();
    let mut r = BufReader::with_capacity(1 << 16, file);
    let header = read(&mut r, len).map_err(|e| FormatError::invalid(path, e))?;
    Ok(description(&header))
}

/// The description of a checked header.
fn description(header: &Header) -> Description {
    let mut tensors: Vec<Arc<Tensor>> = header
        .tensors
        .iter()
        .map(|t| {
            Arc::new(Tensor {
                name: t.name.as_str().into(),
                dtype: dtype(t.ty),
                shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                begin: t.offset,
                end: t.offset + t.size,
                strides: None,
                computed: None,
                file: None,
            })
        })
        .collect();
    tensors.sort_by_key(|t| t.begin);
    let metadata = header
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.to_json()))
        .collect::<BTreeMap<_, _>>();
    // The safetensors file: every tensor by its name (the quantized ones as their float32
    // values), and the scalar keys with `format: gguf`.
    let mut scalars: BTreeMap<String, String> = header
        .metadata
        .iter()
        .filter(|(_, v)| !matches!(v, Value::Array(_)))
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    scalars.insert("format".into(), "gguf".into());
    let conversion = Conversion {
        state_dict: tensors
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect(),
        metadata: scalars,
    };
    Description {
        data_start: header.data_start,
        tensors,
        metadata: Some(metadata),
        conversion: Some(if conversion.state_dict.is_empty() {
            Err(NotOffered::Unfit("no tensors".into()))
        } else {
            Ok(conversion)
        }),
        split: split(header),
        ..Description::new("gguf")
    }
}

/// What the `split.*` keys gguf-split writes say of the set, if the file has them.
fn split(header: &Header) -> Option<Split> {
    let key = |k: &str| {
        let (_, v) = header.metadata.iter().find(|(name, _)| name == k)?;
        v.as_u64()
    };
    Some(Split {
        no: key("split.no")?,
        count: key("split.count")?,
        tensors: key("split.tensors.count"),
    })
}

/// A scalar metadata value as text: a string as itself, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(b) => String::from_utf8_lossy(b).into_owned(),
        _ => v.to_json().to_string(),
    }
}

/// The element type of a ggml type: the types safetensors has as themselves, the others as blocks.
fn dtype(ty: GgmlType) -> Dtype {
    let plain = match ty.name() {
        "F32" => Some(Dtype::F32),
        "F16" => Some(Dtype::F16),
        "BF16" => Some(Dtype::BF16),
        "F64" => Some(Dtype::F64),
        "I8" => Some(Dtype::I8),
        "I16" => Some(Dtype::I16),
        "I32" => Some(Dtype::I32),
        "I64" => Some(Dtype::I64),
        _ => None,
    };
    if let Some(d) = plain {
        return d;
    }
    static BLOCKS: OnceLock<Vec<Block>> = OnceLock::new();
    let blocks = BLOCKS.get_or_init(|| {
        GgmlType::ALL
            .iter()
            .map(|&t| Block {
                name: t.name(),
                id: t.id(),
                elements: t.block_elements(),
                bytes: t.block_bytes(),
                decode: t.can_dequantize().then_some(decode as Decode),
                xattr: "user.gguf.block",
            })
            .collect()
    });
    match blocks.iter().find(|b| b.id == ty.id()) {
        Some(b) => Dtype::Block(b),
        None => Dtype::U8,
    }
}

/// [`Block::decode`] for every ggml type: whole blocks to float32, as gguf-py dequantizes them.
fn decode(id: u32, blocks: &[u8], out: &mut [f32]) -> bool {
    GgmlType::from_id(id).is_some_and(|ty| dequantize(ty, blocks, out).is_ok())
}
