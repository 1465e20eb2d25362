//! Item 16, DCP: a 1 GiB training checkpoint written by torch on 4 gloo ranks, FSDP2-style and
//! on a 2×2 mesh, and a 10,000-chunk checkpoint, measured by `benches/dcp_bench.py` (which writes
//! them with the tests' writer and times each row and its baseline in the same run): mount until
//! `model.safetensors` is loadable against `dcp_to_torch_save` + `torch.load` + `save_file`; a
//! full read of the virtual file, warm and cold, against a read of the `.distcp` files; the
//! daemon's RSS after that read and after mounting the 10,000-chunk checkpoint; and the warm read
//! again with the reader and the daemon pinned to one CPU, then to two (what the FUSE round
//! trip's wake-ups cost, which bounds the warm ratio), and under `-o kernel_cache`.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::Bench;
use crate::report::{Cell, Row, Unit};
use crate::{BIN, MANIFEST_DIR, MIB};

impl Bench {
    /// Item 16.
    pub fn dcp(&self, root: &Path, rows: &mut Vec<Row>) {
        let mib = if self.opts.quick { "64" } else { "1024" };
        let failed = |rows: &mut Vec<Row>, e: String| {
            rows.push(Row {
                id: "16",
                case: "dcp: the checkpoints of benches/dcp_bench.py".into(),
                unit: Unit::Secs,
                tm: Cell::Failed(e),
                base: Cell::None,
                base_what: "",
            })
        };
        let Some(py) = &self.python else {
            return failed(rows, "no Python with torch (set TENSORMOUNT_PYTHON)".into());
        };
        let out = Command::new(py)
            .arg(Path::new(MANIFEST_DIR).join("benches/dcp_bench.py"))
            .arg(root.join("dcp"))
            .args([mib, &self.opts.runs.max(1).to_string()])
            .env("TENSORMOUNT_BIN", BIN)
            .stdin(Stdio::null())
            .output();
        let out = match out {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                let e = String::from_utf8_lossy(&o.stderr);
                return failed(rows, e.lines().last().unwrap_or("failed").to_string());
            }
            Err(e) => return failed(rows, e.to_string()),
        };
        // Every run's figure, or one.
        let one = |v: &Value| match v {
            Value::Array(runs) => Cell::Vals(runs.iter().filter_map(Value::as_f64).collect()),
            v => v.as_f64().map_or(Cell::None, |x| Cell::Vals(vec![x])),
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(r) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let sharding = r["sharding"].as_str().unwrap_or("");
            match r["row"].as_str() {
                Some("ready") => rows.push(Row {
                    id: "16",
                    case: format!("dcp: mount until model.safetensors loads, {mib} MiB {sharding}"),
                    unit: Unit::Secs,
                    tm: one(&r["tensormount_s"]),
                    base: one(&r["baseline_s"]),
                    base_what: "dcp_to_torch_save + torch.load + save_file",
                }),
                Some("read") => {
                    for (when, tm, base) in [
                        ("warm", "warm_GBps", "warm_baseline_GBps"),
                        ("cold", "cold_GBps", "cold_baseline_GBps"),
                    ] {
                        rows.push(Row {
                            id: "16",
                            case: format!("dcp: read of model.safetensors, {when}, {sharding}"),
                            unit: Unit::GBps,
                            tm: one(&r[tm]),
                            base: one(&r[base]),
                            base_what: "the .distcp files read the same way",
                        });
                    }
                }
                Some("placement") => {
                    for (where_, what) in [
                        ("same_cpu", "reader and daemon on one CPU"),
                        ("other_cpu", "reader and daemon on two CPUs"),
                    ] {
                        rows.push(Row {
                            id: "16",
                            case: format!(
                                "dcp: read of model.safetensors, warm, {sharding}, {what}"
                            ),
                            unit: Unit::GBps,
                            tm: one(&r[where_]["GBps"]),
                            base: one(&r[where_]["baseline_GBps"]),
                            base_what: "the .distcp files read on the reader's CPU",
                        });
                    }
                }
                Some("kernel_cache") => rows.push(Row {
                    id: "16",
                    case: format!(
                        "dcp: read of model.safetensors, warm, {sharding}, -o kernel_cache"
                    ),
                    unit: Unit::GBps,
                    tm: one(&r["GBps"]),
                    base: one(&r["baseline_GBps"]),
                    base_what: "the .distcp files read the same way",
                }),
                Some("rss") if sharding.is_empty() => {
                    rows.push(Row {
                        id: "16",
                        case: "dcp: mount + ls checkpoint.tensors/ of 10,000 chunks".into(),
                        unit: Unit::Secs,
                        tm: one(&r["mount_and_list_s"]),
                        base: Cell::None,
                        base_what: "",
                    });
                    let rss = r["after_mount_MiB"].as_f64().map(|m| m * MIB as f64);
                    rows.push(Row {
                        id: "16",
                        case: "dcp: daemon RSS after mounting 10,000 chunks".into(),
                        unit: Unit::MiB,
                        tm: rss.map_or(Cell::None, |x| Cell::Vals(vec![x])),
                        base: Cell::None,
                        base_what: "",
                    });
                }
                Some("rss") => {
                    let rss = r["after_full_read_MiB"].as_f64().map(|m| m * MIB as f64);
                    rows.push(Row {
                        id: "16",
                        case: format!("dcp: daemon RSS after the full read, {sharding}"),
                        unit: Unit::MiB,
                        tm: rss.map_or(Cell::None, |x| Cell::Vals(vec![x])),
                        base: Cell::None,
                        base_what: "",
                    });
                }
                _ => {}
            }
        }
    }
}
