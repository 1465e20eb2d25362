//! An S3 bucket mounted by `s3fs`, served by a local `s3rver`: every tensor, s3fs's temporary
//! files, and a stalled server.

use super::{
    Backend, Model, ShowOnPanic, check_stall, check_tree, held_in, listing, pids_of, require,
    serial, small_model, unmount_under_idle_mount, wait_released, write_model,
};
use crate::common::*;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where tests/run installs s3rver (keep in step with it).
const S3RVER_INSTALLED: &str = "/opt/tensormount/s3rver-3.7.1/node_modules/.bin/s3rver";

/// The bucket of the S3 tests, and s3rver's built-in credentials.
const BUCKET: &str = "models";

const S3_CREDENTIALS: &str = "S3RVER:S3RVER";

/// The s3rver command: $TENSORMOUNT_S3RVER, else where tests/run installs it, else `s3rver` on PATH.
fn s3rver_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENSORMOUNT_S3RVER") {
        return Some(PathBuf::from(p));
    }
    if Path::new(S3RVER_INSTALLED).is_file() {
        return Some(S3RVER_INSTALLED.into());
    }
    on_path("s3rver").then(|| "s3rver".into())
}

/// As [`require`], for the S3 tests: also `s3fs`, `node` and s3rver, whose command it returns.
fn require_s3() -> PathBuf {
    require(&["s3fs", "node", "getfattr"]);
    s3rver_bin().expect(
        "s3rver not found: `tests/run` (as root) installs it, or npm install s3rver@3.7.1 and set \
         TENSORMOUNT_S3RVER to its node_modules/.bin/s3rver",
    )
}

/// A local S3 server (s3rver, serving a directory) on 127.0.0.1 and a port of the kernel's
/// choosing, with one bucket; killed on drop.
struct S3Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl S3Server {
    fn start(bin: &Path, tmp: &TempDir) -> S3Server {
        let data = tmp.join("s3data");
        fs::create_dir_all(&data).unwrap();
        let log = tmp.join("s3rver.log");
        let out = File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg("-d")
            .arg(&data)
            .args(["-a", "127.0.0.1", "-p", "0", "--configure-bucket", BUCKET])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let mut server = S3Server {
            child,
            port: 0,
            log,
        };
        wait_for("s3rver to listen", || {
            if let Some(st) = server.child.try_wait().unwrap() {
                panic!("s3rver exited ({st}):\n{}", server.log());
            }
            let text = server.log();
            let port = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("S3rver listening on 127.0.0.1:"))
                .and_then(|p| p.trim().parse().ok());
            server.port = port.unwrap_or(0);
            port.is_some()
        });
        server
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bucket of `server` mounted by s3fs at `dir`, with its temporary files in `tmpdir`; `opts` are
/// more s3fs options (comma-separated, or empty).
fn s3fs(server: &S3Server, tmp: &TempDir, dir: &Path, tmpdir: &Path, opts: &str) -> Backend {
    use std::os::unix::fs::PermissionsExt;
    let passwd = tmp.join("s3fs.passwd");
    fs::write(&passwd, format!("{S3_CREDENTIALS}\n")).unwrap();
    // s3fs refuses a password file others can read.
    fs::set_permissions(&passwd, fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir_all(tmpdir).unwrap();
    let mut o = format!(
        "url=http://127.0.0.1:{},use_path_request_style,passwd_file={},tmpdir={}",
        server.port,
        s(&passwd),
        s(tmpdir)
    );
    if !opts.is_empty() {
        o = format!("{o},{opts}");
    }
    Backend::mount(
        Command::new("s3fs").arg(BUCKET).arg(dir).arg("-o").arg(o),
        dir,
    )
}

/// Uploads every file of `model` to the bucket, through its s3fs mount `dir`.
fn upload(model: &Model, dir: &Path) {
    for f in &model.files {
        fs::copy(model.dir.join(f), dir.join(f))
            .unwrap_or_else(|e| panic!("upload of {f} through s3fs: {e}"));
    }
    assert_eq!(
        listing(dir),
        model.files.iter().cloned().collect::<BTreeSet<_>>(),
        "the bucket after the upload"
    );
}

/// The one s3fs process mounted at `dir`.
fn s3fs_pid(dir: &Path) -> i32 {
    let pids = pids_of("s3fs", dir);
    assert_eq!(
        pids.len(),
        1,
        "s3fs processes of {}: {pids:?}",
        dir.display()
    );
    pids[0]
}

/// The deleted temporary files in `tmpdir` that `pid` (s3fs) still holds: s3fs keeps the bytes
/// of every file open through it in one, until the file is released.
fn temporary_files_held(pid: i32, tmpdir: &Path) -> Vec<String> {
    let prefix = format!("{}/", tmpdir.display());
    let mut held = deleted_files_held(pid);
    held.retain(|p| p.starts_with(&prefix));
    held
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn s3_backend_serves_every_tensor() {
    let _serial = serial();
    let s3rver = require_s3();
    let start = Instant::now();
    let tmp = TempDir::new("s3");
    let model = small_model(&tmp.join("model"));
    let server = S3Server::start(&s3rver, &tmp);
    let started = start.elapsed();
    let backend = s3fs(
        &server,
        &tmp,
        &tmp.join("backend"),
        &tmp.join("s3fs.tmp"),
        "",
    );
    upload(&model, &backend.dir);
    let uploaded = start.elapsed();

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let _show = ShowOnPanic(log.clone());
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let n = check_tree(&mnt, &backend.dir, &model);
    assert_eq!(n, 12 + 12 + 5);

    // The official reader, through the mount.
    {
        let py = python();
        let out = oracle(
            &py,
            &["compare", s(&model.dir), s(&mnt.join("model.tensors"))],
        );
        assert!(out.starts_with("ok 12 "), "{out}");
        let from_mount = oracle(&py, &["load-all", s(&mnt)]);
        let from_source = oracle(&py, &["load-all", s(&model.dir)]);
        assert_eq!(from_mount, from_source);
        eprintln!("the official reader agrees through the mount");
    }
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!(
        "s3 backend: server up in {started:?}, model uploaded by {uploaded:?}, {n} files checked; \
         total {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn s3fs_temporary_files_are_released_when_sources_go_idle() {
    let _serial = serial();
    let s3rver = require_s3();
    let start = Instant::now();
    let tmp = TempDir::new("s3idle");
    let model = small_model(&tmp.join("model"));
    let server = S3Server::start(&s3rver, &tmp);
    let tmpdir = tmp.join("s3fs.tmp");
    let backend = s3fs(&server, &tmp, &tmp.join("backend"), &tmpdir, "");
    upload(&model, &backend.dir);
    let pid = s3fs_pid(&backend.dir);
    let before = temporary_files_held(pid, &tmpdir);
    assert!(
        before.is_empty(),
        "s3fs holds temporary files once the upload is done: {before:#?}"
    );

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let _show = ShowOnPanic(log.clone());
    let opts = ["-o", "source_idle=2"];
    let (mut daemon, _) = Daemon::spawn(&backend.dir, &mnt, &opts, &log, Duration::from_secs(30));
    check_tree(&mnt, &backend.dir, &model);
    let during = temporary_files_held(pid, &tmpdir);
    eprintln!(
        "right after the reads: s3fs holds {during:#?}, the daemon holds {:#?}",
        held_in(daemon.pid(), &backend.dir)
    );
    // The sources read last are still open (for 2 s), so s3fs holds their bytes: otherwise this
    // test would prove nothing.
    assert!(
        !during.is_empty(),
        "s3fs held no temporary file right after the reads: it no longer keeps the bytes of open \
         files in them, and this test proves nothing"
    );

    // Once the sources are idle, the daemon lets go of them, and so s3fs of their bytes.
    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    let released = Instant::now();
    loop {
        let held = temporary_files_held(pid, &tmpdir);
        if held.is_empty() {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "the daemon let go of its sources {took:?} after the last read (source_idle=2), but \
             5 s later s3fs still holds these temporary files: {held:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "sources released {took:?} after the last read (source_idle=2), s3fs's temporary files \
         {:?} later",
        released.elapsed()
    );

    unmount_under_idle_mount(&backend.dir, &mnt);
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!("s3fs temporary files: checked in {:?}", start.elapsed());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_stalled_s3_server_does_not_freeze_the_mount() {
    let _serial = serial();
    let s3rver = require_s3();
    const READERS: usize = 16;
    let start = Instant::now();
    let tmp = TempDir::new("s3stall");
    // s3fs reads ahead (multipart_size x parallel_count, 50 MB by default, here 5 MB) from every
    // read it makes, and keeps those bytes while the file is open: the mount's read of the header
    // brings in the first 5 MB, so the first tensor (6 MiB) keeps them from the readers' tensors
    // (1 MiB each). The last one, read before the stall, is at the end of the file.
    let model = write_model(&tmp.join("model"), 1, READERS + 2, |i| {
        if i == 0 { 6 << 20 } else { 1 << 20 }
    });
    let server = S3Server::start(&s3rver, &tmp);
    let backend = s3fs(
        &server,
        &tmp,
        &tmp.join("backend"),
        &tmp.join("s3fs.tmp"),
        "multipart_size=5,parallel_count=1",
    );
    upload(&model, &backend.dir);
    let uploaded = start.elapsed();
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    check_stall(
        &model,
        &mnt,
        &daemon,
        server.pid(),
        1..READERS + 1,
        READERS + 1,
    );
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!(
        "stalled S3 server: model uploaded by {uploaded:?}, checked in {:?}",
        start.elapsed()
    );
}
