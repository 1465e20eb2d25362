//! `format::PYTORCH.describe` on zip archives built from structured input, as torch's zip reader
//! and other readers could be made to see them differently.
//!
//! The input is read (by `arbitrary`'s `Unstructured`) as up to eight records (mostly after a
//! `data.pkl` as torch writes it) and the archive's end: each record's name (torch's names, in some case, in another folder, with a NUL byte, or
//! any bytes), its data (a real pickle of one tensor, that tensor's storage, or any bytes), its
//! method and flags, a Unicode Path extra field, its sizes and offset moved into a zip64 extra
//! field (whole or cut short), its directory offset moved, and what its local header says
//! (the same, zeros with a data descriptor, another name, flags, method or sizes); then the end
//! record's two counts, a zip64 end record (its counts, and the end record's own saturated or
//! not), bytes between the directory and the end records, a comment and the length the end
//! record gives it, and a second end record after it all.
//!
//! Besides no panic: the builder knows every way in which it laid the archive out otherwise than
//! a zip writer does (a defect: a record torch's reader would not find as it is listed, or bytes
//! no record accounts for); an archive with a defect is never described (`describe` fails). One
//! that is described passes the `checkpoint` target's checks.
#![no_main]

mod common;
mod pytorch_checks;

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tensormount::format;

/// One float32 tensor `w` of shape (2,) in storage "0", as torch.save pickles it.
const PICKLE: &[u8] = b"\x80\x02}q\x00X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n(\
    (X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ\
    K\x00K\x02\x85K\x01\x85\x89)tRs.";
const STORAGE: &[u8] = &[0, 0, 128, 63, 0, 0, 0, 64];
const NAMES: &[&[u8]] = &[
    b"data.pkl",
    b"data/0",
    b"version",
    b"byteorder",
    b"data/1",
    b".format_version",
    b"extra.pkl",
];
const SATURATED: u32 = u32::MAX;
const DESCRIPTOR: u16 = 1 << 3;
/// Flags torch's reader refuses a record for (encrypted, patched, strong encryption) or the
/// whole archive for (a masked directory).
const REFUSED: u16 = 1 | 1 << 5 | 1 << 6 | 1 << 13;

/// A record as the builder lays it out.
struct Record {
    name: Vec<u8>,
    data: Vec<u8>,
    method: u16,
    flags: u16,
    extra: Vec<u8>,
    /// Sizes and offset in a zip64 extra field; `Some(false)`: the field cut short.
    zip64: Option<bool>,
    offset_shift: i8,
    local: Local,
}

enum Local {
    Same,
    /// Zero CRC and sizes, as a writer with a data descriptor leaves them.
    Zeros,
    Name(Vec<u8>),
    Flags(u16),
    Method(u16),
    Sizes(u32, u32),
}

struct End {
    total_shift: i8,
    on_disk_shift: i8,
    /// A zip64 end record: its count's shift from the end record's, and whether the end record's
    /// own fields say "in the zip64 record".
    zip64: Option<(i8, bool)>,
    gap: u8,
    comment: Vec<u8>,
    comment_len_shift: i8,
    /// A second end record after everything: its count, directory size and offset.
    second: Option<(u16, u32, u32)>,
}

/// Up to `max` bytes of the input.
fn bytes(u: &mut Unstructured, max: usize) -> Result<Vec<u8>> {
    let n = u.int_in_range(0..=max)?;
    Ok(u.bytes(n)?.to_vec())
}

fn record(u: &mut Unstructured) -> Result<Record> {
    let top: &[u8] = b"archive/";
    let name = match u.int_in_range(0..=11u8)? {
        0..=7 => [top, *u.choose(NAMES)?].concat(),
        8 => [top, *u.choose(NAMES)?].concat().to_ascii_uppercase(),
        9 => [b"other/".as_slice(), *u.choose(NAMES)?].concat(),
        10 => [top, b"data\0.pkl"].concat(),
        _ => bytes(u, 24)?,
    };
    // Mostly what torch writes under the name.
    let usual = if name.ends_with(b"data.pkl") {
        PICKLE
    } else if name.ends_with(b"data/0") {
        STORAGE
    } else {
        b"3\n"
    };
    let data = match u.int_in_range(0..=3u8)? {
        0 | 1 => usual.to_vec(),
        2 => PICKLE.to_vec(),
        _ => bytes(u, 64)?,
    };
    let method = match u.int_in_range(0..=7u8)? {
        0..=5 => 0,
        6 => 8,
        _ => u.arbitrary()?,
    };
    let flags = match u.int_in_range(0..=7u8)? {
        0..=3 => 0,
        4 => 0x800,
        5 | 6 => 0x808,
        _ => u.arbitrary()?,
    };
    let extra = if u.ratio(1, 6)? {
        // A Unicode Path field that renames the record (its CRC is the raw name's).
        let to = [top, *u.choose(NAMES)?].concat();
        let mut body = vec![1];
        body.extend(crc32(&name).to_le_bytes());
        body.extend(&to);
        [
            &0x7075u16.to_le_bytes()[..],
            &(body.len() as u16).to_le_bytes(),
            &body,
        ]
        .concat()
    } else {
        Vec::new()
    };
    let zip64 = match u.int_in_range(0..=7u8)? {
        0 => Some(true),
        1 => Some(false),
        _ => None,
    };
    let offset_shift = if u.ratio(1, 10)? { u.arbitrary()? } else { 0 };
    let local = match u.int_in_range(0..=15u8)? {
        0 => Local::Zeros,
        1 => Local::Name(bytes(u, 16)?),
        2 => Local::Flags(u.arbitrary()?),
        3 => Local::Method(u.arbitrary()?),
        4 => Local::Sizes(u.arbitrary()?, u.arbitrary()?),
        _ => Local::Same,
    };
    Ok(Record {
        name,
        data,
        method,
        flags,
        extra,
        zip64,
        offset_shift,
        local,
    })
}

fn end(u: &mut Unstructured) -> Result<End> {
    let small = |u: &mut Unstructured| -> Result<i8> {
        Ok(if u.ratio(1, 8)? {
            u.int_in_range(-2..=2)?
        } else {
            0
        })
    };
    Ok(End {
        total_shift: small(u)?,
        on_disk_shift: small(u)?,
        zip64: if u.ratio(1, 3)? {
            Some((small(u)?, u.arbitrary()?))
        } else {
            None
        },
        gap: if u.ratio(1, 10)? { u.arbitrary()? } else { 0 },
        // No `P`: a comment holds no signature.
        comment: (bytes(u, 8)?.into_iter())
            .map(|b| if b == b'P' { b'Q' } else { b })
            .collect(),
        comment_len_shift: small(u)?,
        second: if u.ratio(1, 12)? {
            Some((u.arbitrary()?, u.arbitrary()?, u.arbitrary()?))
        } else {
            None
        },
    })
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn u16le(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

fn u32le(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// The archive's bytes, and whether it has a defect.
fn build(records: &[Record], end: &End) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut defect = false;
    let mut offsets = Vec::new();
    for r in records {
        offsets.push(out.len() as u32);
        let (crc, size) = (crc32(&r.data), r.data.len() as u32);
        let (mut name, mut flags, mut method, mut sizes, mut lcrc) =
            (r.name.clone(), r.flags, r.method, (size, size), crc);
        match &r.local {
            Local::Same => {}
            Local::Zeros => {
                (sizes, lcrc) = ((0, 0), 0);
                defect |= r.flags & DESCRIPTOR == 0 && size != 0;
            }
            Local::Name(n) => {
                defect |= *n != name;
                name = n.clone();
            }
            Local::Flags(f) => {
                defect |= *f != flags;
                flags = *f;
            }
            Local::Method(m) => {
                defect |= *m != method;
                method = *m;
            }
            Local::Sizes(c, s) => {
                defect |=
                    (*c, *s) != sizes && !(r.flags & DESCRIPTOR != 0 && (*c, *s, crc) == (0, 0, 0));
                sizes = (*c, *s);
            }
        }
        out.extend(b"PK\x03\x04");
        out.extend(u16le(20));
        out.extend(u16le(flags));
        out.extend(u16le(method));
        out.extend([0, 0, 0x21, 0]);
        out.extend(u32le(lcrc));
        out.extend(u32le(sizes.0));
        out.extend(u32le(sizes.1));
        out.extend(u16le(name.len() as u16));
        out.extend(u16le(0));
        out.extend(&name);
        out.extend(&r.data);
    }
    let cd_start = out.len() as u32;
    for (r, &offset) in records.iter().zip(&offsets) {
        let size = r.data.len() as u32;
        let offset = offset.wrapping_add_signed(r.offset_shift.into());
        defect |= r.offset_shift != 0;
        let mut extra = r.extra.clone();
        let (mut c, mut s, mut o) = (size, size, offset);
        if let Some(whole) = r.zip64 {
            (c, s, o) = (SATURATED, SATURATED, SATURATED);
            let mut body = Vec::new();
            for v in [size, size, offset] {
                body.extend(u64::from(v).to_le_bytes());
            }
            if !whole {
                body.truncate(12);
                defect = true;
            }
            extra.extend(u16le(1));
            extra.extend(u16le(body.len() as u16));
            extra.extend(body);
        }
        out.extend(b"PK\x01\x02");
        out.extend(u16le(20));
        out.extend(u16le(20));
        out.extend(u16le(r.flags));
        out.extend(u16le(r.method));
        out.extend([0, 0, 0x21, 0]);
        out.extend(u32le(crc32(&r.data)));
        out.extend(u32le(c));
        out.extend(u32le(s));
        out.extend(u16le(r.name.len() as u16));
        out.extend(u16le(extra.len() as u16));
        // Comment length, disk, internal and external attributes.
        out.extend([0; 10]);
        out.extend(u32le(o));
        out.extend(&r.name);
        out.extend(&extra);
        defect |= r.flags & REFUSED != 0 || !matches!(r.method, 0 | 8);
    }
    let cd_size = out.len() as u32 - cd_start;
    let n = records.len() as i64;
    let count = |shift: i8| (n + i64::from(shift)).clamp(0, 0xffff) as u16;
    let (total, on_disk) = (count(end.total_shift), count(end.on_disk_shift));
    // Without a zip64 record (or with one whose counts the end record does not defer to), the
    // end record's counts are the archive's.
    if !matches!(end.zip64, Some((_, true))) {
        defect |= i64::from(total) != n || i64::from(on_disk) != n;
    }
    out.extend(vec![0x55; end.gap.into()]);
    defect |= end.gap != 0;
    let (mut eocd_total, mut eocd_on_disk, mut eocd_size, mut eocd_start) =
        (total, on_disk, cd_size, cd_start);
    if let Some((shift, saturated)) = end.zip64 {
        let z64_total = (n + i64::from(shift)).max(0) as u64;
        defect |= z64_total != n as u64;
        let at = out.len() as u64;
        out.extend(b"PK\x06\x06");
        out.extend(44u64.to_le_bytes());
        out.extend(u16le(45));
        out.extend(u16le(45));
        out.extend([0; 8]);
        out.extend(z64_total.to_le_bytes());
        out.extend(z64_total.to_le_bytes());
        out.extend(u64::from(cd_size).to_le_bytes());
        out.extend(u64::from(cd_start).to_le_bytes());
        out.extend(b"PK\x06\x07");
        out.extend(u32le(0));
        out.extend(at.to_le_bytes());
        out.extend(u32le(1));
        if saturated {
            (eocd_total, eocd_on_disk, eocd_size, eocd_start) =
                (0xffff, 0xffff, SATURATED, SATURATED);
        } else {
            // The end record's own counts must then be the zip64 record's.
            defect |= u64::from(total) != z64_total || u64::from(on_disk) != z64_total;
        }
    }
    out.extend(b"PK\x05\x06");
    out.extend([0; 4]);
    out.extend(u16le(eocd_on_disk));
    out.extend(u16le(eocd_total));
    out.extend(u32le(eocd_size));
    out.extend(u32le(eocd_start));
    let comment_len =
        (end.comment.len() as i64 + i64::from(end.comment_len_shift)).clamp(0, 0xffff);
    defect |= comment_len != end.comment.len() as i64;
    out.extend(u16le(comment_len as u16));
    out.extend(&end.comment);
    if let Some((total, size, start)) = end.second {
        out.extend(b"PK\x05\x06");
        out.extend([0; 4]);
        out.extend(u16le(total));
        out.extend(u16le(total));
        out.extend(u32le(size));
        out.extend(u32le(start));
        out.extend(u16le(0));
        defect = true;
    }
    // Names as torch's reader holds them: one folder, the first record's; no two alike in any
    // case; no NUL byte.
    let top = records.first().and_then(|r| {
        r.name
            .iter()
            .position(|&b| b == b'/')
            .map(|i| &r.name[..=i])
    });
    let mut names: Vec<Vec<u8>> = records
        .iter()
        .map(|r| r.name.to_ascii_lowercase())
        .collect();
    names.sort();
    defect |= names.windows(2).any(|w| w[0] == w[1]);
    defect |= records
        .iter()
        .any(|r| r.name.contains(&0) || top.is_some_and(|t| !r.name.starts_with(t)));
    (out, defect)
}

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-zip"))
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(count) = u.int_in_range(0..=8usize) else {
        return;
    };
    let mut records = Vec::with_capacity(count + 1);
    // Mostly an archive that starts as torch's: its pickle first.
    if u.ratio(3, 4).unwrap_or(false) {
        records.push(Record {
            name: b"archive/data.pkl".to_vec(),
            data: PICKLE.to_vec(),
            method: 0,
            flags: 0x808,
            extra: Vec::new(),
            zip64: None,
            offset_shift: 0,
            local: Local::Zeros,
        });
    }
    for _ in 0..count {
        match record(&mut u) {
            Ok(r) => records.push(r),
            Err(_) => return,
        }
    }
    let Ok(end) = end(&mut u) else {
        return;
    };
    let (bytes, defect) = build(&records, &end);
    let file = file();
    common::rewrite(file, &bytes);
    if let Ok(d) = format::PYTORCH.describe(file, Path::new("fuzz.pt")) {
        assert!(!defect, "an archive with a defect was described");
        pytorch_checks::check(&d, bytes.len() as u64);
    }
});
