//! MiniMalloc-compatible CSV.
//!
//! Input: a header row, then one buffer per row. Required columns `id`, `lower`,
//! `upper`, `size`, in any order; the interval is half-open, `[lower, upper)`. Also
//! accepted, as MiniMalloc does: `buffer` / `buffer_id` for `id`, `start` / `begin`
//! for `lower`, and `end` for `upper` where `end` is *inclusive* (the buffer is live
//! on `[start, end + 1)`). Optional columns:
//! - `alignment`: the offset must be a multiple of it (≥ 1; default 1);
//! - `hint`: a suggested offset (negative = none), used by the warm start;
//! - `offset`: an earlier packing (e.g. our own output); it is used as a hint where
//!   `hint` gives none. (MiniMalloc instead pins buffers to an input `offset`.)
//!
//! Any other column (MiniMalloc's `gaps` included) is an error. Fields are trimmed;
//! blank lines are skipped; a `\r\n` line end is accepted.
//!
//! Output: `id,lower,upper,size`, then `alignment` if any alignment is not 1, then
//! `offset` (hints are not written back: the offsets supersede them).

use crate::{PackError, Problem, Solution};
use std::fmt::Write as _;

/// A CSV input that cannot be read. Lines are counted from 1 (the header).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// Nothing but blank lines.
    #[error("empty input: expected a header `id,lower,upper,size`")]
    Empty,
    /// A header without any buffer row.
    #[error("no buffers: the input has a header but no rows")]
    NoBuffers,
    /// A required column is not in the header.
    #[error("line 1: missing column `{0}` (required: id, lower, upper, size)")]
    MissingColumn(&'static str),
    /// A column named twice (aliases count as the same column).
    #[error("line 1: column `{0}` appears twice")]
    DuplicateColumn(String),
    /// A column this reader does not know.
    #[error(
        "line 1: unknown column `{0}` (accepted: id, lower, upper, size, alignment, hint, offset; \
         MiniMalloc's `gaps` is not supported)"
    )]
    UnknownColumn(String),
    /// A row with the wrong number of fields.
    #[error("line {line}: {found} fields, the header has {expected}")]
    FieldCount {
        /// Line number.
        line: usize,
        /// Columns in the header.
        expected: usize,
        /// Fields on this line.
        found: usize,
    },
    /// A field that is not an integer (or does not fit in 64 bits).
    #[error("line {line}: column `{column}`: `{value}` is not an integer")]
    NotInteger {
        /// Line number.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The field.
        value: String,
    },
    /// A negative value where only non-negative ones make sense.
    #[error("line {line}: column `{column}`: {value} is negative")]
    Negative {
        /// Line number.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The value.
        value: i64,
    },
    /// An alignment of 0.
    #[error("line {line}: alignment 0 (use 1 for none)")]
    ZeroAlignment {
        /// Line number.
        line: usize,
    },
    /// An empty id.
    #[error("line {line}: empty id")]
    EmptyId {
        /// Line number.
        line: usize,
    },
    /// `lower ≥ upper`: the buffer is never live.
    #[error("line {line}: buffer `{id}`: lower {lower} must be below upper {upper} (the interval is [lower, upper))")]
    EmptyInterval {
        /// Line number.
        line: usize,
        /// The buffer.
        id: String,
        /// Its start.
        lower: i64,
        /// Its (exclusive) end.
        upper: i64,
    },
    /// An id used twice.
    #[error("line {line}: duplicate id `{id}` (first on line {first})")]
    DuplicateId {
        /// Line number.
        line: usize,
        /// The id.
        id: String,
        /// Where it first appeared.
        first: usize,
    },
    /// The problem is otherwise invalid (e.g. sizes too large).
    #[error("{0}")]
    Problem(#[from] PackError),
}

/// A parsed CSV input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvInput {
    /// The buffers (hints from `hint`, else from `offset`).
    pub problem: Problem,
    /// The `offset` column, if the input had one.
    pub offsets: Option<Vec<u64>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Col {
    Id,
    Lower,
    Upper,
    /// MiniMalloc's inclusive `end`.
    End,
    Size,
    Alignment,
    Hint,
    Offset,
}

impl Col {
    fn parse(name: &str) -> Option<Col> {
        Some(match name {
            "id" | "buffer" | "buffer_id" => Col::Id,
            "lower" | "start" | "begin" => Col::Lower,
            "upper" => Col::Upper,
            "end" => Col::End,
            "size" => Col::Size,
            "alignment" => Col::Alignment,
            "hint" => Col::Hint,
            "offset" => Col::Offset,
            _ => return None,
        })
    }

    /// Slot in the column map (`End` shares `Upper`'s).
    fn slot(self) -> usize {
        match self {
            Col::Id => 0,
            Col::Lower => 1,
            Col::Upper | Col::End => 2,
            Col::Size => 3,
            Col::Alignment => 4,
            Col::Hint => 5,
            Col::Offset => 6,
        }
    }
}

const SLOT_NAMES: [&str; 7] = ["id", "lower", "upper", "size", "alignment", "hint", "offset"];

fn int(line: usize, column: &'static str, field: &str) -> Result<i64, CsvError> {
    field.parse::<i64>().map_err(|_| CsvError::NotInteger { line, column, value: field.to_string() })
}

fn non_negative(line: usize, column: &'static str, field: &str) -> Result<u64, CsvError> {
    let v = int(line, column, field)?;
    u64::try_from(v).map_err(|_| CsvError::Negative { line, column, value: v })
}

/// Reads a MiniMalloc CSV problem.
pub fn parse_csv(text: &str) -> Result<CsvInput, CsvError> {
    let mut lines = text.split('\n').enumerate().map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l))).filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or(CsvError::Empty)?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let mut slots: [Option<usize>; 7] = [None; 7];
    let mut inclusive_end = false;
    for (i, name) in names.iter().enumerate() {
        let col = Col::parse(name).ok_or_else(|| CsvError::UnknownColumn(name.to_string()))?;
        let slot = &mut slots[col.slot()];
        if slot.is_some() {
            return Err(CsvError::DuplicateColumn(SLOT_NAMES[col.slot()].to_string()));
        }
        *slot = Some(i);
        inclusive_end |= col == Col::End;
    }
    let need = |s: usize| slots[s].ok_or(CsvError::MissingColumn(SLOT_NAMES[s]));
    let (c_id, c_lower, c_upper, c_size) = (need(0)?, need(1)?, need(2)?, need(3)?);
    let upper_name = if inclusive_end { "end" } else { "upper" };

    let mut buffers = Vec::new();
    let mut offsets: Option<Vec<u64>> = slots[6].map(|_| Vec::new());
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (line, row) in lines {
        let fields: Vec<&str> = row.split(',').map(str::trim).collect();
        if fields.len() != names.len() {
            return Err(CsvError::FieldCount { line, expected: names.len(), found: fields.len() });
        }
        let id = fields[c_id];
        if id.is_empty() {
            return Err(CsvError::EmptyId { line });
        }
        let lower = int(line, "lower", fields[c_lower])?;
        let mut upper = int(line, upper_name, fields[c_upper])?;
        if inclusive_end {
            upper = upper.checked_add(1).ok_or_else(|| CsvError::NotInteger { line, column: "end", value: fields[c_upper].to_string() })?;
        }
        let size = non_negative(line, "size", fields[c_size])?;
        let alignment = match slots[4] {
            Some(c) => non_negative(line, "alignment", fields[c])?,
            None => 1,
        };
        if alignment == 0 {
            return Err(CsvError::ZeroAlignment { line });
        }
        if lower >= upper {
            return Err(CsvError::EmptyInterval { line, id: id.to_string(), lower, upper });
        }
        let mut hint = match slots[5] {
            Some(c) => u64::try_from(int(line, "hint", fields[c])?).ok(),
            None => None,
        };
        if let (Some(c), Some(offs)) = (slots[6], offsets.as_mut()) {
            let o = non_negative(line, "offset", fields[c])?;
            offs.push(o);
            hint = hint.or(Some(o));
        }
        if let Some(&first) = seen.get(id) {
            return Err(CsvError::DuplicateId { line, id: id.to_string(), first });
        }
        seen.insert(id.to_string(), line);
        buffers.push(crate::Buffer { id: id.to_string(), lower, upper, size, alignment, hint });
    }
    if buffers.is_empty() {
        return Err(CsvError::NoBuffers);
    }
    Ok(CsvInput { problem: Problem::new(buffers)?, offsets })
}

/// Writes a problem and its packing as MiniMalloc CSV (see the module docs).
pub fn write_csv(problem: &Problem, solution: &Solution) -> String {
    let bufs = problem.buffers();
    let with_alignment = bufs.iter().any(|b| b.alignment != 1);
    let mut out = String::from("id,lower,upper,size");
    if with_alignment {
        out.push_str(",alignment");
    }
    out.push_str(",offset\n");
    for (b, o) in bufs.iter().zip(&solution.offsets) {
        let _ = write!(out, "{},{},{},{}", b.id, b.lower, b.upper, b.size);
        if with_alignment {
            let _ = write!(out, ",{}", b.alignment);
        }
        let _ = writeln!(out, ",{o}");
    }
    out
}
