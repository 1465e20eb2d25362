#!/usr/bin/env bash
# A mounted model in a shell session: ls, getfattr, dd | od. No safetensors library, no Python.
#
#   bash loader.sh MNT/model.tensors model.norm.weight ...
#
# Shows the tensors and their xattrs on stderr and prints per tensor on stdout:
#   NAME DTYPE SHAPE fnv1a64=<hash of the raw bytes> head=<first 8 bytes in hex>
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bash loader.sh TENSOR_DIR NAME..." >&2; exit 2; }
dir=$1
shift
ls -l "$dir" >&2
for name in "$@"; do
    f=$dir/$name
    getfattr -d --absolute-names "$f" >&2
    dtype=$(getfattr --only-values --absolute-names -n user.safetensors.dtype "$f")
    shape=$(getfattr --only-values --absolute-names -n user.safetensors.shape "$f")
    case $dtype in # the first 16 bytes, decoded where od knows the type
        F64) t=f8 ;; F32) t=f4 ;; I64) t=d8 ;; I32) t=d4 ;; U8 | BOOL) t=u1 ;; *) t=x2 ;;
    esac
    dd if="$f" bs=16 count=1 status=none | od -A d -t "$t" >&2
    # FNV-1a 64 over every byte: bash arithmetic is 64-bit and wraps, as the hash wants.
    h=$((0xcbf29ce484222325))
    for b in $(od -A n -v -t u1 "$f"); do
        h=$(((h ^ b) * 0x100000001b3))
    done
    head=$(dd if="$f" bs=8 count=1 status=none | od -A n -v -t x1 | tr -d ' \n')
    printf '%s %s %s fnv1a64=%016x head=%s\n' "$name" "$dtype" "$shape" "$h" "$head"
done
