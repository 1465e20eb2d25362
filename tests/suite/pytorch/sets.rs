//! Sharded .bin sets: merged, and loaded by transformers through the virtual safetensors files.

use super::*;

/// Item 8's sharded set: the `.bin` shards of a BERT written as transformers 4 wrote them get
/// virtual `model-0000N-of-0000M.safetensors` shards and a virtual index naming them, and
/// `AutoModel.from_pretrained(mount, use_safetensors=True)` loads the source's weights.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sharded_bin_sets_load_with_transformers_from_the_virtual_safetensors() {
    let (py, tmp, wrote) = write("pickle-sharded", &["write-fixtures", "--only", "sharded"]);
    let bert = tmp.join("fx/bert");
    let m = mount_ok(&bert, "");

    let shards: Vec<String> = wrote
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("bert/pytorch_model-"))
        .map(|rest| format!("pytorch_model-{rest}"))
        .collect();
    assert!(shards.len() >= 2, "{wrote}");
    let mut want = set(&[
        "config.json",
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
    ]);
    for shard in &shards {
        want.insert(shard.clone());
        want.insert(tensors_dir(shard));
        want.insert(virtual_name(shard));
    }
    let got = names(&m.dir);
    // Merged directories of the two indexes are not what this test is about.
    let extra: BTreeSet<&String> = got
        .difference(&want)
        .filter(|n| *n != "pytorch_model.tensors" && *n != "model.tensors")
        .collect();
    assert!(
        want.is_subset(&got) && extra.is_empty(),
        "listing {got:?}, want {want:?}"
    );

    // The virtual index maps every tensor to its virtual shard, where the source's index (written
    // by huggingface_hub's split) maps it to the `.bin` shard; each shard's tensor directory
    // lists its tensors.
    let source_index =
        json(&fs::read_to_string(bert.join("pytorch_model.bin.index.json")).unwrap());
    let mut weight_map = BTreeMap::new();
    let mut per_shard: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, shard) in source_index["weight_map"].as_object().unwrap() {
        let shard = shard.as_str().unwrap();
        weight_map.insert(name.clone(), Value::from(virtual_name(shard)));
        per_shard
            .entry(shard.to_string())
            .or_default()
            .insert(escaped(name));
    }
    assert_eq!(
        per_shard.keys().collect::<Vec<_>>(),
        shards.iter().collect::<Vec<_>>()
    );
    for (shard, want) in &per_shard {
        assert_eq!(&names(&m.path(tensors_dir(shard))), want, "{shard}");
    }
    let index = json(&fs::read_to_string(m.path("model.safetensors.index.json")).unwrap());
    let got_map: BTreeMap<String, Value> = index["weight_map"]
        .as_object()
        .unwrap_or_else(|| panic!("no weight_map: {index}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got_map, weight_map);

    // Each virtual shard is the official conversion of its shard.
    let refs = tmp.join("reference");
    fs::create_dir(&refs).unwrap();
    let mut args = vec!["convert".to_string()];
    for shard in &shards {
        args.push(s(&bert.join(shard)).to_string());
        args.push(s(&refs.join(virtual_name(shard))).to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    checkpoints(&py, &args);
    for shard in &shards {
        let v = virtual_name(shard);
        assert!(
            fs::read(m.path(&v)).unwrap() == fs::read(refs.join(&v)).unwrap(),
            "{v}: differs from save_file's conversion of {shard}"
        );
        assert_eq!(
            getxattr(&m.path(&v), "user.tensormount.converted_from"),
            Some(canonical(&bert.join(shard))),
            "{v}"
        );
    }

    let out = checkpoints(&py, &["from-pretrained", s(&m.dir), s(&bert)]);
    assert!(out.starts_with("ok "), "{out}");
}
