//! The timed operations of the rows (reads, mappings, parallel and random reads, commands), the
//! memory pre-touch before cold runs, and the statistics of the runs.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::Instant;

use crate::{GIB, MIB, PAGE, Res, err};

/// Reads `len` bytes from `off` with `buf`-sized preads.
pub fn read_range(f: &File, off: u64, len: u64, buf: &mut [u8]) -> Res<()> {
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(buf.len() as u64) as usize;
        match f.read_at(&mut buf[..n], off + pos) {
            Ok(0) => return Err(format!("short read at {}", off + pos)),
            Ok(got) => pos += got as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read at {}: {e}", off + pos)),
        }
    }
    Ok(())
}

/// Seconds to open `path` and read `len` bytes at `off` with 1 MiB preads.
pub fn timed_read(path: &Path, off: u64, len: u64) -> Res<f64> {
    let mut buf = vec![1u8; MIB as usize];
    let t = Instant::now();
    let f = File::open(path).map_err(err(path.display()))?;
    read_range(&f, off, len, &mut buf)?;
    drop(f);
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to open `path`, mmap `len` bytes at `off` (read-only, shared, as numpy.memmap does),
/// read one byte of every page, and unmap.
pub fn timed_mmap_touch(path: &Path, off: u64, len: u64) -> Res<f64> {
    let t = Instant::now();
    let f = File::open(path).map_err(err(path.display()))?;
    let aligned = off & !(PAGE - 1);
    let map_len = (len + off - aligned) as usize;
    // SAFETY: a fresh read-only mapping of an open file; unmapped below before returning.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            aligned as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap {}: {}",
            path.display(),
            io::Error::last_os_error()
        ));
    }
    let base = p.cast::<u8>();
    let mut sum = 0u64;
    let mut i = (off - aligned) as usize;
    while i < map_len {
        // SAFETY: i < map_len, inside the mapping.
        sum = sum.wrapping_add(u64::from(unsafe { std::ptr::read_volatile(base.add(i)) }));
        i = (i / PAGE as usize + 1) * PAGE as usize;
    }
    // SAFETY: the mapping made above, with its length.
    unsafe { libc::munmap(p, map_len) };
    drop(f);
    std::hint::black_box(sum);
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds (first start to last end) for 4 threads each reading its own range with 1 MiB preads.
pub fn timed_parallel(ranges: &[(PathBuf, u64, u64)]) -> Res<f64> {
    let barrier = Barrier::new(ranges.len());
    let results: Vec<Res<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .iter()
            .map(|(path, off, len)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut buf = vec![1u8; MIB as usize];
                    barrier.wait();
                    let t = Instant::now();
                    let f = File::open(path).map_err(err(path.display()))?;
                    read_range(&f, *off, *len, &mut buf)?;
                    Ok((t, Instant::now()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("reader panicked".into())))
            .collect()
    });
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for r in results {
        let (a, b) = r?;
        first = Some(first.map_or(a, |f| f.min(a)));
        last = Some(last.map_or(b, |l| l.max(b)));
    }
    match (first, last) {
        (Some(a), Some(b)) => Ok((b - a).as_secs_f64()),
        _ => Err("no readers".into()),
    }
}

/// 4 KiB-aligned (relative to the tensor) offsets within `len`, from a fixed seed.
pub fn random_offsets(len: u64, ops: usize, seed: u64) -> Vec<u64> {
    let pages = len / PAGE;
    let mut s = seed | 1;
    (0..ops)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % pages) * PAGE
        })
        .collect()
}

/// Seconds for single-threaded 4 KiB preads at `base + o` for each offset.
pub fn timed_random(path: &Path, base: u64, offsets: &[u64]) -> Res<f64> {
    let f = File::open(path).map_err(err(path.display()))?;
    let mut buf = vec![1u8; PAGE as usize];
    let t = Instant::now();
    for o in offsets {
        let n = f
            .read_at(&mut buf, base + o)
            .map_err(err(format!("random read at {o}")))?;
        if n != PAGE as usize {
            return Err(format!("short random read at {o}"));
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds of wall time of a command with its output sent to /dev/null; fails on a non-zero exit.
pub fn timed_cmd(args: &[&std::ffi::OsStr]) -> Res<f64> {
    let (prog, rest) = args.split_first().ok_or("empty command")?;
    let t = Instant::now();
    let status = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(err(format!("{prog:?}")))?;
    let secs = t.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("{:?} failed: {status}", args));
    }
    Ok(secs)
}

/// Touches `bytes` of anonymous memory and frees it, so the next allocations (FUSE page cache,
/// loader buffers) reuse RAM that the host has already backed (VM free-page-reporting artifact).
pub fn pretouch(bytes: u64) {
    let avail = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(bytes, |kb| kb * 1024 / 2);
    let len = bytes.min(avail) as usize;
    if len == 0 {
        return;
    }
    // SAFETY: a private anonymous mapping written page by page and unmapped right after.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        let base = p.cast::<u8>();
        let mut i = 0;
        while i < len {
            std::ptr::write_volatile(base.add(i), 1);
            i += PAGE as usize;
        }
        libc::munmap(p, len);
    }
}

/// Bytes to pre-touch before a cold run that will cache `cached` bytes.
pub fn pretouch_for(cached: u64) -> u64 {
    (cached / 2 * 3 + 256 * MIB).min(4 * GIB)
}

/// Median, min and max.
pub fn stats(v: &[f64]) -> Option<(f64, f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return None;
    }
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some((med, s[0], s[n - 1]))
}
