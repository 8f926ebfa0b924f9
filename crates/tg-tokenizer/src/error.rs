//! Error type of the crate.

/// Everything that can go wrong while building a tokenizer or decoding ids.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required GGUF metadata key is absent.
    #[error("tokenizer metadata key `{0}` is missing")]
    MissingKey(&'static str),

    /// A GGUF metadata key holds a value of the wrong type.
    #[error(
        "tokenizer metadata key `{key}` has the wrong type: expected {expected}, found {found}"
    )]
    WrongType {
        /// The metadata key.
        key: &'static str,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        found: String,
    },

    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error(
        "unsupported tokenizer model `{0}` (supported: \"llama\" = SentencePiece, \"gpt2\" = byte-level BPE)"
    )]
    UnsupportedModel(String),

    /// `tokenizer.ggml.pre` names a pre-tokenizer (regex set) this crate does not know.
    #[error("unknown pre-tokenizer: metadata key `{key}` is {value:?} (known: {known})")]
    UnknownPreTokenizer {
        /// The metadata key (`tokenizer.ggml.pre`).
        key: &'static str,
        /// Its value.
        value: String,
        /// The known names, comma-separated.
        known: String,
    },

    /// An entry of `tokenizer.ggml.merges` cannot be used.
    #[error("BPE merge {index} ({merge:?}) is invalid: {reason}")]
    BadMerge {
        /// Position in the merge list (its rank).
        index: usize,
        /// The entry.
        merge: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty")]
    EmptyVocab,

    /// The vocabulary has more tokens than a `u32` id can address.
    #[error("the vocabulary has {0} tokens, more than a u32 token id can address")]
    VocabTooLarge(usize),

    /// Two per-token arrays have different lengths.
    #[error("`{what}` has {found} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        /// Which array.
        what: &'static str,
        /// Number of tokens.
        expected: usize,
        /// Number of entries found.
        found: usize,
    },

    /// A `tokenizer.ggml.token_type` value is not one of 0..=6.
    #[error("token {id} has an invalid token type {value} (expected 0..=6)")]
    BadTokenType {
        /// Token id.
        id: u32,
        /// The offending value.
        value: i32,
    },

    /// A token score is NaN.
    #[error("token {id} has a NaN score")]
    NanScore {
        /// Token id.
        id: u32,
    },

    /// Two tokens have the same text.
    #[error("tokens {first} and {second} have the same text {text:?}")]
    DuplicateToken {
        /// The shared text.
        text: String,
        /// Lower id.
        first: u32,
        /// Higher id.
        second: u32,
    },

    /// A token of type byte does not read `<0xNN>`.
    #[error("byte token {id} has text {text:?}, expected the form <0xNN>")]
    BadByteToken {
        /// Token id.
        id: u32,
        /// Its text.
        text: String,
    },

    /// A special token id (bos, eos, ...) is outside the vocabulary.
    #[error("{which} token id {id} is out of range (vocabulary size {vocab_size})")]
    SpecialTokenOutOfRange {
        /// Which special token.
        which: &'static str,
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },

    /// A byte has neither a `<0xNN>` token nor a single-byte token, and there
    /// is no unknown token to fall back on.
    #[error("byte 0x{byte:02X} has no token (no <0x{byte:02X}> token, no single-byte token, no unknown token)")]
    NoByteFallback {
        /// The byte.
        byte: u8,
    },

    /// A token id passed for decoding is outside the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    InvalidTokenId {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },

    /// A Hugging Face `tokenizer.json` file could not be read.
    #[error("cannot read tokenizer file {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A `tokenizer.json` file could not be loaded; `source` says why.
    #[error("cannot load tokenizer file {path}: {source}")]
    HfFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<TokenizerError>,
    },

    /// The `tokenizers` library refused a `tokenizer.json` document: not
    /// valid JSON, a field of the wrong type or missing, an unknown
    /// component type, an inconsistent model (serde_json's message and
    /// position).
    #[error("tokenizer.json is malformed: {0}")]
    HfJson(#[from] serde_json::Error),

    /// A `tokenizer.json` document uses a setting that
    /// [`HfTokenizer`](crate::HfTokenizer) refuses (truncation, padding of
    /// single encodings, BPE dropout).
    #[error("tokenizer.json: unsupported {component}: {detail}")]
    HfUnsupported {
        /// Where in the document, e.g. `model.dropout`.
        component: String,
        /// What is not supported.
        detail: String,
    },

    /// A `tokenizer.json` document that loads but cannot be used (a
    /// template names a special token it does not list, ...).
    #[error("tokenizer.json is invalid: {0}")]
    HfInvalid(String),

    /// A chat template (`tokenizer.chat_template`) does not compile, or
    /// rendering it failed (including a template's own `raise_exception`).
    #[error("chat template: {0}")]
    ChatTemplate(String),

    /// A chat message list (OpenAI-style JSON) is malformed. `index` is the
    /// offending entry, `None` when the document as a whole is wrong.
    #[error("chat messages: {}{detail}", match index { Some(i) => format!("entry {i}: "), None => String::new() })]
    ChatMessages {
        /// The entry (0-based) that is wrong, if one is.
        index: Option<usize>,
        /// What is wrong.
        detail: String,
    },

    /// The `tokenizers` library failed (or panicked) while loading,
    /// encoding or decoding.
    #[error("tokenizers: cannot {operation}: {message}")]
    HfLibrary {
        /// What was being done, e.g. `encode`.
        operation: &'static str,
        /// The library's message.
        message: String,
    },
}
