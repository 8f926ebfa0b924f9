//! Errors of the safetensors reader and writer.

use thiserror::Error;

use crate::Dtype;

/// Everything that can go wrong reading or writing a safetensors file.
///
/// Every variant names the file (`file`: the path, or the name given to
/// [`SafetensorsFile::from_vec`](crate::SafetensorsFile::from_vec) and friends) and, where
/// relevant, the tensor or key and the limit that was exceeded. Offsets called `begin`/`end`
/// are the header's `data_offsets`, relative to the start of the data section; offsets
/// called `file_offset` are absolute.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// The file could not be opened, mapped or written.
    #[error("{file}: {source}")]
    Io {
        /// File path.
        file: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is too short to hold the 8-byte header length.
    #[error("{file}: file is {len} bytes long, too short for the 8-byte header length")]
    TooShort {
        /// File path.
        file: String,
        /// File length.
        len: u64,
    },
    /// The header length exceeds [`MAX_HEADER_LEN`](crate::MAX_HEADER_LEN).
    #[error("{file}: header length {header_len} exceeds the limit of {limit} bytes")]
    HeaderTooLarge {
        /// File path.
        file: String,
        /// Header length read from the first 8 bytes.
        header_len: u64,
        /// The limit.
        limit: u64,
    },
    /// The header runs past the end of the file.
    #[error("{file}: header length {header_len} runs past the end of the file ({file_len} bytes: at most {} header bytes)", .file_len.saturating_sub(8))]
    HeaderOutOfBounds {
        /// File path.
        file: String,
        /// Header length read from the first 8 bytes.
        header_len: u64,
        /// File length.
        file_len: u64,
    },
    /// The header is not valid UTF-8.
    #[error("{file}: header is not valid UTF-8 (first bad byte at file offset {file_offset})")]
    HeaderNotUtf8 {
        /// File path.
        file: String,
        /// Absolute offset of the first invalid byte.
        file_offset: u64,
    },
    /// The header does not start with `{` (the format requires a JSON object).
    #[error("{file}: header must be a JSON object starting with '{{', found {found:?}")]
    HeaderNotObject {
        /// File path.
        file: String,
        /// The first characters of the header.
        found: String,
    },
    /// The header is not valid JSON, or exceeds a structural limit of the JSON parser
    /// (nesting depth, [`MAX_JSON_ARRAY_LEN`](crate::MAX_JSON_ARRAY_LEN)).
    #[error("{file}: cannot parse the header JSON: {message}")]
    InvalidJson {
        /// File path.
        file: String,
        /// Line within the header (1-based).
        line: usize,
        /// Column within the line (1-based).
        column: usize,
        /// The JSON parser's message (with the position).
        message: String,
    },
    /// A top-level key (tensor name or `__metadata__`) occurs twice.
    #[error("{file}: duplicate header key {key:?}")]
    DuplicateKey {
        /// File path.
        file: String,
        /// The key.
        key: String,
    },
    /// `__metadata__` is not an object of string values, or repeats a key.
    #[error("{file}: __metadata__: {reason}")]
    InvalidMetadata {
        /// File path.
        file: String,
        /// What is wrong (names the key).
        reason: String,
    },
    /// A tensor entry is not an object with `dtype` (string), `shape` (array of
    /// non-negative integers) and `data_offsets` (two non-negative integers).
    #[error("{file}: tensor {tensor:?}: {reason}")]
    InvalidEntry {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A dtype name that is not part of the format.
    #[error("{file}: tensor {tensor:?}: unknown dtype {dtype:?}")]
    UnknownDtype {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// The dtype string found.
        dtype: String,
    },
    /// The element count or byte size of a shape overflows.
    #[error("{file}: tensor {tensor:?}: {dtype} shape {shape:?} overflows ({limit})")]
    ShapeOverflow {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Dtype.
        dtype: Dtype,
        /// The shape as written.
        shape: Vec<u64>,
        /// Which limit.
        limit: &'static str,
    },
    /// A packed sub-byte tensor whose elements do not fill a whole number of bytes.
    #[error("{file}: tensor {tensor:?}: {n_elements} elements of {dtype} ({} bits each) are not a whole number of bytes", .dtype.bits())]
    PartialBytes {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Dtype.
        dtype: Dtype,
        /// Element count.
        n_elements: u64,
    },
    /// `data_offsets` with begin > end.
    #[error("{file}: tensor {tensor:?}: data_offsets [{begin}, {end}] has begin > end")]
    ReversedOffsets {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Begin offset.
        begin: u64,
        /// End offset.
        end: u64,
    },
    /// The byte range does not match the shape and dtype.
    #[error("{file}: tensor {tensor:?}: {dtype} shape {shape:?} needs {expected} bytes, but data_offsets [{begin}, {end}] hold {}", .end - .begin)]
    SizeMismatch {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Dtype.
        dtype: Dtype,
        /// Shape.
        shape: Vec<usize>,
        /// Bytes the shape needs.
        expected: u64,
        /// Begin offset.
        begin: u64,
        /// End offset (>= begin).
        end: u64,
    },
    /// A byte range extending past the end of the data section.
    #[error("{file}: tensor {tensor:?}: data_offsets [{begin}, {end}] run past the end of the data section ({data_len} bytes)")]
    OutOfBounds {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Begin offset.
        begin: u64,
        /// End offset.
        end: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// Two tensors whose byte ranges overlap.
    #[error("{file}: tensors {first:?} (data_offsets [{first_begin}, {first_end}]) and {second:?} (data_offsets [{second_begin}, {second_end}]) overlap")]
    Overlap {
        /// File path.
        file: String,
        /// The tensor with the lower begin offset.
        first: String,
        /// Its begin offset.
        first_begin: u64,
        /// Its end offset.
        first_end: u64,
        /// The other tensor.
        second: String,
        /// Its begin offset.
        second_begin: u64,
        /// Its end offset.
        second_end: u64,
    },
    /// Bytes of the data section that no tensor covers (the format forbids holes).
    #[error("{file}: data section bytes {begin}..{end} are not covered by any tensor (after {}, before {})", describe_neighbour(.after, "the start of the data section"), describe_neighbour(.before, "the end of the data section"))]
    Hole {
        /// File path.
        file: String,
        /// First uncovered byte (relative to the data section).
        begin: u64,
        /// End of the uncovered range.
        end: u64,
        /// The tensor ending where the hole starts (`None`: the hole is at the start).
        after: Option<String>,
        /// The tensor starting where the hole ends (`None`: the hole is at the end).
        before: Option<String>,
    },
    /// A tensor that is not in the file.
    #[error("{file}: no tensor named {tensor:?}")]
    MissingTensor {
        /// File path.
        file: String,
        /// Tensor name asked for.
        tensor: String,
    },
    /// A view accessor was used on a tensor of another dtype.
    #[error("{file}: tensor {tensor:?} has dtype {found}, expected {expected}")]
    WrongDtype {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// What the accessor supports.
        expected: &'static str,
        /// The tensor's dtype.
        found: Dtype,
    },
    /// Zero-copy access to data that is not aligned for the element type in memory.
    #[error("{file}: tensor {tensor:?}: data at file offset {file_offset} (address {address:#x}) is not {align}-byte aligned; zero-copy access is impossible")]
    Misaligned {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Absolute offset of the data in the file.
        file_offset: u64,
        /// Memory address of the data.
        address: usize,
        /// Required alignment.
        align: usize,
    },
    /// Zero-copy access on a big-endian host (safetensors data is little-endian).
    #[error("{file}: tensor {tensor:?}: zero-copy access to little-endian data is impossible on a big-endian host")]
    BigEndianHost {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
    },
    /// [`SafetensorsWriter`](crate::SafetensorsWriter) was given something it cannot encode.
    #[error("safetensors writer: {reason}")]
    Writer {
        /// What is wrong.
        reason: String,
    },
}

fn describe_neighbour(t: &Option<String>, none: &'static str) -> String {
    match t {
        Some(name) => format!("tensor {name:?}"),
        None => none.to_string(),
    }
}
