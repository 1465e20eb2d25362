//! Unit tests of [`super`].

use super::*;
use crate::format::kit::pickle::load;

fn s(text: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend((text.len() as u32).to_le_bytes());
    b.extend(text.as_bytes());
    b
}

fn ints(values: &[u8]) -> Vec<u8> {
    let mut b = vec![b'('];
    for &v in values {
        b.extend([b'K', v]);
    }
    b.push(b't');
    b
}

/// `_rebuild_tensor_v2` of a `class` storage `key` of `numel` elements.
fn tensor(key: &str, class: &str, numel: u8, offset: u8, shape: &[u8], stride: &[u8]) -> Vec<u8> {
    let mut b = b"ctorch._utils\n_rebuild_tensor_v2\n((".to_vec();
    b.extend(s("storage"));
    b.extend(format!("ctorch\n{class}\n").as_bytes());
    b.extend(s(key));
    b.extend(s("cpu"));
    b.extend([b'K', numel, b't', b'Q', b'K', offset]);
    b.extend(ints(shape));
    b.extend(ints(stride));
    b.extend(b"\x89ccollections\nOrderedDict\n)RtR");
    b
}

fn dict(items: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut b = b"}(".to_vec();
    for (k, v) in items {
        b.extend(s(k));
        b.extend(v);
    }
    b.push(b'u');
    b
}

fn pickle(body: Vec<u8>) -> Pickle {
    let mut b = b"\x80\x02".to_vec();
    b.extend(body);
    b.push(b'.');
    load(&b, super::super::danger::allowed).unwrap()
}

fn names(w: &Walked) -> Vec<&str> {
    w.found.iter().map(|f| f.name.as_str()).collect()
}

#[test]
fn tensors_are_named_by_their_path() {
    let t = |k: &str| tensor(k, "FloatStorage", 4, 0, &[2, 2], &[2, 1]);
    let mut nested = b"]".to_vec();
    nested.extend(b"(");
    nested.extend(dict(&[("w", t("1"))]));
    nested.extend(b"}K\x03");
    nested.extend(t("2"));
    nested.extend(b"se");
    let p = pickle(dict(&[("a", t("0")), ("list", nested), ("a", t("3"))]));
    let w = walk(&p).unwrap();
    assert_eq!(names(&w), ["a", "list.0.w", "list.1.3"]);
    assert!(
        w.notes[0].contains("two values are named `a`"),
        "{:?}",
        w.notes
    );
    assert!(w.state_dict.unwrap_err().starts_with("no state dict"));
    let f = &w.found[0];
    assert_eq!(
        (f.dtype, &f.shape[..], &f.strides[..]),
        (Dtype::F32, &[2, 2][..], &[2, 1][..])
    );
    assert_eq!(
        f.storage,
        StorageRef {
            key: "0".into(),
            elem_size: 4,
            numel: 4,
            view_start: 0
        }
    );
}

#[test]
fn state_dicts() {
    let t = |k: &str| tensor(k, "HalfStorage", 1, 0, &[], &[]);
    let w = walk(&pickle(dict(&[("x", t("0")), ("y", t("1"))]))).unwrap();
    let keys =
        |w: Walked| -> Vec<String> { w.state_dict.unwrap().into_iter().map(|(k, _)| k).collect() };
    assert_eq!(keys(w), ["x", "y"]);
    let lightning = dict(&[
        ("epoch", b"K\x03".to_vec()),
        ("state_dict", dict(&[("m.w", t("0"))])),
    ]);
    let w = walk(&pickle(lightning)).unwrap();
    assert_eq!(keys(w), ["m.w"]);
    let w = walk(&pickle(dict(&[]))).unwrap();
    assert_eq!(w.state_dict.unwrap_err(), "no tensors");
    // A bare tensor.
    let w = walk(&pickle(t("0"))).unwrap();
    assert_eq!(names(&w), ["tensor"]);
}

#[test]
fn opaque_values_leave_out_only_their_tensors() {
    let mut evil = b"ctorch._utils\n_rebuild_tensor_v2\n(cos\nsystem\n".to_vec();
    evil.extend(b"K\x00(K\x01t(K\x01t\x89)tR");
    let good = tensor("0", "FloatStorage", 1, 0, &[1], &[1]);
    let p = pickle(dict(&[("evil", evil), ("good", good)]));
    let w = walk(&p).unwrap();
    assert_eq!(names(&w), ["good"]);
    assert!(
        w.notes[0]
            .contains("tensor `evil` has a storage that is not torch's (the global `os.system`)")
    );
}

#[test]
fn wrappers_dtypes_and_views() {
    // A parameter around a v3 tensor of an untyped storage (bytes) of dtype uint16.
    let mut v3 = b"ctorch._utils\n_rebuild_tensor_v3\n((".to_vec();
    v3.extend(s("storage"));
    v3.extend(b"ctorch.storage\nUntypedStorage\n");
    v3.extend(s("k"));
    v3.extend(s("cpu"));
    v3.extend(b"K\x06tQK\x00");
    v3.extend(ints(&[3]));
    v3.extend(ints(&[1]));
    v3.extend(b"\x89}ctorch\nuint16\ntR");
    let mut param = b"ctorch._utils\n_rebuild_parameter\n(".to_vec();
    param.extend(v3);
    param.extend(b"\x88}tR");
    // A legacy storage view: 2 elements from element 1 of storage `r`.
    let mut view = b"ctorch._utils\n_rebuild_tensor_v2\n((".to_vec();
    view.extend(s("storage"));
    view.extend(b"ctorch\nLongStorage\n");
    view.extend(s("r"));
    view.extend(s("cpu"));
    view.extend(b"K\x05(");
    view.extend(s("v"));
    view.extend(b"K\x01K\x02ttQK\x00(K\x02t(K\x01t\x89}tR");
    let quant = b"ctorch._utils\n_rebuild_qtensor\n((X\x07\x00\x00\x00storagectorch\nQInt8Storage\nX\x01\x00\x00\x000NK\x01tQtR".to_vec();
    let w = walk(&pickle(dict(&[("p", param), ("v", view), ("q", quant)]))).unwrap();
    let [p, v] = &w.found[..] else {
        panic!("{:?}", w)
    };
    assert_eq!(
        (p.dtype, p.elem.size, p.storage.elem_size, p.storage.numel),
        (Dtype::U16, 2, 1, 6)
    );
    assert_eq!(
        (v.dtype, v.storage.view_start, v.storage.numel),
        (Dtype::I64, 1, 2)
    );
    assert_eq!(
        w.notes,
        ["tensor `q` is quantized (torch.qint8): no file; safetensors has no quantized dtype"]
    );
    assert_eq!(storages(&pickle(dict(&[]))), []);
}

#[test]
fn cycles_depth_and_path_bombs() {
    // A list inside itself.
    let w = walk(&pickle(b"]q\x00h\x00a".to_vec())).unwrap();
    assert!(w.found.is_empty());
    // 100,000 nested lists: deeper than the walk goes, with a note.
    let mut b = vec![b'('; 100_000];
    b.extend(std::iter::repeat_n(b'l', 100_000));
    let w = walk(&pickle(b)).unwrap();
    assert!(w.notes[0].contains("deeper than 256"), "{:?}", w.notes);
    // Each list holds the previous one twice: 2^40 paths.
    let mut b = b"]".to_vec();
    for i in 0..40u8 {
        b.extend([b'q', i, b']', b'(', b'h', i, b'h', i, b'e']);
    }
    assert!(walk(&pickle(b)).is_err());
    // A million Nones in a list: no sharing of note, and within the budget.
    let mut b = b"(".to_vec();
    b.extend(std::iter::repeat_n(b'N', 1_000_000));
    b.push(b'l');
    assert!(walk(&pickle(b)).is_ok());
}

#[test]
fn long_names_are_bounded() {
    let t = tensor("0", "FloatStorage", 1, 0, &[], &[]);
    let key = "k".repeat(2000);
    // {K: {K: {K: tensor}}}: a name past the limit, ignored with a note.
    let w = walk(&pickle(dict(&[(
        &key,
        dict(&[(&key, dict(&[(&key, t.clone())]))]),
    )])))
    .unwrap();
    assert!(w.found.is_empty());
    assert_eq!(w.notes, ["names longer than 4096 bytes are ignored"]);
    // {K: [t, t, ...]}: 1,000 names of 2,000 bytes from a few kilobytes of pickle.
    let mut list = b"](".to_vec();
    list.extend(&t);
    list.extend(b"q\x09");
    list.extend(std::iter::repeat_n(&b"h\x09"[..], 999).flatten());
    list.push(b'e');
    assert!(walk(&pickle(dict(&[(&key, list)]))).is_err());
}
