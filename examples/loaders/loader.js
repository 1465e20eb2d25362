// Loads tensors from a tensormount mount the Node.js way: fs.readFileSync into a typed array.
// Node has no xattr API, so dtype and shape come from `getfattr` (package `attr`).
// No safetensors library.
//
//   node loader.js MNT/model.tensors model.norm.weight ...
//
// Prints per tensor: NAME DTYPE SHAPE fnv1a64=<hash of the raw bytes> first=<first values, exact>.
// Typed arrays use the host's byte order; safetensors data is little-endian, as are x86 and ARM.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const xattr = (file, name) =>
  execFileSync('getfattr', ['--only-values', '--absolute-names', '-n', name, file]).toString();

// F16 and BF16 are read as raw 16-bit words and widened below.
const ARRAYS = {
  F64: Float64Array, F32: Float32Array, F16: Uint16Array, BF16: Uint16Array,
  I64: BigInt64Array, I32: Int32Array, U8: Uint8Array, BOOL: Uint8Array,
};

function fnv1a64(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return h.toString(16).padStart(16, '0');
}

// A float is m / 2^e for an integer m; its exact decimal is m * 5^e with e digits after the point.
function exact(x) {
  let e = 0;
  while (!Number.isInteger(x)) { x *= 2; e++; }
  const digits = (BigInt(Math.abs(x)) * 5n ** BigInt(e)).toString().padStart(e + 1, '0');
  return (x < 0 ? '-' : '') + (e ? `${digits.slice(0, -e)}.${digits.slice(-e)}` : digits);
}

function half(h) {
  const e = (h >> 10) & 31, m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (m + 1024) * 2 ** (e - 25);
  return h & 0x8000 ? -v : v;
}

const bf16 = (h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0];

function value(dtype, v) {
  if (dtype === 'F16') return exact(half(v));
  if (dtype === 'BF16') return exact(bf16(v));
  if (dtype === 'F32' || dtype === 'F64') return exact(v);
  return v.toString();
}

const [dir, ...names] = process.argv.slice(2);
if (!dir || !names.length) {
  console.error('usage: node loader.js TENSOR_DIR NAME...');
  process.exit(2);
}
for (const name of names) {
  const file = path.join(dir, name);
  const dtype = xattr(file, 'user.safetensors.dtype');
  const shape = xattr(file, 'user.safetensors.shape');
  const bytes = new Uint8Array(fs.readFileSync(file)); // a fresh, aligned ArrayBuffer
  const values = new ARRAYS[dtype](bytes.buffer);
  const first = Array.from(values.subarray(0, 4), (v) => value(dtype, v));
  console.log(`${name} ${dtype} ${shape} fnv1a64=${fnv1a64(bytes)} first=${first.join(',')}`);
}
