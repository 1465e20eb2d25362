//! A zip archive's directory, read record by record from its raw bytes as torch's reader (miniz
//! 3, through `PyTorchStreamReader`) reads it, so that the records found here are the ones torch
//! finds, under the names it finds them by:
//!
//! - the end record is the last one in the file's last 69,584 bytes (miniz's search), with at
//!   least 22 bytes from it to the end; its zip64 record is the one its locator names. There is
//!   no falling back to an earlier end record;
//! - records are walked within the directory's stated size and offset, named by their raw name
//!   bytes (an extra field never renames one: miniz ignores the Unicode Path field), and their
//!   count is compared with the end record's and the zip64 record's;
//! - each record's data starts where its local header says (the local name and extra lengths),
//!   as miniz reads it.
//!
//! What would make torch's reader refuse the whole archive is an error here ([`read`]): nothing
//! of it is read by torch, so nothing in it can run. Everything else that is not as a zip writer
//! writes it (records past the stated count, a local header that disagrees with its record,
//! bytes where none belong) is a [`Directory::fault`]: the archive is refused for it, after its
//! pickles are scanned, so that a trap is named whichever record torch would take.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;

const END: u32 = 0x0605_4b50;
const END_LEN: u64 = 22;
const LOCATOR: u32 = 0x0706_4b50;
const LOCATOR_LEN: u64 = 20;
const END64: u32 = 0x0606_4b50;
const END64_LEN: u64 = 56;
const CENTRAL: u32 = 0x0201_4b50;
const CENTRAL_LEN: usize = 46;
const LOCAL: u32 = 0x0403_4b50;
const LOCAL_LEN: usize = 30;
/// How far from the end of the file miniz looks for the end record: 4096-byte windows, each 4093
/// bytes before the last, until one starts 65,557 bytes (the longest comment and the record)
/// or more from the end.
const SEARCH: u64 = 4096 + 16 * 4093;
/// The zip64 extended information extra field.
const ZIP64_EXTRA: u16 = 0x0001;
/// A 32-bit field whose value is in the zip64 extra field (or record).
const SATURATED: u32 = u32::MAX;
/// General purpose flags: sizes in a data descriptor after the data (the local header may hold
/// zeros), and the central directory encrypted (which miniz refuses).
const DESCRIPTOR: u16 = 1 << 3;
const MASKED: u16 = 1 << 13;
/// Most bytes of directory read: some 600,000 records of torch's names (a checkpoint has one a
/// storage).
const MAX_DIRECTORY: u64 = 64 << 20;

/// One record of the directory.
#[derive(Debug)]
pub struct Record {
    /// The central record's name, as its raw bytes.
    pub name: Vec<u8>,
    pub method: u16,
    pub flags: u16,
    pub compressed: u64,
    pub size: u64,
    /// Where its local header starts.
    pub header: u64,
    /// Where its data starts, as its local header says; `None` where there is no local header to
    /// say it (torch's reader fails on such a record).
    pub data: Option<u64>,
}

impl Record {
    /// The bytes its data spans from `data`: what torch's reader takes (miniz reads a stored
    /// record's size, a compressed one's compressed size).
    pub fn span(&self) -> u64 {
        match self.method {
            0 => self.size.max(self.compressed),
            _ => self.compressed,
        }
    }

    /// Its name, for messages.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.name)
            .escape_debug()
            .to_string()
    }
}

/// The records of an archive, in the directory's order, and the first thing found in it that a
/// zip writer does not write.
#[derive(Debug)]
pub struct Directory {
    pub records: Vec<Record>,
    /// Where the central directory lies.
    pub central: (u64, u64),
    pub fault: Option<ZipError>,
}

/// The end record, and the zip64 record where there is one, as torch's reader takes them.
struct End {
    at: u64,
    total: u64,
    cd_size: u64,
    cd_start: u64,
    /// The disk number of its records: 0, or 1 in an archive that says it is disk 1 of 1.
    disk: u64,
}

/// Reads the directory of the archive `file` (`len` bytes).
pub fn read(file: Archive<'_>, len: u64) -> Result<Directory, ZipError> {
    let mut faults = Faults(None);
    let end = end(file, len, &mut faults)?;
    let mut records = records(file, &end, &mut faults)?;
    for r in &mut records {
        local_header(file, len, r, &mut faults)?;
    }
    Ok(Directory {
        records,
        central: (end.cd_start, end.cd_start + end.cd_size),
        fault: faults.0,
    })
}

/// The first fault found.
struct Faults(Option<ZipError>);

impl Faults {
    fn add(&mut self, e: ZipError) {
        self.0.get_or_insert(e);
    }
}

/// Declares [`ZipRule`], each rule named as its variant.
macro_rules! rules {
    ($($(#[$doc:meta])* $rule:ident,)*) => {
        /// The rules an archive breaks, by this reader.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ZipRule {
            $($(#[$doc])* $rule,)*
        }

        impl ZipRule {
            /// Its name, as a refusal shows it (`[NoEndRecord]`).
            pub fn name(self) -> &'static str {
                match self {
                    $(ZipRule::$rule => stringify!($rule),)*
                }
            }
        }
    };
}

rules! {
    /// No end record: an archive cut short, or still being written.
    NoEndRecord,
    /// An end record torch's reader refuses.
    BadEndRecord,
    /// Bytes between the directory and the end records, or after them.
    EndRecordLayout,
    /// An end record and its zip64 record that disagree.
    Zip64Mismatch,
    /// A directory larger than read.
    DirectoryTooLarge,
    /// A directory torch's reader refuses.
    BadDirectory,
    /// Bytes at the end of the directory that are no record.
    DirectoryLayout,
    /// A record whose fields torch's reader refuses.
    BadRecord,
    /// More records than the end record counts.
    RecordCount,
    /// A local header that is not there or disagrees with its record.
    LocalHeader,
    /// A record's data past the end of the file.
    EntryOutOfFile,
}

/// Why an archive is not read: a rule it breaks, or a failed read.
#[derive(Debug)]
pub enum ZipError {
    /// It breaks `rule`: what was found, and whether the file ends too soon (what a file still
    /// being written looks like).
    Broken {
        rule: ZipRule,
        what: String,
        cut_short: bool,
    },
    Io(io::Error),
}

fn broken(rule: ZipRule, what: impl Into<String>, cut_short: bool) -> ZipError {
    ZipError::Broken {
        rule,
        what: what.into(),
        cut_short,
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| {
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
    })
}

fn read_at(file: Archive<'_>, at: u64, n: usize) -> Result<Vec<u8>, ZipError> {
    let mut buf = vec![0; n];
    file.read_exact_at(&mut buf, at).map_err(ZipError::Io)?;
    Ok(buf)
}

/// The end record (and its zip64 record), checked as torch's reader checks it.
fn end(file: Archive<'_>, len: u64, faults: &mut Faults) -> Result<End, ZipError> {
    let start = len.saturating_sub(SEARCH);
    let tail = read_at(file, start, (len - start) as usize)?;
    // The last signature with a whole record after it.
    let found = (0..tail.len().saturating_sub(END_LEN as usize - 1))
        .rev()
        .find(|&i| u32_at(&tail, i) == END);
    let Some(i) = found else {
        // No end: most likely an archive still being written.
        return Err(broken(
            ZipRule::NoEndRecord,
            "no zip end record in the last 69584 bytes: not a whole zip archive",
            true,
        ));
    };
    let at = start + i as u64;
    let rec = &tail[i..i + END_LEN as usize];
    // What torch's reader refuses the archive for.
    let bad = |what: String| {
        broken(
            ZipRule::BadEndRecord,
            format!("the zip end record at byte {at}: {what}"),
            false,
        )
    };
    let comment = u64::from(u16_at(rec, 20));
    if at + END_LEN + comment != len {
        faults.add(broken(
            ZipRule::EndRecordLayout,
            format!(
                "the end record at byte {at} is followed by {} bytes where its comment is \
                 {comment}",
                len - at - END_LEN
            ),
            false,
        ));
    }
    let mut e = End {
        at,
        total: u16_at(rec, 10).into(),
        cd_size: u32_at(rec, 12).into(),
        cd_start: u32_at(rec, 16).into(),
        disk: u16_at(rec, 4).into(),
    };
    let on_disk = u64::from(u16_at(rec, 8));
    let mut on_disk = on_disk;
    let mut cd_disk = u64::from(u16_at(rec, 6));
    // The zip64 record its locator names, which holds every count, size and offset.
    let locator = match at.checked_sub(LOCATOR_LEN) {
        Some(l) if at >= LOCATOR_LEN + END64_LEN => Some((l, read_at(file, l, 20)?)),
        _ => None,
    };
    if let Some((l, loc)) = locator.filter(|(_, loc)| u32_at(loc, 0) == LOCATOR) {
        let z = u64_at(&loc, 8);
        if z > len - END64_LEN {
            return Err(bad(format!(
                "its zip64 locator names byte {z}, past the end of the file"
            )));
        }
        let z64 = read_at(file, z, END64_LEN as usize)?;
        if u32_at(&z64, 0) != END64 {
            faults.add(broken(
                ZipRule::Zip64Mismatch,
                format!(
                    "the zip64 locator at byte {l} names byte {z}, where no zip64 end record is"
                ),
                false,
            ));
        } else {
            if u64_at(&z64, 4) < END64_LEN - 12 {
                return Err(bad("its zip64 end record is too short".into()));
            }
            if u32_at(&loc, 16) != 1 {
                return Err(bad("a zip64 archive of several disks".into()));
            }
            let z64_total = u64_at(&z64, 32);
            let z64_on_disk = u64_at(&z64, 24);
            let z64_size = u64_at(&z64, 40);
            if z64_total > u32::MAX.into() || z64_on_disk > u32::MAX.into() {
                return Err(bad(format!("{z64_total} records, too many")));
            }
            if z64_size > u32::MAX.into() {
                return Err(bad(format!("a directory of {z64_size} bytes, too large")));
            }
            // The end record's own fields must say the same, or that they are in the zip64 one.
            let agree = |short: u64, long: u64, max: u64| short == max || short == long;
            if !(agree(e.total, z64_total, 0xffff)
                && agree(on_disk, z64_on_disk, 0xffff)
                && agree(e.cd_size, z64_size, SATURATED.into())
                && agree(e.cd_start, u64_at(&z64, 48), SATURATED.into()))
            {
                faults.add(broken(
                    ZipRule::Zip64Mismatch,
                    format!(
                        "the end record says {} records, {} bytes of directory at byte {}; its \
                         zip64 record {z64_total} records, {z64_size} bytes at byte {}",
                        e.total,
                        e.cd_size,
                        e.cd_start,
                        u64_at(&z64, 48)
                    ),
                    false,
                ));
            }
            if z + END64_LEN != l {
                faults.add(broken(
                    ZipRule::EndRecordLayout,
                    format!("the zip64 end record at byte {z} does not end at its locator"),
                    false,
                ));
            }
            e.total = z64_total;
            on_disk = z64_on_disk;
            e.cd_size = z64_size;
            e.cd_start = u64_at(&z64, 48);
            e.disk = u32_at(&z64, 16).into();
            cd_disk = u32_at(&z64, 20).into();
            // What ends the directory is the zip64 end record.
            e.at = z;
        }
    }
    if e.total != on_disk {
        return Err(bad(format!(
            "it says {} records in all and {on_disk} on this disk",
            e.total
        )));
    }
    if !matches!((e.disk, cd_disk), (0, 0) | (1, 1)) {
        return Err(bad(format!(
            "an archive of several disks (this one {}, the directory's {cd_disk})",
            e.disk
        )));
    }
    if e.cd_size < e.total * CENTRAL_LEN as u64 {
        return Err(bad(format!(
            "{} records cannot fit in its {} bytes of directory",
            e.total, e.cd_size
        )));
    }
    if e.cd_start
        .checked_add(e.cd_size)
        .is_none_or(|end| end > len)
    {
        return Err(bad(format!(
            "its directory ({} bytes at byte {}) ends past the end of the file ({len} bytes)",
            e.cd_size, e.cd_start
        )));
    }
    if e.cd_start + e.cd_size != e.at {
        faults.add(broken(
            ZipRule::EndRecordLayout,
            format!(
                "the directory ends at byte {} and its end record starts at byte {}",
                e.cd_start + e.cd_size,
                e.at
            ),
            false,
        ));
    }
    Ok(e)
}

/// The records walked within the directory's stated size: the end record's count of them must
/// be there (else torch's reader refuses the archive), and no more.
fn records(file: Archive<'_>, e: &End, faults: &mut Faults) -> Result<Vec<Record>, ZipError> {
    if e.cd_size > MAX_DIRECTORY {
        return Err(broken(
            ZipRule::DirectoryTooLarge,
            format!(
                "a directory of {} bytes, more than the {MAX_DIRECTORY} read",
                e.cd_size
            ),
            false,
        ));
    }
    let bad = |i: u64, what: String| {
        broken(
            ZipRule::BadDirectory,
            format!("record {i} of the directory {what}"),
            false,
        )
    };
    let mut dir = BufReader::with_capacity(
        1 << 16,
        At {
            file,
            pos: e.cd_start,
        }
        .take(e.cd_size),
    );
    let mut left = e.cd_size;
    let mut records = Vec::with_capacity(e.total.min(1 << 16) as usize);
    let mut fixed = [0u8; CENTRAL_LEN];
    while left > 0 {
        let i = records.len() as u64;
        // A record torch's reader does not reach (past the stated count) that is no record:
        // what is left of the directory is a fault.
        let tail = |faults: &mut Faults, what: &str| {
            faults.add(broken(
                ZipRule::DirectoryLayout,
                format!("the directory's last {left} bytes are no record ({what})"),
                false,
            ));
        };
        if left < CENTRAL_LEN as u64 {
            if i < e.total {
                return Err(bad(i, format!("is cut short ({left} bytes left)")));
            }
            tail(faults, "too short");
            break;
        }
        dir.read_exact(&mut fixed).map_err(ZipError::Io)?;
        if u32_at(&fixed, 0) != CENTRAL {
            if i < e.total {
                return Err(bad(i, "has no record signature".into()));
            }
            tail(faults, "no record signature");
            break;
        }
        let (name_len, extra_len, comment_len) = (
            u16_at(&fixed, 28) as usize,
            u16_at(&fixed, 30) as usize,
            u16_at(&fixed, 32) as usize,
        );
        let whole = (CENTRAL_LEN + name_len + extra_len + comment_len) as u64;
        if whole > left {
            if i < e.total {
                return Err(bad(
                    i,
                    format!("runs past the directory's end by {} bytes", whole - left),
                ));
            }
            tail(faults, "a record cut short");
            break;
        }
        let mut var = vec![0u8; name_len + extra_len + comment_len];
        dir.read_exact(&mut var).map_err(ZipError::Io)?;
        left -= whole;
        let extra = &var[name_len..name_len + extra_len];
        let (mut size, mut compressed, mut header) = (
            u64::from(u32_at(&fixed, 24)),
            u64::from(u32_at(&fixed, 20)),
            u64::from(u32_at(&fixed, 42)),
        );
        let zip64 = zip64_values(extra, [&mut size, &mut compressed, &mut header]);
        let r = Record {
            name: var[..name_len].to_vec(),
            method: u16_at(&fixed, 10),
            flags: u16_at(&fixed, 8),
            compressed,
            size,
            header,
            data: None,
        };
        let fault = |what: &str| {
            broken(
                ZipRule::BadRecord,
                format!("record `{}` {what}", r.shown()),
                false,
            )
        };
        if let Err(what) = zip64 {
            faults.add(fault(what));
        }
        let disk = u16_at(&fixed, 34);
        if u64::from(disk) != e.disk && disk != 1 {
            faults.add(fault(&format!("is on disk {disk}")));
        }
        if r.flags & MASKED != 0 {
            faults.add(fault(
                "has its local headers masked (an encrypted directory)",
            ));
        }
        if r.method == 0 && r.size != r.compressed {
            faults.add(fault(&format!(
                "is stored, and {} bytes compressed but {} bytes long",
                r.compressed, r.size
            )));
        }
        records.push(r);
    }
    let walked = records.len() as u64;
    if walked < e.total {
        return Err(bad(
            walked,
            format!("is missing: the end record says {}", e.total),
        ));
    }
    if walked > e.total {
        faults.add(broken(
            ZipRule::RecordCount,
            format!(
                "the directory holds {walked} records where the end record says {}: torch's \
                 reader sees only the first {}",
                e.total, e.total
            ),
            false,
        ));
    }
    Ok(records)
}

/// Takes from the zip64 extra field of `extra` the values of `fields` (size, compressed size,
/// local header offset, in that order) that are saturated in their 32-bit place, as miniz does
/// (each field only if its 32-bit value is [`SATURATED`]).
fn zip64_values(extra: &[u8], fields: [&mut u64; 3]) -> Result<(), &'static str> {
    if fields.iter().all(|f| **f != u64::from(SATURATED)) {
        return Ok(());
    }
    let mut at = 0;
    while at < extra.len() {
        if extra.len() - at < 4 {
            return Err("has an extra field cut short");
        }
        let (id, size) = (u16_at(extra, at), u16_at(extra, at + 2) as usize);
        let body = extra
            .get(at + 4..at + 4 + size)
            .ok_or("has an extra field that runs past its record")?;
        if id == ZIP64_EXTRA {
            let mut values = body.chunks_exact(8);
            for f in fields {
                if *f == u64::from(SATURATED) {
                    *f = values
                        .next()
                        .map(|v| u64_at(v, 0))
                        .ok_or("has a zip64 extra field too short for its values")?;
                }
            }
            return Ok(());
        }
        at += 4 + size;
    }
    Err("needs a zip64 extra field and has none")
}

/// Reads `r`'s local header: where its data starts, and whether it says what the record says
/// (name, method, flags and sizes; with a data descriptor, sizes of zero).
fn local_header(
    file: Archive<'_>,
    len: u64,
    r: &mut Record,
    faults: &mut Faults,
) -> Result<(), ZipError> {
    let shown = r.shown();
    let fault = |what: String| {
        broken(
            ZipRule::LocalHeader,
            format!("entry `{shown}`: {what}"),
            false,
        )
    };
    if r.header.saturating_add(LOCAL_LEN as u64) > len {
        faults.add(fault(format!(
            "its local header at byte {} is past the end of the file",
            r.header
        )));
        return Ok(());
    }
    let fixed = read_at(file, r.header, LOCAL_LEN)?;
    if u32_at(&fixed, 0) != LOCAL {
        faults.add(fault(format!("no local header at byte {}", r.header)));
        return Ok(());
    }
    let (name_len, extra_len) = (u16_at(&fixed, 26) as u64, u16_at(&fixed, 28) as u64);
    let start = r.header + LOCAL_LEN as u64;
    let data = start + name_len + extra_len;
    r.data = Some(data);
    if data > len {
        faults.add(fault(
            "its local header runs past the end of the file".into(),
        ));
        return Ok(());
    }
    let var = read_at(file, start, (name_len + extra_len) as usize)?;
    let (name, extra) = var.split_at(name_len as usize);
    if name != r.name.as_slice() {
        faults.add(fault(format!(
            "its local header names it `{}`",
            String::from_utf8_lossy(name).escape_debug()
        )));
    }
    let (flags, method) = (u16_at(&fixed, 6), u16_at(&fixed, 8));
    if flags != r.flags || method != r.method {
        faults.add(fault(format!(
            "its local header says flags {flags:#x} and method {method} where the directory says \
             {:#x} and {}",
            r.flags, r.method
        )));
    }
    let (mut size, mut compressed) = (u64::from(u32_at(&fixed, 22)), u64::from(u32_at(&fixed, 18)));
    let mut none = 0;
    if zip64_values(extra, [&mut size, &mut compressed, &mut none]).is_err() {
        faults.add(fault(
            "its local header's zip64 extra field is broken".into(),
        ));
    }
    let descriptor =
        flags & DESCRIPTOR != 0 && size == 0 && compressed == 0 && u32_at(&fixed, 14) == 0;
    if !descriptor && (size, compressed) != (r.size, r.compressed) {
        faults.add(fault(format!(
            "its local header says {compressed} bytes ({size} uncompressed) where the directory \
             says {} ({})",
            r.compressed, r.size
        )));
    }
    if data.saturating_add(r.span()) > len {
        faults.add(broken(
            ZipRule::EntryOutOfFile,
            format!("entry `{shown}` ends past the end of the file ({len} bytes)"),
            true,
        ));
    }
    Ok(())
}

/// An archive: the bytes of `file` from `start` on (the whole file, or a `torch.save` archive
/// written inside another file, as DCP writes each chunk). Offsets are the archive's own.
#[derive(Clone, Copy)]
pub struct Archive<'f> {
    pub file: &'f File,
    pub start: u64,
}

impl Archive<'_> {
    fn absolute(&self, at: u64) -> io::Result<u64> {
        self.start
            .checked_add(at)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
    }

    pub fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, self.absolute(at)?)
    }

    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        self.file.read_at(buf, self.absolute(at)?)
    }
}

/// The archive as `Read`, by `pread` from a position of its own.
pub struct At<'f> {
    pub file: Archive<'f>,
    pub pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos = self.pos.saturating_add(n as u64);
        Ok(n)
    }
}
