//! The safetensors file a checkpoint of another format converts to, laid out exactly as the
//! official writer (`safetensors.torch.save_file(state_dict, path, metadata=...)`) lays it out:
//! tensors sorted by descending dtype, then by name; the header serialised by the official crate's
//! own `Metadata`, padded with spaces to a multiple of 8 bytes. Only the header is made here; every
//! tensor's bytes stay where the checkpoint has them. A tensor of a type safetensors lacks that
//! tensormount decodes (a GGUF quantized type) is an F32 tensor of its decoded values, computed on
//! read as `-o dtype=f32` computes them.

use std::collections::HashMap;
use std::sync::Arc;

use ::safetensors::tensor::{Metadata, TensorInfo};

use super::description::{Conversion, Tensor};
use super::widen::{Target, Widening};

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
    /// How its stored elements become its bytes here; `None` for as stored.
    pub widen: Option<Widening>,
}

impl Part {
    /// Its length in the file.
    pub fn len(&self) -> u64 {
        match self.widen {
            Some(w) => w.presented_len(self.tensor.size()),
            None => self.tensor.size(),
        }
    }

    /// Whether it has no bytes (a tensor with a zero dimension).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where its bytes end, relative to the data section.
    pub fn end(&self) -> u64 {
        self.start + self.len()
    }
}

impl Converted {
    /// The file the official writer makes of `conversion` (its tensors by the names they get, and
    /// its metadata), or the crate's reason for refusing it.
    pub fn of(conversion: &Conversion) -> Result<Converted, String> {
        let mut typed = Vec::with_capacity(conversion.state_dict.len());
        for (name, tensor) in &conversion.state_dict {
            let (dtype, widen) = match tensor.dtype.safetensors() {
                Some(d) => (d, None),
                None => match Widening::new(tensor.dtype, Target::F32) {
                    Some(w) => (::safetensors::Dtype::F32, Some(w)),
                    None => {
                        return Err(format!(
                            "{name} is {}, which safetensors has no dtype for and tensormount does \
                             not decode",
                            tensor.dtype
                        ));
                    }
                },
            };
            typed.push((name, tensor, dtype, widen));
        }
        typed.sort_by(|(a, _, x, _), (b, _, y, _)| y.cmp(x).then(a.cmp(b)));
        let mut infos = Vec::with_capacity(typed.len());
        let mut parts = Vec::with_capacity(typed.len());
        let mut offset: u64 = 0;
        for (name, tensor, dtype, widen) in typed {
            let part = Part {
                start: offset,
                tensor: tensor.clone(),
                widen,
            };
            let end = offset
                .checked_add(part.len())
                .ok_or("the tensors' total size overflows")?;
            let to_usize = |n: u64| usize::try_from(n).map_err(|_| "a tensor too large");
            infos.push((
                name.to_string(),
                TensorInfo {
                    dtype,
                    shape: tensor.shape.to_vec(),
                    data_offsets: (to_usize(offset)?, to_usize(end)?),
                },
            ));
            parts.push(part);
            offset = end;
        }
        let metadata: HashMap<String, String> = conversion.metadata.clone().into_iter().collect();
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
        self.parts.partition_point(|p| p.end() <= at)
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
            computed: None,
            file: None,
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
        let metadata = [("format".to_string(), "pt".to_string())].into();
        let c = Converted::of(&Conversion {
            state_dict: sd.clone(),
            metadata,
        })
        .unwrap();
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
