//! Regression inputs: every file in `tests/crashers/` must parse to an error (or, for
//! names starting with `ok-`, succeed) without panicking. Inputs found by the mutation
//! fuzzer or cargo-fuzz go here, along with hand-made hostile files.

use std::path::PathBuf;

use tg_gguf::GgufFile;

#[test]
fn crasher_files_do_not_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crashers");
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.extension().and_then(|e| e.to_str()) != Some("gguf") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| GgufFile::from_bytes(bytes.clone()).map(|_| ()));
        match r {
            Err(_) => panic!("{name}: parser panicked"),
            Ok(Ok(())) => assert!(
                name.starts_with("ok-"),
                "{name}: expected an error, parsed fine"
            ),
            Ok(Err(e)) => {
                assert!(!name.starts_with("ok-"), "{name}: {e}");
                println!("{name}: {e}");
            }
        }
        // The path-based reader reports the same and names the file.
        if let Err(e) = GgufFile::open(&path) {
            assert!(e.to_string().contains(&name), "{e}");
        }
        n += 1;
    }
    assert!(n >= 9, "expected the hand-made regression files, found {n}");
}
