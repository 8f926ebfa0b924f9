//! Tests against the real EmbeddingGemma-300M sentence-transformers folder (skipped, with a
//! message, when it is absent; see `common::embed_model_dir`).
//!
//! Reference values were read independently with Python's `struct` + `json` + numpy
//! (`numpy.frombuffer(..., dtype="<f4")` at `8 + header_len + begin`), by a throw-away
//! one-off; the bit patterns are pasted below.

mod common;

use std::time::Instant;

use tg_safetensors::{Dtype, SafetensorsFile};

/// f32 values from their bit patterns.
fn f32s(bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

/// Asserts that `s` lies inside the file's memory map.
fn assert_in_map(f: &SafetensorsFile, s: &[f32]) {
    let map = f.bytes().as_ptr_range();
    let p = s.as_ptr_range();
    assert!(
        map.start as usize <= p.start as usize && p.end as usize <= map.end as usize,
        "slice {p:?} outside the map {map:?}"
    );
}

#[test]
fn embeddinggemma_model_safetensors() {
    let Some(path) =
        common::embed_model_file("embeddinggemma_model_safetensors", "model.safetensors")
    else {
        return;
    };
    let t0 = Instant::now();
    let f = SafetensorsFile::open(&path).unwrap();
    println!(
        "opened {} ({} bytes) in {:?}",
        path.display(),
        f.len(),
        t0.elapsed()
    );

    // 315 top-level header keys: 314 tensors + "__metadata__".
    assert_eq!(f.n_tensors(), 314);
    assert_eq!(f.metadata(), &[("format".to_string(), "pt".to_string())]);
    assert_eq!(f.header_len(), 33648);
    assert_eq!(f.len(), 1_211_486_072);

    let mut total = 0usize;
    let mut prev_end = f.data_offset();
    for t in f.tensors() {
        assert_eq!(t.dtype, Dtype::F32, "{}", t.name);
        assert_eq!(t.file_offset, prev_end, "{}: file order", t.name);
        prev_end += t.data.len();
        total += t.data.len();
        let s = t.as_f32_slice().unwrap();
        assert_eq!(s.len(), t.n_elements());
        assert_eq!(s.as_ptr().cast::<u8>(), t.data.as_ptr());
        assert_in_map(&f, s);
    }
    assert_eq!(total, f.data_section().len());
    assert_eq!(total, 1_211_452_416);

    let e = f.tensor("embed_tokens.weight").unwrap();
    assert_eq!(e.shape, &[262144, 768]);
    assert_eq!(e.file_offset, 33656);
    let s = e.as_f32_slice().unwrap();
    assert_eq!(s.len(), 262144 * 768);
    assert_in_map(&f, s);
    // Zero-copy: the slice is the map itself at the tensor's file offset.
    assert_eq!(s.as_ptr().cast::<u8>(), f.bytes()[e.file_offset..].as_ptr());
    assert_eq!(
        &s[..4],
        &f32s(&[0x3da5875f, 0xbc94d3b7, 0x3cbc04fa, 0x3c8bd850])[..]
    );
    assert_eq!(s[s.len() - 1], f32::from_bits(0x3ca2c786));

    for (name, offset, first, last, sum) in [
        (
            "layers.0.input_layernorm.weight",
            805340024,
            [0x415c5918, 0x413a019c, 0x412ffadd, 0x41303123],
            0x413b95fc,
            10146.637999534607,
        ),
        (
            "norm.weight",
            1211483000,
            [0x42041346, 0x40a78918, 0x4157aa64, 0x4151453c],
            0x40bb2f02,
            14184.763914585114,
        ),
    ] {
        let t = f.tensor(name).unwrap();
        assert_eq!((t.shape, t.file_offset), (&[768][..], offset), "{name}");
        let v = t.to_f32_vec().unwrap();
        assert_eq!(&v[..4], &f32s(&first)[..], "{name}");
        assert_eq!(v[767], f32::from_bits(last), "{name}");
        let got: f64 = v.iter().map(|&x| f64::from(x)).sum();
        assert!((got - sum).abs() < 1e-6, "{name}: sum {got} vs numpy {sum}");
    }
    let e = f.tensor("no.such.tensor").unwrap_err().to_string();
    assert!(
        e.contains("no.such.tensor") && e.contains("model.safetensors"),
        "{e}"
    );
}

#[test]
fn embeddinggemma_dense_layers() {
    for (rel, shape, first, last, sum) in [
        (
            "2_Dense/model.safetensors",
            [3072, 768],
            [0xbccb0388, 0x3d3443f4, 0xbe26541b, 0x3d5a4713],
            0x3cecd6a3,
            -17.284008968306807,
        ),
        (
            "3_Dense/model.safetensors",
            [768, 3072],
            [0x3d83f91a, 0xbd34fe92, 0x3d6f2206, 0xbe1df6cd],
            0xbd5a8534,
            63.43280344302093,
        ),
    ] {
        let Some(path) = common::embed_model_file("embeddinggemma_dense_layers", rel) else {
            continue;
        };
        let f = SafetensorsFile::open(&path).unwrap();
        assert_eq!(f.n_tensors(), 1);
        assert!(f.metadata().is_empty());
        let t = f.tensor("linear.weight").unwrap();
        assert_eq!(
            (t.dtype, t.shape, t.file_offset),
            (Dtype::F32, &shape[..], 88)
        );
        let s = t.as_f32_slice().unwrap();
        assert_in_map(&f, s);
        assert_eq!(s.len(), 3072 * 768);
        assert_eq!(&s[..4], &f32s(&first)[..], "{rel}");
        assert_eq!(s[s.len() - 1], f32::from_bits(last), "{rel}");
        let got: f64 = s.iter().map(|&x| f64::from(x)).sum();
        assert!((got - sum).abs() < 1e-6, "{rel}: sum {got} vs numpy {sum}");
        assert_eq!(t.data.len(), f.data_section().len());
    }
}
