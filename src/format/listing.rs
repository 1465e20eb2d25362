//! What a store's descriptor says (an ollama manifest): the files of one model, each a blob of the
//! store shown under a name, and the blobs it names but does not show. The namespace resolves each
//! location in the store, checks its size, interprets a file as the format its name says, and
//! shows the model under its name in the store's generated directory.

/// The files of one model of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// In the order they are shown in (and their names unique).
    pub files: Vec<Listed>,
    /// Blobs it names that are not shown (a configuration), by location, with their sizes.
    pub unshown: Vec<(Box<str>, u64)>,
}

/// One file of a model: a blob of the store, shown under `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// `model.gguf`, `license-2`.
    pub name: String,
    /// Where the blob is, relative to the store's root (`blobs/sha256-HEX`): a location its
    /// reader's rule let through (no `.` or `..` component, never absolute).
    pub location: Box<str>,
    /// The size the descriptor says the blob has.
    pub size: u64,
    /// The file must be a valid file of the format its name says (a model's weights), or the
    /// model is not shown.
    pub interpreted: bool,
    /// Its text is what the model's generated files are made from (see the store's
    /// `generated`).
    pub text: bool,
    /// The tensor directory its tensors are shown in, merged with those of every file listed
    /// with the same one, in place of the file itself (a model stored a tensor a blob).
    pub merged: Option<&'static str>,
}
