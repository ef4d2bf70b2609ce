//! A serde deserializer over a stored payload's checked MessagePack bytes that reads them as
//! `serde_json`'s deserializer of the [`Value`] they decode to would: a typed payload read from
//! the bytes equals the one read from the value, or both are refused, without the value being
//! built ([`StoredPayload::deserialize`](super::StoredPayload::deserialize)).
//!
//! `rmp_serde` does not do this: it reads `nil` as an empty map, for one, where the value's
//! deserializer refuses `null`. So every kind is mapped as `serde_json::Value` holds it (a
//! non-negative integer is unsigned whatever its marker, a float that is not finite is `null`),
//! each `deserialize_*` accepts what the value's accepts, and what is rare or intricate (enums,
//! bytes) is read by building that part's value and deserializing from it. A payload in which a
//! map gives a key twice (the value keeps the later entry in the earlier one's place) is not
//! read here at all ([`StoredPayload`](super::StoredPayload) goes through its value). A
//! property test over every payload type holds the two to the same results.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::msgpack::{Num, Reader};

/// A deserializer error: only whether there is one matters to a caller, which gets `None` for
/// a payload of another shape.
#[derive(Debug)]
pub(super) struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

impl From<crate::error::EnvelopeError> for Error {
    fn from(e: crate::error::EnvelopeError) -> Self {
        Error(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error(e.to_string())
    }
}

/// What the next value is, as `serde_json::Value` would hold it.
enum Kind<'a> {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(&'a str),
    Array(usize),
    Map(usize),
}

/// The deserializer: a cursor at a value of nesting level `depth` (the payload is at level 1,
/// as the decoder counts).
pub(super) struct ValueDe<'r, 'a> {
    pub(super) reader: &'r mut Reader<'a>,
    pub(super) depth: usize,
}

impl<'a> ValueDe<'_, 'a> {
    /// Reads the next value's kind, stepping past its marker (and a scalar's bytes).
    fn kind(&mut self) -> Result<Kind<'a>, Error> {
        let r = &mut *self.reader;
        if let Some(number) = r.number()? {
            return Ok(match number {
                Num::Unsigned(n) => Kind::Unsigned(n),
                Num::Signed(n) => u64::try_from(n).map_or(Kind::Signed(n), Kind::Unsigned),
                Num::Float(f) if f.is_finite() => Kind::Float(f),
                Num::Float(_) => Kind::Null,
            });
        }
        match r.peek()? {
            0xc0 => {
                r.take(1)?;
                Ok(Kind::Null)
            }
            m @ (0xc2 | 0xc3) => {
                r.take(1)?;
                Ok(Kind::Bool(m == 0xc3))
            }
            0xa0..=0xbf | 0xd9..=0xdb => Ok(Kind::Text(r.text("a string")?)),
            0x90..=0x9f | 0xdc | 0xdd => Ok(Kind::Array(r.array_len()?.unwrap_or_default())),
            0x80..=0x8f | 0xde | 0xdf => Ok(Kind::Map(r.map_len()?.unwrap_or_default())),
            _ => Err(Error("not a JSON value".into())),
        }
    }

    /// The next value, built: for what this module reads through `serde_json`.
    fn value(&mut self) -> Result<Value, Error> {
        Ok(self.reader.value(self.depth)?)
    }

    fn nested(&mut self) -> ValueDe<'_, 'a> {
        ValueDe {
            reader: &mut *self.reader,
            depth: self.depth + 1,
        }
    }

    fn visit_array<'de, V: Visitor<'de>>(
        &mut self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Error>
    where
        'a: 'de,
    {
        let mut seq = Seq {
            de: self.nested(),
            left: len,
        };
        let out = visitor.visit_seq(&mut seq)?;
        if seq.left == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(len, &"fewer elements in array"))
        }
    }

    fn visit_map<'de, V: Visitor<'de>>(&mut self, len: usize, visitor: V) -> Result<V::Value, Error>
    where
        'a: 'de,
    {
        let mut map = Entries {
            de: self.nested(),
            left: len,
            pending: false,
        };
        let out = visitor.visit_map(&mut map)?;
        map.skip_pending()?;
        if map.left == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(len, &"fewer elements in map"))
        }
    }
}

/// `deserialize_*` methods that read a number whatever its width ([`ValueDe::number`]).
macro_rules! numbers {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                self.number(visitor)
            }
        )*
    };
}

impl<'de, 'a: 'de> de::Deserializer<'de> for &mut ValueDe<'_, 'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(b),
            Kind::Unsigned(n) => visitor.visit_u64(n),
            Kind::Signed(n) => visitor.visit_i64(n),
            Kind::Float(f) => visitor.visit_f64(f),
            Kind::Text(s) => visitor.visit_borrowed_str(s),
            Kind::Array(len) => self.visit_array(len, visitor),
            Kind::Map(len) => self.visit_map(len, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        // `null`, or a float that is not finite (`null` in the value).
        let null = match self.reader.peek()? {
            0xc0 => true,
            0xca | 0xcb => match self.reader.fork().number()? {
                Some(Num::Float(f)) => !f.is_finite(),
                _ => false,
            },
            _ => false,
        };
        if null {
            self.kind()?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Null => visitor.visit_unit(),
            _ => Err(de::Error::custom("not null")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Bool(b) => visitor.visit_bool(b),
            _ => Err(de::Error::custom("not a boolean")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Text(s) => visitor.visit_borrowed_str(s),
            _ => Err(de::Error::custom("not a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        // `serde_json`'s raw value is read from the built value, as it reads it.
        if name.starts_with("$serde_json") {
            return Ok(self.value()?.deserialize_newtype_struct(name, visitor)?);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Array(len) => self.visit_array(len, visitor),
            _ => Err(de::Error::custom("not an array")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Map(len) => self.visit_map(len, visitor),
            _ => Err(de::Error::custom("not a map")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.kind()? {
            Kind::Array(len) => self.visit_array(len, visitor),
            Kind::Map(len) => self.visit_map(len, visitor),
            _ => Err(de::Error::custom("not a struct")),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        Ok(self.value()?.deserialize_enum(name, variants, visitor)?)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        Ok(self.value()?.deserialize_bytes(visitor)?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        Ok(self.value()?.deserialize_byte_buf(visitor)?)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.reader.skip_value()?;
        visitor.visit_unit()
    }

    // Numbers: each accepts any number, as the value's deserializer does (the visitor decides).
    numbers! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }
}

impl<'a> ValueDe<'_, 'a> {
    fn number<'de, V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Error>
    where
        'a: 'de,
    {
        match self.kind()? {
            Kind::Unsigned(n) => visitor.visit_u64(n),
            Kind::Signed(n) => visitor.visit_i64(n),
            Kind::Float(f) => visitor.visit_f64(f),
            _ => Err(de::Error::custom("not a number")),
        }
    }
}

/// Reads one value with `seed`, then steps over it if the seed returned without reading it (a
/// hand-written `Deserialize` may): the cursor stays on the value after, as it would over a
/// built value. Every read of a value moves the cursor, so an unmoved cursor means unread.
fn read_one<'de, 'a: 'de, T: DeserializeSeed<'de>>(
    de: &mut ValueDe<'_, 'a>,
    seed: T,
) -> Result<T::Value, Error> {
    let at = de.reader.at;
    let value = seed.deserialize(&mut *de)?;
    if de.reader.at == at {
        de.reader.skip_value()?;
    }
    Ok(value)
}

/// The elements of an array.
struct Seq<'r, 'a> {
    de: ValueDe<'r, 'a>,
    left: usize,
}

impl<'de, 'a: 'de> SeqAccess<'de> for Seq<'_, 'a> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        read_one(&mut self.de, seed).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// The entries of a map whose keys are all different. A key is read as a string, as
/// `serde_json` reads a map key that a type reads as a string. A type that reads its keys as
/// numbers, booleans or newtypes (which `serde_json` parses from the string) is refused here:
/// no payload type has such keys, and every payload type joins the property test in
/// `stored_payload.rs`, which would show one.
struct Entries<'r, 'a> {
    de: ValueDe<'r, 'a>,
    left: usize,
    /// A key was read and its value not yet: the visitor may go on without reading it, as it
    /// may with `serde_json`'s map, which holds the value aside.
    pending: bool,
}

impl Entries<'_, '_> {
    fn skip_pending(&mut self) -> Result<(), Error> {
        if std::mem::take(&mut self.pending) {
            self.de.reader.skip_value()?;
        }
        Ok(())
    }
}

impl<'de, 'a: 'de> MapAccess<'de> for Entries<'_, 'a> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        self.skip_pending()?;
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.pending = true;
        let key_at = self.de.reader.at;
        // Checked and visited as a string, never as bytes: serde's derived field visitors would
        // take bytes (and the bytes were checked when the event was decoded), but a flattened
        // `serde_json::Value`, a flattened map with enum keys or a hand-written identifier
        // visitor take only a string, and would refuse what the value reads.
        let key = std::str::from_utf8(self.de.reader.key()?)
            .map_err(|_| Error(format!("a key is not valid UTF-8 (byte {key_at})")))?;
        seed.deserialize(BorrowedStrDeserializer::<Error>::new(key))
            .map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        if !std::mem::take(&mut self.pending) {
            return Err(de::Error::custom("value is missing"));
        }
        read_one(&mut self.de, seed)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}
