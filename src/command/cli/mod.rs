//! The command line: arguments and `-o` mount options.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::{ArgAction, Parser};

use std::time::Duration;

use crate::format::Format;
use crate::format::widen::Target;
use crate::namespace::{Layout, Options};
use crate::refresh::{self, Mode};
use crate::source::Config;

/// Mount safetensors files, PyTorch, GGUF, ONNX and DCP checkpoints, ollama stores and model
/// directories as read-only trees of raw tensor files.
///
/// `tensormount SOURCE MOUNTPOINT` mounts; `tensormount verify` and `tensormount diff` check and
/// compare models without mounting. A SOURCE named like a command is given as `./verify`.
#[derive(Debug, Parser)]
#[command(
    name = "tensormount",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true,
    subcommand_value_name = "COMMAND",
    subcommand_help_heading = "Commands"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Stay in the foreground; SIGINT or SIGTERM unmounts and exits. Invoked as
    /// `mount.tensormount`, `-f` is mount(8)'s "fake": exit 0 without mounting.
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// Append log records to PATH instead of stderr (or syslog, in the background).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    #[command(flatten)]
    pub helper: HelperFlags,

    /// Mount options, comma-separated (`\,` for a literal comma); may be repeated. See below.
    #[arg(
        short = 'o',
        value_name = "OPT[,OPT...]",
        value_parser = OptionList,
        hide_possible_values = true
    )]
    pub options: Vec<String>,

    /// Mount nothing: validate SOURCE as a mount would and print one row per tensor.
    #[arg(long)]
    pub list: bool,

    /// With --list: print JSON instead of a table (the tensors, and each tensor directory's
    /// metadata).
    #[arg(long, requires = "list")]
    pub json: bool,

    /// A .safetensors file, a PyTorch checkpoint or a model directory.
    #[arg(required = true)]
    pub source: Option<PathBuf>,

    /// An existing directory to mount on (not needed with --list).
    #[arg(required_unless_present = "list")]
    pub mountpoint: Option<PathBuf>,
}

/// What mount(8) hands a mount helper, accepted and (but the type) ignored: hidden from the help.
#[derive(Debug, clap::Args)]
pub struct HelperFlags {
    /// mount(8) helper flag (no mtab): ignored.
    #[arg(short = 'n', action = ArgAction::Count, hide = true)]
    pub no_mtab: u8,

    /// mount(8) helper flag (sloppy): ignored.
    #[arg(short = 's', action = ArgAction::Count, hide = true)]
    pub sloppy: u8,

    /// mount(8) helper flag (verbose): ignored.
    #[arg(short = 'v', action = ArgAction::Count, hide = true)]
    pub verbose: u8,

    /// mount(8) helper option (mount namespace): accepted and ignored.
    #[arg(short = 'N', value_name = "NS", hide = true)]
    pub namespace: Option<String>,

    /// mount(8) helper option: the filesystem type, `fuse.tensormount` or `tensormount`.
    #[arg(short = 't', value_name = "TYPE", hide = true)]
    pub fstype: Option<String>,
}

/// The commands beside the mount.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every weight file of SOURCE against the SHA-256 its source records.
    ///
    /// The digests come from a Hugging Face cache's blob names, a download's
    /// `.cache/huggingface/download/NAME.metadata`, `SHA256SUMS` or `NAME.sha256` files, or a
    /// manifest. Exit status: 0 when nothing mismatches, 1 when something does, 2 on a usage or
    /// read error.
    Verify(VerifyArgs),
    /// Compare the tensors of two checkpoints or model directories.
    ///
    /// A and B may be of any format the mount shows (a pickle checkpoint against its safetensors
    /// conversion); sharded sets are merged as the mount merges them. Exit status: 0 when A and B
    /// hold the same tensors, 1 when they do not, 2 on an error.
    Diff(DiffArgs),
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Print one JSON object instead of one line per file.
    #[arg(long)]
    pub json: bool,

    /// Also write the SHA-256 of every file and of every tensor's bytes to FILE (JSON).
    #[arg(long, value_name = "FILE")]
    pub write_manifest: Option<PathBuf>,

    /// Check files and tensors against a manifest written by --write-manifest, naming each
    /// damaged tensor.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,

    /// A weight file or a model directory.
    pub source: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// For floating-point tensors whose bytes differ: how many elements differ, and the largest
    /// absolute difference.
    #[arg(long)]
    pub values: bool,

    /// A weight file or a model directory.
    pub a: PathBuf,

    /// A weight file or a model directory.
    pub b: PathBuf,
}

impl Args {
    /// Checks what clap cannot: a `-t` type must name this filesystem.
    pub fn check(&self) -> Result<(), String> {
        match self.helper.fstype.as_deref() {
            None | Some("tensormount" | "fuse.tensormount") => Ok(()),
            Some(t) => Err(format!(
                "-t {t}: not a tensormount type (expected fuse.tensormount or tensormount)"
            )),
        }
    }
}

/// The `-o` options tensormount acts on, with what each does: the one list that `--help`, the man
/// page and the shell completions show (a test holds the man page's MOUNT OPTIONS to it): these,
/// with each format's `NAME=on|off` after `dtype=` (see [`mount_options`]).
const OPTIONS: &[(&str, &str)] = &[
    (
        "allow_other",
        "other users may use the mount; the kernel still checks each file's permission bits",
    ),
    ("allow_root", "root may use the mount too"),
    (
        "auto_unmount",
        "a watcher process unmounts once the daemon is gone, however it ends (SIGKILL included)",
    ),
    (
        "fsname=NAME",
        "the device column of /proc/mounts (default: the absolute source path)",
    ),
    (
        "strict",
        "any invalid safetensors file or broken index fails the mount instead of a warning",
    ),
    (
        "npy",
        "a NAME.npy view beside each tensor numpy can describe",
    ),
    (
        "dtype=f32|f64",
        "every floating-point tensor narrower than the type (BF16, F16, F8_*, F4; F32 under f64) is \
         presented as its exact widening to it, and every quantized GGUF tensor as its values \
         (as gguf-py dequantizes them)",
    ),
    (
        "verify",
        "hash in the background, one file at a time and last in line, every weight file whose \
         SHA-256 SOURCE records; user.tensormount.verified says ok or mismatch, and a mismatched \
         file and its tensor files then fail reads with EIO",
    ),
    (
        "layout=flat|tree",
        "tensor files named after the whole name (flat, the default), or in directories split on \
         `.` and `/`",
    ),
    (
        "refresh=auto|inotify|poll|off",
        "how the mount follows SOURCE (default auto: inotify where SOURCE is local, polling on \
         network and FUSE filesystems; off: never)",
    ),
    (
        "refresh_interval=SECS",
        "the polling period, default 30 (fractions allowed)",
    ),
    (
        "settle=SECS",
        "how long a file seen changing in place must stay unchanged before it is interpreted \
         again, default 1",
    ),
    (
        "source_idle=SECS",
        "a source unused for this long is closed, default 30",
    ),
    (
        "decode_cache=SIZE",
        "the most bytes of decoded chunks (compressed or byte-swapped tensors) kept, so that a \
         sequential read decodes each chunk once; default 256M (K, M and G allowed; 0 keeps none)",
    ),
    (
        "direct_io",
        "the default: files the kernel does not read straight from a local source (tensor files, \
         views, virtual files) are read with direct I/O, so their bytes are cached once, in the \
         source's page cache (reading a 1 GiB tensor file twice adds 0.8 MiB); first reads as \
         fast as kernel_cache's, rereads slower; mappings still work (Linux 6.6+; older kernels \
         get kernel_cache)",
    ),
    (
        "kernel_cache",
        "those files are cached by the mount too, kept across opens: rereads of bytes already read \
         are faster (a 1 GiB tensor file 0.72x the source instead of 0.46x, 4 KiB random rereads \
         0.74x instead of 0.07x), at the cost of a second copy of every byte read in the page \
         cache (1 GiB for that file)",
    ),
    ("noexec", "passed to the kernel"),
    (
        "rw",
        "accepted, as mount(8) always passes it: the mount is always read-only",
    ),
];

/// Every `-o` option tensormount acts on, with what it does: [`OPTIONS`], with the option that
/// turns each format off (its help the format's own) after `dtype=`.
pub fn mount_options() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for &(name, what) in OPTIONS {
        out.push((name.into(), what.into()));
        if name.starts_with("dtype=") {
            out.extend(Format::ALL.into_iter().filter_map(|f| {
                let (toggle, help) = f.toggle_help()?;
                Some((format!("{toggle}=on|off"), help.to_string()))
            }));
            out.extend(Format::ALL.into_iter().filter_map(|f| {
                let s = f.setting()?;
                Some((format!("{}={}", s.name, s.values), s.help.to_string()))
            }));
        }
    }
    out
}

/// The command line as `--help` shows it: [`Args`] with the mount options listed after.
pub fn command() -> clap::Command {
    let options = mount_options();
    let width = options.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut help = String::from("Mount options (-o):\n");
    for (name, what) in &options {
        help.push_str(&format!("  {name:width$}  {what}\n"));
    }
    help.push_str(&format!(
        "  Accepted and ignored (what mount(8), mount.fuse3 and fstab pass): {}, x-*, comment=*.\n\n\
         fstab: SOURCE MOUNTPOINT fuse.tensormount ro,nofail 0 0",
        IGNORED.join(", ")
    ));
    <Args as clap::CommandFactory>::command().after_help(help)
}

/// The value parser of `-o`: any text (checked later, by [`MountOptions::parse`]), whose possible
/// values, for shell completion, are the option names.
#[derive(Clone)]
struct OptionList;

impl clap::builder::TypedValueParser for OptionList {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(mount_options().into_iter().flat_map(
            |(name, what)| {
                completions(&name)
                    .into_iter()
                    .map(move |n| clap::builder::PossibleValue::new(n).help(what.clone()))
            },
        )))
    }
}

/// What a shell completes for one entry of [`mount_options`]: `layout=flat|tree` gives
/// `layout=flat` and `layout=tree`, `fsname=NAME` gives `fsname=`.
fn completions(name: &str) -> Vec<String> {
    match name.split_once('=') {
        None => vec![name.to_string()],
        Some((key, values)) if values.contains('|') => {
            values.split('|').map(|v| format!("{key}={v}")).collect()
        }
        Some((key, _)) => vec![format!("{key}=")],
    }
}

/// Whether the program was invoked as a mount(8) helper (`mount.tensormount`, or
/// `mount.fuse.tensormount`), from `argv[0]`: then `-f` means "fake" and it never stays in the
/// foreground.
pub fn invoked_as_helper(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "mount.tensormount" || n == "mount.fuse.tensormount")
}

/// The `-o` options tensormount acts on.
#[derive(Debug, Default, PartialEq)]
pub struct MountOptions {
    pub allow_other: bool,
    pub allow_root: bool,
    pub auto_unmount: bool,
    pub fsname: Option<String>,
    pub noexec: bool,
    /// How the tree is built: `strict`, `npy`, `dtype=`, `layout=`, `settle=`, the formats
    /// turned off (`pickle=off`).
    pub build: Options,
    /// How the sources are read: the formats' own options (`dcp_model=all`), `decode_cache=`,
    /// `source_idle=`.
    pub sources: Config,
    /// `verify`: weight files with a recorded digest are hashed in the background.
    pub verify: bool,
    /// How the mount follows changes of SOURCE.
    pub refresh: refresh::Settings,
    /// `kernel_cache`: the mount's page cache for every file, instead of direct I/O.
    pub kernel_cache: bool,
}

/// Generic options that mount(8), mount.fuse3 and fstab hand to a FUSE daemon: accepted, no effect.
pub const IGNORED: &[&str] = &[
    "ro",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "async",
    "sync",
    "dirsync",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
    "nofail",
    "_netdev",
    "defaults",
];

impl MountOptions {
    /// Parses every `-o` argument. Unknown options are an error that names them.
    pub fn parse(args: &[String]) -> Result<MountOptions, String> {
        let mut opts = MountOptions::default();
        for opt in args.iter().flat_map(|a| split_options(a)) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt.as_str(), None),
            };
            match (key, value) {
                ("allow_other", None) => opts.allow_other = true,
                ("allow_root", None) => opts.allow_root = true,
                ("auto_unmount", None) => opts.auto_unmount = true,
                ("strict", None) => opts.build.strict = true,
                ("noexec", None) => opts.noexec = true,
                ("npy", None) => opts.build.npy = true,
                ("verify", None) => opts.verify = true,
                ("direct_io", None) => opts.kernel_cache = false,
                ("kernel_cache", None) => opts.kernel_cache = true,
                ("dtype", Some(v)) => match Target::parse(v) {
                    Some(t) => opts.build.widen = Some(t),
                    None => {
                        return Err(format!(
                            "mount option `{opt}`: the types are `f32` and `f64`"
                        ));
                    }
                },
                ("layout", Some("flat")) => opts.build.layout = Layout::Flat,
                ("layout", Some("tree")) => opts.build.layout = Layout::Tree,
                (name, Some(value)) if let Some(format) = set_by(name) => {
                    opts.sources.settings.set(format, value)?;
                }
                (name, value) if let Some(format) = toggled(name) => match value {
                    Some("on") => opts.build.off.retain(|f| *f != format),
                    Some("off") if !opts.build.off.contains(&format) => opts.build.off.push(format),
                    Some("off") => {}
                    _ => {
                        return Err(format!(
                            "mount option `{opt}`: the values are `on` and `off`"
                        ));
                    }
                },
                ("layout", _) => {
                    return Err(format!(
                        "mount option `{opt}`: the layouts are `flat` and `tree`"
                    ));
                }
                ("refresh", Some(v)) => {
                    opts.refresh.mode = match v {
                        "auto" => Mode::Auto,
                        "inotify" => Mode::Inotify,
                        "poll" => Mode::Poll,
                        "off" => Mode::Off,
                        _ => {
                            return Err(format!(
                                "mount option `{opt}`: the modes are `auto`, `inotify`, `poll` and `off`"
                            ));
                        }
                    }
                }
                ("refresh_interval", Some(v)) => match seconds(v) {
                    Some(d) if !d.is_zero() => opts.refresh.interval = d,
                    _ => {
                        return Err(format!(
                            "mount option `{opt}`: a number of seconds above 0, e.g. 30 or 0.5"
                        ));
                    }
                },
                ("settle", Some(v)) => match seconds(v) {
                    Some(d) => opts.build.settle = d,
                    None => {
                        return Err(format!(
                            "mount option `{opt}`: a number of seconds, e.g. 1 or 0.2"
                        ));
                    }
                },
                ("source_idle", Some(v)) => match seconds(v) {
                    Some(d) => opts.sources.idle = d,
                    None => {
                        return Err(format!(
                            "mount option `{opt}`: a number of seconds, e.g. 30 or 0.5"
                        ));
                    }
                },
                ("decode_cache", Some(v)) => match size(v) {
                    Some(n) => opts.sources.decode_cache = n,
                    None => {
                        return Err(format!(
                            "mount option `{opt}`: a size in bytes, or with K, M or G (256M)"
                        ));
                    }
                },
                ("fsname", Some(v)) if !v.is_empty() => opts.fsname = Some(v.to_string()),
                ("rw", None) => {}
                ("comment", Some(_)) => {}
                (k, _) if k.starts_with("x-") || k.starts_with("X-") => {}
                (k, None) if IGNORED.contains(&k) => {}
                _ => return Err(format!("unknown mount option `{opt}`")),
            }
        }
        if opts.allow_other && opts.allow_root {
            return Err("options `allow_other` and `allow_root` exclude each other".into());
        }
        Ok(opts)
    }
}

/// A duration written as seconds, possibly fractional (`30`, `0.5`); at most a day.
fn seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.parse().ok()?;
    (s.is_finite() && (0.0..=86400.0).contains(&s)).then(|| Duration::from_secs_f64(s))
}

/// A size in bytes, or in KiB, MiB or GiB with a suffix `K`, `M` or `G` (`256M`); at most 1 TiB.
fn size(v: &str) -> Option<u64> {
    let (digits, unit) = match v.as_bytes().last()? {
        b'K' | b'k' => (&v[..v.len() - 1], 1 << 10),
        b'M' | b'm' => (&v[..v.len() - 1], 1 << 20),
        b'G' | b'g' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(unit).filter(|&n| n <= 1 << 40)
}

/// Splits `a,b\,c` into `a` and `b,c`; empty items are dropped.
fn split_options(arg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = arg.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ',' => out.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    out.push(current);
    out.retain(|s| !s.is_empty());
    out
}

/// The format whose own option is `name`.
fn set_by(name: &str) -> Option<Format> {
    Format::ALL
        .into_iter()
        .find(|f| f.setting().is_some_and(|s| s.name == name))
}

/// The format whose `-o NAME=on|off` option is `name`: its toggle, or the format's own name.
fn toggled(name: &str) -> Option<Format> {
    Format::ALL
        .into_iter()
        .find(|f| f.toggle().is_some() && (f.toggle() == Some(name) || f.name() == name))
}

#[cfg(test)]
mod tests;
