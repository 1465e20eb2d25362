//! `index::parse` on arbitrary bytes, and `format::IndexName::of` on them read as a file name
//! (the index of a safetensors set or of a set of PyTorch checkpoints).
//!
//! What the parser accepts must be a JSON object whose `weight_map` maps each tensor, listed once,
//! to a plain file name, checked against serde_json's own reading of the same bytes (as a `Value`;
//! see `check_parse` for what only a `Value` rejects).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tensormount::format::{self, set::index};

fuzz_target!(|data: &[u8]| {
    check_parse(data);
    let text = String::from_utf8_lossy(data);
    check_merged_name(&text);
    for line in text.split(['\n', '/']) {
        check_merged_name(line);
    }
});

fn check_parse(data: &[u8]) {
    let parsed = index::parse(data);
    let value = serde_json::from_slice::<Value>(data);
    let idx = match parsed {
        Ok(idx) => idx,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let value = match value {
        Ok(v) => v,
        Err(e) => {
            // The parser skips members it does not use with serde's IgnoredAny, and serde_json
            // skips those without the checks a `Value` gets: invalid UTF-8 and lone surrogate
            // escapes inside strings, nesting deeper than 128. Nothing else may differ.
            let msg = e.to_string();
            assert!(
                [
                    "invalid unicode code point",
                    "lone leading surrogate",
                    "unexpected end of hex escape",
                    "recursion limit exceeded",
                ]
                .iter()
                .any(|m| msg.contains(m)),
                "accepted an index serde_json rejects: {e}"
            );
            return;
        }
    };
    let top = value
        .as_object()
        .expect("accepted an index that is not an object");
    let map = top["weight_map"]
        .as_object()
        .expect("weight_map is not an object");
    // No tensor was dropped (a name given twice is an error, so serde_json kept them all).
    assert_eq!(map.len(), idx.weight_map.len());
    for (tensor, shard) in &idx.weight_map {
        assert_eq!(map[tensor].as_str(), Some(shard.as_str()));
        assert!(
            !shard.is_empty() && shard != "." && shard != ".." && !shard.contains(['/', '\0']),
            "shard `{shard}` accepted"
        );
    }
    match top.get("metadata") {
        None | Some(Value::Null) => assert!(idx.metadata.is_none()),
        Some(Value::Object(m)) => assert_eq!(idx.metadata.as_ref(), Some(m)),
        Some(other) => panic!("accepted `metadata` {other}"),
    }
    for v in idx.metadata.iter().flat_map(|m| m.values()) {
        let text = index::metadata_value_text(v);
        if let Value::String(s) = v {
            assert_eq!(&text, s);
        } else {
            assert_eq!(serde_json::from_str::<Value>(&text).ok().as_ref(), Some(v));
        }
    }
}

fn check_merged_name(name: &str) {
    let Some(dir) = format::IndexName::of(name.as_bytes()).map(|i| i.merged_dir) else {
        return;
    };
    // The index of a safetensors set, else of a set of PyTorch checkpoints; the first marker in
    // the name ends its stem.
    let (stem, rest) = [".safetensors.index.", ".bin.index."]
        .iter()
        .find_map(|marker| name.split_once(marker))
        .expect("not an index name");
    assert!(!stem.is_empty());
    assert!(
        dir.starts_with(stem) && dir.ends_with(".tensors"),
        "{name:?} -> {dir:?}"
    );
    if rest == "json" {
        assert_eq!(dir, format!("{stem}.tensors"));
    } else {
        let variant = rest
            .strip_suffix(".json")
            .expect("index name without .json");
        assert!(!variant.is_empty());
        assert_eq!(dir, format!("{stem}.{variant}.tensors"));
    }
}
