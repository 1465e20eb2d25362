//! `allow_other`: other users read only what they could read in the source.

use super::mountpoint;
use crate::common::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs a command as uid/gid 65534 with no supplementary groups.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Asserts that `args` run as nobody fails with "Permission denied".
fn nobody_denied(args: &[&str]) {
    let out = as_nobody(args);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "as uid 65534, {args:?} should fail with Permission denied: {}, stdout {} bytes, \
         stderr: {err}",
        out.status,
        out.stdout.len()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn allow_other_lets_other_users_read_only_what_they_could_read() {
    require_fuse();
    let tmp = TempDir::new("allowother");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // uid 65534 must be able to reach the mount point.
    let out = as_nobody(&["stat", tmp.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "precondition: uid 65534 cannot reach {}: {}",
        tmp.path().display(),
        stderr(&out)
    );
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    fs::set_permissions(&model, fs::Permissions::from_mode(0o755)).unwrap();
    let public = model.join("pub.safetensors");
    let private = model.join("priv.safetensors");
    for (path, seed, mode) in [(&public, 1, 0o644), (&private, 2, 0o600)] {
        write_safetensors(
            path,
            &[T {
                name: "w",
                dtype: "U8",
                shape: &[1000],
                data: bytes(1000, seed),
            }],
            None,
        );
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }
    // A sharded set whose index and first shard anyone may read, but whose second shard is
    // private: the merged directory would list that shard's tensors.
    let shards = [
        ("sharded-1.safetensors", "a", 3, 0o644),
        ("sharded-2.safetensors", "b", 4, 0o600),
    ];
    for (file, name, seed, mode) in shards {
        let path = model.join(file);
        write_safetensors(
            &path,
            &[T {
                name,
                dtype: "U8",
                shape: &[100],
                data: bytes(100, seed),
            }],
            None,
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
    let index = model.join("sharded.safetensors.index.json");
    fs::write(
        &index,
        r#"{"metadata":{"total_size":200},"weight_map":{"a":"sharded-1.safetensors","b":"sharded-2.safetensors"}}"#,
    )
    .unwrap();
    fs::set_permissions(&index, fs::Permissions::from_mode(0o644)).unwrap();
    let mnt = mountpoint(&tmp, "mnt");
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let log = tmp.join("daemon.log");
    let p = |rel: &str| mnt.join(rel).to_str().unwrap().to_string();

    let (mut daemon, _) = Daemon::spawn(
        &model,
        &mnt,
        &["-o", "allow_other"],
        &log,
        Duration::from_secs(30),
    );
    let out = as_nobody(&["cat", &p("pub.tensors/w")]);
    assert!(
        out.status.success() && out.stdout == bytes(1000, 1),
        "uid 65534 reading pub.tensors/w: {}, {} bytes, stderr: {}",
        out.status,
        out.stdout.len(),
        stderr(&out)
    );
    let out = as_nobody(&["cat", &p("pub.safetensors")]);
    assert!(
        out.status.success() && out.stdout == fs::read(&public).unwrap(),
        "uid 65534 reading pub.safetensors: {}, stderr: {}",
        out.status,
        stderr(&out)
    );
    let out = as_nobody(&["ls", &p("")]);
    assert!(
        out.status.success(),
        "uid 65534 listing the mount: {}",
        stderr(&out)
    );
    nobody_denied(&["cat", &p("priv.tensors/w")]);
    nobody_denied(&["ls", &p("priv.tensors")]);
    nobody_denied(&["cat", &p("priv.safetensors")]);
    // The merged directory is as private as its most private shard; each shard's own directory
    // follows that shard.
    let merged = mnt.join("sharded.tensors");
    assert_eq!(
        fs::metadata(&merged).unwrap().permissions().mode() & 0o777,
        0o500,
        "sharded.tensors/ with a 0600 shard"
    );
    nobody_denied(&["ls", &p("sharded.tensors")]);
    nobody_denied(&["cat", &p("sharded.tensors/a")]);
    nobody_denied(&["cat", &p("sharded.tensors/b")]);
    let out = as_nobody(&["cat", &p("sharded-1.tensors/a")]);
    assert!(
        out.status.success() && out.stdout == bytes(100, 3),
        "uid 65534 reading the public shard's own sharded-1.tensors/a: {}",
        stderr(&out)
    );
    nobody_denied(&["ls", &p("sharded-2.tensors")]);
    // Root still reads everything.
    assert_eq!(
        fs::read(mnt.join("priv.tensors/w")).unwrap(),
        bytes(1000, 2)
    );
    assert_eq!(fs::read(merged.join("b")).unwrap(), bytes(100, 4));
    let err = daemon.stop();
    assert!(err.is_empty(), "stderr: {err}");

    // Without allow_other, other users cannot even look.
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &[], &log, Duration::from_secs(30));
    nobody_denied(&["stat", &p("pub.safetensors")]);
    nobody_denied(&["ls", &p("")]);
    nobody_denied(&["cat", &p("pub.tensors/w")]);
    assert_eq!(fs::read(mnt.join("pub.tensors/w")).unwrap(), bytes(1000, 1));
    daemon.stop();
}
