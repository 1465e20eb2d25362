//! No file of src/ imports a file that imports it back, and the checker finds such cycles.

use super::*;

#[test]
fn no_file_of_src_imports_a_file_that_imports_it_back() {
    let krate = read_crate();
    let edges = krate.edges();
    let found = cycles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|c| {
            let members: BTreeSet<&ModPath> = c.iter().collect();
            let inside: Vec<String> = c
                .iter()
                .flat_map(|m| {
                    edges[m]
                        .iter()
                        .filter(|t| members.contains(t))
                        .map(move |t| format!("{} -> {}", show(m), show(t)))
                })
                .collect();
            inside.join(", ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles among the files of src/:\n{}",
        described.join("\n")
    );
}

#[test]
fn the_checker_finds_a_cycle_through_a_re_export_and_none_in_a_chain() {
    // Its own rules on a made-up crate: `a` uses `b::X`, defined in `b::inner` and re-exported by
    // `b`, whose `inner` uses `a::Y`: a cycle of three files, through the re-export.
    let module = |s: &str| -> ModPath { segments(s) };
    let mut krate = Crate {
        files: ["a", "b", "b::inner", "c"]
            .iter()
            .map(|m| (module(m), PathBuf::new()))
            .collect(),
        exports: BTreeMap::new(),
        names: BTreeMap::new(),
    };
    let modules: BTreeSet<ModPath> = krate.files.keys().cloned().collect();
    // Written as a child module's path, as a `mod.rs` re-exports.
    let code_b = "mod inner;\npub use inner::{X, Z as W};\n";
    let mut exports = BTreeMap::new();
    for (path, name, public) in uses(code_b) {
        assert!(public);
        exports.insert(name, absolute(&path, &module("b"), &modules).unwrap());
    }
    krate.exports.insert(module("b"), exports);
    let names = |code: &str, here: &str| -> Vec<ModPath> {
        let mut v: Vec<ModPath> = uses(code)
            .into_iter()
            .filter_map(|(p, _, _)| absolute(&p, &module(here), &modules))
            .collect();
        v.extend(
            inline_paths(code)
                .iter()
                .filter_map(|p| absolute(p, &module(here), &modules)),
        );
        v
    };
    krate
        .names
        .insert(module("a"), names("use crate::b::{self, X};", "a"));
    krate.names.insert(
        module("b::inner"),
        names("fn f() { super::super::a::Y }", "b::inner"),
    );
    krate
        .names
        .insert(module("c"), names("use crate::a::Y; use std::fs;", "c"));
    krate.names.insert(module("b"), names(code_b, "b"));
    let found = cycles(&krate.edges());
    assert_eq!(found.len(), 1, "{found:?}");
    let members: BTreeSet<String> = found[0].iter().map(|m| show(m)).collect();
    assert_eq!(
        members,
        ["a", "b", "b::inner"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    // Comments and strings name nothing.
    assert!(inline_paths(&code("// crate::a::Y\nlet s = \"crate::b::X\";")).is_empty());
}
