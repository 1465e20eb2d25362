//! Why an ollama manifest is not shown as a model: the rule it breaks.

use std::fmt;

use crate::format::error::Broken;

#[derive(Debug)]
pub enum OllamaError {
    /// Larger than any manifest: not read.
    TooLarge { size: u64, max: u64 },
    /// Not JSON text.
    NotJson(String),
    /// JSON, but not a manifest (what is missing or wrong).
    NotManifest(String),
    /// A digest that is not `sha256:` and 64 hexadecimal digits.
    BadDigest(String),
}

impl Broken for OllamaError {
    fn rule(&self) -> String {
        match self {
            OllamaError::TooLarge { .. } => "TooLarge",
            OllamaError::NotJson(_) => "NotJson",
            OllamaError::NotManifest(_) => "NotManifest",
            OllamaError::BadDigest(_) => "BadDigest",
        }
        .into()
    }

    fn cut_short(&self) -> bool {
        // ollama writes a manifest in place (create, then encode): one cut short is JSON that ends
        // too soon, which is what one still being written looks like.
        matches!(self, OllamaError::NotJson(e) if e.contains("EOF"))
    }
}

impl fmt::Display for OllamaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OllamaError::TooLarge { size, max } => {
                write!(
                    f,
                    "{size} bytes, more than a manifest ever has ({max}): not read"
                )
            }
            OllamaError::NotJson(e) => write!(f, "not a manifest: not JSON ({e})"),
            OllamaError::NotManifest(why) => write!(f, "not an ollama manifest: {why}"),
            OllamaError::BadDigest(d) => write!(
                f,
                "layer digest {d:?} is not \"sha256:\" and 64 hexadecimal digits; no blob is \
                 looked up for it"
            ),
        }
    }
}
