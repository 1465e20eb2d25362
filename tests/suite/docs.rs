//! The man page and the shell completions are generated from the command line's one definition
//! (`cli::command()`, with `cli::MOUNT_OPTIONS`), so they never disagree with `--help`; the README's
//! option table is held to the same list. Needs neither FUSE nor root.
//!
//! After changing the command line: `TENSORMOUNT_BLESS=1 cargo test --release --test docs`
//! rewrites `doc/tensormount.8` and `completions/`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap_complete::Shell;
use tensormount::cli::{self, IGNORED, MOUNT_OPTIONS};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Compares `generated` with the committed file at `rel`, or writes it when blessing.
fn check_committed(rel: &str, generated: &[u8]) {
    let path = repo(rel);
    if std::env::var_os("TENSORMOUNT_BLESS").is_some() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, generated).unwrap();
        return;
    }
    let committed = fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{rel} is not what the command line generates; run \
         TENSORMOUNT_BLESS=1 cargo test --release --test docs"
    );
}

/// The roff of the man page: clap's sections, the mount options, then the hand-written sections.
fn man_page() -> Vec<u8> {
    let man = clap_mangen::Man::new(cli::command())
        .section("8")
        .manual("System Administration")
        .source(format!("tensormount {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    man.render_synopsis_section(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    out.extend_from_slice(b".SH \"MOUNT OPTIONS\"\n");
    out.extend_from_slice(
        b"Comma\\-separated after \\fB\\-o\\fR (\\fB\\\\,\\fR for a literal comma), repeatable, \
          or in the fourth field of fstab. Any other option is an error that names it.\n",
    );
    for (name, what) in MOUNT_OPTIONS {
        out.extend_from_slice(format!(".TP\n.B {}\n{}\n", roff(name), roff(what)).as_bytes());
    }
    out.extend_from_slice(
        format!(
            ".TP\n.B {}, x\\-*, comment=*\naccepted and ignored (what mount(8), mount.fuse3 and \
             fstab pass)\n",
            roff(&IGNORED.join(", "))
        )
        .as_bytes(),
    );
    out.extend_from_slice(&fs::read(repo("doc/man-sections.roff")).unwrap());
    man.render_version_section(&mut out).unwrap();
    out
}

/// Text escaped for roff: backslashes and hyphens; a leading dot or quote would be a request.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

#[test]
fn the_man_page_is_generated_from_the_command_line_and_renders_without_warnings() {
    let page = man_page();
    check_committed("doc/tensormount.8", &page);
    let text = String::from_utf8(page).unwrap();
    for section in [
        "SYNOPSIS",
        "OPTIONS",
        "MOUNT OPTIONS",
        "LAYOUT",
        "EXTENDED ATTRIBUTES",
        "FSTAB AND SYSTEMD",
        "SIGNALS",
        "EXIT STATUS",
        "FILES",
        "EXAMPLES",
    ] {
        assert!(
            text.contains(&format!(".SH {section}"))
                || text.contains(&format!(".SH \"{section}\"")),
            "{section}"
        );
    }
    crate::common::require_tools(&["groff"]);
    let out = Command::new("groff")
        .args(["-ww", "-man", "-Tutf8", "-z"])
        .arg(repo("doc/tensormount.8"))
        .output()
        .unwrap();
    assert!(out.status.success(), "groff failed");
    assert!(
        out.stderr.is_empty(),
        "groff warns about doc/tensormount.8:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn shell_completions_are_generated_from_the_command_line_and_complete_mount_options() {
    for (shell, rel) in [
        (Shell::Bash, "completions/tensormount.bash"),
        (Shell::Zsh, "completions/_tensormount"),
        (Shell::Fish, "completions/tensormount.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cli::command(), "tensormount", &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        for name in ["allow_other", "layout=tree", "refresh=poll", "source_idle="] {
            assert!(text.contains(name), "{rel} does not offer {name}");
        }
        check_committed(rel, &out);
    }
}

/// The option keys of a list of option spellings: `layout=flat|tree` and `layout=tree` give
/// `layout`.
fn keys<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    names
        .into_iter()
        .map(|n| n.split('=').next().unwrap_or(n).to_string())
        .collect()
}

#[test]
fn help_man_page_and_readme_list_the_same_mount_options() {
    let listed = keys(MOUNT_OPTIONS.iter().map(|(n, _)| *n));
    let help = Command::new(env!("CARGO_BIN_EXE_tensormount"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let man = fs::read_to_string(repo("doc/tensormount.8")).unwrap();
    for (name, _) in MOUNT_OPTIONS {
        assert!(help.contains(name), "--help lacks {name}");
        assert!(man.contains(&roff(name)), "the man page lacks {name}");
    }
    for name in IGNORED {
        assert!(help.contains(name), "--help lacks ignored option {name}");
    }

    // The README's table: one row per option, the option spellings in backquotes in its first
    // cell; the last row lists the ignored ones.
    let readme = fs::read_to_string(repo("README.md")).unwrap();
    let table = readme
        .split("### Options (`-o`")
        .nth(1)
        .and_then(|t| t.split("Any other option").next())
        .expect("README has the options table");
    let mut documented = BTreeSet::new();
    let mut ignored = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split(" | ").next().unwrap_or_default();
        let spellings: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        if row.contains("accepted and ignored") {
            ignored.extend(spellings.iter().map(|s| s.to_string()));
        } else {
            documented.extend(keys(spellings.iter().copied()));
        }
    }
    // `inotify`, `poll`, `off` in the refresh row are values, not options.
    documented.retain(|k| !["inotify", "poll", "off"].contains(&k.as_str()));
    assert_eq!(
        documented, listed,
        "README option table against cli::MOUNT_OPTIONS"
    );
    let mut want: BTreeSet<String> = IGNORED.iter().map(|s| s.to_string()).collect();
    want.extend(["x-*".to_string(), "comment=*".to_string()]);
    assert_eq!(
        ignored, want,
        "README's ignored options against cli::IGNORED"
    );
}
