//! float16 widened to float32 exactly as numpy widens it: the one conversion behind `-o dtype=`
//! of F16 tensors and every GGUF scale field.

/// The bits of float16 `h` widened to float32 exactly as numpy widens it
/// (`npy_halfbits_to_floatbits`): a NaN keeps its payload and its quiet bit (a signalling NaN
/// stays signalling), a subnormal becomes the normal float32 of the same value.
const fn f16_bits(h: u16) -> u32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let magnitude = h & 0x7fff;
    let bits = if magnitude >= 0x7c00 {
        // Infinity or NaN: the payload moved up, the quiet bit as it is.
        0x7f80_0000 | (magnitude << 13)
    } else if magnitude < 0x0400 {
        // Zero or subnormal: magnitude * 2^-24, exact (a normal float32, or zero).
        (magnitude as f32 * f32::from_bits(0x3380_0000)).to_bits()
    } else {
        // Normal: the exponent rebiased from 15 to 127.
        (magnitude << 13) + 0x3800_0000
    };
    sign | bits
}

/// A little-endian float16 widened to float32 as numpy widens it ([`f16_bits`]).
#[inline(always)]
pub fn f16(b: [u8; 2]) -> f32 {
    f32::from_bits(F16_TABLE[usize::from(u16::from_le_bytes(b))])
}

/// [`f16_bits`] of every float16, computed at compile time: the F16 type is converted by
/// looking each element up (256 KiB), twice as fast as computing it.
static F16_TABLE: [u32; 65536] = {
    let mut t = [0; 65536];
    let mut h = 0;
    while h < t.len() {
        t[h] = f16_bits(h as u16);
        h += 1;
    }
    t
};

/// [`f16_bits`] of the little-endian float16 `b`, by the table.
#[inline(always)]
pub fn f16_bits_of(b: [u8; 2]) -> u32 {
    F16_TABLE[usize::from(u16::from_le_bytes(b))]
}
