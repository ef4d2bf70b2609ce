//! A payload left in its stored form: the MessagePack bytes of its value, checked when the event
//! was decoded ([`Envelope::decode_msgpack_deferring_payload`](super::Envelope::decode_msgpack_deferring_payload))
//! and decoded only when asked for. A reader of many events that needs the payloads of few (a
//! rebuild of read models) saves building a JSON value, its maps and strings, for each of the
//! others.
//!
//! **Invariant:** the bytes were checked by the decoder's `check_value`, which accepts exactly
//! what its `value` reads, so decoding them again does not fail; a failure would be a bug in
//! this module, and is reported as an error, never as an absent payload.

use serde_json::Value;

use super::msgpack::Reader;
use super::value_de::ValueDe;
use crate::error::EnvelopeError;

/// A payload's value as stored (MessagePack), checked; see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredPayload<'a> {
    bytes: &'a [u8],
    /// Whether a map in the value gives a key twice: such a payload is deserialized through
    /// its value, which keeps the later entry in the earlier one's place.
    repeats: bool,
}

impl<'a> StoredPayload<'a> {
    /// Bytes the decoder checked as a payload's value, and whether a map in it gives a key
    /// twice.
    pub(super) fn checked(bytes: &'a [u8], repeats: bool) -> StoredPayload<'a> {
        StoredPayload { bytes, repeats }
    }

    /// The payload as the JSON value [`Envelope::decode_msgpack`](super::Envelope::decode_msgpack)
    /// would have put in `payload`.
    ///
    /// # Errors
    /// None expected (see the module's invariant); the decoder's error, its byte counted from
    /// the payload's start, otherwise.
    pub fn to_value(&self) -> Result<Value, EnvelopeError> {
        Reader::new(self.bytes).value(1)
    }

    /// The payload deserialized as `T` straight from its bytes: what `T::deserialize(&value)`
    /// of its [`StoredPayload::to_value`] gives, without building the value (see
    /// `envelope/value_de.rs`).
    ///
    /// # Errors
    /// When the payload does not have `T`'s shape.
    pub fn deserialize<T: serde::de::DeserializeOwned>(&self) -> Result<T, EnvelopeError> {
        if self.repeats {
            return T::deserialize(&self.to_value()?)
                .map_err(|e| EnvelopeError::Decode(e.to_string()));
        }
        let mut reader = Reader::new(self.bytes);
        let mut de = ValueDe {
            reader: &mut reader,
            depth: 1,
        };
        T::deserialize(&mut de).map_err(|e| EnvelopeError::Decode(e.to_string()))
    }

    /// The string the payload holds at key `name`, borrowed, as
    /// `to_value()?.get(name).and_then(Value::as_str)` would give it, without building the value:
    /// `None` when the payload is not a map, has no such key, or holds something else there.
    ///
    /// # Errors
    /// As [`StoredPayload::to_value`].
    pub fn str_field(&self, name: &str) -> Result<Option<&'a str>, EnvelopeError> {
        Reader::new(self.bytes).map_str(name)
    }

    /// The value the payload holds at key `name`, as `to_value()?.get(name).cloned()` would give
    /// it, building that value only: `None` when the payload is not a map or has no such key.
    ///
    /// # Errors
    /// As [`StoredPayload::to_value`].
    pub fn field(&self, name: &str) -> Result<Option<Value>, EnvelopeError> {
        // The payload is read at depth 1 (`to_value`), so its fields' values at depth 2.
        Reader::new(self.bytes).map_value(name, 2)
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use proptest::prelude::*;
    use serde::de::DeserializeOwned;
    use serde::Deserialize;
    use serde_json::{Map, Value};

    use crate::payload::*;
    use crate::Envelope;

    /// A small deterministic generator (xorshift64*) for [`draw`].
    struct Dice(u64);

    impl Dice {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Below `n` (at least 1).
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % u64::try_from(n.max(1)).expect("small")).expect("small")
        }

        fn signed(&mut self) -> i64 {
            i64::from_le_bytes(self.next().to_le_bytes())
        }

        fn float(&mut self) -> f64 {
            // A float in about ±1e9, integral or not.
            (self.signed() % 2_000_000_000) as f64 / f64::from(1 + (self.below(4) as u32) * 7)
        }
    }

    /// A value drawn from `schema` (a node of a JSON schema whose `$defs` are `defs`): of its
    /// shape mostly, with its enumerated words, optional properties sometimes left out; and, one
    /// node in `bend` times, a value of some other kind instead, or an extra property.
    fn draw(schema: &Value, defs: &Value, rng: &mut Dice, depth: u32, bend: usize) -> Value {
        let roll = |rng: &mut Dice, n: usize| rng.below(n);
        if depth > 4 || roll(rng, bend) == 0 {
            return match roll(rng, 8) {
                0 => Value::Null,
                1 => Value::from(rng.below(2) == 0),
                2 => Value::from(rng.signed()),
                3 => Value::from(rng.next()),
                4 => Value::from(rng.float()),
                5 => Value::from("other"),
                6 => Value::Array(vec![Value::from("x"), Value::from(1)]),
                _ => serde_json::json!({"other": 1}),
            };
        }
        if let Some(Value::String(reference)) = schema.get("$ref") {
            let name = reference.trim_start_matches("#/$defs/");
            return draw(&defs[name], defs, rng, depth, bend);
        }
        for alternatives in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = schema.get(alternatives) {
                let pick = roll(rng, options.len());
                return draw(&options[pick], defs, rng, depth, bend);
            }
        }
        if let Some(Value::Array(words)) = schema.get("enum") {
            return words[roll(rng, words.len())].clone();
        }
        let kind = match schema.get("type") {
            Some(Value::Array(kinds)) => kinds[roll(rng, kinds.len())].clone(),
            Some(kind) => kind.clone(),
            None => Value::from(["string", "integer", "object"][roll(rng, 3)]),
        };
        match kind.as_str().unwrap_or_default() {
            "null" => Value::Null,
            "boolean" => Value::from(rng.below(2) == 0),
            "integer" => match roll(rng, 3) {
                0 => Value::from(rng.next() % 1000),
                1 => Value::from(rng.next()),
                _ => Value::from(rng.signed() % 1000),
            },
            "number" => match roll(rng, 2) {
                0 => Value::from(rng.float()),
                _ => Value::from(rng.next() % 1000),
            },
            "string" => Value::from(["", "a", "done", "2026-11-24T00:00:00Z"][roll(rng, 4)]),
            "array" => {
                let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
                (0..roll(rng, 4))
                    .map(|_| draw(&items, defs, rng, depth + 1, bend))
                    .collect()
            }
            _ => {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut map = Map::new();
                if let Some(Value::Object(properties)) = schema.get("properties") {
                    for (name, property) in properties {
                        if required.contains(&name.as_str()) || roll(rng, 2) == 0 {
                            map.insert(name.clone(), draw(property, defs, rng, depth + 1, bend));
                        }
                    }
                }
                if roll(rng, bend) == 0 {
                    map.insert("other".into(), Value::from(1));
                }
                Value::Object(map)
            }
        }
    }

    /// Payloads drawn from `T`'s JSON schema ([`draw`]), about half of which `T` reads.
    fn shaped<T: schemars::JsonSchema>() -> impl Strategy<Value = Value> {
        let schema = serde_json::to_value(schemars::schema_for!(T)).expect("a schema");
        (any::<u64>(), 3usize..40).prop_map(move |(seed, bend)| {
            let mut rng = Dice(seed | 1);
            let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
            draw(&schema, &defs, &mut rng, 0, bend)
        })
    }

    /// `T` from the payload's stored bytes is `T` from its JSON value: the same, or both refused.
    fn same_as_from_value<T>(payload: &Value) -> Result<(), TestCaseError>
    where
        T: DeserializeOwned + PartialEq + Debug,
    {
        let mut envelope = Envelope {
            event_type: "tool.result".into(),
            event_id: "e1".into(),
            timestamp: "2026-11-24T00:00:00Z".into(),
            payload: Some(payload.clone()),
            ..Envelope::default()
        };
        let body = envelope.to_msgpack().expect("encode");
        let stored = envelope
            .decode_msgpack_deferring_payload(&body)
            .expect("decode")
            .expect("a payload");
        prop_assert_eq!(
            stored.deserialize::<T>().ok(),
            T::deserialize(payload).ok(),
            "payload {}",
            payload
        );
        // Each field read alone is the value's, and a field it lacks is absent.
        let value = stored.to_value().expect("decode");
        if let Value::Object(fields) = &value {
            for (name, field) in fields {
                prop_assert_eq!(stored.field(name).expect("read"), Some(field.clone()));
            }
        }
        prop_assert_eq!(stored.field("absent from every shape").expect("read"), None);
        Ok(())
    }

    /// `bytes` as the decoder would check them.
    fn checked(bytes: &[u8]) -> super::StoredPayload<'_> {
        let repeats = super::Reader::new(bytes)
            .check_value(1)
            .expect("a valid value");
        super::StoredPayload::checked(bytes, repeats)
    }

    #[test]
    fn reads_a_key_given_twice_and_a_float_that_is_not_finite_as_the_value_does() {
        let text = |s: &str| {
            let mut out = vec![0xa0 | u8::try_from(s.len()).expect("fixstr")];
            out.extend_from_slice(s.as_bytes());
            out
        };
        // {"status": "failure", "status": "success"}: the later entry, as the value keeps it.
        let twice = [
            vec![0x82],
            text("status"),
            text("failure"),
            text("status"),
            text("success"),
        ]
        .concat();
        let stored = checked(&twice);
        assert!(stored.repeats);
        let from_value = ToolResultPayload::deserialize(&stored.to_value().expect("decode"));
        let read = stored.deserialize::<ToolResultPayload>().expect("read");
        assert_eq!(Some(&read), from_value.as_ref().ok());
        assert_eq!(read.status, Some(ToolResultStatus::Success));
        assert_eq!(
            stored.field("status").expect("read"),
            Some(Value::from("success"))
        );
        // {"costUsd": NaN}: `null` in the value, so no cost.
        let nan = [
            vec![0x81],
            text("costUsd"),
            vec![0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0],
        ]
        .concat();
        let stored = checked(&nan);
        assert!(!stored.repeats);
        let read = stored.deserialize::<CostPayload>().expect("read");
        assert_eq!(read.cost_usd, None);
        assert_eq!(
            Some(read),
            CostPayload::deserialize(&stored.to_value().expect("decode")).ok()
        );
    }

    #[test]
    fn a_field_nested_as_deep_as_the_decoder_reads_is_read_as_the_value_does() {
        // {"deep": [[[ … nil … ]]]}, `levels` arrays deep.
        let body = |levels: usize| {
            let mut bytes = vec![0x81, 0xa4];
            bytes.extend_from_slice(b"deep");
            bytes.extend(std::iter::repeat_n(0x91, levels));
            bytes.push(0xc0);
            bytes
        };
        let deepest = (1..1100)
            .take_while(|&n| super::Reader::new(&body(n)).check_value(1).is_ok())
            .last()
            .expect("some depth is read");
        assert!(deepest > 1000, "{deepest}");
        let bytes = body(deepest);
        let stored = checked(&bytes);
        let value = stored.to_value().expect("decode");
        assert_eq!(
            stored.field("deep").expect("read"),
            value.get("deep").cloned()
        );
        assert!(stored.field("deep").expect("read").is_some());
    }

    /// A hand-written `Deserialize` that returns without reading its value.
    #[derive(Debug, PartialEq)]
    struct Unread;

    impl<'de> Deserialize<'de> for Unread {
        fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Unread, D::Error> {
            Ok(Unread)
        }
    }

    #[test]
    fn a_value_left_unread_is_stepped_over_as_the_value_does() {
        #[derive(Debug, PartialEq, Deserialize)]
        struct Shape {
            a: Unread,
            b: Vec<Unread>,
            c: u64,
        }
        let payload = serde_json::json!({"a": {"deep": [1, 2]}, "b": [[1], {"x": 2}], "c": 7});
        let bytes = rmp_serde::to_vec_named(&payload).expect("encode");
        let stored = checked(&bytes);
        let read = stored.deserialize::<Shape>().expect("read");
        assert_eq!(Some(read), Shape::deserialize(&payload).ok());
    }

    #[test]
    fn keys_read_as_field_names_strings_and_enums_as_the_value_does() {
        #[derive(Debug, PartialEq, Eq, Hash, Deserialize)]
        #[serde(rename_all = "camelCase")]
        enum Side {
            Left,
            Right,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Inner {
            tool_name: String,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Shape {
            exit_code: u64,
            by_side: std::collections::HashMap<Side, u64>,
            labels: std::collections::BTreeMap<String, String>,
            #[serde(flatten)]
            inner: Inner,
            #[serde(flatten)]
            rest: std::collections::BTreeMap<String, Value>,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Strict {
            a: u64,
        }
        // Flattened into a JSON value, and into a map with enum keys: both read their keys as
        // strings only.
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct IntoValue {
            exit_code: u64,
            #[serde(flatten)]
            rest: Value,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        struct IntoEnumKeys {
            #[serde(flatten)]
            sides: std::collections::HashMap<Side, u64>,
        }
        let payload = serde_json::json!({
            "exitCode": 3,
            "bySide": {"left": 1, "right": 2},
            "labels": {"é": "accent", "k": "v"},
            "toolName": "shell",
            "other": [1, "x"],
        });
        let bytes = rmp_serde::to_vec_named(&payload).expect("encode");
        let stored = checked(&bytes);
        let read = stored.deserialize::<Shape>().expect("read");
        assert_eq!(read.inner.tool_name, "shell");
        assert_eq!(read.by_side.get(&Side::Right), Some(&2));
        assert_eq!(read.labels.get("é").map(String::as_str), Some("accent"));
        assert_eq!(Some(read), Shape::deserialize(&payload).ok());
        let read = stored
            .deserialize::<IntoValue>()
            .expect("read into a flattened value");
        assert_eq!(read.rest["toolName"], "shell");
        assert_eq!(Some(read), IntoValue::deserialize(&payload).ok());
        let sides = serde_json::json!({"left": 1, "right": 2});
        let bytes = rmp_serde::to_vec_named(&sides).expect("encode");
        let read = checked(&bytes)
            .deserialize::<IntoEnumKeys>()
            .expect("read into a flattened map with enum keys");
        assert_eq!(read.sides.get(&Side::Left), Some(&1));
        assert_eq!(Some(read), IntoEnumKeys::deserialize(&sides).ok());
        // An unknown field is refused by a strict type, naming it, as from the value.
        let payload = serde_json::json!({"a": 1, "bé": 2});
        let bytes = rmp_serde::to_vec_named(&payload).expect("encode");
        let error = checked(&bytes)
            .deserialize::<Strict>()
            .expect_err("an unknown field");
        assert!(error.to_string().contains("bé"), "{error}");
        assert!(Strict::deserialize(&payload).is_err());
    }

    macro_rules! deserialize_as_from_value {
        ($($name:ident: $type:ty),* $(,)?) => {
            proptest! {
                #![proptest_config(ProptestConfig::with_cases(256))]
                $(
                    #[test]
                    fn $name(payload in shaped::<$type>()) {
                        same_as_from_value::<$type>(&payload)?;
                    }
                )*
            }
        };
    }

    deserialize_as_from_value! {
        task: TaskPayload,
        evidence_requirements: EvidenceRequirements,
        attempt: AttemptPayload,
        action_required: ActionRequiredPayload,
        action_resolved: ActionResolvedPayload,
        tool_call: ToolCallPayload,
        tool_result: ToolResultPayload,
        checklist_item: ChecklistItem,
        checklist: ChecklistPayload,
        snapshot: SnapshotPayload,
        checkpoint: CheckpointPayload,
        dispatch_context: DispatchContext,
        completion_attempt: CompletionAttemptPayload,
        completion_decision: CompletionDecisionPayload,
        cost: CostPayload,
        artifact: ArtifactPayload,
        evidence: EvidencePayload,
        subagent: SubagentPayload,
        compaction: CompactionPayload,
        task_intent: TaskIntent,
        schedule: SchedulePayload,
        schedule_fired: ScheduleFiredPayload,
        sensor: SensorPayload,
        workflow: WorkflowPayload,
        handoff: HandoffPayload,
    }
}
