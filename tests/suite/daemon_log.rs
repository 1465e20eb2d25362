//! What the daemon writes to its log: nothing for the calls ordinary clients make on the files
//! they open (`isatty`, `fsync`, locks, `fallocate` probes, `lseek` to data and holes, `poll`),
//! and one line naming the file, the operation, the errno and the cause for each failed request,
//! rate-limited.

use crate::common::*;

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const W_LEN: usize = 4 << 20;

/// A source directory with `model.safetensors` holding `w` (4 MiB of F32).
fn source(tmp: &TempDir) -> PathBuf {
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    write_safetensors(
        &src.join("model.safetensors"),
        &[T {
            name: "w",
            dtype: "F32",
            shape: &[1024, 1024],
            data: bytes(W_LEN, 5),
        }],
        None,
    );
    src
}

/// The calls, each checked for what it must answer.
const CLIENT: &str = r#"
import errno, fcntl, os, select, struct, sys, termios
import numpy as np
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    assert not f.isatty()
    try:
        termios.tcgetattr(f.fileno())
        raise SystemExit("tcgetattr succeeded")
    except termios.error as e:
        assert e.args[0] == errno.ENOTTY, e
    os.fsync(f.fileno())
    lock = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
    fcntl.fcntl(f.fileno(), fcntl.F_GETLK, lock)
    fcntl.lockf(f.fileno(), fcntl.LOCK_SH)
    fcntl.flock(f.fileno(), fcntl.LOCK_SH)
    try:
        os.posix_fallocate(f.fileno(), 0, 1)
    except OSError:
        pass
    assert os.lseek(f.fileno(), 5, os.SEEK_DATA) == 5
    assert os.lseek(f.fileno(), 5, os.SEEK_HOLE) == size
    try:
        os.lseek(f.fileno(), size, os.SEEK_DATA)
        raise SystemExit("SEEK_DATA at the end succeeded")
    except OSError as e:
        assert e.errno == errno.ENXIO, e
    assert select.select([f], [], [], 0)[0] == [f]
    f.read(10)
assert np.fromfile(path, dtype=np.uint8).size == size
assert not os.path.exists(path + ".missing")
try:
    os.getxattr(path, "user.nothing")
except OSError as e:
    assert e.errno == errno.ENODATA, e
print("ok")
"#;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn ordinary_client_calls_and_expected_failures_log_nothing() {
    require_fuse();
    require_tools(&["head"]);
    let py = python();
    let tmp = TempDir::new("quiet");
    let src = source(&tmp);
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (mut daemon, _) = Daemon::spawn(&src, &mnt, &[], &log, Duration::from_secs(30));
    for file in ["model.tensors/w", "model.safetensors"] {
        let path = mnt.join(file);
        let size = fs::metadata(&path).unwrap().len().to_string();
        let out = python_code(&py, CLIENT, &[s(&path), &size]);
        assert_eq!(out.trim(), "ok", "{file}");
        let head = Command::new("head")
            .args(["-c", "16"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            head.status.success() && head.stdout.len() == 16,
            "head of {file}"
        );
    }
    daemon.stop();
    assert_eq!(daemon.stderr(), "", "the daemon's log");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_failed_read_is_logged_once_with_file_operation_and_cause_and_a_retry_loop_cannot_flood() {
    require_fuse();
    let tmp = TempDir::new("failed");
    let src = source(&tmp);
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    // Frozen, so that the tensor stays in the tree and its reads fail with EIO.
    let opts = ["-o", "refresh=off"];
    let (mut daemon, _) = Daemon::spawn(&src, &mnt, &opts, &log, Duration::from_secs(30));
    let tensor = File::open(mnt.join("model.tensors/w")).unwrap();
    let source = src.join("model.safetensors");
    let len = fs::metadata(&source).unwrap().len();
    File::options()
        .write(true)
        .open(&source)
        .unwrap()
        .set_len(len - W_LEN as u64 / 2)
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let at = W_LEN as u64 - (1 << 20);
    let e = tensor.read_at(&mut buf, at).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");

    let failed = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("failed with EIO"))
            .map(String::from)
            .collect()
    };
    let lines = failed(&daemon.stderr());
    assert_eq!(lines.len(), 1, "one line for one failed read: {lines:#?}");
    // The kernel may split the read where the reader's buffer crosses a page: its size varies.
    let (op, cause) = lines[0].split_once(" failed with EIO: ").unwrap();
    assert!(
        op.starts_with("tensormount: model.tensors/w: read of ") && op.contains(" bytes at "),
        "{}",
        lines[0]
    );
    let want = format!("{}: changed in place", source.display());
    assert!(cause.starts_with(&want), "{}\nwant: {want}", lines[0]);

    // A client retrying in a loop: every read fails, a few are logged.
    for _ in 0..200 {
        assert!(tensor.read_at(&mut buf, at).is_err());
    }
    let logged = failed(&daemon.stderr()).len();
    assert!(
        (2..=10).contains(&logged),
        "{logged} lines for 201 failed reads:\n{}",
        daemon.stderr()
    );
    // After the window, the next line says how many were left out.
    std::thread::sleep(Duration::from_secs(10));
    assert!(tensor.read_at(&mut buf, at).is_err());
    let text = daemon.stderr();
    let left_out = 201 - logged;
    assert!(
        text.contains(&format!(
            "tensormount: {left_out} more failed requests were not logged"
        )),
        "{text}"
    );
    drop(tensor);
    daemon.stop();
}
