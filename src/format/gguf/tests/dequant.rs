//! The dequantizers, each against values worked out from the format's definition, and gguf-py's output on a fixture.

use super::*;

fn deq(ty: GgmlType, b: &[u8]) -> Vec<f32> {
    let n = b.len() / ty.block_bytes() as usize * ty.block_elements() as usize;
    let mut out = vec![f32::NAN; n];
    dequantize(ty, b, &mut out).unwrap();
    out
}

const ONE: [u8; 2] = [0x00, 0x3c];
const TWO: [u8; 2] = [0x00, 0x40];

#[test]
fn float16_widens_exactly() {
    let bits = |h: u16| crate::format::half::f16(h.to_le_bytes()).to_bits();
    assert_eq!(bits(0x3c00), 1.0f32.to_bits());
    assert_eq!(bits(0xc000), (-2.0f32).to_bits());
    assert_eq!(bits(0x7bff), 65504.0f32.to_bits());
    assert_eq!(bits(0x0001), 2f32.powi(-24).to_bits());
    assert_eq!(bits(0x03ff), (1023.0 * 2f32.powi(-24)).to_bits());
    assert_eq!(bits(0x8000), 0x8000_0000);
    assert_eq!(bits(0x7c00), f32::INFINITY.to_bits());
    assert_eq!(bits(0xfc00), f32::NEG_INFINITY.to_bits());
    // NaNs keep payload and quiet bit (a signalling NaN stays signalling, as numpy has it).
    assert_eq!(bits(0x7e00), 0x7fc0_0000);
    assert_eq!(bits(0x7c01), 0x7f80_2000);
    assert_eq!(bits(0xfe01), 0xffc0_2000);
    // Every finite float16 is its value.
    for h in 0..=0xffffu16 {
        let exp = (h >> 10) & 0x1f;
        if exp == 0x1f {
            continue;
        }
        let m = f64::from(h & 0x3ff);
        let v = if exp == 0 {
            m * 2f64.powi(-24)
        } else {
            (1024.0 + m) * 2f64.powi(i32::from(exp) - 25)
        };
        let v = if h & 0x8000 != 0 { -v } else { v };
        assert_eq!(f64::from(f32::from_bits(bits(h))), v, "{h:#x}");
    }
}

#[test]
fn plain_floats_are_their_values() {
    assert_eq!(deq(GgmlType::F16, &[0x00, 0x3c, 0x00, 0xc0]), [1.0, -2.0]);
    assert_eq!(
        deq(GgmlType::BF16, &[0x80, 0x3f, 0x49, 0x40]),
        [1.0, 3.140625]
    );
    let nan = [0x01, 0x00, 0x80, 0x7f];
    assert_eq!(deq(GgmlType::F32, &nan)[0].to_bits(), 0x7f80_0001);
}

#[test]
fn q8_0_is_d_times_the_signed_bytes() {
    let mut b = ONE.to_vec();
    b.extend((0..32i16).map(|i| (i - 28) as i8 as u8));
    let want: Vec<f32> = (0..32).map(|i| (i - 28) as f32).collect();
    assert_eq!(deq(GgmlType::Q8_0, &b), want);
    let mut b = TWO.to_vec();
    b.extend((0..32i16).map(|i| (i - 128) as i8 as u8));
    let want: Vec<f32> = (0..32).map(|i| 2.0 * (i - 128) as f32).collect();
    assert_eq!(deq(GgmlType::Q8_0, &b), want);
}

#[test]
fn q4_0_and_q4_1_are_low_nibbles_then_high_ones() {
    // Byte i holds element i (low nibble) and element i + 16 (high nibble).
    let qs: Vec<u8> = (0..16u8).map(|i| i | ((15 - i) << 4)).collect();
    let mut b = TWO.to_vec();
    b.extend(&qs);
    let want: Vec<f32> = (0..32)
        .map(|e| if e < 16 { e } else { 31 - e })
        .map(|q| 2.0 * (q - 8) as f32)
        .collect();
    assert_eq!(deq(GgmlType::Q4_0, &b), want);
    let mut b = TWO.to_vec();
    b.extend([0x00, 0xbc]); // m = -1.0
    b.extend(&qs);
    let want: Vec<f32> = (0..32)
        .map(|e| if e < 16 { e } else { 31 - e })
        .map(|q| 2.0 * q as f32 - 1.0)
        .collect();
    assert_eq!(deq(GgmlType::Q4_1, &b), want);
}

#[test]
fn q5_0_takes_bit_4_from_qh() {
    let mut b = ONE.to_vec();
    b.extend(0x8000_0001u32.to_le_bytes()); // elements 0 and 31
    b.extend([0u8; 16]);
    let mut want = vec![-16.0f32; 32];
    want[0] = 0.0;
    want[31] = 0.0;
    assert_eq!(deq(GgmlType::Q5_0, &b), want);
}

#[test]
fn q4_k_uses_six_bit_scales_and_minimums() {
    // d = 1, dmin = 1; sub-block j has scale j + 1 and minimum 2 (j < 4: 6 bits in bytes 0..8).
    let mut b = [ONE, ONE].concat();
    let mut scales = [0u8; 12];
    for j in 0..8 {
        let (sc, mn) = (j as u8 + 1, 2u8);
        if j < 4 {
            scales[j] = sc;
            scales[j + 4] = mn;
        } else {
            scales[j + 4] = (sc & 0xf) | ((mn & 0xf) << 4);
            scales[j - 4] |= (sc >> 4) << 6;
            scales[j] |= (mn >> 4) << 6;
        }
    }
    b.extend(scales);
    b.extend([0x31u8; 128]); // low nibble 1, high nibble 3
    let out = deq(GgmlType::Q4_K, &b);
    for (e, v) in out.iter().enumerate() {
        let j = e / 32;
        let q = if j % 2 == 0 { 1.0 } else { 3.0 };
        assert_eq!(*v, (j as f32 + 1.0) * q - 2.0, "element {e}");
    }
}

#[test]
fn q6_k_is_d_times_scale_times_q_less_32() {
    let mut b = vec![0u8; 210];
    for (i, s) in b[192..208].iter_mut().enumerate() {
        *s = (i as i8 - 8) as u8;
    }
    b[128] = 0b11; // element 0: q = 0 | 3 << 4 = 48
    b[208..210].copy_from_slice(&ONE);
    let out = deq(GgmlType::Q6_K, &b);
    assert_eq!(out[0], -8.0 * 16.0);
    for (e, v) in out.iter().enumerate().skip(1) {
        assert_eq!(*v, (e / 16) as f32 * -32.0 + 256.0, "element {e}");
    }
}

#[test]
fn mxfp4_is_a_power_of_two_times_e2m1() {
    // E2M1 values by code; the scale byte 127 is 2^0.
    let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let mut b = vec![127u8];
    b.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let out = deq(GgmlType::MXFP4, &b);
    for (e, v) in out.iter().enumerate() {
        let code = if e < 16 { e } else { 31 - e };
        let want = if code < 8 {
            e2m1[code]
        } else {
            -e2m1[code - 8]
        };
        assert_eq!(*v, want, "element {e}");
    }
    b[0] = 130; // 2^3
    assert_eq!(deq(GgmlType::MXFP4, &b)[1], 4.0);
}

#[test]
fn iq4_nl_looks_its_nibbles_up() {
    let mut b = TWO.to_vec();
    b.extend([0x10u8; 16]);
    let out = deq(GgmlType::IQ4_NL, &b);
    assert_eq!(out[..16], [-254.0; 16]);
    assert_eq!(out[16..], [-208.0; 16]);
}

#[test]
fn tq2_0_is_d_times_digit_less_1() {
    let mut b = vec![0b10_01_00_10u8; 64];
    b.extend(TWO);
    let out = deq(GgmlType::TQ2_0, &b);
    // Element 128 h + 32 s + l is bits 2s of byte 32 h + l.
    for (e, v) in out.iter().enumerate() {
        let digit = [2, 0, 1, 2][(e % 128) / 32];
        assert_eq!(*v, 2.0 * (digit - 1) as f32, "element {e}");
    }
}

#[test]
fn iq2_xxs_reads_its_grid_and_signs() {
    // Group 0: grid rows 0 (all 8s) and 1 (8s, then 43), signs index 1 (bits 0 and 7), scale
    // 1: db = d * 1.5 * 0.25.
    let mut b = ONE.to_vec();
    let aux = (1u32 << 28) | 1;
    b.extend([0, 1, 0, 0]);
    b.extend(aux.to_le_bytes());
    b.extend([0u8; 56]);
    let out = deq(GgmlType::IQ2_XXS, &b);
    let db = 1.5 * 0.25;
    assert_eq!(out[0], -8.0 * db);
    assert_eq!(out[1..7], [8.0 * db; 6]);
    assert_eq!(out[7], -8.0 * db);
    // Grid row 1 is 0x080808080808082b: its first value is 43 (0x2b), the others 8.
    assert_eq!(out[8], 43.0 * db);
    assert_eq!(out[9..16], [8.0 * db; 7]);
    assert_eq!(out[32], 8.0 * 0.125);
}

#[test]
fn dequantize_refuses_partial_blocks_and_other_types() {
    let mut out = [0.0; 32];
    let e = dequantize(GgmlType::Q8_0, &[0; 33], &mut out).unwrap_err();
    assert!(matches!(e, DequantError::Length { .. }));
    let e = dequantize(GgmlType::Q8_0, &[0; 34], &mut out[..31]).unwrap_err();
    assert!(matches!(e, DequantError::Length { .. }));
    let e = dequantize(GgmlType::Q8_K, &[0; 292], &mut [0.0; 256]).unwrap_err();
    assert_eq!(e, DequantError::Unsupported(GgmlType::Q8_K));
    assert!(dequantize(GgmlType::Q4_K, &[], &mut []).is_ok());
}

/// Compares with gguf-py: `GGUF_FIXTURE` is a file written by `tests/python/gguf_fixture.py
/// write`, `GGUF_EXPECT` the directory `gguf_fixture.py expect` wrote for it. Prints one line
/// per tensor and fails on any difference in the header (tensor infos, metadata types and
/// values) or any float whose bits differ.
///
/// ```text
/// python tests/python/gguf_fixture.py write /tmp/f.gguf --seed 1
/// python tests/python/gguf_fixture.py expect /tmp/f.gguf /tmp/f
/// GGUF_FIXTURE=/tmp/f.gguf GGUF_EXPECT=/tmp/f cargo test --release matches_gguf_py \
///     -- --ignored --nocapture
/// ```
#[test]
#[ignore = "needs a fixture written by tests/python/gguf_fixture.py"]
fn matches_gguf_py() {
    use std::io::BufReader;
    let path = std::env::var("GGUF_FIXTURE").unwrap();
    let dir = std::path::PathBuf::from(std::env::var("GGUF_EXPECT").unwrap());
    let file = std::fs::File::open(&path).unwrap();
    let len = file.metadata().unwrap().len();
    let h = read(&mut BufReader::new(&file), len).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("header.json")).unwrap()).unwrap();
    assert_eq!(want["alignment"], h.alignment);
    assert_eq!(want["data_offset"], h.data_start);
    let infos = want["tensors"].as_array().unwrap();
    assert_eq!(infos.len(), h.tensors.len());
    assert_eq!(h.string("general.architecture"), Some("llama"));
    let fields = want["metadata"].as_array().unwrap();
    assert_eq!(fields.len(), h.metadata.len());
    for ((key, value), w) in h.metadata.iter().zip(fields) {
        assert_eq!(w["key"], key.as_str());
        assert_eq!(w["type"], value.ty().name(), "{key}");
        match value {
            Value::Array(a) => {
                assert_eq!(w["element_type"], a.ty.name(), "{key}");
                assert_eq!(w["length"], a.len, "{key}");
                if a.values.is_some() {
                    assert_eq!(w["value"], value.to_json(), "{key}");
                }
            }
            _ => assert_eq!(w["value"], value.to_json(), "{key}"),
        }
    }
    println!("{} metadata keys as gguf-py reads them", fields.len());
    let mut failed = false;
    for (t, w) in h.tensors.iter().zip(infos) {
        assert_eq!(w["name"], t.name.as_str());
        assert_eq!(w["type"], t.ty.name());
        assert_eq!(w["dims"], serde_json::json!(t.dims));
        assert_eq!(w["offset"], h.data_start + t.offset);
        assert_eq!(w["size"], t.size);
        let Ok(expected) = std::fs::read(dir.join(format!("{}.f32", t.name))) else {
            println!("{:8} not dequantized by gguf-py", t.ty.name());
            continue;
        };
        let start = (h.data_start + t.offset) as usize;
        let blocks = &bytes[start..start + t.size as usize];
        let mut out = vec![0f32; t.elements() as usize];
        dequantize(t.ty, blocks, &mut out).unwrap();
        let expected: Vec<u32> = expected
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(expected.len(), out.len(), "{}", t.name);
        let differ: Vec<usize> = (0..out.len())
            .filter(|&i| out[i].to_bits() != expected[i])
            .collect();
        let nan_only = differ
            .iter()
            .all(|&i| out[i].is_nan() && f32::from_bits(expected[i]).is_nan());
        let nans = out.iter().filter(|v| v.is_nan()).count();
        println!(
            "{:8} {:5} floats ({nans:4} NaN): {}",
            t.ty.name(),
            out.len(),
            if differ.is_empty() {
                "bit-identical".to_string()
            } else {
                format!("{} differ (NaN payloads only: {nan_only})", differ.len())
            }
        );
        for &i in differ.iter().take(5) {
            println!(
                "    [{i}] ours {:#010x} gguf-py {:#010x}",
                out[i].to_bits(),
                expected[i]
            );
        }
        failed |= !differ.is_empty();
    }
    assert!(!failed, "some floats differ from gguf-py's");
}
