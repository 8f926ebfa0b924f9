//! numpy ↔ engine conversions and dtype names.
//!
//! Inputs: an array of exactly the declared dtype is copied once into the owned
//! [`HostTensor`] the runtime takes (a `memcpy` when it is C-contiguous, an element gather
//! otherwise). Any other *array* dtype is a `DTypeError` (no silent rounding of float64 to
//! float32); a non-array value (list, scalar) is converted with `numpy.asarray(value, dtype)`.
//!
//! Outputs: the runtime copies each output out of its arena into a fresh vector, and that
//! vector becomes the numpy array's memory without another copy (the array owns it). An
//! output never aliases engine memory, so later runs cannot change it.

use crate::errors::{err, Kind, Res};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::prelude::*;
use numpy::{PyArrayDyn, PyUntypedArray};
use pyo3::prelude::*;
use tg_ir::{DType, HostData, HostTensor};

/// Parses a canonical dtype name (`f32`, `i32`, `bool`; numpy spellings accepted too).
pub(crate) fn parse_dtype(s: &str) -> Res<DType> {
    match s {
        "f32" | "float32" => Ok(DType::F32),
        "i32" | "int32" => Ok(DType::I32),
        "bool" => Ok(DType::Bool),
        _ => Err(err(Kind::DType, format!("unsupported dtype '{s}' (use float32, int32 or bool)"))),
    }
}

/// The numpy name of a dtype (`float32`, `int32`, `bool`; quantized storage by its GGML name).
pub(crate) fn dtype_name(d: DType) -> String {
    match d {
        DType::F32 => "float32".into(),
        DType::I32 => "int32".into(),
        DType::Bool => "bool".into(),
        DType::Quant(t) => t.name().to_lowercase(),
    }
}

/// A shape as Python writes it: `(2, 3)`, `(4,)`, `()`.
pub(crate) fn shape_str(s: &[usize]) -> String {
    match s.len() {
        1 => format!("({},)", s[0]),
        _ => format!("({})", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The elements in row-major order: one `memcpy` for a C-contiguous array, an element
/// gather in logical order otherwise (`as_slice` alone would also accept Fortran order, whose
/// memory order is not row-major).
fn copy_out<T: numpy::Element + Copy>(a: &Bound<'_, PyArrayDyn<T>>) -> Res<Vec<T>> {
    let ro = a.try_readonly().map_err(|e| err(Kind::Execution, format!("cannot read the array: {e}")))?;
    if a.is_c_contiguous() {
        if let Ok(s) = ro.as_slice() {
            return Ok(s.to_vec());
        }
    }
    Ok(ro.as_array().iter().copied().collect())
}

fn numpy_dtype_of(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("dtype").and_then(|d| d.str()).map(|s| s.to_string()).unwrap_or_else(|_| "?".into())
}

/// The elements of a numpy array whose dtype must be `want`, as host data. `what` names
/// the value in errors (e.g. `input 'x'`).
pub(crate) fn array_data(obj: &Bound<'_, PyAny>, want: DType, what: &str) -> Res<(Vec<usize>, HostData)> {
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| err(Kind::DType, format!("{what}: expected a numpy array")))?;
    let shape = arr.shape().to_vec();
    let mismatch = || {
        let got = numpy_dtype_of(obj);
        let hint = match want {
            DType::F32 => "np.float32",
            DType::I32 => "np.int32",
            _ => "bool",
        };
        err(Kind::DType, format!("{what}: expected a {} array, got {got} (convert it with .astype({hint}))", dtype_name(want)))
    };
    let data = match want {
        DType::F32 => HostData::F32(copy_out(obj.cast::<PyArrayDyn<f32>>().map_err(|_| mismatch())?)?),
        DType::I32 => HostData::I32(copy_out(obj.cast::<PyArrayDyn<i32>>().map_err(|_| mismatch())?)?),
        DType::Bool => HostData::Bool(copy_out(obj.cast::<PyArrayDyn<bool>>().map_err(|_| mismatch())?)?.into_iter().map(u8::from).collect()),
        DType::Quant(t) => return Err(err(Kind::DType, format!("{what}: {t} storage cannot be fed from numpy"))),
    };
    Ok((shape, data))
}

/// The numpy dtype name of an array, or `None` if `obj` is not a numpy array.
pub(crate) fn array_dtype(obj: &Bound<'_, PyAny>) -> Option<DType> {
    if obj.cast::<PyArrayDyn<f32>>().is_ok() {
        Some(DType::F32)
    } else if obj.cast::<PyArrayDyn<i32>>().is_ok() {
        Some(DType::I32)
    } else if obj.cast::<PyArrayDyn<bool>>().is_ok() {
        Some(DType::Bool)
    } else {
        None
    }
}

/// A value fed for input `name` of shape `shape` and dtype `dtype`, checked and copied.
pub(crate) fn input_tensor(py: Python<'_>, obj: &Bound<'_, PyAny>, name: &str, shape: &[usize], dtype: DType) -> PyResult<HostTensor> {
    let what = format!("input '{name}'");
    let converted;
    let obj = if obj.cast::<PyUntypedArray>().is_ok() {
        obj
    } else {
        // Lists, tuples and Python scalars have no dtype of their own: take the declared one.
        let np = py.import("numpy")?;
        converted = np.call_method1("asarray", (obj, dtype_name(dtype))).map_err(|e| {
            err(Kind::DType, format!("{what}: cannot convert a {} to a {} array: {e}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_default(), dtype_name(dtype)))
        })?;
        &converted
    };
    let (got, data) = array_data(obj, dtype, &what)?;
    if got != shape {
        return Err(err(Kind::Shape, format!("{what}: expected shape {}, got {}", shape_str(shape), shape_str(&got))).into());
    }
    Ok(HostTensor { shape: got, data })
}

/// Moves a host tensor into a numpy array (the vector becomes the array's memory).
pub(crate) fn tensor_to_numpy(py: Python<'_>, t: HostTensor) -> PyResult<Bound<'_, PyAny>> {
    let dim = IxDyn(&t.shape);
    let bad = |e: numpy::ndarray::ShapeError| err(Kind::Execution, format!("output of shape {:?}: {e}", t.shape));
    Ok(match t.data {
        HostData::F32(v) => ArrayD::from_shape_vec(dim, v).map_err(bad)?.into_pyarray(py).into_any(),
        HostData::I32(v) => ArrayD::from_shape_vec(dim, v).map_err(bad)?.into_pyarray(py).into_any(),
        HostData::Bool(v) => ArrayD::from_shape_vec(dim, v.into_iter().map(|b| b != 0).collect::<Vec<bool>>()).map_err(bad)?.into_pyarray(py).into_any(),
    })
}

/// A reference-interpreter value as numpy: float64 for f32 values (the reference's
/// precision), int32 and bool as themselves.
pub(crate) fn reference_to_numpy(py: Python<'_>, a: tg_ir::interp::Array) -> PyResult<Bound<'_, PyAny>> {
    let dim = IxDyn(&a.shape);
    let bad = |e: numpy::ndarray::ShapeError| err(Kind::Execution, format!("value of shape {:?}: {e}", a.shape));
    Ok(match a.dtype {
        DType::I32 => ArrayD::from_shape_vec(dim, a.data.iter().map(|&x| x as i32).collect()).map_err(bad)?.into_pyarray(py).into_any(),
        DType::Bool => ArrayD::from_shape_vec(dim, a.data.iter().map(|&x| x != 0.0).collect()).map_err(bad)?.into_pyarray(py).into_any(),
        _ => ArrayD::from_shape_vec(dim, a.data).map_err(bad)?.into_pyarray(py).into_any(),
    })
}
