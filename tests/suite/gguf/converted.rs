//! The virtual safetensors file of a GGUF model (quantized tensors as their float32 values), and split models merged with an index of their conversions.

use super::*;

/// What `gguf_fixture.py safetensors` found comparing `file` of the mount (a safetensors file or
/// an index) with `ggufs` as gguf-py reads them; asserts that it found every tensor, and each
/// right.
fn loaded_as_gguf_py_reads(file: &Path, ggufs: &[PathBuf]) -> serde_json::Value {
    let py = python();
    require_module(&py, "torch");
    let mut args = vec!["safetensors", s(file)];
    args.extend(ggufs.iter().map(|g| s(g)));
    let report = json(&python_script(&py, "gguf_fixture.py", &args));
    for list in ["wrong", "missing", "extra"] {
        assert_eq!(report[list], serde_json::json!([]), "{list}: {report}");
    }
    report
}

/// The stored types that are not dequantized in a conversion (safetensors has them).
const PLAIN: [&str; 3] = ["F32", "F16", "BF16"];

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_virtual_safetensors_file_holds_the_model_with_quantized_tensors_as_their_f32_values() {
    let tmp = TempDir::new("gguf-safetensors");
    let (src, header) = fixture(&tmp, "5");
    let file = src.join("model.gguf");
    let m = mount_ok(&src, "");
    let st = m.path("model.safetensors");
    assert_eq!(
        getxattr(&st, "user.tensormount.converted_from").as_deref(),
        Some(s(&file))
    );
    // torch's load_file: every tensor, the quantized ones bit for bit gguf-py's dequantize.
    let report = loaded_as_gguf_py_reads(&st, std::slice::from_ref(&file));
    let all = tensors(&header);
    let quantized = all.iter().filter(|t| !PLAIN.contains(&&t.1[..])).count();
    assert_eq!(report["compared"], all.len(), "{report}");
    assert_eq!(report["dequantized"], quantized, "{report}");
    assert!(quantized >= 20, "{quantized} quantized tensors");
    // `__metadata__`: `format: gguf` and every scalar key as gguf-py reads it; no array.
    let metadata = report["metadata"].as_object().unwrap();
    assert_eq!(metadata["format"], "gguf");
    let scalars = report["scalars"].as_object().unwrap();
    assert!(scalars.len() >= 10, "{scalars:?}");
    for (key, value) in scalars {
        assert_eq!(metadata.get(key), Some(value), "{key}");
    }
    for array in ["tokenizer.ggml.tokens", "test.strings", "test.ints"] {
        assert!(!metadata.contains_key(array), "{array}");
    }
    // Reads that start and end anywhere (inside the header, inside blocks, across tensors stored
    // and computed) give the bytes of the whole file's read.
    let whole = fs::read(&st).unwrap();
    let f = fs::File::open(&st).unwrap();
    let mut at = 0;
    for len in [5usize, 4093, 70001, 300_000].into_iter().cycle().take(40) {
        let mut buf = vec![0; len.min(whole.len() - at)];
        f.read_exact_at(&mut buf, at as u64).unwrap();
        assert!(buf == whole[at..at + buf.len()], "{len} bytes at {at}");
        at = (at + len * 3 / 2) % whole.len();
    }
    drop(f);
    m.unmount().unwrap();
    // A real file of that name wins.
    let real = src.join("model.safetensors");
    let mut bytes = br#"{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.to_vec();
    bytes.resize(56, b' ');
    let mut file_bytes = 56u64.to_le_bytes().to_vec();
    file_bytes.extend_from_slice(&bytes);
    file_bytes.push(7);
    fs::write(&real, &file_bytes).unwrap();
    let m = mount_ok(&src, "");
    assert_eq!(fs::read(m.path("model.safetensors")).unwrap(), file_bytes);
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn split_models_are_merged_with_an_index_of_conversions_and_incomplete_ones_served_by_shard() {
    let tmp = TempDir::new("gguf-split");
    let py = python();
    require_module(&py, "gguf");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    python_script(&py, "gguf_fixture.py", &["split", s(&src), "--shards", "3"]);
    let name = |k: u32| format!("split-{k:05}-of-00003.gguf");
    let shards: Vec<PathBuf> = (1..=3).map(|k| src.join(name(k))).collect();
    let m = mount_ok(&src, "settle=0");
    // Every tensor of every shard, merged, as its shard stores it.
    let merged = m.path("split.tensors");
    let mut count = 0;
    for (k, shard) in shards.iter().enumerate() {
        let expect = tmp.join(format!("expect-{k}"));
        python_script(&py, "gguf_fixture.py", &["expect", s(shard), s(&expect)]);
        let header = json(&fs::read_to_string(expect.join("header.json")).unwrap());
        for (tensor, _, _, offset, size) in tensors(&header) {
            let t = merged.join(escaped(&tensor));
            assert!(
                fs::read(&t).unwrap() == source_bytes(shard, offset, size),
                "{tensor}"
            );
            assert_eq!(getxattr(&t, "user.safetensors.source").unwrap(), s(shard));
            count += 1;
        }
        // Each shard keeps its own tensor directory and conversion.
        let stem = name(k as u32 + 1).replace(".gguf", "");
        assert!(m.path(format!("{stem}.tensors")).is_dir());
        assert!(m.path(format!("{stem}.safetensors")).is_file());
    }
    assert_eq!(count, 9);
    assert_eq!(
        fs::read_dir(&merged).unwrap().count(),
        9 + 1,
        "and __metadata__"
    );
    assert_eq!(
        getxattr(&merged, "user.gguf.general.architecture").as_deref(),
        Some("llama")
    );
    // The index of the shards' conversions loads the whole model through safetensors.
    let index = m.path("split.safetensors.index.json");
    let report = loaded_as_gguf_py_reads(&index, &shards);
    assert_eq!(report["compared"], 9, "{report}");
    assert_eq!(report["dequantized"], 6, "{report}");
    let idx = json(&fs::read_to_string(&index).unwrap());
    let data_len = |f: &str| {
        let bytes = fs::read(m.path(f)).unwrap();
        bytes.len() as u64 - 8 - u64::from_le_bytes(bytes[..8].try_into().unwrap())
    };
    let total: u64 = (1..=3)
        .map(|k| data_len(&name(k).replace(".gguf", ".safetensors")))
        .sum();
    assert_eq!(idx["metadata"]["total_size"], total);
    // A shard gone: the set is not merged, each shard is served on its own.
    fs::rename(&shards[1], tmp.join("away.gguf")).unwrap();
    wait_refreshed(&m.path(""), "the set without its second shard", || {
        !merged.exists()
    });
    assert!(!index.exists());
    assert!(m.path("split-00001-of-00003.tensors").is_dir());
    assert!(m.path("split-00003-of-00003.safetensors").is_file());
    // Back: merged again.
    fs::rename(tmp.join("away.gguf"), &shards[1]).unwrap();
    wait_refreshed(&m.path(""), "the whole set again", || index.exists());
    m.unmount().unwrap();
    // Mounted without it, a warning names the set's first shard and the missing one.
    fs::remove_file(&shards[1]).unwrap();
    let m = mount_ok(&src, "");
    assert!(!m.path("split.tensors").exists());
    assert!(
        m.stderr.contains(&name(1))
            && m.stderr.contains(&format!("`{}` is missing", name(2)))
            && m.stderr.contains("each shard is served on its own"),
        "{}",
        m.stderr
    );
    m.unmount().unwrap();
}
