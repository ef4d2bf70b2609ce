//! The hand-written `Serialize` and `Deserialize` of [`Envelope`]: a map of the fields that
//! are present, in declaration order, then the unknown fields of [`Envelope::extra`].
//!
//! The derived implementations go through `#[serde(flatten)]` on `extra`, which costs dearly
//! on both sides: serializing announces a map of unknown length, which MessagePack can only
//! write after buffering every entry, and deserializing buffers the whole map into serde's
//! generic `Content` tree before it looks at a field (three quarters of the cost of reading an
//! event back). These produce and read the same bytes (the golden-bytes tests in `frame.rs` and
//! the round-trip tests here hold them to it) and keep the derived rules:
//! - `type` and `timestamp` are required, `eventId` defaults to empty;
//! - an optional field that is present must hold a value of its type (an explicit `null` is an
//!   error, except for `payload`, whose type is any JSON value);
//! - a key given twice is refused, whether it names a field or not.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

use super::Envelope;

macro_rules! names {
    ($($field:ident = $name:literal),* $(,)?) => {
        /// The stored names of the optional fields, in declaration order.
        #[cfg(test)]
        pub(crate) const OPTIONAL_FIELDS: &[&str] = &[$($name),*];
    };
}
optional_fields!(names);

/// Reads one key: borrowed from the input when the format allows it (MessagePack), owned
/// otherwise (a `serde_json::Value`).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event envelope (a map of field names to values)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut envelope = Envelope::default();
        let mut event_type: Option<String> = None;
        let mut event_id: Option<String> = None;
        let mut timestamp: Option<String> = None;

        macro_rules! decode {
            ($($field:ident = $name:literal),* $(,)?) => {
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "type" => set(&mut event_type, map.next_value()?, "type")?,
                        "eventId" => set(&mut event_id, map.next_value()?, "eventId")?,
                        "timestamp" => set(&mut timestamp, map.next_value()?, "timestamp")?,
                        $($name => set(&mut envelope.$field, map.next_value()?, $name)?,)*
                        _ => {
                            let value = map.next_value()?;
                            if envelope.extra.insert(key.clone().into_owned(), value).is_some() {
                                return Err(de::Error::custom(format_args!(
                                    "duplicate field `{key}`"
                                )));
                            }
                        }
                    }
                }
            };
        }
        optional_fields!(decode);

        envelope.event_type = event_type.ok_or_else(|| de::Error::missing_field("type"))?;
        envelope.timestamp = timestamp.ok_or_else(|| de::Error::missing_field("timestamp"))?;
        envelope.event_id = event_id.unwrap_or_default();
        Ok(envelope)
    }
}

/// Stores the first value of a field; a second one is an error.
fn set<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let envelope = self;
        let mut map = serializer.serialize_map(Some(super::encode::entries(envelope)))?;
        map.serialize_entry("type", &envelope.event_type)?;
        map.serialize_entry("eventId", &envelope.event_id)?;
        map.serialize_entry("timestamp", &envelope.timestamp)?;
        macro_rules! encode {
            ($($field:ident = $name:literal),* $(,)?) => {
                $(
                    if let Some(value) = &envelope.$field {
                        map.serialize_entry($name, value)?;
                    }
                )*
            };
        }
        optional_fields!(encode);
        for (key, value) in &envelope.extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::OPTIONAL_FIELDS;
    use crate::Envelope;

    fn decode(value: Value) -> Result<Envelope, String> {
        serde_path_to_error::deserialize::<_, Envelope>(value)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    /// A MessagePack map of short strings, written by hand so that a key can repeat.
    fn fixmap(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut out = vec![0x80 | u8::try_from(entries.len()).expect("fixmap")];
        for text in entries.iter().flat_map(|(k, v)| [k, v]) {
            out.push(0xa0 | u8::try_from(text.len()).expect("fixstr"));
            out.extend_from_slice(text.as_bytes());
        }
        out
    }

    #[test]
    fn the_field_list_is_the_schema_s() {
        let schema = serde_json::to_value(Envelope::json_schema()).expect("schema");
        let properties: Vec<&str> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed: Vec<&str> = ["type", "eventId", "timestamp"]
            .into_iter()
            .chain(OPTIONAL_FIELDS.iter().copied())
            .collect();
        let mut properties = properties;
        listed.sort_unstable();
        properties.sort_unstable();
        assert_eq!(listed, properties);
    }

    #[test]
    fn every_optional_field_decodes_into_itself_and_round_trips() {
        for name in OPTIONAL_FIELDS {
            let candidates = [json!("observed"), json!(7), json!({"k": [1, "two"]})];
            let decoded = candidates.iter().find_map(|value| {
                let mut object =
                    json!({"type": "t", "eventId": "e", "timestamp": "2026-01-01T00:00:00Z"});
                object[*name] = value.clone();
                decode(object).ok()
            });
            let envelope =
                decoded.unwrap_or_else(|| panic!("no value of any type decodes `{name}`"));
            assert!(envelope.extra.is_empty(), "`{name}` fell into extra");
            let bytes = envelope.to_msgpack().expect("encode");
            assert_eq!(
                Envelope::from_msgpack(&bytes).expect("decode"),
                envelope,
                "{name}"
            );
        }
    }

    #[test]
    fn nulls_duplicates_and_missing_fields_are_refused_by_name() {
        let base = || json!({"type": "t", "eventId": "e", "timestamp": "2026-01-01T00:00:00Z"});
        let mut null_id = base();
        null_id["sessionId"] = Value::Null;
        assert!(decode(null_id).expect_err("null").starts_with("sessionId:"));

        let mut null_payload = base();
        null_payload["payload"] = Value::Null;
        assert_eq!(
            decode(null_payload).expect("payload may be null").payload,
            Some(Value::Null)
        );

        let mut no_type = base();
        no_type.as_object_mut().expect("object").remove("type");
        assert!(decode(no_type)
            .expect_err("missing")
            .contains("missing field `type`"));

        let mut no_id = base();
        no_id.as_object_mut().expect("object").remove("eventId");
        assert_eq!(decode(no_id).expect("eventId defaults").event_id, "");

        // MessagePack can hold a key twice where JSON objects cannot.
        for key in ["sessionId", "xCustom"] {
            let twice = fixmap(&[
                ("type", "t"),
                ("timestamp", "2026-01-01T00:00:00Z"),
                (key, "a"),
                (key, "b"),
            ]);
            let error = Envelope::from_msgpack(&twice).expect_err("duplicate");
            assert!(
                error
                    .to_string()
                    .contains(&format!("duplicate field `{key}`")),
                "{error}"
            );
        }
    }

    /// An envelope with every optional field set (in a scrambled order of assignment), unknown
    /// fields, a null payload and nested objects: the bytes the derived serializer gave it.
    fn rich_envelope() -> crate::Envelope {
        let mut object = serde_json::json!({"type": "tool.completed", "eventId": "evt-rich", "timestamp": "2026-05-11T10:00:00.123456789Z"});
        for (i, name) in super::OPTIONAL_FIELDS.iter().enumerate().rev() {
            let value = match *name {
                "sequence" => serde_json::json!(42),
                "provenance" => serde_json::json!("observed"),
                "payload" => serde_json::Value::Null,
                n if super::super::fields::holds_text(n) => {
                    serde_json::json!(format!("{n}-{i}"))
                }
                n => serde_json::json!({"z": i, "a": [n, {"k": null}], "m": 1.5}),
            };
            object[*name] = value;
        }
        object["zCustom"] = serde_json::json!({"b": 1, "a": 2});
        object["aCustom"] = serde_json::json!([true, "x"]);
        serde_path_to_error::deserialize(object).expect("rich envelope")
    }

    #[test]
    fn the_stored_bytes_are_the_derived_serializer_s() {
        // Captured from the derived `Serialize` (with `#[serde(flatten)]`) this replaced: the
        // format of every body written before must not move by a byte. `to_msgpack` writes
        // through `envelope/encode.rs`, so this pins that encoder too.
        let expected = include_str!("rich_envelope.hex").trim();
        let envelope = rich_envelope();
        let bytes = envelope.to_msgpack().expect("encode");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        assert_eq!(Envelope::from_msgpack(&bytes).expect("decode"), envelope);
    }
}
