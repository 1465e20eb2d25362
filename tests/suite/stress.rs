//! Stress: 16 readers doing random reads of a sharded model's merged tensor directory, every byte
//! checked. `TENSORMOUNT_STRESS_SECS` sets the duration (default 3 s; the opt-in long run is 30).

use crate::common::*;

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 4;
const SHARD_DATA: usize = 16 << 20;
const READERS: usize = 16;

/// The tensors of one shard: tiny and empty ones, odd sizes (so most tensors start at odd
/// offsets), a few of several MB, and many small ones, filling exactly `SHARD_DATA` bytes.
fn shard_tensors(s: usize) -> Vec<Tensor> {
    let mut list: Vec<(&'static str, Vec<usize>)> = vec![
        ("U8", vec![1]),
        ("U8", vec![0]),
        ("I8", vec![3]),
        ("BF16", vec![333]),
        ("F16", vec![1_500_001]),
        ("F32", vec![1024, 17]),
        ("U8", vec![4_194_311]),
        ("F32", vec![512, 1024]),
        ("I16", vec![12_345]),
        ("U8", vec![7]),
        ("F64", vec![3, 5, 7]),
    ];
    let mut rng = Rng::new(s as u64 + 1000);
    for _ in 0..120 {
        list.push(("U8", vec![1 + rng.below(30_000) as usize]));
    }
    let elem = |d: &str| match d {
        "U8" | "I8" => 1,
        "BF16" | "F16" | "I16" => 2,
        "F32" => 4,
        _ => 8,
    };
    let used: usize = list
        .iter()
        .map(|(d, shape)| elem(d) * shape.iter().product::<usize>())
        .sum();
    list.push(("U8", vec![SHARD_DATA - used]));
    list.into_iter()
        .enumerate()
        .map(|(k, (dtype, shape))| {
            let len = elem(dtype) * shape.iter().product::<usize>();
            Tensor {
                name: format!("model.layers.{s}.t{k:03}.{}", dtype.to_lowercase()),
                dtype,
                shape,
                data: bytes(len, (s * 1000 + k) as u64 + 1),
            }
        })
        .collect()
}

/// Peaks of the daemon's memory, from /proc/PID/status (kB).
#[derive(Default)]
struct Peaks {
    rss: AtomicU64,
    anon: AtomicU64,
    file: AtomicU64,
    samples: AtomicU64,
}

fn sample(pid: u32, peaks: &Peaks) {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return;
    };
    for line in status.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let Some(kb) = v
            .trim()
            .strip_suffix(" kB")
            .and_then(|n| n.trim().parse::<u64>().ok())
        else {
            continue;
        };
        match k {
            "VmRSS" => peaks.rss.fetch_max(kb, Ordering::SeqCst),
            "RssAnon" => peaks.anon.fetch_max(kb, Ordering::SeqCst),
            "RssFile" => peaks.file.fetch_max(kb, Ordering::SeqCst),
            _ => 0,
        };
    }
    peaks.samples.fetch_add(1, Ordering::SeqCst);
}

/// The duration of a stress test: `TENSORMOUNT_STRESS_SECS`, 3 s by default.
fn stress_secs() -> f64 {
    std::env::var("TENSORMOUNT_STRESS_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("TENSORMOUNT_STRESS_SECS: a number of seconds")
        })
        .unwrap_or(3.0)
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn random_reads_from_16_readers_are_all_correct() {
    require_fuse();
    let secs = stress_secs();

    let tmp = TempDir::new("stress");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let mut weight_map = Vec::new();
    let mut all = Vec::new();
    for s in 0..SHARDS {
        let shard = format!("model-{:05}-of-{SHARDS:05}.safetensors", s + 1);
        let tensors = shard_tensors(s);
        write_tensors(&model.join(&shard), &tensors, Some(&[("format", "pt")]));
        for t in tensors {
            weight_map.push((t.name.clone(), shard.clone()));
            all.push((t.name, t.data));
        }
    }
    write_index(
        &model.join("model.safetensors.index.json"),
        Some(serde_json::json!({"total_size": SHARDS * SHARD_DATA})),
        weight_map.iter().map(|(t, s)| (t.as_str(), s.as_str())),
    );

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &[], &log, Duration::from_secs(30));
    let pid = daemon.pid() as u32;
    let merged = mnt.join("model.tensors");
    let tensors: Arc<Vec<(PathBuf, Vec<u8>)>> = Arc::new(
        all.into_iter()
            .map(|(name, data)| (merged.join(name), data))
            .collect(),
    );
    for (path, data) in tensors.iter() {
        assert_eq!(
            fs::metadata(path).unwrap().len(),
            data.len() as u64,
            "{}",
            path.display()
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let peaks = Arc::new(Peaks::default());
    let sampler = {
        let (stop, peaks) = (stop.clone(), peaks.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                sample(pid, &peaks);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let reads = Arc::new(AtomicU64::new(0));
    let read_bytes = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new((0u64, Vec::<String>::new())));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (tensors, reads, read_bytes, failures) = (
                tensors.clone(),
                reads.clone(),
                read_bytes.clone(),
                failures.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(r as u64 + 1);
                let mut buf = vec![0u8; 4 << 20];
                let fail = |msg: String| {
                    let mut f = failures.lock().unwrap();
                    f.0 += 1;
                    if f.1.len() < 20 {
                        f.1.push(msg);
                    }
                };
                while Instant::now() < deadline {
                    let (path, data) = &tensors[rng.below(tensors.len() as u64) as usize];
                    let f = match File::open(path) {
                        Ok(f) => f,
                        Err(e) => {
                            fail(format!("reader {r}: open {}: {e}", path.display()));
                            continue;
                        }
                    };
                    // Half the opens drop the cached pages first, so reads reach the daemon.
                    if rng.below(2) == 0 {
                        // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
                        unsafe {
                            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                        };
                    }
                    for _ in 0..1 + rng.below(4) {
                        let size = data.len() as u64;
                        // Sometimes at or past the end.
                        let off = rng.below(size + 16);
                        let len = match rng.below(4) {
                            0 => 1 + rng.below(64),
                            1 => 1 + rng.below(8192),
                            2 => 1 + rng.below(256 << 10),
                            _ => 1 + rng.below(buf.len() as u64),
                        } as usize;
                        let want = (len as u64).min(size.saturating_sub(off)) as usize;
                        // Read until full or end of file: a short read is allowed, missing bytes
                        // are not.
                        let mut got = 0;
                        let res = loop {
                            match f.read_at(&mut buf[got..len], off + got as u64) {
                                Ok(0) => break Ok(()),
                                Ok(n) => {
                                    got += n;
                                    if got == len {
                                        break Ok(());
                                    }
                                }
                                Err(e) => break Err(e),
                            }
                        };
                        reads.fetch_add(1, Ordering::Relaxed);
                        read_bytes.fetch_add(got as u64, Ordering::Relaxed);
                        let at = path.display();
                        match res {
                            Err(e) => fail(format!("reader {r}: {at}: {len} bytes at {off}: {e}")),
                            Ok(()) if got != want => fail(format!(
                                "reader {r}: {at}: {len} bytes at {off}: got {got}, want {want}"
                            )),
                            Ok(()) => {
                                let start = off.min(size) as usize;
                                let expected = &data[start..start + want];
                                if let Some(i) = (0..want).find(|&i| buf[i] != expected[i]) {
                                    fail(format!(
                                        "reader {r}: {at}: {len} bytes at {off}: wrong byte at \
                                         offset {}: {:#04x}, expected {:#04x}",
                                        off + i as u64,
                                        buf[i],
                                        expected[i]
                                    ));
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    sample(pid, &peaks);

    let n = reads.load(Ordering::SeqCst);
    let b = read_bytes.load(Ordering::SeqCst);
    println!(
        "stress: {n} reads ({:.0} reads/s, {:.0} MB/s) over {elapsed:.1} s, {READERS} readers; \
         daemon peak RssAnon {:.1} MiB, peak RssFile {:.1} MiB",
        n as f64 / elapsed,
        b as f64 / 1e6 / elapsed,
        peaks.anon.load(Ordering::SeqCst) as f64 / 1024.0,
        peaks.file.load(Ordering::SeqCst) as f64 / 1024.0,
    );
    println!(
        "stress: {} tensors, {} MB read; daemon peak VmRSS {:.1} MiB over {} samples",
        tensors.len(),
        b / 1_000_000,
        peaks.rss.load(Ordering::SeqCst) as f64 / 1024.0,
        peaks.samples.load(Ordering::SeqCst)
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.0 == 0,
        "{} failed reads of {n}, first ones:\n{}",
        failures.0,
        failures.1.join("\n")
    );
    assert!(n > 0, "no read was made");

    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let stopping = Instant::now();
    let st = loop {
        if let Some(st) = daemon.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(30),
            "daemon still running 30 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let err = fs::read_to_string(&log).unwrap();
    assert_eq!(st.code(), Some(0), "daemon exit: {st}; stderr:\n{err}");
    assert!(!is_mounted(&mnt));
    assert!(err.is_empty(), "daemon stderr:\n{err}");
}

// ---------------------------------------------------------------------------------------------
// Republishing under readers
// ---------------------------------------------------------------------------------------------

const VERSIONS: usize = 3;
const REPUBLISHED_TENSORS: usize = 6;

/// The bytes of tensor `t` of republished version `v`.
fn version_bytes(v: usize, t: usize) -> Vec<u8> {
    bytes(64 * 1024 + t * 4099, (v * 100 + t) as u64 + 7)
}

/// Tasks of `pid` in uninterruptible sleep (state D), by thread id.
fn d_state_tasks(pid: u32) -> Vec<String> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = fs::read_to_string(t.path().join("stat")).ok()?;
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            (state == 'D').then(|| format!("{pid}/{}", t.file_name().to_string_lossy()))
        })
        .collect()
}

/// One shard of a two-shard model is republished by rename in a loop while 8 readers read its
/// tensors (through the merged directory, the shard's own directory and the mirrored shard),
/// some past the page cache. Every read must return the bytes of one published version, all
/// reads through one handle the same version; nothing may hang in the kernel (a watchdog looks
/// for tasks stuck in state D), the daemon stays up, unmounts cleanly, and lets go of every
/// replaced version (no descriptor or mapping of a deleted file left).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn republishing_under_readers_never_mixes_versions() {
    require_fuse();
    let secs = stress_secs();
    let tmp = TempDir::new("republish");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let names: Vec<String> = (0..REPUBLISHED_TENSORS)
        .map(|t| format!("layers.1.w{t}"))
        .collect();
    let write_shard = |path: &std::path::Path, v: usize| {
        let list: Vec<T<'_>> = names
            .iter()
            .enumerate()
            .map(|(t, name)| T {
                name,
                dtype: "U8",
                shape: &[],
                data: version_bytes(v, t),
            })
            .map(|mut t| {
                t.shape = Box::leak(vec![t.data.len()].into_boxed_slice());
                t
            })
            .collect();
        write_safetensors(path, &list, None);
    };
    // Shard 1 never changes; shard 2 is published in VERSIONS versions, staged here.
    write_safetensors(
        &model.join("model-00001-of-00002.safetensors"),
        &[T {
            name: "layers.0.w",
            dtype: "U8",
            shape: &[1000],
            data: bytes(1000, 1),
        }],
        None,
    );
    let staged: Vec<PathBuf> = (0..VERSIONS)
        .map(|v| {
            let p = tmp.join(format!("v{v}.safetensors"));
            write_shard(&p, v);
            p
        })
        .collect();
    let shard = model.join("model-00002-of-00002.safetensors");
    fs::copy(&staged[0], &shard).unwrap();
    let mut weight_map = serde_json::Map::new();
    weight_map.insert(
        "layers.0.w".into(),
        "model-00001-of-00002.safetensors".into(),
    );
    for n in &names {
        weight_map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
    }
    fs::write(
        model.join("model.safetensors.index.json"),
        serde_json::json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .unwrap();
    let mirror_versions: Vec<Vec<u8>> = staged.iter().map(|p| fs::read(p).unwrap()).collect();

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &[], &log, Duration::from_secs(30));
    let pid = daemon.pid() as u32;
    // Files to read: (path, index of the tensor or None for the mirrored shard).
    let mut files: Vec<(PathBuf, Option<usize>)> = Vec::new();
    for (t, n) in names.iter().enumerate() {
        files.push((mnt.join("model.tensors").join(n), Some(t)));
        files.push((mnt.join("model-00002-of-00002.tensors").join(n), Some(t)));
    }
    files.push((mnt.join("model-00002-of-00002.safetensors"), None));
    for (p, _) in &files {
        fs::read(p).unwrap();
    }
    let generation_before = generation(&mnt);

    let files = Arc::new(files);
    let mirror_versions = Arc::new(mirror_versions);
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    // Which version a read of `len` bytes at `off` of `file` shows, if any.
    let version_of = {
        let mirror_versions = mirror_versions.clone();
        move |file: Option<usize>, off: usize, got: &[u8]| -> Option<usize> {
            (0..VERSIONS).find(|&v| match file {
                Some(t) => version_bytes(v, t).get(off..off + got.len()) == Some(got),
                None => mirror_versions[v].get(off..off + got.len()) == Some(got),
            })
        }
    };
    let readers: Vec<_> = (0..8u64)
        .map(|r| {
            let (files, stop, failures, counts, version_of) = (
                files.clone(),
                stop.clone(),
                failures.clone(),
                counts.clone(),
                version_of.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(r + 11);
                let mut buf = vec![0u8; 256 * 1024];
                while !stop.load(Ordering::SeqCst) {
                    let (path, which) = &files[rng.below(files.len() as u64) as usize];
                    let f = match File::open(path) {
                        Ok(f) => f,
                        // The kernel retries an open once on ESTALE; republished again within
                        // that retry, the caller sees it.
                        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {
                            counts[2].fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("open {}: {e}", path.display()));
                            continue;
                        }
                    };
                    let len = f.metadata().unwrap().len() as usize;
                    let mut seen: Option<usize> = None;
                    for _ in 0..4 {
                        if r % 2 == 0 {
                            // SAFETY: posix_fadvise on our own descriptor.
                            unsafe {
                                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                            };
                        }
                        let off = rng.below(len as u64) as usize;
                        let n = (1 + rng.below(buf.len() as u64) as usize).min(len - off);
                        if let Err(e) = f.read_exact_at(&mut buf[..n], off as u64) {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("read {}: {e}", path.display()));
                            break;
                        }
                        match (version_of(*which, off, &buf[..n]), seen) {
                            (None, _) => failures.lock().unwrap().push(format!(
                                "{}: {n} bytes at {off} are of no published version",
                                path.display()
                            )),
                            (Some(v), Some(s)) if v != s => failures.lock().unwrap().push(format!(
                                "{}: one handle read versions {s} and {v}",
                                path.display()
                            )),
                            (Some(v), _) => {
                                seen = Some(v);
                                if v != 0 {
                                    counts[1].fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        counts[0].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // The watchdog: a task of the test or of the daemon in state D for 5 s in a row is stuck.
    let watchdog = {
        let (stop, failures) = (stop.clone(), failures.clone());
        std::thread::spawn(move || {
            let mut stuck: std::collections::HashMap<String, u32> = Default::default();
            while !stop.load(Ordering::SeqCst) {
                let now: Vec<String> = d_state_tasks(std::process::id())
                    .into_iter()
                    .chain(d_state_tasks(pid))
                    .collect();
                stuck.retain(|t, _| now.contains(t));
                for t in now {
                    let n = stuck.entry(t.clone()).or_default();
                    *n += 1;
                    if *n == 50 {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("task {t} stuck in state D for 5 s"));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // The publisher: a new version renamed over the shard, again and again.
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut published = 0usize;
    while Instant::now() < deadline {
        let v = (published + 1) % VERSIONS;
        let tmp_name = model.join(".tmpSTRESS");
        fs::copy(&staged[v], &tmp_name).unwrap();
        fs::rename(&tmp_name, &shard).unwrap();
        published += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    watchdog.join().unwrap();
    let reads = counts[0].load(Ordering::SeqCst);
    let republished_reads = counts[1].load(Ordering::SeqCst);
    let stale_opens = counts[2].load(Ordering::SeqCst);
    println!(
        "republish: {published} versions published, {reads} reads checked ({republished_reads} \
         of a republished version), {stale_opens} opens answered ESTALE twice, {} refreshes",
        generation(&mnt) - generation_before
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert!(reads > 100, "too few reads: {reads}");
    assert!(
        republished_reads > 0,
        "readers never saw a republished version ({reads} reads)"
    );
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    // The last version is served, and once the kernel has forgotten the old inodes, their
    // sources are closed.
    let last = published % VERSIONS;
    wait_refreshed(&mnt, "the last version", || {
        fs::read(mnt.join("model.tensors").join(&names[0])).unwrap() == version_bytes(last, 0)
    });
    for (p, _) in files.iter() {
        fs::read(p).unwrap();
    }
    wait_for("the replaced versions let go", || {
        deleted_files_held(pid as i32).is_empty()
    });
    let err = daemon.stop();
    assert!(!err.contains("panick"), "{err}");
}
