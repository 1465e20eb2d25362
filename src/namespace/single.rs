//! A single-file SOURCE: the root shows the file's tensors while it is valid and settled, nothing
//! otherwise, and follows the file through renames, rewrites and removal.

use std::fs::{self, Metadata};
use std::sync::Arc;
use std::time::Instant;

use log::warn;

use super::commit::{Commit, DirNode};
use super::draft::{self, Draft};
use super::error::BuildError;
use super::node::{Attr, Origin, ROOT, Xattrs, no_xattrs};
use super::options::Policy;
use super::record::{Generated, Record};
use super::scan::Scan;
use super::tensor_dirs::file_tensors;
use crate::format::{Format, NotOffered};
use crate::source::{Registry, Source, Version, Warning};

/// The format SOURCE is read as: the one its name says, else the one its first bytes say, else
/// safetensors.
pub fn format_of(source: &Source) -> Format {
    let name = source.path.file_name().unwrap_or_default();
    Format::for_source(
        std::os::unix::ffi::OsStrExt::as_bytes(name),
        &source.start(),
    )
}

/// The root of a single-file mount and its entries. What a directory's mirrored file says of
/// itself, the root says of the file: its reader's notes are warned once, and a trap (a
/// checkpoint whose pickle calls an unsafe global) is named in the format's error attribute.
pub fn file_root(
    policy: Policy<'_>,
    source: &Arc<Source>,
    budget: &mut usize,
) -> Result<(DirNode, Vec<Draft>), BuildError> {
    let format = format_of(source);
    let (attr, mut xattrs, children) =
        file_tensors(policy, source, format, &Arc::from([]), budget)?;
    if let Ok(d) = source.describe(format) {
        if !d.notes.is_empty() && source.first_warning(Warning::Notes) {
            d.notes.iter().for_each(|note| warn!("{note}"));
        }
        if let Some(Err(why @ NotOffered::Trap(_))) = &d.conversion {
            Arc::make_mut(&mut xattrs).insert(format.error_xattr().to_string(), why.to_string());
        }
    }
    Ok((root_node(attr, xattrs, Origin::Generated), children))
}

/// Looks at the file again at `now`: unless it is the same version and nothing settled since,
/// the root is rebuilt.
pub fn rebuild(
    policy: Policy<'_>,
    now: Instant,
    registry: &mut Registry,
    c: &mut Commit<'_>,
    rec: &mut Record,
    budget: &mut usize,
) -> Result<(), BuildError> {
    let settle = policy.options.settle;
    let meta = fs::metadata(&rec.path).ok().filter(Metadata::is_file);
    let due = rec.flux.deadline(settle).is_some_and(|t| t <= now);
    let before = (!rec.gone).then(|| Version::of(&rec.scan.meta));
    let version = meta.as_ref().map(Version::of);
    if version == before && !due {
        return Ok(());
    }
    c.diff.rescanned.push(rec.path.clone());
    if let (Some(v), Some(b)) = (version, before)
        && v.id == b.id
        && !v.same_bytes(&b)
    {
        rec.flux.note(b"", now);
    }
    rec.flux.expire(now, settle);
    rec.gone = meta.is_none();
    let source = match meta {
        Some(m) => {
            rec.scan = file_scan(m.clone());
            Some(registry.get(&rec.path, &m))
        }
        None => None,
    };
    let settled = !rec.flux.unsettled(b"", now, settle);
    let valid = match &source {
        Some(Ok(s)) if settled => match s.describe(format_of(s)) {
            Ok(_) => Some(s.clone()),
            Err(e) => {
                if s.first_warning(Warning::Invalid) {
                    if e.cut_short() {
                        log::info!("{e}; incomplete so far, no tensors shown");
                    } else {
                        warn!("{e}; the mount shows no tensors until it is valid");
                    }
                }
                None
            }
        },
        Some(Ok(_)) => None,
        Some(Err(e)) => {
            warn!("{}: cannot open: {e}", rec.path.display());
            None
        }
        None => {
            warn!("{}: gone; the mount shows no tensors", rec.path.display());
            None
        }
    };
    let (root, children) = match &valid {
        Some(s) => file_root(policy, s, budget)?,
        None => {
            let attr = c
                .table
                .get(ROOT)
                .map_or_else(|| draft::tensor_dir_attr(&rec.scan.meta, &[]), |n| n.attr);
            (root_node(attr, no_xattrs(), Origin::Generated), Vec::new())
        }
    };
    rec.generated = valid.into_iter().map(generated_root).collect();
    c.dir(ROOT, root, children);
    Ok(())
}

/// The record of the root's generated directory: the file's tensors, shown as the root itself.
pub fn generated_root(source: Arc<Source>) -> Generated {
    Generated {
        name: Arc::from(&b""[..]),
        inputs: vec![source],
    }
}

/// The record's scan of a single-file SOURCE: the file's own `stat`, no entries.
pub fn file_scan(meta: Metadata) -> Scan {
    Scan {
        meta,
        entries: Vec::new(),
        remote: false,
    }
}

/// The root directory's node.
pub fn root_node(attr: Attr, xattrs: Arc<Xattrs>, origin: Origin) -> DirNode {
    DirNode {
        name: Arc::from(&b""[..]),
        parent: ROOT,
        attr,
        xattrs,
        origin,
    }
}
