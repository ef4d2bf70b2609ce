//! The body's MessagePack writer and reader, lent to the rest of the crate for maps that are
//! not an envelope: the sealed content of [`crate::seal`] is a map of JSON values written and
//! read with the same rules as a body (smallest forms, nesting bounded, no `bin` or `ext`).

use serde_json::{Map, Value};

use super::msgpack::{decode_error, Reader};
use super::{encode, NEST_LEVELS_MAX};
use crate::error::EnvelopeError;

/// Writes the header of a map of `len` entries.
///
/// # Errors
/// [`EnvelopeError::Encode`] past MessagePack's largest map.
pub(crate) fn map_len(out: &mut Vec<u8>, len: usize) -> Result<(), EnvelopeError> {
    encode::map_len(out, len)
}

/// Writes a string.
///
/// # Errors
/// [`EnvelopeError::Encode`] past MessagePack's longest string.
pub(crate) fn str(out: &mut Vec<u8>, s: &str) -> Result<(), EnvelopeError> {
    encode::str(out, s)
}

/// Writes a JSON value held by a map at nesting level `depth` (a top-level map is level 1).
///
/// # Errors
/// [`EnvelopeError::Encode`] for a value nested deeper than an event may hold.
pub(crate) fn value(out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), EnvelopeError> {
    debug_assert!(
        (1..=NEST_LEVELS_MAX).contains(&depth),
        "a value sits inside a map"
    );
    encode::value(out, value, depth)
}

/// Writes a map of JSON values held by a map at nesting level `depth`.
///
/// # Errors
/// As [`value`].
pub(crate) fn object(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    depth: usize,
) -> Result<(), EnvelopeError> {
    encode::object(out, map, depth)
}

/// Reads `bytes` as one top-level map of JSON values, every byte of it.
///
/// # Errors
/// [`EnvelopeError::Decode`] naming the offset where the bytes are not such a map.
pub(crate) fn read_map(bytes: &[u8], what: &str) -> Result<Map<String, Value>, EnvelopeError> {
    let mut reader = Reader::new(bytes);
    let map = reader.object(0, what)?;
    if reader.remaining() != 0 {
        return Err(decode_error(&format!("bytes follow {what}"), reader.at));
    }
    Ok(map)
}
