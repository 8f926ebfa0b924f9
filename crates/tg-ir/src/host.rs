use crate::{DType, IrError, Shape};
use std::collections::HashMap;

/// Elements of a host tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum HostData {
    /// f32 elements.
    F32(Vec<f32>),
    /// i32 elements.
    I32(Vec<i32>),
    /// bool elements (0 or 1).
    Bool(Vec<u8>),
}

/// A dense, contiguous tensor in host memory: what callers feed as inputs and receive as
/// outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Shape, outermost first.
    pub shape: Shape,
    /// Row-major elements.
    pub data: HostData,
}

impl HostTensor {
    /// An f32 tensor; errors if the element count does not match the shape.
    pub fn f32(shape: &[usize], data: Vec<f32>) -> Result<Self, IrError> {
        Self::new(shape, HostData::F32(data))
    }

    /// An i32 tensor; errors if the element count does not match the shape.
    pub fn i32(shape: &[usize], data: Vec<i32>) -> Result<Self, IrError> {
        Self::new(shape, HostData::I32(data))
    }

    /// A tensor from shape and data, checked.
    pub fn new(shape: &[usize], data: HostData) -> Result<Self, IrError> {
        let t = HostTensor { shape: shape.to_vec(), data };
        match crate::shape::checked_numel(shape) {
            Some(n) if n == t.len() => {}
            Some(n) => return Err(IrError::Eval(format!("shape {shape:?} needs {n} elements, got {}", t.len()))),
            None => return Err(IrError::Eval(format!("shape {shape:?}: its element count overflows usize ({} elements given)", t.len()))),
        }
        Ok(t)
    }

    /// Element count.
    pub fn len(&self) -> usize {
        match &self.data {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match &self.data {
            HostData::F32(_) => DType::F32,
            HostData::I32(_) => DType::I32,
            HostData::Bool(_) => DType::Bool,
        }
    }

    /// f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Elements widened to f64.
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::Bool(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

/// Supplies the bytes of named weights (e.g. tensors of a memory-mapped GGUF file).
/// Bytes are in the storage format of the weight node's dtype (little-endian f32, or
/// GGML blocks, row after row).
pub trait WeightStore: Sync {
    /// The bytes of the weight, or `None` if the store has no such name.
    fn bytes(&self, name: &str) -> Option<&[u8]>;
}

impl WeightStore for HashMap<String, Vec<u8>> {
    fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_slice())
    }
}

/// Encodes f32 values as the little-endian bytes of an f32 weight.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
