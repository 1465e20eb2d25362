//! What a set's names say: the index of a set of files of a format
//! (`NAME.safetensors.index.json`), and a shard's place in a numbered set
//! (`NAME-00002-of-00003.gguf`).

use crate::format::formats::{Format, Role};

/// A shard's place in a numbered set, as its name `BASE-00002-of-00003` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    pub base: Vec<u8>,
    /// From 1.
    pub no: u32,
    pub count: u32,
    /// The suffix of its shards' names, in the case the shard found had it (`.gguf`, `.GGUF`).
    pub suffix: Vec<u8>,
}

impl Numbered {
    /// The numbered set a file of `format` named `file_name` is a shard of, for a format whose
    /// numbered files are a set without an index.
    pub fn of(format: Format, file_name: &[u8]) -> Option<Numbered> {
        if !format.numbers_sets() {
            return None;
        }
        let (claimed, Role::Descriptor, stem) = Format::claim(file_name)? else {
            return None;
        };
        if claimed != format {
            return None;
        }
        let suffix = &file_name[stem.len()..];
        let digits = |b: &[u8]| -> Option<u32> {
            let ok = b.len() == 5 && b.iter().all(u8::is_ascii_digit);
            std::str::from_utf8(b).ok().filter(|_| ok)?.parse().ok()
        };
        let n = stem.len().checked_sub(15)?;
        let (base, tail) = stem.split_at(n);
        let (no, count) = (digits(&tail[1..6])?, digits(&tail[10..])?);
        let shaped = tail[0] == b'-' && &tail[6..10] == b"-of-";
        (shaped && !base.is_empty() && (1..=count).contains(&no)).then(|| Numbered {
            base: base.to_vec(),
            no,
            count,
            suffix: suffix.to_vec(),
        })
    }

    /// The file name of its shard `no`, with the suffix the shard found had, in its case.
    pub fn shard_name(&self, no: u32) -> Vec<u8> {
        let tail = format!("-{no:05}-of-{:05}", self.count);
        [&self.base[..], tail.as_bytes(), &self.suffix].concat()
    }
}

/// What an index file's name says: the format of its shards, the merged directory it asks for,
/// and for shards of another format, the name of the index of their conversions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexName {
    pub format: Format,
    /// `NAME.safetensors.index.json` gives `NAME.tensors`, `NAME.safetensors.index.VARIANT.json`
    /// gives `NAME.VARIANT.tensors` (the name the unsharded `NAME.VARIANT.safetensors` would get).
    pub merged_dir: String,
    /// `pytorch_model.bin.index.json` gives `model.safetensors.index.json`, as Hugging Face names
    /// it; `None` for an index of safetensors files.
    pub converted: Option<Vec<u8>>,
}

impl IndexName {
    /// What `file_name` says as the name of an index, or `None` if it is not one.
    pub fn of(file_name: &[u8]) -> Option<IndexName> {
        let name = std::str::from_utf8(file_name).ok()?;
        // The first format whose marker the name holds (in the order of `ALL`) is the one it says.
        let (format, (stem, rest)) = Format::ALL
            .into_iter()
            .find_map(|f| Some((f, name.split_once(f.index_infix()?)?)))?;
        if stem.is_empty() {
            return None;
        }
        let merged_dir = match rest {
            "json" => format!("{stem}.tensors"),
            _ => {
                let variant = rest.strip_suffix(".json").filter(|v| !v.is_empty())?;
                format!("{stem}.{variant}.tensors")
            }
        };
        let converted = format.converted_name(stem.as_bytes()).map(|file| {
            let stem = file.strip_suffix(b".safetensors").unwrap_or(&file);
            [stem, b".safetensors.index.", rest.as_bytes()].concat()
        });
        Some(IndexName {
            format,
            merged_dir,
            converted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::formats::{GGUF, PYTORCH, SAFETENSORS};

    #[test]
    fn numbered_shards_are_named_as_gguf_split_names_them() {
        let set = Numbered::of(GGUF, b"llama-7b-00002-of-00003.gguf").unwrap();
        assert_eq!((&set.base[..], set.no, set.count), (&b"llama-7b"[..], 2, 3));
        assert_eq!(set.shard_name(1), b"llama-7b-00001-of-00003.gguf");
        // The suffix in the case the shard has it.
        let set = Numbered::of(GGUF, b"Llama-00001-of-00002.GGUF").unwrap();
        assert_eq!(set.shard_name(2), b"Llama-00002-of-00002.GGUF");
        for stem in [
            &b"m-00004-of-00003"[..],
            b"m-00000-of-00003",
            b"-00001-of-00003",
            b"m-0001-of-00003",
            b"m_00001-of-00003",
            b"m-00001-of-0003x",
            b"model",
        ] {
            assert_eq!(
                Numbered::of(GGUF, &[stem, b".gguf"].concat()),
                None,
                "{}",
                String::from_utf8_lossy(stem)
            );
        }
        // Safetensors shards are a set through their index only.
        assert_eq!(
            Numbered::of(SAFETENSORS, b"model-00001-of-00002.safetensors"),
            None
        );
    }

    #[test]
    fn index_names() {
        let named = |n: &str| IndexName::of(n.as_bytes());
        let st = named("model.safetensors.index.json").unwrap();
        assert_eq!(
            (st.format, &st.merged_dir[..]),
            (SAFETENSORS, "model.tensors")
        );
        assert_eq!(st.converted, None);
        let v = named("model.safetensors.index.fp16.json").unwrap();
        assert_eq!(v.merged_dir, "model.fp16.tensors");
        let pt = named("pytorch_model.bin.index.json").unwrap();
        assert_eq!(
            (pt.format, &pt.merged_dir[..]),
            (PYTORCH, "pytorch_model.tensors")
        );
        assert_eq!(pt.converted.unwrap(), b"model.safetensors.index.json");
        let ptv = named("pytorch_model.bin.index.fp16.json").unwrap();
        assert_eq!(ptv.converted.unwrap(), b"model.safetensors.index.fp16.json");
        for not in [
            "model.safetensors",
            ".safetensors.index.json",
            "model.safetensors.index..json",
            "model.safetensors.index.txt",
            "model.json",
            ".safetensors.index.x.bin.index.json",
        ] {
            assert_eq!(named(not), None, "{not}");
        }
    }
}
