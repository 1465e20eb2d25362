//! Whole blocks of a ggml type converted to float32, bit for bit as gguf-py 0.19.0's numpy
//! `gguf.quants.dequantize` converts them.
//!
//! Each type is a loop over its blocks, and in each block the same float32 operations, in the
//! same order, as the numpy expression of `quants.py` (which never computes in float16 or
//! float64: every float16 field is widened to float32 first). IEEE 754 makes each operation's
//! result exact given its operands, so the values match; the NaNs match too on x86-64, where an
//! operation with one NaN operand returns that NaN (quieted) and `inf * 0` returns the default
//! NaN, as numpy's loops get them from the same instructions. The widening of float16 is
//! numpy's (`npy_halfbits_to_floatbits`), which keeps a signalling NaN signalling.
//!
//! Indexing inside a block is by constants or by indices masked to the table or block they
//! index: it cannot fail, whatever the bytes.

use std::fmt;

use super::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS};
use super::types::GgmlType;
use crate::format::half::f16;

/// Why [`dequantize`] cannot convert the blocks given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DequantError {
    /// The type is one gguf-py does not dequantize ([`GgmlType::can_dequantize`] is false).
    Unsupported(GgmlType),
    /// `bytes` bytes are not whole blocks of the type, or `out` floats are not the elements
    /// they hold.
    Length {
        /// The type.
        ty: GgmlType,
        /// The length of the blocks given.
        bytes: usize,
        /// The length of the output given.
        out: usize,
    },
}

impl fmt::Display for DequantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DequantError::Unsupported(ty) => {
                write!(
                    f,
                    "GGUF tensors of type {ty} cannot be converted to float32"
                )
            }
            DequantError::Length { ty, bytes, out } => write!(
                f,
                "{bytes} bytes of {ty} blocks ({} bytes of {} elements each) cannot fill {out} \
                 floats",
                ty.block_bytes(),
                ty.block_elements()
            ),
        }
    }
}

impl std::error::Error for DequantError {}

/// Converts `blocks`, whole blocks of type `ty`, to the float32 values they encode, in order,
/// into `out`, which must have exactly their number of elements. The values are bit for bit
/// those of gguf-py 0.19.0's `gguf.quants.dequantize` (on x86-64, NaNs included), for every
/// type it converts; other types are refused.
pub fn dequantize(ty: GgmlType, blocks: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    let block_bytes = ty.block_bytes() as usize;
    let block_elements = ty.block_elements() as usize;
    let whole = blocks.len().is_multiple_of(block_bytes)
        && (blocks.len() / block_bytes).checked_mul(block_elements) == Some(out.len());
    if !whole {
        return Err(DequantError::Length {
            ty,
            bytes: blocks.len(),
            out: out.len(),
        });
    }
    use GgmlType::*;
    match ty {
        F32 => each(blocks, out, |b: &[u8; 4], o: &mut [f32; 1]| {
            o[0] = f32::from_bits(u32::from_le_bytes(*b));
        }),
        F16 => each(blocks, out, |b: &[u8; 2], o: &mut [f32; 1]| {
            o[0] = f16(*b);
        }),
        BF16 => each(blocks, out, |b: &[u8; 2], o: &mut [f32; 1]| {
            o[0] = f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16);
        }),
        Q4_0 => each(blocks, out, q4_0),
        Q4_1 => each(blocks, out, q4_1),
        Q5_0 => each(blocks, out, q5_0),
        Q5_1 => each(blocks, out, q5_1),
        Q8_0 => each(blocks, out, q8_0),
        Q2_K => each(blocks, out, q2_k),
        Q3_K => each(blocks, out, q3_k),
        Q4_K => each(blocks, out, q4_k),
        Q5_K => each(blocks, out, q5_k),
        Q6_K => each(blocks, out, q6_k),
        TQ1_0 => each(blocks, out, tq1_0),
        TQ2_0 => each(blocks, out, tq2_0),
        MXFP4 => each(blocks, out, mxfp4),
        NVFP4 => each(blocks, out, nvfp4),
        IQ2_XXS => each(blocks, out, iq2_xxs),
        IQ2_XS => each(blocks, out, iq2_xs),
        IQ2_S => each(blocks, out, iq2_s),
        IQ3_XXS => each(blocks, out, iq3_xxs),
        IQ3_S => each(blocks, out, iq3_s),
        IQ1_S => each(blocks, out, iq1_s),
        IQ1_M => each(blocks, out, iq1_m),
        IQ4_NL => each(blocks, out, iq4_nl),
        IQ4_XS => each(blocks, out, iq4_xs),
        Q8_1 | Q8_K | Q1_0 | I8 | I16 | I32 | I64 | F64 => {
            return Err(DequantError::Unsupported(ty));
        }
    }
    Ok(())
}

/// Applies `f` to each block of `B` bytes and its `E` floats (the lengths are checked).
#[inline(always)]
fn each<const B: usize, const E: usize>(
    blocks: &[u8],
    out: &mut [f32],
    f: impl Fn(&[u8; B], &mut [f32; E]),
) {
    let (blocks, _) = blocks.as_chunks::<B>();
    let (out, _) = out.as_chunks_mut::<E>();
    for (b, o) in blocks.iter().zip(out) {
        f(b, o);
    }
}

#[inline(always)]
fn u16_at(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, c, d, e]) => u32::from_le_bytes([a, c, d, e]),
        _ => 0,
    }
}

/// Q4_0: `d * (q - 8)`, the low nibbles then the high ones. (`q - 8` is computed in float32,
/// which is exact: the same float as numpy's integer `q - 8` widened.)
fn q4_0(b: &[u8; 18], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    let (lo, hi) = o.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..]) {
        *l = d * (f32::from(q & 0xf) - 8.0);
        *h = d * (f32::from(q >> 4) - 8.0);
    }
}

/// `p + m`, where `p` is the result of an operation, with the NaN numpy gets from x86-64 when
/// both are NaNs: `p`'s, the first operand's. (The compiler may swap the operands of an
/// addition, and does where AVX is enabled, which would give `m`'s.)
#[inline(always)]
fn plus(p: f32, m: f32) -> f32 {
    if p.is_nan() { p } else { p + m }
}

/// Q4_1: `(d * q) + m`.
fn q4_1(b: &[u8; 20], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    let m = f16([b[2], b[3]]);
    let (lo, hi) = o.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[4..]) {
        *l = plus(d * f32::from(q & 0xf), m);
        *h = plus(d * f32::from(q >> 4), m);
    }
}

/// The bits of `qh` as bytes: byte `i` is 16 where bit `i` is set, else 0 (bit 4 of element
/// `i` of a Q5_0 or Q5_1 block).
#[inline(always)]
fn high_bits(qh: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    for (i, h) in h.iter_mut().enumerate() {
        *h = (((qh >> i) & 1) << 4) as u8;
    }
    h
}

/// Q5_0: `d * (q - 16)`, bit 4 of element `i` being bit `i` of `qh`.
fn q5_0(b: &[u8; 22], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    let high = high_bits(u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
    let (hl, hh) = high.split_at(16);
    let (lo, hi) = o.split_at_mut(16);
    for ((((l, h), &q), &bl), &bh) in lo.iter_mut().zip(hi).zip(&b[6..]).zip(hl).zip(hh) {
        *l = d * f32::from(((q & 0xf) | bl) as i8 - 16);
        *h = d * f32::from(((q >> 4) | bh) as i8 - 16);
    }
}

/// Q5_1: `(d * q) + m`.
fn q5_1(b: &[u8; 24], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    let m = f16([b[2], b[3]]);
    let high = high_bits(u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
    let (hl, hh) = high.split_at(16);
    let (lo, hi) = o.split_at_mut(16);
    for ((((l, h), &q), &bl), &bh) in lo.iter_mut().zip(hi).zip(&b[8..]).zip(hl).zip(hh) {
        *l = plus(d * f32::from((q & 0xf) | bl), m);
        *h = plus(d * f32::from((q >> 4) | bh), m);
    }
}

/// Q8_0: `x * d`.
fn q8_0(b: &[u8; 34], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    for (o, &q) in o.iter_mut().zip(&b[2..]) {
        *o = f32::from(q as i8) * d;
    }
}

/// Q2_K: 16 sub-blocks of 16, `dl * q - ml` with `dl = d * (scale & 15)` and
/// `ml = dmin * (scale >> 4)`. In each half of 128, element `32 k + l` is bits `2k` of
/// `qs[l]`.
fn q2_k(b: &[u8; 84], o: &mut [f32; 256]) {
    let d = f16([b[80], b[81]]);
    let dmin = f16([b[82], b[83]]);
    let mut dl = [0f32; 16];
    let mut ml = [0f32; 16];
    for ((dl, ml), &sc) in dl.iter_mut().zip(&mut ml).zip(&b[..16]) {
        *dl = d * f32::from(sc & 0xf);
        *ml = dmin * f32::from(sc >> 4);
    }
    let (halves, _) = o.as_chunks_mut::<128>();
    for (h, o128) in halves.iter_mut().enumerate() {
        let qs = &b[16 + 32 * h..16 + 32 * h + 32];
        let (out, _) = o128.as_chunks_mut::<32>();
        let [o0, o1, o2, o3] = out else { return };
        for i in 0..2 {
            let s = |k: usize| (8 * h + 2 * k + i) & 15;
            let (d0, d1, d2, d3) = (dl[s(0)], dl[s(1)], dl[s(2)], dl[s(3)]);
            let (m0, m1, m2, m3) = (ml[s(0)], ml[s(1)], ml[s(2)], ml[s(3)]);
            let r = 16 * i..16 * i + 16;
            let (o0, o1) = (&mut o0[r.clone()], &mut o1[r.clone()]);
            let (o2, o3) = (&mut o2[r.clone()], &mut o3[r.clone()]);
            for (l, &q) in qs[r].iter().enumerate() {
                o0[l] = d0 * f32::from(q & 3) - m0;
                o1[l] = d1 * f32::from((q >> 2) & 3) - m1;
                o2[l] = d2 * f32::from((q >> 4) & 3) - m2;
                o3[l] = d3 * f32::from(q >> 6) - m3;
            }
        }
    }
}

/// Q3_K: 16 sub-blocks of 16, `dl * q` with `dl = d * (scale - 32)` and `q` the 2 low bits
/// less 4 where the high-mask bit is 0. In each half `h` of 128, element `32 k + l` is bits
/// `2k` of `qs[l]` and bit `4h + k` of `hmask[l]`.
fn q3_k(b: &[u8; 110], o: &mut [f32; 256]) {
    let d = f16([b[108], b[109]]);
    let sc = &b[96..108];
    let mut dl = [0f32; 16];
    for (j, dl) in dl.iter_mut().enumerate() {
        let low = if j < 8 { sc[j] & 0xf } else { sc[j - 8] >> 4 };
        let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        *dl = d * f32::from((low | (high << 4)) as i8 - 32);
    }
    let hmask = &b[..32];
    let (halves, _) = o.as_chunks_mut::<128>();
    for (h, o128) in halves.iter_mut().enumerate() {
        let qs = &b[32 + 32 * h..32 + 32 * h + 32];
        let (out, _) = o128.as_chunks_mut::<32>();
        let [o0, o1, o2, o3] = out else { return };
        for i in 0..2 {
            let s = |k: usize| dl[(8 * h + 2 * k + i) & 15];
            let (d0, d1, d2, d3) = (s(0), s(1), s(2), s(3));
            let r = 16 * i..16 * i + 16;
            let (o0, o1) = (&mut o0[r.clone()], &mut o1[r.clone()]);
            let (o2, o3) = (&mut o2[r.clone()], &mut o3[r.clone()]);
            // Bit 4h + k of the mask clear: 4 less.
            let m = &hmask[r.clone()];
            for (l, &q) in qs[r].iter().enumerate() {
                let m = !(m[l] >> (4 * h));
                let v = |k: usize| ((q >> (2 * k)) & 3) as i8 - (((m >> k) & 1) << 2) as i8;
                o0[l] = d0 * f32::from(v(0));
                o1[l] = d1 * f32::from(v(1));
                o2[l] = d2 * f32::from(v(2));
                o3[l] = d3 * f32::from(v(3));
            }
        }
    }
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K or Q5_K block
/// (`Q4_K.get_scale_min`).
#[inline(always)]
fn scale_min(s: &[u8], j: usize) -> (u8, u8) {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    if j < 4 {
        (at(j) & 63, at(j + 4) & 63)
    } else {
        (
            (at(j + 4) & 0xf) | ((at(j - 4) >> 2) & 0x30),
            (at(j + 4) >> 4) | ((at(j) >> 2) & 0x30),
        )
    }
}

/// Q4_K: 8 sub-blocks of 32, `(d * scale) * q - dmin * min`: sub-blocks `2p` and `2p + 1`
/// are the low and high nibbles of `qs[32 p..32 p + 32]`.
fn q4_k(b: &[u8; 144], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let dmin = f16([b[2], b[3]]);
    let scales = &b[4..16];
    let (pairs, _) = o.as_chunks_mut::<64>();
    for (p, o64) in pairs.iter_mut().enumerate() {
        let (sc0, mn0) = scale_min(scales, 2 * p);
        let (sc1, mn1) = scale_min(scales, 2 * p + 1);
        let (d0, m0) = (d * f32::from(sc0), dmin * f32::from(mn0));
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(mn1));
        let (lo, hi) = o64.split_at_mut(32);
        let qs = &b[16 + 32 * p..16 + 32 * p + 32];
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(qs) {
            *l = d0 * f32::from(q & 0xf) - m0;
            *h = d1 * f32::from(q >> 4) - m1;
        }
    }
}

/// Q5_K: as Q4_K, with bit 4 of element `l` of sub-block `j` bit `j` of `qh[l]`.
fn q5_k(b: &[u8; 176], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let dmin = f16([b[2], b[3]]);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let (pairs, _) = o.as_chunks_mut::<64>();
    for (p, o64) in pairs.iter_mut().enumerate() {
        let (sc0, mn0) = scale_min(scales, 2 * p);
        let (sc1, mn1) = scale_min(scales, 2 * p + 1);
        let (d0, m0) = (d * f32::from(sc0), dmin * f32::from(mn0));
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(mn1));
        let (lo, hi) = o64.split_at_mut(32);
        let qs = &b[48 + 32 * p..48 + 32 * p + 32];
        for (((l, h), &q), &bits) in lo.iter_mut().zip(hi).zip(qs).zip(qh) {
            let bits = bits >> (2 * p);
            *l = d0 * f32::from((q & 0xf) | ((bits & 1) << 4)) - m0;
            *h = d1 * f32::from((q >> 4) | ((bits & 2) << 3)) - m1;
        }
    }
}

/// Q6_K: 16 sub-blocks of 16, `(d * scale) * (q - 32)`. In each half of 128, element
/// `32 k + l` takes nibble `k / 2` of `ql[32 (k % 2) + l]` and bits `2k` of `qh[l]`.
fn q6_k(b: &[u8; 210], o: &mut [f32; 256]) {
    let d = f16([b[208], b[209]]);
    let mut dl = [0f32; 16];
    for (dl, &s) in dl.iter_mut().zip(&b[192..208]) {
        *dl = d * f32::from(s as i8);
    }
    let (halves, _) = o.as_chunks_mut::<128>();
    for (h, o128) in halves.iter_mut().enumerate() {
        let ql = &b[64 * h..64 * h + 64];
        let qh = &b[128 + 32 * h..128 + 32 * h + 32];
        let (o0, rest) = o128.split_at_mut(32);
        let (o1, rest) = rest.split_at_mut(32);
        let (o2, o3) = rest.split_at_mut(32);
        for i in 0..2 {
            let dl = |k: usize| dl[(8 * h + 2 * k + i) & 15];
            let (d0, d1, d2, d3) = (dl(0), dl(1), dl(2), dl(3));
            let r = 16 * i..16 * i + 16;
            let (o0, o1, o2, o3) = (
                &mut o0[r.clone()],
                &mut o1[r.clone()],
                &mut o2[r.clone()],
                &mut o3[r.clone()],
            );
            let (la, lb, hb) = (&ql[r.start..r.end], &ql[32 + r.start..32 + r.end], &qh[r]);
            for l in 0..16 {
                let (a, c, q) = (la[l], lb[l], hb[l]);
                o0[l] = d0 * f32::from(((a & 0xf) | ((q & 3) << 4)) as i8 - 32);
                o1[l] = d1 * f32::from(((c & 0xf) | (((q >> 2) & 3) << 4)) as i8 - 32);
                o2[l] = d2 * f32::from(((a >> 4) | (((q >> 4) & 3) << 4)) as i8 - 32);
                o3[l] = d3 * f32::from(((c >> 4) | (((q >> 6) & 3) << 4)) as i8 - 32);
            }
        }
    }
}

/// TQ1_0: base-3 digits packed 5 (or 4) to a byte, `d * (digit - 1)`.
fn tq1_0(b: &[u8; 54], o: &mut [f32; 256]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let d = f16([b[52], b[53]]);
    let digit = |v: u8| -> f32 { f32::from(((u16::from(v) * 3) >> 8) as i8 - 1) };
    let (first, rest) = o.split_at_mut(160);
    let (second, third) = rest.split_at_mut(80);
    for (o32, p) in first.chunks_exact_mut(32).zip(POW3) {
        for (o, &q) in o32.iter_mut().zip(&b[..32]) {
            *o = d * digit(q.wrapping_mul(p));
        }
    }
    for (o16, p) in second.chunks_exact_mut(16).zip(POW3) {
        for (o, &q) in o16.iter_mut().zip(&b[32..48]) {
            *o = d * digit(q.wrapping_mul(p));
        }
    }
    for (o4, p) in third.chunks_exact_mut(4).zip(POW3) {
        for (o, &q) in o4.iter_mut().zip(&b[48..52]) {
            *o = d * digit(q.wrapping_mul(p));
        }
    }
}

/// TQ2_0: 2-bit digits, `d * (digit - 1)`: in each half of 128, element `32 k + l` is bits
/// `2k` of `qs[l]`.
fn tq2_0(b: &[u8; 66], o: &mut [f32; 256]) {
    let d = f16([b[64], b[65]]);
    let (halves, _) = o.as_chunks_mut::<128>();
    for (h, o128) in halves.iter_mut().enumerate() {
        let (out, _) = o128.as_chunks_mut::<32>();
        let [o0, o1, o2, o3] = out else { return };
        for (l, &q) in b[32 * h..32 * h + 32].iter().enumerate() {
            let v = |k: u32| d * f32::from(((q >> (2 * k)) & 3) as i8 - 1);
            o0[l] = v(0);
            o1[l] = v(1);
            o2[l] = v(2);
            o3[l] = v(3);
        }
    }
}

/// The E2M1 values doubled, of MXFP4 and NVFP4 (`kvalues`).
const KVALUES_FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4: an E8M0 scale halved (`e8m0_to_fp32_half`) times the doubled E2M1 values.
fn mxfp4(b: &[u8; 17], o: &mut [f32; 32]) {
    let e = u32::from(b[0]);
    let d = f32::from_bits(if e < 2 {
        0x0020_0000 << e
    } else {
        (e - 1) << 23
    });
    let (lo, hi) = o.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[1..]) {
        *l = d * f32::from(KVALUES_FP4[usize::from(q & 0xf)]);
        *h = d * f32::from(KVALUES_FP4[usize::from(q >> 4)]);
    }
}

/// An unsigned E4M3 scale (bias 7, the top bit ignored) halved, as NVFP4's `ue4m3_to_fp32`
/// computes it; 0 and 0x7f (its NaN) give 0. Every step is exact in float32.
#[inline(always)]
fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0xf);
    let man = f32::from(x & 7);
    if exp == 0 {
        man * f32::from_bits(0x3a80_0000) // 2^-10
    } else {
        // (1 + man / 8) * 2^(exp - 7) * 0.5 = (8 + man) * 2^(exp - 11)
        (8.0 + man) * f32::from_bits(((exp - 11 + 127) as u32) << 23)
    }
}

/// NVFP4: 4 sub-blocks of 16, each an E4M3 scale times the doubled E2M1 values (8 low nibbles,
/// then the 8 high ones).
fn nvfp4(b: &[u8; 36], o: &mut [f32; 64]) {
    let (out, _) = o.as_chunks_mut::<16>();
    for ((o16, &scale), q8) in out.iter_mut().zip(&b[..4]).zip(b[4..].chunks_exact(8)) {
        let d = ue4m3_half(scale);
        let (lo, hi) = o16.split_at_mut(8);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(q8) {
            *l = d * f32::from(KVALUES_FP4[usize::from(q & 0xf)]);
            *h = d * f32::from(KVALUES_FP4[usize::from(q >> 4)]);
        }
    }
}

/// The `j`th value of a grid row of 8 (or 4) signed bytes.
#[inline(always)]
fn grid_value(row: u64, j: usize) -> f32 {
    f32::from((row >> (8 * j)) as u8 as i8)
}

/// `y * 1.0`, or `y * -1.0` where bit `j` of `signs` is set, as numpy gets it from x86-64's
/// multiplication: the negation of `y`, except that a NaN keeps its sign. (A multiplication by
/// a selected ±1 would do the same, but the compiler turns it into a negation of the selected
/// value, which flips the sign of a NaN.) `y` is the result of an operation, so a NaN is
/// already quiet, as the multiplication would leave it.
#[inline(always)]
fn signed(y: f32, signs: u8, j: usize) -> f32 {
    if (signs >> j) & 1 == 1 && !y.is_nan() {
        -y
    } else {
        y
    }
}

/// Writes `(db * grid) * sign` for the 8 values of a grid row.
#[inline(always)]
fn signed_row(o: &mut [f32], db: f32, row: u64, signs: u8) {
    for (j, o) in o.iter_mut().enumerate().take(8) {
        *o = signed(db * grid_value(row, j), signs, j);
    }
}

/// IQ2_XXS: 8 groups of 32, each 4 grid rows (of 256) by index byte, with signs from `KSIGNS`
/// and a 4-bit scale, `db = d * (0.5 + scale) * 0.25`.
fn iq2_xxs(b: &[u8; 66], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let (out, _) = o.as_chunks_mut::<32>();
    for (o32, g) in out.iter_mut().zip(b[2..].chunks_exact(8)) {
        let aux = u32_at(g, 4);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for (k, o8) in o32.chunks_exact_mut(8).enumerate() {
            let row = IQ2XXS_GRID[usize::from(g.get(k).copied().unwrap_or(0))];
            let signs = KSIGNS[((aux >> (7 * k)) & 127) as usize];
            signed_row(o8, db, row, signs);
        }
    }
}

/// IQ2_XS: 32 rows of 8 by 16-bit entries (9 bits of grid index, 7 of sign index), 16 scales.
fn iq2_xs(b: &[u8; 74], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let scales = &b[66..74];
    let (out, _) = o.as_chunks_mut::<16>();
    for (i, o16) in out.iter_mut().enumerate() {
        let s = (scales[(i / 2) & 7] >> (4 * (i % 2))) & 0xf;
        let db = d * (0.5 + f32::from(s)) * 0.25;
        for (r, o8) in o16.chunks_exact_mut(8).enumerate() {
            let q = u16_at(b, 2 + 2 * (2 * i + r));
            let row = IQ2XS_GRID[usize::from(q & 511)];
            let signs = KSIGNS[usize::from(q >> 9) & 127];
            signed_row(o8, db, row, signs);
        }
    }
}

/// IQ2_S: 32 rows of 8 by 10-bit grid index (a byte and 2 bits of `qh`), explicit sign bits,
/// 16 scales.
fn iq2_s(b: &[u8; 82], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let qs = &b[2..34];
    let signs = &b[34..66];
    let qh = &b[66..74];
    let scales = &b[74..82];
    let (out, _) = o.as_chunks_mut::<8>();
    for (i, o8) in out.iter_mut().enumerate() {
        let s = (scales[(i / 4) & 7] >> (4 * ((i / 2) % 2))) & 0xf;
        let db = d * (0.5 + f32::from(s)) * 0.25;
        let high = (usize::from(qh[(i / 4) & 7]) >> (2 * (i % 4))) & 3;
        let row = IQ2S_GRID[(usize::from(qs[i & 31]) | (high << 8)) & 1023];
        signed_row(o8, db, row, signs[i & 31]);
    }
}

/// IQ3_XXS: 8 groups of 32, each 8 grid rows of 4 (of 256) by index byte, signs from
/// `KSIGNS` and a 4-bit scale, `db = d * (0.5 + scale) * 0.5`.
fn iq3_xxs(b: &[u8; 98], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let qs = &b[2..66];
    let (out, _) = o.as_chunks_mut::<32>();
    for (g, (o32, q8)) in out.iter_mut().zip(qs.chunks_exact(8)).enumerate() {
        let aux = u32_at(b, 66 + 4 * g);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        let (pairs, _) = q8.as_chunks::<2>();
        for (k, (o8, &[a, c])) in o32.chunks_exact_mut(8).zip(pairs).enumerate() {
            let signs = KSIGNS[((aux >> (7 * k)) & 127) as usize];
            let row = u64::from(IQ3XXS_GRID[usize::from(a)])
                | (u64::from(IQ3XXS_GRID[usize::from(c)]) << 32);
            signed_row(o8, db, row, signs);
        }
    }
}

/// IQ3_S: 8 groups of 32, each 8 grid rows of 4 (of 512) by 9-bit index (a byte and a bit of
/// `qh`), explicit sign bits, `db = d * (1 + 2 * scale)`.
fn iq3_s(b: &[u8; 110], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let qs = &b[2..66];
    let qh = &b[66..74];
    let signs = &b[74..106];
    let scales = &b[106..110];
    let (out, _) = o.as_chunks_mut::<32>();
    for (g, o32) in out.iter_mut().enumerate() {
        let s = (scales[(g / 2) & 3] >> (4 * (g % 2))) & 0xf;
        let db = d * f32::from(1 + 2 * s);
        let high = qh[g & 7];
        for (k, o8) in o32.chunks_exact_mut(8).enumerate() {
            let index = |r: usize| {
                let i = 2 * k + r;
                (usize::from(qs[(8 * g + i) & 63]) | (usize::from((high >> i) & 1) << 8)) & 511
            };
            let row = u64::from(IQ3S_GRID[index(0)]) | (u64::from(IQ3S_GRID[index(1)]) << 32);
            signed_row(o8, db, row, signs[(4 * g + k) & 31]);
        }
    }
}

/// IQ1_S: 8 groups of 32, each 4 grid rows of 8 (of 2048, values -1, 0, 1) by 11-bit index,
/// `dl * (grid + delta)` with `dl = d * (2 * scale + 1)` and `delta = ±0.125`.
fn iq1_s(b: &[u8; 50], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let qs = &b[2..34];
    let (out, _) = o.as_chunks_mut::<32>();
    for (g, (o32, q4)) in out.iter_mut().zip(qs.chunks_exact(4)).enumerate() {
        let qh = u16_at(b, 34 + 2 * g);
        let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
        let delta = if qh & 0x8000 == 0 { 0.125 } else { -0.125 };
        for (r, (o8, &q)) in o32.chunks_exact_mut(8).zip(q4).enumerate() {
            let index = usize::from(q) | (usize::from((qh >> (3 * r)) & 7) << 8);
            let row = IQ1S_GRID[index & 2047];
            for (j, o) in o8.iter_mut().enumerate() {
                *o = dl * (grid_value(row, j) + delta);
            }
        }
    }
}

/// IQ1_M: as IQ1_S with 16 3-bit scales, a delta per row, and the float16 `d` spread over the
/// top nibbles of the 4 scale words.
fn iq1_m(b: &[u8; 56], o: &mut [f32; 256]) {
    let qs = &b[..32];
    let qh = &b[32..48];
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    let d = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let d = f16(d.to_le_bytes());
    let (out, _) = o.as_chunks_mut::<8>();
    for (i, (o8, &q)) in out.iter_mut().zip(qs).enumerate() {
        let s = (sc[(i / 8) & 3] >> (3 * ((i / 2) % 4))) & 7;
        let dl = d * f32::from(2 * s + 1);
        let nibble = qh[(i / 2) & 15] >> (4 * (i % 2));
        let index = usize::from(q) | (usize::from(nibble & 7) << 8);
        let delta = if nibble & 8 == 0 { 0.125 } else { -0.125 };
        let row = IQ1S_GRID[index & 2047];
        for (j, o) in o8.iter_mut().enumerate() {
            *o = dl * (grid_value(row, j) + delta);
        }
    }
}

/// The non-linear 4-bit values of IQ4_NL and IQ4_XS (`kvalues`).
const KVALUES_IQ4: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL: `d * kvalues[q]`, the low nibbles then the high ones.
fn iq4_nl(b: &[u8; 18], o: &mut [f32; 32]) {
    let d = f16([b[0], b[1]]);
    let (lo, hi) = o.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..]) {
        *l = d * f32::from(KVALUES_IQ4[usize::from(q & 0xf)]);
        *h = d * f32::from(KVALUES_IQ4[usize::from(q >> 4)]);
    }
}

/// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales, `(d * (scale - 32)) * kvalues[q]`.
fn iq4_xs(b: &[u8; 136], o: &mut [f32; 256]) {
    let d = f16([b[0], b[1]]);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let scales_l = &b[4..8];
    let (out, _) = o.as_chunks_mut::<32>();
    for (j, (o32, q16)) in out.iter_mut().zip(b[8..].chunks_exact(16)).enumerate() {
        let low = (scales_l[(j / 2) & 3] >> (4 * (j % 2))) & 0xf;
        let high = ((scales_h >> (2 * j)) & 3) as u8;
        let dl = d * f32::from((low | (high << 4)) as i8 - 32);
        let (lo, hi) = o32.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(q16) {
            *l = dl * f32::from(KVALUES_IQ4[usize::from(q & 0xf)]);
            *h = dl * f32::from(KVALUES_IQ4[usize::from(q >> 4)]);
        }
    }
}
