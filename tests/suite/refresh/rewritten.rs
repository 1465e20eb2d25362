//! Files rewritten in place: old handles fail, tensors come back once settled; partial downloads never interpreted.

use super::*;

// -------------------------------------------------------------------- rewritten in place, flux

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_rewritten_in_place_fails_old_handles_and_comes_back_once_settled() {
    rewritten_in_place("inplace", "settle=0.3");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_rewritten_in_place_under_kernel_cache_keeps_the_old_cached_pages() {
    rewritten_in_place("inplace-kc", "settle=0.3,kernel_cache");
}

/// A source rewritten in place under a mount made with `opts`: old handles fail, and the tensors
/// come back once the file has settled. Under `kernel_cache`, pages the kernel cached of an old
/// handle stay readable (the old, consistent bytes); under direct I/O there are none, and every
/// read of an old handle fails.
fn rewritten_in_place(tag: &str, opts: &str) {
    let kernel_cache = opts.contains("kernel_cache");
    let mut l = Live::start(tag, opts, |s| {
        s.save("a.safetensors", 1, &["w", "v"]);
        s.src.clone()
    });
    let a = l.src("a.safetensors");
    let w = File::open(l.path("a.tensors/w")).unwrap();
    let cached = fs::read(l.path("a.tensors/v")).unwrap();
    let v = File::open(l.path("a.tensors/v")).unwrap();
    // Rewritten in place with other bytes (an old writer: truncate, then write).
    let staged = l.tmp.join("staged.safetensors");
    save(&l.py, &staged, 2, &["w", "v"]);
    let bytes = fs::read(&staged).unwrap();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&a)
        .unwrap();
    f.write_all(&bytes[..bytes.len() / 2]).unwrap();
    f.flush().unwrap();
    // Past the page cache, an old handle never gets new bytes: ESTALE.
    drop_cache(&w);
    let mut buf = vec![0u8; 4096];
    assert_eq!(errno(w.read_at(&mut buf, 0)), Some(libc::ESTALE));
    let mut again = vec![0u8; cached.len()];
    if kernel_cache {
        // Pages the kernel had cached stay the old, consistent bytes.
        v.read_exact_at(&mut again, 0).unwrap();
        assert!(again == cached);
    } else {
        assert_eq!(errno(v.read_exact_at(&mut again, 0)), Some(libc::ESTALE));
    }
    // Half-written: mirrored as it is, not interpreted.
    l.until("a.tensors to go", || !l.path("a.tensors").exists());
    let error = getxattr(&l.path("a.safetensors"), "user.safetensors.error").unwrap();
    assert!(
        error.contains("being written") || error.contains("MetadataIncompleteBuffer"),
        "{error}"
    );
    f.write_all(&bytes[bytes.len() / 2..]).unwrap();
    drop(f);
    assert!(fs::read(l.path("a.safetensors")).unwrap() == bytes);
    // Complete, then settled: interpreted again.
    l.until("a.tensors back", || l.path("a.tensors/w").exists());
    assert!(fs::read(l.path("a.tensors/w")).unwrap() == tensor_bytes(&a, "w"));
    assert!(getxattr(&l.path("a.safetensors"), "user.safetensors.error").is_none());
    assert!(l.daemon.running());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn partial_download_names_are_never_interpreted() {
    let l = Live::start("partial", "", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    let bytes = fs::read(l.src("a.safetensors")).unwrap();
    for name in [
        "b.safetensors.incomplete",
        ".tmpAb12Cd",
        "c.safetensors.part",
    ] {
        fs::write(l.src(name), &bytes).unwrap();
    }
    l.until("the partial files", || names(&l.mnt).len() == 5);
    assert_eq!(
        names(&l.mnt),
        [
            ".tmpAb12Cd",
            "a.safetensors",
            "a.tensors",
            "b.safetensors.incomplete",
            "c.safetensors.part"
        ]
    );
}
