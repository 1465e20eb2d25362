//! Malicious pickles never run, and their globals are named.

use super::*;

/// Item 4: pickles that call `os.system` & co. never run, in the mount or anywhere; the checkpoint
/// is mirrored with an error naming exactly the globals that `torch.load(weights_only=True)` would
/// refuse (between what picklescan calls dangerous and what it does in strict mode); no virtual
/// file; the real tensors beside the calls are still served.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn malicious_pickles_never_run_and_their_globals_are_named() {
    let marker_dir = TempDir::new("pickle-marker");
    let marker = marker_dir.join("MARKER");
    let (py, tmp, kept) = write("pickle-malicious", &["write-malicious", s(&marker)]);
    let fx = tmp.join("fx");
    assert!(!marker.exists(), "writing the fixtures ran them");
    let m = mount_ok(&fx, "");
    touch_everything(&m.dir);
    assert!(
        !marker.exists(),
        "a malicious pickle ran: {} exists after mounting and reading everything",
        marker.display()
    );

    let kept = kept.as_object().unwrap();
    let evil: Vec<&String> = kept.keys().filter(|k| k.starts_with("evil_")).collect();
    assert_eq!(evil.len(), 5, "{kept:?}");
    let mut args = vec!["globals".to_string()];
    args.extend(evil.iter().map(|f| s(&fx.join(f)).to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let globals = json(&checkpoints(&py, &args));
    assert!(
        !marker.exists(),
        "the oracle's globals command ran a pickle"
    );

    // The plain pickle last, so that a failure there leaves the checkpoints checked.
    let mut order: Vec<(&String, &Value)> = kept.iter().collect();
    order.sort_by_key(|(file, _)| *file == "evil_plain.pth");
    for (file, want) in order {
        let mirrored = m.path(file);
        assert!(
            fs::read(&mirrored).unwrap() == fs::read(fx.join(file)).unwrap(),
            "{file}: mirrored bytes differ"
        );
        // The real tensors, with their bytes.
        let tensors = want["tensors"].as_object().unwrap();
        if !tensors.is_empty() {
            let dir = m.path(tensors_dir(file));
            let names_want: BTreeSet<String> = tensors.keys().map(|p| escaped(p)).collect();
            assert_eq!(names(&dir), names_want, "{file}");
            for (tpath, t) in tensors {
                let path = dir.join(escaped(tpath));
                let hex: String = fs::read(&path)
                    .unwrap()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(hex, t["hex"].as_str().unwrap(), "{file}: {tpath}");
                assert_eq!(
                    getxattr(&path, "user.safetensors.dtype").as_deref(),
                    t["dtype"].as_str(),
                    "{file}: {tpath}"
                );
                assert_eq!(
                    getxattr(&path, "user.safetensors.shape"),
                    Some(shape_text(&t["shape"])),
                    "{file}: {tpath}"
                );
            }
        }
        let virt = m.path(virtual_name(file));
        if !file.starts_with("evil_") {
            // The control: a clean checkpoint beside them is converted, with no error.
            assert!(virt.is_file(), "{file}: no {}", virt.display());
            assert_eq!(error_of(&mirrored), None, "{file}");
            continue;
        }
        assert!(
            !virt.exists(),
            "{file}: a virtual {} is offered for a malicious pickle",
            virt.display()
        );
        let error = getxattr(&mirrored, "user.tensormount.error").unwrap_or_else(|| {
            let plain = match file.as_str() {
                "evil_plain.pth" => " (a plain pickle, not a torch checkpoint, calling os.system)",
                _ => "",
            };
            panic!("{file}{plain}: no user.tensormount.error")
        });
        let g = &globals[s(&fx.join(file))];
        let found = strings(&g["globals"]);
        let allowed = strings(&g["allowed"]);
        let dangerous: BTreeSet<String> = found.difference(&allowed).cloned().collect();
        assert!(!dangerous.is_empty(), "{file}: {g}");
        let named: BTreeSet<String> = found
            .iter()
            .filter(|x| names_global(&error, x))
            .cloned()
            .collect();
        assert_eq!(
            named, dangerous,
            "{file}: the error names these of the pickle's globals {found:?}: {error}"
        );
        let scan = strings(&g["picklescan"]);
        let strict = strings(&g["picklescan_strict"]);
        assert!(
            scan.is_subset(&named) && named.is_subset(&strict),
            "{file}: named {named:?}; picklescan: {scan:?}, strict: {strict:?}"
        );
    }
    // What pickle actually writes, by hand: os.system as posix.system, builtins as __builtin__
    // (protocol 2), subprocess.Popen as commands.Popen (Python 2's name).
    for (file, g) in [
        ("evil_os.bin", "posix.system"),
        ("evil_legacy.pt", "__builtin__.eval"),
        ("evil_popen.ckpt", "commands.Popen"),
        ("evil_popen.ckpt", "runpy._run_code"),
        ("evil_popen.ckpt", "__builtin__.__import__"),
        ("evil_proto4.pth", "builtins.exec"),
        ("evil_plain.pth", "os.system"),
    ] {
        let error = getxattr(&m.path(file), "user.tensormount.error").unwrap_or_default();
        assert!(names_global(&error, g), "{file}: {g} not named: {error}");
    }
    assert!(!marker.exists(), "a malicious pickle ran");
    // The daemon still serves.
    assert_eq!(fs::read(m.path("good.tensors/fine")).unwrap().len(), 12);
}
