//! The reader on real checkpoints written by torch (`testdata/make_fixtures.py`), checked against
//! what `torch.load` gives back (the JSON beside each), and on files broken on purpose.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::describe;
use crate::format::{Description, FormatError, NotOffered, Tensor};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/format/pytorch/testdata")
        .join(name)
}

fn read(name: &str) -> (File, Result<Description, FormatError>) {
    let path = fixture(name);
    let file = File::open(&path).unwrap();
    let d = describe(&file, &path);
    (file, d)
}

/// The tensor's bytes in C order, gathered by its strides where it has them.
fn gather(file: &File, t: &Tensor) -> Vec<u8> {
    let size = t.element_size();
    let Some(strides) = &t.strides else {
        let mut buf = vec![0; t.size() as usize];
        file.read_exact_at(&mut buf, t.begin).unwrap();
        return buf;
    };
    let numel: usize = t.shape.iter().product();
    let mut out = Vec::new();
    for i in 0..numel {
        let (mut rest, mut at) = (i, 0u64);
        for (d, s) in t.shape.iter().zip(strides.iter()).rev() {
            at += (rest % d) as u64 * s;
            rest /= d;
        }
        let mut buf = vec![0; size as usize];
        file.read_exact_at(&mut buf, t.begin + at * size).unwrap();
        out.extend(buf);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks the description of fixture `name` against its oracle; returns it.
fn check(name: &str) -> Description {
    let (file, d) = read(name);
    let d = d.unwrap_or_else(|e| panic!("{name}: {e}"));
    let stem = name.rsplit_once('.').unwrap().0;
    let json = std::fs::read_to_string(fixture(&format!("{stem}.json"))).unwrap();
    let oracle: serde_json::Value = serde_json::from_str(&json).unwrap();
    let ours: HashMap<&str, &Tensor> = d.tensors.iter().map(|t| (&*t.name, &**t)).collect();
    let expected = oracle["tensors"].as_array().unwrap();
    for e in expected {
        let tname = e["name"].as_str().unwrap();
        let t = ours
            .get(tname)
            .unwrap_or_else(|| panic!("{name}: no tensor {tname}: {:?}", d.notes));
        assert_eq!(
            t.dtype_name(),
            e["dtype"].as_str().unwrap(),
            "{name}: {tname}"
        );
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(&*t.shape, &shape[..], "{name}: {tname}");
        assert_eq!(
            hex(&gather(&file, t)),
            e["hex"].as_str().unwrap(),
            "{name}: {tname}"
        );
    }
    assert_eq!(d.tensors.len(), expected.len(), "{name}: {:?}", d.tensors);
    for missing in oracle["nofile"].as_array().unwrap() {
        let missing = missing.as_str().unwrap();
        assert!(
            d.notes.iter().any(|n| n.contains(&format!("`{missing}`"))),
            "{name}: no note on {missing}: {:?}",
            d.notes
        );
    }
    let sorted = d
        .tensors
        .windows(2)
        .all(|w| (w[0].begin, &w[0].name) <= (w[1].begin, &w[1].name));
    assert!(sorted, "{name}: not sorted");
    if let Some(keys) = oracle["state_dict"].as_array() {
        let entries = &d.conversion.as_ref().unwrap().as_ref().unwrap().state_dict;
        let mut names: Vec<&str> = entries.iter().map(|(k, _)| &**k).collect();
        let mut keys: Vec<&str> = keys.iter().map(|k| k.as_str().unwrap()).collect();
        names.sort();
        keys.sort();
        assert_eq!(names, keys, "{name}");
        for (_, t) in entries {
            assert!(d.tensors.iter().any(|u| std::sync::Arc::ptr_eq(u, t)));
        }
    }
    assert_eq!(d.data_start, 0);
    assert!(d.metadata.is_none());
    d
}

#[test]
fn every_dtype_zip() {
    let d = check("dtypes_zip.pt");
    assert_eq!(d.kind, "pytorch-zip");
    // Files of their own (checked against the oracle by `check`), but no safetensors dtype.
    for (name, ours) in [("complex128", "C128"), ("complex32", "C32")] {
        let t = d.tensors.iter().find(|t| &*t.name == name).unwrap();
        assert_eq!(t.dtype_name(), ours);
    }
    let left_out = "the conversion to safetensors leaves out the tensors of the state dict that \
                    have no file or no safetensors dtype: `complex128`, `complex32`";
    assert!(
        d.notes.iter().any(|n| n.ends_with(left_out)),
        "{:?}",
        d.notes
    );
    // A state dict: two of its values have no safetensors dtype, and are left out of it.
    let entries = d.conversion.unwrap().unwrap().state_dict;
    assert_eq!(entries.len(), d.tensors.len() - 2);
}

#[test]
fn every_dtype_legacy() {
    let d = check("dtypes_legacy.pt");
    assert_eq!(d.kind, "pytorch-legacy");
}

#[test]
fn views_zip_and_legacy() {
    for name in ["views_zip.pt", "views_legacy.pt"] {
        let d = check(name);
        let by_name: HashMap<&str, &Tensor> = d.tensors.iter().map(|t| (&*t.name, &**t)).collect();
        assert_eq!(by_name["transposed"].strides.as_deref(), Some(&[1, 4][..]));
        assert_eq!(by_name["sliced"].strides.as_deref(), Some(&[4, 1][..]));
        assert_eq!(by_name["expanded"].strides.as_deref(), Some(&[0, 1][..]));
        assert!(by_name["row"].strides.is_none());
        assert_eq!(by_name["row"].begin, by_name["transposed"].begin + 8 * 4);
        assert_eq!(by_name["tied_a"].begin, by_name["tied_b"].begin);
        assert_eq!(by_name["empty"].begin, by_name["empty"].end);
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }
}

#[test]
fn lightning_checkpoint() {
    let d = check("lightning.ckpt");
    let names: Vec<&str> = d.tensors.iter().map(|t| &*t.name).collect();
    assert!(
        names.contains(&"optimizer_states.0.state.0.exp_avg"),
        "{names:?}"
    );
    assert!(
        names.contains(&"state_dict.model.layer.weight"),
        "{names:?}"
    );
}

#[test]
fn whole_module() {
    // `torch.save(model)` pickles the model's classes: code, not tensors, as
    // `torch.load(weights_only=True)` also says.
    let d = check("module.pt");
    let why = d.conversion.unwrap().unwrap_err();
    assert!(why.is_trap(), "{why}");
    assert!(why.to_string().contains("torch.nn.modules."), "{why}");
}

#[test]
fn tensors_without_file() {
    let d = check("odd.pt");
    let notes = d.notes.join("\n");
    assert!(
        notes.contains("tensor `quantized` is quantized (torch.qint8): no file"),
        "{notes}"
    );
    assert!(notes.contains("tensor `numpy` is a numpy array"), "{notes}");
    assert!(notes.contains("tensor `sparse` is sparse"), "{notes}");
    assert!(d.notes.iter().all(|n| n.contains("odd.pt: ")), "{notes}");
}

#[test]
fn malicious_pickle() {
    let d = check("evil.pt");
    let why = d.conversion.unwrap().unwrap_err();
    assert_eq!(
        why,
        NotOffered::Trap(
            "the pickle calls posix.system; nothing was run, the file is not offered as \
             safetensors"
                .into()
        )
    );
    assert!(d.notes.iter().any(|n| n.contains("posix.system")));
}

/// `describe` on `bytes` written to a file.
fn describe_bytes(bytes: &[u8]) -> Result<Description, FormatError> {
    let dir = crate::base::testing::TempDir::new("pytorch");
    let path = dir.join("model.bin");
    std::fs::write(&path, bytes).unwrap();
    describe(&File::open(&path).unwrap(), &path)
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

fn replace(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
    bytes[at..at + to.len()].copy_from_slice(to);
}

fn rule(r: Result<Description, FormatError>) -> (String, bool) {
    let e = r.unwrap_err();
    (e.rule().unwrap_or_default(), e.cut_short())
}

/// A zip archive of stored entries.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    use ::zip::write::SimpleFileOptions;
    let mut w = ::zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = SimpleFileOptions::default().compression_method(::zip::CompressionMethod::Stored);
    for (name, data) in entries {
        w.start_file(*name, stored).unwrap();
        std::io::Write::write_all(&mut w, data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn foreign_and_tar_files() {
    assert!(describe_bytes(b"").unwrap_err().is_foreign());
    assert!(describe_bytes(b"\x80\x02}q\x00.").unwrap_err().is_foreign());
    assert!(
        describe_bytes(&zip_of(&[("a/readme.txt", b"hi")]))
            .unwrap_err()
            .is_foreign()
    );
    let mut tar = vec![0u8; 1024];
    tar[..8].copy_from_slice(b"sys_info");
    tar[257..262].copy_from_slice(b"ustar");
    assert_eq!(rule(describe_bytes(&tar)), ("TarCheckpoint".into(), false));
}

#[test]
fn truncated_files_are_cut_short() {
    let zip = fixture_bytes("views_zip.pt");
    for len in [4, 100, zip.len() / 2, zip.len() - 1] {
        let (r, cut) = rule(describe_bytes(&zip[..len]));
        assert!(cut, "{len}: {r}");
    }
    let legacy = fixture_bytes("views_legacy.pt");
    assert_eq!(
        rule(describe_bytes(&legacy[..legacy.len() - 3])),
        ("StorageOutOfFile".into(), true)
    );
    let (r, cut) = rule(describe_bytes(&legacy[..200]));
    assert!(cut, "{r}");
}

#[test]
fn big_endian_files_are_refused() {
    let mut zip = fixture_bytes("views_zip.pt");
    replace(&mut zip, b"little", b"big   ");
    assert_eq!(rule(describe_bytes(&zip)), ("BigEndian".into(), false));
    let mut legacy = fixture_bytes("views_legacy.pt");
    replace(
        &mut legacy,
        b"little_endianq\x02\x88",
        b"little_endianq\x02\x89",
    );
    assert_eq!(rule(describe_bytes(&legacy)), ("BigEndian".into(), false));
}

#[test]
fn compressed_storage_is_refused() {
    let mut zip = fixture_bytes("views_zip.pt");
    // The compression method of `data/0`, in its local and its central header.
    let name = b"views_zip/data/0";
    let at: Vec<usize> = zip
        .windows(name.len())
        .enumerate()
        .filter(|(_, w)| *w == name)
        .map(|(i, _)| i)
        .collect();
    zip[at[0] - 30 + 8] = 8;
    zip[at[1] - 46 + 10] = 8;
    assert_eq!(
        rule(describe_bytes(&zip)),
        ("CompressedEntry".into(), false)
    );
}

#[test]
fn torchscript_is_refused() {
    let zip = zip_of(&[
        ("m/data.pkl", b"\x80\x02}q\x00."),
        ("m/constants.pkl", b"\x80\x02)."),
        ("m/code/m.py", b""),
    ]);
    assert_eq!(rule(describe_bytes(&zip)), ("TorchScript".into(), false));
}

#[test]
fn duplicate_entries_are_refused() {
    let zip = zip_of(&[
        ("m/data.pkl", b"\x80\x02}q\x00."),
        ("m/DATA.PKL", b"\x80\x02]q\x00."),
    ]);
    assert_eq!(rule(describe_bytes(&zip)), ("DuplicateEntry".into(), false));
}

/// Every occurrence of `from` in `bytes` replaced by `to` (of the same length).
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from)
        .map(|(i, _)| i)
        .collect();
    for i in at {
        bytes[i..i + to.len()].copy_from_slice(to);
    }
}

/// The end record of an archive that has no comment: its last 22 bytes.
fn end_record(zip: &mut [u8]) -> &mut [u8] {
    let at = zip.len() - 22;
    assert_eq!(&zip[at..at + 4], b"PK\x05\x06");
    &mut zip[at..]
}

/// A pickle that calls `os.system`.
const CALLS: &[u8] = b"\x80\x02cos\nsystem\n(S'true'\ntR.";

/// Two records of exactly one name: both are scanned, whichever comes first, and the archive is
/// refused for the name.
#[test]
fn records_of_one_name_are_all_scanned_and_refused() {
    for (first, second) in [
        (CALLS, b"\x80\x02}q\x00.".as_slice()),
        (b"\x80\x02}q\x00.", CALLS),
    ] {
        let mut zip = zip_of(&[("m/data.pkl", first), ("m/data.pkX", second)]);
        replace_all(&mut zip, b"m/data.pkX", b"m/data.pkl");
        let e = describe_bytes(&zip).unwrap_err().to_string();
        assert!(e.contains("os.system"), "{e}");
        assert!(e.contains("[DuplicateEntry]) [UnsafePickle]"), "{e}");
    }
}

/// The end record's count against the records walked: fewer (a record hidden from torch's
/// reader) is refused after the scan; more is what torch's reader refuses (here, more than the
/// directory's size can hold).
#[test]
fn record_counts_that_disagree_are_refused() {
    let zip = zip_of(&[("m/data.pkl", b"\x80\x02}q\x00."), ("m/version", b"3\n")]);
    for (count, want) in [(1u8, "RecordCount"), (3, "BadEndRecord")] {
        let mut zip = zip.clone();
        let end = end_record(&mut zip);
        end[8] = count;
        end[10] = count;
        assert_eq!(rule(describe_bytes(&zip)), (want.into(), false), "{count}");
    }
    // The two counts disagreeing with each other: torch's reader refuses it.
    let mut zip = zip.clone();
    end_record(&mut zip)[8] = 1;
    assert_eq!(rule(describe_bytes(&zip)), ("BadEndRecord".into(), false));
}

/// The last end record is the one read, whole or not; bytes no record accounts for are refused.
#[test]
fn the_last_end_record_is_read_and_nothing_is_left_unaccounted() {
    let zip = zip_of(&[("m/data.pkl", b"\x80\x02}q\x00.")]);
    let mut end = zip[zip.len() - 22..].to_vec();
    // A second end record whose directory lies past the end: no falling back to the first.
    end[16..20].copy_from_slice(&10_000u32.to_le_bytes());
    let broken = [zip.as_slice(), &end].concat();
    assert_eq!(
        rule(describe_bytes(&broken)),
        ("BadEndRecord".into(), false)
    );
    // The same end record twice: the first is then bytes between the directory and its end.
    let twice = [zip.as_slice(), &zip[zip.len() - 22..]].concat();
    assert_eq!(
        rule(describe_bytes(&twice)),
        ("EndRecordLayout".into(), false)
    );
    // A comment length that is not what follows.
    let mut comment = zip.clone();
    end_record(&mut comment)[20] = 3;
    assert_eq!(
        rule(describe_bytes(&comment)),
        ("EndRecordLayout".into(), false)
    );
    // No end record at all: an archive still being written.
    assert_eq!(
        rule(describe_bytes(&zip[..zip.len() - 22])),
        ("NoEndRecord".into(), true)
    );
}

/// A local header must say what its record says: name, method, flags and sizes.
#[test]
fn local_headers_that_disagree_are_refused() {
    let zip = zip_of(&[("m/data.pkl", b"\x80\x02}q\x00.")]);
    // The local header comes first: its name, flags and size.
    for (at, byte) in [(30 + 2, b'X'), (6, 0x10), (18, 5)] {
        let mut zip = zip.clone();
        zip[at] = byte;
        assert_eq!(
            rule(describe_bytes(&zip)),
            ("LocalHeader".into(), false),
            "{at}"
        );
    }
    let d = describe_bytes(&zip);
    assert!(d.is_ok(), "{d:?}");
}

/// The top folder is the first record's: `data.pkl` is looked for there, and every record must be
/// in it.
#[test]
fn the_top_folder_is_the_first_records() {
    let pkl = b"\x80\x02}q\x00.".as_slice();
    assert!(
        describe_bytes(&zip_of(&[("a/version", b"3\n"), ("b/data.pkl", pkl)]))
            .unwrap_err()
            .is_foreign()
    );
    assert_eq!(
        rule(describe_bytes(&zip_of(&[
            ("a/version", b"3\n"),
            ("a/data.pkl", pkl),
            ("b/data.pkl", CALLS)
        ]))),
        ("UnsafePickle".into(), false)
    );
    assert_eq!(
        rule(describe_bytes(&zip_of(&[
            ("a/data.pkl", pkl),
            ("A/version", b"3\n")
        ]))),
        ("OutsideTopFolder".into(), false)
    );
}

#[test]
fn any_top_folder_and_storage_checks() {
    // One float32 tensor `w` of shape (2,) in storage "0" of 2 elements, hand-written.
    let pkl: &[u8] = b"\x80\x02}q\x00X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n(\
        (X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ\
        K\x00K\x02\x85K\x01\x85\x89)tRs.";
    let data = [0u8, 0, 128, 63, 0, 0, 0, 64];
    let d = describe_bytes(&zip_of(&[
        ("anything/data.pkl", pkl),
        ("anything/data/0", &data),
    ]))
    .unwrap();
    assert_eq!(d.tensors.len(), 1, "{:?}", d.notes);
    assert_eq!(d.tensors[0].size(), 8);
    // The storage entry holds fewer bytes than its persistent id claims: the tensor is left out.
    let d = describe_bytes(&zip_of(&[("x/data.pkl", pkl), ("x/data/0", &data[..4])])).unwrap();
    assert!(d.tensors.is_empty());
    assert!(
        d.notes[0].contains("tensor `w` has its storage `0` claim 8 bytes"),
        "{:?}",
        d.notes
    );
    assert_eq!(
        d.conversion.unwrap().unwrap_err(),
        NotOffered::Unfit("no tensors".into())
    );
    // Missing storage.
    let d = describe_bytes(&zip_of(&[("x/data.pkl", pkl)])).unwrap();
    assert!(d.notes[0].contains("missing"), "{:?}", d.notes);
}

#[test]
fn notes_are_bounded() {
    // 150 names of one tensor whose storage is missing: 150 notes, 100 kept.
    let tensor: &[u8] = b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n\
        FloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89)tRq\x01";
    let mut pkl = b"\x80\x02}(".to_vec();
    for i in 0..150 {
        let key = format!("k{i}");
        pkl.push(b'X');
        pkl.extend((key.len() as u32).to_le_bytes());
        pkl.extend(key.as_bytes());
        pkl.extend(if i == 0 { tensor } else { b"h\x01" });
    }
    pkl.extend(b"u.");
    let d = describe_bytes(&zip_of(&[("x/data.pkl", &pkl)])).unwrap();
    assert_eq!(d.notes.len(), 101);
    assert!(d.notes[100].ends_with(": and 51 more"), "{}", d.notes[100]);
}

/// A `torch.save` archive written inside another file (as DCP writes each chunk), read at its
/// offset: the same tensors, of the same bytes, placed in the outer file; and the archive's
/// neighbours never taken for part of it. Also for a zip64 archive (as torch writes one past
/// 4 GiB: `zip64.pt` is a torch.save archive rewritten by Python's zipfile with every zip64
/// record forced, which torch.load reads), whose zip64 end record the locator places from the
/// archive's start.
#[test]
fn an_archive_inside_another_file_reads_as_the_file_alone() {
    for name in ["views_zip.pt", "zip64.pt"] {
        archive_inside_another_file(name);
    }
}

fn archive_inside_another_file(name: &str) {
    let (file, alone) = read(name);
    let alone = alone.unwrap();
    assert!(!alone.tensors.is_empty(), "{name}");
    let bytes = std::fs::read(fixture(name)).unwrap();
    let before = vec![b'P'; 12_345];
    let after = b"PK\x05\x06 an end record that is not the archive's".to_vec();
    let outer = std::env::temp_dir().join(format!("tm-archive-{}-{name}", std::process::id()));
    std::fs::write(&outer, [&before[..], &bytes, &after].concat()).unwrap();
    let o = File::open(&outer).unwrap();
    let at = before.len() as u64;
    let inside = super::describe_archive(&o, at, bytes.len() as u64, &outer).unwrap();
    assert_eq!(inside.tensors.len(), alone.tensors.len());
    for (a, b) in alone.tensors.iter().zip(&inside.tensors) {
        assert_eq!(
            (&a.name, a.begin + at, &a.strides),
            (&b.name, b.begin, &b.strides)
        );
        assert_eq!(gather(&file, a), gather(&o, b), "{}", a.name);
    }
    // Cut one byte short, the archive's own end record is out of reach: refused, not read past.
    let short = super::describe_archive(&o, at, bytes.len() as u64 - 1, &outer);
    assert!(short.is_err() || short.unwrap().tensors.is_empty());
    std::fs::remove_file(&outer).unwrap();
}
