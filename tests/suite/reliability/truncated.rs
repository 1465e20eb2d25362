//! A source truncated and rewritten in place under live readers, frozen and followed.

use super::{drop_cache, mountpoint, read_uncached};
use crate::common::*;

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIG_TENSORS: usize = 8;

const BIG_TENSOR_LEN: u64 = 32 << 20;

/// Word `w` of big tensor `t`: distinct for every word of a tensor and never all-zero patterns,
/// so a misplaced, zeroed or foreign range shows.
fn big_word(t: usize, w: u64) -> u32 {
    (w as u32).wrapping_mul(0x9E37_79B1) ^ ((t as u32 + 1).wrapping_mul(0x85EB_CA77))
}

fn big_byte(t: usize, off: u64) -> u8 {
    big_word(t, off / 4).to_le_bytes()[(off % 4) as usize]
}

/// The header of the big file, padded to a multiple of 8.
fn big_header() -> String {
    let mut h = String::from("{");
    for t in 0..BIG_TENSORS {
        let begin = t as u64 * BIG_TENSOR_LEN;
        if t > 0 {
            h.push(',');
        }
        h.push_str(&format!(
            r#""layers.{t}.weight":{{"dtype":"F32","shape":[2048,4096],"data_offsets":[{begin},{}]}}"#,
            begin + BIG_TENSOR_LEN
        ));
    }
    h.push('}');
    while !(8 + h.len()).is_multiple_of(8) {
        h.push(' ');
    }
    h
}

/// Writes the whole big file (8-byte length, header, tensors) to `f` from its current position.
fn write_big(f: &mut File, header: &str) {
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    let mut buf = vec![0u8; BIG_TENSOR_LEN as usize];
    for t in 0..BIG_TENSORS {
        for (w, chunk) in buf.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&big_word(t, w as u64).to_le_bytes());
        }
        f.write_all(&buf).unwrap();
    }
}

/// What the readers of test 1 read: a tensor file of the big source, or its mirror.
#[derive(Clone)]
enum BigFile {
    Tensor(usize),
    Mirror(Arc<Vec<u8>>),
}

impl BigFile {
    fn len(&self) -> u64 {
        match self {
            BigFile::Tensor(_) => BIG_TENSOR_LEN,
            BigFile::Mirror(prefix) => prefix.len() as u64 + BIG_TENSORS as u64 * BIG_TENSOR_LEN,
        }
    }

    fn byte(&self, off: u64) -> u8 {
        match self {
            BigFile::Tensor(t) => big_byte(*t, off),
            BigFile::Mirror(prefix) => match off.checked_sub(prefix.len() as u64) {
                None => prefix[off as usize],
                Some(d) => big_byte((d / BIG_TENSOR_LEN) as usize, d % BIG_TENSOR_LEN),
            },
        }
    }

    /// The offset of the first byte of `got` (read at `off`) that is wrong.
    fn first_wrong(&self, off: u64, got: &[u8]) -> Option<u64> {
        (0..got.len() as u64).find(|&i| got[i as usize] != self.byte(off + i))
    }
}

#[derive(Default)]
struct ReaderCounts {
    ok: AtomicU64,
    short: AtomicU64,
    /// Reads refused because the source changed under them (ESTALE, or EIO with refresh=off).
    stale: AtomicU64,
    /// Such errors for reads that ended before the source was first touched.
    stale_before_change: AtomicU64,
    /// Opens of a tensor file that the refreshed tree no longer has (while the source is in flux).
    gone: AtomicU64,
    bytes: AtomicU64,
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn source_truncated_and_rewritten_under_live_readers_frozen() {
    truncated_and_rewritten(false);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn source_truncated_and_rewritten_under_live_readers_followed() {
    truncated_and_rewritten(true);
}

/// A source truncated, emptied and rewritten in place while readers (some past the page cache)
/// read its tensors and its mirror. With `live` (the default), the daemon follows the changes:
/// old handles get ESTALE or old cached bytes, the tensor directory disappears while the file is
/// in flux and comes back, with the rewritten bytes, once it has settled. With `refresh=off`,
/// reads fail with EIO until remount.
fn truncated_and_rewritten(live: bool) {
    require_fuse();
    let stale_errno = if live { libc::ESTALE } else { libc::EIO };
    let opts: &[&str] = if live { &[] } else { &["-o", "refresh=off"] };
    let tmp = TempDir::new("truncate");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let big = model.join("big.safetensors");
    let header = big_header();
    write_big(&mut File::create(&big).unwrap(), &header);
    let big_len = fs::metadata(&big).unwrap().len();
    let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
    prefix.extend_from_slice(header.as_bytes());
    let small = model.join("small.safetensors");
    let small_w = bytes(40_000, 7);
    write_safetensors(
        &small,
        &[T {
            name: "w",
            dtype: "F32",
            shape: &[100, 100],
            data: small_w.clone(),
        }],
        None,
    );

    let mnt = mountpoint(&tmp, "mnt");
    let log = tmp.join("daemon.log");
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, opts, &log, Duration::from_secs(30));

    let mut files: Vec<(PathBuf, BigFile)> = (0..BIG_TENSORS)
        .map(|t| {
            (
                mnt.join(format!("big.tensors/layers.{t}.weight")),
                BigFile::Tensor(t),
            )
        })
        .collect();
    files.push((
        mnt.join("big.safetensors"),
        BigFile::Mirror(Arc::new(prefix)),
    ));
    let files = Arc::new(files);

    // 0: untouched, 1: truncated to half, 2: truncated to 0, 3: rewritten.
    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(ReaderCounts::default());
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let readers: Vec<_> = (0..4u64)
        .map(|r| {
            let (files, phase, stop, counts, failures) = (
                files.clone(),
                phase.clone(),
                stop.clone(),
                counts.clone(),
                failures.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(r + 1);
                // Readers 0 and 1 drop the page cache before every read, so they reach the daemon;
                // 2 and 3 read normally and may be served from the cache.
                let uncached = r < 2;
                let mut buf = vec![0u8; 1 << 20];
                while !stop.load(Ordering::SeqCst) {
                    let (path, file) = &files[rng.below(files.len() as u64) as usize];
                    let f = match File::open(path) {
                        Ok(f) => f,
                        // A mirrored file the kernel reads by passthrough can only be refused at
                        // open once its source changed.
                        Err(e)
                            if e.raw_os_error() == Some(stale_errno)
                                && phase.load(Ordering::SeqCst) != 0 =>
                        {
                            counts.stale.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        // Followed: the file is in flux, so its tensor directory is gone.
                        Err(e)
                            if live
                                && e.raw_os_error() == Some(libc::ENOENT)
                                && phase.load(Ordering::SeqCst) != 0 =>
                        {
                            counts.gone.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("reader {r}: open {}: {e}", path.display()));
                            continue;
                        }
                    };
                    for _ in 0..4 {
                        if uncached {
                            drop_cache(&f);
                        }
                        let off = rng.below(file.len());
                        let len = 1 + rng.below(buf.len() as u64) as usize;
                        let res = f.read_at(&mut buf[..len], off);
                        let after = phase.load(Ordering::SeqCst);
                        match res {
                            Ok(n) => {
                                let want = (len as u64).min(file.len() - off) as usize;
                                if let Some(bad) = file.first_wrong(off, &buf[..n]) {
                                    failures.lock().unwrap().push(format!(
                                        "reader {r}: {} read {len} bytes at {off} (got {n}): \
                                         wrong byte at offset {}: {:#04x}, expected {:#04x} \
                                         (phase {after})",
                                        path.display(),
                                        off + bad,
                                        buf[bad as usize],
                                        file.byte(off + bad)
                                    ));
                                } else if n < want && after == 0 {
                                    failures.lock().unwrap().push(format!(
                                        "reader {r}: {} read {len} bytes at {off}: short read of \
                                         {n} bytes before the source changed",
                                        path.display()
                                    ));
                                } else if n < want {
                                    // A short read is fine while pages further on fail.
                                    counts.short.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    counts.ok.fetch_add(1, Ordering::Relaxed);
                                }
                                counts.bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e) if e.raw_os_error() == Some(stale_errno) => {
                                counts.stale.fetch_add(1, Ordering::Relaxed);
                                if after == 0 {
                                    counts.stale_before_change.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => failures.lock().unwrap().push(format!(
                                "reader {r}: {} read {len} bytes at {off}: {e} (phase {after})",
                                path.display()
                            )),
                        }
                    }
                }
            })
        })
        .collect();

    let pause = Duration::from_millis(700);
    std::thread::sleep(pause);
    let ok_before = counts.ok.load(Ordering::SeqCst);
    let mut writer = fs::OpenOptions::new().write(true).open(&big).unwrap();
    phase.store(1, Ordering::SeqCst);
    writer.set_len(big_len / 2).unwrap();
    std::thread::sleep(pause);
    phase.store(2, Ordering::SeqCst);
    writer.set_len(0).unwrap();
    std::thread::sleep(pause);
    phase.store(3, Ordering::SeqCst);
    // In place: the same inode, now empty, gets the original bytes back.
    write_big(&mut writer, &header);
    writer.sync_all().unwrap();
    drop(writer);
    assert_eq!(fs::metadata(&big).unwrap().len(), big_len);
    std::thread::sleep(pause);
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }

    let c = &counts;
    println!(
        "truncate (live: {live}): readers: {} ok, {} short, {} stale ({} before the change), {} \
         opens of a tensor gone, {} MB read; {} ok before the first truncation",
        c.ok.load(Ordering::SeqCst),
        c.short.load(Ordering::SeqCst),
        c.stale.load(Ordering::SeqCst),
        c.stale_before_change.load(Ordering::SeqCst),
        c.gone.load(Ordering::SeqCst),
        c.bytes.load(Ordering::SeqCst) / 1_000_000,
        ok_before
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed reads, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert!(ok_before > 0, "no read succeeded before the source changed");
    assert_eq!(
        c.stale_before_change.load(Ordering::SeqCst),
        0,
        "errors from reads that ended before the source was touched"
    );
    assert!(
        c.stale.load(Ordering::SeqCst) > 0,
        "readers that drop the page cache never saw an error while the source was truncated"
    );

    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    if live {
        // The rewritten file settles and is interpreted again: new opens read it.
        wait_refreshed(&mnt, "big.tensors back", || {
            fs::read_dir(mnt.join("big.tensors")).is_ok_and(|d| d.count() == BIG_TENSORS)
        });
        for (path, file) in files.iter() {
            let f = File::open(path).unwrap();
            let mut b = vec![0u8; 1 << 16];
            let off = file.len() - b.len() as u64;
            f.read_exact_at(&mut b, off).unwrap();
            assert_eq!(file.first_wrong(off, &b), None, "{}", path.display());
        }
    }
    let names: Vec<_> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        4,
        "listing of the mount after the change: {names:?}"
    );
    assert_eq!(
        fs::read_dir(mnt.join("big.tensors")).unwrap().count(),
        BIG_TENSORS
    );
    // The other source is unaffected.
    assert!(
        read_uncached(&mnt.join("small.tensors/w")) == small_w,
        "small.tensors/w reads wrong"
    );
    assert!(
        read_uncached(&mnt.join("small.safetensors")) == fs::read(&small).unwrap(),
        "small.safetensors reads wrong"
    );
    // Frozen, the rewritten source has a new mtime: reads of it fail until remount, wherever they
    // are (a mirrored file opened by passthrough before the change fails at open instead).
    for (path, _) in files.iter().filter(|_| !live) {
        let f = match File::open(path) {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => continue,
            other => other.unwrap(),
        };
        drop_cache(&f);
        let mut b = [0u8; 4096];
        let e = f.read_at(&mut b, 4096).expect_err(&format!(
            "{}: read after the in-place rewrite succeeded",
            path.display()
        ));
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{}: {e}", path.display());
    }
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());

    let err = daemon.stop();
    let canonical = fs::canonicalize(&big).unwrap();
    // The failed requests are logged too, each naming the source in its cause (rate-limited:
    // `daemon_log::` checks that); the change itself is one warning per version.
    let (requests, naming): (Vec<&str>, Vec<&str>) = err
        .lines()
        .filter(|l| l.contains("big.safetensors"))
        .partition(|l| l.contains(" failed with E"));
    assert!(
        requests
            .iter()
            .all(|l| l.contains(&format!(": {}: ", canonical.display()))),
        "a failed request's line without its source; stderr:\n{err}"
    );
    // Frozen: one version, one warning. Followed: one per version a read found changed in place
    // (maybe none: an open can also be refused because the file was replaced again meanwhile).
    let warned_enough = live || naming.len() == 1;
    assert!(
        warned_enough
            && naming.iter().all(|l| l.starts_with("tensormount: ")
                && l.contains(canonical.to_str().unwrap())
                && l.contains("changed in place")),
        "want one warning per changed version naming {}; stderr:\n{err}",
        canonical.display()
    );
    if err.lines().count() > 1 {
        println!("truncate: other daemon stderr lines:\n{err}");
    }
}
