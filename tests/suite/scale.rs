//! Scale: thousands of shards under a low descriptor limit, and a 100 GB model that mounts without
//! its data being read.

use crate::common::*;

use std::fs;
use std::os::unix::process::CommandExt;

/// The daemon in the foreground under a RLIMIT_NOFILE of `nofile`, once its mount is live.
fn spawn_foreground(source: &std::path::Path, mnt: &std::path::Path, nofile: u64) -> Daemon {
    let log = mnt.with_extension("log");
    let mut d = Daemon::start(source, mnt, &[], &log, |cmd| {
        // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: nofile,
                    rlim_max: nofile,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
    .unwrap();
    d.wait_mounted(std::time::Duration::from_secs(60)).unwrap();
    d
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn fifteen_hundred_shards_mount_under_a_64_descriptor_limit() {
    require_fuse();
    let tmp = TempDir::new("shards");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let n = 1500;
    let mut weight_map = Vec::new();
    for i in 0..n {
        let shard = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        let a = format!("layers.{i}.weight");
        let b = format!("layers.{i}.bias");
        write_safetensors(
            &model.join(&shard),
            &[
                T {
                    name: &a,
                    dtype: "F32",
                    shape: &[2, 2],
                    data: bytes(16, i),
                },
                T {
                    name: &b,
                    dtype: "U8",
                    shape: &[3],
                    data: bytes(3, i + 7),
                },
            ],
            Some(&[("format", "pt")]),
        );
        weight_map.push((a, shard.clone()));
        weight_map.push((b, shard));
    }
    write_index(
        &model.join("model.safetensors.index.json"),
        Some(serde_json::json!({"total_size": n * 19})),
        weight_map.iter().map(|(t, s)| (t.as_str(), s.as_str())),
    );

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut child = spawn_foreground(&model, &mnt, 64);
    let merged = mnt.join("model.tensors");
    assert_eq!(fs::read_dir(&merged).unwrap().count(), 2 * n as usize + 1);
    for i in [0, 749, 1499] {
        let shard = model.join(format!("model-{:05}-of-{n:05}.safetensors", i + 1));
        let raw = fs::read(&shard).unwrap();
        let header_len = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
        let data = &raw[8 + header_len..];
        assert_eq!(
            fs::read(merged.join(format!("layers.{i}.weight"))).unwrap(),
            data[..16]
        );
        assert_eq!(
            fs::read(merged.join(format!("layers.{i}.bias"))).unwrap(),
            data[16..19]
        );
        assert_eq!(
            getxattr(
                &merged.join(format!("layers.{i}.bias")),
                "user.safetensors.source"
            )
            .unwrap(),
            fs::canonicalize(&shard).unwrap().to_str().unwrap()
        );
    }
    child.stop();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_100_gb_model_mounts_without_reading_its_data() {
    require_fuse();
    let tmp = TempDir::new("huge");
    let path = tmp.join("huge.safetensors");
    let size: u64 = 100 << 30;
    let header = format!(
        r#"{{"embed":{{"dtype":"BF16","shape":[{},1024],"data_offsets":[0,{size}]}},"tail":{{"dtype":"U8","shape":[4],"data_offsets":[{size},{}]}}}}"#,
        size / 2048,
        size + 4
    );
    write_raw(&path, &header, b"");
    // A sparse file: the data section is a hole, then 4 known bytes.
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let data_start = 8 + header.len() as u64;
    std::os::unix::fs::FileExt::write_all_at(&file, b"TAIL", data_start + size).unwrap();
    drop(file);

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut child = spawn_foreground(&path, &mnt, 1024);
    let rchar = proc_io(child.pid(), "rchar").unwrap();
    assert!(
        rchar < 1 << 20,
        "the daemon read {rchar} bytes while mounting"
    );
    assert_eq!(fs::metadata(mnt.join("embed")).unwrap().len(), size);
    assert_eq!(fs::read(mnt.join("tail")).unwrap(), b"TAIL");
    assert_eq!(
        getxattr(&mnt.join("tail"), "user.safetensors.offset").unwrap(),
        (data_start + size).to_string()
    );
    child.stop();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mirrored_files_are_read_by_the_kernel_through_passthrough_and_tensors_by_the_daemon() {
    require_fuse();
    let tmp = TempDir::new("passthrough");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let data = bytes(16 << 20, 3);
    write_safetensors(
        &model.join("model.safetensors"),
        &[T {
            name: "w",
            dtype: "U8",
            shape: &[16 << 20],
            data: data.clone(),
        }],
        None,
    );
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut child = spawn_foreground(&model, &mnt, 1024);
    let before = proc_io(child.pid(), "wchar").unwrap();
    let mirrored = fs::read(mnt.join("model.safetensors")).unwrap();
    assert_eq!(mirrored, fs::read(model.join("model.safetensors")).unwrap());
    let after_mirror = proc_io(child.pid(), "wchar").unwrap();
    assert!(
        after_mirror - before < 1 << 20,
        "the daemon replied {} bytes for a 16 MiB mirrored file: no passthrough",
        after_mirror - before
    );
    // A tensor cannot be passed through (its offsets differ from the source's): the daemon serves it.
    assert_eq!(fs::read(mnt.join("model.tensors/w")).unwrap(), data);
    assert!(proc_io(child.pid(), "wchar").unwrap() - after_mirror >= 16 << 20);
    child.stop();
}
