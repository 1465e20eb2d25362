//! The house rules of `src/` that a compiler does not check: no file imports, directly or through
//! others, a file that imports it back (the layers form a DAG), and no Rust file of the repository
//! is over [`MAX_LINES`] lines, tests included. Files are the units: an edge goes from a file to the file
//! that defines what it names (`use` or a `crate::`/`super::`/`self::` path), following
//! re-exports (`pub use`) to the item's own file; `mod` declarations are not edges. Test modules
//! (`#[cfg(test)]`) are left out. Needs neither FUSE nor root.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

mod imports;
mod rules;

/// The longest a file of `src/` may be before its tests.
const MAX_LINES: usize = 700;

type ModPath = Vec<String>;

fn src() -> PathBuf {
    std::env::var_os("LAYERING_SRC").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        PathBuf::from,
    )
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file of `src/` is: `lib.rs` the crate, `a/mod.rs` and `a.rs` module `a`.
fn module_of(file: &Path) -> ModPath {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: ModPath = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// Outside `src/format/` (the command line's help text aside) no string names a particular format
/// either: neither a format's name (but safetensors', the mount's own output), nor the prefix of
/// its metadata xattrs (but `user.safetensors.`), nor a key its files say their place in a set
/// with. What each format declares comes from the registry, asked. (Tests, whose fixtures are
/// files of the formats, are left out.)
#[test]
fn no_string_outside_format_names_a_format() {
    use tensormount::format::Format;
    let mut words: Vec<String> = Vec::new();
    for f in Format::ALL.into_iter().filter(|f| !f.native()) {
        words.push(f.name().to_string());
        let prefix = f.metadata_xattr("");
        if !prefix.starts_with("user.safetensors.") {
            words.push(prefix);
        }
        words.extend(
            f.split_keys()
                .iter()
                .filter(|k| !k.is_empty())
                .map(|k| k.to_string()),
        );
    }
    let root = src();
    let mut all = Vec::new();
    rust_files(&root, &mut all);
    let mut found = Vec::new();
    for file in all {
        let rel = file.strip_prefix(&root).unwrap();
        let test_file = rel.components().any(|c| c.as_os_str() == "tests")
            || rel.file_name().is_some_and(|n| n == "tests.rs");
        if rel.starts_with("format") || rel.starts_with("command/cli") || test_file {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        // Up to its inline test module, if it has one.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for (line, literal) in literals(text) {
            let lower = literal.to_ascii_lowercase();
            for w in &words {
                let named = lower.match_indices(&w.to_ascii_lowercase()).any(|(at, _)| {
                    let before = lower[..at].chars().last();
                    let after = lower[at + w.len()..].chars().next();
                    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !word(before) && !word(after)
                });
                if named {
                    found.push(format!("{}:{line}: {literal:?} names {w:?}", rel.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "formats named by strings outside src/format/:\n{}",
        found.join("\n")
    );
}

/// The string literals of a Rust file (comments left out), each with its line: what [`code`]
/// blanks.
fn literals(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    let line = |i: usize| text[..i].matches('\n').count() + 1;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = rest.find('"').unwrap_or(0) + 1;
            let end = rest[body..].find(&close).map_or(rest.len(), |e| body + e);
            out.push((line(i), rest[body..end].to_string()));
            i += end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push((line(i), text[i + 1..j.min(b.len())].to_string()));
            i = j + 1;
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap();
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// The code of a Rust file with comments, string and character literals blanked out.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            i += j;
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            out.push_str("' '");
            i += char_literal_len(rest).unwrap();
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// For text starting with a raw string (`r"`, `r#"`, `br"`...), the number of its `#`s.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a character literal at the start of `s` (`'x'`, `'\n'`, `'\u{1F600}'`), if it
/// is one rather than a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        let close = s[2..].find('\'')?;
        return Some(2 + close + 1);
    }
    let (j, q) = chars.next()?;
    (q == '\'').then_some(j + 1)
}

/// `code` without its `#[cfg(test)]` items, and the names of the test modules it declares.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut tests = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = rest[at + "#[cfg(test)]".len()..].trim_start();
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), brace) if brace.is_none_or(|b| semi < b) => {
                if let Some(name) = item[..semi].trim().strip_prefix("mod ") {
                    tests.push(name.trim().to_string());
                }
                semi + 1
            }
            (_, Some(open)) => {
                let mut depth = 0;
                let mut end = item.len();
                for (k, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, tests)
}

/// The paths a `use` tree names: `a::{b, c::{self, d as e}, *}` gives `a::b`, `a::c`, `a::c::d`
/// (named `e`) and `a::*`. Each with the name it is known by here.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<(ModPath, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut head: ModPath = prefix.to_vec();
        head.extend(segments(&tree[..open]));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        for part in split_top(inner) {
            expand(part, &head, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p, Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut full: ModPath = prefix.to_vec();
    full.extend(segments(path));
    if full.last().is_some_and(|s| s == "self") {
        full.pop();
    }
    let name = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
    if !full.is_empty() {
        out.push((full, name));
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Every `use` of `code` (public or not): the paths it names, whether it is a `pub use`.
fn uses(code: &str) -> Vec<(ModPath, String, bool)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].trim_end();
        let word_start = at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric();
        let statement = before.is_empty()
            || before.ends_with(';')
            || before.ends_with('}')
            || before.ends_with('{')
            || before.ends_with(']')
            || before.ends_with("pub")
            || before.ends_with(')');
        if !word_start || !statement {
            continue;
        }
        let public = before.ends_with("pub") || before.ends_with(')');
        let Some(end) = code[at..].find(';') else {
            continue;
        };
        let mut paths = Vec::new();
        expand(&code[at + 4..at + end], &[], &mut paths);
        out.extend(paths.into_iter().map(|(p, n)| (p, n, public)));
    }
    out
}

/// The `crate::`, `super::` and `self::` paths written in `code` outside `use`s.
fn inline_paths(code: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0 {
                let c = code.as_bytes()[at - 1];
                if c.is_ascii_alphanumeric() || c == b'_' || c == b':' {
                    continue;
                }
            }
            let tail: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segs = segments(&tail);
            if segs.len() > 1 {
                out.push(segs);
            }
        }
    }
    out
}

/// `path` as written in the module `here`, made absolute (from the crate root); `None` for a path
/// into another crate. A path may also start with a child module of `here` (one of `modules`).
fn absolute(path: &[String], here: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let first = path.first()?.as_str();
    let child = [here, &path[..1]].concat();
    let mut base: ModPath = match first {
        "crate" => Vec::new(),
        "self" | "super" => here.to_vec(),
        _ if modules.contains(&child) => here.to_vec(),
        _ => return None,
    };
    let mut rest = path;
    if first == "crate" || first == "self" {
        rest = &path[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

struct Crate {
    /// Module path to file, for the modules that are not tests.
    files: BTreeMap<ModPath, PathBuf>,
    /// Per module: its public re-exports, by the name they are known by, to the absolute path.
    exports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// Per module: the absolute paths it names.
    names: BTreeMap<ModPath, Vec<ModPath>>,
}

fn read_crate() -> Crate {
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let mut files = BTreeMap::new();
    let mut tests: BTreeSet<ModPath> = BTreeSet::new();
    let mut codes = BTreeMap::new();
    for file in all {
        let module = module_of(&file);
        let (code, test_mods) = without_tests(&code(&fs::read_to_string(&file).unwrap()));
        for t in test_mods {
            let mut p = module.clone();
            p.push(t);
            tests.insert(p);
        }
        codes.insert(module.clone(), code);
        files.insert(module, file);
    }
    files.retain(|m, _| !tests.iter().any(|t| m.starts_with(t)));
    let modules: BTreeSet<ModPath> = files.keys().cloned().collect();
    let mut exports = BTreeMap::new();
    let mut names = BTreeMap::new();
    for module in files.keys() {
        let code = &codes[module];
        let mut named = Vec::new();
        let mut exported = BTreeMap::new();
        for (path, name, public) in uses(code) {
            let Some(abs) = absolute(&path, module, &modules) else {
                continue;
            };
            if public {
                exported.insert(name, abs.clone());
            }
            named.push(abs);
        }
        named.extend(
            inline_paths(code)
                .iter()
                .filter_map(|p| absolute(p, module, &modules)),
        );
        exports.insert(module.clone(), exported);
        names.insert(module.clone(), named);
    }
    Crate {
        files,
        exports,
        names,
    }
}

impl Crate {
    /// The module whose file defines what `path` names, re-exports followed.
    fn definer(&self, path: &[String], depth: usize) -> Option<ModPath> {
        let module = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| self.files.contains_key(p))?;
        let Some(item) = path.get(module.len()) else {
            return Some(module);
        };
        match self.exports.get(&module).and_then(|e| e.get(item)) {
            Some(target) if depth < 16 && target.as_slice() != path => {
                let mut next = target.clone();
                next.extend(path[module.len() + 1..].iter().cloned());
                self.definer(&next, depth + 1).or(Some(module))
            }
            _ => Some(module),
        }
    }

    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (module, named) in &self.names {
            let out = edges.entry(module.clone()).or_default();
            for path in named {
                if let Some(to) = self.definer(path, 0)
                    && &to != module
                {
                    out.insert(to);
                }
            }
        }
        edges
    }
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.edges.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}
