//! Incremental decoding for streaming generation.

use crate::{Tokenizer, TokenizerError};

/// Turns token ids, fed one at a time, into text as soon as whole UTF-8
/// characters are available.
///
/// Byte-fallback tokens carry single bytes of a multi-byte character; those
/// bytes are held back until the character is complete. Bytes that can never
/// form a valid character come out as U+FFFD, one per maximal invalid subpart
/// (the same convention as [`Tokenizer::decode`]), so concatenating every
/// [`push`](StreamDecoder::push) output and the [`finish`](StreamDecoder::finish)
/// output equals `decode` of the whole id sequence.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    render_special: bool,
    pending: Vec<u8>,
    first: bool,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder over `tok`; `render_special` as in [`Tokenizer::decode`].
    pub fn new(tok: &'a Tokenizer, render_special: bool) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            render_special,
            pending: Vec::new(),
            first: true,
        }
    }

    /// Adds one token; returns the text completed by it (often empty while a
    /// multi-byte character is still incomplete).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        let piece = self.tok.token_bytes(id, self.render_special)?;
        let piece = self.tok.strip_first(piece, self.first);
        self.first = false;
        self.pending.extend_from_slice(piece);
        Ok(self.drain(false))
    }

    /// Bytes held back, waiting for the rest of a UTF-8 character.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: any incomplete character left over becomes U+FFFD.
    pub fn finish(mut self) -> String {
        self.drain(true)
    }

    /// Takes the longest decodable prefix of `pending`; an incomplete
    /// trailing character stays unless `at_end`.
    fn drain(&mut self, at_end: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix was just validated.
                    out.push_str(std::str::from_utf8(&rest[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &rest[valid + bad..];
                        }
                        None if at_end => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let len = self.pending.len();
        self.pending.drain(..len - keep);
        out
    }
}
