//! One test per validation error class, on hand-built files: the variant, and a message
//! that names the file and the tensor, key or limit.

mod common;

use common::raw;
use tg_safetensors::{SafetensorsError as E, SafetensorsFile, MAX_HEADER_LEN, MAX_JSON_ARRAY_LEN};

const FILE: &str = "bad.safetensors";

/// Parses `bytes` (both in-memory constructors must agree), expecting an error whose message
/// names the file and contains every string of `needles`.
fn fail(bytes: Vec<u8>, needles: &[&str]) -> E {
    let e1 = SafetensorsFile::from_bytes(&bytes, FILE).unwrap_err();
    let e = SafetensorsFile::from_vec(bytes, FILE).unwrap_err();
    assert_eq!(e.to_string(), e1.to_string());
    let msg = e.to_string();
    assert!(
        msg.starts_with(FILE),
        "message does not name the file: {msg}"
    );
    for n in needles {
        assert!(msg.contains(n), "message lacks {n:?}: {msg}");
    }
    println!("{msg}");
    e
}

fn entry(name: &str, dtype: &str, shape: &str, offsets: &str) -> String {
    format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}}}"#)
}

fn one(name: &str, dtype: &str, shape: &str, offsets: &str, data: &[u8]) -> Vec<u8> {
    raw(&format!("{{{}}}", entry(name, dtype, shape, offsets)), data)
}

#[test]
fn too_short() {
    for n in 0..8 {
        let e = fail(vec![0; n], &[&format!("{n} bytes"), "too short"]);
        assert!(matches!(e, E::TooShort { len, .. } if len == n as u64));
    }
}

#[test]
fn header_too_large() {
    for n in [MAX_HEADER_LEN + 1, 1 << 40, u64::MAX] {
        let mut b = n.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        let e = fail(b, &[&n.to_string(), &MAX_HEADER_LEN.to_string()]);
        assert!(matches!(e, E::HeaderTooLarge { header_len, .. } if header_len == n));
    }
}

#[test]
fn header_past_end_of_file() {
    let mut b = raw("{}", &[]);
    b[0] = 3; // header length 3, only 2 bytes follow
    let e = fail(b, &["header length 3", "10 bytes"]);
    assert!(matches!(
        e,
        E::HeaderOutOfBounds {
            header_len: 3,
            file_len: 10,
            ..
        }
    ));
    // At the cap and past the end.
    let mut b = MAX_HEADER_LEN.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert!(matches!(
        fail(b, &["runs past the end"]),
        E::HeaderOutOfBounds { .. }
    ));
}

#[test]
fn header_not_utf8() {
    let mut b = raw(r#"{"ab":1}"#, &[]);
    b[8 + 3] = 0xff;
    let e = fail(b, &["UTF-8", "offset 11"]);
    assert!(matches!(
        e,
        E::HeaderNotUtf8 {
            file_offset: 11,
            ..
        }
    ));
}

#[test]
fn header_not_an_object() {
    for h in ["[1,2]", " {}", "", "null", "\"{}\"", "1"] {
        let e = fail(raw(h, &[]), &["JSON object"]);
        assert!(matches!(e, E::HeaderNotObject { .. }), "{h:?}: {e}");
    }
}

#[test]
fn header_invalid_json() {
    let long = format!(
        "{{\"a\":{{\"dtype\":\"U8\",\"shape\":[{}],\"data_offsets\":[0,1]}}}}",
        vec!["1"; MAX_JSON_ARRAY_LEN + 1].join(",")
    );
    let limit = MAX_JSON_ARRAY_LEN.to_string();
    let cases: [(&str, &[&str]); 6] = [
        (r#"{"a":"#, &["EOF", "line 1"]),
        (r#"{"a":{}} x"#, &["trailing characters"]),
        (r#"{"a":{},}"#, &["trailing comma"]),
        (r#"{'a':1}"#, &["key must be a string"]),
        ("{\"a\":\"\u{1}\"}", &["control character"]),
        (&long, &[&limit, "shapes"]),
    ];
    for (h, needles) in cases {
        let e = fail(raw(h, &[1]), needles);
        assert!(matches!(e, E::InvalidJson { line: 1, .. }), "{e}");
    }
}

#[test]
fn deep_nesting_is_skipped_without_recursion() {
    // Below the depth the format uses, values are skipped iteratively: 100k levels of
    // nesting neither overflow the stack nor allocate a tree; the entry is then rejected.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let e = fail(raw(&deep, &[]), &["\"a\"", "expected an object"]);
    assert!(matches!(e, E::InvalidEntry { .. }));
    let deep = format!(
        "{{\"a\":{{\"dtype\":\"U8\",\"shape\":[{}{}],\"data_offsets\":[0,0]}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = fail(raw(&deep, &[]), &["\"a\"", "shape[0]", "array"]);
    assert!(matches!(e, E::InvalidEntry { .. }));
}

#[test]
fn duplicate_keys() {
    let a = entry("a", "U8", "[1]", "[0,1]");
    let e = fail(raw(&format!("{{{a},{a}}}"), &[0]), &["duplicate", "\"a\""]);
    assert!(matches!(e, E::DuplicateKey { ref key, .. } if key == "a"));
    // Two tensors with the same name but different entries: serde_json's map would keep
    // only the second one silently.
    let a2 = entry("a", "U8", "[1]", "[1,2]");
    assert!(matches!(
        fail(raw(&format!("{{{a},{a2}}}"), &[0, 0]), &["\"a\""]),
        E::DuplicateKey { .. }
    ));
    let m = r#""__metadata__":{"k":"v"}"#;
    let e = fail(
        raw(&format!("{{{m},{a},{m}}}"), &[0]),
        &["\"__metadata__\""],
    );
    assert!(matches!(e, E::DuplicateKey { .. }));
}

#[test]
fn invalid_metadata() {
    let cases: [(&str, &[&str]); 4] = [
        (
            r#"{"__metadata__":[1]}"#,
            &["__metadata__", "object", "array"],
        ),
        (r#"{"__metadata__":"x"}"#, &["__metadata__", "string \"x\""]),
        (
            r#"{"__metadata__":{"k":1}}"#,
            &["__metadata__", "\"k\"", "integer 1"],
        ),
        (
            r#"{"__metadata__":{"k":"a","k":"b"}}"#,
            &["__metadata__", "duplicate key \"k\""],
        ),
    ];
    for (h, needles) in cases {
        assert!(matches!(
            fail(raw(h, &[]), needles),
            E::InvalidMetadata { .. }
        ));
    }
}

#[test]
fn invalid_entries() {
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            r#"{"w":[1]}"#.into(),
            vec!["\"w\"", "expected an object", "array"],
        ),
        (r#"{"w":7}"#.into(), vec!["\"w\"", "integer 7"]),
        (
            r#"{"w":{"shape":[1],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "missing field \"dtype\""],
        ),
        (
            r#"{"w":{"dtype":"U8","data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "missing field \"shape\""],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1]}}"#.into(),
            vec!["\"w\"", "missing field \"data_offsets\""],
        ),
        (
            r#"{"w":{"dtype":1,"shape":[1],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "dtype must be a string"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":1,"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape must be an array"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape[0]", "negative integer -1"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1,1.5],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape[1]", "1.5"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape[0]", "not an integer"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape[0]", "string \"1\""],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "shape[0]", "array"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}}"#.into(),
            vec!["\"w\"", "exactly 2", "found 1"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#.into(),
            vec!["\"w\"", "exactly 2", "found 3"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":null}}"#.into(),
            vec!["\"w\"", "data_offsets must be an array", "null"],
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,true]}}"#.into(),
            vec!["\"w\"", "data_offsets[1]", "boolean"],
        ),
        (
            r#"{"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.into(),
            vec!["\"w\"", "duplicate field \"dtype\""],
        ),
    ];
    for (h, needles) in cases {
        let e = fail(raw(&h, &[0]), &needles);
        assert!(
            matches!(e, E::InvalidEntry { ref tensor, .. } if tensor == "w"),
            "{h}: {e}"
        );
    }
}

#[test]
fn unknown_dtype() {
    for d in ["F33", "f32", "", "FLOAT", "F8_E4M3FN"] {
        let e = fail(
            one("w", d, "[1]", "[0,1]", &[0]),
            &["\"w\"", &format!("unknown dtype {d:?}")],
        );
        assert!(matches!(e, E::UnknownDtype { ref dtype, .. } if dtype == d));
    }
}

#[test]
fn shape_overflow() {
    let cases: [(&str, &str, &str); 4] = [
        ("U8", "[18446744073709551615,2]", "element count"),
        ("F32", "[4294967296,4294967296]", "element count"),
        // The product of the non-zero dims must fit even when a dim is 0.
        (
            "U8",
            "[4294967296,0,4294967296,4294967296]",
            "element count",
        ),
        ("F64", "[4611686018427387904]", "byte size"),
    ];
    for (dtype, shape, limit) in cases {
        let e = fail(
            one("w", dtype, shape, "[0,0]", &[]),
            &["\"w\"", "overflows", limit, dtype],
        );
        assert!(matches!(e, E::ShapeOverflow { .. }), "{e}");
    }
}

#[test]
fn sub_byte_partial_bytes() {
    let e = fail(
        one("w", "F4", "[3]", "[0,2]", &[0, 0]),
        &["\"w\"", "3 elements of F4", "4 bits"],
    );
    assert!(matches!(e, E::PartialBytes { n_elements: 3, .. }));
    let e = fail(
        one("w", "F6_E3M2", "[2,3]", "[0,5]", &[0; 5]),
        &["6 elements", "6 bits"],
    );
    assert!(matches!(e, E::PartialBytes { .. }));
    // A whole number of bytes is fine: 4 F6 elements are 3 bytes.
    SafetensorsFile::from_vec(one("w", "F6_E2M3", "[4]", "[0,3]", &[0; 3]), FILE).unwrap();
}

#[test]
fn reversed_offsets() {
    let e = fail(
        one("w", "U8", "[2]", "[5,3]", &[0; 5]),
        &["\"w\"", "[5, 3]", "begin > end"],
    );
    assert!(matches!(
        e,
        E::ReversedOffsets {
            begin: 5,
            end: 3,
            ..
        }
    ));
}

#[test]
fn size_mismatch() {
    let e = fail(
        one("w", "F32", "[2,3]", "[0,20]", &[0; 20]),
        &["\"w\"", "[2, 3]", "needs 24 bytes", "hold 20"],
    );
    assert!(matches!(e, E::SizeMismatch { expected: 24, .. }));
    // Scalar: one element.
    let e = fail(
        one("s", "F64", "[]", "[0,4]", &[0; 4]),
        &["\"s\"", "needs 8 bytes"],
    );
    assert!(matches!(e, E::SizeMismatch { .. }));
}

#[test]
fn out_of_bounds() {
    let e = fail(
        one("w", "F32", "[2]", "[0,8]", &[0; 4]),
        &["\"w\"", "[0, 8]", "4 bytes"],
    );
    assert!(matches!(e, E::OutOfBounds { data_len: 4, .. }));
    let far = 1u64 << 63;
    let e = fail(
        one("w", "F32", "[1]", &format!("[{far},{}]", far + 4), &[0; 4]),
        &["\"w\"", &far.to_string()],
    );
    assert!(matches!(e, E::OutOfBounds { .. }));
}

#[test]
fn overlapping_tensors() {
    let h = format!(
        "{{{},{}}}",
        entry("a", "U8", "[4]", "[0,4]"),
        entry("b", "U8", "[4]", "[2,6]")
    );
    let e = fail(
        raw(&h, &[0; 6]),
        &["\"a\"", "\"b\"", "[0, 4]", "[2, 6]", "overlap"],
    );
    assert!(matches!(e, E::Overlap { ref first, ref second, .. } if first == "a" && second == "b"));
    // The same range twice (header order reversed: still reported in offset order).
    let h = format!(
        "{{{},{}}}",
        entry("y", "U8", "[4]", "[0,4]"),
        entry("x", "I8", "[4]", "[0,4]")
    );
    assert!(matches!(
        fail(raw(&h, &[0; 4]), &["\"x\"", "\"y\""]),
        E::Overlap { .. }
    ));
    // A zero-size tensor inside another one's bytes.
    let h = format!(
        "{{{},{}}}",
        entry("a", "U8", "[4]", "[0,4]"),
        entry("z", "U8", "[0]", "[2,2]")
    );
    assert!(matches!(
        fail(raw(&h, &[0; 4]), &["\"a\"", "\"z\""]),
        E::Overlap { .. }
    ));
}

#[test]
fn holes_in_the_data_section() {
    // At the start.
    let e = fail(
        one("w", "U8", "[2]", "[2,4]", &[0; 4]),
        &["bytes 0..2", "start of the data section", "\"w\""],
    );
    assert!(matches!(
        e,
        E::Hole {
            begin: 0,
            end: 2,
            after: None,
            ..
        }
    ));
    // Between two tensors.
    let h = format!(
        "{{{},{}}}",
        entry("a", "U8", "[2]", "[0,2]"),
        entry("b", "U8", "[2]", "[5,7]")
    );
    let e = fail(
        raw(&h, &[0; 7]),
        &["bytes 2..5", "after tensor \"a\"", "before tensor \"b\""],
    );
    assert!(matches!(
        e,
        E::Hole {
            begin: 2,
            end: 5,
            ..
        }
    ));
    // At the end (trailing bytes nobody owns).
    let e = fail(
        one("w", "U8", "[2]", "[0,2]", &[0; 3]),
        &[
            "bytes 2..3",
            "after tensor \"w\"",
            "end of the data section",
        ],
    );
    assert!(matches!(e, E::Hole { before: None, .. }));
    // No tensors but data.
    let e = fail(raw("{}", &[1, 2]), &["bytes 0..2"]);
    assert!(matches!(
        e,
        E::Hole {
            after: None,
            before: None,
            ..
        }
    ));
}

#[test]
fn file_name_in_errors_from_open() {
    let dir = common::scratch_dir("errors-open");
    let p = dir.join("holey.safetensors");
    std::fs::write(&p, one("w", "U8", "[2]", "[0,2]", &[0; 3])).unwrap();
    let e = SafetensorsFile::open(&p).unwrap_err();
    assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
