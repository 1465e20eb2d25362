//! Reading tensor data: items 1-4 (sequential, mmap, parallel and random reads of a tensor
//! file), 5 (Python loaders on the tensor files) and 7 (the mirrored whole file).

use std::fs;

use super::{Bench, Loc};
use crate::measure::{random_offsets, timed_mmap_touch, timed_parallel, timed_random, timed_read};
use crate::mounts::Mount;
use crate::report::{Cell, Row, Unit, fmt_size};

/// A field of /proc/meminfo (`Cached`), in bytes.
fn meminfo_bytes(key: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Bench {
    /// Items 1 and 2.
    pub fn seq_and_mmap(&mut self, big: &Loc, rows: &mut Vec<Row>) {
        let size = fmt_size(big.len);
        let gb = Self::gbps(big.len);
        let direct = self.sample(|| timed_read(&big.source, big.offset, big.len));
        let mut served = None;
        let mut added = Vec::new();
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            let w0 = m.wchar();
            let before = meminfo_bytes("Cached");
            let c = timed_read(&p, 0, big.len)?;
            if let (Some(a), Some(b)) = (w0, m.wchar()) {
                served = Some(b.saturating_sub(a));
            }
            let w = timed_read(&p, 0, big.len)?;
            if let (Some(a), Some(b)) = (before, meminfo_bytes("Cached")) {
                added.push(b.saturating_sub(a) as f64);
            }
            Ok((c, w))
        });
        if let Some(s) = served {
            self.notes.push(format!(
                "daemon wrote {} (/proc/PID/io wchar) while serving the cold read of the {size} tensor file",
                fmt_size(s)
            ));
        }
        for (warm, what) in [
            (false, "cold (first read after mount)"),
            (true, "warm (2nd read)"),
        ] {
            rows.push(Row {
                id: "1",
                case: format!("seq read {size} tensor, 1 MiB reads, {what}"),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
        rows.push(Row {
            id: "1",
            case: format!(
                "page cache added by reading the {size} tensor file twice (source cached)"
            ),
            unit: Unit::MiB,
            tm: Cell::Vals(added.clone()),
            base: Cell::Vals(vec![big.len as f64]),
            base_what: "the tensor's size",
        });
        let pread = direct;
        let direct = self.sample(|| timed_mmap_touch(&big.source, big.offset, big.len));
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            Ok((
                timed_mmap_touch(&p, 0, big.len)?,
                timed_mmap_touch(&p, 0, big.len)?,
            ))
        });
        for (warm, what) in [(false, "cold"), (true, "warm (2nd mapping)")] {
            rows.push(Row {
                id: "2",
                case: format!("mmap {size} tensor, touch every page, {what}"),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "mmap source",
            });
        }
        rows.push(Row {
            id: "2",
            case: format!("mmap {size} tensor, touch every page, cold, against 1 MiB preads"),
            unit: Unit::GBps,
            tm: Self::map(Self::pair(&fuse, false), &gb),
            base: Self::map(pread, &gb),
            base_what: "pread source",
        });
    }

    /// Item 3.
    pub fn parallel(&mut self, par: &[Loc], rows: &mut Vec<Row>) {
        let total: u64 = par.iter().map(|l| l.len).sum();
        let gb = Self::gbps(total);
        let direct_ranges: Vec<_> = par
            .iter()
            .map(|l| (l.source.clone(), l.offset, l.len))
            .collect();
        let direct = self.sample(|| timed_parallel(&direct_ranges));
        let fuse = self.cold_warm(total, |m| {
            let ranges: Vec<_> = par.iter().map(|l| (m.path(&l.file), 0, l.len)).collect();
            Ok((timed_parallel(&ranges)?, timed_parallel(&ranges)?))
        });
        for (warm, what) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "3",
                case: format!(
                    "{} readers on {} tensors of {}, aggregate, {what}",
                    par.len(),
                    par.len(),
                    fmt_size(par[0].len)
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
    }

    /// Item 4.
    pub fn random(&mut self, big: &Loc, rows: &mut Vec<Row>) {
        let ops = self.sz.rand_ops;
        let cold_offsets = random_offsets(big.len, ops, 0x1234_5678);
        let warm_offsets = random_offsets(big.len, ops, 0x8765_4321);
        let iops = move |s: f64| ops as f64 / s;
        let direct = self.sample(|| timed_random(&big.source, big.offset, &warm_offsets));
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            let c = timed_random(&p, 0, &cold_offsets)?;
            // Warm = the whole tensor in the FUSE page cache, like the hot source.
            timed_read(&p, 0, big.len)?;
            Ok((c, timed_random(&p, 0, &warm_offsets)?))
        });
        for (warm, what) in [
            (false, "cold (fresh mount)"),
            (true, "warm (tensor fully cached)"),
        ] {
            rows.push(Row {
                id: "4",
                case: format!(
                    "4 KiB random reads over {} tensor, 1 thread, {what}",
                    fmt_size(big.len)
                ),
                unit: Unit::Iops,
                tm: Self::map(Self::pair(&fuse, warm), iops),
                base: Self::map(direct.clone(), iops),
                base_what: "pread source",
            });
        }
    }

    /// Item 5, and the safetensors loader half of item 7.
    pub fn loaders(&mut self, rows: &mut Vec<Row>) {
        let bytes = self.data.model_bytes;
        let gb = Self::gbps(bytes);
        let model = self.data.model_file.clone();
        let direct = self
            .python_passes("st", &model, self.runs_total())
            .map(|v| v[self.opts.warmup.min(v.len())..].to_vec());
        let what = format!("{} tensors, {}", self.data.model_tensors, fmt_size(bytes));
        // (item, how it loads, mount options, load_all.py mode, path in the mount, baseline)
        let loaders = [
            (
                "5",
                "numpy.fromfile on mount",
                "",
                "fromfile",
                "model.tensors",
                "safetensors on source",
            ),
            (
                "5",
                "numpy.load on -o npy views",
                "npy",
                "npy",
                "model.tensors",
                "safetensors on source",
            ),
            (
                "7",
                "safetensors on mirrored file",
                "",
                "st",
                "model.safetensors",
                "same on source",
            ),
        ];
        // The daemon's resident memory (anonymous and file-backed) right after mounting and
        // after numpy has read every tensor twice, for the first loader.
        let rss = |m: &Mount| Some(m.status_bytes("RssAnon")? + m.status_bytes("RssFile")?);
        let (mut rss_mounted, mut rss_loaded) = (Vec::new(), Vec::new());
        for (i, (id, how, opts, mode, path, base_what)) in loaders.into_iter().enumerate() {
            let first = i == 0;
            let runs = self.cold_warm_with(opts, bytes, |m| {
                let before = rss(m);
                let v = self.python_passes(mode, &m.path(path), 2)?;
                if first && let (Some(b), Some(a)) = (before, rss(m)) {
                    rss_mounted.push(b as f64);
                    rss_loaded.push(a as f64);
                }
                Ok((v[0], v[1]))
            });
            if first {
                rows.push(Row {
                    id,
                    case: format!("daemon RssAnon + RssFile after {how} read all {what} twice"),
                    unit: Unit::MiB,
                    tm: Cell::Vals(rss_loaded.clone()),
                    base: Cell::Vals(rss_mounted.clone()),
                    base_what: "right after mount",
                });
            }
            for (warm, w) in [(false, "cold"), (true, "warm")] {
                rows.push(Row {
                    id,
                    case: format!("load all ({what}): {how}, {w}"),
                    unit: Unit::GBps,
                    tm: Self::map(Self::pair(&runs, warm), &gb),
                    base: Self::map(direct.clone(), &gb),
                    base_what,
                });
            }
        }
    }

    /// Item 7: the whole mirrored file read with 1 MiB reads, and which path served it.
    pub fn whole_file(&mut self, rows: &mut Vec<Row>) {
        let model = self.data.model_file.clone();
        let len = match fs::metadata(&model) {
            Ok(m) => m.len(),
            Err(e) => {
                self.notes.push(format!("item 7: {e}"));
                return;
            }
        };
        let gb = Self::gbps(len);
        let direct = self.sample(|| timed_read(&model, 0, len));
        let mut served = None;
        let fuse = self.cold_warm(len, |m| {
            let p = m.path("model.safetensors");
            let w0 = m.wchar();
            let c = timed_read(&p, 0, len)?;
            if let (Some(a), Some(b)) = (w0, m.wchar()) {
                served = Some(b.saturating_sub(a));
            }
            Ok((c, timed_read(&p, 0, len)?))
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "7",
                case: format!(
                    "whole mirrored model.safetensors ({}), 1 MiB reads, {w}",
                    fmt_size(len)
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
        let path = match served {
            // A daemon that passes the file through to the kernel replies to no READ.
            Some(s) if s < len / 100 => {
                format!("passthrough (daemon replied {})", fmt_size(s))
            }
            Some(s) => format!("daemon reads (replied {})", fmt_size(s)),
            None => "unknown (daemon pid or /proc/PID/io not found)".into(),
        };
        rows.push(Row {
            id: "7",
            case: format!(
                "path that served the whole mirrored file (cold {} read)",
                fmt_size(len)
            ),
            unit: Unit::Secs,
            tm: Cell::Text(path),
            base: Cell::None,
            base_what: "",
        });
    }
}
