//! --list, verify and a single-file SOURCE read by its first bytes, on GGUF files.

use super::*;

#[test]
fn list_json_prints_every_metadata_key_with_long_arrays_as_their_type_and_length() {
    let tmp = TempDir::new("gguf-list");
    let (src, _) = fixture(&tmp, "6");
    let out = run(&["--list", "--json", s(&src)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = json(&stdout(&out));
    let metadata = listed["metadata"]["model.tensors"]
        .as_object()
        .unwrap_or_else(|| panic!("no metadata of model.tensors: {listed}"));
    // gguf-py's view of every key: its value (a NaN or an infinity as the string JSON has for
    // it, as Python's json writes it), or for an array its element type and length too.
    let py = python();
    let oracle = python_code(
        &py,
        "import sys, json, gguf\n\
         r = gguf.GGUFReader(sys.argv[1])\n\
         A = gguf.GGUFValueType.ARRAY\n\
         def j(v):\n\
         \x20   if isinstance(v, list): return [j(x) for x in v]\n\
         \x20   if isinstance(v, float) and v != v: return 'NaN'\n\
         \x20   if isinstance(v, float) and abs(v) == float('inf'): return 'Infinity' if v > 0 else '-Infinity'\n\
         \x20   return v\n\
         for f in r.fields.values():\n\
         \x20   if f.name.startswith('GGUF.'): continue\n\
         \x20   row = {'key': f.name, 'value': j(f.contents())}\n\
         \x20   if f.types[0] == A:\n\
         \x20       row['type'] = f.types[-1].name\n\
         \x20       row['length'] = len(f.data)\n\
         \x20   print(json.dumps(row))\n",
        &[s(&src.join("model.gguf"))],
    );
    let mut summarized = 0;
    for line in oracle.lines() {
        let row = json(line);
        let key = row["key"].as_str().unwrap();
        let got = metadata
            .get(key)
            .unwrap_or_else(|| panic!("{key} not listed"));
        match got {
            serde_json::Value::Object(o) => {
                assert_eq!(o["type"], row["type"], "{key}");
                assert_eq!(o["length"], row["length"], "{key}");
                summarized += 1;
            }
            v => assert_eq!(*v, row["value"], "{key}"),
        }
    }
    assert_eq!(metadata.len(), oracle.lines().count());
    assert!(
        metadata["tokenizer.ggml.tokens"].is_object(),
        "a whole vocabulary is listed as its type and length"
    );
    assert!(summarized >= 1);
}

/// A `.gguf` in a Hugging Face cache (a snapshot's link to a blob named by its SHA-256, as
/// huggingface_hub lays out LFS files): `verify` checks it against its blob name, then names it
/// once a byte of it is flipped; the mount serves its tensors through the link.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn verify_checks_a_gguf_in_a_hugging_face_cache_against_its_blob_name() {
    let tmp = TempDir::new("gguf-verify");
    let (src, header) = fixture(&tmp, "7");
    let repo = tmp.join("hub/models--org--model");
    let snap = repo.join("snapshots/0123456789abcdef0123456789abcdef01234567");
    fs::create_dir_all(repo.join("blobs")).unwrap();
    fs::create_dir_all(repo.join("refs")).unwrap();
    fs::create_dir_all(&snap).unwrap();
    fs::write(
        repo.join("refs/main"),
        "0123456789abcdef0123456789abcdef01234567",
    )
    .unwrap();
    let sha = sha256sum(&src.join("model.gguf"));
    let blob = repo.join("blobs").join(&sha);
    fs::rename(src.join("model.gguf"), &blob).unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{sha}"), snap.join("model.gguf")).unwrap();

    let out = run(&["verify", s(&snap)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [format!("ok        model.gguf  sha256 {sha} (blob-name)")],
        "{}",
        stderr(&out)
    );
    let m = mount_ok(&snap, "");
    let (name, _, _, offset, size) = tensors(&header).swap_remove(0);
    assert!(
        fs::read(m.path("model.tensors").join(escaped(&name))).unwrap()
            == source_bytes(&blob, offset, size)
    );
    m.unmount().unwrap();

    // A byte of the first tensor flipped: `mismatch`, with the digest sha256sum reads.
    let mut b = [0u8];
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&blob)
        .unwrap();
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[!b[0]], offset).unwrap();
    drop(f);
    let read = sha256sum(&blob);
    let out = run(&["verify", s(&snap)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let blob = fs::canonicalize(&blob).unwrap();
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [format!(
            "mismatch  model.gguf  expected {sha} (blob-name: {}), read {read}",
            blob.display()
        )],
        "{}",
        stderr(&out)
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_single_file_source_whose_name_says_no_format_is_read_by_its_first_bytes() {
    // An ollama blob: a GGUF named by its SHA-256, with no suffix.
    let tmp = TempDir::new("gguf-blob");
    let (src, header) = fixture(&tmp, "4");
    let digest = sha256sum(&src.join("model.gguf"));
    let blob = tmp.join(format!("sha256-{digest}"));
    fs::rename(src.join("model.gguf"), &blob).unwrap();
    let m = mount_ok(&blob, "");
    let all = tensors(&header);
    let mut shown = names(&m.path(""));
    shown.retain(|n| n != "__metadata__");
    let mut want: Vec<String> = all.iter().map(|t| escaped(&t.0)).collect();
    want.sort();
    assert_eq!(shown, want);
    for (name, ty, _, offset, size) in &all {
        let t = m.path(escaped(name));
        assert!(
            fs::read(&t).unwrap() == source_bytes(&blob, *offset, *size),
            "{name}"
        );
        assert_eq!(
            getxattr(&t, "user.safetensors.dtype").as_deref(),
            Some(&ty[..])
        );
        assert_eq!(
            getxattr(&t, "user.tensormount.format").as_deref(),
            Some("gguf")
        );
    }
    m.unmount().unwrap();
}
