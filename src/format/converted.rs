//! The safetensors file a checkpoint of another format converts to, laid out exactly as the
//! official writer (`safetensors.torch.save_file(state_dict, path, metadata={"format": "pt"})`)
//! lays it out: tensors sorted by descending dtype, then by name; the header serialised by the
//! official crate's own `Metadata`, padded with spaces to a multiple of 8 bytes. Only the header is
//! made here; every tensor's bytes stay where the checkpoint has them.

use std::collections::HashMap;
use std::sync::Arc;

use ::safetensors::tensor::{Metadata, TensorInfo};

use super::description::Tensor;

/// The metadata the official conversion writes (`metadata={"format": "pt"}`).
const METADATA: (&str, &str) = ("format", "pt");

/// The header length prefix and the header's alignment, as the official writer has them.
const PREFIX_LEN: usize = 8;

/// A virtual safetensors file: its header (length prefix included), then each tensor's bytes in
/// order.
#[derive(Debug)]
pub struct Converted {
    /// The length prefix and the padded JSON header.
    pub header: Arc<[u8]>,
    /// The tensors in data order, each with where its bytes start in the data section.
    pub parts: Vec<Part>,
    /// The length of the data section.
    pub data_len: u64,
}

/// One tensor of a [`Converted`] file.
#[derive(Debug)]
pub struct Part {
    /// Where its bytes start, relative to the data section.
    pub start: u64,
    pub tensor: Arc<Tensor>,
}

impl Converted {
    /// The file the official writer makes of `state_dict` (tensors by the names they get), or the
    /// crate's reason for refusing it.
    pub fn of(state_dict: &[(Arc<str>, Arc<Tensor>)]) -> Result<Converted, String> {
        let mut sorted: Vec<&(Arc<str>, Arc<Tensor>)> = state_dict.iter().collect();
        sorted.sort_by(|(a, x), (b, y)| {
            y.dtype
                .safetensors()
                .cmp(&x.dtype.safetensors())
                .then(a.cmp(b))
        });
        let mut infos = Vec::with_capacity(sorted.len());
        let mut parts = Vec::with_capacity(sorted.len());
        let mut offset: u64 = 0;
        for (name, tensor) in sorted {
            let end = offset
                .checked_add(tensor.size())
                .ok_or("the tensors' total size overflows")?;
            let to_usize = |n: u64| usize::try_from(n).map_err(|_| "a tensor too large");
            let dtype = tensor.dtype.safetensors().ok_or_else(|| {
                format!(
                    "{name} is {}, which safetensors has no dtype for",
                    tensor.dtype
                )
            })?;
            infos.push((
                name.to_string(),
                TensorInfo {
                    dtype,
                    shape: tensor.shape.to_vec(),
                    data_offsets: (to_usize(offset)?, to_usize(end)?),
                },
            ));
            parts.push(Part {
                start: offset,
                tensor: tensor.clone(),
            });
            offset = end;
        }
        let metadata = HashMap::from([(METADATA.0.to_string(), METADATA.1.to_string())]);
        let metadata = Metadata::new(Some(metadata), infos).map_err(|e| e.to_string())?;
        let mut json = serde_json::to_vec(&metadata).map_err(|e| e.to_string())?;
        json.resize(json.len().next_multiple_of(PREFIX_LEN), b' ');
        let mut header = Vec::with_capacity(PREFIX_LEN + json.len());
        header.extend_from_slice(&(json.len() as u64).to_le_bytes());
        header.extend_from_slice(&json);
        Ok(Converted {
            header: header.into(),
            parts,
            data_len: offset,
        })
    }

    /// The file's size.
    pub fn len(&self) -> u64 {
        self.header.len() as u64 + self.data_len
    }

    /// Whether the file is empty (never: it always has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The index of the part holding data byte `at` (the first part whose end is past it).
    pub fn part_at(&self, at: u64) -> usize {
        self.parts
            .partition_point(|p| p.start + p.tensor.size() <= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Dtype;

    fn tensor(dtype: Dtype, shape: &[usize], begin: u64, size: u64) -> Arc<Tensor> {
        Arc::new(Tensor {
            name: "ignored".into(),
            dtype,
            shape: shape.into(),
            begin,
            end: begin + size,
            strides: None,
        })
    }

    /// The official crate, given the same tensors with their bytes, writes the same header: the
    /// writer's own serialisation is the oracle.
    #[test]
    fn the_header_is_the_official_writers() {
        let sd: Vec<(Arc<str>, Arc<Tensor>)> = vec![
            ("b.weight".into(), tensor(Dtype::F16, &[2, 2], 100, 8)),
            ("a.weight".into(), tensor(Dtype::F32, &[3], 0, 12)),
            ("a.bias".into(), tensor(Dtype::F16, &[1], 300, 2)),
            ("z".into(), tensor(Dtype::F32, &[0], 0, 0)),
        ];
        let c = Converted::of(&sd).unwrap();
        let data: Vec<(String, ::safetensors::tensor::TensorView<'static>)> = sd
            .iter()
            .map(|(name, t)| {
                let bytes: &'static [u8] = Box::leak(vec![0u8; t.size() as usize].into());
                let view = ::safetensors::tensor::TensorView::new(
                    t.dtype.safetensors().unwrap(),
                    t.shape.to_vec(),
                    bytes,
                )
                .unwrap();
                (name.to_string(), view)
            })
            .collect();
        let info = HashMap::from([("format".to_string(), "pt".to_string())]);
        let official = ::safetensors::tensor::serialize(data, Some(info)).unwrap();
        assert_eq!(&official[..c.header.len()], &c.header[..]);
        assert_eq!(official.len() as u64, c.len());
        let order: Vec<u64> = c.parts.iter().map(|p| p.tensor.begin).collect();
        // F32 before F16, each by name (a.weight, z; a.bias, b.weight).
        assert_eq!(order, [0, 0, 300, 100]);
        assert_eq!(c.part_at(0), 0);
        assert_eq!(c.part_at(12), 2);
        assert_eq!(c.part_at(14), 3);
    }
}
