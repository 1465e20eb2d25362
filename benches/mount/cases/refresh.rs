//! Item 8: following SOURCE while mounted (a shard replaced by rename, a new model renamed in, an
//! open right after a rename).

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::Bench;
use crate::mounts::{Mount, getxattr};
use crate::report::{Cell, Row, Unit};
use crate::{Res, err};

impl Bench {
    /// Item 8.
    pub fn refresh(&mut self, rows: &mut Vec<Row>) {
        if let Err(e) = self.refresh_rows(rows) {
            rows.push(Row {
                id: "8",
                case: "following SOURCE".into(),
                unit: Unit::Secs,
                tm: Cell::Failed(e),
                base: Cell::None,
                base_what: "",
            });
        }
    }

    pub fn refresh_rows(&mut self, rows: &mut Vec<Row>) -> Res<()> {
        let shape = format!("{} shards", self.sz.shards);
        let root = self
            .large
            .dir
            .parent()
            .ok_or("fixture without a parent")?
            .to_path_buf();
        let models = root.join("models");
        let staging = root.join("staging");
        for d in [&models, &staging] {
            let _ = fs::remove_dir_all(d);
            fs::create_dir_all(d).map_err(err(d.display()))?;
        }
        let copy_model = |to: &Path| -> Res<()> {
            let ok = Command::new("cp")
                .args(["-r", "--sparse=always"])
                .arg(&self.large.dir)
                .arg(to)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(())
            } else {
                Err(format!("cp -r {} failed", self.large.dir.display()))
            }
        };
        copy_model(&models.join("m0"))?;
        // The full mount of the same model, the baseline of every row.
        let mount_secs = self.sample(|| {
            let m = Mount::new(&models.join("m0"), &self.mnt_large, self.tuning, "")?;
            let took = m.took.as_secs_f64();
            m.unmount()?;
            Ok(took)
        })?;
        let base = Cell::Vals(mount_secs);
        let base_what = "full mount of the model";
        let one = self.large.one_tensor.clone();
        let merged = |mnt: &Path| mnt.join("m0/model.tensors").join(&one);

        // A shard replaced by rename, until the merged directory shows it.
        let m = Mount::new(&models, &self.mnt_large, self.tuning, "")?;
        let one_model = m.status_bytes("RssAnon");
        let source = PathBuf::from(getxattr(
            &merged(&self.mnt_large),
            "user.safetensors.source",
        )?);
        let shard_name = source.file_name().ok_or("no shard name")?.to_owned();
        let shard = models.join("m0").join(&shard_name);
        let header_len = {
            let f = File::open(&shard).map_err(err(shard.display()))?;
            let mut n = [0u8; 8];
            f.read_exact_at(&mut n, 0).map_err(err(shard.display()))?;
            8 + u64::from_le_bytes(n)
        };
        // A copy of the shard with a new inode: its header, the data left a hole.
        let stage_shard = || -> Res<PathBuf> {
            let tmp = models.join("m0").join(".tmpBENCH");
            let mut head = vec![0u8; header_len as usize];
            let f = File::open(&shard).map_err(err(shard.display()))?;
            f.read_exact_at(&mut head, 0)
                .map_err(err(shard.display()))?;
            let len = f.metadata().map_err(err(shard.display()))?.len();
            let mut out = File::create(&tmp).map_err(err(tmp.display()))?;
            out.write_all(&head)
                .and_then(|_| out.set_len(len))
                .map_err(err(tmp.display()))?;
            Ok(tmp)
        };
        let ino = |p: &Path| -> Res<u64> {
            Ok(std::os::unix::fs::MetadataExt::ino(
                &fs::metadata(p).map_err(err(p.display()))?,
            ))
        };
        let replaced = self.sample(|| {
            let before = ino(&merged(&self.mnt_large))?;
            let tmp = stage_shard()?;
            let t = Instant::now();
            fs::rename(&tmp, &shard).map_err(err(shard.display()))?;
            while ino(&merged(&self.mnt_large))? == before {
                if t.elapsed() > Duration::from_secs(30) {
                    return Err("the replaced shard never showed".into());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(t.elapsed().as_secs_f64())
        });
        rows.push(Row {
            id: "8",
            case: format!("one shard replaced by rename: new inode served, inotify ({shape})"),
            unit: Unit::Secs,
            tm: Cell::from(replaced),
            base: base.clone(),
            base_what,
        });

        // A second copy of the model appears: by its exact path, and in the root listing.
        let mut exact = Vec::new();
        let mut listed = Vec::new();
        for i in 0..self.runs_total() {
            for (k, out) in [(0, &mut exact), (1, &mut listed)] {
                let name = format!("new{i}-{k}");
                let staged = staging.join(&name);
                copy_model(&staged)?;
                let nlink = std::os::unix::fs::MetadataExt::nlink(
                    &fs::metadata(&self.mnt_large).map_err(err("mount root"))?,
                );
                let t = Instant::now();
                fs::rename(&staged, models.join(&name)).map_err(err(staged.display()))?;
                let target = self.mnt_large.join(&name).join("model.tensors").join(&one);
                loop {
                    let seen = if k == 0 {
                        fs::metadata(&target).is_ok()
                    } else {
                        std::os::unix::fs::MetadataExt::nlink(
                            &fs::metadata(&self.mnt_large).map_err(err("mount root"))?,
                        ) > nlink
                    };
                    if seen {
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(60) {
                        return Err(format!("{name} never showed"));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                if i >= self.opts.warmup {
                    out.push(t.elapsed().as_secs_f64());
                }
            }
        }
        let anon = m.status_bytes("RssAnon");
        m.unmount()?;
        for (case, v) in [
            (
                format!("a new model ({shape}) renamed in: readable by its exact path"),
                exact,
            ),
            (
                format!("a new model ({shape}) renamed in: in the root listing, inotify"),
                listed,
            ),
        ] {
            rows.push(Row {
                id: "8",
                case,
                unit: Unit::Secs,
                tm: Cell::Vals(v),
                base: base.clone(),
                base_what,
            });
        }
        let models_now = 1 + 2 * self.runs_total();
        rows.push(Row {
            id: "8",
            case: format!(
                "daemon RssAnon with {models_now} copies of the model, added while mounted"
            ),
            unit: Unit::MiB,
            tm: anon.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                Cell::Vals(vec![b as f64])
            }),
            base: one_model.map_or(Cell::None, |b| {
                Cell::Vals(vec![(b * models_now as u64) as f64])
            }),
            base_what: "that many times one copy's",
        });

        // An open right after a rename, with polling off: the open finds the source replaced.
        let m = Mount::new(
            &models,
            &self.mnt_large,
            self.tuning,
            "refresh=poll,refresh_interval=3600",
        )?;
        let read4k = |p: &Path| -> Res<()> {
            let f = File::open(p).map_err(err(p.display()))?;
            let mut b = [0u8; 4096];
            f.read_at(&mut b, 0).map_err(err(p.display()))?;
            Ok(())
        };
        let unchanged_path = self
            .mnt_large
            .join("m0/model.tensors")
            .join(&self.large.first_tensor);
        read4k(&unchanged_path)?;
        let opened = self.sample(|| {
            let tmp = stage_shard()?;
            let target = merged(&self.mnt_large);
            read4k(&target)?;
            fs::rename(&tmp, &shard).map_err(err(shard.display()))?;
            let t = Instant::now();
            read4k(&target)?;
            Ok(t.elapsed().as_secs_f64())
        });
        let unchanged = self.sample(|| {
            let t = Instant::now();
            read4k(&unchanged_path)?;
            Ok(t.elapsed().as_secs_f64())
        });
        m.unmount()?;
        rows.push(Row {
            id: "8",
            case: format!("open + 4 KiB read of a replaced shard's tensor, right after ({shape})"),
            unit: Unit::Ms,
            tm: Cell::from(opened),
            base: Cell::from(unchanged),
            base_what: "same on an unchanged tensor",
        });
        let _ = fs::remove_dir_all(&models);
        let _ = fs::remove_dir_all(&staging);
        Ok(())
    }
}
