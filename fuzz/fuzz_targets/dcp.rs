//! A DCP checkpoint's `.metadata`, on arbitrary bytes, beside the two real `.distcp` files of the
//! reader's test checkpoint: `format::DCP`'s reader, its metadata walk, its chunk archives and its
//! gathered tensors.
//!
//! Besides no panic: a checkpoint read names only plain file names as its data files; each of its
//! tensors is as long as its dtype and shape say; one in a data file lies inside it, and a gathered
//! one reads whole, every read of a data file inside that file.
#![no_main]

use std::fs;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::format::{self, MAX_SLICES};

/// A directory with the test checkpoint's data files (its `.metadata` is the input).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/format/dcp/testdata/tp");
        let dir = std::env::temp_dir().join(format!("tm-fuzz-dcp-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for f in ["__0_0.distcp", "__1_0.distcp"] {
            fs::copy(testdata.join(f), dir.join(f)).unwrap();
        }
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let path = dir().join(".metadata");
    fs::write(&path, data).unwrap();
    let file = fs::File::open(&path).unwrap();
    let Ok(d) = format::DCP.describe(&file, &path) else {
        return;
    };
    for name in &d.files {
        assert!(!name.contains('/') && &**name != ".." && !name.is_empty(), "{name}");
    }
    let files: Vec<fs::File> = d
        .files
        .iter()
        .map(|n| fs::File::open(dir().join(&**n)).unwrap())
        .collect();
    for t in &d.tensors {
        let numel: u64 = t.shape.iter().map(|&n| n as u64).product();
        assert_eq!(t.size(), numel * t.element_size(), "{}", t.name);
        if let Some(k) = t.file {
            let len = files[k as usize].metadata().unwrap().len();
            assert!(t.end <= len || t.strides.is_some(), "{}", t.name);
        }
        if let Some(c) = &t.computed {
            let mut out = vec![0; t.size().min(1 << 20) as usize];
            let mut read = |file: Option<u32>, bufs: &mut [IoSliceMut<'_>], at: u64| {
                let f = &files[file.expect("a gathered tensor reads data files") as usize];
                let len = f.metadata().unwrap().len();
                let want: u64 = bufs.iter().map(|b| b.len() as u64).sum();
                assert!(at + want <= len, "{}: a read past its file", t.name);
                assert!(bufs.len() <= MAX_SLICES, "{}: too many buffers", t.name);
                let mut at = at;
                for buf in bufs {
                    f.read_exact_at(buf, at)?;
                    at += buf.len() as u64;
                }
                Ok(())
            };
            c.read(&mut read, 0, &mut out).unwrap();
        }
    }
});
