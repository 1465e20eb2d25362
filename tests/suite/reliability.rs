//! Reliability: sources that change under live readers, a source replaced by rename, writers of
//! a leased source, other users with `allow_other`, a million tensors within a memory budget, and
//! SIGTERM while readers are busy.

use crate::common::*;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh, empty mount point inside `tmp`.
fn mountpoint(tmp: &TempDir, name: &str) -> PathBuf {
    let p = tmp.join(name);
    fs::create_dir(&p).unwrap();
    p
}

/// Drops the kernel's cached pages of an open file, so the next read goes to the daemon.
fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) failed: {rc}");
}

/// `(field, kB)` for each `Vm*`/`Rss*` line of /proc/PID/status.
fn proc_status(pid: i32) -> Vec<(String, u64)> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("Vm") || l.starts_with("Rss"))
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let kb = v.trim().strip_suffix(" kB")?.trim().parse().ok()?;
            Some((k.to_string(), kb))
        })
        .collect()
}

fn field(status: &[(String, u64)], name: &str) -> u64 {
    status
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in /proc/PID/status"))
        .1
}

// ---------------------------------------------------------------------------------------------
// 1. A source truncated and rewritten in place under live readers
// ---------------------------------------------------------------------------------------------

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

/// How many read leases process `pid` holds on inode `ino` (`/proc/locks`).
fn leases(pid: i32, ino: u64) -> usize {
    fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"LEASE")
                && f.get(4) == Some(&pid.to_string().as_str())
                && f.get(5).is_some_and(|id| id.ends_with(&format!(":{ino}")))
        })
        .count()
}

/// `fs.lease-break-time`, in seconds.
fn lease_break_time() -> u64 {
    fs::read_to_string(LEASE_BREAK_TIME)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(45)
}

const LEASE_BREAK_TIME: &str = "/proc/sys/fs/lease-break-time";

/// A one-tensor source (U8 tensor `w`), mounted, whose daemon has served a first read of `w` and
/// holds a read lease on it.
struct Leased {
    src: PathBuf,
    /// Where the tensor's bytes start in the source.
    data_start: u64,
    m: Mounted,
    /// `w` in the mount, opened before any change.
    f: File,
}

fn mount_leased(tmp: &TempDir, len: usize) -> Leased {
    let src = tmp.join("m.safetensors");
    let w = bytes(len, 9);
    write_safetensors(
        &src,
        &[T {
            name: "w",
            dtype: "U8",
            shape: &[len],
            data: w.clone(),
        }],
        None,
    );
    let meta = fs::metadata(&src).unwrap();
    let m = Mounted::new(&src, "");
    let f = File::open(m.path("w")).unwrap();
    drop_cache(&f);
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == w[..4096], "w reads wrong before any change");
    assert_eq!(
        leases(m.pid().expect("daemon pid"), meta.ino()),
        1,
        "no read lease of the daemon on the source in /proc/locks"
    );
    Leased {
        data_start: meta.len() - len as u64,
        src,
        m,
        f,
    }
}

/// The daemon holds a read lease on a local source it serves (so its reads need not check each
/// time that the source is unchanged). A writer that opens the source goes on at once, because
/// the daemon releases the lease when the kernel says it is wanted, instead of waiting for the
/// kernel to break it after `fs.lease-break-time` (45 s by default); a change it then makes fails
/// the next uncached read of a file opened before it, as any in-place change does.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn lease_released_at_once_for_a_writer_whose_change_is_caught() {
    require_fuse();
    let tmp = TempDir::new("lease");
    let Leased {
        src,
        data_start,
        m,
        f,
        ..
    } = mount_leased(&tmp, 1 << 20);
    let ino = fs::metadata(&src).unwrap().ino();
    let pid = m.pid().expect("daemon pid");

    let break_time = lease_break_time();
    let started = Instant::now();
    let writer = fs::OpenOptions::new().write(true).open(&src).unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(break_time) / 2,
        "opening the source for writing took {waited:?} (lease-break-time {break_time} s): \
         the daemon did not release its lease"
    );
    assert_eq!(
        leases(pid, ino),
        0,
        "the lease is still held while a writer has the source open"
    );

    writer
        .write_all_at(&[0xff; 4096], data_start + 8192)
        .unwrap();
    drop(writer);
    drop_cache(&f);
    let mut buf = vec![0u8; 4096];
    let e = f
        .read_exact_at(&mut buf, 8192)
        .expect_err("read of the changed bytes succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    drop(f);
    m.unmount().unwrap();
}

/// Sets a sysctl for the life of the guard.
struct Sysctl(&'static str, String);

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let old = fs::read_to_string(path).unwrap();
        fs::write(path, value).unwrap();
        Sysctl(path, old)
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = fs::write(self.0, &self.1);
    }
}

/// A daemon that cannot answer (stopped) when a writer opens its source: the kernel breaks the
/// lease itself after `fs.lease-break-time` and lets the writer change the file. The reads that
/// queued up meanwhile, served as the daemon resumes (while its lease thread may not have run
/// yet), must not pass the changed bytes off as the old version.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn lease_broken_while_the_daemon_was_stopped_is_not_relied_on() {
    require_fuse();
    // Shortened for the test (the kernel's default is 45 s); restored on drop.
    let _break_time = Sysctl::set(LEASE_BREAK_TIME, "2");
    let tmp = TempDir::new("lease-stopped");
    let len = 4 << 20;
    let Leased {
        src,
        data_start,
        m,
        f,
        ..
    } = mount_leased(&tmp, len);
    let pid = m.pid().expect("daemon pid");
    // The first read's readahead out of the kernel's cache: the reads below reach the daemon.
    drop_cache(&f);
    let f = Arc::new(f);

    // SAFETY: kill(2) of the daemon, a process of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let started = Instant::now();
    let writer = fs::OpenOptions::new().write(true).open(&src).unwrap();
    let waited = started.elapsed();
    writer
        .write_all_at(&vec![0xff; len - 4096], data_start + 4096)
        .unwrap();
    drop(writer);
    // Reads that reach the daemon, queued while it is stopped.
    let readers: Vec<_> = (1..17u64)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || {
                let mut b = vec![0u8; 4096];
                f.read_exact_at(&mut b, i * (128 << 10)).map(|()| b)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert!(
        waited >= Duration::from_secs(1),
        "the writer did not wait for the lease of the stopped daemon ({waited:?})"
    );
    for (i, r) in readers.into_iter().enumerate() {
        match r.join().unwrap() {
            Ok(b) => panic!(
                "read {} after the change succeeded ({} bytes 0xff)",
                i + 1,
                b.iter().filter(|&&x| x == 0xff).count()
            ),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "read {}: {e}", i + 1),
        }
    }
    drop(f);
    m.unmount().unwrap();
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

// ---------------------------------------------------------------------------------------------
// 2. A source replaced by rename
// ---------------------------------------------------------------------------------------------

/// Reads a whole file through a fresh descriptor after dropping its cached pages.
fn read_uncached(path: &Path) -> Vec<u8> {
    let f = File::open(path).unwrap();
    drop_cache(&f);
    let mut out = Vec::new();
    io::Read::read_to_end(&mut &f, &mut out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

fn two_tensors(path: &Path, seed: u64) {
    write_safetensors(
        path,
        &[
            T {
                name: "a",
                dtype: "U8",
                shape: &[4096],
                data: bytes(4096, seed),
            },
            T {
                name: "b",
                dtype: "F32",
                shape: &[16, 16],
                data: bytes(1024, seed + 1),
            },
        ],
        Some(&[("format", "pt")]),
    );
}

/// With `refresh=off`, the tree built at mount stays: a source replaced by rename keeps serving
/// its old bytes until remount (the followed case is in tests/suite/refresh.rs).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn source_replaced_by_rename_frozen_keeps_serving_old_bytes() {
    require_fuse();
    let tmp = TempDir::new("rename");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let src = model.join("model.safetensors");
    two_tensors(&src, 1);
    let old = fs::read(&src).unwrap();
    let next = tmp.join("next.safetensors");
    two_tensors(&next, 11);
    let new = fs::read(&next).unwrap();
    assert_eq!(old.len(), new.len());
    assert_ne!(old, new);

    let mnt = mountpoint(&tmp, "mnt");
    let log = tmp.join("daemon.log");
    let frozen = ["-o", "refresh=off"];
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &frozen, &log, Duration::from_secs(30));
    let a = mnt.join("model.tensors/a");
    let b = mnt.join("model.tensors/b");
    let mirror = mnt.join("model.safetensors");
    assert!(read_uncached(&a) == bytes(4096, 1), "a before the rename");

    fs::rename(&next, &src).unwrap();
    assert!(fs::read(&src).unwrap() == new);
    for round in 0..2 {
        assert!(
            read_uncached(&a) == bytes(4096, 1),
            "round {round}: a after the rename"
        );
        assert!(
            read_uncached(&b) == bytes(1024, 2),
            "round {round}: b after the rename"
        );
        assert!(
            read_uncached(&mirror) == old,
            "round {round}: mirror after the rename"
        );
    }
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    let err = daemon.stop();
    assert!(err.is_empty(), "no warning expected; stderr:\n{err}");

    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &frozen, &log, Duration::from_secs(30));
    assert!(read_uncached(&a) == bytes(4096, 11), "a after remount");
    assert!(read_uncached(&b) == bytes(1024, 12), "b after remount");
    assert!(read_uncached(&mirror) == new, "mirror after remount");
    let err = daemon.stop();
    assert!(err.is_empty(), "no warning expected; stderr:\n{err}");
}

// ---------------------------------------------------------------------------------------------
// 3. allow_other
// ---------------------------------------------------------------------------------------------

/// Runs a command as uid/gid 65534 with no supplementary groups.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Asserts that `args` run as nobody fails with "Permission denied".
fn nobody_denied(args: &[&str]) {
    let out = as_nobody(args);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "as uid 65534, {args:?} should fail with Permission denied: {}, stdout {} bytes, \
         stderr: {err}",
        out.status,
        out.stdout.len()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn allow_other_lets_other_users_read_only_what_they_could_read() {
    require_fuse();
    let tmp = TempDir::new("allowother");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // uid 65534 must be able to reach the mount point.
    let out = as_nobody(&["stat", tmp.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "precondition: uid 65534 cannot reach {}: {}",
        tmp.path().display(),
        stderr(&out)
    );
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    fs::set_permissions(&model, fs::Permissions::from_mode(0o755)).unwrap();
    let public = model.join("pub.safetensors");
    let private = model.join("priv.safetensors");
    for (path, seed, mode) in [(&public, 1, 0o644), (&private, 2, 0o600)] {
        write_safetensors(
            path,
            &[T {
                name: "w",
                dtype: "U8",
                shape: &[1000],
                data: bytes(1000, seed),
            }],
            None,
        );
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }
    // A sharded set whose index and first shard anyone may read, but whose second shard is
    // private: the merged directory would list that shard's tensors.
    let shards = [
        ("sharded-1.safetensors", "a", 3, 0o644),
        ("sharded-2.safetensors", "b", 4, 0o600),
    ];
    for (file, name, seed, mode) in shards {
        let path = model.join(file);
        write_safetensors(
            &path,
            &[T {
                name,
                dtype: "U8",
                shape: &[100],
                data: bytes(100, seed),
            }],
            None,
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
    let index = model.join("sharded.safetensors.index.json");
    fs::write(
        &index,
        r#"{"metadata":{"total_size":200},"weight_map":{"a":"sharded-1.safetensors","b":"sharded-2.safetensors"}}"#,
    )
    .unwrap();
    fs::set_permissions(&index, fs::Permissions::from_mode(0o644)).unwrap();
    let mnt = mountpoint(&tmp, "mnt");
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let log = tmp.join("daemon.log");
    let p = |rel: &str| mnt.join(rel).to_str().unwrap().to_string();

    let (mut daemon, _) = Daemon::spawn(
        &model,
        &mnt,
        &["-o", "allow_other"],
        &log,
        Duration::from_secs(30),
    );
    let out = as_nobody(&["cat", &p("pub.tensors/w")]);
    assert!(
        out.status.success() && out.stdout == bytes(1000, 1),
        "uid 65534 reading pub.tensors/w: {}, {} bytes, stderr: {}",
        out.status,
        out.stdout.len(),
        stderr(&out)
    );
    let out = as_nobody(&["cat", &p("pub.safetensors")]);
    assert!(
        out.status.success() && out.stdout == fs::read(&public).unwrap(),
        "uid 65534 reading pub.safetensors: {}, stderr: {}",
        out.status,
        stderr(&out)
    );
    let out = as_nobody(&["ls", &p("")]);
    assert!(
        out.status.success(),
        "uid 65534 listing the mount: {}",
        stderr(&out)
    );
    nobody_denied(&["cat", &p("priv.tensors/w")]);
    nobody_denied(&["ls", &p("priv.tensors")]);
    nobody_denied(&["cat", &p("priv.safetensors")]);
    // The merged directory is as private as its most private shard; each shard's own directory
    // follows that shard.
    let merged = mnt.join("sharded.tensors");
    assert_eq!(
        fs::metadata(&merged).unwrap().permissions().mode() & 0o777,
        0o500,
        "sharded.tensors/ with a 0600 shard"
    );
    nobody_denied(&["ls", &p("sharded.tensors")]);
    nobody_denied(&["cat", &p("sharded.tensors/a")]);
    nobody_denied(&["cat", &p("sharded.tensors/b")]);
    let out = as_nobody(&["cat", &p("sharded-1.tensors/a")]);
    assert!(
        out.status.success() && out.stdout == bytes(100, 3),
        "uid 65534 reading the public shard's own sharded-1.tensors/a: {}",
        stderr(&out)
    );
    nobody_denied(&["ls", &p("sharded-2.tensors")]);
    // Root still reads everything.
    assert_eq!(
        fs::read(mnt.join("priv.tensors/w")).unwrap(),
        bytes(1000, 2)
    );
    assert_eq!(fs::read(merged.join("b")).unwrap(), bytes(100, 4));
    let err = daemon.stop();
    assert!(err.is_empty(), "stderr: {err}");

    // Without allow_other, other users cannot even look.
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &[], &log, Duration::from_secs(30));
    nobody_denied(&["stat", &p("pub.safetensors")]);
    nobody_denied(&["ls", &p("")]);
    nobody_denied(&["cat", &p("pub.tensors/w")]);
    assert_eq!(fs::read(mnt.join("pub.tensors/w")).unwrap(), bytes(1000, 1));
    daemon.stop();
}

// ---------------------------------------------------------------------------------------------
// 4. A million tensors
// ---------------------------------------------------------------------------------------------

const MILLION: usize = 1_000_000;

fn million_name(i: usize) -> String {
    format!("model.layers.{}.mlp.experts.{}.w", i / 1000, i % 1000)
}

fn million_byte(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn one_million_tensors_mount_within_memory_budget() {
    require_fuse();
    let tmp = TempDir::new("million");
    let src = tmp.join("experts.safetensors");
    let gen_start = Instant::now();
    let mut header = String::with_capacity(100_000_000);
    header.push('{');
    for i in 0..MILLION {
        use std::fmt::Write as _;
        if i > 0 {
            header.push(',');
        }
        write!(
            header,
            r#""model.layers.{}.mlp.experts.{}.w":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
            i / 1000,
            i % 1000,
            i + 1
        )
        .unwrap();
    }
    header.push('}');
    while !(8 + header.len()).is_multiple_of(8) {
        header.push(' ');
    }
    assert!(
        header.len() <= 100_000_000,
        "precondition: the header ({} bytes) exceeds the format's limit",
        header.len()
    );
    let data: Vec<u8> = (0..MILLION).map(million_byte).collect();
    {
        let mut f = io::BufWriter::new(File::create(&src).unwrap());
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
    }
    let header_len = header.len();
    drop(header);
    println!(
        "million: wrote {} tensors, header {:.1} MB, in {:.2} s",
        MILLION,
        header_len as f64 / 1e6,
        gen_start.elapsed().as_secs_f64()
    );

    let mnt = mountpoint(&tmp, "mnt");
    let log = tmp.join("daemon.log");
    let (mut daemon, took) = Daemon::spawn(&src, &mnt, &[], &log, Duration::from_secs(600));
    let st = proc_status(daemon.pid());
    let mib = |kb: u64| kb as f64 / 1024.0;
    println!(
        "million: mounted in {:.2} s; after mount: VmHWM {:.0} MiB, VmRSS {:.0} MiB, RssAnon {:.0} \
         MiB, RssFile {:.0} MiB",
        took.as_secs_f64(),
        mib(field(&st, "VmHWM")),
        mib(field(&st, "VmRSS")),
        mib(field(&st, "RssAnon")),
        mib(field(&st, "RssFile"))
    );
    // The peak, parsing included: the header is read in one pass, never buffered as a whole
    // tree of JSON values (that peaked near 1 GiB).
    let peak = field(&st, "VmHWM");
    assert!(
        peak < 512 * 1024,
        "daemon VmHWM while mounting 1,000,000 tensors is {:.0} MiB (budget 512 MiB)",
        mib(peak)
    );
    let anon = field(&st, "RssAnon");
    assert!(
        anon < 512 * 1024,
        "daemon RssAnon after mounting 1,000,000 tensors is {:.0} MiB (budget 512 MiB)",
        mib(anon)
    );

    let ls_start = Instant::now();
    let out = Command::new("sh")
        .args(["-c", "ls -f -- \"$1\" | wc -l", "sh"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "ls -f | wc -l: {}", stderr(&out));
    let count: usize = stdout(&out).trim().parse().unwrap();
    let ls_took = ls_start.elapsed();
    assert_eq!(count, MILLION + 2, "ls -f lists the tensors plus . and ..");
    for i in [0, 1, 999, 1000, 123_456, 654_321, MILLION - 1] {
        let got = fs::read(mnt.join(million_name(i))).unwrap();
        assert_eq!(got, [million_byte(i)], "tensor {i}");
        assert_eq!(
            getxattr(&mnt.join(million_name(i)), "user.safetensors.offset").unwrap(),
            (8 + header_len + i).to_string()
        );
    }
    let st = proc_status(daemon.pid());
    println!(
        "million: ls -f | wc -l = {count} in {:.2} s; after listing: VmHWM {:.0} MiB, VmRSS {:.0} \
         MiB, RssAnon {:.0} MiB, RssFile {:.0} MiB",
        ls_took.as_secs_f64(),
        mib(field(&st, "VmHWM")),
        mib(field(&st, "VmRSS")),
        mib(field(&st, "RssAnon")),
        mib(field(&st, "RssFile"))
    );
    let err = daemon.stop();
    assert!(err.is_empty(), "stderr: {err}");
}

// ---------------------------------------------------------------------------------------------
// 5. SIGTERM while readers are busy
// ---------------------------------------------------------------------------------------------

/// SIGTERM with files open, some being read, one not read yet: the mount is detached at once,
/// every read (those of the unread file included, all after the signal) gets the right bytes
/// until the last file closes, and only then does the daemon exit 0. A few rounds: the end after
/// the last close is where races show.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sigterm_with_busy_readers_detaches_serves_until_the_last_close_and_exits_zero() {
    require_fuse();
    let tmp = TempDir::new("busy");
    let src = tmp.join("busy.safetensors");
    let tensors: Vec<Tensor> = (0..4)
        .map(|t| Tensor {
            name: format!("w{t}"),
            dtype: "U8",
            shape: vec![4 << 20],
            data: bytes(4 << 20, 100 + t),
        })
        .collect();
    write_tensors(&src, &tensors, None);
    let data = Arc::new(tensors.into_iter().map(|t| t.data).collect::<Vec<_>>());
    for round in 0..3 {
        busy_round(&tmp, &src, &data, round);
    }
}

fn busy_round(tmp: &TempDir, src: &Path, data: &Arc<Vec<Vec<u8>>>, round: usize) {
    let mnt = mountpoint(tmp, &format!("mnt{round}"));
    let log = tmp.join(format!("daemon{round}.log"));
    let (mut daemon, _) = Daemon::spawn(src, &mnt, &[], &log, Duration::from_secs(30));

    let detached = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let after_detach = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    // Opened, never read before the signal: every byte of it comes from the daemon after it.
    let mut unread = File::open(mnt.join("w3")).unwrap();
    // Every reader holds all four files open before the signal.
    let held: Vec<Vec<File>> = (0..4)
        .map(|_| {
            (0..4)
                .map(|t| File::open(mnt.join(format!("w{t}"))).unwrap())
                .collect()
        })
        .collect();
    let readers: Vec<_> = held
        .into_iter()
        .enumerate()
        .map(|(r, files)| {
            let (data, detached, stop, after_detach, total, failures) = (
                data.clone(),
                detached.clone(),
                stop.clone(),
                after_detach.clone(),
                total.clone(),
                failures.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(r as u64 + 50);
                let mut buf = vec![0u8; 256 << 10];
                while !stop.load(Ordering::SeqCst) {
                    let was_detached = detached.load(Ordering::SeqCst);
                    let t = rng.below(3) as usize;
                    let f = &files[t];
                    drop_cache(f);
                    let off = rng.below(4 << 20) as usize;
                    let len = 1 + rng.below(buf.len() as u64) as usize;
                    let want = len.min((4 << 20) - off);
                    match f.read_at(&mut buf[..len], off as u64) {
                        Ok(n) if n == want && buf[..n] == data[t][off..off + n] => {
                            total.fetch_add(1, Ordering::SeqCst);
                            if was_detached {
                                after_detach.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(n) => failures.lock().unwrap().push(format!(
                            "reader {r}: w{t}: {len} bytes at {off}: got {n} bytes (want {want}), \
                             equal: {} (detached: {was_detached})",
                            buf[..n] == data[t][off..off + n]
                        )),
                        Err(e) => failures.lock().unwrap().push(format!(
                            "reader {r}: w{t}: {len} bytes at {off}: {e} (detached: {was_detached})"
                        )),
                    }
                }
                drop(files);
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(300));
    let before = total.load(Ordering::SeqCst);
    daemon.signal(libc::SIGTERM);
    wait_for("the lazy detach", || !is_mounted(&mnt));
    detached.store(true, Ordering::SeqCst);
    let mut whole = Vec::new();
    unread.read_to_end(&mut whole).unwrap();
    assert!(
        whole == data[3],
        "round {round}: the file opened before the signal read wrong bytes after the detach"
    );
    std::thread::sleep(Duration::from_millis(700));
    let alive = daemon.running();
    let served_after = after_detach.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    println!(
        "busy round {round}: {before} reads before SIGTERM, {served_after} after the detach, {} \
         in all",
        total.load(Ordering::SeqCst)
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "round {round}: {} failed reads, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert!(
        alive && daemon.running(),
        "round {round}: daemon exited while files were still open: {}",
        daemon.stderr()
    );
    assert!(before > 0, "round {round}: no read before SIGTERM");
    assert!(
        served_after > 0,
        "round {round}: no read served after the detach"
    );
    drop(unread);
    daemon.exits_zero("after the last close");
}
