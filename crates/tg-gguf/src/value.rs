//! GGUF metadata values.

/// GGUF metadata value type ids.
pub mod type_id {
    /// u8
    pub const U8: u32 = 0;
    /// i8
    pub const I8: u32 = 1;
    /// u16
    pub const U16: u32 = 2;
    /// i16
    pub const I16: u32 = 3;
    /// u32
    pub const U32: u32 = 4;
    /// i32
    pub const I32: u32 = 5;
    /// f32
    pub const F32: u32 = 6;
    /// bool (one byte, 0 or 1)
    pub const BOOL: u32 = 7;
    /// string (u64 length + UTF-8 bytes)
    pub const STRING: u32 = 8;
    /// array (u32 element type + u64 count + elements)
    pub const ARRAY: u32 = 9;
    /// u64
    pub const U64: u32 = 10;
    /// i64
    pub const I64: u32 = 11;
    /// f64
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f32
    F32(f32),
    /// f64
    F64(f64),
    /// bool
    Bool(bool),
    /// UTF-8 string
    String(String),
    /// Homogeneous array (the element type is that of the elements; an empty array read
    /// from a file forgets its declared element type).
    Array(Vec<Value>),
}

impl Value {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F32(_) => type_id::F32,
            Value::F64(_) => type_id::F64,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
        }
    }

    /// Short type name (`"u32"`, `"string"`, `"array"`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// A short human description for error messages (`u64 5000000000`, `array[string; 3]`).
    pub fn describe(&self) -> String {
        match self {
            Value::String(s) => {
                let mut t: String = s.chars().take(40).collect();
                if t.len() < s.len() {
                    t.push('…');
                }
                format!("string {t:?}")
            }
            Value::Array(v) => match v.first() {
                Some(e) => format!("array[{}; {}]", e.type_name(), v.len()),
                None => "empty array".to_string(),
            },
            Value::U8(x) => format!("u8 {x}"),
            Value::I8(x) => format!("i8 {x}"),
            Value::U16(x) => format!("u16 {x}"),
            Value::I16(x) => format!("i16 {x}"),
            Value::U32(x) => format!("u32 {x}"),
            Value::I32(x) => format!("i32 {x}"),
            Value::U64(x) => format!("u64 {x}"),
            Value::I64(x) => format!("i64 {x}"),
            Value::F32(x) => format!("f32 {x}"),
            Value::F64(x) => format!("f64 {x}"),
            Value::Bool(x) => format!("bool {x}"),
        }
    }

    /// The value as an `i128` if it is an integer of any width.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(x) => x.into(),
            Value::I8(x) => x.into(),
            Value::U16(x) => x.into(),
            Value::I16(x) => x.into(),
            Value::U32(x) => x.into(),
            Value::I32(x) => x.into(),
            Value::U64(x) => x.into(),
            Value::I64(x) => x.into(),
            _ => return None,
        })
    }

    /// Any integer value that fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_integer().and_then(|x| u64::try_from(x).ok())
    }

    /// Any integer value that fits in `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_integer().and_then(|x| u32::try_from(x).ok())
    }

    /// Any integer value that fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_integer().and_then(|x| i64::try_from(x).ok())
    }

    /// Any integer value that fits in `i32`.
    pub fn as_i32(&self) -> Option<i32> {
        self.as_integer().and_then(|x| i32::try_from(x).ok())
    }

    /// An `F32` value, or an `F64` converted to f32.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(x) => Some(x),
            Value::F64(x) => Some(x as f32),
            _ => None,
        }
    }

    /// An `F64` value, or an `F32` widened.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(x) => Some(x.into()),
            Value::F64(x) => Some(x),
            _ => None,
        }
    }

    /// A `Bool` value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A `String` value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An `Array` value's elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
    )*};
}
from_impls!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
            f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Value> + Clone> From<&[T]> for Value {
    fn from(v: &[T]) -> Value {
        Value::Array(v.iter().cloned().map(Into::into).collect())
    }
}
