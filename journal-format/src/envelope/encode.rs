//! The writer of the stored body: an [`Envelope`] as MessagePack, written straight into the
//! caller's buffer.
//!
//! It writes the bytes `rmp_serde` writes through the `Serialize` implementation of
//! `envelope/codec.rs` (the tests here compare the two on every kind of field and value), and
//! it is the append path's encoder, because going through serde and `rmp`'s `Write`-based
//! writers costs much more per event.
//!
//! **Invariants:** every length and integer takes the smallest MessagePack form that holds it
//! (what `rmp` chose); map entries come in the order of `envelope/codec.rs`; a value nested
//! deeper than an event may be written ([`NEST_LEVELS_MAX`], the envelope's map counting as the
//! first level, within what the decoder reads) is refused, so that nothing is written that cannot
//! be read back or given again as JSON.

// MessagePack's numbers and lengths are big-endian by its specification; the journal's own
// fields (the frame header, `docs/FORMAT.md`) stay little-endian.
#![allow(clippy::big_endian_bytes)]

use serde_json::{Map, Number, Value};

use super::{Envelope, Provenance, NEST_LEVELS_MAX};
use crate::error::EnvelopeError;

/// Appends the stored body of `envelope` to `out`. On an error, `out` may hold part of it: the
/// caller truncates.
pub(super) fn write(envelope: &Envelope, out: &mut Vec<u8>) -> Result<(), EnvelopeError> {
    // The map's length is counted as its entries are written, into a one-byte fixmap header
    // written first and widened in place in the rare map of 16 entries or more: a count of the
    // thirty-odd optional fields beforehand cost as much as writing the header's map.
    let start = out.len();
    out.push(0x80);
    let mut len = 3;
    entry(out, key!("type"), &envelope.event_type, 1)?;
    entry(out, key!("eventId"), &envelope.event_id, 1)?;
    entry(out, key!("timestamp"), &envelope.timestamp, 1)?;
    macro_rules! encode {
        ($($field:ident = $name:literal),* $(,)?) => {
            $(
                if let Some(value) = &envelope.$field {
                    entry(out, key!($name), value, 1)?;
                    len += 1;
                }
            )*
        };
    }
    optional_fields!(encode);
    for (key, item) in &envelope.extra {
        str(out, key)?;
        value(out, item, 1)?;
    }
    len += envelope.extra.len();
    debug_assert_eq!(len, entries(envelope), "the map's length is its entries'");
    match (u8::try_from(len), out.get_mut(start)) {
        (Ok(small @ 0..16), Some(first)) => *first = 0x80 | small,
        _ => {
            let mut header = Vec::with_capacity(5);
            map_len(&mut header, len)?;
            out.splice(start..=start, header);
        }
    }
    Ok(())
}

/// The number of entries of the body's map: `type`, `eventId`, `timestamp`, the optional
/// fields present and the unknown ones. The serde form (`envelope/codec.rs`) announces the same.
pub(super) fn entries(envelope: &Envelope) -> usize {
    macro_rules! present {
        ($($field:ident = $name:literal),* $(,)?) => {
            0 $(+ usize::from(envelope.$field.is_some()))*
        };
    }
    3 + optional_fields!(present) + envelope.extra.len()
}

/// A value of one of the envelope's field types, written at nesting `depth` (the envelope's
/// own map is depth 1).
trait Field {
    fn write(&self, out: &mut Vec<u8>, depth: usize) -> Result<(), EnvelopeError>;
}

impl Field for String {
    fn write(&self, out: &mut Vec<u8>, _depth: usize) -> Result<(), EnvelopeError> {
        str(out, self)
    }
}

impl Field for u64 {
    fn write(&self, out: &mut Vec<u8>, _depth: usize) -> Result<(), EnvelopeError> {
        unsigned(out, *self);
        Ok(())
    }
}

impl Field for Provenance {
    fn write(&self, out: &mut Vec<u8>, _depth: usize) -> Result<(), EnvelopeError> {
        // A unit variant is its (snake_case) name.
        str(
            out,
            match self {
                Provenance::Observed => "observed",
                Provenance::Projected => "projected",
                Provenance::Inferred => "inferred",
            },
        )
    }
}

impl Field for Value {
    fn write(&self, out: &mut Vec<u8>, depth: usize) -> Result<(), EnvelopeError> {
        value(out, self, depth)
    }
}

impl Field for Box<Map<String, Value>> {
    fn write(&self, out: &mut Vec<u8>, depth: usize) -> Result<(), EnvelopeError> {
        object(out, self, depth)
    }
}

/// A field of the envelope's own: its name (as [`key!`] encodes it), then its value.
fn entry<F: Field + ?Sized, const N: usize>(
    out: &mut Vec<u8>,
    key: &[u8; N],
    field: &F,
    depth: usize,
) -> Result<(), EnvelopeError> {
    out.extend_from_slice(key);
    field.write(out, depth)
}

/// A field name as a MessagePack string, encoded at compile time: writing it is then a copy of
/// a known length, where [`str`] chose the header and called `memcpy` for each of the twenty-odd
/// names of an event.
macro_rules! key {
    ($name:expr) => {{
        const KEY: [u8; $name.len() + 1] = fixstr($name);
        &KEY
    }};
}
use key;

/// `name` as a MessagePack fixstr of `N` bytes (its header, then its bytes). Evaluated at
/// compile time only ([`key!`]): an index out of bounds or a name of 32 bytes or more fails the
/// build, it cannot panic at run time.
#[allow(clippy::indexing_slicing)]
const fn fixstr<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    assert!(
        bytes.len() < 32 && bytes.len() + 1 == N,
        "a field name is a fixstr"
    );
    let mut out = [0u8; N];
    out[0] = 0xa0 | bytes.len() as u8;
    let mut i = 0;
    while i < bytes.len() {
        out[i + 1] = bytes[i];
        i += 1;
    }
    out
}

/// A JSON value inside a map or array at `depth`: it opens level `depth + 1` if it is one.
pub(super) fn value(out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), EnvelopeError> {
    match value {
        Value::Null => out.push(0xc0),
        Value::Bool(false) => out.push(0xc2),
        Value::Bool(true) => out.push(0xc3),
        Value::Number(n) => number(out, n)?,
        Value::String(s) => str(out, s)?,
        Value::Array(items) => {
            let depth = nest(depth)?;
            array_len(out, items.len())?;
            for item in items {
                self::value(out, item, depth)?;
            }
        }
        Value::Object(map) => object(out, map, depth)?,
    }
    Ok(())
}

pub(super) fn object(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    depth: usize,
) -> Result<(), EnvelopeError> {
    let depth = nest(depth)?;
    map_len(out, map.len())?;
    for (key, item) in map {
        str(out, key)?;
        value(out, item, depth)?;
    }
    Ok(())
}

/// The level a container inside level `depth` opens, refused past [`NEST_LEVELS_MAX`].
fn nest(depth: usize) -> Result<usize, EnvelopeError> {
    let inner = depth + 1;
    if inner > NEST_LEVELS_MAX {
        return Err(EnvelopeError::Encode(format!(
            "arrays and maps nest deeper than {NEST_LEVELS_MAX} levels (the event's object \
             counting as the first), deeper than an event may"
        )));
    }
    Ok(inner)
}

fn number(out: &mut Vec<u8>, n: &Number) -> Result<(), EnvelopeError> {
    if let Some(u) = n.as_u64() {
        unsigned(out, u);
    } else if let Some(i) = n.as_i64() {
        signed(out, i);
    } else if let Some(f) = n.as_f64() {
        tagged(out, 0xcb, &f.to_be_bytes());
    } else {
        // Only a number beyond f64 (serde_json's `arbitrary_precision`) lands here.
        return Err(EnvelopeError::Encode(format!(
            "the number {n} fits neither a 64-bit integer nor a float"
        )));
    }
    Ok(())
}

/// A marker followed by its big-endian operand.
fn tagged(out: &mut Vec<u8>, marker: u8, operand: &[u8]) {
    out.push(marker);
    out.extend_from_slice(operand);
}

fn unsigned(out: &mut Vec<u8>, u: u64) {
    if u < 0x80 {
        out.push(u as u8);
    } else if let Ok(b) = u8::try_from(u) {
        tagged(out, 0xcc, &[b]);
    } else if let Ok(w) = u16::try_from(u) {
        tagged(out, 0xcd, &w.to_be_bytes());
    } else if let Ok(w) = u32::try_from(u) {
        tagged(out, 0xce, &w.to_be_bytes());
    } else {
        tagged(out, 0xcf, &u.to_be_bytes());
    }
}

/// A negative integer (a non-negative one is [`unsigned`], as `rmp` wrote it).
fn signed(out: &mut Vec<u8>, i: i64) {
    if i >= 0 {
        unsigned(out, i.unsigned_abs());
    } else if i >= -32 {
        out.push(i as u8);
    } else if let Ok(b) = i8::try_from(i) {
        tagged(out, 0xd0, &b.to_be_bytes());
    } else if let Ok(w) = i16::try_from(i) {
        tagged(out, 0xd1, &w.to_be_bytes());
    } else if let Ok(w) = i32::try_from(i) {
        tagged(out, 0xd2, &w.to_be_bytes());
    } else {
        tagged(out, 0xd3, &i.to_be_bytes());
    }
}

pub(super) fn str(out: &mut Vec<u8>, s: &str) -> Result<(), EnvelopeError> {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else {
        header(out, len, [0xd9, 0xda, 0xdb], "a string")?;
    }
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn array_len(out: &mut Vec<u8>, len: usize) -> Result<(), EnvelopeError> {
    if len < 16 {
        out.push(0x90 | len as u8);
        Ok(())
    } else {
        header(out, len, [0, 0xdc, 0xdd], "an array")
    }
}

pub(super) fn map_len(out: &mut Vec<u8>, len: usize) -> Result<(), EnvelopeError> {
    if len < 16 {
        out.push(0x80 | len as u8);
        Ok(())
    } else {
        header(out, len, [0, 0xde, 0xdf], "a map")
    }
}

/// A length in its 8-, 16- or 32-bit form (`markers`; 0 where the form does not exist).
fn header(
    out: &mut Vec<u8>,
    len: usize,
    markers: [u8; 3],
    what: &str,
) -> Result<(), EnvelopeError> {
    let [m8, m16, m32] = markers;
    if m8 != 0 {
        if let Ok(b) = u8::try_from(len) {
            tagged(out, m8, &[b]);
            return Ok(());
        }
    }
    if let Ok(w) = u16::try_from(len) {
        tagged(out, m16, &w.to_be_bytes());
    } else if let Ok(w) = u32::try_from(len) {
        tagged(out, m32, &w.to_be_bytes());
    } else {
        return Err(EnvelopeError::Encode(format!(
            "{what} of {len} entries or bytes is longer than MessagePack can hold"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde_json::{json, Value};

    use super::super::codec::OPTIONAL_FIELDS;
    use crate::envelope::NEST_LEVELS_MAX;
    use crate::Envelope;

    /// The bytes `rmp_serde` writes through the envelope's `Serialize`: the reference.
    fn by_serde(envelope: &Envelope) -> Vec<u8> {
        let mut out = Vec::new();
        let mut serializer = rmp_serde::Serializer::new(&mut out).with_struct_map();
        envelope.serialize(&mut serializer).expect("serde encodes");
        out
    }

    fn by_hand(envelope: &Envelope) -> Vec<u8> {
        let mut out = Vec::new();
        super::write(envelope, &mut out).expect("encodes");
        out
    }

    fn base() -> Value {
        json!({"type": "t", "eventId": "e", "timestamp": "2026-01-01T00:00:00Z"})
    }

    /// Numbers at every boundary of every integer form, strings at every length form, and
    /// containers at every length form.
    fn values() -> Vec<Value> {
        let mut values = vec![
            json!(null),
            json!(true),
            json!(false),
            json!(0.5),
            json!(-1.0e300),
            json!(f64::MAX),
            json!(""),
            json!("é✓"),
            json!("observed"),
            json!("projected"),
            json!("inferred"),
            json!([]),
            json!({}),
            json!({"k": [1, "two", {"three": null}], "a": -7}),
        ];
        for n in [
            0u64,
            1,
            0x7f,
            0x80,
            0xff,
            0x100,
            0xffff,
            0x1_0000,
            0xffff_ffff,
        ]
        .into_iter()
        .chain([0x1_0000_0000, u64::MAX])
        {
            values.push(json!(n));
        }
        for n in [
            -1i64,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            i64::from(i32::MIN),
        ]
        .into_iter()
        .chain([i64::from(i32::MIN) - 1, i64::MIN])
        {
            values.push(json!(n));
        }
        for len in [31usize, 32, 255, 256, 65_535, 65_536] {
            values.push(Value::String("x".repeat(len)));
        }
        for len in [15usize, 16, 65_535, 65_536] {
            values.push(Value::Array(vec![json!(1); len]));
            let map: serde_json::Map<String, Value> =
                (0..len).map(|i| (format!("k{i}"), json!(i))).collect();
            values.push(Value::Object(map));
        }
        values
    }

    #[test]
    fn every_field_with_every_kind_of_value_is_written_as_serde_wrote_it() {
        let mut checked = 0;
        let values = values();
        for name in OPTIONAL_FIELDS
            .iter()
            .copied()
            .chain(["unknownField", "zz"])
        {
            for candidate in &values {
                let mut object = base();
                object[name] = candidate.clone();
                let Ok(envelope) = serde_json::from_value::<Envelope>(object) else {
                    continue; // not a value of this field's type
                };
                assert_eq!(by_hand(&envelope), by_serde(&envelope), "{name}");
                checked += 1;
            }
        }
        assert!(checked > 600, "only {checked} cases decoded");
    }

    #[test]
    fn a_full_envelope_and_map_lengths_past_fifteen_are_written_as_serde_wrote_them() {
        let mut object = base();
        for (i, name) in OPTIONAL_FIELDS.iter().enumerate() {
            // The first candidate of the field's type: a string, a number, an object, a
            // provenance.
            let candidates = [
                json!(format!("v{i}")),
                json!(i),
                json!({"k": [i]}),
                json!("observed"),
            ];
            let fits = candidates.into_iter().find(|candidate| {
                let mut alone = base();
                alone[*name] = candidate.clone();
                serde_json::from_value::<Envelope>(alone).is_ok()
            });
            object[*name] = fits.unwrap_or_else(|| panic!("no candidate fits `{name}`"));
        }
        for i in 0..40 {
            object[format!("extra{i}")] = json!(i);
        }
        let envelope: Envelope = serde_json::from_value(object).expect("decodes");
        assert_eq!(envelope.extra.len(), 40);
        assert_eq!(by_hand(&envelope), by_serde(&envelope));
        let decoded = Envelope::from_msgpack(&by_hand(&envelope)).expect("decodes");
        assert_eq!(decoded, envelope);
    }

    /// The encoder writes up to [`NEST_LEVELS_MAX`] levels and refuses one more; the decoder
    /// still reads the deeper bodies `rmp_serde` wrote, up to its own limit.
    #[test]
    fn a_value_nested_deeper_than_an_event_may_be_is_refused() {
        fn nested(levels: usize) -> Value {
            let mut value = json!(1);
            for _ in 0..levels {
                value = Value::Array(vec![value]);
            }
            value
        }
        // The envelope's map is level 1. A payload is a value at level 1: its outermost array
        // is level 2. An object field (`refs`) is a map at level 2, its arrays from level 3.
        let deepest = NEST_LEVELS_MAX - 1;
        /// Puts a nested value in one field of an envelope.
        type Set = fn(&mut Envelope, Value);
        let cases: [(&str, usize, Set); 2] = [
            ("payload", deepest, |e, v| e.payload = Some(v)),
            ("refs", deepest - 1, |e, v| {
                e.refs = Some(Box::new([("k".to_string(), v)].into_iter().collect()));
            }),
        ];
        for (field, deepest, set) in cases {
            let mut envelope: Envelope = serde_json::from_value(base()).expect("decodes");
            set(&mut envelope, nested(deepest));
            let body = by_hand(&envelope);
            assert_eq!(body, by_serde(&envelope), "{field}");
            assert!(Envelope::from_msgpack(&body).is_ok(), "{field}");

            set(&mut envelope, nested(deepest + 1));
            assert!(
                Envelope::from_msgpack(&by_serde(&envelope)).is_ok(),
                "{field}: a deeper body written before is still read"
            );
            let mut out = b"kept".to_vec();
            let error = envelope.write_msgpack(&mut out).expect_err("too deep");
            assert!(
                error.to_string().contains("nest deeper than"),
                "{field}: {error}"
            );
            assert_eq!(
                out, b"kept",
                "{field}: a refused body leaves the buffer as it was"
            );
        }
    }
}
