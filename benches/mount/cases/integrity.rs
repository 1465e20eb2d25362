//! Item 12, integrity: `tensormount verify` against `sha256sum` of the same files, one file and
//! three; and a reader of a 1 GiB tensor file while `-o verify` hashes every file in the
//! background, against the same reader on a mount without it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::Bench;
use crate::measure::timed_read;
use crate::mounts::{Mount, getxattr};
use crate::report::{Cell, Row, Unit, fmt_size};
use crate::{BIN, Res, err};

impl Bench {
    pub fn integrity(&mut self, rows: &mut Vec<Row>) {
        let fixture = match self.integrity_fixture() {
            Ok(f) => f,
            Err(e) => {
                rows.push(Row {
                    id: "12",
                    case: "integrity fixture (hard links to the data fixture + SHA256SUMS)".into(),
                    unit: Unit::GBps,
                    tm: Cell::Failed(e),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let (dir, files) = fixture;
        let one = [files[2].clone()];
        for (what, set, source) in [
            ("1 file", &one[..], dir.join(&one[0])),
            ("3 files", &files[..], dir.clone()),
        ] {
            let bytes: u64 = set
                .iter()
                .map(|f| fs::metadata(dir.join(f)).map_or(0, |m| m.len()))
                .sum();
            let gb = Self::gbps(bytes);
            let base = self.sample(|| sha256sum(&dir, set).map(|(s, _)| s));
            let tm = self.sample(|| verify(&source));
            rows.push(Row {
                id: "12",
                case: format!(
                    "tensormount verify, {what} ({}) with recorded digests, page cache hot (GB/s)",
                    fmt_size(bytes)
                ),
                unit: Unit::GBps,
                tm: Self::map(tm, &gb),
                base: Self::map(base, &gb),
                base_what: "sha256sum of the same files",
            });
        }

        // A reader of big.weight right after mounting, with and without -o verify.
        let (tensor, len) = ("big.tensors/big.weight", self.sz.big);
        let gb = Self::gbps(len);
        let mut still_hashing = 0;
        let run = |opts: &str, count: &mut usize| -> Res<f64> {
            let m = Mount::new(&dir, &self.mnt, self.tuning, opts)?;
            let secs = timed_read(&m.path(tensor), 0, len)?;
            let last = m.path(files.last().map_or("", String::as_str));
            if !opts.is_empty() && getxattr(&last, "user.tensormount.verified").is_err() {
                *count += 1;
            }
            m.unmount()?;
            Ok(secs)
        };
        let base = self.sample(|| run("", &mut 0));
        let tm = self.sample(|| run("verify", &mut still_hashing));
        rows.push(Row {
            id: "12",
            case: format!(
                "1 MiB preads of a {} tensor file right after mounting, while -o verify hashes \
                 the {} files in the background (GB/s)",
                fmt_size(len),
                files.len()
            ),
            unit: Unit::GBps,
            tm: Self::map(tm, &gb),
            base: Self::map(base, &gb),
            base_what: "the same without -o verify",
        });
        self.notes.push(format!(
            "12: verification was still running when the reader finished in {still_hashing} of \
             {} runs with -o verify",
            self.runs_total()
        ));
    }

    /// A directory of hard links to the data fixture's three files, with a SHA256SUMS written by
    /// `sha256sum` itself.
    fn integrity_fixture(&self) -> Res<(PathBuf, Vec<String>)> {
        let dir = self.data.dir.with_file_name("integrity");
        fs::create_dir_all(&dir).map_err(err(dir.display()))?;
        // In path order, the order -o verify hashes them: big.safetensors (whose big.weight the
        // reader reads) first.
        let names = [
            ("big.safetensors", &self.data.big_file),
            ("model-bf16.safetensors", &self.data.bf16_file),
            ("model.safetensors", &self.data.model_file),
        ];
        for (name, src) in names {
            let at = dir.join(name);
            if !at.exists() {
                fs::hard_link(src, &at).map_err(err(at.display()))?;
            }
        }
        let names: Vec<String> = names.iter().map(|(n, _)| n.to_string()).collect();
        let (_, sums) = sha256sum(&dir, &names)?;
        fs::write(dir.join("SHA256SUMS"), sums).map_err(err("SHA256SUMS"))?;
        Ok((dir, names))
    }
}

/// Seconds `sha256sum` takes over `files` (in `dir`), and what it printed.
fn sha256sum(dir: &Path, files: &[String]) -> Res<(f64, String)> {
    let t = Instant::now();
    let out = Command::new("sha256sum")
        .current_dir(dir)
        .args(files)
        .output()
        .map_err(err("sha256sum"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "sha256sum: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Seconds `tensormount verify` takes over `source`; every file must be `ok`.
fn verify(source: &Path) -> Res<f64> {
    let t = Instant::now();
    let out = Command::new(BIN)
        .arg("verify")
        .arg(source)
        .stderr(Stdio::null())
        .output()
        .map_err(err("tensormount verify"))?;
    let secs = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.lines().all(|l| l.starts_with("ok ")) {
        return Err(format!("tensormount verify {}: {text}", source.display()));
    }
    Ok(secs)
}
