//! A depth-limited JSON tree that keeps every object entry, duplicates included.
//!
//! `serde_json::Value` silently keeps the last of duplicate keys, and its typed derive
//! errors carry only strings. The header is instead parsed into [`Val`], whose objects are
//! `Vec<(key, value)>` in file order, and validated in plain Rust with structured errors.
//! Containers below the depth the format uses are skipped without allocating
//! (`serde::de::IgnoredAny`) and remembered only by their kind.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::MAX_JSON_ARRAY_LEN;

/// A JSON value, shallow below a fixed depth.
#[derive(Debug)]
pub(crate) enum Val {
    /// A non-negative integer that fits in `u64`.
    U64(u64),
    /// A string.
    Str(String),
    /// An array (within the depth limit).
    Arr(Vec<Val>),
    /// An object with all its entries in file order (within the depth limit).
    Obj(Vec<(String, Val)>),
    /// Anything else: described, not kept.
    Other(Kind),
}

/// The kind of a value that [`Val`] does not keep.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Null,
    Bool(bool),
    NegInt(i64),
    Float(f64),
    Array,
    Object,
}

impl Val {
    /// Short description for error messages: `string "x"`, `array`, `-3`, ...
    pub fn describe(&self) -> String {
        match self {
            Val::U64(v) => format!("integer {v}"),
            Val::Str(s) => {
                let shown: String = s.chars().take(40).collect();
                if shown.len() < s.len() {
                    format!("string {shown:?}...")
                } else {
                    format!("string {s:?}")
                }
            }
            Val::Arr(_) => "array".to_string(),
            Val::Obj(_) => "object".to_string(),
            Val::Other(Kind::Null) => "null".to_string(),
            Val::Other(Kind::Bool(b)) => format!("boolean {b}"),
            Val::Other(Kind::NegInt(v)) => format!("negative integer {v}"),
            Val::Other(Kind::Float(v)) => format!("number {v} (not an integer in 0..=2^64-1)"),
            Val::Other(Kind::Array) => "array".to_string(),
            Val::Other(Kind::Object) => "object".to_string(),
        }
    }
}

/// Deserializes a [`Val`], keeping containers up to `depth` levels deep (0: scalars only).
pub(crate) struct ValSeed {
    pub depth: u8,
}

impl<'de> DeserializeSeed<'de> for ValSeed {
    type Value = Val;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(ValVisitor { depth: self.depth })
    }
}

struct ValVisitor {
    depth: u8,
}

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Val, E> {
        Ok(Val::Other(Kind::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Val, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Val::U64(u),
            Err(_) => Val::Other(Kind::NegInt(v)),
        })
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Val, E> {
        Ok(Val::U64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Val, E> {
        Ok(Val::Other(Kind::Float(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Val, E> {
        Ok(Val::Str(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Val, E> {
        Ok(Val::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Val, E> {
        Ok(Val::Other(Kind::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Val, E> {
        Ok(Val::Other(Kind::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        if self.depth == 0 {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Val::Other(Kind::Array));
        }
        // Grow as elements arrive: the size hint of a JSON array is unknown anyway, and a
        // length is never trusted from the input.
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(ValSeed {
            depth: self.depth - 1,
        })? {
            if items.len() == MAX_JSON_ARRAY_LEN {
                return Err(de::Error::custom(format_args!(
                    "array with more than {MAX_JSON_ARRAY_LEN} elements (the limit for shapes)"
                )));
            }
            items.push(v);
        }
        Ok(Val::Arr(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
        if self.depth == 0 {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Val::Other(Kind::Object));
        }
        let mut entries = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(ValSeed {
                depth: self.depth - 1,
            })?;
            entries.push((k, v));
        }
        Ok(Val::Obj(entries))
    }
}

/// Parses `text` as one JSON value (trailing whitespace allowed) with containers kept
/// `depth` levels deep.
pub(crate) fn parse(text: &str, depth: u8) -> Result<Val, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = ValSeed { depth }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}
