//! Tensor names as file names.
//!
//! A tensor name is any UTF-8 string; a file name is 1 to 255 bytes without `/` or NUL and is never
//! `.` or `..`. The encoding:
//! - `%` is written `%25`, `/` is written `%2F`, NUL is written `%00`;
//! - a name that is exactly `.` or `..` is written `%2E` or `%2E%2E`;
//! - the empty name is written `%`;
//! - a result over 255 bytes is shortened to a readable prefix, the marker `%#` and 16 hex digits of
//!   a hash of the full name.
//!
//! Every `%` the escaping writes is followed by two hex digits (or ends the lone `%`), so `%#` marks
//! a shortened name and nothing else, and escaping alone is injective. Shortened names are made
//! unique within their directory by [`Shortener`].

use std::borrow::Cow;
use std::collections::HashSet;

/// The longest file name Linux accepts (NAME_MAX).
pub const NAME_MAX: usize = 255;

const MARKER: &str = "%#";
const HASH_DIGITS: usize = 16;

/// Escapes a tensor name (no shortening).
pub fn escape(name: &str) -> Cow<'_, str> {
    match name {
        "" => return Cow::Borrowed("%"),
        "." => return Cow::Borrowed("%2E"),
        ".." => return Cow::Borrowed("%2E%2E"),
        _ => {}
    }
    // Bytes, not chars: these are ASCII, and a byte loop is several times faster on long names.
    if !name.bytes().any(|b| matches!(b, b'%' | b'/' | b'\0')) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Gives each tensor name of one directory a unique file name. Feed names in a fixed order (the
/// callers use sorted order) so that shortened names are the same on every mount.
#[derive(Default)]
pub struct Shortener {
    taken: HashSet<String>,
}

impl Shortener {
    /// The file name for `name`: borrowed when it is the tensor name itself (the common case).
    pub fn file_name<'a>(&mut self, name: &'a str) -> Cow<'a, str> {
        let escaped = escape(name);
        if escaped.len() <= NAME_MAX {
            // Never clashes with a shortened name: those contain the marker, escapes never do.
            return escaped;
        }
        Cow::Owned(self.shortened(name, &escaped, ""))
    }

    /// The file name for `name` followed by `suffix` (e.g. `.npy`); a shortened name keeps the
    /// suffix.
    pub fn file_name_with(&mut self, name: &str, suffix: &str) -> String {
        let escaped = escape(name);
        if escaped.len() + suffix.len() <= NAME_MAX {
            return format!("{escaped}{suffix}");
        }
        self.shortened(name, &escaped, suffix)
    }

    /// A readable prefix of `escaped`, the marker, a hash of `name` unique in this directory, and
    /// `suffix`: at most NAME_MAX bytes.
    fn shortened(&mut self, name: &str, escaped: &str, suffix: &str) -> String {
        let prefix = readable_prefix(
            escaped,
            NAME_MAX - MARKER.len() - HASH_DIGITS - suffix.len(),
        );
        // Different names whose hashes collide get a salted hash; the salt order is deterministic.
        let mut salt = 0u64;
        loop {
            let hash = fnv1a(name.as_bytes(), salt);
            let candidate = format!("{prefix}{MARKER}{hash:016x}{suffix}");
            if self.taken.insert(candidate.clone()) {
                return candidate;
            }
            salt += 1;
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary and does not
/// split a `%XX` escape.
fn readable_prefix(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let bytes = s.as_bytes();
    for back in 1..=2 {
        if end >= back && bytes[end - back] == b'%' {
            end -= back;
            break;
        }
    }
    &s[..end]
}

/// 64-bit FNV-1a of `bytes` (standard, as `doc/layout.md` promises, so any FNV-1a library gives the
/// same hash), then of `salt`'s little-endian bytes when `salt` is not 0: small, stable across
/// versions and platforms.
fn fnv1a(bytes: &[u8], salt: u64) -> u64 {
    let salt_bytes = salt.to_le_bytes();
    let salt_bytes: &[u8] = if salt == 0 { &[] } else { &salt_bytes };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter().chain(salt_bytes) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The escaping rules as a table (tensor name, file name, rule), written out by hand from
/// `doc/layout.md`: the unit tests of names and of the namespace's tensor directories share it.
#[cfg(test)]
pub const ESCAPES: &[(&str, &str, &str)] = &[
    (
        "model.layers.0.weight",
        "model.layers.0.weight",
        "unchanged",
    ),
    ("a/b", "a%2Fb", "`/` is %2F"),
    ("/a/", "%2Fa%2F", "every `/`, at either end"),
    ("//", "%2F%2F", "a name of only slashes"),
    ("100%", "100%25", "`%` is %25"),
    ("%", "%25", "a lone `%` is escaped, not the empty name"),
    ("%2F", "%252F", "an escape-looking name escapes its `%`"),
    (
        "%#",
        "%25#",
        "the shortening marker cannot come from escaping",
    ),
    ("a\0b", "a%00b", "NUL is %00"),
    ("\0", "%00", "a lone NUL"),
    (".", "%2E", "exactly `.`"),
    ("..", "%2E%2E", "exactly `..`"),
    ("...", "...", "three dots is a valid file name"),
    (
        "./",
        ".%2F",
        "only the exact names `.` and `..` are special",
    ),
    (
        "../x",
        "..%2Fx",
        "`..` as a prefix is harmless once `/` is escaped",
    ),
    ("", "%", "the empty name"),
    ("a\nb", "a\nb", "newlines unchanged"),
    (
        "\t\r\x01\x7f",
        "\t\r\x01\x7f",
        "control characters unchanged",
    ),
    (" ", " ", "a space"),
    ("é.ünïcode", "é.ünïcode", "non-ASCII unchanged"),
    (
        "\u{202e}gnp.exe",
        "\u{202e}gnp.exe",
        "bidi override unchanged",
    ),
    (
        "__metadata__.x",
        "__metadata__.x",
        "only __metadata__ itself is reserved",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_reserved_characters() {
        assert_eq!(escape("model.layers.0.weight"), "model.layers.0.weight");
        assert_eq!(escape("a/b"), "a%2Fb");
        assert_eq!(escape("100%"), "100%25");
        assert_eq!(escape("a\0b"), "a%00b");
        assert_eq!(escape(""), "%");
        assert_eq!(escape("."), "%2E");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("..."), "...");
        assert_eq!(escape("%2F"), "%252F");
        assert_eq!(escape("a\nb"), "a\nb");
    }

    #[test]
    fn escaping_is_injective_on_tricky_names() {
        let names = [
            "", "%", ".", "..", "%2E", "%2E%2E", "/", "%2F", "\0", "%00", "%25", "a/b", "a%2Fb",
        ];
        let mut seen = HashSet::new();
        for n in names {
            assert!(seen.insert(escape(n)), "collision on {n:?}");
        }
    }

    #[test]
    fn long_names_are_shortened_uniquely() {
        let mut s = Shortener::default();
        let mut seen = HashSet::new();
        for i in 0..3000 {
            let name = format!("{}{i}", "x".repeat(300));
            let f = s.file_name(&name).into_owned();
            assert!(f.len() <= NAME_MAX, "{}", f.len());
            assert!(f.contains(MARKER));
            assert!(f.starts_with("xxxx"));
            assert!(seen.insert(f));
        }
    }

    #[test]
    fn shortening_respects_utf8_and_escapes() {
        let mut s = Shortener::default();
        let name = "é".repeat(200);
        let f = s.file_name(&name);
        assert!(f.len() <= NAME_MAX);
        let name = "/".repeat(200);
        let f = s.file_name(&name);
        assert!(f.len() <= NAME_MAX);
        let prefix = f.split(MARKER).next().unwrap();
        assert_eq!(prefix.len() % 3, 0, "{prefix}");
        assert!(prefix.chars().all(|c| "%2F".contains(c)));
    }

    #[test]
    fn suffixes_survive_shortening() {
        let mut s = Shortener::default();
        assert_eq!(s.file_name_with("a/b", ".npy"), "a%2Fb.npy");
        let long = "w".repeat(252);
        let plain = s.file_name(&long).into_owned();
        let npy = s.file_name_with(&long, ".npy");
        assert_eq!(plain, long);
        assert!(npy.len() <= NAME_MAX && npy.ends_with(".npy") && npy.contains(MARKER));
        assert_ne!(s.file_name_with(&long, ".npy"), npy);
    }

    #[test]
    fn shortening_is_deterministic() {
        let name = "y".repeat(1000);
        assert_eq!(
            Shortener::default().file_name(&name),
            Shortener::default().file_name(&name)
        );
    }

    #[test]
    fn hash_collisions_get_distinct_names() {
        let mut s = Shortener::default();
        let name = "z".repeat(400);
        let a = s.file_name(&name);
        // The same name again (as if a different name had collided) gets another file name.
        let b = s.file_name(&name);
        assert_ne!(a, b);
    }
}

/// The rules of `doc/layout.md`, as tables. Every expected value is written out from there ("Tensor file
/// names"), not taken from this code: the hashes are standard 64-bit FNV-1a of the full name,
/// computed with a separate implementation (a few lines of Python, as any user could).
#[cfg(test)]
mod rule_tables {
    use super::*;

    /// Standard FNV-1a 64 test vectors: a user can check the hash in a shortened name with any
    /// FNV-1a library.
    #[test]
    fn the_hash_is_plain_fnv1a_64() {
        assert_eq!(fnv1a(b"", 0), 0xcbf2_9ce4_8422_2325, "offset basis");
        assert_eq!(fnv1a(b"a", 0), 0xaf63_dc4c_8601_ec8c, "FNV-1a 64 of `a`");
    }

    #[test]
    fn escaping_follows_the_documented_table() {
        for &(name, want, why) in ESCAPES {
            assert_eq!(escape(name), want, "{name:?}: {why}");
            assert_eq!(
                Shortener::default().file_name(name),
                want,
                "{name:?}: {why}"
            );
        }
    }

    /// `prefix%#hash` as `doc/layout.md` spells it, `hash` in 16 lowercase hex digits.
    fn short(prefix: &str, hash: &str, suffix: &str) -> String {
        assert_eq!(hash.len(), 16);
        format!("{prefix}%#{hash}{suffix}")
    }

    #[test]
    fn long_names_are_shortened_to_a_prefix_the_marker_and_the_fnv1a_of_the_name() {
        // 255 bytes - 2 (marker) - 16 (hash) = 237 bytes of prefix at most; 233 with `.npy`.
        let slashes = "/".repeat(200);
        let a_slashes = format!("a{slashes}");
        let table: Vec<(String, &str, String, &str)> = vec![
            // (tensor name, suffix, file name, rule)
            ("e".repeat(255), "", "e".repeat(255), "255 bytes fits"),
            (
                "o".repeat(256),
                "",
                short(&"o".repeat(237), "ca3456dab75ac025", ""),
                "256 bytes is shortened",
            ),
            (
                format!("{}/", "g".repeat(254)),
                "",
                short(&"g".repeat(237), "fc1e0becfbe51b78", ""),
                "255 bytes that grow to 257 by escaping",
            ),
            (
                "x".repeat(1000),
                "",
                short(&"x".repeat(237), "e1add1d93134d2c5", ""),
                "a long name",
            ),
            (
                slashes.clone(),
                "",
                short(&"%2F".repeat(79), "d07a836fcad9809d", ""),
                "the prefix is of the escaped name; 237 bytes end on an escape",
            ),
            (
                a_slashes.clone(),
                "",
                short(&format!("a{}", "%2F".repeat(78)), "ae810e1eb7ec0664", ""),
                "the prefix does not split `%2F`: 235 bytes, not 237",
            ),
            (
                "é".repeat(200),
                "",
                short(&"é".repeat(118), "bd62f1ecfb466f85", ""),
                "the prefix does not split a character: 236 bytes",
            ),
            (
                "w".repeat(252),
                ".npy",
                short(&"w".repeat(233), "1993e56eb6270139", ".npy"),
                "252 + `.npy` is 256: shortened, keeping `.npy`",
            ),
            (
                "w".repeat(251),
                ".npy",
                format!("{}.npy", "w".repeat(251)),
                "251 + `.npy` fits",
            ),
        ];
        for (name, suffix, want, why) in &table {
            let got = if suffix.is_empty() {
                Shortener::default().file_name(name).into_owned()
            } else {
                Shortener::default().file_name_with(name, suffix)
            };
            assert_eq!(&got, want, "{:.12?}.. ({} bytes): {why}", name, name.len());
            assert!(got.len() <= NAME_MAX, "{why}");
        }
    }

    #[test]
    fn a_second_long_name_with_the_same_hash_gets_another_hash_the_first_keeps_its_own() {
        // A real 64-bit collision is impractical to write down, so the same name is offered
        // twice: the Shortener cannot tell it from a colliding one.
        let name = "z".repeat(400);
        let first = short(&"z".repeat(237), "5e0817dc2d7b32a5", "");
        let mut s = Shortener::default();
        assert_eq!(s.file_name(&name), first, "the first gets the plain hash");
        let second = s.file_name(&name).into_owned();
        assert_ne!(second, first, "the later one gets a salted hash");
        let (prefix, hash) = second.rsplit_once("%#").unwrap();
        assert_eq!(prefix, "z".repeat(237), "same readable prefix");
        assert!(hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
        // A fresh directory starts over: the first name again gets the plain hash.
        assert_eq!(Shortener::default().file_name(&name), first);
    }

    #[test]
    fn short_names_never_take_a_salted_hash() {
        // A short name is never shortened, so it never competes for a hash, even when the same
        // Shortener already gave out long names.
        let mut s = Shortener::default();
        let _ = s.file_name(&"q".repeat(300));
        assert_eq!(s.file_name("q"), "q");
        assert_eq!(s.file_name("q"), "q");
    }
}
