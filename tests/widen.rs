//! The widening of `-o dtype=f32|f64` against an independent reference, without a mount: for
//! every encoding of each 8- and 16-bit float format (and random float32 bit patterns, NaNs
//! included), `ml_dtypes`/numpy's `astype` must give exactly the bytes tensormount presents, also
//! for reads starting and ending in the middle of an element.

mod common;
use common::*;

use std::fs;
use tensormount::format::Dtype;
use tensormount::widen::{Target, Widening};

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
            for (i, (g, e)) in got.chunks(tw).zip(expected.chunks(tw)).enumerate() {
                assert_eq!(
                    g,
                    e,
                    "{name} to {tname}: element {i} (stored {:02x?})",
                    &stored[i * width..(i + 1) * width]
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
