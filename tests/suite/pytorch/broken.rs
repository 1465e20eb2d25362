//! Broken checkpoints are mirrored with their error, and the mount lives.

use super::*;

/// Item 5: truncated, deflated, big-endian and TorchScript checkpoints, random bytes and text
/// named `.bin`: the mount works, each is mirrored without tensors or virtual file, the broken
/// checkpoints say why, and the daemon still serves the good one beside them.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn broken_checkpoints_are_mirrored_with_their_error_and_the_mount_lives() {
    let (py, tmp, wrote) = write("pickle-broken", &["write-broken"]);
    let fx = tmp.join("fx");
    let m = mount_ok(&fx, "");
    let pid = m.pid().expect("the daemon's pid");

    assert_eq!(
        names(&m.dir),
        set(&[
            "bigendian.bin",
            "deflated.bin",
            "good.pt",
            "good.safetensors",
            "good.tensors",
            "notes.bin",
            "random.bin",
            "scripted.pt",
            "trunc_legacy.pt",
            "trunc_zip.bin",
        ])
    );
    // What each error must mention (any of these, case-insensitive).
    let cases: [(&str, &[&str]); 7] = [
        (
            "trunc_zip.bin",
            &[
                "truncat",
                "ends",
                "end of",
                "short",
                "incomplete",
                "central director",
                "cut",
            ],
        ),
        (
            "trunc_legacy.pt",
            &[
                "truncat",
                "ends",
                "end of",
                "short",
                "incomplete",
                "cut",
                "missing",
            ],
        ),
        ("deflated.bin", &["compress", "deflat"]),
        (
            "bigendian.bin",
            &["big", "endian", "byte order", "byteorder"],
        ),
        ("scripted.pt", &["torchscript", "script", "jit"]),
        ("random.bin", &[]),
        ("notes.bin", &[]),
    ];
    assert_eq!(wrote.as_object().unwrap().len(), cases.len() + 1, "{wrote}");
    for (file, words) in cases {
        let mirrored = m.path(file);
        assert!(
            fs::read(&mirrored).unwrap() == fs::read(fx.join(file)).unwrap(),
            "{file} ({}): mirrored bytes differ",
            wrote[file]
        );
        let error = error_of(&mirrored);
        match file {
            "random.bin" => assert_eq!(error, None, "a .bin may be anything"),
            "notes.bin" => {}
            _ => {
                let error =
                    error.unwrap_or_else(|| panic!("{file} ({}): no error xattr", wrote[file]));
                let lower = error.to_lowercase();
                assert!(
                    words.iter().any(|w| lower.contains(w)),
                    "{file} ({}): the error mentions none of {words:?}: {error}",
                    wrote[file]
                );
            }
        }
    }
    // Alive, and right.
    // SAFETY: kill with signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the daemon died");
    check_mount(&py, &[], &[(fx.join("good.pt"), m.path("good.tensors"))]);
}
