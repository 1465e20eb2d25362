//! The data files of a description: the other files its tensors lie in (an ONNX model's external
//! data), found from the directory of the file it describes.

use std::path::Path;
use std::sync::Arc;

use super::node::FileError;
use crate::format::{Description, Seen};
use crate::source::Source;

/// The sources of the data files `d` names (see [`Description::files`]), found from the
/// directory `dir` of the file it describes: among its `files` by name (one that `settling`
/// says is being written makes the file wait, as a shard does), or below it by path through
/// `open`; and every tensor in one checked to lie inside it. Or why not (the file's error).
pub fn find(
    d: &Description,
    dir: &Path,
    files: &[(Arc<[u8]>, Arc<Source>)],
    open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
    settling: impl Fn(&[u8]) -> Option<FileError>,
) -> Result<Arc<[Arc<Source>]>, FileError> {
    if d.files.is_empty() {
        return Ok(Arc::from([]));
    }
    let mut data = Vec::with_capacity(d.files.len());
    for location in &d.files {
        let found = match location.contains('/') {
            false => {
                let here = files.iter().find(|(n, _)| **n == *location.as_bytes());
                if here.is_some()
                    && let Some(wait) = settling(location.as_bytes())
                {
                    return Err(wait);
                }
                here.map(|(_, s)| s.clone())
            }
            true => open(&dir.join(&**location)),
        };
        let Some(source) = found else {
            return Err(FileError::Data(
                format!("its data file {location:?} is missing [MissingDataFile]").into(),
            ));
        };
        if let Some(seen) = d.seen.get(data.len()) {
            let v = &source.version;
            let now = Seen {
                dev: v.id.dev,
                ino: v.id.ino,
                size: v.size,
                mtime: v.mtime,
            };
            if now != *seen {
                return Err(FileError::Data(
                    format!(
                        "its data file {location:?} changed after it was read; shown again once \
                         the file that describes it is rewritten [DataChanged]"
                    )
                    .into(),
                ));
            }
        }
        data.push(source);
    }
    for t in &d.tensors {
        let Some(k) = t.file else { continue };
        let Some(source) = data.get(k as usize) else {
            continue;
        };
        if t.end > source.len() {
            return Err(FileError::Data(
                format!(
                    "tensor `{}` ends at byte {} of its data file {:?}, which has {} bytes \
                     [DataPastEnd]",
                    t.name,
                    t.end,
                    d.files[k as usize],
                    source.len()
                )
                .into(),
            ));
        }
    }
    Ok(data.into())
}
