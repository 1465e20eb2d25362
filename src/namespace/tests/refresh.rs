//! The refresh rules: a real directory is built, changed the way writers change model
//! directories, and rescanned; the snapshots and diffs are checked against what the rules say,
//! written out here by hand.

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use super::*;

#[test]
fn an_added_file_and_directory_appear_and_nothing_else_moves() {
    let d = Dir::new("namespace");
    fs::write(d.join("config.json"), b"{}").unwrap();
    publish(&d.join("a.safetensors"), &st(&[("w", 4, 1)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let before = inos(&m.snap, "");

    publish(&d.join("b.safetensors"), &st(&[("x", 3, 7), ("y", 2, 8)]));
    fs::create_dir(d.join("sub")).unwrap();
    publish(&d.join("sub/c.safetensors"), &st(&[("z", 1, 9)]));
    let diff = m.rescan();

    assert_eq!(
        names(&m.snap, ""),
        [
            "a.safetensors",
            "a.tensors",
            "b.safetensors",
            "b.tensors",
            "config.json",
            "sub"
        ]
    );
    assert_eq!(names(&m.snap, "sub"), ["c.safetensors", "c.tensors"]);
    assert_eq!(bytes(&m.snap, "b.tensors/x"), [7; 3]);
    assert_eq!(bytes(&m.snap, "sub/c.tensors/z"), [9]);
    let after = inos(&m.snap, "");
    for entry in &before {
        assert!(after.contains(entry), "{entry:?} moved");
    }
    assert!(diff.removed.is_empty());
    assert_eq!(diff.changed_dirs, [ROOT]);
    // b.safetensors, b.tensors, x, y, sub, and its three entries.
    assert_eq!(diff.added, 8);
    assert_eq!(diff.new_dirs.len(), 1);
}

#[test]
fn a_removed_file_takes_its_tensor_directory_along() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 4, 1)]));
    publish(&d.join("b.safetensors"), &st(&[("w", 4, 2)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let b = inos(&m.snap, "b.tensors");

    fs::remove_file(d.join("a.safetensors")).unwrap();
    let diff = m.rescan();
    assert_eq!(names(&m.snap, ""), ["b.safetensors", "b.tensors"]);
    assert_eq!(removed_names(&diff), ["a.safetensors", "a.tensors"]);
    // a.tensors and its one tensor, and the mirrored file.
    assert_eq!(diff.detached.len(), 3);
    assert_eq!(inos(&m.snap, "b.tensors"), b);
}

#[test]
fn a_file_replaced_by_rename_gets_new_inodes_its_siblings_keep_theirs() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 4, 1), ("v", 2, 3)]));
    publish(&d.join("b.safetensors"), &st(&[("w", 4, 2)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let (a_dir, a_w) = (at(&m.snap, "a.tensors"), at(&m.snap, "a.tensors/w"));
    let b = inos(&m.snap, "b.tensors");

    publish(&d.join("a.safetensors"), &st(&[("w", 4, 5), ("v", 2, 3)]));
    let diff = m.rescan();
    assert_eq!(bytes(&m.snap, "a.tensors/w"), [5; 4]);
    // The directory stays; every tensor of the new version is a new inode, even one whose bytes
    // happen to be the same (`v`): an inode stands for one version of its source.
    assert_eq!(at(&m.snap, "a.tensors"), a_dir);
    assert_ne!(at(&m.snap, "a.tensors/w"), a_w);
    assert_eq!(inos(&m.snap, "b.tensors"), b);
    assert_eq!(
        removed_names(&diff),
        ["a.safetensors", "v", "w"],
        "replaced names"
    );
    assert_eq!(diff.replaced, 3);
    assert_eq!(diff.added, 0);
    let mut changed = diff.changed_dirs.clone();
    changed.sort();
    assert_eq!(changed, [ROOT, a_dir.unwrap()]);
}

#[test]
fn a_change_that_touches_nothing_the_tree_shows_keeps_every_inode() {
    let d = Dir::new("namespace");
    fs::create_dir(d.join("m")).unwrap();
    publish(&d.join("m/a.safetensors"), &st(&[("w", 4, 1)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let before = inos(&m.snap, "");
    let diff = m.rescan();
    assert!(diff.is_empty() && diff.rescanned.is_empty(), "{diff:?}");
    assert_eq!(inos(&m.snap, ""), before);

    // A file created and removed again changes the directory's times only.
    fs::write(d.join("m/tmp"), b"x").unwrap();
    fs::remove_file(d.join("m/tmp")).unwrap();
    let diff = m.rescan();
    assert_eq!(inos(&m.snap, ""), before);
    assert!(diff.removed.is_empty() && diff.added == 0, "{diff:?}");
}

#[test]
fn a_file_rewritten_in_place_is_interpreted_only_once_it_has_settled() {
    let d = Dir::new("namespace");
    let a = d.join("a.safetensors");
    publish(&a, &st(&[("w", 4, 1)]));
    let settle = Duration::from_millis(200);
    let mut m = Mount::new(d.path(), settle);

    rewrite(&a, &st(&[("w", 4, 2), ("new", 1, 3)]));
    let diff = m.rescan();
    assert_eq!(
        names(&m.snap, ""),
        ["a.safetensors"],
        "in flux: no a.tensors"
    );
    let error = m.snap.xattr(
        at(&m.snap, "a.safetensors").unwrap(),
        "user.safetensors.error",
    );
    let error = String::from_utf8(error.unwrap()).unwrap();
    assert!(error.contains("being written"), "{error}");
    assert_eq!(removed_names(&diff), ["a.safetensors", "a.tensors"]);
    let (_, dir) = m.writer.deadline().expect("a settle deadline");
    assert_eq!(dir, ROOT);
    // However often it is looked at, it stays uninterpreted until the clock reaches the deadline.
    m.clock.advance(Duration::from_millis(150));
    m.rescan();
    assert_eq!(names(&m.snap, ""), ["a.safetensors"], "still in flux");

    m.wait_until_settled();
    m.rescan();
    assert_eq!(names(&m.snap, "a.tensors"), ["new", "w"]);
    assert_eq!(bytes(&m.snap, "a.tensors/w"), [2; 4]);
    assert!(m.writer.deadline().is_none());
}

#[test]
fn a_file_growing_in_place_is_mirrored_but_not_interpreted_until_complete_and_settled() {
    let d = Dir::new("namespace");
    let full = st(&[("w", 4096, 1)]);
    let a = d.join("a.safetensors");
    fs::write(&a, &full[..full.len() / 2]).unwrap();
    let settle = Duration::from_millis(200);
    let mut m = Mount::new(d.path(), settle);
    assert_eq!(names(&m.snap, ""), ["a.safetensors"]);
    let error = String::from_utf8(
        m.snap
            .xattr(
                at(&m.snap, "a.safetensors").unwrap(),
                "user.safetensors.error",
            )
            .unwrap(),
    )
    .unwrap();
    assert!(error.contains("MetadataIncompleteBuffer"), "{error}");

    let mut f = fs::OpenOptions::new().append(true).open(&a).unwrap();
    f.write_all(&full[full.len() / 2..]).unwrap();
    drop(f);
    m.rescan();
    assert_eq!(
        names(&m.snap, ""),
        ["a.safetensors"],
        "complete, not settled"
    );
    assert_eq!(bytes(&m.snap, "a.safetensors"), full);
    m.wait_until_settled();
    m.rescan();
    assert_eq!(bytes(&m.snap, "a.tensors/w"), [1; 4096]);
}

#[test]
fn partial_files_are_mirrored_never_interpreted() {
    let d = Dir::new("namespace");
    let valid = st(&[("w", 4, 1)]);
    fs::create_dir_all(d.join(".locks/models--x")).unwrap();
    for name in [
        "model.safetensors.incomplete",
        ".tmpAb12Cd",
        ".locks/models--x/m.safetensors",
    ] {
        fs::write(d.join(name), &valid).unwrap();
    }
    let m = Mount::new(d.path(), SETTLE);
    assert_eq!(
        names(&m.snap, ""),
        [".locks", ".tmpAb12Cd", "model.safetensors.incomplete"]
    );
    assert_eq!(names(&m.snap, ".locks/models--x"), ["m.safetensors"]);
}

#[test]
fn a_merged_set_is_shown_only_while_complete_and_keeps_inodes_of_unchanged_shards() {
    let d = Dir::new("namespace");
    let (s1, s2) = (
        "m-00001-of-00002.safetensors",
        "m-00002-of-00002.safetensors",
    );
    publish(&d.join(s1), &st(&[("a", 2, 1), ("b", 2, 2)]));
    publish(&d.join(s2), &st(&[("c", 2, 3)]));
    let idx = index(&[("a", s1), ("b", s1), ("c", s2)]);
    publish(&d.join("m.safetensors.index.json"), &idx);
    let mut m = Mount::new(d.path(), SETTLE);
    assert_eq!(names(&m.snap, "m.tensors"), ["__metadata__", "a", "b", "c"]);
    let (a, c) = (at(&m.snap, "m.tensors/a"), at(&m.snap, "m.tensors/c"));
    let merged = at(&m.snap, "m.tensors");

    // A shard removed (as save_pretrained removes stale shards first): no merged directory.
    fs::remove_file(d.join(s2)).unwrap();
    m.rescan();
    assert!(at(&m.snap, "m.tensors").is_none());
    let error = m.snap.xattr(
        at(&m.snap, "m.safetensors.index.json").unwrap(),
        "user.safetensors.error",
    );
    assert!(
        String::from_utf8(error.unwrap())
            .unwrap()
            .contains("missing")
    );

    // It comes back, with new bytes: shown again; shard 1's tensors were never replaced.
    publish(&d.join(s2), &st(&[("c", 2, 9)]));
    m.rescan();
    assert_eq!(bytes(&m.snap, "m.tensors/c"), [9, 9]);
    assert_ne!(at(&m.snap, "m.tensors/c"), c);
    assert_eq!(names(&m.snap, "m.tensors"), ["__metadata__", "a", "b", "c"]);
    let a_again = at(&m.snap, "m.tensors/a");
    assert_ne!(
        a_again, a,
        "the merged directory was gone, so its entries are new"
    );
    assert_ne!(at(&m.snap, "m.tensors"), merged);

    // Now one shard replaced while the set stays valid: shard 1's tensors keep their inodes.
    let m_dir = at(&m.snap, "m.tensors");
    publish(&d.join(s2), &st(&[("c", 2, 4)]));
    let diff = m.rescan();
    assert_eq!(at(&m.snap, "m.tensors"), m_dir);
    assert_eq!(at(&m.snap, "m.tensors/a"), a_again);
    assert_eq!(bytes(&m.snap, "m.tensors/c"), [4, 4]);
    assert_eq!(removed_names(&diff), ["c", "c", s2]);
}

#[test]
fn an_index_rewritten_in_place_hides_its_set_until_it_settles() {
    let d = Dir::new("namespace");
    let s1 = "m-00001-of-00001.safetensors";
    publish(&d.join(s1), &st(&[("a", 2, 1)]));
    let i = d.join("m.safetensors.index.json");
    publish(&i, &index(&[("a", s1)]));
    let mut m = Mount::new(d.path(), Duration::from_millis(200));
    assert!(at(&m.snap, "m.tensors").is_some());
    rewrite(&i, &index(&[("a", s1)])[..]);
    // Same bytes, but the same inode was seen changing.
    fs::File::options()
        .append(true)
        .open(&i)
        .unwrap()
        .write_all(b" ")
        .unwrap();
    m.rescan();
    assert!(at(&m.snap, "m.tensors").is_none());
    m.wait_until_settled();
    m.rescan();
    assert!(at(&m.snap, "m.tensors").is_some());
}

/// The target of the kept link at `path`.
fn link_target(s: &Snapshot, path: &str) -> Option<Vec<u8>> {
    match &s.node(at(s, path)?)?.content {
        Content::Link(t) => Some(t.to_vec()),
        _ => None,
    }
}

#[test]
fn a_directory_replaced_through_its_link_is_a_new_subtree() {
    let d = Dir::new("namespace");
    for v in ["v1", "v2"] {
        fs::create_dir(d.join(v)).unwrap();
        publish(&d.join(format!("{v}/m.safetensors")), &st(&[("w", 1, 1)]));
    }
    // An absolute link is followed: the directory it leads to is shown under its name.
    symlink(d.join("v1"), d.join("current")).unwrap();
    let mut m = Mount::new(d.path(), SETTLE);
    let v1 = inos(&m.snap, "v1");
    let old = at(&m.snap, "current/m.tensors/w");
    assert!(old.is_some());

    // `ln -sfn v2 current`, the usual atomic switch.
    symlink(d.join("v2"), d.join("current.new")).unwrap();
    fs::rename(d.join("current.new"), d.join("current")).unwrap();
    let diff = m.rescan();
    assert_eq!(removed_names(&diff), ["current"]);
    assert_eq!(diff.gone_dirs.len(), 1);
    assert_eq!(diff.new_dirs.len(), 1);
    assert_ne!(at(&m.snap, "current/m.tensors/w"), old);
    assert_eq!(inos(&m.snap, "v1"), v1);
}

#[test]
fn a_relative_link_inside_source_stays_a_link_and_a_switch_replaces_it() {
    let d = Dir::new("namespace");
    for v in ["v1", "v2"] {
        fs::create_dir(d.join(v)).unwrap();
        publish(&d.join(format!("{v}/m.safetensors")), &st(&[("w", 1, 1)]));
    }
    symlink("v1", d.join("current")).unwrap();
    symlink("v1/m.safetensors", d.join("m.safetensors")).unwrap();
    let mut m = Mount::new(d.path(), SETTLE);
    let (v1, v2) = (inos(&m.snap, "v1"), inos(&m.snap, "v2"));
    assert_eq!(link_target(&m.snap, "current").as_deref(), Some(&b"v1"[..]));
    assert_eq!(
        m.snap
            .node(at(&m.snap, "current").unwrap())
            .unwrap()
            .attr
            .kind,
        Kind::Symlink
    );
    // A link to a safetensors file gets the file's tensors beside it.
    assert_eq!(
        link_target(&m.snap, "m.safetensors").as_deref(),
        Some(&b"v1/m.safetensors"[..])
    );
    assert_eq!(names(&m.snap, "m.tensors"), ["w"]);
    assert_eq!(
        bytes(&m.snap, "m.tensors/w"),
        bytes(&m.snap, "v1/m.tensors/w")
    );

    symlink("v2", d.join("current.new")).unwrap();
    fs::rename(d.join("current.new"), d.join("current")).unwrap();
    let diff = m.rescan();
    assert_eq!(removed_names(&diff), ["current"]);
    assert!(diff.gone_dirs.is_empty() && diff.new_dirs.is_empty());
    assert_eq!(link_target(&m.snap, "current").as_deref(), Some(&b"v2"[..]));
    assert_eq!((inos(&m.snap, "v1"), inos(&m.snap, "v2")), (v1, v2));
}

#[test]
fn a_real_entry_appearing_takes_the_name_of_a_generated_directory() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 1, 1)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let generated = at(&m.snap, "a.tensors").unwrap();
    fs::create_dir(d.join("a.tensors")).unwrap();
    fs::write(d.join("a.tensors/real.txt"), b"real").unwrap();
    m.rescan();
    assert_eq!(names(&m.snap, "a.tensors"), ["real.txt"]);
    assert_ne!(at(&m.snap, "a.tensors"), Some(generated));
    fs::remove_dir_all(d.join("a.tensors")).unwrap();
    m.rescan();
    assert_eq!(names(&m.snap, "a.tensors"), ["w"]);
}

#[test]
fn a_single_file_source_is_followed_through_renames_and_removal() {
    let d = Dir::new("namespace");
    let a = d.join("a.safetensors");
    publish(&a, &st(&[("w", 4, 1)]));
    let mut m = Mount::new(&a, SETTLE);
    assert_eq!(names(&m.snap, ""), ["w"]);
    let w = at(&m.snap, "w");

    publish(&a, &st(&[("w", 4, 2), ("x", 1, 3)]));
    let diff = m.rescan();
    assert_eq!(names(&m.snap, ""), ["w", "x"]);
    assert_eq!(bytes(&m.snap, "w"), [2; 4]);
    assert_ne!(at(&m.snap, "w"), w);
    assert_eq!(diff.changed_dirs, [ROOT]);

    fs::remove_file(&a).unwrap();
    m.rescan();
    assert!(names(&m.snap, "").is_empty());
    publish(&a, &st(&[("w", 4, 5)]));
    m.rescan();
    assert_eq!(bytes(&m.snap, "w"), [5; 4]);
    // Nothing changed: nothing rebuilt.
    assert!(m.rescan().rescanned.is_empty());
}

#[test]
fn strict_applies_at_mount_only() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 1, 1)]));
    let strict = Options {
        strict: true,
        ..options(SETTLE)
    };
    let (mut w, snap) = Writer::build(&sources(), d.path(), &strict).unwrap();
    fs::write(d.join("bad.safetensors"), b"not safetensors at all").unwrap();
    let (snap, _) = w.rescan(&snap, &w.dirs(&snap));
    assert_eq!(
        names(&snap, ""),
        ["a.safetensors", "a.tensors", "bad.safetensors"]
    );
    assert!(Writer::build(&sources(), d.path(), &strict).is_err());
}

/// A DCP checkpoint copied `.metadata` first: refused while a data file it names is missing,
/// and read again (a new source of the same `.metadata`, which keeps its inode) once that data
/// file arrives, though `.metadata` did not change.
#[test]
fn a_checkpoint_is_read_again_when_a_data_file_it_missed_arrives() {
    let d = Dir::new("namespace");
    let made = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/format/dcp/testdata/tp");
    fs::create_dir(d.join("ckpt")).unwrap();
    for name in [".metadata", "__0_0.distcp"] {
        fs::copy(made.join(name), d.join("ckpt").join(name)).unwrap();
    }
    let mut m = Mount::new(d.path(), SETTLE);
    assert_eq!(names(&m.snap, "ckpt"), [".metadata", "__0_0.distcp"]);
    let metadata = at(&m.snap, "ckpt/.metadata").unwrap();
    let error = m.snap.xattr(metadata, "user.tensormount.error").unwrap();
    let error = String::from_utf8(error).unwrap();
    assert!(
        error.contains("\"__1_0.distcp\" is missing [DataFile]"),
        "{error}"
    );
    // Asked again with nothing changed, it is not read again.
    let ckpt = at(&m.snap, "ckpt").unwrap();
    let (snap, diff) = m.writer.rescan(&m.snap, &[ckpt]);
    assert!(diff.rescanned.is_empty());
    m.snap = snap;

    let tmp = d.join("ckpt/.incoming");
    fs::copy(made.join("__1_0.distcp"), &tmp).unwrap();
    fs::rename(&tmp, d.join("ckpt/__1_0.distcp")).unwrap();
    let (snap, _) = m.writer.rescan(&m.snap, &[ckpt]);
    m.snap = snap;
    assert!(at(&m.snap, "ckpt/checkpoint.tensors").is_some());
    assert!(at(&m.snap, "ckpt/model.safetensors").is_some());
    assert_eq!(at(&m.snap, "ckpt/.metadata"), Some(metadata));
    assert_eq!(m.snap.xattr(metadata, "user.tensormount.error"), None);
}

#[test]
fn only_the_directories_asked_for_are_read_again() {
    let d = Dir::new("namespace");
    for m in ["m1", "m2"] {
        fs::create_dir(d.join(m)).unwrap();
        publish(&d.join(format!("{m}/a.safetensors")), &st(&[("w", 1, 1)]));
    }
    let mut m = Mount::new(d.path(), SETTLE);
    publish(&d.join("m1/b.safetensors"), &st(&[("w", 1, 2)]));
    publish(&d.join("m2/b.safetensors"), &st(&[("w", 1, 2)]));
    let m1 = at(&m.snap, "m1").unwrap();
    let (snap, diff) = m.writer.rescan(&m.snap, &[m1]);
    assert_eq!(diff.rescanned, [d.join("m1")]);
    assert!(at(&snap, "m1/b.tensors").is_some());
    assert!(at(&snap, "m2/b.tensors").is_none());
    m.snap = snap;
}

#[test]
fn only_directories_whose_entries_changed_are_reported_changed() {
    let d = Dir::new("namespace");
    let (s1, s2) = (
        "m-00001-of-00002.safetensors",
        "m-00002-of-00002.safetensors",
    );
    publish(
        &d.join(s1),
        &st(&[("layers.0.w", 2, 1), ("layers.0.b", 2, 2)]),
    );
    publish(&d.join(s2), &st(&[("layers.1.w", 2, 3)]));
    publish(
        &d.join("m.safetensors.index.json"),
        &index(&[("layers.0.w", s1), ("layers.0.b", s1), ("layers.1.w", s2)]),
    );
    let tree = Options {
        layout: Layout::Tree,
        ..options(SETTLE)
    };
    let (mut w, snap) = Writer::build(&sources(), d.path(), &tree).unwrap();
    assert_eq!(names(&snap, "m.tensors/layers"), ["0", "1"]);
    let layer0 = inos(&snap, "m.tensors/layers/0");

    publish(&d.join(s2), &st(&[("layers.1.w", 2, 4)]));
    let (new, diff) = w.rescan(&snap, &w.dirs(&snap));
    assert_eq!(inos(&new, "m.tensors/layers/0"), layer0);
    let mut changed = diff.changed_dirs.clone();
    changed.sort();
    // The shard's own tensor directories take their times from the shard; the merged ones from
    // the index, which did not change: of those, only the one holding the replaced tensor.
    let mut want: Vec<Ino> = [
        "",
        "m-00002-of-00002.tensors",
        "m-00002-of-00002.tensors/layers",
        "m-00002-of-00002.tensors/layers/1",
        "m.tensors/layers/1",
    ]
    .iter()
    .map(|p| at(&new, p).unwrap())
    .collect();
    want.sort();
    assert_eq!(changed, want);
}

#[test]
fn a_single_file_source_rewritten_in_place_shows_no_tensors_until_it_settles() {
    let d = Dir::new("namespace");
    let a = d.join("a.safetensors");
    publish(&a, &st(&[("w", 4, 1)]));
    let mut m = Mount::new(&a, Duration::from_millis(200));
    rewrite(&a, &st(&[("w", 4, 2)]));
    m.rescan();
    assert!(names(&m.snap, "").is_empty(), "in flux");
    let (_, dir) = m.writer.deadline().expect("a settle deadline");
    assert_eq!(dir, ROOT);
    m.wait_until_settled();
    m.rescan();
    assert_eq!(bytes(&m.snap, "w"), [2; 4]);
}
