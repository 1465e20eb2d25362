//! Reading tensor and mirrored files through a real mount: `dd` at many block sizes, O_DIRECT,
//! pread at random places and past the end, mmap, concurrent readers, and numpy plus the official
//! safetensors reader as the oracle.

use crate::common::*;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mounts `source`, asserting that the command succeeded.
fn mount(source: &Path) -> Mounted {
    let (m, out) = Mounted::try_new(source, "");
    assert!(
        out.status.success(),
        "mount of {} failed: {}",
        source.display(),
        stderr(&out)
    );
    m.expect("mounted after exit 0")
}

const BIG_LEN: usize = 4 << 20;

/// A source file with small tensors around a 4 MiB F32 tensor whose data starts at an odd
/// (so not 4096-aligned) file offset. Returns the path and, per tensor, its name, its absolute
/// offset in the file (computed from the header written) and its bytes as read from the source.
struct Fixture {
    _tmp: TempDir,
    src: PathBuf,
    tensors: Vec<(String, u64, Vec<u8>)>,
}

fn fixture() -> Fixture {
    let tmp = TempDir::new("reads");
    let src = tmp.join("odd.safetensors");
    let list = [
        T {
            name: "a",
            dtype: "U8",
            shape: &[3],
            data: bytes(3, 1),
        },
        T {
            name: "b",
            dtype: "I16",
            shape: &[5],
            data: bytes(10, 2),
        },
        T {
            name: "big",
            dtype: "F32",
            shape: &[1024, 1024],
            data: bytes(BIG_LEN, 3),
        },
        T {
            name: "c",
            dtype: "I32",
            shape: &[2, 2],
            data: bytes(16, 4),
        },
        T {
            name: "d",
            dtype: "U8",
            shape: &[5000],
            data: bytes(5000, 5),
        },
    ];
    write_safetensors(&src, &list, Some(&[("format", "pt")]));
    let file = fs::read(&src).unwrap();
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap());
    let header: serde_json::Value =
        serde_json::from_slice(&file[8..8 + header_len as usize]).unwrap();
    let mut tensors = Vec::new();
    for t in &list {
        let offs = header[t.name]["data_offsets"].as_array().unwrap();
        let (b, e) = (offs[0].as_u64().unwrap(), offs[1].as_u64().unwrap());
        let start = 8 + header_len + b;
        let bytes = file[start as usize..(8 + header_len + e) as usize].to_vec();
        assert_eq!(bytes, t.data, "the fixture's own writer is off");
        tensors.push((t.name.to_string(), start, bytes));
    }
    let big_start = tensors[2].1;
    assert!(
        big_start % 4096 != 0 && big_start % 2 == 1,
        "big tensor must start at an odd offset, is at {big_start}"
    );
    Fixture {
        _tmp: tmp,
        src,
        tensors,
    }
}

fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: {} bytes read, {} expected; first difference at byte {first}",
            got.len(),
            want.len()
        );
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn dd_at_every_block_size_reads_exactly_the_source_bytes() {
    require_fuse();
    let fx = fixture();
    let m = mount(&fx.src);
    let big = &fx.tensors[2].2;
    let path = m.path("big");
    for bs in ["7", "512", "4096", "65536", "1M", "3M"] {
        let got = dd(&path, &[&format!("bs={bs}")]).unwrap();
        assert_same(&format!("dd bs={bs}"), &got, big);
    }
    // bs=1 over all 4 MiB takes seconds (a syscall per byte): the first 512 KiB (from the odd
    // source offset across many pages) and the last 64 KiB up to the end.
    let head = 512 << 10;
    let got = dd(&path, &["bs=1", &format!("count={head}")]).unwrap();
    assert_same("dd bs=1 head", &got, &big[..head]);
    let tail = BIG_LEN - (64 << 10);
    let got = dd(&path, &["bs=1", &format!("skip={tail}")]).unwrap();
    assert_same("dd bs=1 tail", &got, &big[tail..]);
    for bs in ["4096", "1M"] {
        let got = dd(&path, &[&format!("bs={bs}"), "iflag=direct"]).unwrap();
        assert_same(&format!("dd iflag=direct bs={bs}"), &got, big);
    }
    // skip= lands in the middle of the tensor: the source bytes from there on.
    let got = dd(&path, &["bs=4096", "skip=3", "count=5"]).unwrap();
    assert_same("dd skip=3 count=5", &got, &big[3 * 4096..8 * 4096]);
    // Every tensor in one go, the small ones byte by byte too.
    for (name, _, want) in &fx.tensors {
        let path = m.path(name);
        if want.len() < BIG_LEN {
            assert_same(
                &format!("dd bs=1 {name}"),
                &dd(&path, &["bs=1"]).unwrap(),
                want,
            );
        }
        assert_same(
            &format!("dd bs=1M {name}"),
            &dd(&path, &["bs=1M"]).unwrap(),
            want,
        );
        assert_eq!(
            fs::metadata(m.path(name)).unwrap().len(),
            want.len() as u64,
            "size of {name}"
        );
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn pread_at_random_places_and_past_the_end() {
    require_fuse();
    let fx = fixture();
    let m = mount(&fx.src);
    for (name, _, want) in &fx.tensors {
        let f = fs::File::open(m.path(name)).unwrap();
        let len = want.len() as u64;
        let mut buf = vec![0u8; 64];
        assert_eq!(f.read_at(&mut buf, len).unwrap(), 0, "{name}: read at len");
        assert_eq!(
            f.read_at(&mut buf, len + 100).unwrap(),
            0,
            "{name}: read past len"
        );
        assert_eq!(
            f.read_at(&mut buf, u64::MAX / 4).unwrap(),
            0,
            "{name}: read far past len"
        );
        // A read across the end is short and exact.
        if len >= 2 {
            let n = f.read_at(&mut buf, len - 2).unwrap();
            assert_eq!(&buf[..n], &want[want.len() - 2..], "{name}: tail");
        }
    }
    let big = &fx.tensors[2].2;
    let f = fs::File::open(m.path("big")).unwrap();
    let r = bytes(8 * 400, 77);
    for i in 0..400 {
        let w = u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().unwrap());
        let off = (w % BIG_LEN as u64) as usize;
        let len = ((w >> 32) % 300_000) as usize + 1;
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = f.read_at(&mut buf[got..], (off + got) as u64).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        let end = (off + len).min(BIG_LEN);
        assert_same(
            &format!("pread off={off} len={len}"),
            &buf[..got],
            &big[off..end],
        );
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mmap_of_a_tensor_file_shows_the_source_bytes() {
    require_fuse();
    let fx = fixture();
    let m = mount(&fx.src);
    for (name, _, want) in &fx.tensors {
        let f = fs::File::open(m.path(name)).unwrap();
        for page_off in [0usize, 4096 * 3] {
            if page_off >= want.len() {
                continue;
            }
            let len = want.len() - page_off;
            let map =
                Map::new(&f, page_off as u64, len).unwrap_or_else(|e| panic!("mmap {name}: {e}"));
            let got = map.bytes();
            assert_same(
                &format!("mmap {name} at {page_off}"),
                &got,
                &want[page_off..],
            );
        }
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn concurrent_readers_get_the_source_bytes() {
    require_fuse();
    let fx = fixture();
    let m = mount(&fx.src);
    let tensors = Arc::new(fx.tensors.clone());
    let dir = Arc::new(m.dir.clone());
    let deadline = Instant::now() + Duration::from_secs(1);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let tensors = tensors.clone();
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                let mut seed = i as u64 * 1000;
                let small = &tensors[i % tensors.len()];
                let big = &tensors[2];
                let big_file = fs::File::open(dir.join("big")).unwrap();
                while Instant::now() < deadline {
                    // A whole tensor, opened afresh.
                    let got = fs::read(dir.join(&small.0)).unwrap();
                    assert!(got == small.2, "thread {i}: {} differs", small.0);
                    // A slice of the big tensor at a thread-specific place.
                    seed += 1;
                    let r = bytes(8, seed);
                    let w = u64::from_le_bytes(r.try_into().unwrap());
                    let off = (w % BIG_LEN as u64) as usize;
                    let len = ((w >> 40) % 200_000) as usize + 1;
                    let mut buf = vec![0u8; len];
                    let n = big_file.read_at(&mut buf, off as u64).unwrap();
                    assert!(n > 0, "thread {i}: empty read at {off}");
                    assert!(
                        buf[..n] == big.2[off..off + n],
                        "thread {i}: big differs at {off}+{n}"
                    );
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for h in handles {
        let rounds = h.join().expect("reader thread failed");
        assert!(rounds > 0);
    }
}

// ----------------------------------------------------------------------- numpy and the oracle

fn fixtures(py: &Path) -> TempDir {
    let tmp = TempDir::new("fixtures");
    let dir = tmp.join("fx");
    fs::create_dir(&dir).unwrap();
    oracle(py, &["write-fixtures", dir.to_str().unwrap()]);
    tmp
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn numpy_reads_single_file_mounts_like_the_official_reader() {
    require_fuse();
    let py = python();
    let tmp = fixtures(&py);
    for f in ["single.safetensors", "big.safetensors"] {
        let src = tmp.join("fx").join(f);
        let m = mount(&src);
        let out = oracle(&py, &["compare", s(&src), s(&m.dir)]);
        assert!(out.starts_with("ok "), "{f}: {out}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn numpy_reads_directory_mounts_and_merged_sets_like_the_official_reader() {
    require_fuse();
    let py = python();
    let tmp = fixtures(&py);
    let fx = tmp.join("fx");
    let m = mount(&fx);
    let shard1 = fx.join("sharded/model-00001-of-00002.safetensors");
    for (src, dir, extra) in [
        (
            fx.join("single.safetensors"),
            m.path("single.tensors"),
            false,
        ),
        (fx.join("big.safetensors"), m.path("big.tensors"), false),
        (fx.join("sharded"), m.path("sharded/model.tensors"), false),
        (
            shard1.clone(),
            m.path("sharded/model-00001-of-00002.tensors"),
            false,
        ),
        (
            fx.join("sharded/model-00002-of-00002.safetensors"),
            m.path("sharded/model-00002-of-00002.tensors"),
            false,
        ),
        // One shard against the merged dir: the other shard's tensors are extra there.
        (shard1, m.path("sharded/model.tensors"), true),
    ] {
        let mut args = vec!["compare", s(&src), s(&dir)];
        if extra {
            args.push("--allow-extra");
        }
        let out = oracle(&py, &args);
        assert!(out.starts_with("ok "), "{args:?}: {out}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn numpy_reads_the_example_models_merged_dir() {
    require_fuse();
    let py = python();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model");
    let m = mount(&example);
    let out = oracle(&py, &["compare", s(&example), s(&m.path("model.tensors"))]);
    assert!(out.starts_with("ok "), "{out}");
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        let dir = m.path(shard.replace(".safetensors", ".tensors"));
        let out = oracle(&py, &["compare", s(&example.join(shard)), s(&dir)]);
        assert!(out.starts_with("ok "), "{shard}: {out}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mirrored_safetensors_files_are_identical_and_load_with_the_official_reader() {
    require_fuse();
    let py = python();
    let tmp = fixtures(&py);
    let fx = tmp.join("fx");
    let m = mount(&fx);
    for rel in [
        "single.safetensors",
        "big.safetensors",
        "sharded/model-00001-of-00002.safetensors",
        "sharded/model-00002-of-00002.safetensors",
        "sharded/model.safetensors.index.json",
    ] {
        assert_same(
            &format!("mirror of {rel}"),
            &fs::read(m.path(rel)).unwrap(),
            &fs::read(fx.join(rel)).unwrap(),
        );
    }
    for rel in ["single.safetensors", "big.safetensors", "sharded"] {
        let from_mount = oracle(&py, &["load-all", s(&m.path(rel))]);
        let from_source = oracle(&py, &["load-all", s(&fx.join(rel))]);
        assert_eq!(from_mount, from_source, "load-all {rel}");
        assert!(from_source.len() > 10, "{rel}: {from_source}");
    }
    // The mirrored big file also reads right at odd block sizes and with O_DIRECT.
    let path = m.path("big.safetensors");
    let want = fs::read(fx.join("big.safetensors")).unwrap();
    assert_same("dd bs=7 mirror", &dd(&path, &["bs=7"]).unwrap(), &want);
    assert_same(
        "dd iflag=direct mirror",
        &dd(&path, &["bs=1M", "iflag=direct"]).unwrap(),
        &want,
    );
}
