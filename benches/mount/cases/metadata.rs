//! The many-shard model: item 6 (mount time, memory, listings and xattrs) and item 9 (the same
//! mount from storage far away, behind `examples/slowfs.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Bench;
use crate::daemon::{mounted_below, unmount};
use crate::measure::timed_cmd;
use crate::mounts::{Mount, registry};
use crate::report::{Cell, Row, Unit};
use crate::{BIN, MANIFEST_DIR, Res, err};

impl Bench {
    /// Item 6.
    pub fn metadata(&mut self, rows: &mut Vec<Row>) {
        let shape = format!(
            "{} shards, {} tensors",
            self.sz.shards,
            self.large.entries - 1
        );
        let merged = self.mnt_large.join("model.tensors");
        let local = self.large.local.clone();
        let n = self.large.entries;
        // Mount time and the first `ls -l` of a fresh mount.
        let mut mount_secs = Vec::new();
        let mut first_ls = Vec::new();
        let mut rss = None;
        let mut failure = None;
        for i in 0..self.runs_total() {
            let m = match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "") {
                Ok(m) => m,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if rss.is_none() {
                rss = Some((m.status_bytes("RssAnon"), m.status_bytes("RssFile")));
            }
            let ls = timed_cmd(&["ls".as_ref(), "-l".as_ref(), merged.as_os_str()]);
            if i >= self.opts.warmup {
                mount_secs.push(m.took.as_secs_f64());
                match ls {
                    Ok(s) => first_ls.push(s),
                    Err(e) => failure = Some(e),
                }
            }
            if let Err(e) = m.unmount() {
                failure = Some(e);
            }
        }
        if let Some(e) = failure {
            rows.push(Row {
                id: "6",
                case: format!("mount {shape}"),
                unit: Unit::Secs,
                tm: Cell::Failed(e),
                base: Cell::None,
                base_what: "",
            });
            return;
        }
        rows.push(Row {
            id: "6",
            case: format!("mount time ({shape}, sparse)"),
            unit: Unit::Secs,
            tm: Cell::Vals(mount_secs.clone()),
            base: Cell::None,
            base_what: "",
        });
        // The same with both views, against the default mount measured above.
        let views = "npy,layout=tree";
        let mut view_secs = Vec::new();
        let mut view_anon = None;
        for i in 0..self.runs_total() {
            match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, views) {
                Ok(m) => {
                    if i >= self.opts.warmup {
                        view_secs.push(m.took.as_secs_f64());
                    }
                    view_anon = view_anon.or(Some(m.status_bytes("RssAnon")));
                    if let Err(e) = m.unmount() {
                        failure = Some(e);
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let anon_default = rss.and_then(|r| r.0);
        for (unit, case, tm, base) in [
            (
                Unit::Secs,
                format!("mount time with -o {views}"),
                failure.clone().map_or(Cell::Vals(view_secs), Cell::Failed),
                Cell::Vals(mount_secs),
            ),
            (
                Unit::MiB,
                format!("daemon RssAnon right after mount, -o {views}"),
                view_anon
                    .flatten()
                    .map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                        Cell::Vals(vec![b as f64])
                    }),
                anon_default.map_or(Cell::None, |b| Cell::Vals(vec![b as f64])),
            ),
        ] {
            rows.push(Row {
                id: "6",
                case,
                unit,
                tm,
                base,
                base_what: "default mount",
            });
        }
        let (anon, file) = rss.unwrap_or((None, None));
        for (what, v) in [("RssAnon", anon), ("RssFile", file)] {
            rows.push(Row {
                id: "6",
                case: format!("daemon {what} right after mount"),
                unit: Unit::MiB,
                tm: v.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                    Cell::Vals(vec![b as f64])
                }),
                base: Cell::None,
                base_what: "",
            });
        }
        let lsl_local =
            self.sample(|| timed_cmd(&["ls".as_ref(), "-l".as_ref(), local.as_os_str()]));
        rows.push(Row {
            id: "6",
            case: format!("ls -l merged dir ({n} entries), first after mount"),
            unit: Unit::Secs,
            tm: Cell::Vals(first_ls),
            base: Cell::from(lsl_local.clone()),
            base_what: "local dir, warm",
        });

        // Warm commands on one mount, each against the same command on the local directory.
        let m = match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "") {
            Ok(m) => m,
            Err(e) => {
                rows.push(Row {
                    id: "6",
                    case: "mount for the warm commands".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let cmds: [(&str, &[&str]); 3] = [
            ("ls -f (names only)", &["ls", "-f"]),
            ("ls -l", &["ls", "-l"]),
            ("find", &["find"]),
        ];
        for (label, argv) in cmds {
            let run = |dir: &Path| {
                let mut a: Vec<&std::ffi::OsStr> = argv.iter().map(|s| s.as_ref()).collect();
                a.push(dir.as_os_str());
                self.sample(|| timed_cmd(&a))
            };
            let tm = run(&merged);
            let base = run(&local);
            rows.push(Row {
                id: "6",
                case: format!("{label} merged dir ({n} entries), warm"),
                unit: Unit::Secs,
                tm: Cell::from(tm),
                base: Cell::from(base),
                base_what: "local dir",
            });
        }
        // getfattr -d over every tensor: slow through FUSE (no xattr cache), so fewer runs, within a
        // time budget, and no separate warm-up (the listings above warmed the dentries).
        let getfattr_all = |dir: &Path| -> Res<Vec<f64>> {
            let a: [&std::ffi::OsStr; 5] = [
                "getfattr".as_ref(),
                "-R".as_ref(),
                "-d".as_ref(),
                "--absolute-names".as_ref(),
                dir.as_os_str(),
            ];
            let t = Instant::now();
            let mut v = Vec::new();
            while v.len() < self.sz.getfattr_runs
                && (v.is_empty() || t.elapsed() < self.sz.getfattr_budget)
            {
                v.push(timed_cmd(&a)?);
            }
            Ok(v)
        };
        let tm = getfattr_all(&merged);
        let base = getfattr_all(&local);
        rows.push(Row {
            id: "6",
            case: format!("getfattr -R -d on every tensor ({n} entries)"),
            unit: Unit::Secs,
            tm: Cell::from(tm),
            base: Cell::from(base),
            base_what: "local, 6 user xattrs each",
        });
        let one = |dir: &Path| -> Res<Vec<f64>> {
            let p = dir.join(&self.large.one_tensor);
            let a: [&std::ffi::OsStr; 4] = [
                "getfattr".as_ref(),
                "-d".as_ref(),
                "--absolute-names".as_ref(),
                p.as_os_str(),
            ];
            timed_cmd(&a)?;
            (0..self.sz.one_getfattr_runs)
                .map(|_| timed_cmd(&a))
                .collect()
        };
        let tm = one(&merged);
        let base = one(&local);
        rows.push(Row {
            id: "6",
            case: "getfattr -d on one tensor (whole command)".into(),
            unit: Unit::Ms,
            tm: Cell::from(tm),
            base: Cell::from(base),
            base_what: "local file",
        });
        let anon = m.status_bytes("RssAnon");
        rows.push(Row {
            id: "6",
            case: "daemon RssAnon after all the commands above".into(),
            unit: Unit::MiB,
            tm: anon.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                Cell::Vals(vec![b as f64])
            }),
            base: Cell::None,
            base_what: "",
        });
        if let Err(e) = m.unmount() {
            self.notes.push(e);
        }
    }
}

/// Item 9's added latency per request, in milliseconds.
pub const FAR_DELAY_MS: u64 = 20;

/// Builds `examples/slowfs.rs` (item 9's storage far away) and returns its path, beside the
/// daemon's binary.
pub fn build_slowfs() -> Res<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--example", "slowfs"])
        .current_dir(MANIFEST_DIR)
        .status()
        .map_err(err("cargo build --example slowfs"))?
        .success();
    let bin = Path::new(BIN)
        .parent()
        .map(|d| d.join("examples/slowfs"))
        .ok_or("no directory for the daemon's binary")?;
    match ok && bin.exists() {
        true => Ok(bin),
        false => Err("cargo build --release --example slowfs failed".into()),
    }
}

impl Bench {
    /// Item 9: mount time of the item 6 model served by slowfs, which delays every request by
    /// [`FAR_DELAY_MS`], against the same mount of the local model, in the same run.
    pub fn far_away(&mut self, rows: &mut Vec<Row>) {
        let case = format!(
            "mount time ({} shards, {} tensors) behind slowfs, +{FAR_DELAY_MS} ms per request",
            self.sz.shards,
            self.large.entries - 1
        );
        let (mut far, mut local) = (Vec::new(), Vec::new());
        let res = (|| -> Res<()> {
            let slowfs = build_slowfs()?;
            let dir = self.mnt_large.with_file_name("far");
            fs::create_dir_all(&dir).map_err(err(dir.display()))?;
            for i in 0..self.runs_total() {
                let m = Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "")?;
                let took = m.took.as_secs_f64();
                m.unmount()?;
                registry().mounts.push(dir.clone());
                let mut child = Command::new(&slowfs)
                    .arg(&self.large.dir)
                    .arg(&dir)
                    .args(["--delay-ms", &FAR_DELAY_MS.to_string()])
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(err(slowfs.display()))?;
                let t = Instant::now();
                while !mounted_below(&dir) {
                    if t.elapsed() > Duration::from_secs(10) {
                        let _ = child.kill();
                        return Err("slowfs did not mount".into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let far_took = Mount::new(&dir, &self.mnt_large, self.tuning, "").and_then(|m| {
                    let took = m.took.as_secs_f64();
                    m.unmount().map(|()| took)
                });
                unmount(&dir);
                registry().mounts.retain(|m| *m != dir);
                let _ = child.wait();
                if i >= self.opts.warmup {
                    far.push(far_took?);
                    local.push(took);
                }
            }
            Ok(())
        })();
        rows.push(Row {
            id: "9",
            case,
            unit: Unit::Secs,
            tm: match res {
                Ok(()) => Cell::Vals(far),
                Err(e) => Cell::Failed(e),
            },
            base: Cell::Vals(local),
            base_what: "same mount, local source",
        });
    }
}
