//! A JSON parser that refuses what `serde_json::Value` would silently accept or change:
//! duplicate keys (where the last one would win and the first would be lost) at any depth,
//! integers beyond 64 bits (which would silently become approximate floats), and floats
//! outside float64's normal range (which would overflow, or become 0 or lose bits). Arrays and
//! maps nested deeper than an event may be ([`NEST_LEVELS_MAX`], the outermost value counting
//! as the first level) are refused too, by a depth counted here, with the message the encoder
//! gives (`docs/FORMAT.md`, Limits).

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

pub use crate::envelope::NEST_LEVELS_MAX;

/// Parses one JSON value from `bytes`, refusing duplicate object keys and trailing data.
///
/// # Errors
/// serde_json's message (with line and column), the duplicated key, the number that cannot be
/// read exactly (with its field), or the nesting limit.
pub fn parse(bytes: &[u8]) -> Result<Value, String> {
    check_numbers(bytes)?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    // The depth is counted by `Level` instead (the same limit, a message naming it).
    deserializer.disable_recursion_limit();
    let value = Level(0)
        .deserialize(&mut deserializer)
        .map_err(|e| e.to_string())?;
    deserializer.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// The most keys an object may have for [`is_plain`] to vouch for it (its keys are compared
/// pairwise).
pub const PLAIN_KEYS_MAX: usize = 64;

/// Whether `bytes` repeat no key within any object, escape no key, give no object more than
/// [`PLAIN_KEYS_MAX`] keys and nest at most [`NEST_LEVELS_MAX`] levels: then reading them with
/// `serde_json` directly (into a type, without a `Value` tree) reads what [`parse`] would,
/// as long as [`check_numbers`] passes them too. Malformed JSON may answer either way: the
/// parser refuses it.
#[must_use]
pub fn is_plain(bytes: &[u8]) -> bool {
    /// An open array or object: whether an object, whether its next string is a key, and
    /// where its keys start in `keys`.
    struct Open {
        object: bool,
        expect_key: bool,
        first_key: usize,
    }
    let mut open: Vec<Open> = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                let end = string_end(bytes, i + 1);
                if let Some(o) = open.last_mut().filter(|o| o.object && o.expect_key) {
                    o.expect_key = false;
                    let key = bytes.get(i + 1..end).unwrap_or_default();
                    let siblings = keys.get(o.first_key..).unwrap_or_default();
                    if key.contains(&b'\\')
                        || siblings.len() >= PLAIN_KEYS_MAX
                        || siblings.contains(&key)
                    {
                        return false;
                    }
                    keys.push(key);
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                if open.len() >= NEST_LEVELS_MAX {
                    return false;
                }
                open.push(Open {
                    object: b == b'{',
                    expect_key: b == b'{',
                    first_key: keys.len(),
                });
            }
            b'}' | b']' => {
                if let Some(o) = open.pop() {
                    keys.truncate(o.first_key);
                }
            }
            b',' => {
                if let Some(o) = open.last_mut().filter(|o| o.object) {
                    o.expect_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    true
}

/// An array or object open while numbers are checked, and where its current element is.
enum Open {
    /// An object: the byte range of its current key (without the quotes), and whether the next
    /// string is a key.
    Object {
        key: Option<Range<usize>>,
        expect_key: bool,
    },
    /// An array: its current element's index.
    Array { index: usize },
}

/// Refuses numbers `serde_json` would read as another value: integer literals (no fraction, no
/// exponent) outside `i64::MIN..=u64::MAX`, which would become approximate floats; and floats
/// outside float64's normal range, which overflow (refused by serde_json too, without saying
/// which) or underflow to 0 or to fewer bits of precision. Each error names the field. Malformed
/// JSON is left to the parser, which names it precisely.
///
/// # Errors
/// The first such number, with its field.
pub fn check_numbers(bytes: &[u8]) -> Result<(), String> {
    // The containers open around the current byte; past `NEST_LEVELS_MAX` only counted (the
    // parser refuses such input), so that the stack stays bounded whatever the input.
    let mut open: Vec<Open> = Vec::new();
    let mut untracked = 0usize;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                let end = string_end(bytes, i + 1);
                if let Some(Open::Object { key, expect_key }) = open.last_mut() {
                    if *expect_key && untracked == 0 {
                        *key = Some(i + 1..end);
                        *expect_key = false;
                    }
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' if open.len() >= NEST_LEVELS_MAX => untracked += 1,
            b'{' => open.push(Open::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => open.push(Open::Array { index: 0 }),
            b'}' | b']' if untracked > 0 => untracked -= 1,
            b'}' | b']' => {
                open.pop();
            }
            b',' if untracked == 0 => match open.last_mut() {
                Some(Open::Array { index }) => *index += 1,
                Some(Open::Object { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            b'-' | b'0'..=b'9' => {
                let start = i;
                while bytes
                    .get(i)
                    .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    i += 1;
                }
                let token = bytes.get(start..i).unwrap_or_default();
                if let Err(problem) = check_number(token) {
                    return Err(match field(bytes, &open) {
                        Some(field) => format!("field `{field}`: {problem}"),
                        None => problem,
                    });
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index of the quote that ends the string starting at `from`, or the end of `bytes`.
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut escaped = false;
    let mut i = from;
    while let Some(&b) = bytes.get(i) {
        match (escaped, b) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'"') => return i,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The path of the current element, `payload.items[0].status`; `None` at the top level.
fn field(bytes: &[u8], open: &[Open]) -> Option<String> {
    let mut path = String::new();
    for o in open {
        match o {
            Open::Object { key: Some(key), .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&String::from_utf8_lossy(bytes.get(key.clone())?));
            }
            Open::Object { key: None, .. } => {}
            Open::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    (!path.is_empty()).then_some(path)
}

/// Refuses one number token that would not be read as the number it writes.
fn check_number(token: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(token);
    let shown: String = text.chars().take(40).collect();
    let float = token.iter().any(|c| matches!(c, b'.' | b'e' | b'E'));
    if !float {
        let fits = text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
        let well_formed = text
            .trim_start_matches('-')
            .bytes()
            .all(|c| c.is_ascii_digit());
        if !fits && well_formed && text.trim_start_matches('-').len() > 18 {
            return Err(format!(
                "integer {shown} does not fit 64 bits; it would lose digits (send it as a string)"
            ));
        }
        return Ok(());
    }
    // Malformed tokens are left to the parser. Rust's parser and serde_json's (with
    // `float_roundtrip`) both round correctly, so they read the same float.
    let Ok(value) = text.parse::<f64>() else {
        return Ok(());
    };
    if value.is_infinite() {
        return Err(format!(
            "number {shown} is out of range: larger than a 64-bit float holds ({:e}) (send it as a string)",
            f64::MAX
        ));
    }
    let mantissa = token
        .split(|c| matches!(c, b'e' | b'E'))
        .next()
        .unwrap_or_default();
    let nonzero = mantissa.iter().any(|c| matches!(c, b'1'..=b'9'));
    if nonzero && value.abs() < f64::MIN_POSITIVE {
        let became = if value == 0.0 {
            "it would be stored as 0".to_string()
        } else {
            format!("it would be stored as {value:e}, with fewer bits than other floats")
        };
        return Err(format!(
            "number {shown} is too small for a 64-bit float (the smallest normal magnitude is \
             {:e}): {became} (send it as a string)",
            f64::MIN_POSITIVE
        ));
    }
    Ok(())
}

/// A value at nesting level `self.0` (the outermost value is at level 0; an array or object
/// opens the level after its own).
struct Level(usize);

impl<'de> DeserializeSeed<'de> for Level {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor { depth: self.0 })
    }
}

struct StrictVisitor {
    /// The level of the value visited.
    depth: usize,
}

impl StrictVisitor {
    /// The level an array or object at this visitor's level opens for its elements, refused
    /// past [`NEST_LEVELS_MAX`].
    fn inner<E: de::Error>(&self) -> Result<usize, E> {
        let inner = self.depth + 1;
        if inner > NEST_LEVELS_MAX {
            return Err(E::custom(format!(
                "arrays and maps nest deeper than {NEST_LEVELS_MAX} levels (the event's object \
                 counting as the first), deeper than an event may"
            )));
        }
        Ok(inner)
    }
}

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
        let inner = self.inner()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Level(inner))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Level(inner))?;
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
    use serde_json::json;

    #[test]
    fn plain_json_repeats_and_escapes_no_key_and_nests_within_the_limit() {
        assert!(is_plain(
            br#"{"a":1,"b":{"a":[{"a":1},{"a":2}]},"c":"{\"a\":1,\"a\":2}"}"#
        ));
        assert!(!is_plain(br#"{"a":1,"a":2}"#));
        assert!(!is_plain(br#"{"p":{"b":[{"c":1,"d":{},"c":1}]}}"#));
        assert!(
            !is_plain(br#"{"a":1,"\u0061":2}"#),
            "an escaped key is not vouched for"
        );
        let wide: String = (0..=PLAIN_KEYS_MAX)
            .map(|k| format!("\"k{k}\":0,"))
            .collect();
        assert!(!is_plain(format!("{{{}\"z\":0}}", wide).as_bytes()));
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(is_plain(deep(NEST_LEVELS_MAX).as_bytes()));
        assert!(parse(deep(NEST_LEVELS_MAX).as_bytes()).is_ok());
        assert!(!is_plain(deep(NEST_LEVELS_MAX + 1).as_bytes()));
        assert!(parse(deep(NEST_LEVELS_MAX + 1).as_bytes()).is_err());
    }

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
            .contains("nest deeper than 127 levels"));
        assert!(parse(b"{} {}").is_err());
    }

    /// A float that underflows would be stored as 0 (or, below float64's normal range, with
    /// fewer bits than the rest): refused like one that overflows, naming the field and the
    /// number. Zero itself, and every magnitude of the normal range, are read.
    #[test]
    fn refuses_floats_out_of_range_naming_the_field_and_number() {
        let err = parse(br#"{"payload":{"usd":1e-400}}"#).unwrap_err();
        assert!(
            err.contains("payload.usd") && err.contains("1e-400") && err.contains("too small"),
            "{err}"
        );
        let err = parse(br#"{"a":[1,{"b":[2,-2.5e-320]}]}"#).unwrap_err();
        assert!(
            err.contains("a[1].b[1]") && err.contains("-2.5e-320"),
            "{err}"
        );
        let err = parse(br#"{"usd":1e400}"#).unwrap_err();
        assert!(
            err.contains("`usd`") && err.contains("1e400") && err.contains("out of range"),
            "{err}"
        );
        let read = parse(
            b"[0.0, -0.0, 0e-400, 0.000e5, 2.2250738585072014e-308, -1.5e-300, 1.7976931348623157e308, 1e-7]",
        )
        .unwrap();
        assert_eq!(read[4], json!(f64::MIN_POSITIVE));
        assert_eq!(read[6], json!(f64::MAX));
    }

    /// The event's object is the first level: 127 levels are read (a field inside it holds
    /// 126), as many as an event may have and `serde_json` reads back; 128 are refused, with
    /// the encoder's message.
    #[test]
    fn reads_as_many_levels_as_an_event_may_have_and_no_more() {
        let nested = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        assert_eq!(NEST_LEVELS_MAX, 127);
        assert!(parse(nested(127).as_bytes()).is_ok());
        assert!(parse(nested(128).as_bytes())
            .unwrap_err()
            .contains("nest deeper than 127 levels"));
        let event = |levels: usize| {
            format!(
                r#"{{"type":"tool.result","eventId":"e1","timestamp":"2026-05-11T10:00:00Z","nativeTree":{}}}"#,
                nested(levels)
            )
        };
        // The whole way of the deepest event in and out, on a thread with an eighth of the
        // stack of a tokio worker's: parsed, encoded, decoded and printed, then read by
        // `serde_json` as any consumer of `journal read` would.
        let deepest = event(126);
        let printed = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let e = crate::Envelope::from_json_slice(deepest.as_bytes(), &mut String::new)
                    .expect("126 levels in a field are read");
                let body = e.to_msgpack().expect("and stored");
                let back = crate::Envelope::from_msgpack(&body).expect("and read back");
                assert_eq!(back, e);
                serde_json::to_string(&back.to_json_value()).expect("and printed")
            })
            .unwrap()
            .join()
            .unwrap();
        let read: Value = serde_json::from_str(&printed).expect("serde_json reads it back");
        assert_eq!(read, parse(event(126).as_bytes()).unwrap());
        let err =
            crate::Envelope::from_json_slice(event(127).as_bytes(), &mut String::new).unwrap_err();
        assert!(
            err.to_string().contains("nest deeper than 127 levels"),
            "{err}"
        );
    }
}
