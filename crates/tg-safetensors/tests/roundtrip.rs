//! Writer -> reader round trips, views, conversions and the writer's own checks.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_safetensors::{Dtype, SafetensorsError, SafetensorsFile, SafetensorsWriter};

struct Expect {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// Random shape (rank 0..=4, odd sizes, sometimes a zero dim) whose element count is a
/// whole number of bytes for `dtype`.
fn random_shape(rng: &mut ChaCha8Rng, dtype: Dtype) -> Vec<usize> {
    loop {
        let rank = rng.gen_range(0..=4);
        let mut shape: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..=7)).collect();
        if rank > 0 && rng.gen_ratio(1, 8) {
            let i = rng.gen_range(0..rank);
            shape[i] = 0;
        }
        let n: usize = shape.iter().product();
        if (n * dtype.bits()).is_multiple_of(8) {
            return shape;
        }
    }
}

fn random_data(rng: &mut ChaCha8Rng, dtype: Dtype, n_bytes: usize) -> Vec<u8> {
    (0..n_bytes)
        .map(|_| {
            if dtype == Dtype::Bool {
                rng.gen_range(0..2)
            } else {
                rng.gen()
            }
        })
        .collect()
}

fn check(f: &SafetensorsFile, expect: &[Expect], metadata: &[(String, String)]) {
    assert_eq!(f.n_tensors(), expect.len());
    assert_eq!(f.metadata(), metadata);
    for (k, v) in metadata {
        assert_eq!(f.metadata_value(k), Some(v.as_str()));
    }
    // Writer order is file order.
    let views: Vec<_> = f.tensors().collect();
    assert_eq!(views.len(), expect.len());
    let base = f.bytes().as_ptr() as usize;
    let mut concat = Vec::new();
    for (v, e) in views.iter().zip(expect) {
        assert_eq!(v.name, e.name);
        assert_eq!(v.dtype, e.dtype);
        assert_eq!(v.shape, &e.shape[..]);
        assert_eq!(v.data, &e.data[..], "{}", e.name);
        assert_eq!(v.n_elements(), e.shape.iter().product::<usize>());
        assert_eq!(v.data.as_ptr() as usize - base, v.file_offset);
        assert_eq!(f.tensor(&e.name).unwrap(), *v);
        assert!(f.contains(&e.name));
        concat.extend_from_slice(v.data);
    }
    assert_eq!(concat, f.data_section());
    assert_eq!(f.data_offset(), 8 + f.header_len());
    assert_eq!(f.header_len() % 8, 0, "writer pads the header to 8 bytes");
}

#[test]
fn roundtrip_every_dtype_odd_shapes_scalars_zero_size_metadata() {
    let seed = common::seed("roundtrip_every_dtype", 0x5afe_7e45_0000_0001);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let metadata: Vec<(String, String)> = vec![
        ("format".into(), "pt".into()),
        (
            "quotes \"and\" \\slashes\\".into(),
            "line\nbreak\ttab \u{1} ctl".into(),
        ),
        ("unicode ▁wörld 🙂".into(), "".into()),
        ("".into(), "empty key".into()),
    ];
    for round in 0..20 {
        let mut w = SafetensorsWriter::new();
        for (k, v) in &metadata {
            w.add_metadata(k.clone(), v.clone());
        }
        let mut expect = Vec::new();
        for (i, dtype) in Dtype::ALL.into_iter().enumerate() {
            for j in 0..3 {
                let shape = match j {
                    // A 0-d scalar for every whole-byte dtype.
                    0 if dtype.byte_size().is_some() => vec![],
                    _ => random_shape(&mut rng, dtype),
                };
                let n: usize = shape.iter().product();
                let data = random_data(&mut rng, dtype, n * dtype.bits() / 8);
                let name = format!("t{round}.{i}.{j}.{dtype}");
                w.add_tensor(name.clone(), dtype, &shape, data.clone());
                expect.push(Expect {
                    name,
                    dtype,
                    shape,
                    data,
                });
            }
        }
        let bytes = w.to_bytes().unwrap();
        check(
            &SafetensorsFile::from_bytes(&bytes, "aligned").unwrap(),
            &expect,
            &metadata,
        );
        check(
            &SafetensorsFile::from_vec(bytes.clone(), "vec").unwrap(),
            &expect,
            &metadata,
        );
        if round == 0 {
            let dir = common::scratch_dir("roundtrip");
            let path = dir.join("all.safetensors");
            w.write(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
            let f = SafetensorsFile::open(&path).unwrap();
            assert_eq!(f.path(), Some(path.as_path()));
            check(&f, &expect, &metadata);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn empty_file_and_metadata_only() {
    let bytes = SafetensorsWriter::new().to_bytes().unwrap();
    assert_eq!(&bytes[8..], b"{}      ");
    let f = SafetensorsFile::from_bytes(&bytes, "empty").unwrap();
    assert_eq!(
        (f.n_tensors(), f.metadata().len(), f.data_section().len()),
        (0, 0, 0)
    );

    let mut w = SafetensorsWriter::new();
    w.add_metadata("k", "v");
    let f = SafetensorsFile::from_vec(w.to_bytes().unwrap(), "meta").unwrap();
    assert_eq!(f.metadata(), &[("k".to_string(), "v".to_string())]);
    assert_eq!(f.tensors().count(), 0);
}

#[test]
fn scalar_and_zero_size_views() {
    let mut w = SafetensorsWriter::new();
    w.add_f32("scalar", &[], &[2.5])
        .add_f32("empty_a", &[0], &[])
        .add_f32("empty_b", &[3, 0, 2], &[])
        .add_f32("v", &[3], &[1.0, -2.0, 3.5])
        .add_tensor("empty_c", Dtype::BF16, &[0, 5], Vec::new());
    let f = SafetensorsFile::from_bytes(&w.to_bytes().unwrap(), "z").unwrap();
    let s = f.tensor("scalar").unwrap();
    assert_eq!((s.shape, s.n_elements()), (&[][..], 1));
    assert_eq!(s.as_f32_slice().unwrap(), &[2.5]);
    for name in ["empty_a", "empty_b", "empty_c"] {
        let t = f.tensor(name).unwrap();
        assert_eq!((t.n_elements(), t.data.len()), (0, 0));
        assert!(t.to_f32_vec().unwrap().is_empty());
    }
    assert!(f
        .tensor("empty_b")
        .unwrap()
        .as_f32_slice()
        .unwrap()
        .is_empty());
    assert_eq!(
        f.tensor("v").unwrap().to_f32_vec().unwrap(),
        vec![1.0, -2.0, 3.5]
    );
    // File order: zero-size tensors sit at their offsets, header order among ties.
    let names: Vec<_> = f.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["scalar", "empty_a", "empty_b", "v", "empty_c"]);
}

#[test]
fn tensors_come_in_offset_order_not_header_order() {
    let header = r#"{"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},"__metadata__":{"x":"y"},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}"#;
    let f = SafetensorsFile::from_vec(common::raw(header, &[1, 2, 3, 4, 5]), "order").unwrap();
    let got: Vec<_> = f.tensors().map(|t| (t.name, t.data.to_vec())).collect();
    assert_eq!(got, vec![("a", vec![1, 2, 3]), ("b", vec![4, 5])]);
    assert_eq!(f.tensors().next_back().unwrap().name, "b");
    assert_eq!(f.tensor("b").unwrap().file_offset, 8 + header.len() + 3);
}

#[test]
fn lenient_where_the_reference_reader_is() {
    // Unknown entry fields are ignored; `"__metadata__": null` means no metadata; trailing
    // whitespace after the object (the padding) is fine.
    let header = "{\"__metadata__\":null,\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":{\"deep\":[[1]]}}}  \n\t ";
    let f = SafetensorsFile::from_vec(common::raw(header, &[0xff]), "lenient").unwrap();
    assert!(f.metadata().is_empty());
    assert_eq!(f.tensor("a").unwrap().data, &[0xff]);
}

/// Independent reference for IEEE half: sign, exponent, mantissa by formula.
fn f16_reference(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f64 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let man = f64::from(bits & 0x3ff);
    let v = match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    };
    (sign * v) as f32
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn f16_and_bf16_to_f32_exhaustive() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
    let mut w = SafetensorsWriter::new();
    w.add_tensor("h", Dtype::F16, &[256, 256], all.clone())
        .add_tensor("b", Dtype::BF16, &[65536], all);
    let f = SafetensorsFile::from_bytes(&w.to_bytes().unwrap(), "half").unwrap();
    let h = f.tensor("h").unwrap().to_f32_vec().unwrap();
    let b = f.tensor("b").unwrap().to_f32_vec().unwrap();
    assert_eq!((h.len(), b.len()), (65536, 65536));
    for bits in 0..=u16::MAX {
        let i = usize::from(bits);
        assert!(
            same(h[i], f16_reference(bits)),
            "f16 {bits:#06x}: {} vs {}",
            h[i],
            f16_reference(bits)
        );
        // bf16 is the top half of an f32.
        let want = f32::from_bits(u32::from(bits) << 16);
        assert!(same(b[i], want), "bf16 {bits:#06x}: {} vs {want}", b[i]);
    }
    // Spot values, in case both references above were wrong the same way.
    assert_eq!(
        (h[0x3c00], h[0xc000], h[0x7bff], h[0x0001]),
        (1.0, -2.0, 65504.0, 2f32.powi(-24))
    );
    assert_eq!((b[0x3f80], b[0x4049]), (1.0, 3.140625));
}

#[test]
fn as_f32_slice_is_zero_copy_and_refuses_otherwise() {
    let seed = common::seed("as_f32_slice", 0x5afe_7e45_0000_0002);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vals: Vec<f32> = (0..37).map(|_| rng.gen_range(-10.0..10.0)).collect();
    let mut w = SafetensorsWriter::new();
    w.add_f32("aligned", &[37], &vals)
        .add_tensor("odd", Dtype::U8, &[1], [7u8])
        .add_f32("misaligned", &[37], &vals)
        .add_tensor("ints", Dtype::I32, &[2], [0u8; 8]);
    let f = SafetensorsFile::from_bytes(&w.to_bytes().unwrap(), "zc").unwrap();

    let t = f.tensor("aligned").unwrap();
    let s = t.as_f32_slice().unwrap();
    assert_eq!(s, &vals[..]);
    assert_eq!(
        s.as_ptr().cast::<u8>(),
        t.data.as_ptr(),
        "must borrow, not copy"
    );
    assert_eq!(t.data.as_ptr(), f.bytes()[t.file_offset..].as_ptr());

    let t = f.tensor("misaligned").unwrap();
    assert_eq!(
        t.file_offset % 4,
        (f.tensor("aligned").unwrap().file_offset + 1) % 4
    );
    let e = t.as_f32_slice().unwrap_err();
    assert!(
        matches!(e, SafetensorsError::Misaligned { align: 4, .. }),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("\"misaligned\"") && msg.contains("zc") && msg.contains("4-byte"),
        "{msg}"
    );
    // The copying path still works.
    assert_eq!(t.to_f32_vec().unwrap(), vals);

    let t = f.tensor("ints").unwrap();
    let e = t.as_f32_slice().unwrap_err();
    assert!(
        matches!(
            e,
            SafetensorsError::WrongDtype {
                found: Dtype::I32,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"ints\""), "{e}");
    let e = t.to_f32_vec().unwrap_err();
    assert!(
        e.to_string().contains("F32, F16 or BF16") && e.to_string().contains("I32"),
        "{e}"
    );
}

#[test]
fn missing_tensor_names_tensor_and_file() {
    let mut w = SafetensorsWriter::new();
    w.add_f32("present", &[1], &[1.0]);
    let f = SafetensorsFile::from_bytes(&w.to_bytes().unwrap(), "some/file.safetensors").unwrap();
    let e = f.tensor("absent.weight").unwrap_err();
    assert!(matches!(e, SafetensorsError::MissingTensor { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("absent.weight") && msg.contains("some/file.safetensors"),
        "{msg}"
    );
    assert!(!f.contains("absent.weight"));
}

#[test]
fn writer_rejects_what_it_cannot_encode() {
    type Build = Box<dyn Fn(&mut SafetensorsWriter)>;
    let cases: Vec<(Build, &str)> = vec![
        (
            Box::new(|w| {
                w.add_f32("a", &[2], &[1.0]);
            }),
            "needs 8 bytes, got 4",
        ),
        (
            Box::new(|w| {
                w.add_f32("a", &[1], &[1.0]).add_f32("a", &[1], &[2.0]);
            }),
            "duplicate tensor name \"a\"",
        ),
        (
            Box::new(|w| {
                w.add_f32("__metadata__", &[1], &[1.0]);
            }),
            "reserved",
        ),
        (
            Box::new(|w| {
                w.add_metadata("k", "1").add_metadata("k", "2");
            }),
            "duplicate metadata key \"k\"",
        ),
        (
            Box::new(|w| {
                w.add_tensor("f4", Dtype::F4, &[3], [0u8; 2]);
            }),
            "non-representable",
        ),
        (
            Box::new(|w| {
                w.add_tensor("big", Dtype::F64, &[usize::MAX, 2], []);
            }),
            "non-representable",
        ),
    ];
    for (build, want) in cases {
        let mut w = SafetensorsWriter::new();
        build(&mut w);
        let e = w.to_bytes().unwrap_err();
        assert!(matches!(e, SafetensorsError::Writer { .. }), "{e}");
        assert!(e.to_string().contains(want), "{e} / {want}");
    }
}

#[test]
fn write_is_atomic_and_reports_io_errors() {
    let dir = common::scratch_dir("atomic");
    let path = dir.join("m.safetensors");
    std::fs::write(&path, b"old contents").unwrap();
    let mut w = SafetensorsWriter::new();
    w.add_f32("x", &[2], &[1.0, 2.0]);
    w.write(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
    // A failing write leaves the old file and no temporary behind.
    let mut bad = SafetensorsWriter::new();
    bad.add_f32("x", &[3], &[1.0]);
    assert!(bad.write(&path).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("m.safetensors")]);
    // A rename that fails (the target is a non-empty directory) removes the temporary.
    let sub = dir.join("sub");
    std::fs::create_dir_all(sub.join("inner")).unwrap();
    let e = w.write(&sub).unwrap_err();
    assert!(matches!(e, SafetensorsError::Io { .. }), "{e}");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("m.safetensors"), "sub".into()]
    );
    // Writing into a missing directory names the path.
    let missing = dir.join("no/such/dir/m.safetensors");
    let e = w.write(&missing).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::Io { .. }) && e.to_string().contains("no/such/dir"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_errors_name_the_path() {
    let dir = common::scratch_dir("open");
    let e = SafetensorsFile::open(dir.join("nope.safetensors")).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::Io { .. }) && e.to_string().contains("nope.safetensors"),
        "{e}"
    );
    for len in [0usize, 7] {
        let p = dir.join(format!("short{len}.safetensors"));
        std::fs::write(&p, vec![1u8; len]).unwrap();
        let e = SafetensorsFile::open(&p).unwrap_err();
        assert!(matches!(e, SafetensorsError::TooShort { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("short{len}.safetensors")),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dtype_names_sizes_and_parsing() {
    let want = [
        ("BOOL", 8),
        ("F4", 4),
        ("F6_E2M3", 6),
        ("F6_E3M2", 6),
        ("U8", 8),
        ("I8", 8),
        ("F8_E5M2", 8),
        ("F8_E4M3", 8),
        ("F8_E8M0", 8),
        ("I16", 16),
        ("U16", 16),
        ("F16", 16),
        ("BF16", 16),
        ("I32", 32),
        ("U32", 32),
        ("F32", 32),
        ("C64", 64),
        ("F64", 64),
        ("I64", 64),
        ("U64", 64),
    ];
    assert_eq!(Dtype::ALL.len(), want.len());
    for (d, (name, bits)) in Dtype::ALL.into_iter().zip(want) {
        assert_eq!((d.name(), d.bits()), (name, bits));
        assert_eq!(d.to_string(), name);
        assert_eq!(name.parse::<Dtype>().unwrap(), d);
        assert_eq!(d.byte_size(), (bits % 8 == 0).then_some(bits / 8));
    }
    assert!("f32".parse::<Dtype>().is_err(), "names are case-sensitive");
    assert_eq!(Dtype::F4.bytes_for(3), None);
    assert_eq!(Dtype::F6E2M3.bytes_for(4), Some(3));
    assert_eq!(Dtype::U64.bytes_for(u64::MAX), None);
}
