//! Direct I/O (the default) against `-o kernel_cache`: where a tensor file's bytes are cached
//! (`cachestat(2)` of the mount's inode, an outside measurement), and mapping clients (Python's
//! mmap, numpy.memmap, torch.from_file) on tensor files, NPY views and a checkpoint's virtual
//! safetensors file reading the source's bytes under both.

use crate::common::*;

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const W_LEN: usize = 8 << 20;
const PAGE: u64 = 4096;

/// A source with an 8 MiB F32 tensor `w` at an odd offset (after a 3-byte `a`); the bytes of `w`.
fn fixture(tmp: &TempDir) -> (PathBuf, Vec<u8>) {
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    let w = bytes(W_LEN, 11);
    write_safetensors(
        &src.join("model.safetensors"),
        &[
            T {
                name: "a",
                dtype: "U8",
                shape: &[3],
                data: bytes(3, 1),
            },
            T {
                name: "w",
                dtype: "F32",
                shape: &[1024, 2048],
                data: w.clone(),
            },
        ],
        None,
    );
    (src, w)
}

/// How many pages of `path` are in the page cache: `cachestat(2)` (Linux 6.5+) on a descriptor,
/// which neither reads nor maps the file (mapping a file opened with direct I/O would drop them).
fn cached_pages(path: &Path) -> u64 {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let f = File::open(path).unwrap();
    let range = Range { off: 0, len: 0 };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both live and of the kernel's layout.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            f.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0,
        )
    };
    assert_eq!(r, 0, "cachestat: {}", std::io::Error::last_os_error());
    stat.nr_cache
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_tensor_file_read_twice_is_cached_by_the_mount_only_under_kernel_cache() {
    require_fuse();
    let tmp = TempDir::new("cache");
    let (src, w) = fixture(&tmp);
    let pages = (W_LEN as u64).div_ceil(PAGE);
    for (opts, want) in [("", 0), ("direct_io", 0), ("kernel_cache", pages)] {
        let m = mount_ok(&src, opts);
        let path = m.path("model.tensors/w");
        for pass in 0..2 {
            assert!(fs::read(&path).unwrap() == w, "-o {opts:?}: pass {pass}");
        }
        // Only the mount's copy is counted: the source's page cache is another inode's.
        assert_eq!(cached_pages(&path), want, "-o {opts:?}: pages cached");
        // A mapping works under both (FUSE_DIRECT_IO_ALLOW_MMAP: no ENODEV), with the same bytes.
        let map = Map::whole(&File::open(&path).unwrap());
        assert!(map.bytes() == w, "-o {opts:?}: mapped bytes");
        drop(map);
        m.unmount().unwrap();
    }
}

/// numpy.memmap and torch.from_file (a private mapping) of a tensor file, numpy.load
/// with `mmap_mode` of its NPY view, each against the source's bytes read by the official
/// safetensors.
const MAPPERS: &str = r#"
import sys, numpy as np, torch
from safetensors.numpy import load_file
src, tensor, npy = sys.argv[1:4]
want = load_file(src)["w"]
raw = want.tobytes()
got = np.memmap(tensor, mode="r", dtype=np.float32, shape=want.shape)
assert got.tobytes() == raw, "numpy.memmap"
# shared=True opens the file for writing, which a read-only mount refuses: a private mapping.
t = torch.from_file(tensor, shared=False, size=len(raw), dtype=torch.uint8)
assert t.numpy().tobytes() == raw, "torch.from_file"
v = np.load(npy, mmap_mode="r")
assert v.dtype == want.dtype and v.shape == want.shape and v.tobytes() == raw, "numpy.load mmap"
print("ok")
"#;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mapping_clients_read_the_source_bytes_under_direct_io_and_kernel_cache() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("cache-map");
    let (src, _) = fixture(&tmp);
    for opts in ["npy", "npy,kernel_cache"] {
        let m = mount_ok(&src, opts);
        let args = [
            s(&src.join("model.safetensors")).to_string(),
            s(&m.path("model.tensors/w")).to_string(),
            s(&m.path("model.tensors/w.npy")).to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(python_code(&py, MAPPERS, &args).trim(), "ok", "-o {opts}");
        m.unmount().unwrap();
    }
}

/// `safe_open` (which maps the file) of the virtual `model.safetensors` of a `torch.save`
/// checkpoint, against `torch.load(weights_only=True)` of the checkpoint.
const VIRTUAL: &str = r#"
import sys, torch
from safetensors import safe_open
ckpt, virtual = sys.argv[1:3]
want = torch.load(ckpt, weights_only=True)
with safe_open(virtual, framework="pt") as f:
    assert sorted(f.keys()) == sorted(want), (sorted(f.keys()), sorted(want))
    for k in f.keys():
        assert torch.equal(f.get_tensor(k), want[k]), k
print("ok")
"#;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn safe_open_maps_a_checkpoints_virtual_safetensors_file_under_direct_io_and_kernel_cache() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("cache-ckpt");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    let ckpt = src.join("pytorch_model.bin");
    python_code(
        &py,
        "import sys, torch; torch.manual_seed(3); torch.save({'w': torch.randn(512, 1024), \
         'b': torch.arange(7, dtype=torch.int64), 'h': torch.randn(64, 64).half()}, sys.argv[1])",
        &[s(&ckpt)],
    );
    for opts in ["", "kernel_cache"] {
        let m = mount_ok(&src, opts);
        let virtual_file = m.path("model.safetensors");
        let out = python_code(&py, VIRTUAL, &[s(&ckpt), s(&virtual_file)]);
        assert_eq!(out.trim(), "ok", "-o {opts:?}");
        m.unmount().unwrap();
    }
}
