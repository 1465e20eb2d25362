//! The widening of `-o dtype=f32|f64` against an independent reference, without a mount: for
//! every encoding of each 8- and 16-bit float format (and random float32 bit patterns, NaNs
//! included), `ml_dtypes`/numpy's `astype` must give exactly the bytes tensormount presents, also
//! for reads starting and ending in the middle of an element.

use crate::common::*;

use std::fs;
use tensormount::format::Dtype;
use tensormount::format::widen::{Target, Widening};

/// Every stored encoding of a format of `width` bytes (all of them up to 16 bits), as bytes.
fn every_encoding(width: usize) -> Vec<u8> {
    match width {
        1 => (0..=255u8).collect(),
        2 => (0..=u16::MAX).flat_map(u16::to_le_bytes).collect(),
        _ => {
            let mut rng = Rng::new(7);
            let mut v: Vec<u8> = [
                0x7f80_0001u32,
                0xffc0_0001,
                0x7f80_0000,
                0x0000_0001,
                0x8000_0000,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
            v.extend((0..65536).flat_map(|_| (rng.next() as u32).to_le_bytes()));
            v
        }
    }
}

#[test]
fn widening_matches_ml_dtypes_for_every_encoding() {
    let py = python();
    require_module(&py, "ml_dtypes");
    let tmp = TempDir::new("widen");
    let cases = [
        ("BF16", Dtype::BF16, 2),
        ("F16", Dtype::F16, 2),
        ("F8_E4M3", Dtype::F8_E4M3, 1),
        ("F8_E5M2", Dtype::F8_E5M2, 1),
        ("F8_E4M3FNUZ", Dtype::F8_E4M3FNUZ, 1),
        ("F8_E5M2FNUZ", Dtype::F8_E5M2FNUZ, 1),
        ("F8_E8M0", Dtype::F8_E8M0, 1),
        ("F4", Dtype::F4, 1),
        ("F32", Dtype::F32, 4),
    ];
    let mut rng = Rng::new(1);
    for (name, dtype, width) in cases {
        let stored = every_encoding(width);
        let input = tmp.join(format!("{name}.bin"));
        fs::write(&input, &stored).unwrap();
        for (tname, target) in [("F32", Target::F32), ("F64", Target::F64)] {
            let Some(w) = Widening::new(dtype, target) else {
                assert_eq!(
                    (name, tname),
                    ("F32", "F32"),
                    "only F32 to F32 is not a widening"
                );
                continue;
            };
            let expected_file = tmp.join(format!("{name}-{tname}.bin"));
            let args = [
                "widen",
                name,
                tname,
                input.to_str().unwrap(),
                expected_file.to_str().unwrap(),
            ];
            oracle(&py, &args);
            let expected = fs::read(&expected_file).unwrap();
            assert_eq!(w.presented_len(stored.len() as u64), expected.len() as u64);
            let mut got = vec![0u8; expected.len()];
            assert!(w.convert(&stored, 0, &mut got));
            let tw = target.width() as usize;
            let per = if dtype == Dtype::F4 { 2 } else { 1 };
            for (i, (g, e)) in got.chunks(tw).zip(expected.chunks(tw)).enumerate() {
                let at = i / per * width;
                assert_eq!(
                    g,
                    e,
                    "{name} to {tname}: element {i} (stored {:02x?})",
                    &stored[at..at + width]
                );
            }
            // Reads at odd offsets and lengths, as the kernel may ask for them.
            for _ in 0..200 {
                let off = rng.below(expected.len() as u64);
                let len = rng.below((expected.len() as u64 - off).min(4099) + 1);
                let r = w.stored_range(off, len);
                let part = &stored[r.start as usize..(r.start + r.len) as usize];
                let mut out = vec![0u8; len as usize];
                assert!(w.convert(part, off, &mut out));
                assert!(
                    out == expected[off as usize..(off + len) as usize],
                    "{name} to {tname}: read of {len} bytes at {off}"
                );
            }
        }
    }
}

/// The tensors of the mounted model: every encoding of the 8-bit formats, random 16-bit values
/// (an odd count, so that reads end mid-element), random float32, and tensors never widened.
fn model(rng: &mut Rng) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let random =
        |rng: &mut Rng, n: usize| -> Vec<u8> { (0..n).map(|_| rng.next() as u8).collect() };
    vec![
        ("bf16", "BF16", random(rng, 2 * 40_001)),
        ("f16", "F16", random(rng, 2 * 4_097)),
        ("e4m3", "F8_E4M3", every_encoding(1)),
        ("e5m2", "F8_E5M2", every_encoding(1)),
        ("e4m3fnuz", "F8_E4M3FNUZ", every_encoding(1)),
        ("e5m2fnuz", "F8_E5M2FNUZ", every_encoding(1)),
        ("e8m0", "F8_E8M0", every_encoding(1)),
        ("f4", "F4", every_encoding(1)),
        ("f32", "F32", random(rng, 4 * 1_001)),
        ("i32", "I32", random(rng, 4 * 33)),
        ("u8", "U8", random(rng, 77)),
    ]
}

/// `-o dtype=f32` and `dtype=f64` through a real mount: every tensor file holds ml_dtypes' widening
/// of the stored bytes (or the stored bytes, where nothing is widened), read whole, at odd offsets
/// and lengths and with O_DIRECT; the xattrs say what was widened from what; `-o npy` views load
/// in numpy as the target dtype, in both layouts; `--list --json` shows both dtypes and sizes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn widened_tensors_read_back_as_ml_dtypes_converts_them() {
    require_fuse();
    let py = python();
    require_module(&py, "ml_dtypes");
    let tmp = TempDir::new("widen-mount");
    let mut rng = Rng::new(3);
    let tensors = model(&mut rng);
    let shapes: Vec<[usize; 1]> = tensors
        .iter()
        .map(|(_, dtype, data)| match *dtype {
            "F4" => [data.len() * 2],
            _ => [data.len() / dtype_size(dtype) as usize],
        })
        .collect();
    let ts: Vec<T> = tensors
        .iter()
        .zip(&shapes)
        .map(|((name, dtype, data), shape)| T {
            name,
            dtype,
            shape,
            data: data.clone(),
        })
        .collect();
    let dir_src = tmp.join("src");
    fs::create_dir(&dir_src).unwrap();
    let src = dir_src.join("m.safetensors");
    write_safetensors(&src, &ts, None);

    for (opts, target, dir) in [
        ("dtype=f32,npy", "F32", "m.tensors"),
        ("dtype=f64,npy,layout=tree", "F64", "m.tensors"),
    ] {
        let m = Mounted::new(&dir_src, opts);
        for (name, dtype, data) in &tensors {
            let file = m.path(format!("{dir}/{name}"));
            let widened = !(matches!(*dtype, "I32" | "U8") || (*dtype == "F32" && target == "F32"));
            let expected = if widened {
                let input = tmp.join(format!("{name}.stored"));
                let output = tmp.join(format!("{name}.{target}"));
                fs::write(&input, data).unwrap();
                oracle(&py, &["widen", dtype, target, s(&input), s(&output)]);
                fs::read(&output).unwrap()
            } else {
                data.clone()
            };
            let what = format!("{opts}: {name} ({dtype})");
            assert_eq!(fs::read(&file).unwrap(), expected, "{what}: whole file");
            let want_dtype = if widened { target } else { dtype };
            assert_eq!(
                getxattr(&file, "user.safetensors.dtype").as_deref(),
                Some(want_dtype),
                "{what}"
            );
            assert_eq!(
                getxattr(&file, "user.safetensors.source_dtype").as_deref(),
                widened.then_some(*dtype),
                "{what}"
            );
            let f = fs::File::open(&file).unwrap();
            for _ in 0..50 {
                let off = rng.below(expected.len() as u64);
                let len = rng.below((expected.len() as u64 - off).min(70_000) + 1) as usize;
                let mut buf = vec![0u8; len];
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, off).unwrap();
                assert!(
                    buf == expected[off as usize..off as usize + len],
                    "{what}: {len} bytes at {off}"
                );
            }
            let direct = dd(&file, &["bs=1M", "iflag=direct"]).unwrap();
            assert!(direct == expected, "{what}: dd iflag=direct");
        }
        // numpy loads every view as the target dtype, with the bytes of the tensor file.
        let script = [
            "import numpy as np, sys, os",
            "d = sys.argv[1]",
            "for n in sys.argv[2:]:",
            "    a = np.load(os.path.join(d, n + '.npy'), mmap_mode='r')",
            "    raw = open(os.path.join(d, n), 'rb').read()",
            "    assert a.tobytes() == raw, n",
            "    print(n, a.dtype.str)",
        ]
        .join("\n");
        let mut cmd = std::process::Command::new(&py);
        cmd.args(["-c", &script, s(&m.path(dir))]);
        cmd.args(tensors.iter().map(|t| t.0));
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{opts}: numpy: {}", stderr(&out));
        let t = if target == "F32" { "<f4" } else { "<f8" };
        for line in stdout(&out).lines() {
            let (name, descr) = line.split_once(' ').unwrap();
            let want = match name {
                "i32" => "<i4",
                "u8" => "|u1",
                _ => t,
            };
            assert_eq!(descr, want, "{opts}: {name}.npy");
        }
    }

    // --list shows the presented dtype and size beside the stored ones.
    let out = run(&["--list", "--json", "-o", "dtype=f32", s(&src)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let bf16 = rows["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "bf16")
        .unwrap();
    assert_eq!(bf16["dtype"], "F32");
    assert_eq!(bf16["size"], 4 * 40_001);
    assert_eq!(bf16["stored_dtype"], "BF16");
    assert_eq!(bf16["stored_size"], 2 * 40_001);
}

/// A source cut short after mounting: a read of a widened tensor fails with EIO, never a short or
/// made-up reply.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_truncated_source_gives_eio_on_widened_reads() {
    require_fuse();
    let tmp = TempDir::new("widen-cut");
    let src = tmp.join("m.safetensors");
    let data = bytes(2 * 100_000, 5);
    let shape = [100_000];
    write_safetensors(
        &src,
        &[T {
            name: "w",
            dtype: "BF16",
            shape: &shape,
            data,
        }],
        None,
    );
    let m = Mounted::new(&src, "dtype=f32,refresh=off");
    let f = fs::File::open(m.path("w")).unwrap();
    let len = fs::metadata(&src).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&src)
        .unwrap()
        .set_len(len - 1000)
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let err = std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 400_000 - 4096).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
}
