//! A JSON parser that refuses what `serde_json::Value` would silently accept: duplicate keys
//! (where the last one would win and the first would be lost) at any depth, and integers
//! beyond 64 bits (which would silently become approximate floats). Nesting deeper than
//! serde_json's recursion limit (128) is refused too.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses one JSON value from `bytes`, refusing duplicate object keys and trailing data.
///
/// # Errors
/// serde_json's message (with line and column), or the duplicated key.
pub fn parse(bytes: &[u8]) -> Result<Value, String> {
    check_integers(bytes)?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let StrictValue(value) =
        StrictValue::deserialize(&mut deserializer).map_err(|e| e.to_string())?;
    deserializer.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Refuses integer literals (no fraction, no exponent) outside `i64::MIN..=u64::MAX`: serde_json
/// would turn them into floats and lose digits, silently changing the producer's data.
fn check_integers(bytes: &[u8]) -> Result<(), String> {
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            while bytes
                .get(i)
                .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
            {
                i += 1;
            }
            let token = bytes.get(start..i).unwrap_or_default();
            let integer = !token.iter().any(|c| matches!(c, b'.' | b'e' | b'E'));
            if integer {
                let text = String::from_utf8_lossy(token);
                let fits = text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
                // Malformed tokens are left to the parser, which names them precisely.
                let well_formed = text
                    .trim_start_matches('-')
                    .bytes()
                    .all(|c| c.is_ascii_digit());
                if !fits && well_formed && text.trim_start_matches('-').len() > 18 {
                    let shown: String = text.chars().take(40).collect();
                    return Err(format!(
                        "integer {shown} does not fit 64 bits; it would lose digits (send it as a string)"
                    ));
                }
            }
            continue;
        }
        i += 1;
    }
    Ok(())
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("number {v} cannot be represented")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        assert!(parse(br#"{"a":1,"a":2}"#)
            .unwrap_err()
            .contains("duplicate key `a`"));
        assert!(parse(br#"{"p":{"b":[{"c":1,"c":1}]}}"#)
            .unwrap_err()
            .contains("`c`"));
        assert!(parse(br#"{"a":1,"b":2}"#).is_ok());
    }

    #[test]
    fn refuses_integers_beyond_64_bits_but_not_floats_or_strings() {
        assert!(parse(b"{\"n\":123456789012345678901234567890}")
            .unwrap_err()
            .contains("64 bits"));
        assert!(parse(b"[-9223372036854775809]")
            .unwrap_err()
            .contains("64 bits"));
        assert!(parse(b"[18446744073709551615, -9223372036854775808, 1.5e300]").is_ok());
        assert!(parse(b"{\"s\":\"123456789012345678901234567890\",\"q\":\"a\\\"1\"}").is_ok());
        assert!(
            parse(b"[1e400]").is_err(),
            "overflowing floats are refused by the parser"
        );
    }

    #[test]
    fn refuses_deep_nesting_and_trailing_data() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(parse(deep.as_bytes())
            .unwrap_err()
            .contains("recursion limit"));
        assert!(parse(b"{} {}").is_err());
    }
}
