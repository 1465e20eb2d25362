//! More source files than the kernel allows mappings (`vm.max_map_count`).

use super::{ShowOnPanic, read, same, serial};
use crate::common::*;

use std::fs;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The 8 bytes of the one tensor of file `i`: distinct for every file.
fn tiny_tensor(i: usize) -> [u8; 8] {
    (i as u64 ^ 0x5DEE_CE66_D1CE_4E5B)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_le_bytes()
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn more_files_than_max_map_count() {
    let _serial = serial();
    require_fuse();
    let start = Instant::now();
    let max_map_count: usize = fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let n = max_map_count + 2000;
    let tmp = TempDir::new("manyfiles");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    // Every file has the same header (padded as the reference writer pads it); only its 8 bytes
    // of data differ.
    let mut header = r#"{"t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#.to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
    prefix.extend_from_slice(header.as_bytes());
    let file_bytes = |i: usize| [&prefix[..], &tiny_tensor(i)].concat();
    std::thread::scope(|sc| {
        for w in 0..4 {
            let (src, file_bytes) = (&src, &file_bytes);
            sc.spawn(move || {
                for i in (w..n).step_by(4) {
                    fs::write(src.join(format!("f{i}.safetensors")), file_bytes(i)).unwrap();
                }
            });
        }
    });
    let written = start.elapsed();
    eprintln!("{n} files written in {written:?}");

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    // Warnings go to a log file (a broken daemon may write one per file), shown in part on failure.
    let log_file = tmp.join("records.log");
    let _show = ShowOnPanic(log_file.clone());
    let opts = ["--log-file", s(&log_file)];
    let log = tmp.join("daemon.log");
    let (daemon, mounted) = Daemon::spawn(&src, &mnt, &opts, &log, Duration::from_secs(120));
    let pid = daemon.pid();
    let maps = || {
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .lines()
            .count()
    };

    // Every tensor, by 4 readers; the daemon's mappings are sampled as they go.
    let read_start = Instant::now();
    let most_maps = AtomicUsize::new(maps());
    let failures = Mutex::new(Vec::new());
    let failed = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for r in 0..4 {
            let (mnt, most_maps, failures, failed) = (&mnt, &most_maps, &failures, &failed);
            sc.spawn(move || {
                for i in (r..n).step_by(4) {
                    let path = mnt.join(format!("f{i}.tensors/t"));
                    let problem = match fs::read(&path) {
                        Ok(b) if b == tiny_tensor(i) => None,
                        Ok(b) => Some(format!("{}: read {b:?}", path.display())),
                        Err(e) => Some(format!("{}: {e}", path.display())),
                    };
                    if let Some(p) = problem
                        && failed.fetch_add(1, Ordering::SeqCst) < 10
                    {
                        failures.lock().unwrap().push(p);
                    }
                    if r == 0 && i % 4096 == 0 {
                        most_maps.fetch_max(maps(), Ordering::SeqCst);
                    }
                }
            });
        }
    });
    let read_took = read_start.elapsed();
    let failed = failed.into_inner();
    assert!(
        failed == 0,
        "{failed} of {n} tensors did not read back; the first ones:\n{}",
        failures.into_inner().unwrap().join("\n"),
    );
    // A sample of mirrored files.
    for i in (0..n).step_by(997) {
        let f = format!("f{i}.safetensors");
        same(&f, &read(&mnt.join(&f)), &file_bytes(i));
    }
    let at_end = maps();
    let most = most_maps.into_inner().max(at_end);
    assert!(
        most <= 10_000,
        "the daemon had {most} mappings ({at_end} at the end) for {n} source files"
    );
    drop(daemon);
    eprintln!(
        "{n} files (max_map_count {max_map_count}): written in {written:?}, mounted in \
         {mounted:?}, every tensor read in {read_took:?}; at most {most} mappings; total {:?}",
        start.elapsed()
    );
}
