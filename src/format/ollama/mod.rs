//! ollama's model store: `manifests/HOST/NAMESPACE/MODEL/TAG`, JSON manifests whose layers name
//! blobs by digest, and `blobs/sha256-HEX`, each named by the SHA-256 of its bytes. A manifest is
//! read into a [`Listing`]: the model's files, named as a user names them (`model.gguf`,
//! `template`, `license-2`), each the blob its digest names in the same store, and nothing else.
//! The model's name is its path, as `ollama list` says it ([`model_name`]); its `Modelfile` is
//! made as `ollama show --modelfile` makes it ([`modelfile`]).

mod error;
mod gojson;
mod modelfile;
#[cfg(test)]
mod tests;

pub use error::OllamaError;
pub use modelfile::modelfile;

use self::gojson::{Json, first_value};
use super::listing::{Listed, Listing};
use crate::base::digest::{Sha256, parse_hex};

/// The most of a manifest that is read (ollama's are a few kilobytes; one of a model stored a
/// tensor a blob lists thousands of layers).
pub const MAX_MANIFEST: u64 = 16 << 20;

/// What each layer type is shown as: its media type, the file's stem and suffix, whether the
/// file must be valid as the format its name says, and whether the Modelfile is made from its
/// text. The legacy `prompt` layer is a template, as ollama reads it.
const LAYERS: &[(&str, &str, &str, bool, bool)] = &[
    (
        "application/vnd.ollama.image.model",
        "model",
        ".gguf",
        true,
        false,
    ),
    (
        "application/vnd.ollama.image.projector",
        "projector",
        ".gguf",
        true,
        false,
    ),
    (
        "application/vnd.ollama.image.adapter",
        "adapter",
        ".gguf",
        true,
        false,
    ),
    (
        "application/vnd.ollama.image.draft",
        "draft",
        ".gguf",
        true,
        false,
    ),
    (
        "application/vnd.ollama.image.template",
        "template",
        "",
        false,
        true,
    ),
    (
        "application/vnd.ollama.image.prompt",
        "template",
        "",
        false,
        true,
    ),
    (
        "application/vnd.ollama.image.system",
        "system",
        "",
        false,
        true,
    ),
    (
        "application/vnd.ollama.image.params",
        "params",
        ".json",
        false,
        true,
    ),
    (
        "application/vnd.ollama.image.messages",
        "messages",
        ".json",
        false,
        true,
    ),
    (
        "application/vnd.ollama.image.license",
        "license",
        "",
        false,
        true,
    ),
];

/// A layer of a model stored as safetensors (ollama's MLX engine): a whole safetensors file of
/// one tensor (or of a group of experts), with its `name`; the tensors of all of them are shown
/// merged in `model.tensors/`.
const TENSOR: &str = "application/vnd.ollama.image.tensor";
/// A layer of such a model's configuration or tokenizer files, shown by its `name`.
const JSON: &str = "application/vnd.ollama.image.json";
/// Where the tensors of a model stored as safetensors are shown.
const MERGED: &str = "model.tensors";

/// ollama's default host and namespace, left out of the names of their models.
const DEFAULT_HOST: &str = "registry.ollama.ai";
const DEFAULT_NAMESPACE: &str = "library";

/// Reads a manifest's bytes into the files of its model.
pub fn listing(bytes: &[u8]) -> Result<Listing, OllamaError> {
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err(OllamaError::TooLarge {
            size: bytes.len() as u64,
            max: MAX_MANIFEST,
        });
    }
    // As ollama decodes it (see `gojson`): the first value, fields matched as Go matches them.
    let json = first_value(bytes).map_err(|e| OllamaError::NotJson(e.to_string()))?;
    let not = |why: &str| OllamaError::NotManifest(why.into());
    if !matches!(json, Json::Object(_)) {
        return Err(not("not a JSON object"));
    }
    let layers = json
        .field("layers")
        .ok_or_else(|| not("no \"layers\""))?
        .as_array()
        .ok_or_else(|| not("\"layers\" is not an array"))?;
    let mut out = Listing {
        files: Vec::new(),
        unshown: Vec::new(),
    };
    if let Some(config) = json.field("config") {
        let (_, location, size) = layer(config, "\"config\"")?;
        out.unshown.push((location, size));
    }
    // How many of each name so far: a repeated layer type takes -2, -3, ... in manifest order.
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let (media, location, size) = layer(l, &format!("layer {i}"))?;
        let named = l.field("name").and_then(Json::as_str);
        let (stem, suffix, interpreted, text) = match (media, named) {
            (TENSOR, Some(name)) => {
                // Never shown under this name: it claims the file's format, and names it in
                // messages.
                out.files.push(Listed {
                    name: format!("{}.safetensors", name.replace(['/', '%'], "_")),
                    location,
                    size,
                    interpreted: true,
                    text: false,
                    merged: Some(MERGED),
                });
                continue;
            }
            (JSON, Some(name)) if plain_name(name) => {
                let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
                (stem, &name[stem.len()..], false, false)
            }
            _ => match LAYERS.iter().find(|(m, ..)| *m == media) {
                Some(&(_, stem, suffix, interpreted, text)) => (stem, suffix, interpreted, text),
                // A JSON layer of a draft model (`draft/config.json`), a legacy embedding layer,
                // a type of a later ollama: referenced, not shown.
                None => {
                    out.unshown.push((location, size));
                    continue;
                }
            },
        };
        let key = format!("{stem}{suffix}");
        let n = match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                seen.push((key, 1));
                1
            }
        };
        let name = match n {
            1 => format!("{stem}{suffix}"),
            n => format!("{stem}-{n}{suffix}"),
        };
        out.files.push(Listed {
            name,
            location,
            size,
            interpreted,
            text,
            merged: None,
        });
    }
    Ok(out)
}

/// A name a JSON layer may be shown under: one plain file name (`config.json`), not a path, not
/// hidden, not one the model's other files take.
fn plain_name(name: &str) -> bool {
    let taken = LAYERS.iter().any(|(_, stem, ..)| name.starts_with(stem))
        || name.starts_with("Modelfile")
        || name.starts_with(MERGED.split('.').next().unwrap_or_default());
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && !name.contains(['/', '\0'])
        && !taken
}

/// A layer's media type, its blob's location below the store's root, and its size.
fn layer<'v>(l: &'v Json, what: &str) -> Result<(&'v str, Box<str>, u64), OllamaError> {
    let not = |why: &str| OllamaError::NotManifest(format!("{what}: {why}"));
    let media = l
        .field("mediaType")
        .and_then(Json::as_str)
        .ok_or_else(|| not("no \"mediaType\" string"))?;
    let digest = l
        .field("digest")
        .and_then(Json::as_str)
        .ok_or_else(|| not("no \"digest\" string"))?;
    let size = l
        .field("size")
        .and_then(Json::as_size)
        .ok_or_else(|| not("no \"size\" that is a byte count"))?;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|hex| parse_hex(hex).is_some())
        .ok_or_else(|| OllamaError::BadDigest(digest.into()))?;
    Ok((media, format!("blobs/sha256-{hex}").into(), size))
}

/// The name `ollama list` gives the model whose manifest is `manifests/HOST/NAMESPACE/MODEL/TAG`
/// (`parts`): `MODEL:TAG` for the default host and namespace, `NAMESPACE/MODEL:TAG` for another
/// namespace of the default host, else `HOST/NAMESPACE/MODEL:TAG`; `None` for a path ollama does
/// not take for a model's (a part it would refuse).
pub fn model_name(parts: &[&[u8]]) -> Option<String> {
    let [host, namespace, model, tag] = parts else {
        return None;
    };
    let part = |b: &[u8], max: usize, dot: bool, colon: bool| -> Option<String> {
        let s = std::str::from_utf8(b).ok()?;
        let first = s.bytes().next()?;
        let ok = s.len() <= max
            && (first.is_ascii_alphanumeric() || first == b'_')
            && s.bytes().all(|c| {
                c.is_ascii_alphanumeric()
                    || c == b'_'
                    || c == b'-'
                    || (dot && c == b'.')
                    || (colon && c == b':')
            });
        ok.then(|| s.to_string())
    };
    let host = part(host, 350, true, true)?;
    let namespace = part(namespace, 80, false, false)?;
    let model = part(model, 80, true, false)?;
    let tag = part(tag, 80, true, false)?;
    let prefix = if !host.eq_ignore_ascii_case(DEFAULT_HOST) {
        format!("{host}/{namespace}/")
    } else if !namespace.eq_ignore_ascii_case(DEFAULT_NAMESPACE) {
        format!("{namespace}/")
    } else {
        String::new()
    };
    Some(format!("{prefix}{model}:{tag}"))
}

/// The digest a blob's file name says: `sha256-` and 64 hexadecimal digits (a partial download,
/// `sha256-HEX-partial`, or a temporary file says none).
pub fn blob_digest(file_name: &[u8]) -> Option<Sha256> {
    let name = std::str::from_utf8(file_name).ok()?;
    parse_hex(name.strip_prefix("sha256-")?)
}
