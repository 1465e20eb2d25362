//! SIGTERM while readers are busy: detached at once, served until the last close.

use super::{drop_cache, mountpoint};
use crate::common::*;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
