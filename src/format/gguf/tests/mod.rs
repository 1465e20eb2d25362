//! Tests of the GGUF reader and dequantizer on hand-built files, with expected values from the
//! format's definition; and an ignored test comparing with gguf-py's output on a fixture written
//! by `tests/python/gguf_fixture.py` (see [`dequant::matches_gguf_py`]).

use crate::format::Broken;
use std::io::Cursor;

use super::*;

mod dequant;

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
