//! Errors of the GGUF reader and writer.

use thiserror::Error;

/// Everything that can go wrong reading or writing a GGUF file.
///
/// Every variant names the file (`file`: the path, or `<memory>` for
/// [`GgufFile::from_bytes`](crate::GgufFile::from_bytes)) and, where relevant, the key or
/// tensor and the limit that was exceeded.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{file}: {source}")]
    Io {
        /// File path.
        file: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file ends inside a field.
    #[error(
        "{file}: truncated: {what} at offset {offset} needs {needed} bytes, only {available} left"
    )]
    Truncated {
        /// File path.
        file: String,
        /// The field being read.
        what: String,
        /// Offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("{file}: not a GGUF file: magic is {magic:02x?} ({shown:?}), expected \"GGUF\"")]
    BadMagic {
        /// File path.
        file: String,
        /// The four bytes found.
        magic: [u8; 4],
        /// The same bytes, lossily as text.
        shown: String,
    },
    /// A GGUF version other than 2 or 3.
    #[error("{file}: GGUF version {version} is not supported (supported: 2, 3){hint}")]
    UnsupportedVersion {
        /// File path.
        file: String,
        /// Version found.
        version: u32,
        /// Extra explanation (e.g. big-endian file), may be empty.
        hint: String,
    },
    /// A length or count read from the file cannot possibly fit in the remaining bytes.
    #[error("{file}: {what} at offset {offset} claims {count} entries needing at least {needed} bytes, but only {available} bytes are left")]
    ImplausibleLength {
        /// File path.
        file: String,
        /// What the count is of (e.g. `string length of key "x"`).
        what: String,
        /// Offset of the count field.
        offset: u64,
        /// The count read.
        count: u64,
        /// Minimum bytes that many entries take.
        needed: u128,
        /// Bytes left.
        available: u64,
    },
    /// A string is not valid UTF-8.
    #[error("{file}: {what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// File path.
        file: String,
        /// Which string.
        what: String,
        /// Offset of the string bytes.
        offset: u64,
    },
    /// A bool value byte other than 0 or 1.
    #[error(
        "{file}: metadata {key:?}: bool at offset {offset} has byte {byte:#04x} (must be 0 or 1)"
    )]
    InvalidBool {
        /// File path.
        file: String,
        /// Key.
        key: String,
        /// Offset of the byte.
        offset: u64,
        /// The byte.
        byte: u8,
    },
    /// An unknown metadata value type id.
    #[error("{file}: metadata {key:?}: unknown value type {type_id} at offset {offset}")]
    UnknownValueType {
        /// File path.
        file: String,
        /// Key.
        key: String,
        /// Offset of the type id.
        offset: u64,
        /// The id.
        type_id: u32,
    },
    /// Arrays nested deeper than the limit.
    #[error("{file}: metadata {key:?}: arrays nested deeper than {limit}")]
    NestingTooDeep {
        /// File path.
        file: String,
        /// Key.
        key: String,
        /// The nesting limit.
        limit: usize,
    },
    /// A metadata key occurs twice.
    #[error("{file}: duplicate metadata key {key:?}")]
    DuplicateKey {
        /// File path.
        file: String,
        /// Key.
        key: String,
    },
    /// A tensor name occurs twice.
    #[error("{file}: duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// File path.
        file: String,
        /// Tensor name.
        name: String,
    },
    /// `general.alignment` is not a power of two (or not an integer).
    #[error("{file}: general.alignment must be a non-zero power of two u32, found {found}")]
    BadAlignment {
        /// File path.
        file: String,
        /// What was found.
        found: String,
    },
    /// A tensor with more than 4 dimensions.
    #[error("{file}: tensor {tensor:?} has {n_dims} dimensions (at most {max} allowed)")]
    TooManyDims {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Dimensions claimed.
        n_dims: u32,
        /// The limit.
        max: u32,
    },
    /// A GGML type id this crate does not know.
    #[error("{file}: tensor {tensor:?} has unknown GGML type id {type_id}")]
    UnknownGgmlType {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// The id.
        type_id: u32,
    },
    /// A row length (dims\[0\]) that is not a whole number of blocks.
    #[error("{file}: tensor {tensor:?} ({ty}): row length {row_len} is not a multiple of the block size {block}")]
    RowNotBlockMultiple {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Type name.
        ty: &'static str,
        /// dims\[0\].
        row_len: u64,
        /// Block size.
        block: usize,
    },
    /// The element or byte count of a tensor overflows (limit: i64::MAX elements, usize bytes).
    #[error("{file}: tensor {tensor:?}: size of dims {dims:?} overflows ({limit})")]
    SizeOverflow {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// The dims.
        dims: Vec<u64>,
        /// Which limit.
        limit: &'static str,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error("{file}: tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Offset relative to the data section.
        offset: u64,
        /// Alignment.
        alignment: usize,
    },
    /// Tensor data extending past the end of the file.
    #[error("{file}: tensor {tensor:?}: data bytes {start}..{end} run past the end of the file ({file_len} bytes)")]
    TensorOutOfBounds {
        /// File path.
        file: String,
        /// Tensor name.
        tensor: String,
        /// Absolute start offset (exact, may exceed u64).
        start: u128,
        /// Absolute end offset (exact, may exceed u64).
        end: u128,
        /// File length.
        file_len: u64,
    },
    /// Two tensors whose data ranges overlap.
    #[error("{file}: tensors {first:?} (bytes {first_start}..{first_end}) and {second:?} (bytes {second_start}..{second_end}) overlap")]
    OverlappingTensors {
        /// File path.
        file: String,
        /// First tensor (lower offset).
        first: String,
        /// Its absolute start.
        first_start: u64,
        /// Its absolute end.
        first_end: u64,
        /// Second tensor.
        second: String,
        /// Its absolute start.
        second_start: u64,
        /// Its absolute end.
        second_end: u64,
    },
    /// A metadata key that is not present.
    #[error("{file}: missing metadata key {key:?}")]
    MissingKey {
        /// File path.
        file: String,
        /// Key.
        key: String,
    },
    /// A metadata value of the wrong type (or out of range for the requested type).
    #[error("{file}: metadata {key:?}: expected {expected}, found {found}")]
    WrongType {
        /// File path.
        file: String,
        /// Key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What is there.
        found: String,
    },
    /// A tensor that is not present.
    #[error("{file}: missing tensor {name:?}")]
    MissingTensor {
        /// Tensor name.
        name: String,
        /// File path.
        file: String,
    },
    /// [`GgufWriter`](crate::GgufWriter) was given something it cannot encode.
    #[error("GGUF writer: {reason}")]
    Writer {
        /// What is wrong.
        reason: String,
    },
}
