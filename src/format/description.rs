//! What a checkpoint reader says of a file: its tensors (name, dtype, shape, where its bytes are)
//! and its metadata. The one shape every format's reader produces, and all the namespace lays out.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use ::safetensors::Dtype;

/// A format whose files the mount interprets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `NAME.safetensors`.
    Safetensors,
    /// A PyTorch checkpoint written by `torch.save` (zip or legacy pickle): `NAME.bin`,
    /// `NAME.pt`, `NAME.pth`, `NAME.ckpt`.
    Pytorch,
}

impl Format {
    /// Every format, in the order their readers are tried for a name.
    pub const ALL: [Format; 2] = [Format::Safetensors, Format::Pytorch];

    /// The suffixes of PyTorch checkpoints.
    const PYTORCH: [&'static [u8]; 4] = [b".bin", b".pt", b".pth", b".ckpt"];

    /// The format a file's name says, with the stem its tensor directory is named after
    /// (`model.safetensors` gives `model`, hence `model.tensors/`).
    pub fn of(file_name: &[u8]) -> Option<(Format, &[u8])> {
        if let Some(stem) = file_name.strip_suffix(b".safetensors") {
            return Some((Format::Safetensors, stem));
        }
        Format::PYTORCH
            .iter()
            .find_map(|suffix| file_name.strip_suffix(*suffix))
            .filter(|stem| !stem.is_empty())
            .map(|stem| (Format::Pytorch, stem))
    }

    /// Its index in [`Format::ALL`].
    pub fn index(self) -> usize {
        match self {
            Format::Safetensors => 0,
            Format::Pytorch => 1,
        }
    }
}

/// A file's tensors and metadata, as its format's reader found them.
#[derive(Debug)]
pub struct Description {
    pub format: Format,
    /// What the reader found the file to be: `safetensors`, `pytorch-zip` or `pytorch-legacy`
    /// (the `user.tensormount.format` xattr).
    pub kind: &'static str,
    /// Absolute offset in the file of the data the tensors' offsets are relative to (for
    /// safetensors, the data buffer after the header: 8 + header length).
    pub data_start: u64,
    /// Tensors in data order (ascending offsets).
    pub tensors: Vec<Arc<Tensor>>,
    /// The metadata map; `None` when absent (or `null`).
    pub metadata: Option<BTreeMap<String, String>>,
    /// What the reader left out or found odd, each a whole message naming the file (warned once
    /// per version of the file).
    pub notes: Vec<String>,
    /// For a file of another format: the tensors of the safetensors file it converts to (its
    /// state dict, by the names the conversion gives them), or why it is not offered as one.
    /// `None` for a safetensors file.
    pub conversion: Option<Result<StateDict, String>>,
}

/// The tensors of a state dict, by the names the dict gives them.
pub type StateDict = Vec<(Arc<str>, Arc<Tensor>)>;

/// One tensor of a file.
#[derive(Debug)]
pub struct Tensor {
    /// Shared with the tensor's file names where those are the name itself.
    pub name: Arc<str>,
    pub dtype: Dtype,
    pub shape: Box<[usize]>,
    /// `[begin, end)` relative to [`Description::data_start`] (for safetensors, as in the header).
    /// For a strided tensor, `begin` is where its first element is stored and `end - begin` its
    /// size once gathered.
    pub begin: u64,
    pub end: u64,
    /// For a tensor whose elements are not one contiguous stretch (a transposed or sliced view
    /// saved by `torch.save`): the distance in elements between neighbours along each dimension.
    /// Its elements are gathered on read. Every element lies within the file (checked by the
    /// reader).
    pub strides: Option<Box<[u64]>>,
    /// For an element type safetensors has no name for (a checkpoint's complex32 or complex128):
    /// the name tensormount gives it (`C32`, `C128`) and its size in bytes. `dtype` is then `U8`,
    /// the type of its bytes taken one by one, and the tensor is a file only: no NPY view, no
    /// widening, no place in a conversion.
    pub unnamed: Option<(&'static str, u64)>,
}

impl Tensor {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.begin
    }

    /// The dtype as the header spells it (`BF16`, `F8_E4M3`, ...), or the name of an element type
    /// safetensors has none for.
    pub fn dtype_name(&self) -> String {
        match self.unnamed {
            Some((name, _)) => name.to_string(),
            None => format!("{:?}", self.dtype),
        }
    }

    /// The size of one element in bytes (1 for the sub-byte dtypes, whose elements are packed).
    pub fn element_size(&self) -> u64 {
        match self.unnamed {
            Some((_, size)) => size,
            None => (self.dtype.bitsize() / 8).max(1) as u64,
        }
    }

    /// The shape as a JSON array without spaces, e.g. `[4096,11008]`.
    pub fn shape_json(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        format!("[{}]", dims.join(","))
    }
}
