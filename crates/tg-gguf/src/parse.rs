//! The GGUF header / metadata / tensor-table parser. Works on any byte slice and never
//! panics: every length read from the file is checked against the bytes left before
//! anything is allocated for it.

use std::collections::HashMap;

use tg_quant::GgmlType;

use crate::value::type_id;
use crate::{GgufError, TensorInfo, Value};

/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// Most tensor dimensions GGUF allows.
pub const MAX_DIMS: u32 = 4;
/// Deepest array nesting accepted in metadata.
pub const MAX_NESTING: usize = 8;
/// The file magic.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Everything parsed from the header, in file order.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: usize,
    pub metadata: Vec<(String, Value)>,
    pub key_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub data_offset: u64,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.left() {
            return Err(GgufError::Truncated {
                file: self.file.to_string(),
                what: what(),
                offset: self.pos as u64,
                needed: n as u64,
                available: self.left() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Checks that `count` entries of at least `min_size` bytes each can fit.
    fn check_count(
        &self,
        count: u64,
        min_size: u64,
        at: usize,
        what: &dyn Fn() -> String,
    ) -> Result<usize, GgufError> {
        let needed = u128::from(count) * u128::from(min_size);
        if needed > self.left() as u128 {
            return Err(GgufError::ImplausibleLength {
                file: self.file.to_string(),
                what: what(),
                offset: at as u64,
                count,
                needed,
                available: self.left() as u64,
            });
        }
        // needed <= left <= usize::MAX, and min_size >= 1, so count fits in usize.
        Ok(count as usize)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        let start = self.pos;
        if len > self.left() as u64 {
            // Nothing is allocated for the claimed length; report where the bytes ran out.
            return Err(GgufError::Truncated {
                file: self.file.to_string(),
                what: what(),
                offset: start as u64,
                needed: len,
                available: self.left() as u64,
            });
        }
        let bytes = self.take(len as usize, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                file: self.file.to_string(),
                what: what(),
                offset: start as u64,
            }),
        }
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("value of {key:?}");
        Ok(match ty {
            type_id::U8 => Value::U8(self.array::<1>(&what)?[0]),
            type_id::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            type_id::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            type_id::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            type_id::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            type_id::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            type_id::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            type_id::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            type_id::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            type_id::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            type_id::BOOL => {
                let at = self.pos;
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        return Err(GgufError::InvalidBool {
                            file: self.file.to_string(),
                            key: key.to_string(),
                            offset: at as u64,
                            byte,
                        })
                    }
                }
            }
            type_id::STRING => Value::String(self.string(&what)?),
            type_id::ARRAY => {
                if depth >= MAX_NESTING {
                    return Err(GgufError::NestingTooDeep {
                        file: self.file.to_string(),
                        key: key.to_string(),
                        limit: MAX_NESTING,
                    });
                }
                let at = self.pos;
                let elem_ty = self.u32(&|| format!("array element type of {key:?}"))?;
                let min = min_value_size(elem_ty).ok_or_else(|| GgufError::UnknownValueType {
                    file: self.file.to_string(),
                    key: key.to_string(),
                    offset: at as u64,
                    type_id: elem_ty,
                })?;
                let count_at = self.pos;
                let count = self.u64(&|| format!("array length of {key:?}"))?;
                let count =
                    self.check_count(count, min, count_at, &|| format!("array length of {key:?}"))?;
                let mut v = Vec::with_capacity(count.min(1 << 16));
                for _ in 0..count {
                    v.push(self.value(elem_ty, key, depth + 1)?);
                }
                Value::Array(v)
            }
            other => {
                return Err(GgufError::UnknownValueType {
                    file: self.file.to_string(),
                    key: key.to_string(),
                    offset: self.pos.saturating_sub(4) as u64,
                    type_id: other,
                })
            }
        })
    }
}

/// Smallest encoded size of a value of type `ty`, or `None` for unknown types.
fn min_value_size(ty: u32) -> Option<u64> {
    Some(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        type_id::ARRAY => 12,
        _ => return None,
    })
}

/// Parses and validates a whole GGUF image (header, metadata, tensor table, and tensor
/// data bounds). `file` names the source in errors.
pub(crate) fn parse(buf: &[u8], file: &str) -> Result<Parsed, GgufError> {
    let mut r = Reader { buf, pos: 0, file };
    let magic: [u8; 4] = r.array(&|| "magic".to_string())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            file: file.to_string(),
            magic,
            shown: String::from_utf8_lossy(&magic).into_owned(),
        });
    }
    let version = r.u32(&|| "version".to_string())?;
    if version != 2 && version != 3 {
        let swapped = version.swap_bytes();
        let hint = if swapped == 2 || swapped == 3 {
            format!(" (this looks like a big-endian GGUF v{swapped}; only little-endian files are supported)")
        } else if version == 1 {
            " (GGUF v1 used 32-bit counts and is obsolete)".to_string()
        } else {
            String::new()
        };
        return Err(GgufError::UnsupportedVersion {
            file: file.to_string(),
            version,
            hint,
        });
    }

    let at = r.pos;
    let n_tensors = r.u64(&|| "tensor count".to_string())?;
    let kv_at = r.pos;
    let n_kv = r.u64(&|| "metadata count".to_string())?;
    // Minimum sizes: a key-value is key length (8) + type (4) + 1 byte; a tensor info is
    // name length (8) + n_dims (4) + type (4) + offset (8).
    let n_kv = r.check_count(n_kv, 13, kv_at, &|| "metadata count".to_string())?;
    let n_tensors = r.check_count(n_tensors, 24, at, &|| "tensor count".to_string())?;

    let mut metadata = Vec::with_capacity(n_kv);
    let mut key_index = HashMap::with_capacity(n_kv);
    for i in 0..n_kv {
        let key = r.string(&|| format!("metadata key #{i}"))?;
        let ty = r.u32(&|| format!("value type of {key:?}"))?;
        let value = r.value(ty, &key, 0)?;
        if key_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey {
                file: file.to_string(),
                key,
            });
        }
        metadata.push((key, value));
    }

    let alignment = match key_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u32() {
            Some(a) if a.is_power_of_two() => a as usize,
            _ => {
                return Err(GgufError::BadAlignment {
                    file: file.to_string(),
                    found: v.describe(),
                })
            }
        },
    };

    struct RawTensor {
        name: String,
        dims: Vec<u64>,
        ty: GgmlType,
        offset: u64,
    }
    let mut raw = Vec::with_capacity(n_tensors);
    let mut tensor_index = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let name = r.string(&|| format!("tensor name #{i}"))?;
        let n_dims = r.u32(&|| format!("dimension count of tensor {name:?}"))?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                file: file.to_string(),
                tensor: name,
                n_dims,
                max: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(r.u64(&|| format!("dimension {d} of tensor {name:?}"))?);
        }
        let type_id = r.u32(&|| format!("type of tensor {name:?}"))?;
        let ty = GgmlType::from_id(type_id).map_err(|_| GgufError::UnknownGgmlType {
            file: file.to_string(),
            tensor: name.clone(),
            type_id,
        })?;
        let offset = r.u64(&|| format!("data offset of tensor {name:?}"))?;
        if tensor_index.insert(name.clone(), raw.len()).is_some() {
            return Err(GgufError::DuplicateTensor {
                file: file.to_string(),
                name,
            });
        }
        raw.push(RawTensor {
            name,
            dims,
            ty,
            offset,
        });
    }

    let file_len = buf.len() as u64;
    // The data section starts at the next multiple of the alignment (possibly past the end
    // of a file that holds no tensor data).
    let data_offset = (r.pos as u64).div_ceil(alignment as u64) * alignment as u64;

    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        let overflow = |limit| GgufError::SizeOverflow {
            file: file.to_string(),
            tensor: t.name.clone(),
            dims: t.dims.clone(),
            limit,
        };
        let mut n_elements: u64 = 1;
        for &d in &t.dims {
            n_elements = n_elements
                .checked_mul(d)
                .ok_or_else(|| overflow("element count exceeds u64"))?;
        }
        if n_elements > i64::MAX as u64 || t.dims.iter().any(|&d| d > i64::MAX as u64) {
            return Err(overflow("element count exceeds i64::MAX"));
        }
        let row_len = t.dims.first().copied().unwrap_or(1);
        let block = t.ty.block_size();
        if row_len % block as u64 != 0 {
            return Err(GgufError::RowNotBlockMultiple {
                file: file.to_string(),
                tensor: t.name,
                ty: t.ty.name(),
                row_len,
                block,
            });
        }
        let n_bytes = (n_elements / block as u64)
            .checked_mul(t.ty.type_size() as u64)
            .filter(|&b| b <= usize::MAX as u64 && b <= i64::MAX as u64)
            .ok_or_else(|| overflow("byte size exceeds usize"))?;
        if t.offset % alignment as u64 != 0 {
            return Err(GgufError::MisalignedTensor {
                file: file.to_string(),
                tensor: t.name,
                offset: t.offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                let start = u128::from(data_offset) + u128::from(t.offset);
                return Err(GgufError::TensorOutOfBounds {
                    file: file.to_string(),
                    tensor: t.name,
                    start,
                    end: start + u128::from(n_bytes),
                    file_len,
                });
            }
        }
        tensors.push(TensorInfo {
            name: t.name,
            dims: t.dims,
            ty: t.ty,
            offset: data_offset + t.offset,
            n_bytes: n_bytes as usize,
        });
    }

    // Overlap check over non-empty tensors sorted by start.
    let mut order: Vec<usize> = (0..tensors.len())
        .filter(|&i| tensors[i].n_bytes > 0)
        .collect();
    order.sort_by_key(|&i| (tensors[i].offset, i));
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        let a_end = a.offset + a.n_bytes as u64;
        if b.offset < a_end {
            return Err(GgufError::OverlappingTensors {
                file: file.to_string(),
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a_end,
                second: b.name.clone(),
                second_start: b.offset,
                second_end: b.offset + b.n_bytes as u64,
            });
        }
    }

    Ok(Parsed {
        version,
        alignment,
        metadata,
        key_index,
        tensors,
        tensor_index,
        data_offset,
    })
}
