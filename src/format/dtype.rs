//! The element types of tensors, as tensormount names them: every dtype safetensors has, the
//! complex types only PyTorch checkpoints hold (`C32`, `C128`), and packed blocks of elements
//! stored with their scales (the quantized types of GGUF), which only the format that has them
//! can decode.

use std::fmt;
use std::hash::{Hash, Hasher};

use ::safetensors::Dtype as St;

/// An element type.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
    /// Complex numbers of two float16s (PyTorch's `complex32`), which safetensors cannot name.
    C32,
    /// Complex numbers of two float64s (PyTorch's `complex128`), which safetensors cannot name.
    C128,
    /// Blocks of elements stored together with their scales.
    Block(&'static Block),
}

/// A packed block type: `elements` elements in `bytes` bytes, decoded (if the format knows how)
/// by `decode`.
pub struct Block {
    /// The name its format gives it (`Q4_K`, `IQ4_NL`).
    pub name: &'static str,
    /// Its format's number for it.
    pub id: u32,
    pub elements: u32,
    pub bytes: u32,
    /// Fills `out` (a whole number of blocks' elements) with the float32 values of `blocks` (as
    /// many whole blocks) of type `id`, false if it cannot; `None` for a type no decoder is
    /// known for.
    pub decode: Option<Decode>,
    /// The xattr of a tensor file of this type that says `[ELEMENTS,BYTES]` of a block (its
    /// format's: `user.gguf.block`, `user.onnx.packed`).
    pub xattr: &'static str,
}

/// A block type's decoder: fills `out` with the float32 values of `blocks` of type `id`.
pub type Decode = fn(id: u32, blocks: &[u8], out: &mut [f32]) -> bool;

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        self.name == other.name
    }
}

impl Eq for Block {}

impl Hash for Block {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.name.hash(h);
    }
}

/// The types safetensors has: ours, the crate's, and the header's name for it.
const SAFETENSORS: [(Dtype, St, &str); 22] = [
    (Dtype::BOOL, St::BOOL, "BOOL"),
    (Dtype::F4, St::F4, "F4"),
    (Dtype::F6_E2M3, St::F6_E2M3, "F6_E2M3"),
    (Dtype::F6_E3M2, St::F6_E3M2, "F6_E3M2"),
    (Dtype::U8, St::U8, "U8"),
    (Dtype::I8, St::I8, "I8"),
    (Dtype::F8_E5M2, St::F8_E5M2, "F8_E5M2"),
    (Dtype::F8_E4M3, St::F8_E4M3, "F8_E4M3"),
    (Dtype::F8_E8M0, St::F8_E8M0, "F8_E8M0"),
    (Dtype::F8_E4M3FNUZ, St::F8_E4M3FNUZ, "F8_E4M3FNUZ"),
    (Dtype::F8_E5M2FNUZ, St::F8_E5M2FNUZ, "F8_E5M2FNUZ"),
    (Dtype::I16, St::I16, "I16"),
    (Dtype::U16, St::U16, "U16"),
    (Dtype::F16, St::F16, "F16"),
    (Dtype::BF16, St::BF16, "BF16"),
    (Dtype::I32, St::I32, "I32"),
    (Dtype::U32, St::U32, "U32"),
    (Dtype::F32, St::F32, "F32"),
    (Dtype::C64, St::C64, "C64"),
    (Dtype::F64, St::F64, "F64"),
    (Dtype::I64, St::I64, "I64"),
    (Dtype::U64, St::U64, "U64"),
];

impl From<St> for Dtype {
    fn from(st: St) -> Dtype {
        SAFETENSORS
            .iter()
            .find(|(_, s, _)| *s == st)
            .map_or(Dtype::U8, |(d, _, _)| *d)
    }
}

impl Dtype {
    /// The safetensors dtype it is, if safetensors has it.
    pub fn safetensors(self) -> Option<St> {
        SAFETENSORS
            .iter()
            .find(|(d, _, _)| *d == self)
            .map(|(_, s, _)| *s)
    }

    /// Its name: as a safetensors header spells it, or `C32`, `C128`, or the block type's.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::C32 => "C32",
            Dtype::C128 => "C128",
            Dtype::Block(b) => b.name,
            _ => SAFETENSORS
                .iter()
                .find(|(d, _, _)| *d == self)
                .map_or("?", |(_, _, n)| n),
        }
    }

    /// Elements per group and bytes per group: whole bytes of one element, two F4 elements a
    /// byte, or a block.
    pub fn group(self) -> (u64, u64) {
        match self {
            Dtype::C32 => (1, 4),
            Dtype::C128 => (1, 16),
            Dtype::Block(b) => (u64::from(b.elements), u64::from(b.bytes)),
            Dtype::F4 => (2, 1),
            // The 6-bit types: four elements in three bytes.
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => (4, 3),
            _ => (1, self.safetensors().map_or(1, |s| s.bitsize() as u64 / 8)),
        }
    }

    /// The size in bytes of `elements` elements, if they are whole groups (and do not overflow).
    pub fn size_of(self, elements: u64) -> Option<u64> {
        let (per, bytes) = self.group();
        elements.is_multiple_of(per).then_some(())?;
        (elements / per).checked_mul(bytes)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every safetensors dtype round-trips, and is named as the crate's serialiser names it.
    #[test]
    fn the_safetensors_types_are_the_crates() {
        for (d, st, _) in SAFETENSORS {
            assert_eq!(Dtype::from(st), d);
            assert_eq!(d.safetensors(), Some(st));
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(d.size_of(8), Some(8 * st.bitsize() as u64 / 8), "{d}");
        }
        assert_eq!(Dtype::C128.safetensors(), None);
        assert_eq!(Dtype::C32.size_of(3), Some(12));
    }

    #[test]
    fn blocks_are_sized_in_whole_blocks() {
        static Q: Block = Block {
            name: "Q8_0",
            id: 8,
            elements: 32,
            bytes: 34,
            decode: None,
            xattr: "user.test.block",
        };
        let q = Dtype::Block(&Q);
        assert_eq!(q.name(), "Q8_0");
        assert_eq!(q.size_of(64), Some(68));
        assert_eq!(q.size_of(33), None);
        assert_eq!(q.safetensors(), None);
    }
}
