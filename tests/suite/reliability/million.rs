//! A million tensors mount within a memory budget.

use super::mountpoint;
use crate::common::*;

use std::fs::{self, File};
use std::io::{self, Write};
use std::process::Command;
use std::time::{Duration, Instant};

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
