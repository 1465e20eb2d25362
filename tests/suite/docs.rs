//! The man page and the shell completions are generated from the command line's one definition
//! (`cli::command()`, with `cli::mount_options()` and `cli::IGNORED`), so they never disagree with
//! `--help`. The committed files are held to what the code generates, and the man page's MOUNT
//! OPTIONS section, parsed back, must list exactly the options the code knows. Needs neither FUSE
//! nor root; the man page test needs `groff`.
//!
//! After changing the command line or `doc/man-sections.roff`:
//! `TENSORMOUNT_BLESS=1 cargo test --release --test suite docs::` rewrites `doc/tensormount.8` and
//! `completions/`; commit them with the change. Blessing is refused where `CI` is set: CI checks
//! the committed files and never rewrites them.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap_complete::Shell;
use tensormount::command::cli::{self, IGNORED};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Compares `generated` with the committed file at `rel`, or writes it when blessing.
fn check_committed(rel: &str, generated: &[u8]) {
    let path = repo(rel);
    if std::env::var_os("TENSORMOUNT_BLESS").is_some() {
        assert!(
            std::env::var_os("CI").is_none(),
            "TENSORMOUNT_BLESS is refused because CI is set: CI checks {rel} against what the \
             command line generates and never rewrites it; bless outside CI (unset CI) and commit \
             the result"
        );
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, generated).unwrap();
        return;
    }
    let committed = fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{rel} is not what the command line generates; run \
         TENSORMOUNT_BLESS=1 cargo test --release --test suite docs::"
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
    for (name, what) in cli::mount_options() {
        out.extend_from_slice(format!(".TP\n.B {}\n{}\n", roff(&name), roff(&what)).as_bytes());
    }
    out.extend_from_slice(
        format!(
            ".TP\n.B {}, x\\-*, comment=*\naccepted and ignored (what mount(8), mount.fuse3 and \
             fstab pass)\n",
            roff(&IGNORED.join(", "))
        )
        .as_bytes(),
    );
    out.extend_from_slice(&commands());
    out.extend_from_slice(&fs::read(repo("doc/man-sections.roff")).unwrap());
    man.render_version_section(&mut out).unwrap();
    out
}

/// The COMMANDS section: each subcommand's usage, what it does, and its options and arguments.
fn commands() -> Vec<u8> {
    let mut out = b".SH COMMANDS\n".to_vec();
    let mut top = cli::command();
    let subs: Vec<clap::Command> = top.get_subcommands_mut().map(|c| c.clone()).collect();
    for mut sub in subs {
        let usage = sub.render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ");
        out.extend_from_slice(format!(".SS \"tensormount {}\"\n", roff(usage)).as_bytes());
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            for para in about.to_string().split("\n\n") {
                let para = para.replace('\n', " ").replace('`', "");
                out.extend_from_slice(format!("{}\n.PP\n", roff(&para)).as_bytes());
            }
        }
        for arg in sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_id() != "help")
        {
            let values = arg
                .get_value_names()
                .filter(|_| arg.get_action().takes_values());
            let name = match (arg.get_long(), values) {
                (Some(l), Some(v)) => format!("--{l} {}", v[0]),
                (Some(l), None) => format!("--{l}"),
                (None, _) => arg.get_id().to_string().to_uppercase(),
            };
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            out.extend_from_slice(format!(".TP\n.B {}\n{}\n", roff(&name), roff(&help)).as_bytes());
        }
    }
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
        "COMMANDS",
        "INTEGRITY",
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

/// Text with the roff escapes that [`roff`] writes undone.
fn unroff(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('-')) => {
                out.push('-');
                chars.next();
            }
            ('\\', Some('e')) => {
                out.push('\\');
                chars.next();
            }
            ('\\', Some('&')) => {
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// The option entries of the man page's MOUNT OPTIONS section, read back from the roff: each
/// `.TP` is followed by a `.B` line naming one option, or several separated by `, ` (the ignored
/// ones share an entry).
fn man_page_mount_options(man: &str) -> Vec<String> {
    let section = man
        .split(".SH \"MOUNT OPTIONS\"\n")
        .nth(1)
        .and_then(|rest| rest.split("\n.SH ").next())
        .expect("doc/tensormount.8 has a MOUNT OPTIONS section");
    let lines: Vec<&str> = section.lines().collect();
    let mut entries = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with(".B ") {
            assert!(
                i > 0 && lines[i - 1] == ".TP",
                "MOUNT OPTIONS: {line:?} is not the tag of a .TP entry"
            );
        }
        if *line == ".TP" {
            let tag = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix(".B "))
                .unwrap_or_else(|| {
                    panic!(
                        "MOUNT OPTIONS: a .TP not followed by a .B option line: {:?}",
                        lines.get(i + 1)
                    )
                });
            entries.extend(unroff(tag).split(", ").map(str::to_string));
        }
    }
    entries
}

#[test]
fn help_and_man_page_list_every_mount_option() {
    let help = Command::new(env!("CARGO_BIN_EXE_tensormount"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for (name, _) in cli::mount_options() {
        assert!(help.contains(&name), "--help lacks {name}");
    }
    for name in IGNORED {
        assert!(help.contains(name), "--help lacks ignored option {name}");
    }

    // The committed man page, parsed as the independent side: every entry of its MOUNT OPTIONS
    // section is an option the code knows, and every option the code knows is there. A blessing
    // run rewrites the file meanwhile (another test), so it reads what it is writing instead.
    let man = if std::env::var_os("TENSORMOUNT_BLESS").is_some() {
        String::from_utf8(man_page()).unwrap()
    } else {
        fs::read_to_string(repo("doc/tensormount.8")).unwrap()
    };
    let entries = man_page_mount_options(&man);
    let documented: BTreeSet<String> = entries.iter().cloned().collect();
    assert_eq!(
        documented.len(),
        entries.len(),
        "doc/tensormount.8 lists a mount option twice: {entries:?}"
    );
    let mut known: BTreeSet<String> = cli::mount_options().into_iter().map(|(n, _)| n).collect();
    known.extend(IGNORED.iter().map(|s| s.to_string()));
    known.extend(["x-*".to_string(), "comment=*".to_string()]);
    let unknown: Vec<&String> = documented.difference(&known).collect();
    let missing: Vec<&String> = known.difference(&documented).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "doc/tensormount.8 MOUNT OPTIONS against cli::mount_options() and cli::IGNORED: \
         unknown {unknown:?}, missing {missing:?}"
    );
}
