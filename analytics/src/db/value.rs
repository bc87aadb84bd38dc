//! Values crossing the storage boundary: what a query is given and what a row
//! gives back, the same for both engines. The schema stores integers, reals,
//! text and bytes only (timestamps as integer milliseconds), so these four and
//! NULL are all either engine needs.

use crate::{Error, Result};

/// One parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A Rust value a query can take as a parameter.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

/// A Rust value a column can be read as.
pub trait FromValue: Sized {
    fn from_value(v: Value) -> Result<Self>;
}

fn mismatch<T>(v: &Value, want: &str) -> Result<T> {
    Err(Error::Corrupt(format!("expected {want}, found {v:?}")))
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                // Every integer the store keeps fits an i64 (counts, ids, milliseconds).
                Value::Integer(*self as i64)
            }
        }
        impl FromValue for $t {
            fn from_value(v: Value) -> Result<Self> {
                match v {
                    Value::Integer(i) => <$t>::try_from(i).map_err(|_| Error::Corrupt(format!("{i} out of range for {}", stringify!($t)))),
                    other => mismatch(&other, "an integer"),
                }
            }
        }
    )*};
}
integer!(i64, i32, u32, u64, usize, u16, u8);

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Integer(i64::from(*self))
    }
}

impl FromValue for bool {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Integer(i) => Ok(i != 0),
            other => mismatch(&other, "a boolean"),
        }
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl FromValue for f64 {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Real(f) => Ok(f),
            // An integral sum or average arrives as an integer from SQLite.
            Value::Integer(i) => Ok(i as f64),
            other => mismatch(&other, "a number"),
        }
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl FromValue for String {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Text(s) => Ok(s),
            other => mismatch(&other, "text"),
        }
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl<const N: usize> ToValue for [u8; N] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Blob(b) => Ok(b),
            other => mismatch(&other, "bytes"),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl From<rusqlite::types::ValueRef<'_>> for Value {
    fn from(v: rusqlite::types::ValueRef<'_>) -> Value {
        use rusqlite::types::ValueRef;
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_and_refuse_what_does_not_fit() {
        assert_eq!(u64::from_value(7u64.to_value()).unwrap(), 7);
        assert!(u32::from_value(Value::Integer(-1)).is_err());
        assert!(i64::from_value(Value::Text("1".into())).is_err());
        assert_eq!(Option::<i64>::from_value(Value::Null).unwrap(), None);
        assert!(bool::from_value(true.to_value()).unwrap());
        assert_eq!(f64::from_value(Value::Integer(3)).unwrap(), 3.0);
    }
}
