//! Chat templates: rendering a conversation into the prompt text a model
//! was trained on, from the Jinja template a GGUF file carries in
//! `tokenizer.chat_template` (Hugging Face's `chat_template`).
//!
//! Rendering follows Hugging Face's `apply_chat_template`: the template sees
//! `messages` (a list of `{role, content}` maps), `add_generation_prompt`,
//! `bos_token` and `eos_token` (the texts of the vocabulary's BOS and EOS
//! tokens), the functions `raise_exception(message)` and
//! `strftime_now(format)`, with `trim_blocks` and `lstrip_blocks` on and the
//! loop controls (`break`, `continue`) enabled. Python string, list and
//! dict methods that templates call (`.strip()`, `.startswith()`,
//! `.items()`, ...) come from `minijinja-contrib`'s `pycompat`.
//!
//! The rendered text still has to be tokenized with `parse_special = true`
//! so that markers such as `<|im_start|>` become their tokens.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tg_tokenizer::{parse_messages, ChatTemplate, Tokenizer};
//! let gguf = tg_gguf::GgufFile::open("model.gguf")?;
//! let template = ChatTemplate::from_gguf(&gguf)?.ok_or("no chat template")?;
//! let messages = parse_messages(r#"[{"role": "user", "content": "Hi"}]"#)?;
//! let prompt = template.render(&messages, true)?;
//! let ids = Tokenizer::from_gguf(&gguf)?.encode(&prompt, true, true);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error, ErrorKind, Value};
use tg_gguf::GgufFile;

use crate::{keys, TokenizerError};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks: `system`, `user`, `assistant`, ... (templates decide
    /// which roles they accept).
    pub role: String,
    /// What is said.
    pub content: String,
}

impl Message {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message { role: role.into(), content: content.into() }
    }
}

/// The template's name inside its environment (appears in error messages).
const NAME: &str = "chat_template";

/// A compiled chat template, ready to render conversations.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).field("eos_token", &self.eos_token).finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The chat template of a GGUF file (`tokenizer.chat_template`), with
    /// `bos_token`/`eos_token` set to the texts of its BOS and EOS tokens
    /// (empty when the file names none). `Ok(None)` when the file has no
    /// template.
    pub fn from_gguf(f: &GgufFile) -> Result<Option<ChatTemplate>, TokenizerError> {
        let Some(v) = f.get(keys::CHAT_TEMPLATE) else {
            return Ok(None);
        };
        let source = v.as_str().ok_or_else(|| TokenizerError::WrongType { key: keys::CHAT_TEMPLATE, expected: "string", found: v.describe() })?;
        let bos = special_token_text(f, keys::BOS)?;
        let eos = special_token_text(f, keys::EOS)?;
        ChatTemplate::from_str(source, &bos, &eos).map(Some)
    }

    /// Compiles `source` (Jinja), which will see `bos_token` and `eos_token`.
    pub fn from_str(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(|e| TokenizerError::ChatTemplate(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_string()).map_err(|e| TokenizerError::ChatTemplate(describe(&e)))?;
        Ok(ChatTemplate { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends with
    /// the opening of an assistant turn (the prompt for generation).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, TokenizerError> {
        let list: Value = messages
            .iter()
            .map(|m| {
                let map: BTreeMap<String, Value> = BTreeMap::from([("role".to_string(), Value::from(m.role.as_str())), ("content".to_string(), Value::from(m.content.as_str()))]);
                Value::from_object(map)
            })
            .collect();
        let ctx = minijinja::context! {
            messages => list,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let template = self.env.get_template(NAME).map_err(|e| TokenizerError::ChatTemplate(describe(&e)))?;
        template.render(ctx).map_err(|e| TokenizerError::ChatTemplate(describe(&e)))
    }

    /// The text of the BOS token the template sees as `bos_token`.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The text of the EOS token the template sees as `eos_token`.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// The text of the token whose id metadata key `id_key` holds, or `""`
/// when the key is absent or the id has no token.
fn special_token_text(f: &GgufFile, id_key: &'static str) -> Result<String, TokenizerError> {
    let Some(v) = f.get(id_key) else {
        return Ok(String::new());
    };
    let id = v.as_u32().ok_or_else(|| TokenizerError::WrongType { key: id_key, expected: "u32", found: v.describe() })?;
    Ok(f.get(keys::TOKENS).and_then(|t| t.as_array()).and_then(|t| t.get(id as usize)).and_then(|t| t.as_str()).unwrap_or_default().to_string())
}

/// A minijinja error with the template line it points at.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    if let Some(line) = e.line() {
        if !s.contains("line") {
            s.push_str(&format!(" (line {line})"));
        }
    }
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

/// `raise_exception(message)`: the template refuses the conversation.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, format!("the template raised an exception: {message}")))
}

/// `strftime_now(format)`: the current time (UTC) formatted like Python's
/// `strftime`.
fn strftime_now(format: String) -> Result<Value, Error> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    strftime(&format, secs).map(Value::from)
}

const MONTHS: [&str; 12] = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Calendar date of a day count since 1970-01-01 (proleptic Gregorian):
/// `(year, month 1..=12, day 1..=31)`.
fn civil_date(days: i64) -> (i64, u32, u32) {
    // Shift to eras of 400 years starting on March 1st, year 0, so that the
    // leap day is the last day of each shifted year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // 0 = March
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Formats `secs` (Unix time, UTC) with the `strftime` directives chat
/// templates use: `%Y %y %m %d %e %H %I %M %S %p %b %B %a %A %j %%`, and the
/// glibc `%-` flag (no padding) before numeric ones. Others are an error.
fn strftime(format: &str, secs: i64) -> Result<String, Error> {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_date(days);
    let (hour, minute, second) = (rem / 3600, rem / 60 % 60, rem % 60);
    let weekday = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let mut day_of_year = day;
    for m in 1..month {
        day_of_year += match m {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
    }
    let month_name = MONTHS[(month - 1) as usize];
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let unpadded = spec == Some('-');
        if unpadded {
            spec = chars.next();
        }
        let num = |v: i64, width: usize| {
            if unpadded {
                v.to_string()
            } else {
                format!("{v:0width$}")
            }
        };
        let piece = match spec {
            Some('Y') => year.to_string(),
            Some('y') => num(year.rem_euclid(100), 2),
            Some('m') => num(i64::from(month), 2),
            Some('d') => num(i64::from(day), 2),
            Some('e') => format!("{day:>2}"),
            Some('H') => num(hour, 2),
            Some('I') => num(hour12, 2),
            Some('M') => num(minute, 2),
            Some('S') => num(second, 2),
            Some('j') => num(i64::from(day_of_year), 3),
            Some('p') => (if hour < 12 { "AM" } else { "PM" }).to_string(),
            Some('b') => month_name[..3].to_string(),
            Some('B') => month_name.to_string(),
            Some('a') => WEEKDAYS[weekday][..3].to_string(),
            Some('A') => WEEKDAYS[weekday].to_string(),
            Some('%') if !unpadded => "%".to_string(),
            other => {
                let shown = other.map_or(String::new(), String::from);
                return Err(Error::new(ErrorKind::InvalidOperation, format!("strftime_now: unsupported directive %{}{shown}", if unpadded { "-" } else { "" })));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

/// Parses an OpenAI-style message list: a JSON array of objects with a
/// string `role` and a `content` that is a string or a list of
/// `{"type": "text", "text": ...}` parts (concatenated). Anything else is
/// [`TokenizerError::ChatMessages`], naming the entry and what is wrong
/// (not a list, an empty list, an entry that is not an object, a missing
/// or non-string role, missing or non-text content, an unknown field).
pub fn parse_messages(json: &str) -> Result<Vec<Message>, TokenizerError> {
    let whole = |detail: String| TokenizerError::ChatMessages { index: None, detail };
    let doc: serde_json::Value = serde_json::from_str(json).map_err(|e| whole(format!("not valid JSON: {e}")))?;
    let serde_json::Value::Array(entries) = doc else {
        return Err(whole(format!("expected a JSON list of messages, found {}", json_kind(&doc))));
    };
    if entries.is_empty() {
        return Err(whole("the list is empty".into()));
    }
    entries.iter().enumerate().map(|(index, entry)| parse_message(entry).map_err(|detail| TokenizerError::ChatMessages { index: Some(index), detail })).collect()
}

fn parse_message(entry: &serde_json::Value) -> Result<Message, String> {
    let serde_json::Value::Object(fields) = entry else {
        return Err(format!("expected an object with \"role\" and \"content\", found {}", json_kind(entry)));
    };
    if let Some(key) = fields.keys().find(|k| *k != "role" && *k != "content") {
        return Err(format!("unsupported field {key:?} (only \"role\" and \"content\" are)"));
    }
    let role = match fields.get("role") {
        None => return Err("missing \"role\"".into()),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("\"role\" is {}, expected a string", json_kind(other))),
    };
    let content = match fields.get("content") {
        None => return Err("missing \"content\"".into()),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                text.push_str(text_part(part).map_err(|e| format!("content part {i}: {e}"))?);
            }
            text
        }
        Some(other) => return Err(format!("\"content\" is {}, expected a string or a list of text parts", json_kind(other))),
    };
    Ok(Message { role, content })
}

/// The text of one `{"type": "text", "text": ...}` content part.
fn text_part(part: &serde_json::Value) -> Result<&str, String> {
    let serde_json::Value::Object(fields) = part else {
        return Err(format!("expected an object, found {}", json_kind(part)));
    };
    match fields.get("type") {
        Some(serde_json::Value::String(t)) if t == "text" => {}
        Some(serde_json::Value::String(t)) => return Err(format!("type {t:?} is not supported (only \"text\" parts are)")),
        Some(other) => return Err(format!("\"type\" is {}", json_kind(other))),
        None => return Err("missing \"type\"".into()),
    }
    match fields.get("text") {
        Some(serde_json::Value::String(s)) => Ok(s),
        Some(other) => Err(format!("\"text\" is {}, expected a string", json_kind(other))),
        None => Err("missing \"text\"".into()),
    }
}

/// "a string", "an object", ... for error messages.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(list: &[(&str, &str)]) -> Vec<Message> {
        list.iter().map(|&(r, c)| Message::new(r, c)).collect()
    }

    #[test]
    fn renders_with_hf_conventions() {
        // trim_blocks + lstrip_blocks (and `+%}` switching trim_blocks off
        // for one tag), bos/eos variables, loop variables, Python string
        // methods, namespace(), loop controls. Expected output from Python's
        // jinja2 3.1.6 with Hugging Face's settings.
        let src = r#"{{ bos_token }}{% set ns = namespace(n=0) %}
{% for m in messages %}
    {% if m.role == 'skip' %}{% continue %}{% endif %}
    {% set ns.n = ns.n + 1 %}
[{{ m.role | upper }}:{{ m['content'].strip() }}]{% if not loop.last %},{% endif +%}
{% endfor %}
{% if add_generation_prompt %}<gen>{% endif %}{{ ns.n }}{{ eos_token }}
"#;
        let t = ChatTemplate::from_str(src, "<s>", "</s>").unwrap();
        let m = msgs(&[("user", "  hi "), ("skip", "x"), ("assistant", "yo")]);
        assert_eq!(t.render(&m, true).unwrap(), "<s>[USER:hi],\n[ASSISTANT:yo]\n<gen>2</s>");
        assert_eq!(t.render(&m, false).unwrap(), "<s>[USER:hi],\n[ASSISTANT:yo]\n2</s>");
        assert_eq!((t.bos_token(), t.eos_token()), ("<s>", "</s>"));
    }

    #[test]
    fn reads_the_template_and_special_tokens_from_gguf() {
        use tg_gguf::{GgufWriter, Value as G};
        let file = |entries: &[(&str, G)]| {
            let mut w = GgufWriter::new();
            w.add("tokenizer.ggml.tokens", G::from(vec!["<s>".to_string(), "</s>".into(), "a".into()]));
            for (k, v) in entries {
                w.add(*k, v.clone());
            }
            w.build().unwrap()
        };
        let src = G::from("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}");
        let f = file(&[(keys::CHAT_TEMPLATE, src.clone()), (keys::BOS, G::U32(0)), (keys::EOS, G::U32(1))]);
        let t = ChatTemplate::from_gguf(&f).unwrap().expect("a template");
        assert_eq!(t.render(&msgs(&[("user", "a")]), false).unwrap(), "<s>a</s>");
        // No template: None. No ids, or ids past the vocabulary: empty texts.
        assert!(ChatTemplate::from_gguf(&file(&[])).unwrap().is_none());
        let t = ChatTemplate::from_gguf(&file(&[(keys::CHAT_TEMPLATE, src.clone()), (keys::EOS, G::U32(9))])).unwrap().unwrap();
        assert_eq!((t.bos_token(), t.eos_token()), ("", ""));
        // Wrong types are errors naming the key.
        let e = ChatTemplate::from_gguf(&file(&[(keys::CHAT_TEMPLATE, G::U32(1))])).unwrap_err();
        assert!(matches!(e, TokenizerError::WrongType { key, .. } if key == keys::CHAT_TEMPLATE), "{e}");
        let e = ChatTemplate::from_gguf(&file(&[(keys::CHAT_TEMPLATE, src), (keys::BOS, G::from("x"))])).unwrap_err();
        assert!(matches!(e, TokenizerError::WrongType { key, .. } if key == keys::BOS), "{e}");
    }

    #[test]
    fn template_errors_are_reported() {
        let e = ChatTemplate::from_str("{% for x in %}", "", "").unwrap_err();
        assert!(matches!(e, TokenizerError::ChatTemplate(_)), "{e}");
        let t = ChatTemplate::from_str("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok", "", "").unwrap();
        assert_eq!(t.render(&msgs(&[("user", "a")]), false).unwrap(), "ok");
        let e = t.render(&msgs(&[("system", "a")]), false).unwrap_err();
        assert!(e.to_string().contains("first must be user"), "{e}");
    }

    #[test]
    fn strftime_directives() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S %j %a %A %b %B %y %I%p %-d %-m %e|%%", t).unwrap(), "2024-02-29 13:05:09 060 Thu Thursday Feb February 24 01PM 29 2 29|%");
        assert_eq!(strftime("%d %b %Y", 0).unwrap(), "01 Jan 1970");
        // Before the epoch and across a century that is not leap.
        assert_eq!(strftime("%Y-%m-%d %A", -1).unwrap(), "1969-12-31 Wednesday");
        assert_eq!(strftime("%Y-%m-%d %j", 4_107_542_400).unwrap(), "2100-03-01 060");
        assert!(strftime("%Q", 0).is_err());
        assert!(strftime("%", 0).is_err());
        // Through the template function.
        let tpl = ChatTemplate::from_str("{{ strftime_now('%Y') | length }}", "", "").unwrap();
        assert_eq!(tpl.render(&[], false).unwrap(), "4");
    }

    #[test]
    fn civil_date_matches_a_day_by_day_walk() {
        // Walk 1960..2040 a day at a time and compare.
        let (mut y, mut m, mut d) = (1960i64, 1u32, 1u32);
        let start = -3653; // 1960-01-01
        for days in start..start + 80 * 366 {
            assert_eq!(civil_date(days), (y, m, d), "day {days}");
            let len = match m {
                2 if is_leap(y) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn parses_openai_messages() {
        let m = parse_messages(
            r#"[{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]}]"#,
        )
        .unwrap();
        assert_eq!(m, msgs(&[("system", "Be brief."), ("user", "Hello, world")]));
        let m = parse_messages(r#"[{"content": "", "role": "assistant"}]"#).unwrap();
        assert_eq!(m, msgs(&[("assistant", "")]));
    }

    #[test]
    fn message_errors_name_the_entry() {
        let err = |json: &str| match parse_messages(json) {
            Err(TokenizerError::ChatMessages { index, detail }) => (index, detail),
            other => panic!("{json}: {other:?}"),
        };
        let (i, d) = err(r#"{"role": "user"}"#);
        assert_eq!(i, None);
        assert!(d.contains("expected a JSON list") && d.contains("an object"), "{d}");
        assert!(err("[").1.contains("not valid JSON"));
        assert!(err("[]").1.contains("empty"));
        let ok = r#"{"role": "user", "content": "a"}"#;
        let cases: &[(&str, &str)] = &[
            (r#""hi""#, "found a string"),
            (r#"{"content": "a"}"#, "missing \"role\""),
            (r#"{"role": 3, "content": "a"}"#, "\"role\" is a number"),
            (r#"{"role": "user"}"#, "missing \"content\""),
            (r#"{"role": "user", "content": null}"#, "\"content\" is null"),
            (r#"{"role": "user", "content": 7}"#, "\"content\" is a number"),
            (r#"{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}"#, "content part 0: type \"image_url\" is not supported"),
            (r#"{"role": "user", "content": [{"type": "text"}]}"#, "missing \"text\""),
            (r#"{"role": "user", "content": [{"type": "text", "text": 1}]}"#, "\"text\" is a number"),
            (r#"{"role": "user", "content": ["a"]}"#, "content part 0: expected an object"),
            (r#"{"role": "user", "content": [{"text": "a"}]}"#, "missing \"type\""),
            (r#"{"role": "assistant", "content": "", "tool_calls": []}"#, "unsupported field \"tool_calls\""),
        ];
        for (entry, want) in cases {
            let json = format!("[{ok}, {entry}]");
            let (i, d) = err(&json);
            assert_eq!(i, Some(1), "{json}");
            assert!(d.contains(want), "{json}: {d:?} should contain {want:?}");
            let shown = parse_messages(&json).unwrap_err().to_string();
            assert!(shown.contains("entry 1"), "{shown}");
        }
    }
}
