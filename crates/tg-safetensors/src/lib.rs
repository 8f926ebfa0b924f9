//! safetensors reader over a memory map, and a small writer.
//!
//! A safetensors file is an 8-byte little-endian header length `N`, `N` bytes of UTF-8
//! JSON, and the data section. The JSON object maps each tensor name to
//! `{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}` (offsets relative to the
//! data section, which starts at `8 + N`), plus an optional `"__metadata__"` object of
//! strings.
//!
//! [`SafetensorsFile::open`] maps the file (it is never copied) and validates everything a
//! consumer relies on before returning: known dtypes, byte ranges that match shape × dtype,
//! lie in the data section and tile it exactly (no overlap, no hole), no duplicate names,
//! no size overflow. After that, a [`TensorView`] is a plain borrowed slice of the map and
//! [`TensorView::as_f32_slice`] is zero-copy.
//!
//! Parsing never panics; malformed input yields a [`SafetensorsError`] naming the file,
//! the tensor or key, and the limit.
//!
//! ```no_run
//! let f = tg_safetensors::SafetensorsFile::open("model.safetensors")?;
//! let emb = f.tensor("embed_tokens.weight")?;
//! let rows: &[f32] = emb.as_f32_slice()?; // borrowed from the map
//! println!("{} {:?} at file offset {}", emb.name, emb.shape, emb.file_offset);
//! # let _ = rows;
//! # Ok::<(), tg_safetensors::SafetensorsError>(())
//! ```
#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod dtype;
mod error;
mod header;
mod json;
mod writer;

pub use dtype::{Dtype, UnknownDtype};
pub use error::SafetensorsError;
pub use writer::SafetensorsWriter;

/// Largest header accepted, in bytes (the reference implementation's limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Most elements a JSON array in the header may have. Shapes are the only arrays the format
/// uses; the cap bounds the memory a hostile header can make the parser allocate.
pub const MAX_JSON_ARRAY_LEN: usize = 1024;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Align64([u8; 64]);

enum Storage {
    Mmap(memmap2::Mmap),
    /// Bytes taken over as they are (alignment as allocated).
    Vec(Vec<u8>),
    /// A copy in a 64-byte-aligned buffer.
    Aligned {
        buf: Vec<Align64>,
        len: usize,
    },
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Vec(v) => v,
            Storage::Aligned { buf, len } => {
                // SAFETY: `buf` holds at least `len` initialized bytes (see `from_bytes`),
                // and `Align64` is plain bytes.
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), *len) }
            }
        }
    }
}

/// A parsed, validated safetensors file (memory-mapped or in memory).
pub struct SafetensorsFile {
    storage: Storage,
    name: String,
    path: Option<PathBuf>,
    header_len: usize,
    tensors: Vec<header::Entry>,
    index: HashMap<String, usize>,
    metadata: Vec<(String, String)>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("name", &self.name)
            .field("len", &self.len())
            .field("header_len", &self.header_len)
            .field("tensors", &self.tensors.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl SafetensorsFile {
    /// Memory-maps and validates the file at `path`.
    ///
    /// The map is read-only; as with any mmap, the file must not be truncated or modified
    /// while the `SafetensorsFile` is alive.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, SafetensorsError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |source| SafetensorsError::Io {
            file: name.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < 8 {
            // Also avoids mapping an empty file, which some platforms refuse.
            return Err(SafetensorsError::TooShort { file: name, len });
        }
        // SAFETY: read-only private mapping; we document that the file must not change
        // underneath us, the standard contract for mapped model files.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::build(Storage::Mmap(map), name, Some(path.to_path_buf()))
    }

    /// Validates a safetensors image held in `bytes`, taking it over without copying.
    ///
    /// `name` stands for the file in errors. The data keeps the alignment of the vector's
    /// allocation, which the allocator does not promise beyond 1 byte for `Vec<u8>`; use
    /// [`from_bytes`](Self::from_bytes) when zero-copy typed access must work.
    pub fn from_vec(
        bytes: Vec<u8>,
        name: impl Into<String>,
    ) -> Result<SafetensorsFile, SafetensorsError> {
        Self::build(Storage::Vec(bytes), name.into(), None)
    }

    /// Validates a copy of `bytes` held in a 64-byte-aligned buffer, so the data of each
    /// tensor is as aligned in memory as its offset in the file (like a memory map).
    pub fn from_bytes(
        bytes: &[u8],
        name: impl Into<String>,
    ) -> Result<SafetensorsFile, SafetensorsError> {
        let mut buf = vec![Align64([0; 64]); bytes.len().div_ceil(64)];
        // SAFETY: `buf` has room for `bytes.len()` bytes and does not overlap `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                buf.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            )
        };
        let storage = Storage::Aligned {
            buf,
            len: bytes.len(),
        };
        Self::build(storage, name.into(), None)
    }

    fn build(
        storage: Storage,
        name: String,
        path: Option<PathBuf>,
    ) -> Result<SafetensorsFile, SafetensorsError> {
        let p = header::parse(storage.bytes(), &name)?;
        Ok(SafetensorsFile {
            storage,
            name,
            path,
            header_len: p.header_len,
            tensors: p.tensors,
            index: p.index,
            metadata: p.metadata,
        })
    }

    /// The name used in errors (the path, or the name given to the in-memory constructors).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path the file was opened from (`None` for in-memory files).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// File length in bytes.
    pub fn len(&self) -> usize {
        self.storage.bytes().len()
    }

    /// True for an empty file (never the case for a parsed one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Length of the JSON header in bytes (the `N` of the first 8 bytes).
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The JSON header text (validated UTF-8; may end in padding spaces).
    pub fn header_json(&self) -> &str {
        // Validated as UTF-8 by the parser; an empty string can only come from a bug.
        std::str::from_utf8(&self.bytes()[8..self.data_offset()]).unwrap_or("")
    }

    /// Absolute offset of the data section (`8 + header_len`).
    pub fn data_offset(&self) -> usize {
        8 + self.header_len
    }

    /// The data section: every tensor's bytes, back to back, in [`tensors`](Self::tensors)
    /// order.
    pub fn data_section(&self) -> &[u8] {
        &self.bytes()[self.data_offset()..]
    }

    /// The `__metadata__` entries, in header order (empty when absent).
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The `__metadata__` value of `key`.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Number of tensors.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds a tensor called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// All tensors in file order (ascending data offset).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> + DoubleEndedIterator {
        self.tensors.iter().map(|e| self.view(e))
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, SafetensorsError> {
        self.index
            .get(name)
            .and_then(|&i| self.tensors.get(i))
            .map(|e| self.view(e))
            .ok_or_else(|| SafetensorsError::MissingTensor {
                file: self.name.clone(),
                tensor: name.to_string(),
            })
    }

    fn view<'a>(&'a self, e: &'a header::Entry) -> TensorView<'a> {
        let start = self.data_offset() + e.begin;
        let end = self.data_offset() + e.end;
        TensorView {
            name: &e.name,
            dtype: e.dtype,
            shape: &e.shape,
            // Validated to lie in the data section; empty only on a bug.
            data: self.bytes().get(start..end).unwrap_or(&[]),
            file_offset: start,
            file: &self.name,
        }
    }
}

/// A tensor of a [`SafetensorsFile`]: metadata and its bytes, borrowed from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorView<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost dimension first (row-major); empty for a scalar.
    pub shape: &'a [usize],
    /// The data bytes (little-endian elements, row-major), borrowed from the file.
    pub data: &'a [u8],
    /// Absolute offset of `data` in the file (`data_offset()` + the header's begin
    /// offset). With a memory-mapped file, `data.as_ptr()` is the map's base plus this.
    pub file_offset: usize,
    file: &'a str,
}

impl<'a> TensorView<'a> {
    /// Number of elements (1 for a scalar, 0 if any dimension is 0).
    pub fn n_elements(&self) -> usize {
        // Validated not to overflow at parse time.
        self.shape.iter().product()
    }

    /// The name of the file the tensor belongs to (as used in errors).
    pub fn file_name(&self) -> &'a str {
        self.file
    }

    fn wrong_dtype(&self, expected: &'static str) -> SafetensorsError {
        SafetensorsError::WrongDtype {
            file: self.file.to_string(),
            tensor: self.name.to_string(),
            expected,
            found: self.dtype,
        }
    }

    /// The data as `&[f32]`, borrowed from the file (zero-copy).
    ///
    /// Fails (never copies) unless the dtype is `F32` and the data is 4-byte aligned in
    /// memory (it is in a memory map when its file offset is a multiple of 4). Also fails
    /// on big-endian hosts.
    pub fn as_f32_slice(&self) -> Result<&'a [f32], SafetensorsError> {
        if self.dtype != Dtype::F32 {
            return Err(self.wrong_dtype("F32"));
        }
        if cfg!(target_endian = "big") {
            return Err(SafetensorsError::BigEndianHost {
                file: self.file.to_string(),
                tensor: self.name.to_string(),
            });
        }
        if self.data.is_empty() {
            return Ok(&[]);
        }
        let align = std::mem::align_of::<f32>();
        let address = self.data.as_ptr() as usize;
        if !address.is_multiple_of(align) {
            return Err(SafetensorsError::Misaligned {
                file: self.file.to_string(),
                tensor: self.name.to_string(),
                file_offset: self.file_offset as u64,
                address,
                align,
            });
        }
        // SAFETY: the pointer is aligned for f32 and valid for `data.len()` bytes, which is
        // a multiple of 4 (validated: n_elements * 4); every bit pattern is a valid f32;
        // the slice borrows the same storage for the same lifetime; the host is
        // little-endian like the file.
        Ok(unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().cast::<f32>(), self.data.len() / 4)
        })
    }

    /// The elements converted to `f32` (a new vector), for `F32`, `F16` and `BF16`.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, SafetensorsError> {
        let d = self.data;
        Ok(match self.dtype {
            Dtype::F32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => d
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => d
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            _ => return Err(self.wrong_dtype("F32, F16 or BF16")),
        })
    }
}
