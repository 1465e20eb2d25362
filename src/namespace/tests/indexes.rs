//! The rules of sets under refresh: an index checked against its shards (each disagreement its own error, written out here by hand), and the index of a set's conversions.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::source::Source;

use super::*;

/// One check of a set against its shards, without a mount: the shards are the files of `d`
/// named in `files` (each with its settledness), the index is `map`.
fn check_set(
    d: &Dir,
    map: &[(&str, &str)],
    files: &[(&str, bool)],
) -> Result<sets::Merged, SetError> {
    let bytes = index(map);
    let idx = crate::format::set::index::parse(&bytes).unwrap();
    let plan = crate::format::set::index::Plan::of(idx);
    let mut registry = crate::source::Registry::new(sources());
    let sources: Vec<(&str, Arc<Source>, bool)> = files
        .iter()
        .map(|&(name, settled)| {
            let path = d.join(name);
            let meta = fs::metadata(&path).unwrap();
            (name, registry.get(&path, &meta).unwrap(), settled)
        })
        .collect();
    sets::check(
        &plan,
        |shard| {
            let (_, source, settled) = sources.iter().find(|(n, ..)| *n == shard)?;
            Some(sets::Shard {
                source,
                format: sets::shard_format(
                    b"model.safetensors.index.json",
                    Options::default()
                        .format_of(shard.as_bytes())
                        .map(|(f, _)| f),
                ),
                settled: *settled,
            })
        },
        || crate::format::set::index::parse(&bytes).map_err(crate::source::PlanError::Invalid),
    )
}

/// Each way an index and its shards can disagree gives its own error, with the message the
/// index's `user.safetensors.error` shows (written out here by hand).
#[test]
fn an_index_checked_against_its_shards_names_the_disagreement() {
    let d = Dir::new("namespace");
    let (s1, s2, s3) = ("s1.safetensors", "s2.safetensors", "s3.safetensors");
    publish(&d.join(s1), &st(&[("a", 2, 1)]));
    publish(&d.join(s2), &st(&[("b", 2, 2)]));
    // Holds `a` as well as its own `b`.
    publish(&d.join(s3), &st(&[("a", 2, 3), ("b", 2, 4)]));
    publish(&d.join("ac.safetensors"), &st(&[("a", 2, 5), ("c", 2, 6)]));
    publish(&d.join("s.bin"), &st(&[("a", 2, 1)]));
    publish(&d.join("bad.safetensors"), b"not safetensors");
    let all = [
        (s1, true),
        (s2, true),
        (s3, true),
        ("ac.safetensors", true),
        ("s.bin", true),
        ("bad.safetensors", true),
    ];

    let merged = check_set(&d, &[("a", s1), ("b", s2)], &all).unwrap();
    assert_eq!(merged.entries.len(), 2);
    let shards: Vec<&Path> = merged.shards.iter().map(|s| s.path.as_path()).collect();
    assert_eq!(
        shards,
        [
            fs::canonicalize(d.join(s1)).unwrap(),
            fs::canonicalize(d.join(s2)).unwrap()
        ]
    );

    type Case<'a> = (
        &'a str,
        Vec<(&'a str, &'a str)>,
        Vec<(&'a str, bool)>,
        fn(&SetError) -> bool,
        &'a str,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "a tensor listed for a shard that lacks it",
            vec![("a", s1), ("b", s1)],
            all.to_vec(),
            |e| matches!(e, SetError::NotInShard { tensor, shard } if tensor == "b" && shard == "s1.safetensors"),
            "tensor `b` is not in its shard `s1.safetensors`",
        ),
        (
            "a shard missing",
            vec![("a", s1), ("b", "gone.safetensors")],
            all.to_vec(),
            |e| matches!(e, SetError::ShardMissing(s) if s == "gone.safetensors"),
            "shard `gone.safetensors` named in weight_map is missing",
        ),
        (
            "a tensor in two shards",
            vec![("a", s1), ("b", s3)],
            all.to_vec(),
            |e| {
                matches!(e, SetError::ListedElsewhere { tensor, shard, listed }
                if tensor == "a" && shard == "s3.safetensors" && listed == "s1.safetensors")
            },
            "tensor `a` of shard `s3.safetensors` is listed for shard `s1.safetensors` in the \
             weight_map",
        ),
        (
            "a shard holding a tensor the index does not list",
            vec![("a", "ac.safetensors")],
            all.to_vec(),
            |e| matches!(e, SetError::Unlisted { tensor, shard } if tensor == "c" && shard == "ac.safetensors"),
            "tensor `c` of shard `ac.safetensors` is missing from the weight_map",
        ),
        (
            "a shard that is not a .safetensors file",
            vec![("a", "s.bin")],
            all.to_vec(),
            |e| matches!(e, SetError::WrongFormat(s) if s == "s.bin"),
            "shard `s.bin` is not a file of the format its index is for",
        ),
        (
            "a shard that is not valid",
            vec![("a", "bad.safetensors")],
            all.to_vec(),
            |e| matches!(e, SetError::ShardInvalid(s, _) if s == "bad.safetensors"),
            "shard `bad.safetensors` is not a valid safetensors file",
        ),
        (
            "a shard still being written",
            vec![("a", s1), ("b", s2)],
            vec![(s1, true), (s2, false)],
            |e| matches!(e, SetError::ShardSettling(s) if s == "s2.safetensors"),
            "shard `s2.safetensors` is being written",
        ),
    ];
    for (what, map, files, is_variant, message) in cases {
        let Err(e) = check_set(&d, &map, &files) else {
            panic!("{what}: accepted");
        };
        assert!(is_variant(&e), "{what}: {e:?}");
        assert_eq!(e.to_string(), message, "{what}");
        assert_eq!(e.settling(), message.ends_with("being written"), "{what}");
    }
}

/// An index that cannot be parsed again to name the disagreement gives the index's own error.
#[test]
fn an_index_broken_since_its_plan_gives_its_own_error() {
    let d = Dir::new("namespace");
    publish(&d.join("s1.safetensors"), &st(&[("a", 2, 1), ("b", 2, 2)]));
    let plan = crate::format::set::index::Plan::of(
        crate::format::set::index::parse(&index(&[("a", "s1.safetensors")])).unwrap(),
    );
    let path = d.join("s1.safetensors");
    let source = crate::source::Registry::new(sources())
        .get(&path, &fs::metadata(&path).unwrap())
        .unwrap();
    let e = sets::check(
        &plan,
        |_| {
            Some(sets::Shard {
                source: &source,
                format: Some(crate::format::Format::for_source(b"s.safetensors", &[])),
                settled: true,
            })
        },
        || crate::format::set::index::parse(b"{}").map_err(crate::source::PlanError::Invalid),
    )
    .err()
    .unwrap();
    assert!(
        matches!(
            &e,
            SetError::Index(i) if matches!(
                **i,
                crate::source::PlanError::Invalid(crate::format::set::index::IndexError::NoWeightMap)
            )
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "index has no `weight_map` object");
}

/// A set of PyTorch checkpoints (a shard written by `torch.save`, from the reader's fixtures)
/// gets the index of its safetensors conversions while the set holds: kept through a change
/// elsewhere, gone with its shard.
#[test]
fn a_converted_index_follows_its_set_of_checkpoints() {
    let d = Dir::new("namespace");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/format/pytorch/testdata");
    // The state dict's keys, as torch.load gave them when the fixture was made.
    let oracle: serde_json::Value =
        serde_json::from_slice(&fs::read(fixtures.join("views_zip.json")).unwrap()).unwrap();
    let keys: Vec<&str> = oracle["state_dict"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let shard = "pytorch_model-00001-of-00001.bin";
    publish(
        &d.join(shard),
        &fs::read(fixtures.join("views_zip.pt")).unwrap(),
    );
    let map: Vec<(&str, &str)> = keys.iter().map(|k| (*k, shard)).collect();
    publish(&d.join("pytorch_model.bin.index.json"), &index(&map));
    let mut m = Mount::new(d.path(), SETTLE);
    let converted = "model.safetensors.index.json";
    let json: serde_json::Value = serde_json::from_slice(&bytes(&m.snap, converted)).unwrap();
    let weight_map = json["weight_map"].as_object().unwrap();
    let mut listed: Vec<&str> = weight_map.keys().map(String::as_str).collect();
    listed.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(listed, want);
    assert!(
        weight_map
            .values()
            .all(|s| s == "model-00001-of-00001.safetensors"),
        "{weight_map:?}"
    );
    assert!(at(&m.snap, "model-00001-of-00001.safetensors").is_some());
    assert!(at(&m.snap, "pytorch_model.tensors").is_some());

    let ino = at(&m.snap, converted);
    publish(&d.join("README.md"), b"unrelated");
    m.rescan();
    assert_eq!(at(&m.snap, converted), ino);

    fs::remove_file(d.join(shard)).unwrap();
    m.rescan();
    assert_eq!(at(&m.snap, converted), None);
    assert_eq!(at(&m.snap, "pytorch_model.tensors"), None);
}
