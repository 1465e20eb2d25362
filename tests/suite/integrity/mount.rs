//! The mount's recorded and per-tensor digests (xattrs), and `-o verify`.

use super::{Fx, flip, hex, integrity, is_hex64, sha256sum};
use crate::common::*;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Polls `cond` every 20 ms for up to `limit`.
fn poll(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `user.tensormount.verified` of `path`, once it is there (up to 30 s).
fn verified(path: &Path) -> String {
    let mut v = None;
    poll(
        &format!("user.tensormount.verified on {}", path.display()),
        Duration::from_secs(30),
        || {
            v = getxattr(path, "user.tensormount.verified");
            v.is_some()
        },
    );
    v.unwrap()
}

/// The error of reading all of `path` with read(2), asserting that there is one.
fn read_errno(path: &Path) -> Option<i32> {
    match fs::read(path) {
        Ok(b) => panic!("{}: read {} bytes, expected EIO", path.display(), b.len()),
        Err(e) => e.raw_os_error(),
    }
}

/// Bytes `begin..end` of `path`.
fn slice(path: &Path, (begin, end): (u64, u64)) -> Vec<u8> {
    fs::read(path).unwrap()[begin as usize..end as usize].to_vec()
}

/// `getfattr -R -n user.safetensors.sha256 --absolute-names ROOT`: each tensor file's value
/// (found under a `.tensors/` directory, `__metadata__` left out) by path relative to `root`.
fn tensor_digests_by_getfattr(root: &Path) -> BTreeMap<String, String> {
    let out = Command::new("getfattr")
        .args(["-R", "-n", "user.safetensors.sha256", "--absolute-names"])
        .arg(root)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    let mut map = BTreeMap::new();
    let mut file = None;
    for l in text.lines() {
        if let Some(p) = l.strip_prefix("# file: ") {
            file = Some(p.to_string());
        } else if let Some(v) = l.strip_prefix("user.safetensors.sha256=") {
            let p = file.clone().expect("a value before its file");
            let rel = Path::new(&p).strip_prefix(root).unwrap().to_str().unwrap();
            let in_tensor_dir = rel.split('/').any(|c| c.ends_with(".tensors"));
            if in_tensor_dir && !rel.ends_with("/__metadata__") {
                map.insert(rel.to_string(), v.trim_matches('"').to_string());
            }
        }
    }
    map
}

/// `user.tensormount.sha256` on every mirrored weight file whose digest the source records (by a
/// blob name, through the snapshot's links and through a mount of the whole cache; by download
/// metadata), and on nothing else; `user.safetensors.sha256` on every tensor file, hashlib's
/// digest of the bytes safetensors and torch read, the same in two mounts of the same model.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_shows_recorded_and_tensor_digests() {
    require_fuse();
    require_tools(&["getfattr"]);
    let fx = Fx::new("integrity-xattrs", &["hf", "local", "plain"]);
    let snap = fx.snapshot();
    let a = mount_ok(&snap, "");
    let b = mount_ok(&fx.path("local"), "");
    let c = mount_ok(&fx.path("plain"), "");
    let d = mount_ok(&fx.path("hf"), "");

    let weights = fx.weights("hf");
    let rel_snap = snap.strip_prefix(fx.path("hf")).unwrap();
    for (rel, w) in &weights {
        let sha = hex(&w["sha256"]);
        for m in [&a, &b] {
            assert_eq!(
                getxattr(&m.path(rel), "user.tensormount.sha256").as_deref(),
                Some(sha),
                "{}",
                m.path(rel).display()
            );
        }
        // Through the snapshot's link, in a mount of the whole cache.
        let linked = d.path(rel_snap).join(rel);
        assert_eq!(
            getxattr(&linked, "user.tensormount.sha256").as_deref(),
            Some(sha),
            "{}",
            linked.display()
        );
    }
    for rel in fx.weights("plain").keys() {
        let p = c.path(rel);
        assert_eq!(
            getxattr(&p, "user.tensormount.sha256"),
            None,
            "{}",
            p.display()
        );
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            !stdout(&out).contains("user.tensormount.sha256"),
            "{} lists {}",
            p.display(),
            stdout(&out)
        );
    }

    // Every tensor file against hashlib of an independent reader's bytes.
    let local = |rel: &str| s(&fx.path("local").join(rel)).to_string();
    let shard1 = local("model-00001-of-00002.safetensors");
    let shard2 = local("model-00002-of-00002.safetensors");
    let unet = local("unet/diffusion_pytorch_model.safetensors");
    let encoder = local("text_encoder/pytorch_model.bin");
    let spec = serde_json::json!({
        s(&a.path("model.tensors")): [shard1, shard2],
        s(&a.path("model-00001-of-00002.tensors")): [shard1],
        s(&a.path("model-00002-of-00002.tensors")): [shard2],
        s(&a.path("unet/diffusion_pytorch_model.tensors")): [unet],
        s(&a.path("text_encoder/pytorch_model.tensors")): [encoder],
    });
    let out = integrity(&python(), &["check-digests", &spec.to_string()]);
    assert!(out.starts_with("ok "), "{out}");

    // Not listed before it is asked for by name (`getfattr -d` reads no tensor), then listed.
    let fresh = c.path("a.tensors");
    let first = fs::read_dir(&fresh)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap() != "__metadata__")
        .unwrap();
    let listed = |p: &Path| {
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(p)
            .output()
            .unwrap();
        stdout(&out).contains("user.safetensors.sha256")
    };
    assert!(
        !listed(&first),
        "{} lists its digest before it is computed",
        first.display()
    );
    assert!(getxattr(&first, "user.safetensors.sha256").is_some());
    assert!(
        listed(&first),
        "{} does not list its digest once computed",
        first.display()
    );

    // getfattr -R over two mounts of the same model: the same values, for every tensor file.
    let on_a = tensor_digests_by_getfattr(&a.dir);
    let on_b = tensor_digests_by_getfattr(&b.dir);
    let count: usize = ["model-00001-of-00002", "model-00002-of-00002"]
        .iter()
        .map(|n| 2 * fx.tensors(&format!("local/{n}.safetensors")).len())
        .sum::<usize>()
        + fx.tensors("local/unet/diffusion_pytorch_model.safetensors")
            .len()
        + fx.tensors("local/text_encoder/pytorch_model.bin").len();
    assert_eq!(on_a.len(), count, "{on_a:#?}");
    assert_eq!(on_a, on_b);
    assert!(
        on_a.values().all(|v| is_hex64(&Value::from(v.as_str()))),
        "{on_a:#?}"
    );
}

/// `-o verify`: a shard with a flipped byte is marked `mismatch` (it and its tensor files, in its
/// own directory and in the merged one) and reads of them fail with EIO; the good shard is `ok`
/// and reads as its source; the daemon logs the mismatch.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_fails_reads_of_a_damaged_shard() {
    require_fuse();
    require_tools(&["getfattr", "dd"]);
    let fx = Fx::new("integrity-mount-verify", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    let bad = "model-00001-of-00002.safetensors";
    let good = "model-00002-of-00002.safetensors";
    let blob = fx.path(hex(&weights[bad]["blob"]));
    let (b, e) = fx.range(&format!("local/{bad}"), "model.embed.weight");
    flip(&blob, (b + e) / 2);
    let read = sha256sum(&blob);

    let mnt = fx.path("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = fx.path("daemon.log");
    let (mut daemon, _) = Daemon::spawn(
        &snap,
        &mnt,
        &["-o", "verify"],
        &log,
        Duration::from_secs(10),
    );

    assert_eq!(verified(&mnt.join(bad)), "mismatch");
    for rel in weights.keys().filter(|r| r.as_str() != bad) {
        assert_eq!(verified(&mnt.join(rel)), "ok", "{rel}");
    }

    // The damaged file and every tensor file of it fail with EIO, whichever tensor was damaged.
    let err = dd(&mnt.join(bad), &["bs=1M"]).unwrap_err();
    assert!(err.contains("Input/output error"), "dd: {err}");
    assert_eq!(read_errno(&mnt.join(bad)), Some(libc::EIO));
    let py = python();
    let out = Command::new(&py)
        .args([
            "-c",
            concat!(
                "import sys\ntry:\n open(sys.argv[1], 'rb').read()\n",
                "except OSError as e:\n print(e.errno)",
            ),
        ])
        .arg(mnt.join(bad))
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "5", "python read: {}", stderr(&out));
    let shard1 = fx.tensors(&format!("local/{bad}"));
    for name in shard1.keys() {
        for tdir in ["model-00001-of-00002.tensors", "model.tensors"] {
            let t = mnt.join(tdir).join(name);
            assert_eq!(verified(&t), "mismatch", "{}", t.display());
            assert_eq!(read_errno(&t), Some(libc::EIO), "{}", t.display());
        }
    }

    // The good shard: ok, and its bytes.
    let good_blob = fx.path(hex(&weights[good]["blob"]));
    assert_eq!(
        fs::read(mnt.join(good)).unwrap(),
        fs::read(&good_blob).unwrap()
    );
    for name in fx.tensors(&format!("local/{good}")).keys() {
        let range = fx.range(&format!("local/{good}"), name);
        for tdir in ["model-00002-of-00002.tensors", "model.tensors"] {
            let t = mnt.join(tdir).join(name);
            assert_eq!(verified(&t), "ok", "{}", t.display());
            assert_eq!(
                fs::read(&t).unwrap(),
                slice(&good_blob, range),
                "{}",
                t.display()
            );
        }
    }

    let log_text = daemon.stderr();
    let want = format!(
        "tensormount: {bad}: SHA-256 mismatch: expected {}, read {read}",
        hex(&weights[bad]["sha256"])
    );
    assert!(
        log_text.lines().any(|l| l.starts_with(&want)),
        "no line starting {want:?} in the daemon's log:\n{log_text}"
    );
    daemon.stop();
}

/// `-o verify` again after a file is replaced (written elsewhere and renamed over): a damaged
/// shard replaced by a good copy reads again, under a new inode, once verified ok.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_rechecks_a_replaced_file() {
    require_fuse();
    require_tools(&["getfattr"]);
    let fx = Fx::new("integrity-mount-replace", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00001-of-00002.safetensors";
    let w = fx.weights("release")[rel];
    let good = fs::read(dir.join(rel)).unwrap();
    let (b, e) = fx.range(&format!("release/{rel}"), "model.pos_ids");
    flip(&dir.join(rel), b);

    let mnt = fx.path("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = fx.path("daemon.log");
    let (mut daemon, _) =
        Daemon::spawn(&dir, &mnt, &["-o", "verify"], &log, Duration::from_secs(10));
    let file = mnt.join(rel);
    let tensor = mnt.join("model-00001-of-00002.tensors/model.pos_ids");
    assert_eq!(
        getxattr(&file, "user.tensormount.sha256").as_deref(),
        Some(hex(&w["sha256"]))
    );
    assert_eq!(verified(&file), "mismatch");
    assert_eq!(read_errno(&file), Some(libc::EIO));
    assert_eq!(read_errno(&tensor), Some(libc::EIO));
    let old_ino = fs::metadata(&file).unwrap().ino();

    let tmp = fx.path("replacement.tmp");
    fs::write(&tmp, &good).unwrap();
    fs::rename(&tmp, dir.join(rel)).unwrap();
    poll(
        "the replaced file verified ok under a new inode",
        Duration::from_secs(30),
        || {
            fs::metadata(&file).is_ok_and(|m| m.ino() != old_ino)
                && getxattr(&file, "user.tensormount.verified").as_deref() == Some("ok")
        },
    );
    assert_eq!(fs::read(&file).unwrap(), good);
    assert_eq!(verified(&tensor), "ok");
    assert_eq!(fs::read(&tensor).unwrap(), good[b as usize..e as usize]);
    daemon.stop();
}

/// `-o verify` on a file in a sub-folder whose `SHA256SUMS` line (written by `sha256sum` for
/// other bytes) does not match: the log names it by its path in the mount, with the recorded
/// digest and what `sha256sum` reads now; a frozen mount (`refresh=off`) refuses its reads too.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_logs_a_sub_folders_file_by_its_path() {
    require_fuse();
    let tmp = TempDir::new("integrity-sub-folder");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("unet")).unwrap();
    let file = src.join("unet/model.safetensors");
    let header = r#"{"w":{"dtype":"U8","shape":[4096],"data_offsets":[0,4096]}}"#;
    write_raw(&file, header, &[7u8; 4096]);
    let recorded = sha256sum(&file);
    let sums = Command::new("sha256sum")
        .current_dir(&src)
        .arg("unet/model.safetensors")
        .output()
        .unwrap();
    fs::write(src.join("SHA256SUMS"), &sums.stdout).unwrap();
    write_raw(&file, header, &[8u8; 4096]);
    let read = sha256sum(&file);
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let opts = ["-o", "verify,refresh=off"];
    let (mut daemon, _) = Daemon::spawn(&src, &mnt, &opts, &log, Duration::from_secs(10));
    assert_eq!(verified(&mnt.join("unet/model.safetensors")), "mismatch");
    assert_eq!(
        read_errno(&mnt.join("unet/model.tensors/w")),
        Some(libc::EIO)
    );
    let want = format!(
        "tensormount: unet/model.safetensors: SHA-256 mismatch: expected {recorded}, read {read}"
    );
    let text = daemon.stderr();
    assert!(
        text.lines().any(|l| l.starts_with(&want)),
        "no line starting {want:?} in the daemon's log:\n{text}"
    );
    daemon.stop();
}
