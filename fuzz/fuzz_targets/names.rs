//! Tensor names as file names: `names::escape` and `names::Shortener`.
//!
//! Input: a repeat byte, then names separated by `\xff` (never part of UTF-8), read as lossy
//! UTF-8; each name is repeated 1 to 8 times (per the first byte) so that long names, which are
//! shortened, are easy to reach. The names, sorted and without duplicates as the tree feeds them,
//! go to one `Shortener`: the file names must be valid, unique, the escaped name whenever that fits,
//! else a readable prefix of it, the marker and 16 hex digits; escaping must be injective and
//! reversible.
#![no_main]

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use tensormount::namespace::names::{self, Shortener};

fuzz_target!(|data: &[u8]| {
    let Some((&repeat, rest)) = data.split_first() else {
        return;
    };
    let repeat = usize::from(repeat % 8) + 1;
    let set: BTreeSet<String> = rest
        .split(|&b| b == 0xff)
        .map(|s| String::from_utf8_lossy(s).repeat(repeat))
        .collect();

    let mut shortener = Shortener::default();
    let mut again = Shortener::default();
    let mut files = HashSet::new();
    let mut escapes = HashMap::new();
    for name in &set {
        let file = shortener.file_name(name);
        common::assert_file_name(file.as_bytes(), name);
        assert!(files.insert(file.clone()), "two names give {file:?}");
        assert_eq!(again.file_name(name), file, "not deterministic");

        let escaped = names::escape(name);
        assert_eq!(&unescape(&escaped), name, "escape is not reversible");
        if let Some(other) = escapes.insert(escaped.clone(), name) {
            panic!("{other:?} and {name:?} both escape to {escaped:?}");
        }
        assert!(!escaped.contains("%#"));
        if escaped.len() <= common::NAME_MAX {
            assert_eq!(file, escaped);
        } else {
            let (prefix, hash) = file
                .rsplit_once("%#")
                .expect("shortened name without marker");
            assert!(!prefix.contains("%#"));
            assert_eq!(hash.len(), 16);
            assert!(
                hash.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert!(
                escaped.starts_with(prefix),
                "{prefix:?} is not a prefix of {escaped:?}"
            );
            // The prefix never cuts a %XX escape.
            let b = prefix.as_bytes();
            for (i, _) in prefix.match_indices('%') {
                assert!(i + 2 < b.len(), "prefix {prefix:?} cuts an escape");
            }
        }
    }
});

/// The inverse of `names::escape`.
fn unescape(s: &str) -> String {
    match s {
        "%" => return String::new(),
        "%2E" => return ".".into(),
        "%2E%2E" => return "..".into(),
        _ => {}
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3).expect("`%` without two hex digits");
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            "00" => '\0',
            _ => panic!("unknown escape %{code} in {s:?}"),
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}
