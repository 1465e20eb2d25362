//! The reader on models encoded here field by field (the integration tests hold it to the `onnx`
//! package on models its writer makes): protobuf's merging, computed values read at any offset,
//! and the rules.

use std::fs::File;
use std::io::IoSliceMut;

use crate::base::testing::read_at;

use super::*;

fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        out.push(b | if n != 0 { 0x80 } else { 0 });
        if n == 0 {
            return out;
        }
    }
}

fn len(number: u64, payload: &[u8]) -> Vec<u8> {
    [
        varint(number << 3 | 2),
        varint(payload.len() as u64),
        payload.to_vec(),
    ]
    .concat()
}

fn int(number: u64, value: u64) -> Vec<u8> {
    [varint(number << 3), varint(value)].concat()
}

/// A model whose graph holds `graph` (its encoded fields).
fn model(graph: &[u8]) -> Vec<u8> {
    [int(1, 9), len(7, graph)].concat()
}

fn describe_bytes(bytes: &[u8]) -> Result<Description, FormatError> {
    let dir = crate::base::testing::TempDir::new("onnx");
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes).unwrap();
    describe(&File::open(&path).unwrap(), &path)
}

/// The bytes of `t`: its stretch of `file`, or computed, read whole and in pieces of `step`.
fn bytes_of(file: &[u8], t: &Tensor, step: usize) -> Vec<u8> {
    let size = t.size() as usize;
    let Some(c) = &t.computed else {
        return file[t.begin as usize..t.end as usize].to_vec();
    };
    let mut read = |_: Option<u32>, bufs: &mut [IoSliceMut<'_>], at: u64| read_at(file, bufs, at);
    let mut whole = vec![0; size];
    c.read(&mut read, 0, &mut whole).unwrap();
    let mut pieces = vec![0; size];
    for from in (0..size).step_by(step) {
        let to = (from + step).min(size);
        c.read(&mut read, from as u64, &mut pieces[from..to])
            .unwrap();
    }
    assert_eq!(whole, pieces, "{}: read in pieces of {step}", t.name);
    whole
}

fn tensor<'d>(d: &'d Description, name: &str) -> &'d Tensor {
    d.tensors.iter().find(|t| &*t.name == name).unwrap()
}

/// Two `graph` fields are one graph; `raw_data`, `name` and `data_type` given twice are the last
/// ones; `dims` unpacked and packed add up.
#[test]
fn messages_merge_and_the_last_scalar_wins() {
    let t1 = [
        int(1, 2),
        len(8, b"first"),
        int(2, 3),
        len(9, &[9; 2]),
        len(9, &[1, 2, 3, 4, 5, 6, 7, 8]),
        int(2, 1),
        len(8, b"w"),
    ]
    .concat();
    let t2 = [
        len(1, &varint(3)),
        int(2, 2),
        len(8, b"u"),
        len(9, &[7, 8, 9]),
    ]
    .concat();
    let bytes = [model(&len(5, &t1)), len(7, &len(5, &t2))].concat();
    let d = describe_bytes(&bytes).unwrap();
    assert_eq!(d.tensors.len(), 2);
    let w = tensor(&d, "w");
    assert_eq!((w.dtype, &*w.shape), (Dtype::F32, &[2][..]));
    assert_eq!(bytes_of(&bytes, w, 3), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(bytes_of(&bytes, tensor(&d, "u"), 1), [7, 8, 9]);
}

/// int64s as varints (packed, then unpacked, past several marks of the index), and floats split
/// over packed arrays and single fields, read whole and in pieces that cut values.
#[test]
fn typed_values_are_computed_at_any_offset() {
    let values: Vec<i64> = (0..12_000).map(|i| (i * 7919) % 100_003 - 50_000).collect();
    let packed: Vec<u8> = values[..9000]
        .iter()
        .flat_map(|&v| varint(v as u64))
        .collect();
    let mut ints = [int(1, 12_000), len(8, b"ints"), int(2, 7), len(7, &packed)].concat();
    for &v in &values[9000..] {
        ints.extend(int(7, v as u64));
    }
    let f: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    let le = |s: &[f32]| s.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let mut floats = [
        int(1, 6),
        len(8, b"floats"),
        int(2, 1),
        len(4, &le(&f[..3])),
    ]
    .concat();
    for v in &f[3..] {
        floats.extend([varint(4 << 3 | 5), v.to_le_bytes().to_vec()].concat());
    }
    let bytes = model(&[len(5, &ints), len(5, &floats)].concat());
    let d = describe_bytes(&bytes).unwrap();
    let want: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    for step in [5, 4096, 40_000] {
        assert_eq!(bytes_of(&bytes, tensor(&d, "ints"), step), want);
    }
    assert!(tensor(&d, "ints").computed.is_some());
    assert_eq!(bytes_of(&bytes, tensor(&d, "floats"), 3), le(&f));
}

/// Bad input, each refused by its rule.
#[test]
fn bad_models_are_refused_by_rule() {
    let rule = |bytes: &[u8]| describe_bytes(bytes).unwrap_err().rule().unwrap();
    let w = [int(1, 4), len(8, b"w"), int(2, 1), len(9, &[0; 16])].concat();
    let good = model(&len(5, &w));
    assert!(describe_bytes(&good).is_ok());
    assert_eq!(rule(&good[..good.len() - 3]), "Truncated");
    let short = [int(1, 4), len(8, b"w"), int(2, 1), len(9, &[0; 12])].concat();
    assert_eq!(rule(&model(&len(5, &short))), "BadTensor");
    let negative = [int(1, u64::MAX), len(8, b"w"), int(2, 1)].concat();
    assert_eq!(rule(&model(&len(5, &negative))), "BadTensor");
    assert_eq!(
        rule(&[good.clone(), varint(9 << 3 | 3)].concat()),
        "BadField"
    );
    let mut g = Vec::new();
    for _ in 0..graph::MAX_DEPTH + 2 {
        let attr = [len(1, b"body"), len(6, &g)].concat();
        g = len(1, &[len(4, b"Loop"), len(5, &attr)].concat());
    }
    assert_eq!(rule(&model(&g)), "TooDeep");
    // A varint of eleven bytes.
    assert_eq!(
        rule(&[vec![0x08], vec![0xff; 10], vec![1]].concat()),
        "BadVarint"
    );
}

/// A `Constant`'s scalar and list attributes, and names reused in a subgraph.
#[test]
fn constants_and_subgraph_names() {
    let constant = |out: &[u8], attr: Vec<u8>| {
        len(
            1,
            &[len(2, out), len(4, b"Constant"), len(5, &attr)].concat(),
        )
    };
    let float = [
        len(1, b"value_float"),
        [varint(2 << 3 | 5), 1.5f32.to_le_bytes().to_vec()].concat(),
    ]
    .concat();
    let ints = [
        len(1, b"value_ints"),
        len(8, &[varint(3), varint(u64::MAX)].concat()),
    ]
    .concat();
    let sub = constant(b"k", float.clone());
    let if_node = len(
        1,
        &[
            len(3, b"If_0"),
            len(4, b"If"),
            len(5, &[len(1, b"then_branch"), len(6, &sub)].concat()),
        ]
        .concat(),
    );
    // Lists without values: empty, of their type.
    let no_ints = constant(b"none_i", len(1, b"value_ints"));
    let no_floats = constant(b"none_f", len(1, b"value_floats"));
    let graph = [
        constant(b"k", float),
        constant(b"ks", ints),
        if_node,
        no_ints,
        no_floats,
    ]
    .concat();
    let bytes = model(&graph);
    let d = describe_bytes(&bytes).unwrap();
    let names: Vec<&str> = d.tensors.iter().map(|t| &*t.name).collect();
    assert!(names.contains(&"If_0.then_branch/k"), "{names:?}");
    assert_eq!(bytes_of(&bytes, tensor(&d, "k"), 4), 1.5f32.to_le_bytes());
    let ks = tensor(&d, "ks");
    assert_eq!((ks.dtype, &*ks.shape), (Dtype::I64, &[2][..]));
    assert_eq!(
        bytes_of(&bytes, ks, 3),
        [3u64.to_le_bytes(), u64::MAX.to_le_bytes()].concat()
    );
    for (name, dtype) in [("none_i", Dtype::I64), ("none_f", Dtype::F32)] {
        let t = tensor(&d, name);
        assert_eq!(
            (t.dtype, &*t.shape, t.size()),
            (dtype, &[0][..], 0),
            "{name}"
        );
    }
}
