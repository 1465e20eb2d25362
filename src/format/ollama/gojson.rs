//! JSON as ollama reads it: Go's `encoding/json`, a `json.NewDecoder(f).Decode(&v)` into a
//! struct. That reads the first value and ignores what follows it; matches an object's keys to a
//! struct's fields exactly or else case-insensitively (Go's folding: ASCII case, and `ſ` as `s`,
//! `K` (Kelvin) as `k`); and where several keys match one field, the last one wins. A reader
//! that took the first `"layers"`, or only an exact one, would show another model than the one
//! ollama runs from the same bytes.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

/// A JSON value, objects keeping every key in order (duplicates and case variants included).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// The first JSON value of `bytes`, as `Decode` reads it (whatever follows is not looked at).
pub fn first_value(bytes: &[u8]) -> Result<Json, serde_json::Error> {
    Json::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
}

impl Json {
    /// The value of the field `name` of a struct decoded from this object, as Go finds it: the
    /// last key equal to `name`, or folding to it; `None` if no key does (or this is not an
    /// object).
    pub fn field(&self, name: &str) -> Option<&Json> {
        let Json::Object(pairs) = self else {
            return None;
        };
        let folded = fold(name);
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name || fold(k) == folded)
            .map(|(_, v)| v)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A byte count: a JSON integer from 0 to `i64::MAX` (Go's `int64` takes no fraction or
    /// exponent; a negative size is no size).
    pub fn as_size(&self) -> Option<u64> {
        match self {
            Json::Number(n) => n.as_u64().filter(|n| i64::try_from(*n).is_ok()),
            _ => None,
        }
    }
}

/// A name as Go's `encoding/json` folds it to match a field: each rune to the smallest of its
/// simple case folding set (`k`, `K` and `K` (U+212A) to `K`; `s`, `S` and `ſ` (U+017F) to `S`).
fn fold(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'ſ' => 'S',
            '\u{212A}' => 'K',
            c if c.is_ascii_lowercase() => c.to_ascii_uppercase(),
            // Other runes fold among themselves, never to a letter of a field's ASCII name.
            c => c,
        })
        .collect()
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        Ok(Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            out.push((k, v));
        }
        Ok(Json::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Json {
        first_value(text.as_bytes()).unwrap()
    }

    #[test]
    fn fields_are_found_as_go_finds_them() {
        // The last key that matches wins, exact or folded.
        let j = read(r#"{"layers": 1, "Layers": 2, "LAYERS": 3}"#);
        assert_eq!(j.field("layers"), Some(&read("3")));
        let j = read(r#"{"Layers": 2, "layers": 1}"#);
        assert_eq!(j.field("layers"), Some(&read("1")));
        // Go's folding: ſ is s.
        let j = read(r#"{"layers": 1, "layerſ": 2}"#);
        assert_eq!(j.field("layers"), Some(&read("2")));
        assert_eq!(read(r#"{"layer": 1}"#).field("layers"), None);
        assert_eq!(read("[]").field("layers"), None);
    }

    #[test]
    fn the_first_value_is_read_and_what_follows_is_not() {
        assert_eq!(
            first_value(b" {\"a\": 1}\n{garbage").unwrap(),
            read(r#"{"a": 1}"#)
        );
        assert!(first_value(b"{\"a\": ").is_err());
        assert!(first_value(b"").is_err());
    }

    #[test]
    fn sizes_are_go_int64s() {
        assert_eq!(read("42").as_size(), Some(42));
        assert_eq!(read("-1").as_size(), None);
        assert_eq!(read("4.0").as_size(), None);
        assert_eq!(read("9223372036854775808").as_size(), None);
    }
}
