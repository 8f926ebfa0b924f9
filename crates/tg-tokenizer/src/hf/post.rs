//! The `TemplateProcessing` post-processor (`"post_processor"` of
//! `tokenizer.json`): wraps the encoded sequence(s) in special tokens when
//! special tokens are requested.

use serde_json::Value;

use super::json::Obj;
use crate::TokenizerError;

/// One template element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplatePiece {
    /// The first sequence (`$A`).
    A,
    /// The second sequence (`$B`).
    B,
    /// A special token: the ids listed for it under `special_tokens`.
    Special(Vec<u32>),
}

/// A parsed `TemplateProcessing`.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub single: Vec<TemplatePiece>,
    pub pair: Vec<TemplatePiece>,
}

impl Template {
    /// Parses a post-processor object; `path` names it in error messages.
    pub(crate) fn from_json(v: &Value, path: &str) -> Result<Template, TokenizerError> {
        let o = Obj::new(v, path)?;
        match o.type_name()? {
            "TemplateProcessing" => {}
            other => {
                return Err(o.unsupported(format!(
                    "post-processor type `{other}` (implemented: TemplateProcessing)"
                )))
            }
        }
        let specials = Obj::new(o.req("special_tokens")?, format!("{path}.special_tokens"))?;
        let single = parse_template(&o, &specials, "single")?;
        if single.contains(&TemplatePiece::B) {
            return Err(o.invalid("the `single` template uses the second sequence $B"));
        }
        let pair = match o.get("pair") {
            Some(_) => parse_template(&o, &specials, "pair")?,
            None => vec![TemplatePiece::A, TemplatePiece::B],
        };
        Ok(Template { single, pair })
    }

    /// The single-sequence template applied to `seq`.
    pub(crate) fn apply_single(&self, seq: &[u32]) -> Vec<u32> {
        self.apply(&self.single, seq, &[])
    }

    /// The pair template applied to `a` and `b`.
    pub(crate) fn apply_pair(&self, a: &[u32], b: &[u32]) -> Vec<u32> {
        self.apply(&self.pair, a, b)
    }

    fn apply(&self, template: &[TemplatePiece], a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(a.len() + b.len() + template.len());
        for p in template {
            match p {
                TemplatePiece::A => out.extend_from_slice(a),
                TemplatePiece::B => out.extend_from_slice(b),
                TemplatePiece::Special(ids) => out.extend_from_slice(ids),
            }
        }
        out
    }

    /// The single special token directly before / after `$A` in the single
    /// template, if that element has exactly one id.
    pub(crate) fn around_single(&self) -> (Option<u32>, Option<u32>) {
        let Some(a) = self.single.iter().position(|p| *p == TemplatePiece::A) else {
            return (None, None);
        };
        let one = |p: Option<&TemplatePiece>| match p {
            Some(TemplatePiece::Special(ids)) if ids.len() == 1 => Some(ids[0]),
            _ => None,
        };
        let before = if a == 0 {
            None
        } else {
            one(self.single.get(a - 1))
        };
        (before, one(self.single.get(a + 1)))
    }
}

fn parse_template(
    o: &Obj<'_>,
    specials: &Obj<'_>,
    key: &str,
) -> Result<Vec<TemplatePiece>, TokenizerError> {
    let items = o.array(key)?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = Obj::new(item, format!("{}.{key}[{i}]", o.path))?;
        if let Some(seq) = p.get("Sequence") {
            let s = Obj::new(seq, format!("{}.Sequence", p.path))?;
            out.push(match s.str("id")? {
                "A" => TemplatePiece::A,
                "B" => TemplatePiece::B,
                other => return Err(s.invalid(format!("unknown sequence id `{other}`"))),
            });
        } else if let Some(sp) = p.get("SpecialToken") {
            let s = Obj::new(sp, format!("{}.SpecialToken", p.path))?;
            let name = s.str("id")?;
            let entry = specials.get(name).ok_or_else(|| {
                s.invalid(format!(
                    "special token `{name}` is not listed in special_tokens"
                ))
            })?;
            let e = Obj::new(entry, format!("{}.{name}", specials.path))?;
            let ids = e
                .array("ids")?
                .iter()
                .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| e.invalid("`ids` must be an array of u32"))?;
            let n_tokens = e.array("tokens")?.len();
            if n_tokens != ids.len() {
                return Err(e.invalid("`ids` and `tokens` must have the same length"));
            }
            out.push(TemplatePiece::Special(ids));
        } else {
            return Err(p.invalid("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}"));
        }
    }
    Ok(out)
}
