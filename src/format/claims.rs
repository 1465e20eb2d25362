//! How a format recognises the files it claims ([`Pattern`]): by a suffix, a whole name, a shape,
//! the data files beside it, or (for a single-file SOURCE) magic bytes; and the role each plays.

use super::formats::{Format, Role, SAFETENSORS};
use super::pattern::{Beside, Pattern, shaped, strip_suffix_any_case};

impl Format {
    /// The format that claims a file of this name, the role the file plays, and the stem left
    /// once the suffix that claims it is cut off (`model.safetensors` gives `model`, hence
    /// `model.tensors/`). A suffix matches in any case, and the stem keeps its own (`MODEL.PT`
    /// gives `MODEL`): a reader such as `torch.load` never looks at the name, so neither does the
    /// choice of the file's reader. The stem is not empty, but for a safetensors file's.
    ///
    /// A claim that depends on the files beside (see [`Pattern::WithData`]) is not made: see
    /// [`Format::claim_among`].
    pub fn claim(file_name: &[u8]) -> Option<(Format, Role, &[u8])> {
        Format::claim_among(file_name, &|_| false)
    }

    /// [`Format::claim`] of a file in a directory, where `beside` says whether any other file of
    /// the directory has a name that a given test accepts.
    pub fn claim_among<'n>(
        file_name: &'n [u8],
        beside: &Beside<'_>,
    ) -> Option<(Format, Role, &'n [u8])> {
        Format::ALL
            .into_iter()
            .find_map(|f| f.claims(file_name, beside))
    }

    /// The role a file of this name plays in this format, and its stem, if the format claims it
    /// (see [`Format::claim_among`]).
    fn claims<'n>(
        self,
        file_name: &'n [u8],
        beside: &Beside<'_>,
    ) -> Option<(Format, Role, &'n [u8])> {
        self.0.claims.iter().find_map(|(pattern, role)| {
            let stem = match pattern {
                Pattern::Suffix(suffix) => strip_suffix_any_case(file_name, suffix)
                    .filter(|stem| self.0.shown.native || !stem.is_empty()),
                Pattern::Name { name, stem } => {
                    (file_name == name.as_bytes()).then_some(stem.as_bytes())
                }
                Pattern::Shaped(shape) => shaped(file_name, shape),
                Pattern::WithData { suffix, data } => strip_suffix_any_case(file_name, suffix)
                    .filter(|stem| {
                        !stem.is_empty()
                            && beside(&|other| {
                                other
                                    .strip_prefix(*stem)
                                    .is_some_and(|rest| shaped(rest, data).is_some())
                            })
                    }),
                Pattern::Magic(_) => None,
            };
            stem.map(|stem| (self, *role, stem))
        })
    }

    /// The format a file of this name describes tensors in, with the stem its tensor directory
    /// is named after (see [`Format::claim`]).
    pub fn of(file_name: &[u8]) -> Option<(Format, &[u8])> {
        Format::of_among(file_name, &|_| false)
    }

    /// [`Format::of`] of a file in a directory (see [`Format::claim_among`]).
    pub fn of_among<'n>(file_name: &'n [u8], beside: &Beside<'_>) -> Option<(Format, &'n [u8])> {
        Format::claim_among(file_name, beside)
            .filter(|(_, role, _)| *role == Role::Descriptor)
            .map(|(f, _, stem)| (f, stem))
    }

    /// The format whose files start as `start` (at least [`MAGIC_LEN`] bytes of a file, or all of
    /// it) does.
    pub fn of_content(start: &[u8]) -> Option<Format> {
        Format::ALL.into_iter().find(|f| {
            f.0.claims
                .iter()
                .any(|(pattern, _)| matches!(pattern, Pattern::Magic(m) if start.starts_with(m)))
        })
    }

    /// The format a file that is a whole SOURCE is read as: the one its name says, else the one
    /// its first bytes `start` say, else safetensors.
    pub fn for_source(file_name: &[u8], start: &[u8]) -> Format {
        Format::of(file_name)
            .map(|(f, _)| f)
            .or_else(|| Format::of_content(start))
            .unwrap_or(SAFETENSORS)
    }

    /// Whether it claims files by their whole name (see [`Pattern::Name`]).
    pub(super) fn claims_names(self) -> bool {
        self.0
            .claims
            .iter()
            .any(|(p, _)| matches!(p, Pattern::Name { .. }))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::format::formats::{DEFAULT, Spec};
    use crate::format::{DCP, GGUF, ONNX, PYTORCH};

    #[test]
    fn names_say_the_format() {
        assert_eq!(
            Format::of(b"model.safetensors"),
            Some((SAFETENSORS, &b"model"[..]))
        );
        assert_eq!(Format::of(b".safetensors"), Some((SAFETENSORS, &b""[..])));
        assert_eq!(
            Format::of(b"pytorch_model.bin"),
            Some((PYTORCH, &b"pytorch_model"[..]))
        );
        assert_eq!(Format::of(b".bin"), None);
        assert_eq!(Format::of(b"m.Q4_K.gguf"), Some((GGUF, &b"m.Q4_K"[..])));
        assert_eq!(Format::of(b"config.json"), None);
        assert_eq!(Format::of(b"MODEL.PT"), Some((PYTORCH, &b"MODEL"[..])));
        assert_eq!(
            Format::claim(b"model.ONNX_DATA"),
            Some((ONNX, Role::Data, &b"model"[..]))
        );
        assert_eq!(Format::of(b"model.onnx_data"), None);
        assert_eq!(Format::for_source(b"weights", b"{}"), SAFETENSORS);
        // A file whose name no format claims, by its first bytes.
        assert_eq!(Format::for_source(b"sha256-00ff", b"GGUF\x03\0\0\0"), GGUF);
        assert_eq!(Format::for_source(b"model", b"PK\x03\x04\x14\0"), PYTORCH);
        let legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
        assert_eq!(Format::for_source(b"model", legacy), PYTORCH);
        // The name first.
        assert_eq!(Format::for_source(b"m.safetensors", b"GGUF"), SAFETENSORS);
        // Magic is never a claim by name.
        assert_eq!(Format::claim(b"GGUF"), None);
        // A whole name, its stem the format's.
        assert_eq!(Format::of(b".metadata"), Some((DCP, &b"checkpoint"[..])));
        assert_eq!(Format::of(b"x.metadata"), None);
        assert_eq!(Format::for_source(b".metadata", b"\x80\x04"), DCP);
        assert_eq!(
            Format::claim(b"__0_0.distcp").map(|c| c.1),
            Some(Role::Data)
        );
        for (i, f) in Format::ALL.into_iter().enumerate() {
            assert_eq!(f.position(), i);
        }
    }

    /// A format that claims as a TensorFlow bundle's files are claimed.
    pub(in crate::format) const BUNDLE: Format = Format(&Spec {
        name: "bundle",
        claims: &[
            (
                Pattern::WithData {
                    suffix: ".index",
                    data: ".data-#####-of-#####",
                },
                Role::Descriptor,
            ),
            (Pattern::Shaped("*.data-#####-of-#####"), Role::Data),
        ],
        ..DEFAULT
    });

    #[test]
    fn a_descriptor_is_claimed_with_its_data_files_and_data_files_by_shape() {
        let dir: &[&[u8]] = &[
            b"ckpt-1.index",
            b"ckpt-1.data-00000-of-00001",
            b"other.index",
        ];
        let claim = |name: &'static [u8]| {
            let beside = |m: &dyn Fn(&[u8]) -> bool| dir.iter().any(|n| *n != name && m(n));
            BUNDLE.claims(name, &beside).map(|(_, r, s)| (r, s))
        };
        assert_eq!(
            claim(b"ckpt-1.index"),
            Some((Role::Descriptor, &b"ckpt-1"[..]))
        );
        assert_eq!(
            claim(b"ckpt-1.data-00000-of-00001"),
            Some((Role::Data, &b"ckpt-1"[..]))
        );
        // An index with no data file beside it is a plain file; so is a name of another shape.
        assert_eq!(claim(b"other.index"), None);
        assert_eq!(claim(b"ckpt-1.data-0000x-of-00001"), None);
        assert_eq!(claim(b".data-00000-of-00001"), None);
        assert_eq!(
            claim(b"CKPT-1.DATA-00000-OF-00001").map(|c| c.0),
            Some(Role::Data)
        );
        // Without the files beside, an index is never claimed.
        assert_eq!(BUNDLE.claims(b"ckpt-1.index", &|_| false), None);
        assert_eq!(shaped(b"x.npz", "*.npz"), Some(&b"x"[..]));
        assert_eq!(shaped(b"model_0001.h5", "model_####.h5"), Some(&b""[..]));
        assert_eq!(shaped(b"model_001.h5", "model_####.h5"), None);
    }
}
