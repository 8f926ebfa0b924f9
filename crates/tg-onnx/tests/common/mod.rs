//! What the ONNX tests share: where the backend node tests and the target models lie, and
//! the float value declarations the tests' hand-built models use.

use std::path::PathBuf;

#[allow(dead_code)]
/// The extracted node tests of onnx 1.16.2 (`TG_ONNX_TESTS`, else the cache folder
/// `scripts/fetch_onnx_tests.py` extracts to); `None` (printing `SKIPPED`) when absent, a
/// failure under CI.
pub fn cases_dir() -> Option<PathBuf> {
    fetched("TG_ONNX_TESTS", "node-tests-1.16.2", "ONNX node tests", "fetch_onnx_tests.py")
}

/// The ONNX target models (`TG_ONNX_MODELS`, else the cache folder
/// `scripts/fetch_onnx_models.py` extracts to); `None` (printing `SKIPPED`) when absent, a
/// failure under CI.
#[allow(dead_code)]
pub fn models_dir() -> Option<PathBuf> {
    fetched("TG_ONNX_MODELS", "models-1", "ONNX target models", "fetch_onnx_models.py")
}

/// The folder `env` names, else `folder` in the cache's `onnx/` (where `script` extracts
/// it), when complete; else `None` with `SKIPPED` printed, or a failure under CI.
fn fetched(env: &str, folder: &str, what: &str, script: &str) -> Option<PathBuf> {
    let p = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("TG_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("tensor-graphs")
        });
        base.join("onnx").join(folder)
    });
    if p.join(".complete").is_file() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    assert!(!ci, "{what} not found at {} under CI (scripts/test.sh runs scripts/{script})", p.display());
    eprintln!("SKIPPED: {what} not found at {} (python3 scripts/{script})", p.display());
    None
}

/// A float tensor value named `name` of dims `dims` (`None`: the dimension parameter
/// `batch`).
#[allow(dead_code)]
pub fn float_value(name: &str, dims: &[Option<i64>]) -> tg_onnx::proto::ValueInfoProto {
    use tg_onnx::proto::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto, ValueInfoProto};
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Some(v) => tensor_shape_proto::dimension::Value::DimValue(*v),
                None => tensor_shape_proto::dimension::Value::DimParam("batch".into()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(1), shape: Some(TensorShapeProto { dim }) })),
            ..Default::default()
        }),
        ..Default::default()
    }
}
