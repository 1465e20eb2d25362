//! The integration tests: one binary, a module per theme. They mount for real (as root, with
//! `/dev/fuse`), read through the mount with the real tools (`ls`, `stat`, `dd`, `getfattr`, numpy,
//! the official `safetensors`), and compare bytes with independent readers. Helpers, shared with
//! the benchmark, are in `tests/common/`. `tests/run --test suite THEME::` runs one theme.

#[path = "../common/mod.rs"]
mod common;

/// Sources on other FUSE filesystems and network backends.
mod backends;
/// Direct I/O and -o kernel_cache: where bytes are cached, mapping clients.
mod cache;
/// The command line, daemonising, signals, mount(8) and fstab.
mod cli;
/// What the daemon logs: nothing for ordinary calls, one line per failed request.
mod daemon_log;
/// torch.distributed.checkpoint: consolidated tensors, the virtual model, traps, broken ones.
mod dcp;
/// Comparing two models: tensormount diff.
mod diff;
/// The man page and completions, generated from the command line.
mod docs;
/// GGUF files: tensor files, metadata, dequantized views.
mod gguf;
/// Invalid, truncated and malicious sources.
mod hostile;
/// Integrity: tensormount verify, recorded digests, per-tensor digests, -o verify.
mod integrity;
/// The source tree's layering: no import cycle among the files of `src/`.
mod layering;
/// The example loaders (C++, Java, JavaScript, Python, the GPU path) on a mount.
mod loaders;
/// ollama's model store: every model by name, its layers and views, hostile manifests.
mod ollama;
/// ONNX models: tensor files of initializers and Constant nodes, hostile models.
mod onnx;
/// The Debian package and the wheel.
mod packaging;
/// PyTorch checkpoints: tensor files, the virtual safetensors file, malicious pickles.
mod pytorch;
/// Reads: every path a read takes, against the source's bytes.
mod reads;
/// Sources that change while mounted.
mod refresh;
/// Stalls, deaths, changed sources and leases.
mod reliability;
/// Many files, few descriptors.
mod scale;
/// A mount of a mount.
mod stacking;
/// Concurrency, and memory that stays flat.
mod stress;
/// systemd: readiness, units, fstab generator.
mod systemd;
/// Pickles that are traps: the scanners' own corpora and the evasions they miss.
mod traps;
/// The tree a mount shows: mirrored directories, tensor directories, sets, links, attributes.
mod tree;
/// Names and views: escaping, `-o npy`, `-o layout=tree`.
mod views;
/// `-o dtype=f32|f64`.
mod widen;
