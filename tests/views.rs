//! The optional views: `-o npy` (an NPY file beside each tensor numpy can describe) and
//! `-o layout=tree` (tensor names split into directories). numpy and the official safetensors
//! reader are the oracles; expected paths are written out by hand from the README's rules.

mod common;
use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mount(source: &Path, opts: &str) -> (Mounted, String) {
    let (m, out) = Mounted::try_new(source, opts);
    assert!(out.status.success(), "mount -o {opts}: {}", stderr(&out));
    (m.expect("mounted after exit 0"), stderr(&out))
}

/// `dd` of a file with extra arguments; the bytes, or the error text.
fn dd(path: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(args)
        .arg("status=none")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(stderr(&out))
    }
}

/// Every regular file under `dir`, by path relative to it.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let child = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(child);
            } else {
                out.insert(child.to_str().unwrap().to_string());
            }
        }
    }
    out
}

fn fixtures(py: &Path) -> TempDir {
    let tmp = TempDir::new("views");
    fs::create_dir(tmp.join("fx")).unwrap();
    oracle(py, &["write-fixtures", s(&tmp.join("fx"))]);
    tmp
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn npy_views_load_with_numpy_like_the_official_reader() {
    require_fuse();
    let py = python();
    let tmp = fixtures(&py);
    let fx = tmp.join("fx");
    for opts in ["npy", "npy,layout=tree"] {
        let (m, _) = mount(&fx, opts);
        for (src, dir) in [
            (fx.join("single.safetensors"), m.path("single.tensors")),
            (fx.join("big.safetensors"), m.path("big.tensors")),
            (fx.join("sharded"), m.path("sharded/model.tensors")),
            (
                fx.join("sharded/model-00002-of-00002.safetensors"),
                m.path("sharded/model-00002-of-00002.tensors"),
            ),
        ] {
            let out = oracle(&py, &["compare", "--npy", s(&src), s(&dir)]);
            assert!(out.starts_with("ok "), "-o {opts} {}: {out}", src.display());
        }
        // The mirror is untouched by the views.
        assert_eq!(
            fs::read(m.path("big.safetensors")).unwrap(),
            fs::read(fx.join("big.safetensors")).unwrap()
        );
    }
    // A single-file mount has them too.
    let src = fx.join("single.safetensors");
    let (m, _) = mount(&src, "npy");
    let out = oracle(&py, &["compare", "--npy", s(&src), s(&m.dir)]);
    assert!(out.starts_with("ok "), "{out}");
}

/// A model with dtypes numpy lacks, a tensor named like another's view, and a tensor large
/// enough for many reads.
fn npy_model(dir: &Path) -> (PathBuf, Vec<u8>) {
    let big = bytes(3 * 100_000 * 4, 7);
    let path = dir.join("m.safetensors");
    write_safetensors(
        &path,
        &[
            T {
                name: "w",
                dtype: "F32",
                shape: &[3, 100_000],
                data: big.clone(),
            },
            T {
                name: "bf",
                dtype: "BF16",
                shape: &[2],
                data: bytes(4, 1),
            },
            T {
                name: "f8",
                dtype: "F8_E4M3",
                shape: &[3],
                data: bytes(3, 2),
            },
            T {
                name: "x",
                dtype: "U8",
                shape: &[2],
                data: vec![1, 2],
            },
            T {
                name: "x.npy",
                dtype: "U8",
                shape: &[1],
                data: vec![9],
            },
        ],
        None,
    );
    (path, big)
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn npy_files_are_a_header_then_the_tensor_bytes_at_every_offset() {
    require_fuse();
    let tmp = TempDir::new("npy");
    let (src, big) = npy_model(tmp.path());
    let (m, warnings) = mount(&src, "npy");

    let view = m.path("w.npy");
    let header_len: usize = getxattr(&view, "user.safetensors.npy_header_len")
        .unwrap()
        .parse()
        .unwrap();
    let whole = fs::read(&view).unwrap();
    assert_eq!(whole.len(), header_len + big.len());
    assert_eq!(fs::metadata(&view).unwrap().len() as usize, whole.len());
    // NPY 1.0: magic, version, little-endian header length, the dict, padding, newline.
    assert_eq!(&whole[..8], b"\x93NUMPY\x01\x00");
    assert_eq!(
        u16::from_le_bytes([whole[8], whole[9]]) as usize,
        header_len - 10
    );
    assert_eq!(header_len % 64, 0);
    assert_eq!(whole[header_len - 1], b'\n');
    let dict = std::str::from_utf8(&whole[10..header_len]).unwrap();
    assert!(
        dict.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 100000), }"),
        "{dict}"
    );
    assert!(
        &whole[header_len..] == big.as_slice(),
        "tensor bytes differ"
    );
    // The same tensor's xattrs as its raw file.
    for key in ["dtype", "shape", "offset", "source", "name"] {
        let key = format!("user.safetensors.{key}");
        assert_eq!(getxattr(&view, &key), getxattr(&m.path("w"), &key), "{key}");
    }

    // Direct I/O reaches the daemon at the offsets asked for, so reads start inside the header,
    // straddle its end and start in the tensor bytes.
    for (bs, skip) in [(7, 0), (7, 9), (100, 0), (4096, 0), (1000, 1), (65536, 2)] {
        let got = dd(
            &view,
            &[
                &format!("bs={bs}"),
                &format!("skip={skip}"),
                "count=3",
                "iflag=direct",
            ],
        )
        .unwrap();
        let from = (bs * skip).min(whole.len());
        let to = (from + 3 * bs).min(whole.len());
        assert!(got == whole[from..to], "dd bs={bs} skip={skip}");
    }
    let got = dd(&view, &["bs=1M", "iflag=direct"]).unwrap();
    assert!(got == whole, "dd bs=1M iflag=direct");

    // numpy has no type for BF16 or F8: no view. `x.npy` is a tensor, so `x` gets no view either.
    assert!(!m.path("bf.npy").exists() && !m.path("f8.npy").exists());
    assert!(m.path("bf").exists() && m.path("f8").exists());
    assert_eq!(fs::read(m.path("x.npy")).unwrap(), [9]);
    assert_eq!(
        getxattr(&m.path("x.npy"), "user.safetensors.name").as_deref(),
        Some("x.npy")
    );
    assert!(
        warnings.contains("tensor `x`") && warnings.contains("x.npy"),
        "{warnings}"
    );
}

/// Frozen (refresh=off), reads of a truncated source fail with EIO; followed, a handle opened
/// before gets ESTALE (tests/refresh.rs).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn npy_reads_fail_with_eio_once_the_source_is_truncated() {
    require_fuse();
    let tmp = TempDir::new("npytrunc");
    let (src, big) = npy_model(tmp.path());
    let (m, _) = mount(&src, "npy,refresh=off");
    let view = m.path("w.npy");
    let len = fs::metadata(&src).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&src)
        .unwrap()
        .set_len(len - big.len() as u64 / 2)
        .unwrap();
    for skip in ["0", "100"] {
        let err = dd(&view, &["bs=4096", &format!("skip={skip}"), "iflag=direct"]).unwrap_err();
        assert!(err.contains("Input/output error"), "skip={skip}: {err}");
    }
    // The daemon is still there.
    assert!(fs::read_dir(&m.dir).unwrap().count() > 0);
}

/// Tensor names and the paths `layout=tree` gives them, by the README's rules.
const TREE: &[(&str, &str)] = &[
    (
        "model.layers.0.self_attn.q_proj.weight",
        "model/layers/0/self_attn/q_proj/weight",
    ),
    // bitsandbytes: `weight` beside `weight.absmax`, `weight.quant_state...`.
    (
        "model.layers.0.mlp.down_proj.weight",
        "model/layers/0/mlp/down_proj/weight/__tensor__",
    ),
    (
        "model.layers.0.mlp.down_proj.weight.absmax",
        "model/layers/0/mlp/down_proj/weight/absmax",
    ),
    (
        "model.layers.0.mlp.down_proj.weight.quant_map",
        "model/layers/0/mlp/down_proj/weight/quant_map",
    ),
    (
        "model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4",
        "model/layers/0/mlp/down_proj/weight/quant_state/bitsandbytes__nf4",
    ),
    ("lm_head.weight", "lm_head/weight"),
    ("top", "top"),
    // `/` splits too; of two names with the same parts, the first in byte order gets the path.
    ("a.b", "a/b"),
    ("a/b", "a%2Fb"),
    ("c/d", "c/d"),
    // A part that is itself `__tensor__` is written `%5F_tensor__`.
    ("n", "n/__tensor__"),
    ("n.__tensor__", "n/%5F_tensor__"),
    ("n.m", "n/m"),
    // A first part `__metadata__` is written `%5F_metadata__`, beside the metadata file; deeper
    // down it is a part like any other.
    ("__metadata__.x", "%5F_metadata__/x"),
    ("n.__metadata__", "n/__metadata__"),
    // Empty parts and `%` are escaped as in the flat layout.
    ("x..y", "x/%/y"),
    ("100%.v", "100%25/v"),
];

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tree_layout_nests_names_and_keeps_prefix_tensors_in_dunder_tensor() {
    require_fuse();
    let tmp = TempDir::new("tree");
    let deep = vec!["d"; 70].join(".");
    let long = format!("long.{}", "p".repeat(300));
    let mut tensors: Vec<T> = TREE
        .iter()
        .enumerate()
        .map(|(i, (name, _))| T {
            name,
            // BF16 elements are 2 bytes.
            dtype: if *name == "lm_head.weight" {
                "BF16"
            } else {
                "U8"
            },
            shape: if *name == "lm_head.weight" {
                &[3]
            } else {
                &[6]
            },
            data: bytes(6, i as u64),
        })
        .collect();
    tensors.push(T {
        name: &deep,
        dtype: "U8",
        shape: &[1],
        data: vec![70],
    });
    tensors.push(T {
        name: &long,
        dtype: "U8",
        shape: &[1],
        data: vec![30],
    });
    let src = tmp.join("m.safetensors");
    write_safetensors(&src, &tensors, Some(&[("format", "pt")]));

    let (m, _) = mount(&src, "layout=tree");
    let mut want: BTreeMap<String, &[u8]> = TREE
        .iter()
        .zip(&tensors)
        .map(|((_, path), t)| (path.to_string(), t.data.as_slice()))
        .collect();
    // Over 64 parts: at the top under the full name.
    want.insert(deep.clone(), &[70]);
    want.insert("__metadata__".into(), b"");
    let got = files_under(&m.dir);
    // The long part is shortened within its directory, as in the flat layout.
    let long_file = got
        .iter()
        .find(|p| p.starts_with("long/"))
        .expect("a file under long/")
        .clone();
    assert!(long_file.len() <= "long/".len() + 255 && long_file.contains("%#"));
    want.insert(long_file, &[30]);
    assert_eq!(got, want.keys().cloned().collect(), "files of the tree");

    for (path, data) in &want {
        let p = m.path(path);
        if path == "__metadata__" {
            continue;
        }
        assert_eq!(fs::read(&p).unwrap(), *data, "{path}");
        let name = getxattr(&p, "user.safetensors.name").unwrap();
        let t = tensors.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.data, *data, "{path} is tensor {name}");
    }
    // Intermediate directories list like any directory.
    let out = Command::new("ls")
        .arg("-la")
        .arg(m.path("model/layers/0/mlp/down_proj/weight"))
        .output()
        .unwrap();
    let listing = stdout(&out);
    for entry in ["__tensor__", "absmax", "quant_map", "quant_state"] {
        assert!(listing.contains(entry), "{listing}");
    }
    assert_eq!(fs::metadata(m.path("n")).unwrap().len(), 0);

    // With -o npy as well, each view sits beside its file; BF16 gets none.
    let (m, _) = mount(&src, "layout=tree,npy");
    let view = m.path("model/layers/0/mlp/down_proj/weight/__tensor__.npy");
    let raw = fs::read(m.path("model/layers/0/mlp/down_proj/weight/__tensor__")).unwrap();
    let npy = fs::read(&view).unwrap();
    assert!(npy.starts_with(b"\x93NUMPY") && npy.ends_with(&raw));
    assert!(m.path("n/%5F_tensor__.npy").exists());
    assert!(m.path("lm_head/weight").exists() && !m.path("lm_head/weight.npy").exists());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tree_layout_reads_directories_and_merged_sets_like_the_official_reader() {
    require_fuse();
    let py = python();
    let tmp = fixtures(&py);
    let fx = tmp.join("fx");
    let (m, _) = mount(&fx, "layout=tree");
    for (src, dir) in [
        (fx.join("single.safetensors"), m.path("single.tensors")),
        (fx.join("sharded"), m.path("sharded/model.tensors")),
    ] {
        let out = oracle(&py, &["compare", s(&src), s(&dir)]);
        assert!(out.starts_with("ok "), "{}: {out}", src.display());
    }
    // --list shows the tree's paths.
    let out = run(&["--list", "-o", "layout=tree", s(&fx.join("sharded"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("model.tensors/model/embed/weight"),
        "{}",
        stdout(&out)
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tree_layout_places_every_tensor_of_hostile_names_exactly_once() {
    require_fuse();
    let py = python();
    let tmp = TempDir::new("tree-hostile");
    let names: Vec<String> = [
        // Under 64 KiB, so that user.safetensors.name can carry it.
        ".".repeat(60_000),
        "/".repeat(5_000),
        format!("{}x", "a.".repeat(64)),
        format!("{}x", "a/".repeat(63)),
        ".".into(),
        "..".into(),
        "/".into(),
        "./".into(),
        "".into(),
        "a.".into(),
        ".a".into(),
        "a".into(),
        "__tensor__".into(),
        "__tensor__.__tensor__".into(),
        "__tensor__.__tensor__.x".into(),
        "%5F_tensor__".into(),
        "%".into(),
        "%.%2F".into(),
        "x.npy".into(),
        "x".into(),
        "x/npy".into(),
        "é.ü/\n".into(),
    ]
    .into_iter()
    .collect();
    let tensors: Vec<T> = names
        .iter()
        .enumerate()
        .map(|(i, name)| T {
            name,
            dtype: "U8",
            shape: &[4],
            data: bytes(4, i as u64),
        })
        .collect();
    let src = tmp.join("m.safetensors");
    write_safetensors(&src, &tensors, None);
    for opts in ["layout=tree", "layout=tree,npy"] {
        let (m, _) = mount(&src, opts);
        let mut args = vec!["compare", s(&src), s(&m.dir)];
        if opts.ends_with("npy") {
            args.push("--npy");
        }
        let out = oracle(&py, &args);
        assert!(out.starts_with("ok "), "-o {opts}: {out}");
    }
}
