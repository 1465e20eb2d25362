//! Which generated directory wins a name. A directory of SOURCE gets `NAME.tensors/` for each
//! valid `NAME.safetensors`, and a merged directory for each index. They never hide a real entry,
//! and when an unsharded file and an index want the same name, the unsharded file wins.

use std::collections::HashMap;

/// A file that wants a generated directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The file's name.
    pub file: &'a [u8],
    /// The directory it wants.
    pub dir: &'a [u8],
    /// A set (an index, or a numbered set's first shard), else an unsharded file.
    pub set: bool,
}

/// Who has a name a claim wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    Wins,
    /// A real entry of the directory.
    Real,
    /// The generated directory of this file.
    File(&'a [u8]),
}

/// Decides every claim of one directory, whose real entries are `real` (sorted). Unsharded files
/// go first, then indexes, each in the order given (the callers give name order), so that the
/// result never depends on the order of `readdir`.
pub fn decide<'a>(real: &[&[u8]], claims: &[Claim<'a>]) -> Vec<Verdict<'a>> {
    let mut taken: HashMap<&[u8], Option<&'a [u8]>> = real.iter().map(|&n| (n, None)).collect();
    let mut verdicts = vec![Verdict::Wins; claims.len()];
    let order = claims
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.set)
        .chain(claims.iter().enumerate().filter(|(_, c)| c.set));
    for (i, c) in order {
        verdicts[i] = match taken.get(c.dir) {
            Some(None) => Verdict::Real,
            Some(Some(file)) => Verdict::File(file),
            None => {
                taken.insert(c.dir, Some(c.file));
                Verdict::Wins
            }
        };
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file<'a>(file: &'a str, dir: &'a str) -> Claim<'a> {
        Claim {
            file: file.as_bytes(),
            dir: dir.as_bytes(),
            set: false,
        }
    }

    fn index<'a>(file: &'a str, dir: &'a str) -> Claim<'a> {
        Claim {
            set: true,
            ..self::file(file, dir)
        }
    }

    #[test]
    fn real_entries_win_over_generated_ones() {
        let claims = [
            file("a.safetensors", "a.tensors"),
            index("a.safetensors.index.json", "a.tensors"),
            file("b.safetensors", "b.tensors"),
        ];
        let v = decide(&[b"a.tensors", b"zzz"], &claims);
        assert_eq!(v, [Verdict::Real, Verdict::Real, Verdict::Wins]);
    }

    #[test]
    fn an_unsharded_file_wins_over_an_index_whatever_the_order() {
        let claims = [
            index("model.safetensors.index.json", "model.tensors"),
            file("model.safetensors", "model.tensors"),
        ];
        let v = decide(&[], &claims);
        assert_eq!(v, [Verdict::File(b"model.safetensors"), Verdict::Wins]);
    }

    #[test]
    fn first_index_in_the_order_given_wins_between_indexes() {
        // `x.safetensors.index.json` and a variant index spelled to want the same directory
        // cannot both be shown.
        let claims = [
            index("m.safetensors.index.a.json", "m.a.tensors"),
            index("m.a.safetensors.index.json", "m.a.tensors"),
        ];
        let v = decide(&[], &claims);
        assert_eq!(
            v,
            [Verdict::Wins, Verdict::File(b"m.safetensors.index.a.json")]
        );
    }

    #[test]
    fn variants_and_distinct_names_do_not_clash() {
        let claims = [
            file("model.safetensors", "model.tensors"),
            file("model.fp16.safetensors", "model.fp16.tensors"),
            index("model.safetensors.index.fp16.json", "model.fp16.tensors"),
            index("other.safetensors.index.json", "other.tensors"),
        ];
        let v = decide(&[b"config.json"], &claims);
        assert_eq!(
            v,
            [
                Verdict::Wins,
                Verdict::Wins,
                Verdict::File(b"model.fp16.safetensors"),
                Verdict::Wins
            ]
        );
    }
}
