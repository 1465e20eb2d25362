//! Tests of the GGUF reader and dequantizer on hand-built files, with expected values from the
//! format's definition; and an ignored test comparing with gguf-py's output on a fixture written
//! by `tests/python/gguf_fixture.py` (see [`matches_gguf_py`]).

use crate::format::Broken;
use std::io::Cursor;

use super::*;

/// A GGUF file built by hand.
struct File(Vec<u8>);

impl File {
    /// The magic, a version and the counts.
    fn new(version: u32, tensors: u64, keys: u64) -> File {
        let mut f = File(b"GGUF".to_vec());
        f.u32(version).u64(tensors).u64(keys);
        f
    }

    fn u32(&mut self, v: u32) -> &mut File {
        self.0.extend(v.to_le_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut File {
        self.0.extend(v.to_le_bytes());
        self
    }

    fn bytes(&mut self, b: &[u8]) -> &mut File {
        self.0.extend(b);
        self
    }

    fn string(&mut self, s: &str) -> &mut File {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }

    /// A key with its value type; the value follows.
    fn key(&mut self, key: &str, ty: u32) -> &mut File {
        self.string(key).u32(ty)
    }

    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut File {
        self.string(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }

    /// Zero bytes up to a multiple of `align`.
    fn pad(&mut self, align: usize) -> &mut File {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }

    fn zeros(&mut self, n: usize) -> &mut File {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

fn parse(b: &[u8]) -> Result<Header, GgufError> {
    read(&mut Cursor::new(b), b.len() as u64)
}

/// The rule a file breaks.
fn rule(b: &[u8]) -> String {
    match parse(b) {
        Ok(_) => "ok".into(),
        Err(e) => e.rule(),
    }
}

/// A valid file: general.architecture, an F32 tensor of 4 and a Q8_0 tensor of 2 rows of 32;
/// and the length of its header before the padding.
fn minimal_and_header(version: u32) -> (Vec<u8>, usize) {
    let mut f = File::new(version, 2, 1);
    f.key("general.architecture", 8).string("llama");
    f.tensor("a", &[4], 0, 0);
    f.tensor("b", &[32, 2], 8, 32);
    let header = f.0.len();
    f.pad(32).zeros(32 + 68);
    (f.0, header)
}

fn minimal(version: u32) -> Vec<u8> {
    minimal_and_header(version).0
}

#[test]
fn minimal_v2_and_v3_files_are_read() {
    for version in [2, 3] {
        let b = minimal(version);
        let h = parse(&b).unwrap();
        assert_eq!(h.version, version);
        assert_eq!(h.alignment, 32);
        assert_eq!(h.string("general.architecture"), Some("llama"));
        assert_eq!(h.metadata.len(), 1);
        assert_eq!(h.data_start as usize, b.len() - 100);
        assert_eq!(h.data_start % 32, 0);
        let sizes: Vec<_> = h
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.size))
            .collect();
        assert_eq!(sizes, [("a", 16), ("b", 68)]);
        assert_eq!(h.tensors[1].dims, [32, 2]);
        assert_eq!(h.tensors[1].ty, GgmlType::Q8_0);
        assert_eq!(h.tensors[1].elements(), 64);
        assert_eq!(h.split(), None);
    }
}

#[test]
fn a_file_that_is_not_gguf_or_not_a_version_read_is_refused() {
    let mut b = minimal(3);
    b[0] = b'X';
    assert_eq!(rule(&b), "BadMagic");
    let e = parse(&b).unwrap_err().to_string();
    assert!(e.contains("GGUF") && !e.contains("safetensors"), "{e}");

    for (version, want) in [(1, "UnsupportedVersion"), (4, "UnsupportedVersion")] {
        assert_eq!(rule(&minimal(version)), want);
    }
    assert_eq!(rule(&minimal(0)), "UnsupportedVersion");
    for v in [2u32, 3] {
        let mut b = minimal(3);
        b[4..8].copy_from_slice(&v.to_be_bytes());
        assert_eq!(rule(&b), "BigEndian");
        let e = parse(&b).unwrap_err().to_string();
        assert!(e.contains("big-endian GGUF is not supported"), "{e}");
    }
}

#[test]
fn a_file_cut_anywhere_is_cut_short() {
    let (b, header) = minimal_and_header(3);
    for n in 0..b.len() {
        let e = parse(&b[..n]).unwrap_err();
        // The padding after the header is not read: a file cut there ends before its data.
        let want = if n < header {
            "Truncated"
        } else {
            "DataPastEnd"
        };
        assert_eq!(e.rule(), want, "cut at {n}: {e}");
        assert!(e.cut_short(), "cut at {n}: {e}");
        if e.rule() == "Truncated" {
            assert!(e.to_string().contains("ends inside its GGUF header"), "{e}");
        }
    }
}

#[test]
fn a_truncation_names_where_it_is() {
    let (b, header) = minimal_and_header(3);
    let e = parse(&b[..60]).unwrap_err().to_string();
    assert!(e.contains("general.architecture"), "{e}");
    let e = parse(&b[..header - 5]).unwrap_err().to_string();
    assert!(e.contains("'b'"), "{e}");
}

#[test]
fn absurd_counts_and_lengths_are_refused_without_allocating() {
    let huge = 1u64 << 62;
    assert_eq!(rule(&File::new(3, huge, 0).0), "TooManyTensors");
    assert_eq!(rule(&File::new(3, 0, huge).0), "TooManyKeys");
    assert_eq!(rule(&File::new(3, 0, u64::MAX).0), "TooManyKeys");

    // A key name, a string value, an array and a tensor name of 2^62.
    let mut f = File::new(3, 0, 1);
    f.u64(huge).zeros(64);
    assert_eq!(rule(&f.0), "StringTooLong");
    let mut f = File::new(3, 0, 1);
    f.key("k", 8).u64(huge).zeros(64);
    assert_eq!(rule(&f.0), "StringTooLong");
    for ty in [0, 8, 9] {
        let mut f = File::new(3, 0, 1);
        f.key("k", 9).u32(ty).u64(huge).zeros(64);
        assert_eq!(rule(&f.0), "ArrayTooLong", "type {ty}");
    }
    let mut f = File::new(3, 1, 0);
    f.u64(huge).zeros(64);
    assert_eq!(rule(&f.0), "NameTooLong");

    // Claims beyond the file by little are what a file cut short looks like.
    let mut f = File::new(3, 1000, 0);
    f.zeros(100);
    assert_eq!(rule(&f.0), "Truncated");
    let mut f = File::new(3, 0, 1);
    f.key("k", 9).u32(8).u64(150_000).zeros(1000);
    assert!(parse(&f.0).unwrap_err().cut_short());
}

#[test]
fn tensor_infos_are_checked() {
    let file = |dims: &[u64], ty: u32| {
        let mut f = File::new(3, 1, 0);
        f.tensor("t", dims, ty, 0).pad(32).zeros(4096);
        f.0
    };
    assert_eq!(rule(&file(&[1, 1, 1, 1, 1], 0)), "TooManyDims");
    assert_eq!(rule(&file(&[1, 1, 1, 1], 0)), "ok");
    for id in [4, 5, 31, 36, 42, 99, u32::MAX] {
        assert_eq!(rule(&file(&[4], id)), "UnknownType", "id {id}");
    }
    assert_eq!(rule(&file(&[31], 8)), "BadShape");
    assert_eq!(rule(&file(&[32, 3], 8)), "ok");
    assert_eq!(rule(&file(&[1 << 32, 1 << 32], 0)), "ElementCountOverflow");
    assert_eq!(rule(&file(&[1 << 63], 0)), "ElementCountOverflow");
    assert_eq!(rule(&file(&[1 << 40, 1 << 22], 0)), "ElementCountOverflow");
    assert_eq!(rule(&file(&[1 << 40], 0)), "DataPastEnd");
    // No dimensions: a scalar of one element; a dimension of 0: no elements and no bytes.
    let h = parse(&file(&[], 0)).unwrap();
    assert_eq!((h.tensors[0].elements(), h.tensors[0].size), (1, 4));
    let h = parse(&file(&[0, 5], 12)).unwrap();
    assert_eq!((h.tensors[0].elements(), h.tensors[0].size), (0, 0));
    assert_eq!(rule(&file(&[], 12)), "BadShape");

    let e = parse(&file(&[31], 8)).unwrap_err().to_string();
    assert!(e.contains("'t'") && e.contains("Q8_0"), "{e}");
}

#[test]
fn tensor_names_are_checked() {
    let named = |name: &[u8]| {
        let mut f = File::new(3, 1, 0);
        f.u64(name.len() as u64)
            .bytes(name)
            .u32(1)
            .u64(4)
            .u32(0)
            .u64(0);
        f.pad(32).zeros(16);
        f.0
    };
    assert_eq!(rule(&named(&[b'x'; 63])), "ok");
    assert_eq!(rule(&named(&[b'x'; 64])), "NameTooLong");
    assert_eq!(rule(&named(b"\xff\xfe")), "InvalidUtf8");

    let mut f = File::new(3, 2, 0);
    f.tensor("t", &[4], 0, 0).tensor("t", &[4], 0, 32);
    f.pad(32).zeros(64);
    assert_eq!(rule(&f.0), "DuplicateName");
    assert!(parse(&f.0).unwrap_err().to_string().contains("'t'"));
}

#[test]
fn tensor_data_must_be_aligned_in_the_file_and_apart() {
    let two = |second: u64, len: usize| {
        let mut f = File::new(3, 2, 0);
        f.tensor("a", &[8], 0, 0).tensor("b", &[8], 0, second);
        f.pad(32).zeros(len);
        f.0
    };
    assert_eq!(rule(&two(32, 64)), "ok");
    assert_eq!(rule(&two(16, 64)), "Misaligned");
    assert_eq!(rule(&two(0, 64)), "Overlap");
    assert_eq!(rule(&two(32, 63)), "DataPastEnd");
    assert_eq!(rule(&two(u64::MAX - 31, 64)), "DataPastEnd");
    let e = parse(&two(0, 64)).unwrap_err().to_string();
    assert!(e.contains("'a'") && e.contains("'b'"), "{e}");

    // Out of order and with gaps is fine; a large one around a small one is not.
    let mut f = File::new(3, 3, 0);
    f.tensor("c", &[8], 0, 64)
        .tensor("a", &[8], 0, 0)
        .tensor("b", &[8], 0, 128);
    f.pad(32).zeros(160);
    assert_eq!(rule(&f.0), "ok");
    let mut f = File::new(3, 3, 0);
    f.tensor("big", &[64], 0, 0)
        .tensor("x", &[1], 0, 32)
        .tensor("y", &[1], 0, 128);
    f.pad(32).zeros(256);
    assert_eq!(rule(&f.0), "Overlap");
    // Tensors of no bytes overlap nothing.
    let mut f = File::new(3, 2, 0);
    f.tensor("a", &[8], 0, 0).tensor("empty", &[0], 0, 0);
    f.pad(32).zeros(32);
    assert_eq!(rule(&f.0), "ok");
}

#[test]
fn the_alignment_is_a_u32_power_of_two() {
    let aligned = |ty: u32, value: &[u8]| {
        let mut f = File::new(3, 1, 1);
        f.key("general.alignment", ty).bytes(value);
        f.tensor("t", &[1], 0, 0).pad(64).zeros(4);
        f.0
    };
    let h = parse(&aligned(4, &64u32.to_le_bytes())).unwrap();
    assert_eq!((h.alignment, h.data_start % 64), (64, 0));
    assert_eq!(rule(&aligned(4, &1u32.to_le_bytes())), "ok");
    assert_eq!(rule(&aligned(4, &48u32.to_le_bytes())), "BadAlignment");
    assert_eq!(rule(&aligned(4, &0u32.to_le_bytes())), "BadAlignment");
    assert_eq!(rule(&aligned(10, &64u64.to_le_bytes())), "BadAlignment");
    let e = parse(&aligned(10, &64u64.to_le_bytes()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("general.alignment") && e.contains("UINT64"),
        "{e}"
    );
}

#[test]
fn metadata_keys_and_value_types_are_checked() {
    let mut f = File::new(3, 0, 2);
    f.key("k", 4).u32(1).key("k", 4).u32(2);
    assert_eq!(rule(&f.0), "DuplicateKey");
    assert!(parse(&f.0).unwrap_err().to_string().contains("'k'"));

    let mut f = File::new(3, 0, 1);
    f.key("k", 13).u32(1);
    assert_eq!(rule(&f.0), "UnknownValueType");
    let mut f = File::new(3, 0, 1);
    f.key("k", 9).u32(13).u64(0);
    assert_eq!(rule(&f.0), "UnknownValueType");

    let mut f = File::new(3, 0, 1);
    f.u64(2).bytes(b"\xc3\x28").u32(4).u32(1);
    assert_eq!(rule(&f.0), "InvalidUtf8");

    // Arrays of arrays, down to MAX_NESTING levels.
    let nested = |levels: u32| {
        let mut f = File::new(3, 0, 1);
        f.key("k", 9);
        for _ in 1..levels {
            f.u32(9).u64(1);
        }
        f.u32(0).u64(1).bytes(&[7]);
        f.0
    };
    let h = parse(&nested(MAX_NESTING)).unwrap();
    assert!(h.get("k").unwrap().to_json().to_string().contains('7'));
    assert_eq!(rule(&nested(MAX_NESTING + 1)), "NestedTooDeep");
}

#[test]
fn values_of_every_type_are_read_and_given_as_json() {
    let mut f = File::new(3, 0, 16);
    f.key("u8", 0).bytes(&[200]);
    f.key("i8", 1).bytes(&[0x9c]);
    f.key("u16", 2).bytes(&60000u16.to_le_bytes());
    f.key("i16", 3).bytes(&(-30000i16).to_le_bytes());
    f.key("u32", 4).u32(4_000_000_000);
    f.key("i32", 5).bytes(&(-7i32).to_le_bytes());
    f.key("f32", 6).bytes(&0.5f32.to_le_bytes());
    f.key("nan", 6).bytes(&f32::NAN.to_le_bytes());
    f.key("inf", 12).bytes(&f64::NEG_INFINITY.to_le_bytes());
    f.key("bool", 7).bytes(&[2]);
    f.key("str", 8).string("héllo");
    f.key("u64", 10).u64(u64::MAX);
    f.key("i64", 11).bytes(&i64::MIN.to_le_bytes());
    f.key("f64", 12).bytes(&(-2.5f64).to_le_bytes());
    f.key("ints", 9).u32(5).u64(3);
    for v in [1i32, -2, 3] {
        f.bytes(&v.to_le_bytes());
    }
    f.key("bytes", 9)
        .u32(8)
        .u64(2)
        .string("a")
        .u64(4)
        .bytes(b"\x01\xff\xfe\x01");
    let h = parse(&f.0).unwrap();
    let json = |k: &str| h.get(k).unwrap().to_json().to_string();
    let want = [
        ("u8", "200"),
        ("i8", "-100"),
        ("u16", "60000"),
        ("i16", "-30000"),
        ("u32", "4000000000"),
        ("i32", "-7"),
        ("f32", "0.5"),
        ("nan", "\"NaN\""),
        ("inf", "\"-Infinity\""),
        ("bool", "true"),
        ("str", "\"héllo\""),
        ("u64", "18446744073709551615"),
        ("i64", "-9223372036854775808"),
        ("f64", "-2.5"),
        ("ints", "[1,-2,3]"),
        ("bytes", "[\"a\",\"\\u0001\u{fffd}\u{fffd}\\u0001\"]"),
    ];
    for (k, j) in want {
        assert_eq!(json(k), j, "{k}");
    }
    let keys: Vec<_> = h.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys.first(), Some(&"u8"));
    assert_eq!(keys.last(), Some(&"bytes"));
    assert_eq!(h.get("i32").unwrap().as_u64(), None);
    assert_eq!(h.get("u16").unwrap().as_u64(), Some(60000));
    assert_eq!(h.string("u8"), None);
}

#[test]
fn large_arrays_keep_their_type_and_length_only() {
    let mut f = File::new(3, 0, 3);
    f.key("small", 9)
        .u32(0)
        .u64(KEPT_ARRAY_BYTES)
        .zeros(KEPT_ARRAY_BYTES as usize);
    f.key("large", 9).u32(0).u64(KEPT_ARRAY_BYTES + 1);
    f.zeros(KEPT_ARRAY_BYTES as usize + 1);
    f.key("tokens", 9).u32(8).u64(100_000);
    for i in 0..100_000 {
        f.string(&format!("tok{i}"));
    }
    let h = parse(&f.0).unwrap();
    let Some(Value::Array(small)) = h.get("small") else {
        panic!("small")
    };
    assert_eq!(small.values.as_ref().map(Vec::len), Some(65536));
    for (k, ty, n) in [("large", "UINT8", 65537), ("tokens", "STRING", 100_000)] {
        let v = h.get(k).unwrap();
        assert_eq!(
            v.to_json(),
            serde_json::json!({"type": ty, "length": n}),
            "{k}"
        );
    }
    // Its strings are still read: one cut short is found.
    let cut = f.0.len() - 3;
    assert_eq!(rule(&f.0[..cut]), "Truncated");
}

#[test]
fn split_keys_are_read_whatever_their_integer_type() {
    let mut f = File::new(3, 0, 3);
    f.key("split.no", 2).bytes(&1u16.to_le_bytes());
    f.key("split.count", 2).bytes(&3u16.to_le_bytes());
    f.key("split.tensors.count", 5).bytes(&291i32.to_le_bytes());
    let h = parse(&f.0).unwrap();
    assert_eq!(
        h.split(),
        Some(Split {
            no: 1,
            count: 3,
            tensors: Some(291)
        })
    );
}

#[test]
fn types_have_gguf_py_names_and_blocks() {
    assert_eq!(GgmlType::ALL.len(), 34);
    for t in GgmlType::ALL {
        assert_eq!(GgmlType::from_id(t.id()), Some(t));
    }
    assert_eq!(GgmlType::from_id(12).map(GgmlType::name), Some("Q4_K"));
    assert_eq!(GgmlType::from_id(30).map(GgmlType::name), Some("BF16"));
    assert_eq!(GgmlType::from_id(39).map(GgmlType::name), Some("MXFP4"));
    assert_eq!(GgmlType::from_id(4), None);
    let block = |t: GgmlType| (t.block_elements(), t.block_bytes());
    assert_eq!(block(GgmlType::Q4_K), (256, 144));
    assert_eq!(block(GgmlType::Q6_K), (256, 210));
    assert_eq!(block(GgmlType::IQ1_M), (256, 56));
    assert_eq!(block(GgmlType::TQ1_0), (256, 54));
    assert_eq!(block(GgmlType::BF16), (1, 2));
    assert!(GgmlType::IQ2_XXS.can_dequantize());
    assert!(!GgmlType::Q8_K.can_dequantize());
}

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
