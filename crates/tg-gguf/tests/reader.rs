//! Reader/writer round trips and every documented error path.

use tg_gguf::value::type_id;
use tg_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, TensorInfo, Value};

fn parse(w: &GgufWriter) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(w.to_bytes().expect("writer"))
}

fn small_valid() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "toy")
        .add("toy.count", 7u32)
        .add("toy.flag", true)
        .add("toy.names", vec!["a", "bb", "ccc"]);
    w.add_f32_tensor("a", &[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    w.add_tensor(
        "q",
        &[64, 3],
        GgmlType::Q8_0,
        tg_quant::random_blocks(GgmlType::Q8_0, 192, 1),
    );
    w
}

#[test]
fn roundtrip_all_value_types_and_tensors() {
    let mut w = GgufWriter::new();
    let vals: Vec<(&str, Value)> = vec![
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f32", Value::F32(-1.5)),
        ("f64", Value::F64(1e300)),
        ("bool", Value::Bool(false)),
        ("str", Value::String("héllo ▁wörld".into())),
        ("empty_str", Value::String(String::new())),
        ("arr_i32", Value::from(vec![1i32, -2, 3])),
        ("arr_empty", Value::Array(vec![])),
        (
            "arr_nested",
            Value::Array(vec![Value::from(vec![1u8, 2]), Value::from(vec![3u8])]),
        ),
        ("arr_str", Value::from(vec!["x", "", "zz"])),
    ];
    for (k, v) in &vals {
        w.add(*k, v.clone());
    }
    let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    w.add_f32_tensor("t.f32", &[3, 2], &data);
    w.add_tensor(
        "t.q4k",
        &[256, 2],
        GgmlType::Q4_K,
        tg_quant::random_blocks(GgmlType::Q4_K, 512, 9),
    );
    w.add_tensor(
        "t.scalar",
        &[],
        GgmlType::F32,
        2.5f32.to_le_bytes().to_vec(),
    );
    w.add_tensor("t.empty", &[0, 5], GgmlType::F16, vec![]);
    w.add_tensor("t.4d", &[2, 1, 3, 1], GgmlType::I8, vec![1, 2, 3, 4, 5, 6]);
    let f = parse(&w).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.metadata().len(), vals.len());
    for ((k, v), (k2, v2)) in vals.iter().zip(f.metadata()) {
        assert_eq!(k, k2);
        assert_eq!(v, v2, "{k}");
    }
    let t = f.tensor("t.f32").unwrap();
    assert_eq!((t.row_len(), t.n_rows(), t.n_elements()), (3, 2, 6));
    assert_eq!(t.shape_row_major(), vec![2, 3]);
    assert_eq!(f.dequantize("t.f32").unwrap(), data);
    let q = f.tensor("t.q4k").unwrap();
    assert_eq!(
        f.tensor_bytes(q),
        tg_quant::random_blocks(GgmlType::Q4_K, 512, 9).as_slice()
    );
    assert_eq!(q.offset % 32, 0);
    assert_eq!(
        f.tensor_bytes(q).as_ptr() as usize % 32,
        0,
        "owned storage keeps tensor data aligned"
    );
    let s = f.tensor("t.scalar").unwrap();
    assert_eq!((s.n_elements(), s.row_len(), s.n_rows()), (1, 1, 1));
    assert_eq!(f.dequantize("t.scalar").unwrap(), vec![2.5]);
    let e = f.tensor("t.empty").unwrap();
    assert_eq!((e.n_elements(), e.n_bytes), (0, 0));
    assert_eq!(f.tensor("t.4d").unwrap().n_rows(), 3);
    assert_eq!(
        f.tensors()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["t.f32", "t.q4k", "t.scalar", "t.empty", "t.4d"]
    );
}

#[test]
fn getters_accept_fitting_integer_widths_and_reject_others() {
    let mut w = GgufWriter::new();
    w.add("u8", 5u8)
        .add("neg", -1i32)
        .add("big", 5_000_000_000u64)
        .add("i64small", 7i64)
        .add("f64", 0.25f64)
        .add("s", "x")
        .add("ints", Value::from(vec![1u8, 2, 255]))
        .add("negs", Value::from(vec![-1i64, 2]))
        .add("mixed_floats", Value::from(vec![1.5f32]))
        .add("strs", Value::from(vec!["a", "b"]));
    let f = parse(&w).unwrap();
    assert_eq!(f.get_u32("u8").unwrap(), 5);
    assert_eq!(f.get_u64("i64small").unwrap(), 7);
    assert_eq!(f.get_i32("neg").unwrap(), -1);
    assert_eq!(f.get_u64("big").unwrap(), 5_000_000_000);
    assert_eq!(f.get_f32("f64").unwrap(), 0.25);
    assert_eq!(f.get_i32_array("ints").unwrap(), vec![1, 2, 255]);
    assert_eq!(f.get_u32_array("ints").unwrap(), vec![1, 2, 255]);
    assert_eq!(f.get_i32_array("negs").unwrap(), vec![-1, 2]);
    assert_eq!(f.get_f32_array("mixed_floats").unwrap(), vec![1.5]);
    assert_eq!(f.get_str_array("strs").unwrap(), vec!["a", "b"]);

    let wrong = |r: Result<_, GgufError>, key: &str| match r {
        Err(GgufError::WrongType { key: k, .. }) => assert_eq!(k, key),
        other => panic!("{key}: expected WrongType, got {other:?}"),
    };
    wrong(f.get_u32("neg").map(|_| ()), "neg");
    wrong(f.get_u32("big").map(|_| ()), "big");
    wrong(f.get_u32("s").map(|_| ()), "s");
    wrong(f.get_str("u8").map(|_| ()), "u8");
    wrong(f.get_bool("u8").map(|_| ()), "u8");
    wrong(f.get_u32_array("negs").map(|_| ()), "negs");
    wrong(f.get_str_array("ints").map(|_| ()), "ints");
    wrong(f.get_f32_array("s").map(|_| ()), "s");
    let msg = f.get_u32("big").unwrap_err().to_string();
    assert!(
        msg.contains("u64 5000000000") && msg.contains("<memory>"),
        "{msg}"
    );
    assert!(
        matches!(f.get_u32("missing"), Err(GgufError::MissingKey { key, .. }) if key == "missing")
    );
    assert!(matches!(f.tensor("zz"), Err(GgufError::MissingTensor { name, .. }) if name == "zz"));
}

#[test]
fn version_2_and_custom_alignment() {
    let mut w = small_valid();
    w.set_version(2).set_alignment(64);
    let f = parse(&w).unwrap();
    assert_eq!((f.version(), f.alignment()), (2, 64));
    for t in f.tensors() {
        assert_eq!(t.offset % 64, 0);
    }
    assert_eq!(f.data_offset() % 64, 0);
}

#[test]
fn open_from_disk_and_io_error() {
    let dir = std::env::temp_dir().join(format!("tg-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("small.gguf");
    small_valid().write_to(&p).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(f.path(), Some(p.as_path()));
    assert_eq!(
        f.get_str_array("toy.names").unwrap(),
        vec!["a", "bb", "ccc"]
    );
    assert_eq!(
        f.bytes().as_ptr() as usize % 4096,
        0,
        "mmap is page aligned"
    );
    let missing = dir.join("missing.gguf");
    let err = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }));
    assert!(err.to_string().contains("missing.gguf"), "{err}");
    // Errors from a file name the path.
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"GGML\x03\0\0\0").unwrap();
    let err = GgufFile::open(&bad).unwrap_err();
    assert!(err.to_string().contains("bad.gguf"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = small_valid().to_bytes().unwrap();
    assert!(GgufFile::from_bytes(bytes.clone()).is_ok());
    for n in 0..bytes.len() {
        let r = GgufFile::from_bytes(bytes[..n].to_vec());
        // Padding after the last tensor is not required, so only cuts inside real data fail.
        let last = GgufFile::from_bytes(bytes.clone()).unwrap();
        let needed = last
            .tensors()
            .iter()
            .map(|t| t.offset as usize + t.n_bytes)
            .max()
            .unwrap();
        if n < needed {
            assert!(r.is_err(), "truncation at {n} accepted");
        }
    }
    // Header (24) + key #0 (8 + 20) + type (4) + "toy" (8 + 3) = 67; key #1 is
    // "toy.count" (8 + 9 bytes), cut 5 bytes into its text.
    let err = GgufFile::from_bytes(bytes[..80].to_vec()).unwrap_err();
    match &err {
        GgufError::Truncated {
            offset,
            what,
            needed,
            available,
            ..
        } => {
            assert_eq!((*offset, *needed, *available), (75, 9, 5), "{err}");
            assert!(what.contains("metadata key #1"), "{what}");
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = small_valid().to_bytes().unwrap();
    b[..4].copy_from_slice(b"GGML");
    let err = GgufFile::from_bytes(b.clone()).unwrap_err();
    assert!(matches!(err, GgufError::BadMagic { magic, .. } if &magic == b"GGML"));
    assert!(err.to_string().contains("GGML"), "{err}");
    for (v, hint) in [
        (1u32, "v1"),
        (4, ""),
        (0x0300_0000, "big-endian"),
        (u32::MAX, ""),
    ] {
        let mut b = small_valid().to_bytes().unwrap();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        let err = GgufFile::from_bytes(b).unwrap_err();
        assert!(
            matches!(err, GgufError::UnsupportedVersion { version, .. } if version == v),
            "{err:?}"
        );
        assert!(err.to_string().contains(hint), "{err}");
    }
    assert!(matches!(
        GgufFile::from_bytes(vec![]),
        Err(GgufError::Truncated { .. })
    ));
}

#[test]
fn tensor_errors() {
    // data past end
    let mut b = small_valid().to_bytes().unwrap();
    let f = GgufFile::from_bytes(b.clone()).unwrap();
    let q = f.tensor("q").unwrap().clone();
    b.truncate(q.offset as usize + q.n_bytes - 1);
    let err = GgufFile::from_bytes(b).unwrap_err();
    match &err {
        GgufError::TensorOutOfBounds {
            tensor,
            start,
            end,
            file_len,
            ..
        } => {
            assert_eq!(tensor, "q");
            assert_eq!(
                (*start, *end),
                (q.offset as u128, (q.offset + q.n_bytes as u64) as u128)
            );
            assert_eq!(*file_len as u128, *end - 1);
        }
        e => panic!("{e:?}"),
    }

    let one = |build: &dyn Fn(&mut GgufWriter)| {
        let mut w = GgufWriter::new();
        w.add("k", 1u32);
        build(&mut w);
        parse(&w).unwrap_err()
    };
    let err = one(&|w| {
        w.add_tensor_unchecked("old", &[32], 4, vec![0; 20]);
    });
    assert!(
        matches!(&err, GgufError::UnknownGgmlType { tensor, type_id: 4, .. } if tensor == "old"),
        "{err:?}"
    );
    let err = one(&|w| {
        w.add_tensor_unchecked("five", &[1, 1, 1, 1, 1], 0, vec![0; 4]);
    });
    assert!(
        matches!(&err, GgufError::TooManyDims { tensor, n_dims: 5, max: 4, .. } if tensor == "five"),
        "{err:?}"
    );
    let err = one(&|w| {
        w.add_tensor_unchecked("odd", &[30, 2], GgmlType::Q4_0 as u32, vec![0; 64]);
    });
    assert!(
        matches!(
            &err,
            GgufError::RowNotBlockMultiple {
                row_len: 30,
                block: 32,
                ..
            }
        ),
        "{err:?}"
    );
    for dims in [
        &[1u64 << 32, 1 << 32, 2][..],
        &[1 << 63, 2],
        &[u64::MAX],
        &[1 << 62, 1 << 1],
    ] {
        let err = one(&|w| {
            w.add_tensor_unchecked("huge", dims, 0, vec![]);
        });
        assert!(
            matches!(&err, GgufError::SizeOverflow { tensor, .. } if tensor == "huge"),
            "{dims:?}: {err:?}"
        );
    }
    let err = one(&|w| {
        w.add_tensor_entry("mis", &[4], 0, 16)
            .append_raw_data(&[0; 64]);
    });
    assert!(
        matches!(
            &err,
            GgufError::MisalignedTensor {
                offset: 16,
                alignment: 32,
                ..
            }
        ),
        "{err:?}"
    );
    let err = one(&|w| {
        w.add_tensor_entry("a", &[16], 0, 0)
            .add_tensor_entry("b", &[4], 0, 32)
            .append_raw_data(&[0; 128]);
    });
    match &err {
        GgufError::OverlappingTensors {
            first,
            second,
            first_start,
            first_end,
            second_start,
            ..
        } => {
            assert_eq!((first.as_str(), second.as_str()), ("a", "b"));
            assert_eq!(first_end - first_start, 64);
            assert_eq!(second_start - first_start, 32);
        }
        e => panic!("{e:?}"),
    }
    // Adjacent (touching) tensors and empty tensors at the same offset are fine.
    let mut w = GgufWriter::new();
    w.add_tensor_entry("a", &[8], 0, 0)
        .add_tensor_entry("b", &[8], 0, 32)
        .add_tensor_entry("e", &[0], 0, 32)
        .append_raw_data(&[0; 64]);
    parse(&w).unwrap();
    let err = one(&|w| {
        w.add_f32_tensor("dup", &[1], &[1.0])
            .add_f32_tensor("dup", &[1], &[2.0]);
    });
    assert!(
        matches!(&err, GgufError::DuplicateTensor { name, .. } if name == "dup"),
        "{err:?}"
    );
    let err = one(&|w| {
        w.add_tensor_entry("far", &[8], 0, u64::MAX - 31);
    });
    assert!(
        matches!(&err, GgufError::TensorOutOfBounds { .. }),
        "{err:?}"
    );
}

#[test]
fn metadata_errors() {
    let mut w = GgufWriter::new();
    w.add("dup", 1u32).add("x", 2u32).add("dup", 3u32);
    let err = parse(&w).unwrap_err();
    assert!(
        matches!(&err, GgufError::DuplicateKey { key, .. } if key == "dup"),
        "{err:?}"
    );

    for bad in [
        Value::U32(0),
        Value::U32(48),
        Value::String("32".into()),
        Value::I32(-32),
    ] {
        let mut w = GgufWriter::new();
        w.add("general.alignment", bad.clone());
        let b = {
            // The writer itself refuses a bad alignment; encode with a good one and patch.
            let mut w2 = GgufWriter::new();
            w2.add("general.alignment", Value::U32(32));
            assert!(w.to_bytes().is_err());
            if let Value::U32(v) = bad {
                let mut b = w2.to_bytes().unwrap();
                let n = b.len();
                // value is the last 4 bytes of the header before padding: find it
                let pos = (0..n - 3)
                    .rev()
                    .find(|&i| b[i..i + 4] == 32u32.to_le_bytes())
                    .unwrap();
                b[pos..pos + 4].copy_from_slice(&v.to_le_bytes());
                b
            } else {
                continue;
            }
        };
        let err = GgufFile::from_bytes(b).unwrap_err();
        assert!(
            matches!(err, GgufError::BadAlignment { .. }),
            "{bad:?}: {err:?}"
        );
    }

    // Hand-built single-KV files for value-level errors.
    let kv = |key: &[u8], ty: u32, payload: &[u8]| {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(payload);
        GgufFile::from_bytes(b)
    };
    assert!(kv(b"ok", type_id::BOOL, &[1]).is_ok());
    let err = kv(b"flag", type_id::BOOL, &[2]).unwrap_err();
    assert!(
        matches!(&err, GgufError::InvalidBool { key, byte: 2, .. } if key == "flag"),
        "{err:?}"
    );
    let err = kv(b"\xff\xfe", type_id::U8, &[0]).unwrap_err();
    assert!(matches!(&err, GgufError::InvalidUtf8 { .. }), "{err:?}");
    let mut s = 2u64.to_le_bytes().to_vec();
    s.extend_from_slice(b"\xc3\x28");
    let err = kv(b"s", type_id::STRING, &s).unwrap_err();
    assert!(
        matches!(&err, GgufError::InvalidUtf8 { what, .. } if what.contains("\"s\"")),
        "{err:?}"
    );
    let err = kv(b"t", 13, &[0; 8]).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownValueType { type_id: 13, .. }),
        "{err:?}"
    );
    // absurd string length
    let err = kv(b"s", type_id::STRING, &u64::MAX.to_le_bytes()).unwrap_err();
    assert!(
        matches!(
            &err,
            GgufError::Truncated {
                needed: u64::MAX,
                available: 0,
                ..
            }
        ),
        "{err:?}"
    );
    // absurd array count (each u32 needs 4 bytes; 3 bytes of payload left)
    let mut a = type_id::U32.to_le_bytes().to_vec();
    a.extend_from_slice(&(1u64 << 40).to_le_bytes());
    a.extend_from_slice(&[0; 3]);
    let err = kv(b"a", type_id::ARRAY, &a).unwrap_err();
    assert!(
        matches!(&err, GgufError::ImplausibleLength { count, needed, available: 3, .. } if *count == 1 << 40 && *needed == 1 << 42),
        "{err:?}"
    );
    // array with unknown element type
    let mut a = 99u32.to_le_bytes().to_vec();
    a.extend_from_slice(&1u64.to_le_bytes());
    let err = kv(b"a", type_id::ARRAY, &a).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownValueType { type_id: 99, .. }),
        "{err:?}"
    );
    // deep nesting: array of array of ... (each level: type ARRAY, count 1)
    let mut a = Vec::new();
    for _ in 0..100 {
        a.extend_from_slice(&type_id::ARRAY.to_le_bytes());
        a.extend_from_slice(&1u64.to_le_bytes());
    }
    a.extend_from_slice(&type_id::U8.to_le_bytes());
    a.extend_from_slice(&0u64.to_le_bytes());
    let err = kv(b"deep", type_id::ARRAY, &a).unwrap_err();
    assert!(
        matches!(&err, GgufError::NestingTooDeep { limit: 8, .. }),
        "{err:?}"
    );

    // absurd counts in the header
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    let err = GgufFile::from_bytes(b.clone()).unwrap_err();
    assert!(
        matches!(&err, GgufError::ImplausibleLength { what, .. } if what == "tensor count"),
        "{err:?}"
    );
    b[16..24].copy_from_slice(&(1u64 << 50).to_le_bytes());
    b[8..16].copy_from_slice(&0u64.to_le_bytes());
    let err = GgufFile::from_bytes(b).unwrap_err();
    assert!(
        matches!(&err, GgufError::ImplausibleLength { what, .. } if what == "metadata count"),
        "{err:?}"
    );
}

#[test]
fn writer_rejects_inconsistent_input() {
    let mut w = GgufWriter::new();
    w.add_tensor("t", &[32], GgmlType::Q8_0, vec![0; 33]);
    assert!(matches!(w.to_bytes(), Err(GgufError::Writer { .. })));
    let mut w = GgufWriter::new();
    w.add("mixed", Value::Array(vec![Value::U8(1), Value::I8(1)]));
    assert!(matches!(w.to_bytes(), Err(GgufError::Writer { .. })));
}

#[test]
fn foreign_tensor_info_gives_empty_slice() {
    let f = small_valid().build().unwrap();
    let foreign = TensorInfo {
        name: "x".into(),
        dims: vec![1 << 40],
        ty: GgmlType::F32,
        offset: u64::MAX - 3,
        n_bytes: usize::MAX,
    };
    assert!(f.tensor_bytes(&foreign).is_empty());
}
