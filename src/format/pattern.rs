//! The patterns a format claims file names by ([`Pattern`]), and how a name is matched against one.

/// How a format recognises a file it claims.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
pub(super) enum Pattern {
    /// A name that ends in this suffix, in any case.
    Suffix(&'static str),
    /// A file of exactly this name, whose tensor directory is named after `stem` (DCP's
    /// `.metadata` gives `checkpoint.tensors/`). Such a descriptor's data files lie beside it: as
    /// a SOURCE that is a single file, it is refused, its data files being outside SOURCE.
    Name {
        name: &'static str,
        stem: &'static str,
    },
    /// A file that starts with these bytes: tried only on a SOURCE that is a single file whose
    /// name no format claims (an ollama blob, a download saved without its name). Never in a
    /// directory, where most files are not checkpoints and a cache's blobs are reached through
    /// the names that link to them.
    Magic(&'static [u8]),
    // The next two are for TensorFlow's bundles (issue 56), the first format to claim so; until
    // it lands only the tests below use them.
    /// A name of this shape: `*` stands for the stem (at least one byte), `#` for one ASCII digit,
    /// any other byte for itself, in any case (`*.data-#####-of-#####`, a TensorFlow bundle's
    /// data files).
    Shaped(&'static str),
    /// `STEM{suffix}`, in any case, claimed only while a file beside it is named `STEM` followed by
    /// `data` (a [`Pattern::Shaped`] shape without its `*`): a TensorFlow `X.index` beside its
    /// `X.data-00000-of-00001`. Claimed so whatever it holds, a damaged one is named rather than
    /// mirrored in silence; any other file of that suffix is not claimed.
    WithData {
        suffix: &'static str,
        data: &'static str,
    },
}

/// Whether a file beside the one claimed has a name that `matches` (see
/// [`Pattern::WithData`]).
pub type Beside<'a> = dyn Fn(&dyn Fn(&[u8]) -> bool) -> bool + 'a;

/// The stem of `name` in `shape` (see [`Pattern::Shaped`]), if `name` has that shape.
pub(super) fn shaped<'n>(name: &'n [u8], shape: &str) -> Option<&'n [u8]> {
    let shape = shape.as_bytes();
    let star = shape.iter().position(|&b| b == b'*');
    let (before, after) = match star {
        Some(at) => (&shape[..at], &shape[at + 1..]),
        None => (shape, &[][..]),
    };
    let fits = |part: &[u8], pattern: &[u8]| {
        part.len() == pattern.len()
            && part.iter().zip(pattern).all(|(&b, &p)| match p {
                b'#' => b.is_ascii_digit(),
                p => b.eq_ignore_ascii_case(&p),
            })
    };
    if star.is_none() {
        return fits(name, before).then_some(&name[..0]);
    }
    let stem_len = name.len().checked_sub(before.len() + after.len())?;
    let (head, rest) = name.split_at(before.len());
    let (stem, tail) = rest.split_at(stem_len);
    (stem_len > 0 && fits(head, before) && fits(tail, after)).then_some(stem)
}

/// How many bytes of a file [`Format::of_content`] looks at.
pub const MAGIC_LEN: usize = 16;

/// `name` without `suffix`, which ends it in any case.
pub(super) fn strip_suffix_any_case<'n>(name: &'n [u8], suffix: &str) -> Option<&'n [u8]> {
    let at = name.len().checked_sub(suffix.len())?;
    name[at..]
        .eq_ignore_ascii_case(suffix.as_bytes())
        .then(|| &name[..at])
}
