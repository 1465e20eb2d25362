use std::fs::File;
use std::io::IoSliceMut;
use std::path::{Path, PathBuf};

use super::grid::{Grid, Placed, row_major};
use super::metadata::Files;
use super::*;
use crate::base::testing::read_at;
use crate::format::{DCP, Dtype};

/// A checkpoint torch 2.15 wrote on 2 ranks (`tests/python/dcp.py`'s `tp`).
fn tp() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/format/dcp/testdata/tp")
}

fn rule(e: &FormatError) -> String {
    e.rule().unwrap_or_default()
}

/// Reads every byte of `t` through its computation, the data files being `files`, whole and in
/// pieces of `step`, and checks both agree.
fn computed_bytes(t: &Tensor, files: &[Vec<u8>], step: usize) -> Vec<u8> {
    let c = t.computed.as_ref().expect("a gathered tensor");
    let mut read = |file: Option<u32>, bufs: &mut [IoSliceMut<'_>], at: u64| {
        read_at(&files[file.expect("a data file") as usize], bufs, at)
    };
    let mut whole = vec![0; t.size() as usize];
    c.read(&mut read, 0, &mut whole).unwrap();
    let mut pieces = vec![0; whole.len()];
    for from in (0..whole.len()).step_by(step) {
        let to = (from + step).min(whole.len());
        c.read(&mut read, from as u64, &mut pieces[from..to])
            .unwrap();
    }
    assert_eq!(whole, pieces, "{} read in pieces of {step}", t.name);
    whole
}

#[test]
fn a_real_checkpoint_is_described_by_key_with_its_chunks_placed() {
    let path = tp().join(".metadata");
    let d = described(&path).unwrap();
    assert_eq!(d.kind, "dcp");
    assert_eq!(
        &d.files[..],
        [Box::from("__0_0.distcp"), Box::from("__1_0.distcp")]
    );
    let names: Vec<&str> = d.tensors.iter().map(|t| &*t.name).collect();
    assert!(names.contains(&"model.wq.weight") && names.contains(&"model.temperature"));
    let t = |name: &str| d.tensors.iter().find(|t| &*t.name == name).unwrap();
    // Replicated, and 0-dim: one chunk each, a stretch of a data file.
    assert!(t("model.norm.weight").is_stretch() && t("model.norm.weight").file.is_some());
    assert_eq!(t("model.temperature").size(), 4);
    // Shard(1) on 2 ranks: gathered.
    assert!(t("model.wq.weight").computed.is_some());
    // Shard(0) of one row on 2 ranks: the empty chunk is dropped, the other holds it all.
    assert!(t("model.row").is_stretch());
    let objects = &d.metadata.as_ref().unwrap()["objects"];
    assert_eq!(objects, &serde_json::json!(["step"]));
    let c = d.conversion.as_ref().unwrap().as_ref().unwrap();
    assert!(c.state_dict.iter().any(|(k, _)| &**k == "wq.weight"));
}

#[test]
fn a_grid_of_chunks_reads_as_the_tensor_they_were_cut_from() {
    // A 5 x 7 tensor of 2-byte elements, cut 3 + 2 rows by 4 + 3 columns; each chunk stored in
    // C order in one of two "files", the last one transposed (column-major).
    let (rows, cols, elem) = (5u64, 7u64, 2u64);
    let full: Vec<u8> = (0..rows * cols * elem)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let mut files = vec![vec![0xEEu8; 3], vec![0xEEu8; 5]];
    let mut placed = Vec::new();
    for (k, (r0, nr, c0, nc)) in [(0, 3, 0, 4), (0, 3, 4, 3), (3, 2, 0, 4), (3, 2, 4, 3)]
        .into_iter()
        .enumerate()
    {
        let file = (k % 2) as u32;
        let begin = files[file as usize].len() as u64;
        let transposed = k == 3;
        let (outer, inner) = if transposed { (nc, nr) } else { (nr, nc) };
        for a in 0..outer {
            for b in 0..inner {
                let (r, c) = if transposed { (b, a) } else { (a, b) };
                let at = (((r0 + r) * cols + c0 + c) * elem) as usize;
                files[file as usize].extend_from_slice(&full[at..at + elem as usize]);
            }
        }
        let strides = if transposed {
            Box::from([1, nr])
        } else {
            row_major(&[nr, nc])
        };
        placed.push(Placed {
            offsets: Box::from([r0, c0]),
            sizes: Box::from([nr, nc]),
            file,
            begin,
            strides,
        });
    }
    let grid = Grid::of(&[rows, cols], elem, placed).unwrap();
    let t = Tensor {
        name: "w".into(),
        dtype: Dtype::BF16,
        shape: Box::from([5, 7]),
        begin: 0,
        end: rows * cols * elem,
        strides: None,
        computed: Some(std::sync::Arc::new(grid)),
        file: None,
    };
    for step in [1, 3, 14, 1000] {
        assert_eq!(computed_bytes(&t, &files, step), full);
    }
}

fn chunk(offsets: &[u64], sizes: &[u64]) -> Placed {
    Placed {
        offsets: offsets.into(),
        sizes: sizes.into(),
        file: 0,
        begin: 0,
        strides: row_major(sizes),
    }
}

#[test]
fn chunks_must_cover_the_tensor_once() {
    let shape = [4, 4];
    let ok = Grid::of(
        &shape,
        4,
        vec![chunk(&[0, 0], &[2, 4]), chunk(&[2, 0], &[2, 4])],
    );
    assert!(ok.is_ok());
    let overlap = Grid::of(
        &shape,
        4,
        vec![chunk(&[0, 0], &[3, 4]), chunk(&[2, 0], &[2, 4])],
    );
    assert!(overlap.unwrap_err().contains("overlap"));
    let hole = Grid::of(
        &shape,
        4,
        vec![chunk(&[0, 0], &[2, 4]), chunk(&[2, 0], &[1, 4])],
    );
    assert!(hole.unwrap_err().contains("[3, 0]"));
    // Chunks of no elements (more ranks than rows) are no holes.
    let empty = Grid::of(
        &shape,
        4,
        vec![chunk(&[0, 0], &[4, 4]), chunk(&[4, 0], &[0, 4])],
    );
    assert!(empty.unwrap().whole().is_some());
    // A 0-dim tensor has one chunk of one element.
    assert!(
        Grid::of(&[], 4, vec![chunk(&[], &[])])
            .unwrap()
            .whole()
            .is_some()
    );
}

/// A copy of the `tp` checkpoint in a new directory, its `.metadata` replaced by `metadata` and
/// its data files changed by `change`.
fn copy_with(name: &str, metadata: Option<Vec<u8>>, change: impl Fn(&Path)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tm-dcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in [".metadata", "__0_0.distcp", "__1_0.distcp"] {
        std::fs::copy(tp().join(f), dir.join(f)).unwrap();
    }
    if let Some(m) = metadata {
        std::fs::write(dir.join(".metadata"), m).unwrap();
    }
    change(&dir);
    dir.join(".metadata")
}

fn described(path: &Path) -> Result<Description, FormatError> {
    crate::format::DCP.describe(&File::open(path).unwrap(), path)
}

#[test]
fn a_metadata_that_calls_anything_is_a_trap_and_nothing_runs() {
    // A call before the Metadata object: os.system("echo"), then the real pickle's bytes.
    let real = std::fs::read(tp().join(".metadata")).unwrap();
    let mut hostile = b"\x80\x04cos\nsystem\n\x8c\x04echo\x85R0".to_vec();
    hostile.extend_from_slice(&real[2..]);
    let e = described(&copy_with("trap", Some(hostile), |_| {})).unwrap_err();
    assert_eq!(rule(&e), "UnsafePickle");
    assert!(e.to_string().contains("os.system"), "{e}");
}

#[test]
fn broken_checkpoints_are_refused_with_their_rule() {
    let real = std::fs::read(tp().join(".metadata")).unwrap();
    let cut = described(&copy_with(
        "cut",
        Some(real[..real.len() / 2].to_vec()),
        |_| {},
    ));
    let e = cut.unwrap_err();
    assert_eq!(rule(&e), "Pickle");
    assert!(e.cut_short());
    let missing = copy_with("missing", None, |d| {
        std::fs::remove_file(d.join("__1_0.distcp")).unwrap()
    });
    let e = described(&missing).unwrap_err();
    assert_eq!(rule(&e), "DataFile");
    assert!(e.to_string().contains("\"__1_0.distcp\" is missing"), "{e}");
    let short = copy_with("short", None, |d| {
        let f = File::options()
            .write(true)
            .open(d.join("__0_0.distcp"))
            .unwrap();
        f.set_len(100).unwrap();
    });
    assert_eq!(rule(&described(&short).unwrap_err()), "ChunkPastFile");
    let linked = copy_with("linked", None, |d| {
        std::fs::remove_file(d.join("__0_0.distcp")).unwrap();
        std::os::unix::fs::symlink(tp().join("__0_0.distcp"), d.join("__0_0.distcp")).unwrap();
    });
    let e = described(&linked).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
}

#[test]
fn data_files_must_lie_in_the_checkpoint_directory() {
    let mut names = Files::default();
    let mut files = |path: &str| names.index(path, "w");
    for (path, why) in [
        ("/etc/passwd", "is an absolute path"),
        ("../x.distcp", "`..`"),
        ("a/../../x", "`..`"),
        ("data/../__0_0.distcp", "`..`"),
        ("", "no file"),
        ("x\0y", "NUL"),
    ] {
        let e = files(path).unwrap_err();
        assert_eq!(e.rule, Rule::BadLocation);
        assert!(e.what.contains(why), "{path}: {}", e.what);
    }
    assert_eq!(files("__0_0.distcp").unwrap(), 0);
    // A subdirectory is inside; two spellings of one path are one file.
    assert_eq!(files("data/__1_0.distcp").unwrap(), 1);
    assert_eq!(files("./data//__1_0.distcp").unwrap(), 1);
    assert_eq!(names.names.len(), 2);
    assert_eq!(&*names.names[1], "data/__1_0.distcp");
}

#[test]
fn the_model_is_the_model_group_or_the_top_level_outside_training_state() {
    let keys = |ks: &[&str]| {
        model_keys(ks, &Model::Auto)
            .into_iter()
            .map(|(_, k)| k)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(&[
            "model.a.weight",
            "optim.state.0.a.exp_avg",
            "model.b",
            "rng"
        ]),
        ["a.weight", "b"]
    );
    assert_eq!(
        keys(&[
            "tok.weight",
            "optimizer.state.x",
            "lr_scheduler.x",
            "train_state.step",
            "norm"
        ]),
        ["tok.weight", "norm"]
    );
    // -o dcp_model=: another group, or every tensor.
    let ks = ["model.a", "ema.a", "ema.b.c", "emax.d", "optim.x"];
    let ema: Vec<String> = model_keys(&ks, &Model::Group("ema".into()))
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(ema, ["a", "b.c"]);
    assert_eq!(model_keys(&ks, &Model::All).len(), 5);
}

#[test]
fn the_setting_a_reader_is_given_chooses_the_conversion() {
    let path = tp().join(".metadata");
    let file = File::open(&path).unwrap();
    let dir = tp();
    let open = |name: &str| File::open(dir.join(name));
    let keys = |setting: Option<&str>| {
        let parsed = setting.map(|v| parse_model(v).unwrap());
        let mut input = Input::new(&file, &path, &open);
        if let Some(p) = &parsed {
            input = input.with_setting(&**p);
        }
        let d = DCP.read(input).unwrap();
        let c = d.conversion.unwrap().unwrap();
        c.state_dict
            .iter()
            .map(|(k, _)| k.to_string())
            .collect::<Vec<_>>()
    };
    let auto = keys(None);
    assert_eq!(keys(Some("auto")), auto);
    assert!(auto.contains(&"wq.weight".to_string()), "{auto:?}");
    let all = keys(Some("all"));
    assert!(all.contains(&"model.wq.weight".to_string()), "{all:?}");
    assert_eq!(keys(Some("model.")), auto);
    assert!(parse_model("").is_err());
}

/// A field of an object a test pickle builds: its name, and what writes its value.
type Field<'a> = (&'a str, &'a dyn Fn(&mut Pickle));

/// A pickle opcode stream, written by hand (protocol 2, `GLOBAL` by name).
#[derive(Default)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn op(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }

    fn str(&mut self, s: &str) -> &mut Self {
        self.op(b"X")
            .op(&(s.len() as u32).to_le_bytes())
            .op(s.as_bytes())
    }

    /// `module.class()` made by NEWOBJ, its fields (if any) given by BUILD of a dict.
    fn object(&mut self, module: &str, class: &str, fields: &[Field<'_>]) -> &mut Self {
        self.op(format!("c{module}\n{class}\n").as_bytes())
            .op(b")\x81");
        if !fields.is_empty() {
            self.op(b"}(");
            for (name, value) in fields {
                self.str(name);
                value(self);
            }
            self.op(b"ub");
        }
        self
    }
}

#[test]
fn a_key_set_twice_is_one_item_of_its_last_value_as_python_reads_it() {
    const M: &str = "torch.distributed.checkpoint.metadata";
    let bytes = |p: &mut Pickle| {
        p.op(b"}(");
        // `a` first as an int (no metadata at all), then as an object; `b` between.
        p.str("a").op(b"K\x01");
        p.str("b").object(M, "BytesStorageMetadata", &[]);
        p.str("a").object(M, "BytesStorageMetadata", &[]);
        p.op(b"u");
    };
    let storage = |p: &mut Pickle| {
        p.op(b"}(");
        for (fqn, offset) in [("a", 0u8), ("b", 7)] {
            p.object(
                M,
                "MetadataIndex",
                &[("fqn", &|p: &mut Pickle| {
                    p.str(fqn);
                })],
            );
            p.object(
                "torch.distributed.checkpoint.filesystem",
                "_StorageInfo",
                &[
                    ("relative_path", &|p: &mut Pickle| {
                        p.str("__0_0.distcp");
                    }),
                    ("offset", &|p: &mut Pickle| {
                        p.op(&[b'K', offset]);
                    }),
                    ("length", &|p: &mut Pickle| {
                        p.op(b"K\x07");
                    }),
                ],
            );
        }
        p.op(b"u");
    };
    let mut p = Pickle::default();
    p.op(b"\x80\x02");
    p.object(
        M,
        "Metadata",
        &[("state_dict_metadata", &bytes), ("storage_data", &storage)],
    );
    p.op(b".");
    let c = super::metadata::read(&p.0).unwrap();
    let keys: Vec<&str> = c.items.iter().map(|i| &*i.key).collect();
    assert_eq!(keys, ["a", "b"]);
    assert!(matches!(c.items[0].what, super::metadata::What::Object(s) if s.offset == 0));
    assert_eq!(&c.files[..], [Box::from("__0_0.distcp")]);
}
