//! Reading a metrics record's fields: each missing, null or mistyped one said by name.

use std::time::Duration;

use serde_json::Value;

use super::parse::Parsed;

pub(super) fn field<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.get(k).filter(|x| !x.is_null())
}

pub(super) fn uint(v: &Value, k: &str) -> Parsed<u64> {
    field(v, k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{k}` is missing or not a whole number"))
}

pub(super) fn count(v: &Value, k: &str) -> Parsed<usize> {
    usize::try_from(uint(v, k)?).map_err(|_| format!("`{k}` is too large"))
}

pub(super) fn num(v: &Value, k: &str) -> Parsed<f64> {
    field(v, k)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("`{k}` is missing or not a number"))
}

/// A number that may be null (what cannot be measured; or a NaN loss, which JSON writes as null).
pub(super) fn opt_num(v: &Value, k: &str) -> Parsed<Option<f64>> {
    match field(v, k) {
        None => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("`{k}` is not a number")),
    }
}

pub(super) fn opt_uint(v: &Value, k: &str) -> Parsed<Option<u64>> {
    match field(v, k) {
        None => Ok(None),
        Some(_) => uint(v, k).map(Some),
    }
}

pub(super) fn text<'a>(v: &'a Value, k: &str) -> Parsed<&'a str> {
    field(v, k)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{k}` is missing or not a string"))
}

pub(super) fn seconds(v: &Value, k: &str) -> Parsed<Duration> {
    Duration::try_from_secs_f64(num(v, k)?).map_err(|_| format!("`{k}` is not a time"))
}

pub(super) fn millis(v: &Value, k: &str) -> Parsed<Duration> {
    Duration::try_from_secs_f64(num(v, k)? / 1e3).map_err(|_| format!("`{k}` is not a time"))
}

/// A time in milliseconds that may be missing or null (files from before it was recorded).
pub(super) fn opt_millis(v: &Value, k: &str) -> Parsed<Option<Duration>> {
    match field(v, k) {
        None => Ok(None),
        Some(_) => millis(v, k).map(Some),
    }
}

pub(super) fn array<'a>(v: &'a Value, k: &str) -> Parsed<&'a Vec<Value>> {
    field(v, k)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("`{k}` is missing or not a list"))
}
