//! The ggml tensor types, as gguf-py 0.19.0 defines them (`GGMLQuantizationType` and
//! `GGML_QUANT_SIZES` in `constants.py`).

/// A ggml tensor type: how the elements of a tensor are encoded, in blocks of a fixed number of
/// elements stored in a fixed number of bytes. The variants are spelled as gguf-py spells them,
/// and their discriminants are the ids a GGUF file stores.
///
/// Ids that ggml once used and has removed (4, 5, 31 to 33, 36 to 38) are not types.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary16.
    F16 = 1,
    /// Blocks of 32 4-bit integers less 8, times a float16 scale.
    Q4_0 = 2,
    /// Blocks of 32 4-bit integers times a float16 scale, plus a float16 minimum.
    Q4_1 = 3,
    /// Blocks of 32 5-bit integers less 16, times a float16 scale.
    Q5_0 = 6,
    /// Blocks of 32 5-bit integers times a float16 scale, plus a float16 minimum.
    Q5_1 = 7,
    /// Blocks of 32 8-bit integers times a float16 scale.
    Q8_0 = 8,
    /// Blocks of 32 8-bit integers with a float32 scale and sum (an intermediate type).
    Q8_1 = 9,
    /// Super-blocks of 256: 2-bit values, 4-bit scales and minimums.
    Q2_K = 10,
    /// Super-blocks of 256: 3-bit values, 6-bit scales.
    Q3_K = 11,
    /// Super-blocks of 256: 4-bit values, 6-bit scales and minimums.
    Q4_K = 12,
    /// Super-blocks of 256: 5-bit values, 6-bit scales and minimums.
    Q5_K = 13,
    /// Super-blocks of 256: 6-bit values, 8-bit scales.
    Q6_K = 14,
    /// Super-blocks of 256 8-bit integers with a float32 scale (an intermediate type).
    Q8_K = 15,
    /// Super-blocks of 256 on a grid of 256 rows of 8, about 2.06 bits per value.
    IQ2_XXS = 16,
    /// Super-blocks of 256 on a grid of 512 rows of 8, about 2.31 bits per value.
    IQ2_XS = 17,
    /// Super-blocks of 256 on a grid of 256 rows of 4, about 3.06 bits per value.
    IQ3_XXS = 18,
    /// Super-blocks of 256 on a ternary grid of 2048 rows of 8, about 1.56 bits per value.
    IQ1_S = 19,
    /// Blocks of 32 4-bit indices into 16 non-linear values, times a float16 scale.
    IQ4_NL = 20,
    /// Super-blocks of 256 on a grid of 512 rows of 4, about 3.44 bits per value.
    IQ3_S = 21,
    /// Super-blocks of 256 on a grid of 1024 rows of 8, about 2.56 bits per value.
    IQ2_S = 22,
    /// Super-blocks of 256 of IQ4_NL values with 6-bit scales.
    IQ4_XS = 23,
    /// Signed 8-bit integer.
    I8 = 24,
    /// Signed 16-bit integer.
    I16 = 25,
    /// Signed 32-bit integer.
    I32 = 26,
    /// Signed 64-bit integer.
    I64 = 27,
    /// IEEE 754 binary64.
    F64 = 28,
    /// Super-blocks of 256 on the IQ1_S grid, with 3-bit scales, about 1.75 bits per value.
    IQ1_M = 29,
    /// bfloat16: the top half of a binary32.
    BF16 = 30,
    /// Super-blocks of 256 ternary values, packed 5 to a byte (base 3), about 1.69 bits per value.
    TQ1_0 = 34,
    /// Super-blocks of 256 ternary values in 2 bits each.
    TQ2_0 = 35,
    /// Blocks of 32 E2M1 values with an E8M0 scale (OCP microscaling).
    MXFP4 = 39,
    /// Blocks of 64 E2M1 values with an unsigned E4M3 scale per 16.
    NVFP4 = 40,
    /// Blocks of 128 1-bit values with a float16 scale.
    Q1_0 = 41,
}

/// Elements in a block of the k-quant and i-quant types (`QK_K`).
const QK_K: u32 = 256;

/// The block of each type: `(elements, bytes)`, as `GGML_QUANT_SIZES` gives it.
const fn block(ty: GgmlType) -> (u32, u32) {
    use GgmlType::*;
    match ty {
        F32 => (1, 4),
        F16 => (1, 2),
        Q4_0 => (32, 2 + 16),
        Q4_1 => (32, 2 + 2 + 16),
        Q5_0 => (32, 2 + 4 + 16),
        Q5_1 => (32, 2 + 2 + 4 + 16),
        Q8_0 => (32, 2 + 32),
        Q8_1 => (32, 4 + 4 + 32),
        Q2_K => (QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
        Q3_K => (QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
        Q4_K => (QK_K, 2 + 2 + QK_K / 2 + 12),
        Q5_K => (QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
        Q6_K => (QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
        Q8_K => (QK_K, 4 + QK_K + QK_K / 8),
        IQ2_XXS => (QK_K, 2 + QK_K / 4),
        IQ2_XS => (QK_K, 2 + QK_K / 4 + QK_K / 32),
        IQ3_XXS => (QK_K, 2 + QK_K / 4 + QK_K / 8),
        IQ1_S => (QK_K, 2 + QK_K / 8 + QK_K / 16),
        IQ4_NL => (32, 2 + 16),
        IQ3_S => (QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
        IQ2_S => (QK_K, 2 + QK_K / 4 + QK_K / 16),
        IQ4_XS => (QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
        I8 => (1, 1),
        I16 => (1, 2),
        I32 => (1, 4),
        I64 => (1, 8),
        F64 => (1, 8),
        IQ1_M => (QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
        BF16 => (1, 2),
        TQ1_0 => (QK_K, 2 + 4 * 13),
        TQ2_0 => (QK_K, 2 + 64),
        MXFP4 => (32, 1 + 16),
        NVFP4 => (64, 4 + 32),
        Q1_0 => (128, 2 + 16),
    }
}

impl GgmlType {
    /// Every type, in the order of their ids.
    pub const ALL: [GgmlType; 34] = {
        use GgmlType::*;
        [
            F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
            IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64,
            IQ1_M, BF16, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0,
        ]
    };

    /// The type a GGUF file means by `id`, or `None` for an id that is no type (never one, or
    /// one ggml has removed).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The id a GGUF file stores for the type.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type's name as gguf-py spells it (`GGMLQuantizationType(id).name`): `F32`, `Q4_K`,
    /// `IQ2_XXS`, `BF16`, `MXFP4`.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }

    /// Elements in one block of the type (1 for the plain number types).
    pub fn block_elements(self) -> u32 {
        block(self).0
    }

    /// Bytes in one block of the type.
    pub fn block_bytes(self) -> u32 {
        block(self).1
    }

    /// Whether [`dequantize`](super::dequantize) converts the type to float32: every type that
    /// gguf-py 0.19.0's `gguf.quants.dequantize` converts, and no other (not Q8_1, Q8_K, Q1_0,
    /// F64 nor the integer types).
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        !matches!(self, Q8_1 | Q8_K | Q1_0 | I8 | I16 | I32 | I64 | F64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
