//! The layers' own rules: the kit names no format, the base uses nothing of the crate, the top of src/ holds the roots, one module style, no file over the limit, no format named outside format/.

use super::*;

/// The format kit (`src/format/kit/`: codecs several formats share) names no format: none of its
/// files imports a format's module, directly or through a re-export, nor names a format in a
/// string; a format that uses a codec brings its own rules (an allow-list, its errors' names).
#[test]
fn the_format_kit_names_no_format() {
    use tensormount::format::Format;
    let c = read_crate();
    let kit: ModPath = vec!["format".into(), "kit".into()];
    let formats: Vec<ModPath> = Format::ALL
        .into_iter()
        .map(|f| vec!["format".to_string(), f.name().to_string()])
        .collect();
    let edges = c.edges();
    let mut found = Vec::new();
    for (module, to) in &edges {
        if !module.starts_with(&kit) {
            continue;
        }
        for target in to {
            if formats.iter().any(|f| target.starts_with(f)) {
                found.push(format!("{} uses {}", show(module), show(target)));
            }
        }
        let text = code_with_strings(&c.files[module]);
        for (line, literal) in literals(&text) {
            let lower = literal.to_ascii_lowercase();
            for f in Format::ALL {
                if lower.contains(f.name()) {
                    found.push(format!(
                        "{}:{line}: {literal:?} names {}",
                        show(module),
                        f.name()
                    ));
                }
            }
        }
    }
    assert!(edges.keys().any(|m| m.starts_with(&kit)), "no kit found");
    assert!(
        found.is_empty(),
        "the kit names formats:\n{}",
        found.join("\n")
    );
}

/// The base (`src/base/`: plain helpers every layer may use) uses nothing of the crate outside it.
#[test]
fn the_base_uses_nothing_of_the_crate() {
    let c = read_crate();
    let base: ModPath = vec!["base".into()];
    let mut found = Vec::new();
    for (module, to) in c.edges() {
        if module.starts_with(&base) {
            found.extend(
                to.iter()
                    .filter(|t| !t.starts_with(&base))
                    .map(|t| format!("{} uses {}", show(&module), show(t))),
            );
        }
    }
    assert!(
        found.is_empty(),
        "the base uses the crate:\n{}",
        found.join("\n")
    );
}

/// The top of `src/` holds only the crate's root, the binary's and the layers' folders: every
/// other file lies in the folder of what it is.
#[test]
fn the_top_of_src_holds_only_the_roots() {
    let loose: Vec<String> = fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lib.rs" && n != "main.rs")
        .collect();
    assert!(
        loose.is_empty(),
        "loose files at the top of src/: {loose:?}"
    );
}

/// One module style: a module with submodules is `x/mod.rs`, never `x.rs` beside `x/`.
#[test]
fn modules_with_submodules_are_folders_with_a_mod_rs() {
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let beside: Vec<String> = all
        .iter()
        .filter(|f| f.with_extension("").is_dir())
        .map(|f| f.display().to_string())
        .collect();
    assert!(beside.is_empty(), "x.rs beside x/: {beside:?}");
}

/// A file's text up to its test module.
fn code_with_strings(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap();
    text.split("#[cfg(test)]").next().unwrap_or("").to_string()
}

/// No Rust file of the repository (`src/`, `tests/`, `benches/`, `fuzz/`, `examples/`), tests
/// included, is over [`MAX_LINES`] lines.
#[test]
fn no_rust_file_is_over_the_limit() {
    let root = src().parent().unwrap().to_path_buf();
    let mut all = Vec::new();
    for dir in ["src", "tests", "benches", "fuzz/fuzz_targets", "examples"] {
        rust_files(&root.join(dir), &mut all);
    }
    assert!(all.len() > 100, "found only {} files", all.len());
    let mut long = Vec::new();
    for file in all {
        let lines = fs::read_to_string(&file).unwrap().lines().count();
        if lines > MAX_LINES {
            long.push(format!("{}: {lines} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// Outside `src/format/` (the command line's help text aside) no code names a particular format:
/// each is one value of `format`, asked what it declares. Checked on the names of the format
/// values and of the per-format modules, in code (comments left out).
#[test]
fn no_file_outside_format_names_a_format() {
    let root = src();
    let mut all = Vec::new();
    rust_files(&root, &mut all);
    let names = [
        "SAFETENSORS",
        "PYTORCH",
        "GGUF",
        "format::gguf",
        "format::pytorch",
    ];
    let mut found = Vec::new();
    for file in all {
        let rel = file.strip_prefix(&root).unwrap();
        if rel.starts_with("format") || rel.starts_with("command/cli") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for name in names {
                let named = code.match_indices(name).any(|(at, _)| {
                    let before = code[..at].chars().last();
                    let after = code[at + name.len()..].chars().next();
                    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !word(before) && !word(after)
                });
                if named {
                    found.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "formats named outside src/format/:\n{}",
        found.join("\n")
    );
}

/// No struct of `src/` has more than 10 fields, and no `impl` block is over 400 lines, but the
/// pickle machine's (one method an opcode family). Read from the text: a struct's fields are the
/// lines one indent in that name a field, an impl the lines to its closing brace.
#[test]
fn structs_and_impls_stay_small() {
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let mut found = Vec::new();
    for file in all {
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            let is_struct = [
                "struct ",
                "pub struct ",
                "pub(crate) struct ",
                "pub(super) struct ",
            ]
            .iter()
            .any(|p| trimmed.starts_with(p))
                && trimmed.ends_with('{');
            if is_struct {
                let close = format!("{}}}", " ".repeat(indent));
                let inner = " ".repeat(indent + 4);
                let fields = lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with(&close))
                    .filter(|l| {
                        l.strip_prefix(&inner).is_some_and(|f| {
                            let f = f
                                .trim_start_matches("pub(crate) ")
                                .trim_start_matches("pub(super) ");
                            let f = f.trim_start_matches("pub ");
                            f.split_once(": ").is_some_and(|(name, _)| {
                                !name.is_empty()
                                    && name.chars().all(|c| {
                                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
                                    })
                            })
                        })
                    })
                    .count();
                if fields > 10 {
                    found.push(format!("{}:{}: {fields} fields", file.display(), i + 1));
                }
            }
            if line.starts_with("impl") && line.ends_with('{') && !line.contains("Machine") {
                let len = lines[i + 1..].iter().take_while(|l| **l != "}").count();
                if len > 400 {
                    found.push(format!(
                        "{}:{}: an impl of {len} lines",
                        file.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "too large:\n{}", found.join("\n"));
}
