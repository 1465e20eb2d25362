//! The rules a checkpoint breaks, by the PyTorch reader (each refusal names one: `[UnsafePickle]`).

use crate::format::kit::pickle::PickleRule;
use crate::format::kit::zip::ZipRule;

/// Declares [`Rule`], each rule named as its variant.
macro_rules! rules {
    ($($(#[$doc:meta])* $rule:ident,)*) => {
        /// The rules a checkpoint breaks, by the PyTorch reader: its containers' (zip archives,
        /// legacy files) and its pickles'.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Rule {
            $($(#[$doc])* $rule,)*
            /// A rule of the pickle machine.
            Pickle(PickleRule),
            /// A rule of the zip archive's directory.
            Zip(ZipRule),
        }

        impl Rule {
            /// Its name, as a refusal shows it (`[UnsafePickle]`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Rule::$rule => stringify!($rule),)*
                    Rule::Pickle(p) => p.name(),
                    Rule::Zip(z) => z.name(),
                }
            }
        }

        impl std::fmt::Display for Rule {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

rules! {
    /// A pickle names a global that is not one `torch.save` writes for tensors.
    UnsafePickle,
    /// A tar checkpoint of PyTorch before 0.4.
    TarCheckpoint,
    /// A pickle whose values reach too many paths.
    TooManyPaths,
    /// A legacy file of a version other than 1001.
    UnsupportedVersion,
    /// A big-endian checkpoint.
    BigEndian,
    /// A legacy file's storage keys that are not a list of strings.
    BadStorageKeys,
    /// A legacy file's storage past its end.
    StorageOutOfFile,
    /// A legacy file's storage the pickle never named.
    UnknownStorage,
    /// A TorchScript archive.
    TorchScript,
    /// Two records of one name, in any case.
    DuplicateEntry,
    /// A record outside the first record's folder.
    OutsideTopFolder,
    /// An encrypted record, or one of a method torch's reader does not read.
    UnreadableEntry,
    /// A NUL byte in a record's name.
    BadName,
    /// A compressed storage.
    CompressedEntry,
    /// A record larger than read.
    EntryTooLarge,
    /// Records that overlap each other or the directory.
    OverlappingEntries,
}

/// The PyTorch reader's error: the rule a checkpoint breaks, what was found, and whether the file
/// ends too soon (what a file still being written looks like).
#[derive(Debug)]
pub struct PytorchError {
    pub rule: Rule,
    pub what: String,
    pub cut_short: bool,
}

impl crate::format::error::Broken for PytorchError {
    fn rule(&self) -> String {
        self.rule.name().into()
    }

    fn cut_short(&self) -> bool {
        self.cut_short
    }
}

impl std::fmt::Display for PytorchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}
