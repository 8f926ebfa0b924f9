//! `tg tokenize`: the token ids of a text under a GGUF file's vocabulary
//! (SentencePiece or byte-level BPE), with their pieces or as JSON. Only
//! the tokenizer metadata is read; no weights are loaded.

use std::io::Write;
use std::path::Path;

use tg_models::Tokenizer;

/// Tokenizes `text` with the vocabulary of the GGUF file `model` and prints
/// the result: with `json` one line `{"ids":[...]}`, otherwise one line per
/// token with its id and piece (the text it decodes to, control tokens
/// included, Rust-escaped; bytes that are not whole UTF-8 characters as
/// `<0xNN>`).
///
/// `parse_special` lets special-token texts (`<start_of_turn>`,
/// `<|im_start|>`) become those tokens. `add_special`: `None` adds what the
/// model's metadata asks for (`add_bos_token`, `add_eos_token`; llama.cpp's
/// `add_special = true`: BOS for Gemma, nothing for Qwen 2), `Some(false)`
/// adds nothing, `Some(true)` always prepends BOS (and appends EOS when the
/// model asks for it).
pub fn run(model: &Path, text: &str, json: bool, parse_special: bool, add_special: Option<bool>) -> Result<(), String> {
    let f = tg_gguf::GgufFile::open(model).map_err(|e| format!("cannot open {}: {e}", model.display()))?;
    let tok = Tokenizer::from_gguf(&f).map_err(|e| format!("{}: {e}", model.display()))?;
    let ids = encode(&tok, text, parse_special, add_special);

    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| format!("cannot write the output: {e}");
    if json {
        let obj = serde_json::json!({ "ids": ids });
        writeln!(out, "{obj}").map_err(io)?;
        return Ok(());
    }
    for &id in &ids {
        let bytes = tok.token_bytes(id, true).map_err(|e| e.to_string())?;
        writeln!(out, "{id:>7} {}", show_piece(bytes)).map_err(io)?;
    }
    Ok(())
}

/// The ids of `text` under the `add_special` policy of [`run`].
fn encode(tok: &Tokenizer, text: &str, parse_special: bool, add_special: Option<bool>) -> Vec<u32> {
    match add_special {
        None => tok.encode(text, true, parse_special),
        Some(false) => tok.encode(text, false, parse_special),
        Some(true) => {
            let mut ids = tok.encode(text, true, parse_special);
            if !tok.add_bos() {
                ids.insert(0, tok.bos());
            }
            ids
        }
    }
}

/// A piece for display: a quoted, escaped string when the bytes are UTF-8,
/// else every byte as `<0xNN>`.
fn show_piece(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => format!("{s:?}"),
        Err(_) => bytes.iter().map(|b| format!("<0x{b:02X}>")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::show_piece;

    #[test]
    fn pieces_are_quoted_or_shown_as_bytes() {
        assert_eq!(show_piece(b" world"), "\" world\"");
        assert_eq!(show_piece(b"a\nb"), "\"a\\nb\"");
        assert_eq!(show_piece(&[0xE6, 0x97]), "<0xE6><0x97>");
        assert_eq!(show_piece(b""), "\"\"");
    }
}
