//! Models written as their tools write them: huggingface_hub's downloads and save_pretrained's republishing.

use super::*;

// ------------------------------------------------------------------ huggingface_hub downloads

/// Replays `hf_hub_download` of every file of a sharded model into a cache, checking the mount
/// after each step: `refs/main` written first, the snapshot directory made, each blob written
/// under a temporary name (`<etag>.incomplete` up to 1.17, `<etag>.<8 hex>.incomplete` since
/// 1.18), renamed, and only then linked from the snapshot.
fn hf_download(new_naming: bool) {
    let l = Live::start("hf", "", |s| s.src.clone());
    let staged = l.tmp.join("staged");
    fs::create_dir(&staged).unwrap();
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    save(&l.py, &staged.join(shards[0]), 1, &["a", "b"]);
    save(&l.py, &staged.join(shards[1]), 2, &["c"]);
    let index = serde_json::json!({"metadata": {"total_size": 12288},
        "weight_map": {"a": shards[0], "b": shards[0], "c": shards[1]}});
    fs::write(
        staged.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
    let repo = l.src("models--org--model");
    let sha = "0123456789abcdef0123456789abcdef01234567";
    fs::create_dir_all(repo.join("refs")).unwrap();
    fs::create_dir_all(repo.join("blobs")).unwrap();
    fs::write(repo.join("refs/main"), sha).unwrap();
    let snap = repo.join("snapshots").join(sha);
    fs::create_dir_all(&snap).unwrap();
    let snap_mnt = format!("models--org--model/snapshots/{sha}");

    let files = ["model.safetensors.index.json", shards[0], shards[1]];
    for (i, file) in files.iter().enumerate() {
        let bytes = fs::read(staged.join(file)).unwrap();
        let etag = format!("{:040x}", i + 1);
        let tmp = if new_naming {
            repo.join(format!("blobs/{etag}.1a2b3c4d.incomplete"))
        } else {
            repo.join(format!("blobs/{etag}.incomplete"))
        };
        let mut f = File::create(&tmp).unwrap();
        f.write_all(&bytes[..bytes.len() / 3]).unwrap();
        f.flush().unwrap();
        // Mid-download: the partial blob is mirrored, nothing in the snapshot yet.
        let tmp_name = tmp.file_name().unwrap().to_str().unwrap().to_string();
        l.until("the partial blob", || {
            fs::read_dir(l.path("models--org--model/blobs")).is_ok_and(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_str() == Some(&tmp_name))
            })
        });
        assert!(!l.path(&format!("{snap_mnt}/{file}")).exists());
        f.write_all(&bytes[bytes.len() / 3..]).unwrap();
        drop(f);
        fs::rename(&tmp, repo.join("blobs").join(&etag)).unwrap();
        symlink(format!("../../blobs/{etag}"), snap.join(file)).unwrap();
        l.until("the snapshot file", || {
            l.path(&format!("{snap_mnt}/{file}")).exists()
        });
        // The merged set appears only with its last shard.
        let merged = l.path(&format!("{snap_mnt}/model.tensors"));
        assert_eq!(merged.exists(), i == files.len() - 1, "after {file}");
    }
    let blobs = names(&l.path("models--org--model/blobs"));
    assert!(
        blobs.iter().all(|b| !b.ends_with(".incomplete")),
        "{blobs:?}"
    );
    l.compare(
        &format!("models--org--model/snapshots/{sha}"),
        &format!("{snap_mnt}/model.tensors"),
    );
    // A second revision fills in beside the first, which stays as it was.
    let first = ino(&l.path(&format!("{snap_mnt}/model.tensors/a")));
    let sha2 = "fedcba9876543210fedcba9876543210fedcba98";
    fs::create_dir_all(repo.join("snapshots").join(sha2)).unwrap();
    symlink(
        format!("../../blobs/{:040x}", 2),
        repo.join("snapshots").join(sha2).join(shards[0]),
    )
    .unwrap();
    fs::write(repo.join("refs/main"), sha2).unwrap();
    l.until("the second revision", || {
        l.path(&format!(
            "models--org--model/snapshots/{sha2}/model-00001-of-00002.tensors/a"
        ))
        .exists()
    });
    assert_eq!(ino(&l.path(&format!("{snap_mnt}/model.tensors/a"))), first);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huggingface_hub_downloads_appear_complete_old_naming() {
    hf_download(false);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huggingface_hub_downloads_appear_complete_new_naming() {
    hf_download(true);
}

// ------------------------------------------------------------------------- save_pretrained

/// `save_pretrained` republishing a 3-shard model as 2 shards into the same directory: stale
/// shards deleted first, new shards written by the official writer, the index rewritten in place
/// last. The merged directory is absent while the set is inconsistent, correct after; handles
/// opened on the old set keep their bytes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn save_pretrained_republish_hides_the_set_until_complete() {
    let names3 = ["a", "b", "c"];
    let shard = |i: usize, n: usize| format!("model-{i:05}-of-{n:05}.safetensors");
    let l = Live::start("republish", "settle=0.3", |s| {
        let mut map = serde_json::Map::new();
        for (i, n) in names3.iter().enumerate() {
            s.save(&shard(i + 1, 3), 10 + i as u64, &[n]);
            map.insert(n.to_string(), shard(i + 1, 3).into());
        }
        fs::write(
            s.src.join("model.safetensors.index.json"),
            serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map})).unwrap(),
        )
        .unwrap();
        s.src.clone()
    });
    let old_a = tensor_bytes(&l.src(&shard(1, 3)), "a");
    let held = File::open(l.path("model.tensors/a")).unwrap();
    let merged_present = || l.path("model.tensors").exists();
    assert!(merged_present());

    // 1. Stale shards deleted.
    for i in 1..=3 {
        fs::remove_file(l.src(&shard(i, 3))).unwrap();
    }
    l.until("the merged set to go", || !merged_present());
    // 2. New shards written, one by one.
    l.save(&shard(1, 2), 20, &["a", "b"]);
    l.rescan();
    assert!(!merged_present());
    l.save(&shard(2, 2), 21, &["c"]);
    l.rescan();
    assert!(
        !merged_present(),
        "the old index names shards that are gone"
    );
    // 3. The index, in place.
    let mut map = serde_json::Map::new();
    for (n, s) in [("a", 1), ("b", 1), ("c", 2)] {
        map.insert(n.into(), shard(s, 2).into());
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(l.src("model.safetensors.index.json"))
        .unwrap();
    f.write_all(
        &serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map})).unwrap(),
    )
    .unwrap();
    drop(f);
    l.until("the new merged set", merged_present);
    assert_eq!(
        names(&l.path("model.tensors")),
        ["__metadata__", "a", "b", "c"]
    );
    assert!(
        fs::read(l.path("model.tensors/a")).unwrap() == tensor_bytes(&l.src(&shard(1, 2)), "a")
    );
    // The handle opened on the old set still reads the old bytes.
    assert!(read_all_uncached(&held).unwrap() == old_a);

    // Republished again with shard 1 untouched: its tensors keep their inodes.
    let a = ino(&l.path("model.tensors/a"));
    let c = ino(&l.path("model.tensors/c"));
    l.save(&shard(2, 2), 22, &["c"]);
    l.until("the new c", || ino(&l.path("model.tensors/c")) != c);
    assert_eq!(ino(&l.path("model.tensors/a")), a);
    assert!(
        fs::read(l.path("model.tensors/c")).unwrap() == tensor_bytes(&l.src(&shard(2, 2)), "c")
    );
}
