//! Header parsing and validation. Works on any byte slice and never panics: all
//! arithmetic on values read from the file is checked, and nothing is allocated from a
//! length read from the file.

use std::collections::{HashMap, HashSet};

use crate::json::{self, Val};
use crate::{Dtype, SafetensorsError, MAX_HEADER_LEN};

/// Key of the optional string-to-string metadata object.
pub(crate) const METADATA_KEY: &str = "__metadata__";

/// One validated tensor entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Begin offset relative to the data section.
    pub begin: usize,
    /// End offset relative to the data section.
    pub end: usize,
}

/// An entry whose fields are valid on their own (before the bounds and tiling checks).
struct Checked {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    begin: u64,
    end: u64,
}

/// Everything parsed from the header.
pub(crate) struct Parsed {
    pub header_len: usize,
    /// Tensors sorted by data offset (header order among equal offsets).
    pub tensors: Vec<Entry>,
    pub index: HashMap<String, usize>,
    pub metadata: Vec<(String, String)>,
}

/// Parses and validates the header of the safetensors image `bytes`.
pub(crate) fn parse(bytes: &[u8], file: &str) -> Result<Parsed, SafetensorsError> {
    let file_len = bytes.len() as u64;
    let Some(len_bytes) = bytes.first_chunk::<8>() else {
        return Err(SafetensorsError::TooShort {
            file: file.to_string(),
            len: file_len,
        });
    };
    let header_len = u64::from_le_bytes(*len_bytes);
    if header_len > MAX_HEADER_LEN {
        return Err(SafetensorsError::HeaderTooLarge {
            file: file.to_string(),
            header_len,
            limit: MAX_HEADER_LEN,
        });
    }
    // header_len <= MAX_HEADER_LEN, so neither this conversion nor `8 + n` overflows.
    let header_end = usize::try_from(header_len)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| SafetensorsError::HeaderOutOfBounds {
            file: file.to_string(),
            header_len,
            file_len,
        })?;
    let header = &bytes[8..header_end];
    let text = std::str::from_utf8(header).map_err(|e| SafetensorsError::HeaderNotUtf8 {
        file: file.to_string(),
        file_offset: 8 + e.valid_up_to() as u64,
    })?;
    let not_object = || SafetensorsError::HeaderNotObject {
        file: file.to_string(),
        found: text.chars().take(16).collect(),
    };
    if !text.starts_with('{') {
        return Err(not_object());
    }
    // Depth 3: top-level object -> entry objects -> field arrays -> scalars.
    let top = json::parse(text, 3).map_err(|e| SafetensorsError::InvalidJson {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let Val::Obj(items) = top else {
        return Err(not_object());
    };

    // Each entry on its own first, so a structural error anywhere in the header is reported
    // before range errors; then the ranges, in header order; then the tiling, in file order.
    let mut seen = HashSet::with_capacity(items.len());
    let mut metadata = Vec::new();
    let mut checked = Vec::with_capacity(items.len());
    for (key, val) in items {
        if !seen.insert(key.clone()) {
            return Err(SafetensorsError::DuplicateKey {
                file: file.to_string(),
                key,
            });
        }
        if key == METADATA_KEY {
            metadata = parse_metadata(file, val)?;
        } else {
            checked.push(parse_entry(file, key, val)?);
        }
    }
    let data_len = bytes.len() - header_end;
    let mut tensors = Vec::with_capacity(checked.len());
    for c in checked {
        let in_bounds = |x: u64| usize::try_from(x).ok().filter(|&x| x <= data_len);
        let (Some(begin), Some(end)) = (in_bounds(c.begin), in_bounds(c.end)) else {
            return Err(SafetensorsError::OutOfBounds {
                file: file.to_string(),
                tensor: c.name,
                begin: c.begin,
                end: c.end,
                data_len: data_len as u64,
            });
        };
        tensors.push(Entry {
            name: c.name,
            dtype: c.dtype,
            shape: c.shape,
            begin,
            end,
        });
    }

    // File order. Stable: header order among equal ranges (zero-size tensors).
    tensors.sort_by_key(|t| (t.begin, t.end));
    check_tiling(file, &tensors, data_len)?;
    let index = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    Ok(Parsed {
        header_len: header_end - 8,
        tensors,
        index,
        metadata,
    })
}

fn parse_metadata(file: &str, val: Val) -> Result<Vec<(String, String)>, SafetensorsError> {
    let bad = |reason: String| SafetensorsError::InvalidMetadata {
        file: file.to_string(),
        reason,
    };
    let entries = match val {
        Val::Obj(entries) => entries,
        // The reference implementation reads the field as an optional map.
        Val::Other(json::Kind::Null) => return Ok(Vec::new()),
        other => {
            return Err(bad(format!(
                "expected an object of string values, found {}",
                other.describe()
            )))
        }
    };
    let mut seen = HashSet::with_capacity(entries.len());
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        if !seen.insert(k.clone()) {
            return Err(bad(format!("duplicate key {k:?}")));
        }
        match v {
            Val::Str(s) => out.push((k, s)),
            other => {
                return Err(bad(format!(
                    "value of key {k:?} must be a string, found {}",
                    other.describe()
                )))
            }
        }
    }
    Ok(out)
}

/// Takes the non-negative integers of a JSON array, or says what is wrong.
fn u64_array(field: &str, val: &Val) -> Result<Vec<u64>, String> {
    let Val::Arr(items) = val else {
        return Err(format!(
            "{field} must be an array of non-negative integers, found {}",
            val.describe()
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Val::U64(x) => Ok(*x),
            other => Err(format!(
                "{field}[{i}] must be a non-negative integer, found {}",
                other.describe()
            )),
        })
        .collect()
}

fn parse_entry(file: &str, name: String, val: Val) -> Result<Checked, SafetensorsError> {
    let invalid = |name: &str, reason: String| SafetensorsError::InvalidEntry {
        file: file.to_string(),
        tensor: name.to_string(),
        reason,
    };
    let fields = match val {
        Val::Obj(fields) => fields,
        other => {
            return Err(invalid(
                &name,
                format!(
                    "expected an object with dtype, shape and data_offsets, found {}",
                    other.describe()
                ),
            ))
        }
    };
    let (mut dtype, mut shape, mut offsets) = (None, None, None);
    for (k, v) in &fields {
        let slot = match k.as_str() {
            "dtype" => &mut dtype,
            "shape" => &mut shape,
            "data_offsets" => &mut offsets,
            // Unknown fields are ignored, as by the reference implementation.
            _ => continue,
        };
        if slot.replace(v).is_some() {
            return Err(invalid(&name, format!("duplicate field {k:?}")));
        }
    }
    let missing = |f: &str| invalid(&name, format!("missing field {f:?}"));
    let dtype = dtype.ok_or_else(|| missing("dtype"))?;
    let shape = shape.ok_or_else(|| missing("shape"))?;
    let offsets = offsets.ok_or_else(|| missing("data_offsets"))?;

    let Val::Str(dtype_name) = dtype else {
        return Err(invalid(
            &name,
            format!("dtype must be a string, found {}", dtype.describe()),
        ));
    };
    let shape = u64_array("shape", shape).map_err(|r| invalid(&name, r))?;
    let offsets = u64_array("data_offsets", offsets).map_err(|r| invalid(&name, r))?;
    let [begin, end] = offsets[..] else {
        return Err(invalid(
            &name,
            format!(
                "data_offsets must have exactly 2 elements [begin, end], found {}",
                offsets.len()
            ),
        ));
    };
    let Some(dtype) = Dtype::from_name(dtype_name) else {
        return Err(SafetensorsError::UnknownDtype {
            file: file.to_string(),
            tensor: name,
            dtype: dtype_name.clone(),
        });
    };
    if begin > end {
        return Err(SafetensorsError::ReversedOffsets {
            file: file.to_string(),
            tensor: name,
            begin,
            end,
        });
    }

    // Sizes. Strides are products of trailing dims, so the product of the *non-zero* dims
    // must fit (a zero dim does not make [2^40, 2^40, 0] safe to index), in bytes, in usize.
    let overflow = |limit| SafetensorsError::ShapeOverflow {
        file: file.to_string(),
        tensor: name.clone(),
        dtype,
        shape: shape.clone(),
        limit,
    };
    let span = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d.max(1)))
        .ok_or_else(|| overflow("element count exceeds 2^64-1"))?;
    let span_bits = u128::from(span) * dtype.bits() as u128;
    if usize::try_from(span_bits.div_ceil(8)).is_err() {
        return Err(overflow("byte size exceeds the address space"));
    }
    let n_elements = if shape.contains(&0) { 0 } else { span };
    let expected = dtype
        .bytes_for(n_elements)
        .ok_or_else(|| SafetensorsError::PartialBytes {
            file: file.to_string(),
            tensor: name.clone(),
            dtype,
            n_elements,
        })?;
    // Every dim is at most `span`; this only fails on hosts with a usize below 64 bits.
    let shape_usize: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| overflow("dimension exceeds the address space"))?;
    if end - begin != expected {
        return Err(SafetensorsError::SizeMismatch {
            file: file.to_string(),
            tensor: name,
            dtype,
            shape: shape_usize,
            expected,
            begin,
            end,
        });
    }
    Ok(Checked {
        name,
        dtype,
        shape: shape_usize,
        begin,
        end,
    })
}

/// The sorted ranges must tile the data section exactly: no overlap, no hole.
fn check_tiling(file: &str, tensors: &[Entry], data_len: usize) -> Result<(), SafetensorsError> {
    let mut prev: Option<&Entry> = None;
    let mut covered = 0usize;
    for t in tensors {
        if t.begin < covered {
            // `covered > 0` implies a previous tensor; it ends at `covered` since the
            // ranges so far tile [0, covered).
            if let Some(p) = prev {
                return Err(SafetensorsError::Overlap {
                    file: file.to_string(),
                    first: p.name.clone(),
                    first_begin: p.begin as u64,
                    first_end: p.end as u64,
                    second: t.name.clone(),
                    second_begin: t.begin as u64,
                    second_end: t.end as u64,
                });
            }
        }
        if t.begin > covered {
            return Err(SafetensorsError::Hole {
                file: file.to_string(),
                begin: covered as u64,
                end: t.begin as u64,
                after: prev.map(|p| p.name.clone()),
                before: Some(t.name.clone()),
            });
        }
        covered = t.end;
        prev = Some(t);
    }
    if covered != data_len {
        return Err(SafetensorsError::Hole {
            file: file.to_string(),
            begin: covered as u64,
            end: data_len as u64,
            after: prev.map(|p| p.name.clone()),
            before: None,
        });
    }
    Ok(())
}
