//! Regression inputs: every file in `tests/crashers/` is parsed without panicking and gives
//! the outcome its name announces (`<ErrorVariant>--*.safetensors` or `ok--*.safetensors`;
//! see tests/crashers/README.md).

use std::panic::catch_unwind;
use std::path::PathBuf;

use tg_safetensors::SafetensorsFile;

#[test]
fn crasher_files_do_not_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crashers");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("safetensors"))
        .collect();
    entries.sort();
    for path in &entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (expect, _) = name
            .split_once("--")
            .unwrap_or_else(|| panic!("{name}: name must be <Variant>--<what>.safetensors"));
        let bytes = std::fs::read(path).unwrap();
        let outcome = catch_unwind(|| {
            let r = SafetensorsFile::from_bytes(&bytes, name.as_str());
            if let Ok(f) = &r {
                for t in f.tensors() {
                    let _ = (t.to_f32_vec(), t.as_f32_slice());
                }
            }
            r.map(|_| ())
        });
        match outcome {
            Err(_) => panic!("{name}: reader panicked"),
            Ok(Ok(())) => assert_eq!(expect, "ok", "{name}: parsed fine"),
            Ok(Err(e)) => {
                let dbg = format!("{e:?}");
                assert!(
                    dbg.starts_with(&format!("{expect} ")),
                    "{name}: expected {expect}, got {e}"
                );
                assert!(e.to_string().contains(&name), "{e}");
                println!("{e}");
            }
        }
        // Through the memory map: same outcome, and the message names the path.
        match SafetensorsFile::open(path) {
            Ok(_) => assert_eq!(expect, "ok"),
            Err(e) => {
                assert!(format!("{e:?}").starts_with(&format!("{expect} ")), "{e}");
                assert!(
                    e.to_string().starts_with(&path.display().to_string()),
                    "{e}"
                );
            }
        }
    }
    assert!(
        entries.len() >= 20,
        "expected the hand-made regression files, found {}",
        entries.len()
    );
}
