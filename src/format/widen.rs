//! Exact widening of narrow floating-point tensors to float32 or float64 (`-o dtype=f32|f64`).
//!
//! Every value of BF16, F16 and the 8-bit float formats is exactly representable in float32, and
//! every float32 in float64, so widening never changes a value. What each format's special
//! encodings become:
//! - BF16: the 16 bits become the high half of the float32 (NaN payloads kept); to float64 through
//!   float32, as `ml_dtypes` does.
//! - F16: IEEE half to single or double with NaN payloads kept (numpy's conversion).
//! - F8_E5M2 (IEEE-like): ±inf stay ±inf; its NaNs become the quiet NaN of the target with their sign.
//! - F8_E4M3 (OCP "FN": no inf, NaN is S.1111.111): NaN becomes the quiet NaN with its sign.
//! - F8_E4M3FNUZ, F8_E5M2FNUZ (no inf, no -0; 0x80 is the only NaN): 0x80 becomes the quiet NaN
//!   with the sign bit set (`ml_dtypes` gives the same bits).
//! - F8_E8M0 (unsigned powers of two 2^(e-127), 0xFF is NaN): 2^-127 is a float32 subnormal,
//!   exact; 0xFF becomes the positive quiet NaN.
//! - F4 (E2M1, no inf or NaN): two elements a byte, the first in the low nibble, the order of
//!   PyTorch's `float4_e2m1fn_x2` (torch/headeronly/util/Float4_e2m1fn_x2.h: "val1 : val0" from
//!   MSB to LSB), the type the reference's Python binding maps `F4` to.
//! - F32 to float64: the hardware conversion (signalling NaNs are quieted, as numpy does).
//!
//! The 6-bit formats (F6_E2M3, F6_E3M2) are served as stored: no reference defines how four of
//! their elements are packed in three bytes (the safetensors format leaves it to the producer, and
//! its Python binding maps them to no type), and a guessed order would give wrong values silently.

use super::{Block, Dtype, half};

/// The type narrower floats are presented as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    F32,
    F64,
}

impl Target {
    /// `f32` or `f64`, as the option spells it.
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "f32" => Some(Target::F32),
            "f64" => Some(Target::F64),
            _ => None,
        }
    }

    pub fn dtype(self) -> Dtype {
        match self {
            Target::F32 => Dtype::F32,
            Target::F64 => Dtype::F64,
        }
    }

    /// Bytes per presented element.
    pub fn width(self) -> u64 {
        match self {
            Target::F32 => 4,
            Target::F64 => 8,
        }
    }
}

/// How one stored float format is widened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    Bf16,
    F16,
    /// An 8-bit format, through its table of float32 bits.
    Byte(&'static [u32; 256]),
    /// F4 (E2M1), two elements a byte, the first in the low nibble.
    F4,
    F32,
    /// Packed blocks, decoded to float32 by their format's decoder (a GGUF quantized type).
    Block(&'static Block),
}

impl From {
    /// Stored bytes per element, or for F4 the bytes of two elements.
    fn group_bytes(self) -> u64 {
        match self {
            From::Bf16 | From::F16 => 2,
            From::Byte(_) | From::F4 => 1,
            From::F32 => 4,
            From::Block(b) => u64::from(b.bytes),
        }
    }

    /// Elements per group of [`From::group_bytes`].
    fn per_group(self) -> u64 {
        match self {
            From::F4 => 2,
            From::Block(b) => u64::from(b.elements),
            _ => 1,
        }
    }
}

/// The widening of one tensor: stored elements of `from` presented as `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widening {
    from: From,
    to: Target,
}

/// The bytes of the stored tensor that one read needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredRange {
    /// Byte offset in the tensor's stored bytes.
    pub start: u64,
    /// Byte length.
    pub len: u64,
}

impl Widening {
    /// How a tensor of `dtype` is presented under `-o dtype=to`; `None` when it is served as
    /// stored (not a float, already at least as wide, or a 6-bit format).
    pub fn new(dtype: Dtype, to: Target) -> Option<Widening> {
        let from = match dtype {
            Dtype::BF16 => From::Bf16,
            Dtype::F16 => From::F16,
            Dtype::F8_E5M2 => From::Byte(&E5M2),
            Dtype::F8_E4M3 => From::Byte(&E4M3FN),
            Dtype::F8_E4M3FNUZ => From::Byte(&E4M3FNUZ),
            Dtype::F8_E5M2FNUZ => From::Byte(&E5M2FNUZ),
            Dtype::F8_E8M0 => From::Byte(&E8M0),
            Dtype::F4 => From::F4,
            Dtype::F32 if to == Target::F64 => From::F32,
            Dtype::Block(b) if b.decode.is_some() && b.elements > 0 && b.bytes > 0 => {
                From::Block(b)
            }
            _ => return None,
        };
        Some(Widening { from, to })
    }

    pub fn target(&self) -> Target {
        self.to
    }

    /// The presented size of a tensor whose stored bytes are `stored_len` long.
    pub fn presented_len(&self, stored_len: u64) -> u64 {
        stored_len / self.from.group_bytes() * self.from.per_group() * self.to.width()
    }

    /// The stored bytes holding the elements that presented bytes `[offset, offset + len)` cover
    /// (whole elements, and for F4 whole bytes: a read may start or end inside either).
    pub fn stored_range(&self, offset: u64, len: u64) -> StoredRange {
        let (w, per, gb) = (
            self.to.width(),
            self.from.per_group(),
            self.from.group_bytes(),
        );
        let first = offset / w / per;
        let end = offset.saturating_add(len).div_ceil(w).div_ceil(per);
        StoredRange {
            start: first * gb,
            len: end.saturating_sub(first) * gb,
        }
    }

    /// Fills `out` with presented bytes `[offset, offset + out.len())` from `stored`, the bytes
    /// of [`Self::stored_range`]`(offset, out.len())`. Returns `false` (and fills nothing) if
    /// `stored` is too short for that.
    pub fn convert(&self, stored: &[u8], offset: u64, out: &mut [u8]) -> bool {
        if out.is_empty() {
            return true;
        }
        let w = self.to.width() as usize;
        let per = self.from.per_group() as usize;
        // The element `offset` falls in, counted from the start of `stored`.
        let mut element = (offset / w as u64) as usize % per;
        let skip = (offset % w as u64) as usize;
        let elements = (skip + out.len()).div_ceil(w);
        let needed = (element + elements).div_ceil(per) * self.from.group_bytes() as usize;
        if stored.len() < needed {
            return false;
        }
        // Whole elements are widened straight into `out`; a first element that starts before
        // `offset` and a last one that ends after the read go through `one`.
        let mut one = [0u8; 8];
        let mut pos = 0;
        if skip != 0 {
            self.widen(stored, element, &mut one[..w]);
            let n = (w - skip).min(out.len());
            out[..n].copy_from_slice(&one[skip..skip + n]);
            element += 1;
            pos = n;
        }
        let whole = (out.len() - pos) / w;
        let body_end = pos + whole * w;
        self.widen(stored, element, &mut out[pos..body_end]);
        if body_end < out.len() {
            self.widen(stored, element + whole, &mut one[..w]);
            let n = out.len() - body_end;
            out[body_end..].copy_from_slice(&one[..n]);
        }
        true
    }

    /// Widens `out.len() / width` whole elements, from element `first` of `stored` on.
    fn widen(&self, stored: &[u8], first: usize, out: &mut [u8]) {
        let stored =
            &stored[first / self.from.per_group() as usize * self.from.group_bytes() as usize..];
        match (self.from, self.to) {
            (From::Bf16, Target::F32) => {
                for (o, s) in out.chunks_exact_mut(4).zip(stored.chunks_exact(2)) {
                    let bits = u32::from(u16::from_le_bytes([s[0], s[1]])) << 16;
                    o.copy_from_slice(&bits.to_le_bytes());
                }
            }
            (From::Bf16, Target::F64) => {
                for (o, s) in out.chunks_exact_mut(8).zip(stored.chunks_exact(2)) {
                    let bits = u32::from(u16::from_le_bytes([s[0], s[1]])) << 16;
                    o.copy_from_slice(&f64::from(f32::from_bits(bits)).to_le_bytes());
                }
            }
            (From::F16, Target::F32) => {
                for (o, s) in out.chunks_exact_mut(4).zip(stored.chunks_exact(2)) {
                    let bits = half::f16_bits_of([s[0], s[1]]);
                    o.copy_from_slice(&bits.to_le_bytes());
                }
            }
            (From::F16, Target::F64) => {
                for (o, s) in out.chunks_exact_mut(8).zip(stored.chunks_exact(2)) {
                    let bits = f16_to_f64_bits(u16::from_le_bytes([s[0], s[1]]));
                    o.copy_from_slice(&bits.to_le_bytes());
                }
            }
            (From::Byte(table), Target::F32) => {
                for (o, &s) in out.chunks_exact_mut(4).zip(stored) {
                    o.copy_from_slice(&table[usize::from(s)].to_le_bytes());
                }
            }
            (From::Byte(table), Target::F64) => {
                for (o, &s) in out.chunks_exact_mut(8).zip(stored) {
                    let v = f64::from(f32::from_bits(table[usize::from(s)]));
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            (From::F4, to) => {
                let w = to.width() as usize;
                let one = |o: &mut [u8], e: usize| {
                    let code = (stored[e / 2] >> (4 * (e % 2))) & 0xf;
                    let bits = E2M1[usize::from(code)];
                    match to {
                        Target::F32 => o.copy_from_slice(&bits.to_le_bytes()),
                        Target::F64 => {
                            o.copy_from_slice(&f64::from(f32::from_bits(bits)).to_le_bytes())
                        }
                    }
                };
                let (mut out, mut e) = (out, first % 2);
                if e == 1 && !out.is_empty() {
                    let (head, rest) = out.split_at_mut(w);
                    one(head, 1);
                    (out, e) = (rest, 2);
                }
                // Whole bytes: both elements of each at once.
                let pairs = out.len() / (2 * w);
                let (body, tail) = out.split_at_mut(pairs * 2 * w);
                if to == Target::F32 {
                    for (o, &b) in body.chunks_exact_mut(8).zip(&stored[e / 2..]) {
                        o.copy_from_slice(&E2M1_PAIRS[usize::from(b)].to_le_bytes());
                    }
                } else {
                    for (i, o) in body.chunks_exact_mut(w).enumerate() {
                        one(o, e + i);
                    }
                }
                if !tail.is_empty() {
                    one(tail, e + 2 * pairs);
                }
            }
            (From::F32, Target::F64) => {
                for (o, s) in out.chunks_exact_mut(8).zip(stored.chunks_exact(4)) {
                    let v = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    o.copy_from_slice(&f64::from(v).to_le_bytes());
                }
            }
            // The identity (`new` never builds it: F32 is widened only to F64).
            (From::F32, Target::F32) => out.copy_from_slice(&stored[..out.len()]),
            (From::Block(b), to) => decode_blocks(b, stored, first % b.elements as usize, to, out),
        }
    }
}

/// How many elements [`decode_blocks`] decodes at a time (a whole number of blocks of up to 256
/// elements each, on the stack).
const DECODED: usize = 4096;

/// Decodes blocks of `b` from the start of `stored` and writes their elements from element `skip`
/// on to `out` (as many as it holds) as `to`. A block that cannot be decoded gives NaN.
fn decode_blocks(b: &Block, stored: &[u8], mut skip: usize, to: Target, out: &mut [u8]) {
    let (per, bytes) = (b.elements as usize, b.bytes as usize);
    let Some(decode) = b.decode else { return };
    let w = to.width() as usize;
    let per_round = (DECODED / per).max(1);
    let mut values = [0f32; DECODED];
    let mut out = out;
    for blocks in stored.chunks(per_round * bytes) {
        if out.is_empty() {
            break;
        }
        let n = blocks.len() / bytes;
        let values = &mut values[..(n * per).min(DECODED)];
        if !decode(b.id, &blocks[..n * bytes], values) {
            values.fill(f32::NAN);
        }
        let values = values.get(skip..).unwrap_or(&[]);
        skip = 0;
        let count = values.len().min(out.len() / w);
        let (now, rest) = out.split_at_mut(count * w);
        match to {
            Target::F32 => {
                for (o, v) in now.chunks_exact_mut(4).zip(values) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Target::F64 => {
                for (o, v) in now.chunks_exact_mut(8).zip(values) {
                    o.copy_from_slice(&f64::from(*v).to_le_bytes());
                }
            }
        }
        out = rest;
    }
}

/// IEEE half to double, bit for bit (NaN payloads kept, as numpy does).
fn f16_to_f64_bits(h: u16) -> u64 {
    let sign = u64::from(h & 0x8000) << 48;
    let exp = u64::from(h >> 10) & 0x1f;
    let mant = u64::from(h & 0x3ff);
    match exp {
        0 if mant == 0 => sign,
        0 => {
            let p = 63 - mant.leading_zeros() as u64;
            sign | ((p + 999) << 52) | ((mant ^ (1 << p)) << (52 - p))
        }
        0x1f => sign | 0x7ff0_0000_0000_0000 | (mant << 42),
        _ => sign | ((exp + 1008) << 52) | (mant << 42),
    }
}

/// Which encodings of an 8-bit format are not numbers.
#[derive(Clone, Copy)]
enum Specials {
    /// IEEE: all-ones exponent is inf (mantissa 0) or NaN.
    Ieee,
    /// OCP "FN": no inf; all-ones exponent and mantissa is NaN.
    Fn,
    /// "FNUZ": no inf, no negative zero; 0x80 is the only NaN.
    Fnuz,
    /// Every encoding is a number (F4).
    None,
}

const QUIET_NAN: u32 = 0x7fc0_0000;

/// The float32 bits of a signed 8-bit float with `mbits` mantissa bits and exponent bias `bias`.
const fn minifloat(code: u32, mbits: u32, bias: u32, specials: Specials) -> u32 {
    let sign = (code & 0x80) << 24;
    let exp = (code & 0x7f) >> mbits;
    let mant = code & ((1 << mbits) - 1);
    let all_exp = 0x7f >> mbits;
    match specials {
        Specials::Ieee if exp == all_exp => {
            return sign | if mant == 0 { 0x7f80_0000 } else { QUIET_NAN };
        }
        Specials::Fn if exp == all_exp && mant == (1 << mbits) - 1 => return sign | QUIET_NAN,
        Specials::Fnuz if code == 0x80 => return sign | QUIET_NAN,
        Specials::Ieee | Specials::Fn | Specials::Fnuz | Specials::None => {}
    }
    if exp == 0 && mant == 0 {
        return sign;
    }
    if exp == 0 {
        // Subnormal: mant * 2^(1 - bias - mbits), normalised around its leading one (bit p).
        let p = 31 - mant.leading_zeros();
        return sign | ((p + 128 - bias - mbits) << 23) | ((mant ^ (1 << p)) << (23 - p));
    }
    sign | ((exp + 127 - bias) << 23) | (mant << (23 - mbits))
}

const fn table(mbits: u32, bias: u32, specials: Specials) -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = minifloat(i as u32, mbits, bias, specials);
        i += 1;
    }
    t
}

static E5M2: [u32; 256] = table(2, 15, Specials::Ieee);
static E4M3FN: [u32; 256] = table(3, 7, Specials::Fn);
static E4M3FNUZ: [u32; 256] = table(3, 8, Specials::Fnuz);
static E5M2FNUZ: [u32; 256] = table(2, 16, Specials::Fnuz);
/// F4 (E2M1): sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf or NaN. The table's index is
/// the 4-bit code; [`minifloat`] reads the sign from bit 7, so the code is moved there first.
static E2M1: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let code = ((i as u32 & 0x8) << 4) | (i as u32 & 0x7);
        t[i] = minifloat(code, 1, 1, Specials::None);
        i += 1;
    }
    t
};

/// Both elements of an F4 byte as two float32, the low nibble's first (little-endian).
static E2M1_PAIRS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = E2M1[b & 0xf] as u64 | (E2M1[b >> 4] as u64) << 32;
        b += 1;
    }
    t
};

/// Unsigned powers of two: 2^(e - 127); e = 0 is the float32 subnormal 2^-127; 0xFF is NaN.
static E8M0: [u32; 256] = {
    let mut t = [0u32; 256];
    t[0] = 0x0040_0000;
    let mut e = 1;
    while e < 255 {
        t[e] = (e as u32) << 23;
        e += 1;
    }
    t[255] = QUIET_NAN;
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(w: &Widening, stored: &[u8]) -> Vec<f32> {
        let mut out = vec![0u8; w.presented_len(stored.len() as u64) as usize];
        assert!(w.convert(stored, 0, &mut out));
        out.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Values worked out by hand from each format's definition (sign, exponent, bias, mantissa).
    #[test]
    fn eight_bit_formats_decode_their_defining_values() {
        let cases: &[(Dtype, u8, f32, &str)] = &[
            (Dtype::F8_E4M3, 0x38, 1.0, "exponent 7 = bias"),
            (Dtype::F8_E4M3, 0x7e, 448.0, "largest: 2^8 * 1.75"),
            (
                Dtype::F8_E4M3,
                0x01,
                2f32.powi(-9),
                "smallest subnormal: 2^-6 * 1/8",
            ),
            (
                Dtype::F8_E4M3,
                0x06,
                0.75 * 2f32.powi(-6),
                "subnormal 6/8 * 2^-6",
            ),
            (Dtype::F8_E4M3, 0xb8, -1.0, "sign"),
            (
                Dtype::F8_E4M3,
                0x78,
                256.0,
                "all-ones exponent is a number in FN",
            ),
            (Dtype::F8_E5M2, 0x3c, 1.0, "exponent 15 = bias"),
            (Dtype::F8_E5M2, 0x7b, 57344.0, "largest: 2^15 * 1.75"),
            (Dtype::F8_E5M2, 0x7c, f32::INFINITY, "IEEE inf"),
            (Dtype::F8_E5M2, 0xfc, f32::NEG_INFINITY, "IEEE -inf"),
            (Dtype::F8_E5M2, 0x01, 2f32.powi(-16), "smallest subnormal"),
            (Dtype::F8_E4M3FNUZ, 0x40, 1.0, "bias 8"),
            (Dtype::F8_E4M3FNUZ, 0x7f, 240.0, "largest: 2^7 * 1.875"),
            (Dtype::F8_E5M2FNUZ, 0x40, 1.0, "bias 16"),
            (Dtype::F8_E5M2FNUZ, 0x7f, 57344.0, "largest: 2^15 * 1.75"),
            (Dtype::F8_E8M0, 127, 1.0, "2^0"),
            (
                Dtype::F8_E8M0,
                0,
                2f32.powi(-127),
                "2^-127, a float32 subnormal",
            ),
            (Dtype::F8_E8M0, 254, 2f32.powi(127), "2^127"),
        ];
        for &(dtype, code, want, why) in cases {
            let w = Widening::new(dtype, Target::F32).unwrap();
            let got = f32s(&w, &[code])[0];
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{dtype:?} {code:#04x}: {why}"
            );
        }
        let nans: &[(Dtype, u8, u32)] = &[
            (Dtype::F8_E4M3, 0x7f, 0x7fc0_0000),
            (Dtype::F8_E4M3, 0xff, 0xffc0_0000),
            (Dtype::F8_E5M2, 0x7d, 0x7fc0_0000),
            (Dtype::F8_E4M3FNUZ, 0x80, 0xffc0_0000),
            (Dtype::F8_E5M2FNUZ, 0x80, 0xffc0_0000),
            (Dtype::F8_E8M0, 0xff, 0x7fc0_0000),
        ];
        for &(dtype, code, bits) in nans {
            let w = Widening::new(dtype, Target::F32).unwrap();
            assert_eq!(
                f32s(&w, &[code])[0].to_bits(),
                bits,
                "{dtype:?} {code:#04x}"
            );
        }
    }

    /// E2M1's eight magnitudes (OCP MX spec, table of FP4 values), two to a byte, low nibble
    /// first.
    #[test]
    fn f4_widens_each_nibble_low_first() {
        let w = Widening::new(Dtype::F4, Target::F32).unwrap();
        let magnitudes = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for code in 0u8..16 {
            let sign: f32 = if code & 8 != 0 { -1.0 } else { 1.0 };
            let want = sign * magnitudes[usize::from(code & 7)];
            // `code` in the low nibble, 0x2 (1.0) in the high one.
            let got = f32s(&w, &[0x20 | code]);
            assert_eq!(got[0].to_bits(), want.to_bits(), "code {code:#x}");
            assert_eq!(got[1], 1.0, "high nibble of {code:#x}");
        }
        assert_eq!(w.presented_len(3), 24, "3 bytes hold 6 elements");
    }

    #[test]
    fn half_and_bfloat16_widen_exactly() {
        let f16 = Widening::new(Dtype::F16, Target::F32).unwrap();
        let cases: &[(u16, f32)] = &[
            (0x3c00, 1.0),
            (0xc000, -2.0),
            (0x7bff, 65504.0),
            (0x0001, 2f32.powi(-24)),
            (0x03ff, 1023.0 * 2f32.powi(-24)),
            (0x8000, -0.0),
            (0x7c00, f32::INFINITY),
        ];
        for &(h, want) in cases {
            let got = f32s(&f16, &h.to_le_bytes())[0];
            assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
        }
        let bf16 = Widening::new(Dtype::BF16, Target::F32).unwrap();
        assert_eq!(f32s(&bf16, &0x3f80u16.to_le_bytes())[0], 1.0);
        assert_eq!(f32s(&bf16, &0xc1a0u16.to_le_bytes())[0], -20.0);
    }

    #[test]
    fn only_narrower_floats_are_widened() {
        for d in [
            Dtype::F32,
            Dtype::F64,
            Dtype::I8,
            Dtype::U16,
            Dtype::BOOL,
            Dtype::C64,
        ] {
            assert_eq!(Widening::new(d, Target::F32), None, "{d:?}");
        }
        for d in [
            Dtype::F64,
            Dtype::I32,
            Dtype::C64,
            Dtype::F6_E2M3,
            Dtype::F6_E3M2,
        ] {
            assert_eq!(Widening::new(d, Target::F64), None, "{d:?}");
        }
        assert!(Widening::new(Dtype::F32, Target::F64).is_some());
    }

    /// A read at any offset and length gives the same bytes as the whole conversion.
    #[test]
    fn reads_at_any_offset_and_length_match_the_whole() {
        let stored: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for (dtype, to) in [
            (Dtype::BF16, Target::F32),
            (Dtype::F16, Target::F64),
            (Dtype::F8_E4M3, Target::F32),
            (Dtype::F8_E5M2, Target::F64),
            (Dtype::F32, Target::F64),
            (Dtype::F4, Target::F32),
            (Dtype::F4, Target::F64),
        ] {
            let w = Widening::new(dtype, to).unwrap();
            let total = w.presented_len(stored.len() as u64);
            let mut whole = vec![0u8; total as usize];
            assert!(w.convert(&stored, 0, &mut whole));
            for off in 0..total {
                for len in [0, 1, 3, 5, 7, 8, 13, 17].map(|l| l.min(total - off)) {
                    let r = w.stored_range(off, len);
                    let s = &stored[r.start as usize..(r.start + r.len) as usize];
                    let mut out = vec![0u8; len as usize];
                    assert!(w.convert(s, off, &mut out), "{dtype:?} {off}+{len}");
                    let want = &whole[off as usize..(off + len) as usize];
                    assert_eq!(out, want, "{dtype:?} to {to:?} at {off}+{len}");
                }
            }
            assert!(
                !w.convert(&stored[..1], 0, &mut whole),
                "short stored bytes"
            );
        }
    }
}
