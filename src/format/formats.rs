//! The formats tensormount reads, each one value that declares everything the rest of the program
//! needs to know of it: the names of its files and of its sets, its reader, the virtual
//! safetensors file its files convert to, where its errors and metadata are shown, and the option
//! that turns it off. Nothing outside `format` names a particular format.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::description::Description;
use super::error::FormatError;
use super::input::{Input, Parsed};
use super::listing::Listing;
use super::pattern::Pattern;
use super::{dcp, gguf, ollama, onnx, pytorch, safetensors};
use crate::base::digest::Sha256;

/// A format whose files the mount interprets. Compared by name: each is one value.
#[derive(Clone, Copy)]
pub struct Format(pub(super) &'static Spec);

/// What a format declares, in five groups. A format writes only what differs from [`DEFAULT`].
pub(super) struct Spec {
    /// Its name in messages, in `--list --json`, and of its folder in `src/format/`.
    pub(super) name: &'static str,
    /// The files it claims, and the role each plays. A descriptor's suffix is cut off its name to
    /// leave the stem its tensor directory is named after.
    pub(super) claims: &'static [(Pattern, Role)],
    pub(super) sets: Sets,
    pub(super) shown: Shown,
    pub(super) reader: Reader,
    pub(super) options: Options,
}

/// How its files make sets.
#[derive(Clone, Copy)]
pub(super) struct Sets {
    /// What names the index of a set of its files: `STEM{infix}json` or
    /// `STEM{infix}VARIANT.json`.
    pub(super) index_infix: Option<&'static str>,
    /// Whether its numbered files (`NAME-00001-of-00003`) are a set with no index, merged into
    /// `NAME.tensors/` (split GGUF models, as `gguf-split` writes them).
    pub(super) numbered: bool,
    /// The keys its files say their place in a numbered set with ([`Split`]'s `no`, `count`
    /// and `tensors`), for messages.
    ///
    /// [`Split`]: super::description::Split
    pub(super) split_keys: [&'static str; 3],
}

/// What is shown of its files.
#[derive(Clone, Copy)]
pub(super) struct Shown {
    /// Whether its files are safetensors files themselves: no conversion, and tensor offsets
    /// relative to a safetensors header's data buffer (`user.safetensors.data_offsets`).
    pub(super) native: bool,
    /// Whether a file without tensors still gets its tensor directory (for its metadata): not a
    /// checkpoint without tensors (training arguments, an optimizer's hyperparameters).
    pub(super) empty_dir: bool,
    /// The stem of the virtual safetensors file a file of this stem converts to.
    pub(super) converted_stem: fn(&[u8]) -> Vec<u8>,
    /// The prefix of the xattrs of a tensor directory's metadata (before the key).
    pub(super) metadata_xattr: &'static str,
    /// The xattr of a mirrored file of this format (or of an index of its sets) that says why it
    /// is not interpreted.
    pub(super) error_xattr: &'static str,
}

/// How its checkpoints are read.
pub(super) enum Reader {
    /// A reader of a file claimed as a descriptor, which opens the data files it reads only
    /// through the opener of its [`Input`].
    File(fn(Input<'_>) -> Result<Description, FormatError>),
    /// For a format whose models are a store's (ollama's): how the store is laid out. Such a
    /// format claims no file by name.
    Store(Store),
}

/// Its options.
pub(super) struct Options {
    /// `-o NAME=on|off` (on by default), if it can be turned off, and what it does (`--help`, the
    /// man page and the completions say it).
    pub(super) toggle: Option<(&'static str, &'static str)>,
    /// Its own `-o NAME=VALUE` option, if it has one.
    pub(super) setting: Option<Setting>,
}

/// What a format that says nothing else is: no sets, a tensor directory even without tensors, its
/// conversion named after its stem, errors in `user.tensormount.error`, no options.
pub(super) const DEFAULT: Spec = Spec {
    name: "",
    claims: &[],
    sets: Sets {
        index_infix: None,
        numbered: false,
        split_keys: [""; 3],
    },
    shown: Shown {
        native: false,
        empty_dir: true,
        converted_stem: same_stem,
        metadata_xattr: "user.safetensors.metadata.",
        error_xattr: "user.tensormount.error",
    },
    reader: Reader::File(no_file),
    options: Options {
        toggle: None,
        setting: None,
    },
};

/// A format's own `-o NAME=VALUE` option: its name, its values and what it does (for `--help`,
/// the man page and the completions), and how a value is parsed: once, before any file is read,
/// into the value its reader takes from [`Input::setting`].
pub struct Setting {
    pub name: &'static str,
    pub values: &'static str,
    pub help: &'static str,
    pub parse: fn(&str) -> Result<Parsed, String>,
}

/// How a format's models lie in a store: a directory with a subdirectory of descriptors and one
/// of blobs named by their digests. A store's files are claimed by their path in it: a file
/// `depth` levels below the descriptors' directory is a descriptor (its error shown in the
/// format's error attribute), a file of the blobs' directory is mirrored only, with the digest
/// its name says. Each descriptor's model is shown, by its name, below a generated directory of
/// the store.
pub struct Store {
    /// The subdirectory of descriptors (`manifests`), and how deep below it each lies.
    pub descriptors: (&'static str, usize),
    /// The subdirectory of blobs (`blobs`).
    pub blobs: &'static str,
    /// The generated directory the models are shown in, beside the two (`by-name`).
    pub view: &'static str,
    /// The most of a descriptor that is read.
    pub max_descriptor: u64,
    /// The name of the model a descriptor describes (its path below the view, `/` between
    /// directories) from its path below the descriptors' directory; `None` for a file that is
    /// not a descriptor.
    pub name: fn(&[&[u8]]) -> Option<String>,
    /// Reads the bytes of a descriptor (whose path is given, for messages).
    pub read: fn(&[u8], &Path) -> Result<Listing, FormatError>,
    /// The file generated beside a model's files (`Modelfile`), and how: for the model `name`,
    /// from the text of its listed files (by place; `None` for a file whose text is not needed).
    pub generated: (&'static str, Generate),
    /// The digest a blob's file name says.
    pub digest: fn(&[u8]) -> Option<Sha256>,
}

/// Makes a file of a model from the text of its listed files (see [`Store::generated`]).
pub type Generate = fn(&str, &Listing, &[Option<&[u8]>]) -> Vec<u8>;

/// The reader of a format that reads no file.
fn no_file(input: Input<'_>) -> Result<Description, FormatError> {
    Err(FormatError::Foreign(input.path.to_path_buf()))
}

/// The part a file plays in its format's checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It describes tensors (the lone file of most formats, an ONNX model): it gets the tensor
    /// directory and the virtual safetensors file, and carries its format's error attribute.
    Descriptor,
    /// It only holds bytes a descriptor's tensors lie in (an ONNX model's external data):
    /// mirrored, never read alone, a weight file to `verify` and `-o verify`. The files a
    /// description names are its data files whatever their names; this role is for the names
    /// they usually have.
    Data,
}

/// The stem a virtual safetensors file keeps: the checkpoint's own.
fn same_stem(stem: &[u8]) -> Vec<u8> {
    stem.to_vec()
}

/// The safetensors format itself.
pub const SAFETENSORS: Format = Format(&Spec {
    name: "safetensors",
    claims: &[(Pattern::Suffix(".safetensors"), Role::Descriptor)],
    sets: Sets {
        index_infix: Some(".safetensors.index."),
        ..DEFAULT.sets
    },
    shown: Shown {
        native: true,
        error_xattr: "user.safetensors.error",
        ..DEFAULT.shown
    },
    reader: Reader::File(|input| safetensors::describe(input.file, input.path)),
    ..DEFAULT
});

/// PyTorch checkpoints written by `torch.save` (zip or legacy pickle).
pub const PYTORCH: Format = Format(&Spec {
    name: "pytorch",
    claims: &[
        (Pattern::Suffix(".bin"), Role::Descriptor),
        (Pattern::Suffix(".pt"), Role::Descriptor),
        (Pattern::Suffix(".pth"), Role::Descriptor),
        (Pattern::Suffix(".ckpt"), Role::Descriptor),
        // What torch.save writes: a zip archive, or (before 1.6) the pickled magic number
        // 0x1950a86a20f9469cfc6c, protocol 2.
        (Pattern::Magic(b"PK\x03\x04"), Role::Descriptor),
        (
            Pattern::Magic(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"),
            Role::Descriptor,
        ),
    ],
    sets: Sets {
        index_infix: Some(".bin.index."),
        ..DEFAULT.sets
    },
    shown: Shown {
        empty_dir: false,
        converted_stem: pytorch::converted_stem,
        ..DEFAULT.shown
    },
    reader: Reader::File(|input| pytorch::describe(input.file, input.path)),
    options: Options {
        toggle: Some((
            "pickle",
            "PyTorch checkpoints (.bin, .pt, .pth, .ckpt) get NAME.tensors/ and a virtual \
             safetensors file, their pickle read without running any of it (on, the default); \
             off: plain mirrored files (pytorch=off too)",
        )),
        ..DEFAULT.options
    },
});

/// llama.cpp's GGUF files.
pub const GGUF: Format = Format(&Spec {
    name: "gguf",
    claims: &[
        (Pattern::Suffix(".gguf"), Role::Descriptor),
        (Pattern::Magic(b"GGUF"), Role::Descriptor),
    ],
    sets: Sets {
        numbered: true,
        split_keys: ["split.no", "split.count", "split.tensors.count"],
        ..DEFAULT.sets
    },
    shown: Shown {
        metadata_xattr: "user.gguf.",
        ..DEFAULT.shown
    },
    reader: Reader::File(|input| gguf::describe(input.file, input.path)),
    options: Options {
        toggle: Some((
            "gguf",
            "GGUF files (.gguf) get NAME.tensors/ with one raw file per tensor (ggml blocks as \
             stored) and their metadata as user.gguf.*, and a virtual NAME.safetensors (quantized \
             tensors as float32); split sets are merged (on, the default); off: plain mirrored \
             files",
        )),
        ..DEFAULT.options
    },
});

/// ONNX models.
pub const ONNX: Format = Format(&Spec {
    name: "onnx",
    claims: &[
        (Pattern::Suffix(".onnx"), Role::Descriptor),
        (Pattern::Suffix(".onnx_data"), Role::Data),
        (Pattern::Suffix(".onnx.data"), Role::Data),
    ],
    shown: Shown {
        metadata_xattr: "user.onnx.",
        ..DEFAULT.shown
    },
    reader: Reader::File(|input| onnx::describe(input.file, input.path)),
    options: Options {
        toggle: Some((
            "onnx",
            "ONNX models (.onnx) get NAME.tensors/ with one raw file per tensor (initializers and \
             Constant nodes, subgraphs and functions included) and their producer, opsets and \
             metadata as user.onnx.*, and a virtual NAME.safetensors (on, the default); off: plain \
             mirrored files",
        )),
        ..DEFAULT.options
    },
    ..DEFAULT
});

/// ollama's model store: every manifest's model shown by name in `by-name/`.
pub const OLLAMA: Format = Format(&Spec {
    name: "ollama",
    shown: Shown {
        empty_dir: false,
        metadata_xattr: "user.ollama.",
        ..DEFAULT.shown
    },
    reader: Reader::Store(Store {
        descriptors: ("manifests", 4),
        blobs: "blobs",
        view: "by-name",
        max_descriptor: ollama::MAX_MANIFEST,
        name: ollama::model_name,
        read: |bytes, path| ollama::listing(bytes).map_err(|e| FormatError::invalid(path, e)),
        generated: ("Modelfile", ollama::modelfile),
        digest: ollama::blob_digest,
    }),
    options: Options {
        toggle: Some((
            "ollama",
            "an ollama model store (a directory with manifests/ and blobs/) gets by-name/, every \
             model by the name ollama list gives it, with model.gguf and its views, its other \
             layers as files and a Modelfile (on, the default); off: plain mirrored files",
        )),
        ..DEFAULT.options
    },
    ..DEFAULT
});

/// torch.distributed.checkpoint (DCP) checkpoints: a directory's `.metadata` and the
/// `.distcp` files it names, consolidated on read.
pub const DCP: Format = Format(&Spec {
    name: "dcp",
    claims: &[
        (
            Pattern::Name {
                name: ".metadata",
                stem: "checkpoint",
            },
            Role::Descriptor,
        ),
        (Pattern::Suffix(".distcp"), Role::Data),
    ],
    shown: Shown {
        converted_stem: |_| b"model".to_vec(),
        metadata_xattr: "user.dcp.",
        ..DEFAULT.shown
    },
    reader: Reader::File(dcp::describe),
    options: Options {
        toggle: Some((
            "dcp",
            "torch.distributed.checkpoint directories (a .metadata and its .distcp files) get \
             checkpoint.tensors/ with every tensor consolidated from its chunks on read, and a \
             virtual model.safetensors of the model's tensors, .metadata read without running any \
             of it (on, the default); off: plain mirrored files",
        )),
        setting: Some(Setting {
            name: "dcp_model",
            values: "auto|all|GROUP",
            help: "which tensors of a DCP checkpoint model.safetensors holds: auto (the default), \
                   the model group's (its prefix removed), else every top-level tensor outside \
                   optim, optimizer, lr_scheduler, dataloader, train_state and extra; all: every \
                   tensor, keys as stored; GROUP: the tensors whose keys start with GROUP. (prefix \
                   removed)",
            parse: dcp::parse_model,
        }),
    },
    ..DEFAULT
});

impl Format {
    /// Every format, in the order their names are tried.
    pub const ALL: [Format; 6] = [SAFETENSORS, PYTORCH, GGUF, ONNX, OLLAMA, DCP];

    /// The digest the path of a store's blob says (`.../blobs/sha256-HEX`), if it is one.
    pub fn blob_digest(path: &Path) -> Option<Sha256> {
        let dir = path.parent()?.file_name()?;
        let name = path.file_name()?.as_encoded_bytes();
        Format::ALL
            .iter()
            .filter_map(|f| f.store())
            .find_map(|s| (dir == s.blobs).then(|| (s.digest)(name)).flatten())
    }

    /// Its own `-o NAME=VALUE` option, if it has one.
    pub fn setting(self) -> Option<&'static Setting> {
        self.0.options.setting.as_ref()
    }

    /// How its models lie in a store, for a format whose models are a store's.
    pub fn store(self) -> Option<&'static Store> {
        match &self.0.reader {
            Reader::Store(store) => Some(store),
            Reader::File(_) => None,
        }
    }

    /// Its index in [`Format::ALL`].
    pub fn position(self) -> usize {
        Format::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// What names the index of a set of its files (see [`Spec::index_infix`]).
    pub(super) fn index_infix(self) -> Option<&'static str> {
        self.0.sets.index_infix
    }

    /// The name of its `-o NAME=on|off` option, if it can be turned off.
    pub fn toggle(self) -> Option<&'static str> {
        self.0.options.toggle.map(|(name, _)| name)
    }

    /// The keys its files say their place in a numbered set with: `no`, `count`, `tensors`.
    pub fn split_keys(self) -> [&'static str; 3] {
        self.0.sets.split_keys
    }

    /// Its toggle and what the toggle does, for the help.
    pub fn toggle_help(self) -> Option<(&'static str, &'static str)> {
        self.0.options.toggle
    }

    /// Whether its files are safetensors files (see [`Spec::native`]).
    pub fn native(self) -> bool {
        self.0.shown.native
    }

    /// Whether a valid file without tensors gets a tensor directory (a vocabulary-only GGUF file
    /// does, for its metadata; a checkpoint of training arguments does not).
    pub fn empty_dir(self) -> bool {
        self.0.shown.empty_dir
    }

    /// Whether its numbered files are a set without an index (see [`Spec::numbered`]).
    pub(super) fn numbers_sets(self) -> bool {
        self.0.sets.numbered
    }

    /// Reads `file` (whose path is `path`, for messages) as a file of this format with its default
    /// setting; the data files it reads are opened beside it, by name, following no link.
    pub fn describe(self, file: &File, path: &Path) -> Result<Description, FormatError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let beside = |name: &str| {
            File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(dir.join(name))
        };
        self.read(Input::new(file, path, &beside))
    }

    /// Reads the file of `input` as a file of this format.
    pub fn read(self, input: Input<'_>) -> Result<Description, FormatError> {
        match &self.0.reader {
            Reader::File(read) => read(input),
            Reader::Store(_) => no_file(input),
        }
    }

    /// The name of the virtual safetensors file a file of this format with stem `stem` converts
    /// to (`pytorch_model` gives `model.safetensors`); `None` for a safetensors file.
    pub fn converted_name(self, stem: &[u8]) -> Option<Vec<u8>> {
        (!self.0.shown.native)
            .then(|| [&(self.0.shown.converted_stem)(stem)[..], b".safetensors"].concat())
    }

    /// The xattr of metadata entry `key` on a tensor directory of a file of this format.
    pub fn metadata_xattr(self, key: &str) -> String {
        format!("{}{key}", self.0.shown.metadata_xattr)
    }

    /// The xattr that says why a mirrored file of this format is not interpreted.
    pub fn error_xattr(self) -> &'static str {
        self.0.shown.error_xattr
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Format {}

impl std::hash::Hash for Format {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.name.hash(h);
    }
}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// The stem any format's conversion gives a file of stem `stem` (`pytorch_model` gives `model`):
/// the key that pairs a file with its conversion.
pub fn conversion_key(stem: &[u8]) -> Vec<u8> {
    Format::ALL
        .into_iter()
        .filter(|f| !f.claims_names())
        .map(|f| (f.0.shown.converted_stem)(stem))
        .find(|s| s != stem)
        .unwrap_or_else(|| stem.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::claims::tests::BUNDLE;

    #[test]
    fn a_format_writes_only_what_differs_from_the_default() {
        assert_eq!(BUNDLE.toggle(), None);
        assert!(BUNDLE.empty_dir() && !BUNDLE.native());
        assert_eq!(BUNDLE.error_xattr(), "user.tensormount.error");
        assert!(BUNDLE.store().is_none() && OLLAMA.store().is_some());
        let null = File::open("/dev/null").unwrap();
        let input = Input::new(&null, Path::new("x.index"), &|_| {
            Err(std::io::ErrorKind::NotFound.into())
        });
        assert!(matches!(BUNDLE.read(input), Err(FormatError::Foreign(_))));
    }

    #[test]
    fn conversions_are_named_as_hugging_face_names_them() {
        for (stem, want) in [
            ("pytorch_model", "model.safetensors"),
            (
                "pytorch_model-00001-of-00003",
                "model-00001-of-00003.safetensors",
            ),
            ("pytorch_model.fp16", "model.fp16.safetensors"),
            (
                "diffusion_pytorch_model",
                "diffusion_pytorch_model.safetensors",
            ),
            ("last", "last.safetensors"),
        ] {
            let got = PYTORCH.converted_name(stem.as_bytes()).unwrap();
            assert_eq!(String::from_utf8_lossy(&got), want, "{stem}");
        }
        assert_eq!(SAFETENSORS.converted_name(b"model"), None);
        assert_eq!(GGUF.converted_name(b"m").unwrap(), b"m.safetensors");
    }
}
