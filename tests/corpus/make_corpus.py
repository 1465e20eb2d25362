#!/usr/bin/env python3
"""Writes the hostile-input corpus used by tests/suite/hostile/corpus.rs.

  make_corpus.py [DIR]          (re)write the corpus into DIR (default: this script's directory)
  make_corpus.py --check [DIR]  check every file against the official `safetensors` package

Standard library only and deterministic: running it twice gives the same bytes. The generated files
are committed; rerun this script only to change the corpus.

Invalid files are named `<Rule>--<case>.safetensors`, where Rule is the variant name of the
reference implementation's `SafeTensorError` that the file breaks first (the reference checks in a
fixed order, see the format notes). Valid edge cases are in `valid/<case>.safetensors`.
`--check` needs the official package (the repo's .venv python) and fails unless every invalid file
is rejected by `safe_open(path, "numpy")` with the message of its rule, and every valid file opens.
"""
import json
import os
import struct
import sys

U64_MAX = 2**64 - 1


def prefix(n):
    """The 8-byte little-endian header length."""
    return struct.pack("<Q", n)


def framed(header, data=b""):
    """8-byte length, header (str or bytes, taken as is) and data."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    return prefix(len(header)) + header + data


def t(dtype, shape, begin, end):
    """One tensor entry as compact JSON text (shape entries are written verbatim)."""
    dims = ",".join(str(d) for d in shape)
    return '{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' % (dtype, dims, begin, end)


def obj(*pairs):
    """A JSON object from (key, raw JSON value text) pairs, duplicates and order kept."""
    return "{" + ",".join("%s:%s" % (json.dumps(k), v) for k, v in pairs) + "}"


I32_2x2 = t("I32", [2, 2], 0, 16)
ZEROS16 = bytes(16)
DATA16 = bytes(range(16))

GIT_LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 4949453792\n"
)

HTML_ERROR_PAGE = (
    b"<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">"
    b"<title>404 Not Found</title></head>\n<body>\n<h1>404</h1>\n"
    b"<p>Sorry, we can't find the page you are looking for.</p>\n</body>\n</html>\n"
)


def invalid_cases():
    """(rule, case, bytes) for every invalid file."""
    c = []

    def add(rule, case, content):
        c.append((rule, case, content))

    # 1. Framing: the 8-byte prefix and the declared length.
    add("HeaderTooSmall", "empty-file", b"")
    add("HeaderTooSmall", "7-bytes", b"\x08\x00\x00\x00\x00\x00\x00")
    add("HeaderTooLarge", "n-high-bytes-set", struct.pack("<Q", 0xFFFFFF0000000010) + b"{}" + bytes(14))
    add("HeaderTooLarge", "n-all-ff", b"\xff" * 8 + DATA16)
    add("HeaderTooLarge", "n-100000001", prefix(100_000_001) + b"{}      ")
    add("HeaderTooLarge", "git-lfs-pointer", GIT_LFS_POINTER)
    add("HeaderTooLarge", "html-error-page", HTML_ERROR_PAGE)
    add("InvalidHeaderLength", "n-100000000-short-file", prefix(100_000_000) + b"{}      ")
    add("InvalidHeaderLength", "8-bytes-declaring-n-60", prefix(60))
    whole = ('{"test":%s}' % I32_2x2).encode() + b"    "  # the reference's 88-byte golden file
    add("InvalidHeaderLength", "header-truncated-to-half", prefix(len(whole)) + whole[: len(whole) // 2])

    # 2. The header text: UTF-8, then JSON into the header struct.
    add("InvalidHeader", "n-1-byte-ff", prefix(1) + b"\xff")
    add("InvalidHeader", "latin1-tensor-name", framed(b'{"caf\xe9":' + t("U8", [1], 0, 1).encode() + b"}", b"\x01"))
    add("InvalidHeaderDeserialization", "n-0", prefix(0))
    add("InvalidHeaderDeserialization", "n-1-open-brace", framed("{"))
    add("InvalidHeaderDeserialization", "not-json", framed("this is not JSON at all", b""))
    add("InvalidHeaderDeserialization", "json-array-top-level", framed("[" + I32_2x2 + "]", ZEROS16))
    add("InvalidHeaderDeserialization", "json-string-top-level", framed('"weights"'))
    add("InvalidHeaderDeserialization", "unknown-dtype", framed(obj(("w", t("F128", [1], 0, 16))), ZEROS16))
    add("InvalidHeaderDeserialization", "lowercase-dtype", framed(obj(("w", t("f32", [4], 0, 16))), ZEROS16))
    add(
        "InvalidHeaderDeserialization",
        "missing-dtype",
        framed(obj(("w", '{"shape":[4],"data_offsets":[0,16]}')), ZEROS16),
    )
    add(
        "InvalidHeaderDeserialization",
        "missing-data-offsets",
        framed(obj(("w", '{"dtype":"U8","shape":[4]}')), bytes(4)),
    )
    add("InvalidHeaderDeserialization", "negative-dim", framed(obj(("w", t("U8", [-4], 0, 4))), bytes(4)))
    add("InvalidHeaderDeserialization", "float-dim", framed(obj(("w", t("U8", ["4.0"], 0, 4))), bytes(4)))
    add(
        "InvalidHeaderDeserialization",
        "dim-over-u64",
        framed(obj(("w", t("U8", [U64_MAX + 1], 0, 4))), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "three-data-offsets",
        framed(obj(("w", '{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}')), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "metadata-non-string-value",
        framed(obj(("__metadata__", '{"format":"pt","epochs":3}'), ("w", t("U8", [4], 0, 4))), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "duplicate-metadata-key",
        framed(
            obj(("__metadata__", '{"a":"1"}'), ("w", t("U8", [4], 0, 4)), ("__metadata__", '{"b":"2"}')),
            bytes(4),
        ),
    )
    add(
        "InvalidHeaderDeserialization",
        "duplicate-dtype-field",
        framed(obj(("w", '{"dtype":"U8","dtype":"I8","shape":[4],"data_offsets":[0,4]}')), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "nul-padding-after-json",
        framed(obj(("w", t("U8", [4], 0, 4))) + "\0\0\0\0", bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "utf8-bom-before-json",
        framed("\ufeff" + obj(("w", t("U8", [4], 0, 4))), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "trailing-comma",
        framed('{"w":%s,}' % t("U8", [4], 0, 4), bytes(4)),
    )
    add(
        "InvalidHeaderDeserialization",
        "tensor-named-metadata",
        framed(obj(("__metadata__", t("U8", [4], 0, 4))), bytes(4)),
    )

    # 3. Tensor offsets and sizes, checked in (begin, end) order.
    add(
        "InvalidOffset",
        "end-before-begin",
        framed(obj(("a", t("U8", [4], 0, 4)), ("b", t("U8", [2], 4, 2))), bytes(6)),
    )
    add(
        "InvalidOffset",
        "gap-between-tensors",
        framed(obj(("a", t("U8", [4], 0, 4)), ("b", t("U8", [4], 8, 12))), bytes(12)),
    )
    add(
        "InvalidOffset",
        "overlapping-tensors",
        framed(obj(("a", t("U8", [8], 0, 8)), ("b", t("U8", [8], 4, 12))), bytes(12)),
    )
    add("InvalidOffset", "leading-gap", framed(obj(("a", t("I32", [2, 2], 4, 20))), bytes(20)))
    add(
        "InvalidOffset",
        "json-attack-10-tensors-same-range",
        framed(obj(*[("t%d" % i, t("F32", [2, 2], 0, 16)) for i in range(10)]), DATA16),
    )
    add(
        "InvalidOffset",
        "duplicate-key-different-offsets",
        framed(
            obj(("a", t("U8", [4], 0, 4)), ("b", t("U8", [4], 4, 8)), ("a", t("U8", [4], 8, 12))),
            bytes(12),
        ),
    )
    add(
        "ValidationOverflow",
        "i32-2x18446744073709551614",
        framed(obj(("w", t("I32", [2, U64_MAX - 1], 0, 16))), ZEROS16),
    )
    add(
        "ValidationOverflow",
        "i32-2x9223372036854775807",
        framed(obj(("w", t("I32", [2, 2**63 - 1], 0, 16))), ZEROS16),
    )
    add("MisalignedSlice", "f4-shape-3", framed(obj(("w", t("F4", [3], 0, 2))), bytes(2)))
    add("MisalignedSlice", "f4-scalar", framed(obj(("w", t("F4", [], 0, 1))), bytes(1)))
    add("MisalignedSlice", "f6-shape-3", framed(obj(("w", t("F6_E3M2", [3], 0, 3))), bytes(3)))
    add("TensorInvalidInfo", "i32-2x2-offsets-0-4", framed(obj(("w", t("I32", [2, 2], 0, 4))), bytes(4)))
    add(
        "TensorInvalidInfo",
        "shape-larger-than-range",
        framed(obj(("a", t("U8", [2], 0, 2)), ("b", t("F16", [3], 2, 4))), bytes(4)),
    )

    # 4. The data must fill the file exactly.
    add("MetadataIncompleteBuffer", "trailing-bytes", framed('{"test":%s}' % I32_2x2, ZEROS16 + b"polyglot!!"))
    add("MetadataIncompleteBuffer", "truncated-data", framed('{"test":%s}' % I32_2x2, bytes(14)))
    add(
        "MetadataIncompleteBuffer",
        "offsets-beyond-data",
        framed(obj(("w", t("U8", [1 << 40], 0, 1 << 40))), bytes(4)),
    )
    add(
        "MetadataIncompleteBuffer",
        "f32-4mib-with-1-byte",
        framed(obj(("w", t("F32", [1024, 1024], 0, 4 << 20))), b"\x01"),
    )
    add("MetadataIncompleteBuffer", "zero-tensors-with-data", framed("{}      ", b"\x00\x01\x02\x03"))
    return c


def valid_cases():
    """(case, bytes) for every valid edge file."""
    c = []
    u3 = b"\x01\x02\x03"
    c.append(("whitespace-padding", framed("\t\n\r " + obj(("w", t("U8", [3], 0, 3))) + " \r\t\n", u3)))
    c.append(("duplicate-key-identical", framed(obj(("w", t("U8", [3], 0, 3)), ("w", t("U8", [3], 0, 3))), u3)))
    c.append(
        (
            "extra-field-in-entry",
            framed(obj(("w", '{"dtype":"U8","shape":[3],"data_offsets":[0,3],"quant":{"scale":0.5}}')), u3),
        )
    )
    c.append(("zero-tensors", framed("{}      ")))
    c.append(
        (
            "zero-length-tensors-share-offset",
            framed(
                obj(
                    ("a", t("U8", [4], 0, 4)),
                    ("z0", t("U8", [0], 4, 4)),
                    ("z1", t("F32", [2, 0], 4, 4)),
                    ("z2", t("I64", [0, 3, 7], 4, 4)),
                    ("b", t("U8", [2], 4, 6)),
                    ("z3", t("BF16", [0], 6, 6)),
                ),
                b"\x0a\x0b\x0c\x0d\x0e\x0f",
            ),
        )
    )
    c.append(("scalar", framed(obj(("pi", t("F32", [], 0, 4))), struct.pack("<f", 3.25))))
    c.append(("metadata-null", framed(obj(("__metadata__", "null"), ("w", t("U8", [3], 0, 3))), u3)))
    c.append(
        (
            "unpadded-header-subbyte-dtypes",
            framed(
                obj(("b", t("BOOL", [1], 0, 1)), ("f4", t("F4", [2], 1, 2)), ("f6", t("F6_E2M3", [4], 2, 5))),
                b"\x07\x21\xaa\xbb\xcc",
            ),
        )
    )
    c.append(
        (
            "metadata-after-tensors",
            framed(obj(("w", t("U8", [3], 0, 3)), ("__metadata__", '{"format":"pt","w":"a tensor name"}')), u3),
        )
    )
    return c


# The message the official package gives for each rule (lower-cased substring).
PY_MESSAGE = {
    "HeaderTooSmall": "header too small",
    "HeaderTooLarge": "header too large",
    "InvalidHeaderLength": "invalid header length",
    "InvalidHeader": "invalid utf-8 in header",
    "InvalidHeaderDeserialization": "invalid json in header",
    "InvalidOffset": "invalid offset for tensor",
    "TensorInvalidInfo": "invalid shape, data type, or offset",
    "ValidationOverflow": "overflow computing buffer size",
    "MisalignedSlice": "does not end up at a byte boundary",
    "MetadataIncompleteBuffer": "incomplete metadata",
}


def write(out):
    os.makedirs(os.path.join(out, "valid"), exist_ok=True)
    names = set()
    for rule, case, content in invalid_cases():
        assert rule in PY_MESSAGE, rule
        name = "%s--%s.safetensors" % (rule, case)
        assert name not in names, name
        names.add(name)
        with open(os.path.join(out, name), "wb") as f:
            f.write(content)
    for case, content in valid_cases():
        with open(os.path.join(out, "valid", case + ".safetensors"), "wb") as f:
            f.write(content)


def check(out):
    from safetensors import safe_open

    bad = []
    for rule, case, _ in invalid_cases():
        path = os.path.join(out, "%s--%s.safetensors" % (rule, case))
        try:
            with safe_open(path, "numpy") as f:
                f.keys()
            bad.append("%s: accepted" % path)
        except Exception as e:  # noqa: BLE001 - any rejection is reported
            if PY_MESSAGE[rule] not in str(e).lower():
                bad.append("%s: %s: %s" % (path, type(e).__name__, e))
    for case, _ in valid_cases():
        path = os.path.join(out, "valid", case + ".safetensors")
        try:
            with safe_open(path, "numpy") as f:
                f.keys()
        except Exception as e:  # noqa: BLE001
            bad.append("%s: rejected: %s" % (path, e))
    for b in bad:
        print(b)
    print("%d invalid, %d valid, %d problems" % (len(invalid_cases()), len(valid_cases()), len(bad)))
    return not bad


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    if argv[:1] == ["--check"]:
        return 0 if check(argv[1] if len(argv) > 1 else here) else 1
    write(argv[0] if argv else here)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
