//! What a reader notes of a file (what it left out, what it found odd): at most [`MAX_NOTES`]
//! messages kept, and one that counts the rest, each a whole message naming the file, as
//! [`Description::notes`](crate::format::Description::notes) holds them.

use std::path::Path;

/// Most notes kept of one file.
pub const MAX_NOTES: usize = 100;

/// The notes of the file at `path` (each without its path) as whole messages: the first
/// [`MAX_NOTES`], and one that counts the rest with `more` notes the reader did not keep.
pub fn bounded(notes: Vec<String>, more: usize, path: &Path) -> Vec<String> {
    let more = notes.len().saturating_sub(MAX_NOTES).saturating_add(more);
    let mut out: Vec<String> = notes
        .into_iter()
        .take(MAX_NOTES)
        .map(|n| format!("{}: {n}", path.display()))
        .collect();
    if more > 0 {
        out.push(format!("{}: and {more} more", path.display()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_past_the_cap_are_counted_in_one() {
        let path = Path::new("m.onnx");
        assert_eq!(bounded(vec!["a".into()], 0, path), ["m.onnx: a"]);
        assert_eq!(bounded(Vec::new(), 0, path), Vec::<String>::new());
        let many: Vec<String> = (0..MAX_NOTES + 3).map(|i| i.to_string()).collect();
        let out = bounded(many, 2, path);
        assert_eq!(out.len(), MAX_NOTES + 1);
        assert_eq!(out[MAX_NOTES], "m.onnx: and 5 more");
    }
}
