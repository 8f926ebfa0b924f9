//! GGUF v2/v3 reader over a memory map, and a small in-memory writer.
//!
//! [`GgufFile::open`] maps the file, parses the header, metadata and tensor table, and
//! validates everything a consumer relies on before returning: known tensor types, whole
//! blocks per row, aligned, in-bounds and non-overlapping tensor data, no duplicate keys or
//! tensor names, valid UTF-8. After that, [`GgufFile::tensor_bytes`] is a plain slice.
//!
//! Parsing never panics and never allocates based on a length read from the file that
//! exceeds the bytes left in it; malformed input yields a [`GgufError`] naming the file,
//! the key or tensor, the offset and the limit.
//!
//! ```no_run
//! let f = tg_gguf::GgufFile::open("model.gguf")?;
//! let n_embd = f.get_u32("gemma3.embedding_length")?;
//! let t = f.tensor("token_embd.weight")?;
//! let bytes = f.tensor_bytes(t);
//! # Ok::<(), tg_gguf::GgufError>(())
//! ```
#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use tg_quant::GgmlType;

mod error;
mod parse;
pub mod value;
mod writer;

pub use error::GgufError;
pub use parse::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_NESTING};
pub use value::Value;
pub use writer::GgufWriter;

/// Name used in errors for files parsed from memory.
pub const MEMORY_NAME: &str = "<memory>";

/// One entry of the tensor table, validated against the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the row length (innermost, contiguous).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file (data section start + relative offset).
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: usize,
}

impl TensorInfo {
    /// Total elements (product of dims; 1 for a 0-dimensional tensor).
    pub fn n_elements(&self) -> u64 {
        // Validated at parse time not to overflow.
        self.dims.iter().product()
    }

    /// Elements per row (`dims[0]`, or 1 for a 0-dimensional tensor).
    pub fn row_len(&self) -> usize {
        self.dims.first().map_or(1, |&d| d as usize)
    }

    /// Number of rows (product of `dims[1..]`).
    pub fn n_rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_len() / self.ty.block_size() * self.ty.type_size()
    }

    /// Dimensions in row-major (outermost-first) order, as most frameworks write shapes.
    pub fn shape_row_major(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Align64([u8; 64]);

enum Storage {
    Mmap(memmap2::Mmap),
    /// Owned bytes in a 64-byte-aligned buffer.
    Owned {
        buf: Vec<Align64>,
        len: usize,
    },
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned { buf, len } => {
                // SAFETY: `buf` holds at least `len` initialized bytes (see `from_bytes`).
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), *len) }
            }
        }
    }
}

/// A parsed, validated GGUF file (memory-mapped or owned).
pub struct GgufFile {
    storage: Storage,
    name: String,
    path: Option<PathBuf>,
    version: u32,
    alignment: usize,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("len", &self.len())
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    ///
    /// The map is read-only; as with any mmap, the file must not be truncated or modified
    /// while the `GgufFile` is alive.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |source| GgufError::Io {
            file: name.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: read-only private mapping; we document that the file must not change
        // underneath us, which is the standard contract for mapped model files.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::build(Storage::Mmap(map), name, Some(path.to_path_buf()))
    }

    /// Parses a GGUF image held in memory (copied into a 64-byte-aligned buffer).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_bytes_named(&bytes, MEMORY_NAME)
    }

    /// Like [`from_bytes`](Self::from_bytes), using `name` for the file in errors.
    pub fn from_bytes_named(bytes: &[u8], name: &str) -> Result<GgufFile, GgufError> {
        let mut buf = vec![Align64([0; 64]); bytes.len().div_ceil(64)];
        // SAFETY: `buf` has room for `bytes.len()` bytes and does not overlap `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                buf.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            )
        };
        Self::build(
            Storage::Owned {
                buf,
                len: bytes.len(),
            },
            name.to_string(),
            None,
        )
    }

    /// Parses `bytes` without keeping them: validates and returns the parsed tables'
    /// sizes. Cheap entry point for fuzzing (no copy of the input).
    pub fn validate(bytes: &[u8]) -> Result<(usize, usize), GgufError> {
        let p = parse::parse(bytes, MEMORY_NAME)?;
        Ok((p.metadata.len(), p.tensors.len()))
    }

    fn build(storage: Storage, name: String, path: Option<PathBuf>) -> Result<GgufFile, GgufError> {
        let p = parse::parse(storage.bytes(), &name)?;
        Ok(GgufFile {
            storage,
            name,
            path,
            version: p.version,
            alignment: p.alignment,
            metadata: p.metadata,
            key_index: p.key_index,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
            data_offset: p.data_offset,
        })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment: `general.alignment`, or 32.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The path the file was opened from (`None` for in-memory files).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The name used in errors (the path, or `<memory>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// File length in bytes.
    pub fn len(&self) -> usize {
        self.storage.bytes().len()
    }

    /// True for an empty file (never the case for a parsed one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn need(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            file: self.name.clone(),
            key: key.to_string(),
        })
    }

    fn wrong(&self, key: &str, expected: &'static str, v: &Value) -> GgufError {
        GgufError::WrongType {
            file: self.name.clone(),
            key: key.to_string(),
            expected,
            found: v.describe(),
        }
    }

    fn typed<'s, T>(
        &'s self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'s Value) -> Option<T>,
    ) -> Result<T, GgufError> {
        let v = self.need(key)?;
        f(v).ok_or_else(|| self.wrong(key, expected, v))
    }

    /// An integer of any width whose value fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.typed(key, "integer fitting u32", Value::as_u32)
    }

    /// An integer of any width whose value fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, "integer fitting u64", Value::as_u64)
    }

    /// An integer of any width whose value fits in `i32`.
    pub fn get_i32(&self, key: &str) -> Result<i32, GgufError> {
        self.typed(key, "integer fitting i32", Value::as_i32)
    }

    /// An integer of any width whose value fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.typed(key, "integer fitting i64", Value::as_i64)
    }

    /// An f32 (or an f64, converted).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.typed(key, "f32", Value::as_f32)
    }

    /// A bool.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.typed(key, "bool", Value::as_bool)
    }

    /// A string.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.typed(key, "string", Value::as_str)
    }

    /// An array (any element type).
    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        self.typed(key, "array", Value::as_array)
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.array_of(key, "array of strings", Value::as_str)
    }

    /// An array of f32 (f64 elements are converted).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        self.array_of(key, "array of f32", Value::as_f32)
    }

    /// An array of integers (any width), each fitting in i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        self.array_of(key, "array of integers fitting i32", Value::as_i32)
    }

    /// An array of integers (any width), each fitting in u32.
    pub fn get_u32_array(&self, key: &str) -> Result<Vec<u32>, GgufError> {
        self.array_of(key, "array of integers fitting u32", Value::as_u32)
    }

    fn array_of<'s, T>(
        &'s self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'s Value) -> Option<T>,
    ) -> Result<Vec<T>, GgufError> {
        let v = self.need(key)?;
        let items = v.as_array().ok_or_else(|| self.wrong(key, expected, v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, e)| {
                f(e).ok_or_else(|| GgufError::WrongType {
                    file: self.name.clone(),
                    key: key.to_string(),
                    expected,
                    found: format!("{} at index {i}", e.describe()),
                })
            })
            .collect()
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::MissingTensor {
                name: name.to_string(),
                file: self.name.clone(),
            })
    }

    /// The data bytes of `t` (a `TensorInfo` of this file; for a foreign one whose range
    /// does not fit, an empty slice).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        let start = usize::try_from(t.offset).unwrap_or(usize::MAX);
        start
            .checked_add(t.n_bytes)
            .and_then(|end| self.storage.bytes().get(start..end))
            .unwrap_or(&[])
    }

    /// Dequantizes the whole tensor `name` to f32 (row-major in ggml order).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufDequantError> {
        let t = self.tensor(name)?;
        let n = usize::try_from(t.n_elements()).map_err(|_| GgufDequantError::Quant {
            tensor: name.to_string(),
            source: tg_quant::QuantError::Overflow {
                ty: t.ty.name(),
                n: usize::MAX,
            },
        })?;
        tg_quant::dequantize_to_vec(t.ty, self.tensor_bytes(t), n).map_err(|source| {
            GgufDequantError::Quant {
                tensor: name.to_string(),
                source,
            }
        })
    }
}

/// Errors of [`GgufFile::dequantize`].
#[derive(Debug, thiserror::Error)]
pub enum GgufDequantError {
    /// Lookup failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The type cannot be dequantized.
    #[error("tensor {tensor:?}: {source}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// Cause.
        #[source]
        source: tg_quant::QuantError,
    },
}
