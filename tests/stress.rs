//! Stress: 16 readers doing random reads of a sharded model's merged tensor directory, every byte
//! checked. `TENSORMOUNT_STRESS_SECS` sets the duration (default 3 s; the opt-in long run is 30).

mod common;
use common::*;

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

/// One tensor of the model: name, dtype, shape and bytes.
struct Tensor {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    data: Vec<u8>,
}

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

#[test]
fn random_reads_from_16_readers_are_all_correct() {
    if !require_fuse() {
        return;
    }
    let secs: f64 = std::env::var("TENSORMOUNT_STRESS_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("TENSORMOUNT_STRESS_SECS: a number of seconds")
        })
        .unwrap_or(3.0);

    let tmp = TempDir::new("stress");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let mut weight_map = serde_json::Map::new();
    let mut all = Vec::new();
    for s in 0..SHARDS {
        let shard = format!("model-{:05}-of-{SHARDS:05}.safetensors", s + 1);
        let tensors = shard_tensors(s);
        let list: Vec<T<'_>> = tensors
            .iter()
            .map(|t| T {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                data: t.data.clone(),
            })
            .collect();
        write_safetensors(&model.join(&shard), &list, Some(&[("format", "pt")]));
        for t in tensors {
            weight_map.insert(t.name.clone(), shard.clone().into());
            all.push((t.name, t.data));
        }
    }
    let index = serde_json::json!({
        "metadata": {"total_size": SHARDS * SHARD_DATA},
        "weight_map": weight_map,
    });
    fs::write(
        model.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();

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
