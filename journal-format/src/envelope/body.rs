//! Reads an [`Envelope`] straight from its stored MessagePack body (`docs/FORMAT.md`), through
//! the cursor of `envelope/msgpack.rs`.
//!
//! Every event a reader, a rebuild, a replay or the index asks for in full is decoded here. It
//! replaces the serde path (`rmp_serde` driving the visitor of `envelope/codec.rs`) not for the
//! walk itself, which costs about the same (the cost is in the strings and maps it builds: see
//! `docs/PERFORMANCE.md`), but for what serde cannot do: decode into an envelope already held,
//! its strings' buffers reused for the next event ([`decode_into`]); match known keys as bytes
//! without checking them as UTF-8 first; hold bodies to the leading-fields rule the id reader
//! relies on; and name the body byte and the field of every error.
//!
//! It reads what the serde path read, to the same envelope (a property test holds them to it, and
//! the serde path stays the reference for the JSON form), and refuses what it refused:
//! - `type` and `timestamp` are required, `eventId` defaults to empty;
//! - an optional field that is present must hold a value of its type: an explicit `nil` is an
//!   error, except for `payload`, whose type is any JSON value;
//! - a key given twice is refused, whether it names a field or not.
//!
//! It is stricter in three ways, over bytes the journal never writes: bytes after the envelope's
//! map are refused (the serde path ignored them), and so is a `nil` where an object field's map
//! belongs (the serde path read it as an empty map), and so is a body whose leading fields
//! (`type` to `runId`, see [`is_leading`]) do not all come before the others (the serde path
//! matched keys in any order).

use std::ops::Range;

use super::msgpack::{decode_error, Reader};
use super::{Envelope, Object, Provenance};
use crate::error::EnvelopeError;
use serde_json::Value;

/// Decodes a stored body. Does not [`Envelope::validate`] it.
pub(super) fn decode(body: &[u8]) -> Result<Envelope, EnvelopeError> {
    let mut envelope = Envelope::default();
    decode_fields::<false>(body, &mut envelope, None)?;
    Ok(envelope)
}

/// Decodes a stored body into `envelope`, which it replaces entirely, reusing the buffers of
/// its strings for the same fields of the new event (a reader of many events saves an
/// allocation and a free per field). Does not [`Envelope::validate`] it. On an error,
/// `envelope` is the default envelope: never a mix of the event before and this one that
/// could pass for an event.
pub(super) fn decode_into(body: &[u8], envelope: &mut Envelope) -> Result<(), EnvelopeError> {
    decode_fields::<true>(body, envelope, None).inspect_err(|_| *envelope = Envelope::default())
}

/// [`decode_into`], except for the payload: `envelope.payload` is left `None`, and the range of
/// the payload value's bytes, checked as [`Reader::value`] would check them, is returned with
/// whether a map in it gives a key twice (`None` when the body has no payload).
pub(super) fn decode_into_deferring_payload(
    body: &[u8],
    envelope: &mut Envelope,
) -> Result<Option<(Range<usize>, bool)>, EnvelopeError> {
    let mut payload = None;
    decode_fields::<true>(body, envelope, Some(&mut payload))
        .inspect_err(|_| *envelope = Envelope::default())?;
    Ok(payload)
}

/// Decodes a stored body into `envelope`, overwriting its fields in place: a field the body
/// gives takes its value (a string into the buffer the field already holds), a field it does
/// not give is cleared (unless `HELD` is false: the envelope is the default, with nothing to
/// clear, and this copy of the function has no code for it), and `extra` is emptied first.
/// No default envelope is built and no old one dropped per event: an envelope has dozens of
/// fields and `extra`, and building and dropping one per event is a large part of a rebuild's
/// decoding. With `deferred`, the payload
/// is checked but not decoded, and the range of its value's bytes is put there, with whether a
/// map in it gives a key twice.
fn decode_fields<const HELD: bool>(
    body: &[u8],
    envelope: &mut Envelope,
    deferred: Option<&mut Option<(Range<usize>, bool)>>,
) -> Result<(), EnvelopeError> {
    let mut reader = Reader::new(body);
    let entries = reader
        .map_len()?
        .ok_or_else(|| decode_error("the body is not a map", 0))?;
    let deferring = deferred.is_some();
    let mut payload: Option<(Range<usize>, bool)> = None;
    envelope.extra.clear();

    macro_rules! read_fields {
        ($($field:ident = $name:literal),* $(,)?) => {
            /// Each field's bit in `given`: the required fields, then the optional ones in
            /// declaration order.
            #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
            #[derive(Clone, Copy)]
            enum Bit { event_type, event_id, timestamp, $($field),* }
            const _: () = assert!(
                [$($name),*].len() + 3 <= u128::BITS as usize,
                "a field's bit must fit in `Given`"
            );
            // Which fields the body gave, to refuse a second value and to clear the others.
            let mut given = Given::default();
            // The first key that is not a leading field, once met: a leading key after it
            // breaks the order.
            let mut past_leading: Option<&[u8]> = None;
            for _ in 0..entries {
                let key_at = reader.at;
                // Known keys are matched as bytes: equal to an ASCII name, they are UTF-8. Each
                // arm knows whether its key is a leading field (a constant), and checks the
                // order before reading the value.
                let key = reader.key()?;
                match key {
                    b"type" => {
                        order(true, key, key_at, &mut past_leading)?;
                        given.take(Bit::event_type as u32, "field `type`", key_at)?;
                        reader.text_into(&mut envelope.event_type, "field `type`")?;
                    }
                    b"eventId" => {
                        order(true, key, key_at, &mut past_leading)?;
                        given.take(Bit::event_id as u32, "field `eventId`", key_at)?;
                        reader.text_into(&mut envelope.event_id, "field `eventId`")?;
                    }
                    b"timestamp" => {
                        order(true, key, key_at, &mut past_leading)?;
                        given.take(Bit::timestamp as u32, "field `timestamp`", key_at)?;
                        reader.text_into(&mut envelope.timestamp, "field `timestamp`")?;
                    }
                    keys::payload if deferring => {
                        order(false, key, key_at, &mut past_leading)?;
                        if payload.is_some() {
                            return Err(decode_error("duplicate field `payload`", key_at));
                        }
                        let start = reader.at;
                        let repeats = reader.check_value(1)?;
                        payload = Some((start..reader.at, repeats));
                    }
                    $(keys::$field => {
                        const WHAT: &str = concat!("field `", $name, "`");
                        const LEADING: bool = is_leading($name.as_bytes());
                        order(LEADING, key, key_at, &mut past_leading)?;
                        given.take(Bit::$field as u32, WHAT, key_at)?;
                        Field::read_into(&mut envelope.$field, &mut reader, WHAT)?;
                    })*
                    _ => {
                        order(false, key, key_at, &mut past_leading)?;
                        let key = std::str::from_utf8(key)
                            .map_err(|_| decode_error("a key is not valid UTF-8", key_at))?;
                        let value = reader.value(1)?;
                        if envelope.extra.insert(key.to_owned(), value).is_some() {
                            return Err(decode_error(&format!("duplicate field `{key}`"), key_at));
                        }
                    }
                }
            }
            // Bytes after the map are reported before a missing field, as they always were.
            if reader.remaining() > 0 {
                return Err(decode_error(
                    &format!("{} bytes follow the envelope", reader.remaining()),
                    reader.at,
                ));
            }
            if !given.has(Bit::event_type as u32) {
                return Err(missing("type"));
            }
            if !given.has(Bit::timestamp as u32) {
                return Err(missing("timestamp"));
            }
            if !given.has(Bit::event_id as u32) {
                envelope.event_id.clear();
            }
            // A deferred payload never sets its bit: the envelope's is cleared here. Fields
            // already `None` are left alone: assigning would call their drop for nothing.
            if HELD {
                $(if envelope.$field.is_some() && !given.has(Bit::$field as u32) {
                    envelope.$field = None;
                })*
            }
        };
    }
    optional_fields!(read_fields);

    if let Some(deferred) = deferred {
        *deferred = payload;
    }
    Ok(())
}

/// Checks the leading-fields rule for `key`, at body byte `key_at`: a leading key after the first
/// key that is not one is refused, naming both. `past` holds that first other key once met.
// Always inlined: `leading` is a constant at every call.
#[inline(always)]
fn order<'a>(
    leading: bool,
    key: &'a [u8],
    key_at: usize,
    past: &mut Option<&'a [u8]>,
) -> Result<(), EnvelopeError> {
    match (leading, *past) {
        (true, Some(before)) => Err(out_of_order(key, before, key_at)),
        (false, None) => {
            *past = Some(key);
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cold]
fn out_of_order(key: &[u8], before: &[u8], key_at: usize) -> EnvelopeError {
    decode_error(
        &format!(
            "field `{}` is stored after `{}`: the fields `type` to `runId` come first \
             (docs/FORMAT.md)",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(before),
        ),
        key_at,
    )
}

/// The fields a body gave, one bit each (an envelope has fewer than 128 fields).
#[derive(Default)]
struct Given(u128);

impl Given {
    /// Marks field `bit` given; an error naming `what` when it already was.
    // Always inlined: `bit` is a constant at every call, and the shift of a `u128` by a
    // variable is not free.
    #[inline(always)]
    fn take(&mut self, bit: u32, what: &str, key_at: usize) -> Result<(), EnvelopeError> {
        let mask = 1u128 << bit;
        if self.0 & mask != 0 {
            return Err(decode_error(&format!("duplicate {what}"), key_at));
        }
        self.0 |= mask;
        Ok(())
    }

    #[inline(always)]
    fn has(&self, bit: u32) -> bool {
        self.0 & (1u128 << bit) != 0
    }
}

/// Whether `key` is one of the leading fields, which a stored body holds before any other:
/// `type`, `eventId`, `timestamp`, and the optional fields declared before `attemptId`. The
/// encoder writes them first (its order is the declaration order); [`super::EventIds`] relies
/// on it to stop reading at the first other field, so a body that breaks it is refused here.
pub(super) const fn is_leading(key: &[u8]) -> bool {
    matches!(
        key,
        b"type"
            | b"eventId"
            | b"timestamp"
            | b"schemaVersion"
            | b"runtimeId"
            | b"sessionId"
            | b"threadId"
            | b"turnId"
            | b"taskId"
            | b"runId"
    )
}

/// The stored name of each optional field as bytes, named by the field: the patterns the
/// decoder matches keys with.
mod keys {
    macro_rules! key_bytes {
        ($($field:ident = $name:literal),* $(,)?) => {
            $(
                #[allow(non_upper_case_globals)]
                pub(super) const $field: &[u8] = $name.as_bytes();
            )*
        };
    }
    optional_fields!(key_bytes);
}

fn missing(name: &str) -> EnvelopeError {
    EnvelopeError::Decode(format!("missing field `{name}`"))
}

/// The type of an envelope field, as the stored body holds it.
trait Field: Sized {
    /// Reads a value of the field `what` names.
    fn read(reader: &mut Reader<'_>, what: &str) -> Result<Self, EnvelopeError>;

    /// Reads a value of the field `what` names into `slot`, which holds the field's value in
    /// the event decoded before (or `None`); a type with a buffer takes it over.
    #[inline]
    fn read_into(
        slot: &mut Option<Self>,
        reader: &mut Reader<'_>,
        what: &str,
    ) -> Result<(), EnvelopeError> {
        *slot = Some(Self::read(reader, what)?);
        Ok(())
    }
}

impl Field for String {
    fn read(reader: &mut Reader<'_>, what: &str) -> Result<Self, EnvelopeError> {
        reader.text(what).map(str::to_owned)
    }

    #[inline]
    fn read_into(
        slot: &mut Option<Self>,
        reader: &mut Reader<'_>,
        what: &str,
    ) -> Result<(), EnvelopeError> {
        match slot {
            Some(value) => reader.text_into(value, what),
            None => {
                *slot = Some(Self::read(reader, what)?);
                Ok(())
            }
        }
    }
}

impl Field for u64 {
    fn read(reader: &mut Reader<'_>, what: &str) -> Result<Self, EnvelopeError> {
        reader.unsigned(what)
    }
}

impl Field for Provenance {
    fn read(reader: &mut Reader<'_>, what: &str) -> Result<Self, EnvelopeError> {
        let at = reader.at;
        match reader.text(what)? {
            "observed" => Ok(Provenance::Observed),
            "projected" => Ok(Provenance::Projected),
            "inferred" => Ok(Provenance::Inferred),
            other => Err(decode_error(
                &format!("{what} is `{other}`, not one of `observed`, `projected`, `inferred`"),
                at,
            )),
        }
    }
}

impl Field for Value {
    fn read(reader: &mut Reader<'_>, _: &str) -> Result<Self, EnvelopeError> {
        reader.value(1)
    }
}

impl Field for Object {
    fn read(reader: &mut Reader<'_>, what: &str) -> Result<Self, EnvelopeError> {
        Ok(Box::new(reader.object(1, what)?))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::super::codec::OPTIONAL_FIELDS;
    use super::super::StoredPayload;
    use crate::Envelope;

    /// The serde path this decoder replaced: the reference it must agree with.
    fn by_serde(body: &[u8]) -> Result<Envelope, String> {
        rmp_serde::from_slice::<Envelope>(body).map_err(|e| e.to_string())
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..20).prop_map(Value::from),
                prop::collection::vec((".{0,8}", inner), 0..20)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// The JSON value a field of this name holds (the rule of `codec.rs`'s rich envelope).
    fn arb_field(name: &'static str) -> BoxedStrategy<Value> {
        match name {
            "sequence" => any::<u64>().prop_map(Value::from).boxed(),
            "provenance" => prop::sample::select(vec!["observed", "projected", "inferred"])
                .prop_map(Value::from)
                .boxed(),
            "payload" => arb_json().boxed(),
            n if super::super::fields::holds_text(n) => ".{1,300}".prop_map(Value::from).boxed(),
            _ => prop::collection::vec(("[a-zA-Z]{0,10}", arb_json()), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>()))
                .boxed(),
        }
    }

    fn arb_envelope() -> impl Strategy<Value = Envelope> {
        let fields: Vec<_> = OPTIONAL_FIELDS
            .iter()
            .map(|&name| {
                proptest::option::weighted(0.3, arb_field(name)).prop_map(move |v| (name, v))
            })
            .collect();
        let extra = prop::collection::vec(("x[a-zA-Z]{0,10}", arb_json()), 0..4);
        (fields, extra, ".{1,20}", ".{0,20}").prop_map(|(fields, extra, kind, id)| {
            let mut object =
                json!({"type": kind, "eventId": id, "timestamp": "2026-05-11T10:00:00Z"});
            for (name, value) in fields {
                if let Some(value) = value {
                    object[name] = value;
                }
            }
            for (name, value) in extra {
                object[name] = value;
            }
            serde_json::from_value(object).expect("a generated envelope")
        })
    }

    /// What each decoder makes of `body` agrees: the same envelope, or both refuse it; the
    /// differences allowed are the two strictnesses of the module's doc.
    fn agree(body: &[u8]) -> Result<(), TestCaseError> {
        match (super::decode(body), by_serde(body)) {
            (Ok(ours), Ok(theirs)) => prop_assert_eq!(ours, theirs),
            (Err(ours), Ok(_)) => prop_assert!(
                ["follow the envelope", "is not a map", "come first"]
                    .iter()
                    .any(|allowed| ours.to_string().contains(allowed)),
                "refused what serde read: {}",
                ours
            ),
            (Ok(ours), Err(theirs)) => {
                prop_assert!(false, "read what serde refused ({}): {:?}", theirs, ours);
            }
            (Err(_), Err(_)) => {}
        }
        reused_agrees(body)?;
        deferred_agrees(body)
    }

    /// An envelope as a reader holds it after an event with most fields set.
    fn used() -> Envelope {
        serde_json::from_value(json!({
            "type": "tool.call.completed", "eventId": "evt-used", "timestamp": "2026-05-11T10:00:00Z",
            "schemaVersion": "1", "runtimeId": "rt", "sessionId": "s-used", "threadId": "t",
            "turnId": "u", "taskId": "k", "runId": "r", "toolCallId": "c", "sequence": 9,
            "provenance": "observed", "payload": {"tool": "x", "ok": true},
            "refs": {"a": 1}, "task": {"title": "t"}, "somethingElse": [1, 2],
        }))
        .expect("a used envelope")
    }

    /// Decoding `body` into a used envelope gives what decoding it into a new one gives, or
    /// the same error and the default envelope.
    fn reused_agrees(body: &[u8]) -> Result<(), TestCaseError> {
        let mut reused = used();
        match (super::decode_into(body, &mut reused), super::decode(body)) {
            (Ok(()), Ok(fresh)) => prop_assert_eq!(reused, fresh),
            (Err(ours), Err(fresh)) => {
                prop_assert_eq!(ours.to_string(), fresh.to_string());
                prop_assert_eq!(reused, Envelope::default());
            }
            (ours, fresh) => prop_assert!(false, "reused {:?}, fresh {:?}", ours, fresh.err()),
        }
        Ok(())
    }

    /// Decoding `body` with its payload deferred gives what a full decode gives: the same
    /// envelope but for the payload, a payload that decodes to the full decode's (and whose
    /// string fields read the same), or the same error.
    fn deferred_agrees(body: &[u8]) -> Result<(), TestCaseError> {
        let mut deferred = Envelope::default();
        match (
            super::decode_into_deferring_payload(body, &mut deferred),
            super::decode(body),
        ) {
            (Ok(range), Ok(mut full)) => {
                let payload = full.payload.take();
                prop_assert_eq!(deferred, full);
                let stored = range.map(|(r, repeats)| StoredPayload::checked(&body[r], repeats));
                let value = stored.map(|p| p.to_value().expect("checked bytes decode"));
                prop_assert_eq!(&value, &payload);
                if let (Some(stored), Some(value)) = (stored, &value) {
                    let keys: Vec<&str> = match value {
                        Value::Object(map) => map.keys().map(String::as_str).collect(),
                        _ => Vec::new(),
                    };
                    for key in keys.into_iter().chain(["absent"]) {
                        prop_assert_eq!(
                            stored.str_field(key).expect("checked bytes"),
                            value.get(key).and_then(Value::as_str)
                        );
                    }
                }
            }
            (Err(deferred), Err(full)) => prop_assert_eq!(deferred.to_string(), full.to_string()),
            (deferred, full) => prop_assert!(
                false,
                "deferred: {:?}, full: {:?}",
                deferred.map(|_| ()),
                full.map(|_| ())
            ),
        }
        Ok(())
    }

    /// A body of `type`, `timestamp` and the given raw entries (a key, then its value's bytes).
    fn body_with(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut body = vec![0x80 | u8::try_from(2 + entries.len()).expect("fixmap")];
        for (key, value) in [
            ("type", &[0xa1, b't'][..]),
            ("timestamp", &[0xa1, b'z'][..]),
        ]
        .into_iter()
        .chain(entries.iter().copied())
        {
            body.push(0xa0 | u8::try_from(key.len()).expect("fixstr"));
            body.extend_from_slice(key.as_bytes());
            body.extend_from_slice(value);
        }
        body
    }

    #[test]
    fn reads_the_corners_of_messagepack_as_serde_did() {
        let nested = |levels: usize| {
            let mut value = vec![0x91; levels];
            value.push(0xc0);
            value
        };
        let read: &[(&str, &[u8], Result<Value, &str>)] = &[
            // A later entry for a key replaces the earlier one, in its place.
            (
                "payload",
                &[0x83, 0xa1, b'a', 1, 0xa1, b'b', 2, 0xa1, b'a', 3],
                Ok(json!({"a": 3, "b": 2})),
            ),
            ("payload", &[0xca, 0x3f, 0xc0, 0, 0], Ok(json!(1.5))),
            (
                "payload",
                &[0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0],
                Ok(Value::Null),
            ),
            ("payload", &[0xd0, 0x80], Ok(json!(-128))),
            ("payload", &[0xd3, 0, 0, 0, 0, 0, 0, 0, 5], Ok(json!(5))),
            ("payload", &[0xe0], Ok(json!(-32))),
            (
                "payload",
                &[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                Ok(json!(u64::MAX)),
            ),
            ("payload", &[0xc0], Ok(Value::Null)),
            (
                "payload",
                &[0xdc, 0, 2, 0xc3, 0xc2],
                Ok(json!([true, false])),
            ),
            ("payload", &[0xc4, 1, b'x'], Err("binary data")),
            ("payload", &[0xd4, 1, 2], Err("extension")),
            ("payload", &[0x81, 1, 2], Err("a key is not a string")),
            ("payload", &[0xc1], Err("0xc1")),
            ("payload", &[0xa2, 0xff, 0xfe], Err("not valid UTF-8")),
        ];
        for (key, value, expected) in read {
            let body = body_with(&[(key, value)]);
            let decoded = super::decode(&body);
            match expected {
                Ok(expected) => {
                    assert_eq!(decoded.expect("decode").payload.as_ref(), Some(expected));
                }
                Err(part) => {
                    let error = decoded.expect_err("refused").to_string();
                    assert!(error.contains(part), "{error}");
                }
            }
            agree(&body).expect("agrees with serde");
        }

        let fields: &[(&str, &[u8], Result<(), &str>)] = &[
            ("sessionId", &[0xc4, 2, b's', b'1'], Ok(())),
            (
                "sessionId",
                &[0xc0],
                Err("field `sessionId` is not a string"),
            ),
            ("sessionId", &[7], Err("field `sessionId` is not a string")),
            (
                "sequence",
                &[0xd0, 0xff],
                Err("field `sequence` is negative"),
            ),
            ("sequence", &[0xd0, 0x05], Ok(())),
            ("sequence", &[0xa1, b'5'], Err("not an unsigned integer")),
            (
                "provenance",
                &[0xa4, b's', b'a', b'i', b'd'],
                Err("`said`, not one of"),
            ),
            ("task", &[0xa1, b'x'], Err("field `task` is not a map")),
            ("task", &[0xc0], Err("field `task` is not a map")), // serde: `{}`
            ("xCustom", &[0xc0], Ok(())),
        ];
        for (key, value, expected) in fields {
            let body = body_with(&[(key, value)]);
            match (super::decode(&body), expected) {
                (Ok(_), Ok(())) => {}
                (Err(error), Err(part)) => {
                    assert!(error.to_string().contains(part), "{key}: {error}");
                }
                (decoded, _) => panic!("{key}: {decoded:?}"),
            }
            agree(&body).expect("agrees with serde");
        }

        // Nesting: the envelope's map is the first level, as the serde path counted.
        for levels in [
            super::super::msgpack::MAX_DEPTH - 1,
            super::super::msgpack::MAX_DEPTH,
        ] {
            let body = body_with(&[("payload", &nested(levels))]);
            assert_eq!(
                super::decode(&body).is_ok(),
                levels < super::super::msgpack::MAX_DEPTH
            );
            agree(&body).expect("agrees with serde");
        }

        // Bytes after the map: serde stopped reading at its end; this refuses them.
        let mut trailing = body_with(&[]);
        trailing.push(0xc0);
        let error = super::decode(&trailing).expect_err("trailing").to_string();
        assert!(
            error.contains("1 bytes follow the envelope (body byte 20)"),
            "{error}"
        );
        assert!(by_serde(&trailing).is_ok());
    }

    #[test]
    fn a_leading_field_after_any_other_kind_of_field_is_refused_naming_both() {
        // After a known field that is not leading, a payload (read or deferred), and a field
        // the envelope does not know.
        for other in ["attemptId", "payload", "unknownField"] {
            let mut fields = serde_json::Map::new();
            fields.insert("type".into(), json!("x.y"));
            fields.insert("timestamp".into(), json!("2026-05-11T10:00:00Z"));
            fields.insert(other.into(), json!("v"));
            fields.insert("sessionId".into(), json!("s1"));
            let body = rmp_serde::to_vec(&Value::Object(fields)).expect("encode");
            let expected = format!("field `sessionId` is stored after `{other}`");
            let error = super::decode(&body).expect_err("out of order").to_string();
            assert!(error.contains(&expected), "{error}");
            let mut envelope = Envelope::default();
            let error = super::decode_into_deferring_payload(&body, &mut envelope)
                .expect_err("out of order")
                .to_string();
            assert!(error.contains(&expected), "{error}");
        }
    }

    #[test]
    fn a_body_without_an_event_id_leaves_none_from_the_event_before() {
        let body = rmp_serde::to_vec(&json!({"type": "x.y", "timestamp": "2026-05-11T10:00:00Z"}))
            .expect("encode");
        let mut reused = used();
        super::decode_into(&body, &mut reused).expect("decode");
        assert_eq!(reused.event_id, "");
        assert_eq!(reused, super::decode(&body).expect("decode"));
        // Decoded, it fails the checks (no event id): the public decode leaves the default.
        let mut reused = used();
        let error = reused
            .decode_msgpack(&body)
            .expect_err("an event without an id");
        assert!(error.to_string().contains("eventId"), "{error}");
        assert_eq!(reused, Envelope::default());
        let mut reused = used();
        assert!(reused.decode_msgpack_deferring_payload(&body).is_err());
        assert_eq!(reused, Envelope::default());
        // Trailing bytes are reported before a missing field, as they always were.
        let mut cut =
            rmp_serde::to_vec(&json!({"timestamp": "2026-05-11T10:00:00Z"})).expect("encode");
        cut.push(0xc0);
        let error = super::decode_into(&cut, &mut reused).expect_err("refused");
        assert!(
            error.to_string().contains("1 bytes follow the envelope"),
            "{error}"
        );
        assert_eq!(reused, Envelope::default());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn reads_every_envelope_as_serde_did(envelope in arb_envelope()) {
            let body = envelope.to_msgpack().expect("encode");
            prop_assert_eq!(super::decode(&body).expect("decode"), envelope);
            agree(&body)?;
        }

        #[test]
        fn reads_a_body_in_any_order_the_leading_rule_allows(
            envelope in arb_envelope(),
            order in any::<prop::sample::Index>(),
            reverse in any::<bool>(),
        ) {
            // The encoder writes fields in declaration order; another writer may put the
            // fields after the leading ones in any order, its unknown keys among them.
            let Value::Object(object) = serde_json::to_value(&envelope).expect("to JSON") else {
                unreachable!("an envelope is a JSON object")
            };
            let (mut leading, mut rest): (Vec<_>, Vec<_>) =
                object.into_iter().partition(|(key, _)| super::is_leading(key.as_bytes()));
            leading.reverse();
            if reverse {
                rest.reverse();
            }
            if !rest.is_empty() {
                let by = order.index(rest.len());
                rest.rotate_left(by);
            }
            let map: Vec<(String, Value)> = leading.into_iter().chain(rest).collect();
            let len = u16::try_from(map.len()).expect("fewer than 2^16 fields");
            // MessagePack's lengths are big-endian by its specification.
            #[allow(clippy::big_endian_bytes)]
            let len = len.to_be_bytes();
            let mut body = vec![0xde]; // map16
            body.extend(len);
            for (key, value) in &map {
                body.extend(rmp_serde::to_vec(key).expect("encode"));
                body.extend(rmp_serde::to_vec(value).expect("encode"));
            }
            prop_assert_eq!(super::decode(&body).expect("decode"), envelope);
            agree(&body)?;
        }

        #[test]
        fn decoding_into_a_used_envelope_gives_what_a_fresh_one_would(
            envelopes in prop::collection::vec(arb_envelope(), 1..6),
            damaged in any::<prop::sample::Index>(),
        ) {
            let mut reused = Envelope::default();
            for (i, envelope) in envelopes.iter().enumerate() {
                let body = envelope.to_msgpack().expect("encode");
                if i == damaged.index(envelopes.len()) {
                    // A failed decode leaves nothing that leaks into the next one.
                    prop_assert!(super::decode_into(&body[..body.len() / 2], &mut reused).is_err());
                }
                if i % 2 == 0 {
                    super::decode_into(&body, &mut reused).expect("decode");
                    prop_assert_eq!(&reused, envelope);
                } else {
                    // Deferring the payload clears the one the envelope held before.
                    super::decode_into_deferring_payload(&body, &mut reused).expect("decode");
                    let mut expected = envelope.clone();
                    expected.payload = None;
                    prop_assert_eq!(&reused, &expected);
                }
            }
        }

        #[test]
        fn agrees_with_serde_on_damaged_bodies(
            envelope in arb_envelope(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..4),
        ) {
            let mut body = envelope.to_msgpack().expect("encode");
            for (at, byte, how) in edits {
                let at = at.index(body.len());
                match how {
                    0 => body[at] = byte,
                    1 => body.insert(at, byte),
                    _ => { body.remove(at); }
                }
                if body.is_empty() {
                    break;
                }
            }
            agree(&body)?;
        }

        #[test]
        fn reads_an_arbitrary_payload_as_serde_did(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            agree(&body_with(&[("payload", &bytes)]))?;
        }

        #[test]
        fn agrees_with_serde_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            // `type` and `timestamp`, then a third entry (and whatever follows) from `bytes`.
            let mut body = body_with(&[]);
            body[0] = 0x83;
            body.extend_from_slice(&bytes);
            agree(&body)?;
        }
    }
}
