//! Shared storage is often FUSE itself: tensormount stacked on a FUSE mount (the directory mirror of
//! a first tensormount) serves every tensor correctly.

use crate::common::*;

use std::fs;
use std::path::Path;

/// Every tensor of `safetensors_file`, as (name, bytes), read by this test from the file itself.
fn tensors_of(safetensors_file: &Path) -> Vec<(String, Vec<u8>)> {
    let raw = fs::read(safetensors_file).unwrap();
    let n = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&raw[8..8 + n]).unwrap();
    header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let o = &v["data_offsets"];
            let (b, e) = (
                o[0].as_u64().unwrap() as usize,
                o[1].as_u64().unwrap() as usize,
            );
            (k.clone(), raw[8 + n + b..8 + n + e].to_vec())
        })
        .collect()
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tensormount_on_a_tensormount_mirror_serves_every_tensor() {
    require_fuse();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model");
    let lower = Mounted::new(&example, "");
    // The upper mount's source is the lower mount, itself a FUSE filesystem. Its `.tensors`
    // directories are real entries there, so they are mirrored (real entries win, with a warning).
    let upper = Mounted::new(&lower.dir, "");
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let lower_dir = lower.dir.to_str().unwrap();
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(&format!(" - fuse.tensormount {lower_dir} ")))
    );

    let mut checked = 0;
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        let source = example.join(shard);
        assert_eq!(
            fs::read(upper.path(shard)).unwrap(),
            fs::read(&source).unwrap()
        );
        // And a single-file mount whose source is the lower layer's mirrored shard: its tensors are
        // served from a mapping of a FUSE file.
        let single = Mounted::new(&lower.path(shard), "");
        let stem = shard.trim_end_matches(".safetensors");
        for (name, bytes) in tensors_of(&source) {
            let file = escaped(&name);
            for dir in [
                upper.path("model.tensors"),
                upper.path(format!("{stem}.tensors")),
                single.dir.clone(),
            ] {
                assert_eq!(
                    fs::read(dir.join(&file)).unwrap(),
                    bytes,
                    "{name} in {}",
                    dir.display()
                );
            }
            let single_source = getxattr(&single.dir.join(&file), "user.safetensors.source");
            assert_eq!(single_source.unwrap(), lower.path(shard).to_str().unwrap());
            checked += 1;
        }
    }
    assert_eq!(checked, 16, "the example model has 16 tensors");
}
