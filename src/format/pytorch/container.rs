//! What every container of a checkpoint gives the reader ([`Container`]: its main pickle and where
//! each storage lies), and the errors a container's reader reports.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::danger;
pub use super::rule::{PytorchError, Rule};
use crate::format::error::FormatError;
use crate::format::kit::pickle::{self, Pickle, PickleError};

/// The first buffer a pickle is read into.
const FIRST_READ: u64 = 1 << 16;

/// Largest pickle read into memory.
pub(super) const MAX_PICKLE: u64 = 1 << 30;

/// Where a storage's bytes lie in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub start: u64,
    pub len: u64,
}

/// A checkpoint's container, read: its main pickle, the storages' places, and the dangerous
/// globals of all its pickles.
pub(super) struct Container {
    pub kind: &'static str,
    pub main: pickle::Pickle,
    pub storages: HashMap<String, Span>,
    pub unsafe_globals: Vec<String>,
}

/// An error of the checkpoint at `path`: the rule it breaks, what was found, and whether it ends
/// too soon.
pub(super) fn checkpoint(
    path: &Path,
    rule: Rule,
    what: impl Into<String>,
    cut_short: bool,
) -> FormatError {
    let what = what.into();
    FormatError::invalid(
        path,
        PytorchError {
            rule,
            what,
            cut_short,
        },
    )
}

/// What a refusal of a trap found (a pickle that names an unsafe global), if `e` is one.
pub(super) fn trap_found(e: &FormatError) -> Option<&str> {
    let e = e.broken::<PytorchError>()?;
    (e.rule == UNSAFE).then_some(&e.what)
}

/// The rule of a pickle that names a global that is not one `torch.save` writes for tensors.
pub(super) const UNSAFE: Rule = Rule::UnsafePickle;

/// What every refusal of a trap ends its account of the calls with.
pub(super) const NOT_OFFERED: &str = "; nothing was run, the file is not offered as safetensors";

/// Why a checkpoint whose pickles name `globals` (unsafe ones) is not offered as safetensors.
pub(super) fn trap(globals: &[String]) -> String {
    format!("the pickle calls {}{NOT_OFFERED}", globals.join(", "))
}

/// `e`, a refusal for another rule of a file whose pickles name the unsafe `globals`, as the
/// refusal of a trap (naming the other rule after); `e` itself if there are none.
pub(super) fn refused_trap(path: &Path, globals: &[String], e: FormatError) -> FormatError {
    match e.broken::<PytorchError>() {
        Some(PytorchError { rule, what, .. }) if !globals.is_empty() && *rule != UNSAFE => {
            checkpoint(
                path,
                UNSAFE,
                format!("{} (and {what} [{rule}])", trap(globals)),
                false,
            )
        }
        _ => e,
    }
}

/// A pickle error, as the file's: `part` names the pickle (`data.pkl`, ...). A pickle that named
/// an unsafe global before it broke the rule is refused for that global first.
pub(super) fn pickle_error(path: &Path, part: &str, e: PickleError) -> FormatError {
    if !e.unsafe_globals.is_empty() {
        return checkpoint(
            path,
            UNSAFE,
            format!(
                "{part}: calls {} before it breaks a rule ({e}: {}){NOT_OFFERED}",
                e.unsafe_globals.join(", "),
                Rule::Pickle(e.rule)
            ),
            false,
        );
    }
    checkpoint(
        path,
        Rule::Pickle(e.rule),
        format!("{part}: {e}"),
        e.cut_short(),
    )
}

/// The pickle at `at`, read into a buffer that doubles until it holds the whole pickle.
pub(super) fn load_at(
    file: &File,
    len: u64,
    at: u64,
    path: &Path,
    part: &str,
) -> Result<Pickle, FormatError> {
    let available = len.saturating_sub(at).min(MAX_PICKLE);
    let mut want = FIRST_READ.min(available);
    loop {
        let mut buf = vec![0; want as usize];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| FormatError::Io(path.to_path_buf(), e))?;
        match pickle::load(&buf, danger::allowed) {
            Err(e) if e.cut_short() && want < available => {
                want = want.saturating_mul(2).min(available);
            }
            Err(e) => return Err(pickle_error(path, part, e)),
            Ok(p) => return Ok(p),
        }
    }
}
