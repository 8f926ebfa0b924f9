//! `TensorProto` → values: the element types the IR computes with, from `raw_data` (in
//! place for `float`), the typed fields, or external data.

use crate::proto::TensorProto;
use crate::{OnnxError, OnnxModel};

/// ONNX element type codes (`TensorProto.DataType`).
pub(crate) mod dt {
    pub const FLOAT: i32 = 1;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const BOOL: i32 = 9;
}

/// The name of an element type code, for errors.
pub(crate) fn type_name(t: i32) -> &'static str {
    match t {
        0 => "undefined",
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        _ => "an unknown type",
    }
}

/// A tensor's elements.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueData {
    /// `float`.
    F32(Vec<f32>),
    /// `int32` or `int64`.
    I64(Vec<i64>),
    /// `bool`.
    Bool(Vec<bool>),
}

impl ValueData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ValueData::F32(v) => v.len(),
            ValueData::I64(v) => v.len(),
            ValueData::Bool(v) => v.len(),
        }
    }

    /// True with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A decoded tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Its dimensions.
    pub shape: Vec<usize>,
    /// Its elements, row-major.
    pub data: ValueData,
    /// The ONNX element type it was stored as.
    pub onnx_type: i32,
}

fn dims(t: &TensorProto, what: &str) -> Result<Vec<usize>, OnnxError> {
    t.dims.iter().map(|&d| usize::try_from(d).map_err(|_| OnnxError::Invalid(format!("{what}: negative dimension {d}")))).collect()
}

fn numel(shape: &[usize], what: &str) -> Result<usize, OnnxError> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= 1 << 34).ok_or_else(|| OnnxError::Invalid(format!("{what}: {shape:?} has too many elements")))
}

/// The raw little-endian bytes of `t` (its `raw_data`, or its external data), if stored so.
fn raw(model: Option<&OnnxModel>, t: &TensorProto, what: &str) -> Result<Option<bytes::Bytes>, OnnxError> {
    if t.data_location == Some(1) {
        let model = model.ok_or_else(|| OnnxError::Invalid(format!("{what}: external data outside a model file")))?;
        let get = |k: &str| t.external_data.iter().find(|e| e.key.as_deref() == Some(k)).and_then(|e| e.value.clone());
        let location = get("location").ok_or_else(|| OnnxError::Invalid(format!("{what}: external data without a location")))?;
        let num = |k: &str| -> Result<Option<usize>, OnnxError> {
            get(k).map(|v| v.parse::<usize>().map_err(|_| OnnxError::Invalid(format!("{what}: external data {k} '{v}' is not a number")))).transpose()
        };
        return model.external(what, &location, num("offset")?.unwrap_or(0), num("length")?).map(Some);
    }
    Ok(t.raw_data.clone().filter(|r| !r.is_empty() || t.float_data.is_empty() && t.int32_data.is_empty() && t.int64_data.is_empty()))
}

fn short(what: &str, have: usize, want: usize) -> OnnxError {
    OnnxError::Invalid(format!("{what}: {have} bytes of data for a shape that needs {want}"))
}

/// `float` data as little-endian bytes, in place when stored raw.
pub(crate) fn f32_bytes(model: Option<&OnnxModel>, t: &TensorProto, what: &str) -> Result<(Vec<usize>, bytes::Bytes), OnnxError> {
    let shape = dims(t, what)?;
    let n = numel(&shape, what)?;
    let b = match raw(model, t, what)? {
        Some(r) => r,
        None => bytes::Bytes::from(t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
    };
    if b.len() != 4 * n {
        return Err(short(what, b.len(), 4 * n));
    }
    Ok((shape, b))
}

/// Decodes `t` (from `model`, for external data).
pub fn decode_tensor(model: Option<&OnnxModel>, t: &TensorProto) -> Result<Value, OnnxError> {
    let what = format!("tensor '{}'", t.name.as_deref().unwrap_or(""));
    let ty = t.data_type.unwrap_or(0);
    let shape = dims(t, &what)?;
    let n = numel(&shape, &what)?;
    let raw = raw(model, t, &what)?;
    let data = match ty {
        dt::FLOAT => {
            let (_, b) = f32_bytes(model, t, &what)?;
            ValueData::F32(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        }
        dt::INT64 => match raw {
            Some(r) if r.len() == 8 * n => ValueData::I64(r.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()),
            Some(r) => return Err(short(&what, r.len(), 8 * n)),
            None if t.int64_data.len() == n => ValueData::I64(t.int64_data.clone()),
            None => return Err(short(&what, 8 * t.int64_data.len(), 8 * n)),
        },
        dt::INT32 => match raw {
            Some(r) if r.len() == 4 * n => ValueData::I64(r.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64).collect()),
            Some(r) => return Err(short(&what, r.len(), 4 * n)),
            None if t.int32_data.len() == n => ValueData::I64(t.int32_data.iter().map(|&v| v as i64).collect()),
            None => return Err(short(&what, 4 * t.int32_data.len(), 4 * n)),
        },
        dt::BOOL => match raw {
            Some(r) if r.len() == n => ValueData::Bool(r.iter().map(|&b| b != 0).collect()),
            Some(r) => return Err(short(&what, r.len(), n)),
            None if t.int32_data.len() == n => ValueData::Bool(t.int32_data.iter().map(|&v| v != 0).collect()),
            None => return Err(short(&what, t.int32_data.len(), n)),
        },
        other => return Err(OnnxError::UnsupportedType(format!("{what}: element type {} is not supported (float, int32, int64 and bool are)", type_name(other)))),
    };
    Ok(Value { shape, data, onnx_type: ty })
}
