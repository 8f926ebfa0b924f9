//! Reading the small component objects of `tokenizer.json` (normalizer,
//! pre-tokenizer, post-processor, decoder) from `serde_json::Value`s, with
//! error messages that name the component's place in the document.

use serde_json::{Map, Value};

use crate::TokenizerError;

/// A JSON object at a known place in the document.
pub(crate) struct Obj<'a> {
    pub path: String,
    map: &'a Map<String, Value>,
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Obj<'a> {
    /// `v` as an object, or an error naming `path`.
    pub(crate) fn new(v: &'a Value, path: impl Into<String>) -> Result<Obj<'a>, TokenizerError> {
        let path = path.into();
        match v {
            Value::Object(map) => Ok(Obj { path, map }),
            other => Err(TokenizerError::HfInvalid(format!(
                "{path} must be an object, found {}",
                json_kind(other)
            ))),
        }
    }

    /// An error: `detail` is not supported here.
    pub(crate) fn unsupported(&self, detail: impl Into<String>) -> TokenizerError {
        TokenizerError::HfUnsupported {
            component: self.path.clone(),
            detail: detail.into(),
        }
    }

    /// An error: the document is inconsistent here.
    pub(crate) fn invalid(&self, msg: impl std::fmt::Display) -> TokenizerError {
        TokenizerError::HfInvalid(format!("{}: {msg}", self.path))
    }

    /// The `"type"` field.
    pub(crate) fn type_name(&self) -> Result<&'a str, TokenizerError> {
        match self.map.get("type") {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.invalid(format!(
                "`type` must be a string, found {}",
                json_kind(other)
            ))),
            None => {
                Err(self.unsupported("a component without a `type` field (legacy untagged form)"))
            }
        }
    }

    /// A field, absent or null mapped to `None`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A required field.
    pub(crate) fn req(&self, key: &str) -> Result<&'a Value, TokenizerError> {
        self.get(key)
            .ok_or_else(|| self.invalid(format!("missing field `{key}`")))
    }

    /// A required string field.
    pub(crate) fn str(&self, key: &str) -> Result<&'a str, TokenizerError> {
        match self.req(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.invalid(format!(
                "`{key}` must be a string, found {}",
                json_kind(other)
            ))),
        }
    }

    /// An optional boolean field.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, TokenizerError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.invalid(format!(
                "`{key}` must be a boolean, found {}",
                json_kind(other)
            ))),
        }
    }

    /// A required boolean field.
    pub(crate) fn bool(&self, key: &str) -> Result<bool, TokenizerError> {
        self.opt_bool(key)?
            .ok_or_else(|| self.invalid(format!("missing field `{key}`")))
    }

    /// A required non-negative integer field.
    pub(crate) fn usize(&self, key: &str) -> Result<usize, TokenizerError> {
        self.req(key)?
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.invalid(format!("`{key}` must be a non-negative integer")))
    }

    /// A required field holding a single character.
    pub(crate) fn char(&self, key: &str) -> Result<char, TokenizerError> {
        let s = self.str(key)?;
        let mut it = s.chars();
        match (it.next(), it.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.invalid(format!("`{key}` must be a single character, found {s:?}"))),
        }
    }

    /// A required array field.
    pub(crate) fn array(&self, key: &str) -> Result<&'a [Value], TokenizerError> {
        match self.req(key)? {
            Value::Array(a) => Ok(a),
            other => Err(self.invalid(format!(
                "`{key}` must be an array, found {}",
                json_kind(other)
            ))),
        }
    }

    /// A `{"String": "..."}` pattern field (`{"Regex": ...}` is not supported:
    /// `tokenizers` runs those through Oniguruma, whose syntax and semantics
    /// differ from any regex engine available here).
    pub(crate) fn string_pattern(&self, key: &str) -> Result<String, TokenizerError> {
        let p = Obj::new(self.req(key)?, format!("{}.{key}", self.path))?;
        if let Some(v) = p.get("String") {
            return match v {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                Value::String(_) => Err(p.unsupported("an empty String pattern")),
                other => Err(p.invalid(format!(
                    "`String` must be a string, found {}",
                    json_kind(other)
                ))),
            };
        }
        if p.get("Regex").is_some() {
            return Err(p.unsupported("Regex patterns (only String patterns are implemented)"));
        }
        Err(p.invalid("expected {\"String\": ...}"))
    }
}
