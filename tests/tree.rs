//! The mounted tree: layout, names, attributes and extended attributes, checked with real tools.

mod common;
use common::*;

use std::path::Path;

#[test]
fn example_model_mounts_with_merged_and_per_shard_directories() {
    if !require_fuse() {
        return;
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model");
    let m = Mounted::new(&example, "");
    let mut names: Vec<String> = std::fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00001-of-00002.tensors",
            "model-00002-of-00002.safetensors",
            "model-00002-of-00002.tensors",
            "model.safetensors.index.json",
            "model.tensors"
        ]
    );
}
