//! Checkpoints added, replaced and removed while mounted follow the source.

use super::*;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn checkpoints_added_replaced_and_removed_while_mounted_follow_the_source() {
    require_fuse();
    let py = python();
    let tmp = TempDir::new("pickle-refresh");
    let (src, stage) = (tmp.join("src"), tmp.join("stage"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&stage).unwrap();
    let save = |file: &Path, seed: &str, legacy: bool| {
        let mut args = vec!["save", s(file), seed];
        if legacy {
            args.push("--legacy");
        }
        checkpoints(&py, &args);
    };
    save(&src.join("a.bin"), "1", false);
    let m = mount_ok(&src, "refresh=inotify");
    check_mount(&py, &[], &[(src.join("a.bin"), m.path("a.tensors"))]);
    // The conversion of a checkpoint, as the official writer makes it, against the virtual file.
    let same_as_reference = |file: &Path, virtual_file: &Path| {
        let reference = tmp.join("reference.safetensors");
        let _ = fs::remove_file(&reference);
        checkpoints(&py, &["convert", s(file), s(&reference)]);
        fs::read(virtual_file).ok() == Some(fs::read(&reference).unwrap())
    };
    assert!(same_as_reference(
        &src.join("a.bin"),
        &m.path("a.safetensors")
    ));

    // Added (written elsewhere, renamed in, as downloaders do), in the legacy format.
    save(&stage.join("b.pt"), "2", true);
    fs::rename(stage.join("b.pt"), src.join("b.pt")).unwrap();
    wait_refreshed(&m.path(""), "b.safetensors to appear", || {
        m.path("b.safetensors").exists()
    });
    assert_eq!(
        getxattr(&m.path("b.tensors/w"), "user.tensormount.format").as_deref(),
        Some("pytorch-legacy")
    );
    check_mount(&py, &[], &[(src.join("b.pt"), m.path("b.tensors"))]);
    assert!(same_as_reference(
        &src.join("b.pt"),
        &m.path("b.safetensors")
    ));

    // Replaced by rename: new tensors and a new conversion, from the new bytes.
    let old = fs::read(m.path("a.tensors/w")).unwrap();
    save(&stage.join("a.bin"), "3", false);
    fs::rename(stage.join("a.bin"), src.join("a.bin")).unwrap();
    wait_refreshed(&m.path(""), "a.bin's new tensors", || {
        fs::read(m.path("a.tensors/w")).is_ok_and(|b| b != old)
    });
    check_mount(&py, &[], &[(src.join("a.bin"), m.path("a.tensors"))]);
    assert!(same_as_reference(
        &src.join("a.bin"),
        &m.path("a.safetensors")
    ));

    // Removed: its tensors and its conversion go with it.
    fs::remove_file(src.join("b.pt")).unwrap();
    wait_refreshed(&m.path(""), "b.pt's entries to go", || {
        !m.path("b.tensors").exists() && !m.path("b.safetensors").exists()
    });
    assert_eq!(
        names(&m.path("")),
        set(&["a.bin", "a.safetensors", "a.tensors"])
    );
    m.unmount().unwrap();
}
