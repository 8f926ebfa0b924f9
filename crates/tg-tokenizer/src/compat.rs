//! Token-attribute adjustments llama.cpp makes from token *texts* when it
//! loads a vocabulary. They change tokenization (a token that becomes a
//! control token is no longer matched without `parse_special`), decoding
//! (control tokens are hidden) and end-of-generation detection, so matching
//! llama.cpp token for token requires applying them too.
//!
//! Example: Gemma 3's `</s>` is a user-defined token, but llama.cpp lists
//! `</s>` among end-of-generation texts, which also turns it into a control
//! token: `"<s>s</s>"` encodes `</s>` as `</` `s` `>` unless `parse_special`.
//!
//! The lists follow the llama.cpp version the fixtures were generated with.
//! Where llama.cpp picks one token per category in hash-map order, every
//! token with a listed text is marked here (vocabularies have at most one).

use crate::tokenizer::attr;

/// Texts llama.cpp marks as control tokens (end-of-turn / end-of-message and
/// fill-in-the-middle markers), without making them end generation.
const CONTROL_TEXTS: &[&str] = &[
    // fill-in-the-middle prefix
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    // suffix
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    // middle
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

/// Fill-in-the-middle pad / repository / file-separator texts: control
/// tokens that also end generation.
const FIM_EOG_TEXTS: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

/// Texts of end-of-generation tokens (also made control tokens).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts forced to plain user-defined tokens (always matched and rendered).
const USER_DEFINED_TEXTS: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Applies the text rules to `attrs` and extends `eog` (unsorted; the caller
/// sorts and dedups). `text(id)` gives token texts; `lookup` maps text to id.
pub(crate) fn apply_text_rules(
    lookup: impl Fn(&str) -> Option<u32>,
    attrs: &mut [u8],
    eog: &mut Vec<u32>,
) {
    for t in CONTROL_TEXTS {
        if let Some(id) = lookup(t) {
            attrs[id as usize] |= attr::CONTROL;
        }
    }
    for t in FIM_EOG_TEXTS.iter().chain(EOG_TEXTS) {
        if let Some(id) = lookup(t) {
            attrs[id as usize] |= attr::CONTROL;
            eog.push(id);
        }
    }
    for t in USER_DEFINED_TEXTS {
        if let Some(id) = lookup(t) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }

    let eog_has = |eog: &[u32], t: &str| lookup(t).is_some_and(|id| eog.contains(&id));
    // With both "return"/"call" (or "call(s)"/"flush") markers, "<|end|>"
    // ends a message but not the generation.
    if let Some(end) = lookup("<|end|>").filter(|id| eog.contains(id)) {
        let call = eog_has(eog, "<|call|>") || eog_has(eog, "<|calls|>");
        if call && (eog_has(eog, "<|return|>") || eog_has(eog, "<|flush|>")) {
            eog.retain(|&id| id != end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // Vocabularies with these markers use "</s>" as an ordinary token.
    if let Some(s) = lookup("</s>").filter(|id| eog.contains(id)) {
        if eog_has(eog, "<|tool_response>") || eog_has(eog, "<|plamo:eos|>") {
            eog.retain(|&id| id != s);
            attrs[s as usize] = attr::NORMAL;
        }
    }
}
