"""Zip archives written byte by byte, for the archive traps (ziptraps.py): what Python's zipfile
will not write (two records of one name with no warning, a local header that disagrees with its
record, an end record whose counts are wrong, a second end record, a Unicode Path extra field).

An archive is its records in order; `Record` holds one record's name and bytes and whatever the
trap changes of it; `archive(records, ...)` lays out every local header and its data, then the
central directory, then the end records.
"""

import struct
import zlib
from dataclasses import dataclass, field

LOCAL = b"PK\x03\x04"
CENTRAL = b"PK\x01\x02"
END = b"PK\x05\x06"
END64 = b"PK\x06\x06"
LOCATOR64 = b"PK\x06\x07"


@dataclass
class Record:
    name: bytes
    data: bytes
    method: int = 0
    flags: int = 0
    # What the local header says instead of the record, where they differ.
    local_name: bytes = None
    local_flags: int = None
    local_method: int = None
    local_sizes: tuple = None
    central_extra: bytes = b""
    local_extra: bytes = b""
    # Filled in by archive(): where its local header starts.
    offset: int = field(default=0, init=False)

    def payload(self):
        return zlib.compress(self.data)[2:-4] if self.method == 8 else self.data


def unicode_path(name, crc_of):
    """The Unicode Path extra field (0x7075): `name` as the entry's name, for a record whose
    stored name is `crc_of` (readers take it only when the CRC matches)."""
    body = b"\x01" + struct.pack("<I", zlib.crc32(crc_of)) + name
    return struct.pack("<HH", 0x7075, len(body)) + body


def archive(records, *, total=None, on_disk=None, zip64=False, after=b""):
    """The archive of `records`: local headers and data, the central directory, then (if
    `zip64`) the zip64 end record and its locator, then the end record, whose counts are
    `total` and `on_disk` (each the number of records unless given), then `after`."""
    out = bytearray(locals_of(records))
    cd_start = len(out)
    out += directory(records)
    cd_size = len(out) - cd_start
    total = len(records) if total is None else total
    on_disk = total if on_disk is None else on_disk
    if zip64:
        end64 = len(out)
        out += END64 + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, on_disk, total, cd_size,
                                   cd_start)
        out += LOCATOR64 + struct.pack("<IQI", 0, end64, 1)
    out += END + struct.pack("<HHHHIIH", 0, 0, on_disk, total, cd_size, cd_start, 0)
    return bytes(out + after)


def locals_of(records, at=0):
    """Each record's local header and data, in order, the first at byte `at` (where each starts
    is kept in its `offset`)."""
    out = bytearray()
    for r in records:
        r.offset = at + len(out)
        data = r.payload()
        sizes = r.local_sizes or (len(data), len(r.data))
        name = r.name if r.local_name is None else r.local_name
        flags = r.flags if r.local_flags is None else r.local_flags
        method = r.method if r.local_method is None else r.local_method
        out += LOCAL + struct.pack("<HHHHHIIIHH", 20, flags, method, 0, 0x21,
                                   zlib.crc32(r.data), sizes[0], sizes[1], len(name),
                                   len(r.local_extra))
        out += name + r.local_extra + data
    return bytes(out)


def directory(records):
    """The central directory of `records` (laid out by `locals_of`)."""
    out = bytearray()
    for r in records:
        data = r.payload()
        out += CENTRAL + struct.pack("<HHHHHHIIIHHHHHII", 20, 20, r.flags, r.method, 0, 0x21,
                                     zlib.crc32(r.data), len(data), len(r.data), len(r.name),
                                     len(r.central_extra), 0, 0, 0, 0, r.offset)
        out += r.name + r.central_extra
    return bytes(out)


def end_record(total, cd_size, cd_start):
    """An end record on its own (a second one, appended after an archive)."""
    return END + struct.pack("<HHHHIIH", 0, 0, total, total, cd_size, cd_start, 0)


def records_of(path):
    """The records of a zip archive written by torch.save or zipfile, as `Record`s."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        return [Record(i.filename.encode(), z.read(i)) for i in z.infolist()]
