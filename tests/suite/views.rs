//! The optional views: `-o npy` (an NPY file beside each tensor numpy can describe) and
//! `-o layout=tree` (tensor names split into directories). numpy and the official safetensors
//! reader are the oracles; expected paths are written out by hand from the rules of `doc/layout.md`.

use crate::common::*;

use std::fs;
use std::path::{Path, PathBuf};

fn mount(source: &Path, opts: &str) -> (Mounted, String) {
    let (m, out) = Mounted::try_new(source, opts);
    assert!(out.status.success(), "mount -o {opts}: {}", stderr(&out));
    (m.expect("mounted after exit 0"), stderr(&out))
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

    // Which tensors get a view is the rule tests' (src/namespace/rules_tests.rs); the mount warns
    // that `x` has none, as `x.npy` is a tensor.
    assert!(
        warnings.contains("tensor `x`") && warnings.contains("x.npy"),
        "{warnings}"
    );
}

/// Frozen (refresh=off), reads of a truncated source fail with EIO; followed, a handle opened
/// before gets ESTALE (tests/suite/refresh.rs).
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
