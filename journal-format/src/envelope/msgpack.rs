//! A cursor over the MessagePack bytes of a stored body: it reads markers, lengths, strings,
//! numbers and JSON values, checks a value without building it, and steps over values by their
//! lengths. [`EventIds`], the envelope's decoder (`envelope/body.rs`) and the readers of a
//! payload left in its stored form (`envelope/stored_payload.rs`, `envelope/value_de.rs`) read
//! through it.
//!
//! **Invariants:** the cursor never reads past the end of its bytes (every read goes through
//! [`Reader::take`], which checks the end first), and every error names the body byte where the
//! problem was found.
//!
//! [`EventIds`]: super::EventIds

use serde_json::{Map, Number, Value};

use crate::error::EnvelopeError;

/// How deeply arrays and maps may nest, the envelope's own map counting as the first level: the
/// limit of the `rmp_serde` decoder this replaced, so that every body it read is read here too.
pub(super) const MAX_DEPTH: usize = 1023;

/// The most entries an array or a map reserves room for before they are read.
const RESERVE_MAX: usize = 256;

/// Whether `bytes` are UTF-8, for bytes checked and not kept: ASCII (ids, keys, most text) is
/// told word by word, much cheaper than `std::str::from_utf8` on a short string, which checks
/// the rest.
fn is_utf8(bytes: &[u8]) -> bool {
    bytes.is_ascii() || std::str::from_utf8(bytes).is_ok()
}

/// The error for the string `what`, at body byte `at`, that is not UTF-8.
#[cold]
fn not_utf8(what: &str, at: usize) -> EnvelopeError {
    decode_error(&format!("{what} is not valid UTF-8"), at)
}

/// A decode error at body byte `at`.
pub(super) fn decode_error(what: &str, at: usize) -> EnvelopeError {
    EnvelopeError::Decode(format!("{what} (body byte {at})"))
}

/// A cursor over MessagePack bytes.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    /// The offset of the next byte to read.
    pub(super) at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// A second cursor at the same place, for looking ahead.
    pub(super) fn fork(&self) -> Reader<'a> {
        Reader {
            bytes: self.bytes,
            at: self.at,
        }
    }

    /// The bytes left after the cursor.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| decode_error("the body is cut short", self.at))?;
        let taken = self.bytes.get(self.at..end).unwrap_or_default();
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, EnvelopeError> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], EnvelopeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A big-endian unsigned length of `n` bytes (1, 2 or 4).
    fn len(&mut self, n: usize) -> Result<usize, EnvelopeError> {
        let bytes = self.take(n)?;
        let value = bytes.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b));
        usize::try_from(value).map_err(|_| decode_error("a length does not fit", self.at))
    }

    pub(super) fn peek(&self) -> Result<u8, EnvelopeError> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or_else(|| decode_error("the body is cut short", self.at))
    }

    /// The entry count of a map at the cursor, or `None` (cursor unmoved) when it is not one.
    pub(super) fn map_len(&mut self) -> Result<Option<usize>, EnvelopeError> {
        let len = match self.peek()? {
            m @ 0x80..=0x8f => {
                self.at += 1;
                usize::from(m & 0x0f)
            }
            0xde => {
                self.at += 1;
                self.len(2)?
            }
            0xdf => {
                self.at += 1;
                self.len(4)?
            }
            _ => return Ok(None),
        };
        Ok(Some(len))
    }

    /// The element count of an array at the cursor, or `None` (cursor unmoved) when it is not
    /// one.
    pub(super) fn array_len(&mut self) -> Result<Option<usize>, EnvelopeError> {
        let len = match self.peek()? {
            m @ 0x90..=0x9f => {
                self.at += 1;
                usize::from(m & 0x0f)
            }
            0xdc => {
                self.at += 1;
                self.len(2)?
            }
            0xdd => {
                self.at += 1;
                self.len(4)?
            }
            _ => return Ok(None),
        };
        Ok(Some(len))
    }

    /// The bytes of a `fixstr` at the cursor whole in the body (cursor moved past it), or `None`
    /// (cursor unmoved) for anything else, which the caller then reads the general way (a
    /// `fixstr` cut short among them, which that way reports). Nearly every key and id is a
    /// `fixstr` (at most 31 bytes, the length in its marker): read this way, a key costs much
    /// less than the general way.
    #[inline(always)]
    fn fixstr(&mut self) -> Option<&'a [u8]> {
        let marker = *self.bytes.get(self.at)?;
        if marker & 0xe0 != 0xa0 {
            return None;
        }
        let start = self.at + 1;
        let end = start + usize::from(marker & 0x1f);
        let bytes = self.bytes.get(start..end)?;
        self.at = end;
        Some(bytes)
    }

    /// The bytes of a string at the cursor, or `None` (cursor unmoved) when it is not one. Like
    /// serde's `String` read from MessagePack, `bin` counts.
    pub(super) fn str(&mut self) -> Result<Option<&'a [u8]>, EnvelopeError> {
        if let Some(bytes) = self.fixstr() {
            return Ok(Some(bytes));
        }
        let len = match self.peek()? {
            m @ 0xa0..=0xbf => {
                self.at += 1;
                usize::from(m & 0x1f)
            }
            0xd9 | 0xc4 => {
                self.at += 1;
                self.len(1)?
            }
            0xda | 0xc5 => {
                self.at += 1;
                self.len(2)?
            }
            0xdb | 0xc6 => {
                self.at += 1;
                self.len(4)?
            }
            _ => return Ok(None),
        };
        self.take(len).map(Some)
    }

    /// The bytes of a map key, which must be a `str` (not checked to be UTF-8).
    pub(super) fn key(&mut self) -> Result<&'a [u8], EnvelopeError> {
        if let Some(bytes) = self.fixstr() {
            return Ok(bytes);
        }
        let at = self.at;
        if !matches!(self.peek()?, 0xa0..=0xbf | 0xd9..=0xdb) {
            return Err(decode_error("a key is not a string", at));
        }
        self.str()?
            .ok_or_else(|| decode_error("a key is not a string", at))
    }

    /// The bytes of a string at the cursor and where it starts, not yet checked as UTF-8;
    /// `what` names it in the error when the value is not a string.
    // Always inlined: every string of every event read goes through it, and as a call (its
    // result a tuple) it slows a rebuild.
    #[inline(always)]
    fn text_bytes(&mut self, what: &str) -> Result<(&'a [u8], usize), EnvelopeError> {
        let at = self.at;
        let bytes = self
            .str()?
            .ok_or_else(|| decode_error(&format!("{what} is not a string"), at))?;
        Ok((bytes, at))
    }

    /// Steps over a UTF-8 string (`str`, or `bin` holding UTF-8), checking it as
    /// [`Reader::text`] does; `what` names it in the error.
    fn skip_text(&mut self, what: &str) -> Result<(), EnvelopeError> {
        let (bytes, at) = self.text_bytes(what)?;
        if is_utf8(bytes) {
            Ok(())
        } else {
            Err(not_utf8(what, at))
        }
    }

    /// A UTF-8 string (`str`, or `bin` holding UTF-8), borrowed; `what` names it in the error.
    pub(super) fn text(&mut self, what: &str) -> Result<&'a str, EnvelopeError> {
        let (bytes, at) = self.text_bytes(what)?;
        std::str::from_utf8(bytes).map_err(|_| not_utf8(what, at))
    }

    /// [`Reader::text`] into `buffer`, which it replaces. When the string's bytes equal what
    /// `buffer` holds (as consecutive events' types and session, thread and runtime ids often
    /// do), they are neither checked nor copied: a `String`'s bytes are UTF-8 already.
    pub(super) fn text_into(
        &mut self,
        buffer: &mut String,
        what: &str,
    ) -> Result<(), EnvelopeError> {
        let (bytes, at) = self.text_bytes(what)?;
        if buffer.as_bytes() != bytes {
            let text = std::str::from_utf8(bytes).map_err(|_| not_utf8(what, at))?;
            buffer.clear();
            buffer.push_str(text);
        }
        Ok(())
    }

    /// An unsigned integer of any width (a signed one that is not negative counts).
    pub(super) fn unsigned(&mut self, what: &str) -> Result<u64, EnvelopeError> {
        let at = self.at;
        match self.number()? {
            Some(Num::Unsigned(n)) => Ok(n),
            Some(Num::Signed(n)) => {
                u64::try_from(n).map_err(|_| decode_error(&format!("{what} is negative"), at))
            }
            _ => Err(decode_error(
                &format!("{what} is not an unsigned integer"),
                at,
            )),
        }
    }

    /// The number at the cursor, or `None` (cursor unmoved) when it is not one.
    // MessagePack's numbers are big-endian by its specification (the journal's own fields are
    // little-endian, which the workspace's lint guards).
    #[allow(clippy::big_endian_bytes)]
    pub(super) fn number(&mut self) -> Result<Option<Num>, EnvelopeError> {
        let marker = self.peek()?;
        if !matches!(marker, 0x00..=0x7f | 0xe0..=0xff | 0xca..=0xd3) {
            return Ok(None);
        }
        self.at += 1;
        Ok(Some(match marker {
            0x00..=0x7f => Num::Unsigned(u64::from(marker)),
            0xe0..=0xff => Num::Signed(i64::from(i8::from_be_bytes([marker]))),
            0xcc => Num::Unsigned(u64::from(self.byte()?)),
            0xcd => Num::Unsigned(u64::from(u16::from_be_bytes(self.array()?))),
            0xce => Num::Unsigned(u64::from(u32::from_be_bytes(self.array()?))),
            0xcf => Num::Unsigned(u64::from_be_bytes(self.array()?)),
            0xd0 => Num::Signed(i64::from(i8::from_be_bytes(self.array()?))),
            0xd1 => Num::Signed(i64::from(i16::from_be_bytes(self.array()?))),
            0xd2 => Num::Signed(i64::from(i32::from_be_bytes(self.array()?))),
            0xd3 => Num::Signed(i64::from_be_bytes(self.array()?)),
            0xca => Num::Float(f64::from(f32::from_be_bytes(self.array()?))),
            _ => Num::Float(f64::from_be_bytes(self.array()?)),
        }))
    }

    /// A JSON value at nesting level `depth` (the envelope's map is level 1).
    ///
    /// Reads what the `serde_json::Value` of the `rmp_serde` decoder this replaced read, to the
    /// same value: a float that is not finite becomes `null`; a map's later entry for a key
    /// replaces the earlier one, in the earlier one's place. Map keys must be `str`; `bin` and
    /// `ext`, which JSON cannot hold, are refused.
    pub(super) fn value(&mut self, depth: usize) -> Result<Value, EnvelopeError> {
        let at = self.at;
        if let Some(number) = self.number()? {
            return Ok(match number {
                Num::Unsigned(n) => Value::Number(n.into()),
                Num::Signed(n) => Value::Number(n.into()),
                Num::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            });
        }
        let marker = self.peek()?;
        match marker {
            0xc0 => {
                self.at += 1;
                Ok(Value::Null)
            }
            0xc2 | 0xc3 => {
                self.at += 1;
                Ok(Value::Bool(marker == 0xc3))
            }
            0xa0..=0xbf | 0xd9..=0xdb => Ok(Value::String(self.text("a string")?.to_owned())),
            0x90..=0x9f | 0xdc | 0xdd => {
                let len = self
                    .array_len()?
                    .ok_or_else(|| decode_error("a value is not an array", at))?;
                let depth = nested(depth, at)?;
                // Every value takes at least a byte: a count larger than what is left fails
                // when the bytes run out. What is reserved ahead is bounded, so that a claimed
                // count cannot make a small body reserve much (nested, each level would).
                let mut items = Vec::with_capacity(len.min(self.remaining()).min(RESERVE_MAX));
                for _ in 0..len {
                    items.push(self.value(depth)?);
                }
                Ok(Value::Array(items))
            }
            0x80..=0x8f | 0xde | 0xdf => Ok(Value::Object(self.object(depth, "a value")?)),
            _ => Err(not_json(marker, at)),
        }
    }

    /// A map of string keys to JSON values, at nesting level `depth` (see [`Reader::value`]);
    /// `what` names it in the error when it is not a map.
    pub(super) fn object(
        &mut self,
        depth: usize,
        what: &str,
    ) -> Result<Map<String, Value>, EnvelopeError> {
        let at = self.at;
        let len = self
            .map_len()?
            .ok_or_else(|| decode_error(&format!("{what} is not a map"), at))?;
        let depth = nested(depth, at)?;
        let mut map = Map::with_capacity(len.min(self.remaining() / 2).min(RESERVE_MAX));
        for _ in 0..len {
            let key_at = self.at;
            let key = std::str::from_utf8(self.key()?)
                .map_err(|_| decode_error("a key is not valid UTF-8", key_at))?
                .to_owned();
            let value = self.value(depth)?;
            map.insert(key, value);
        }
        Ok(map)
    }

    /// Steps over a JSON value at nesting level `depth`, checking everything [`Reader::value`]
    /// checks, with the same errors, but building nothing: for a payload whose decoding is
    /// deferred (`StoredPayload`), which [`Reader::value`] then reads without failing. A
    /// property test holds the two to accepting the same bytes. Returns whether a map in the
    /// value gives a key twice (which [`Reader::value`] keeps once, the later entry in the
    /// earlier one's place).
    pub(super) fn check_value(&mut self, depth: usize) -> Result<bool, EnvelopeError> {
        let at = self.at;
        if self.number()?.is_some() {
            return Ok(false);
        }
        let marker = self.peek()?;
        match marker {
            0xc0 | 0xc2 | 0xc3 => {
                self.at += 1;
                Ok(false)
            }
            0xa0..=0xbf | 0xd9..=0xdb => self.skip_text("a string").map(|_| false),
            0x90..=0x9f | 0xdc | 0xdd => {
                let len = self
                    .array_len()?
                    .ok_or_else(|| decode_error("a value is not an array", at))?;
                let depth = nested(depth, at)?;
                let mut repeats = false;
                for _ in 0..len {
                    repeats |= self.check_value(depth)?;
                }
                Ok(repeats)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let len = self
                    .map_len()?
                    .ok_or_else(|| decode_error("a value is not a map", at))?;
                let depth = nested(depth, at)?;
                // The keys seen: on the stack for a small map, hashed for a large one.
                const FEW: usize = 8;
                let mut few: [&[u8]; FEW] = [&[]; FEW];
                let mut many = std::collections::HashSet::new();
                let mut repeats = false;
                for i in 0..len {
                    let key_at = self.at;
                    let key = self.key()?;
                    if !is_utf8(key) {
                        return Err(decode_error("a key is not valid UTF-8", key_at));
                    }
                    repeats |= if len <= FEW {
                        let seen = few.get(..i).unwrap_or_default().contains(&key);
                        if let Some(slot) = few.get_mut(i) {
                            *slot = key;
                        }
                        seen
                    } else {
                        if many.capacity() == 0 {
                            many.reserve(len.min(RESERVE_MAX));
                        }
                        !many.insert(key)
                    };
                    repeats |= self.check_value(depth)?;
                }
                Ok(repeats)
            }
            _ => Err(not_json(marker, at)),
        }
    }

    /// The string a map at the cursor holds at key `name` (the later entry of a key given twice,
    /// as [`Reader::object`] keeps it), or `None` when the value is not a map, has no such key,
    /// or holds something other than a string there. For checked bytes: the other values are
    /// stepped over, not checked.
    pub(super) fn map_str(&mut self, name: &str) -> Result<Option<&'a str>, EnvelopeError> {
        let found = self.map_entry(name, |reader| {
            if matches!(reader.peek()?, 0xa0..=0xbf | 0xd9..=0xdb) {
                reader.text("a string").map(Some)
            } else {
                reader.skip_value().map(|()| None)
            }
        })?;
        Ok(found.flatten())
    }

    /// The value a map at the cursor holds at key `name` (the later entry of a key given twice,
    /// as [`Reader::object`] keeps it), read as [`Reader::value`] reads it at `depth`, or `None`
    /// when the value is not a map or has no such key. For checked bytes: the other values are
    /// stepped over, not checked nor built.
    pub(super) fn map_value(
        &mut self,
        name: &str,
        depth: usize,
    ) -> Result<Option<Value>, EnvelopeError> {
        self.map_entry(name, |reader| reader.value(depth))
    }

    /// What `read` makes of the value a map at the cursor holds at key `name` (the later entry
    /// of a key given twice, as [`Reader::object`] keeps it), or `None` when the value is not a
    /// map or has no such key; the other values are stepped over, not checked.
    fn map_entry<T>(
        &mut self,
        name: &str,
        mut read: impl FnMut(&mut Reader<'a>) -> Result<T, EnvelopeError>,
    ) -> Result<Option<T>, EnvelopeError> {
        let Some(len) = self.map_len()? else {
            return Ok(None);
        };
        let mut found = None;
        for _ in 0..len {
            if self.key()? == name.as_bytes() {
                found = Some(read(self)?);
            } else {
                self.skip_value()?;
            }
        }
        Ok(found)
    }

    /// Steps over one value, nested arrays and maps included. Every value takes at least one
    /// byte, so a claimed count larger than the body fails when the bytes run out.
    pub(super) fn skip_value(&mut self) -> Result<(), EnvelopeError> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let at = self.at;
            let marker = self.byte()?;
            let (data, values) = match marker {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
                0x80..=0x8f => (0, 2 * usize::from(marker & 0x0f)),
                0x90..=0x9f => (0, usize::from(marker & 0x0f)),
                0xa0..=0xbf => (usize::from(marker & 0x1f), 0),
                0xc4 | 0xd9 => (self.len(1)?, 0),
                0xc5 | 0xda => (self.len(2)?, 0),
                0xc6 | 0xdb => (self.len(4)?, 0),
                0xc7 => (self.len(1)? + 1, 0),
                0xc8 => (self.len(2)? + 1, 0),
                0xc9 => (self.len(4)?.saturating_add(1), 0),
                0xca | 0xce | 0xd2 => (4, 0),
                0xcb | 0xcf | 0xd3 => (8, 0),
                0xcc | 0xd0 => (1, 0),
                0xcd | 0xd1 => (2, 0),
                0xd4 => (2, 0),
                0xd5 => (3, 0),
                0xd6 => (5, 0),
                0xd7 => (9, 0),
                0xd8 => (17, 0),
                0xdc => (0, self.len(2)?),
                0xdd => (0, self.len(4)?),
                0xde => (0, self.len(2)?.saturating_mul(2)),
                0xdf => (0, self.len(4)?.saturating_mul(2)),
                0xc1 => return Err(decode_error("the marker 0xc1 is never used", at)),
            };
            self.take(data)?;
            pending = pending.saturating_add(values);
        }
        Ok(())
    }
}

/// A MessagePack number.
pub(super) enum Num {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

/// The error for a value at byte `at` whose marker is none of JSON's kinds: binary data, an
/// extension, or the unused `0xc1`. [`Reader::value`] and [`Reader::check_value`] both refuse
/// with it, so that their errors stay the same.
fn not_json(marker: u8, at: usize) -> EnvelopeError {
    match marker {
        0xc4..=0xc6 => decode_error("a value is binary data, which JSON cannot hold", at),
        0xc7..=0xc9 | 0xd4..=0xd8 => decode_error(
            "a value is a MessagePack extension, which JSON cannot hold",
            at,
        ),
        _ => decode_error("the marker 0xc1 is never used", at),
    }
}

/// The level inside a container found at level `depth`, or the error when that is too deep.
fn nested(depth: usize, at: usize) -> Result<usize, EnvelopeError> {
    let inner = depth + 1;
    if inner > MAX_DEPTH {
        return Err(decode_error(
            &format!("arrays and maps nest deeper than {MAX_DEPTH} levels"),
            at,
        ));
    }
    Ok(inner)
}

#[cfg(test)]
mod tests {
    use super::Reader;

    /// A string whose bytes run past the body is reported at the byte where they start,
    /// whichever way it is read, as before `fixstr` had its own path.
    #[test]
    fn a_string_cut_short_is_reported_where_its_bytes_start() {
        for (body, start) in [
            (&[0x81, 0xa5, b'a'][..], 2),
            (&[0x81, 0xd9, 0x05, b'a'][..], 3),
        ] {
            let cut = format!("the body is cut short (body byte {start})");
            let mut reader = Reader::new(body);
            assert_eq!(reader.map_len().expect("a map"), Some(1));
            let key = reader.key().expect_err("cut short").to_string();
            assert!(key.ends_with(&cut), "{key}");
            let mut reader = Reader::new(body);
            reader.at = 1;
            let string = reader.str().expect_err("cut short").to_string();
            assert!(string.ends_with(&cut), "{string}");
        }
        // Whole, it is read whole, and the cursor moves past it.
        let mut reader = Reader::new(&[0xa2, b'i', b'd', 0xc0]);
        assert_eq!(reader.key().expect("a key"), b"id");
        assert_eq!(reader.at, 3);
        assert_eq!(reader.str().expect("read"), None, "nil is not a string");
        assert_eq!(reader.at, 3, "unmoved");
    }
}
