//! Helpers of the unit tests: temporary directories, removed on drop, safetensors files, and the
//! command line's `sha256sum` as an oracle.

use std::io::IoSliceMut;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory, named after `tag`, this process and a counter.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tm-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A safetensors file of U8 tensors (name, length, the byte every element is), in that order, its
/// header padded to 8 bytes as the official writer pads it.
pub fn st(tensors: &[(&str, usize, u8)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for &(name, len, byte) in tensors {
        let begin = data.len();
        data.extend(std::iter::repeat_n(byte, len));
        header.insert(
            name.into(),
            serde_json::json!({"dtype": "U8", "shape": [len], "data_offsets": [begin, data.len()]}),
        );
    }
    let mut json = serde_json::to_string(&header).unwrap();
    while !(8 + json.len()).is_multiple_of(8) {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// The SHA-256 of `bytes` as the command line's `sha256sum` gives it (64 lowercase hex digits).
pub fn sha256sum(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// What a computed tensor's reader asks of `bytes` (see `format::description::ReadAt`): `bufs`
/// filled one after the other from `at`, at most `MAX_SLICES` of them.
pub fn read_at(bytes: &[u8], bufs: &mut [IoSliceMut<'_>], at: u64) -> std::io::Result<()> {
    assert!(bufs.len() <= super::sys::IOV_MAX, "too many buffers");
    let mut at = at as usize;
    for buf in bufs {
        let n = buf.len();
        buf.copy_from_slice(&bytes[at..at + n]);
        at += n;
    }
    Ok(())
}
