//! [`EventIds`]: the ids an event is found by (its own, and those naming its stream, task and
//! run), read from a stored body without decoding the rest of it: the ids are borrowed from the
//! body, and every other value is stepped over by its length, with no allocation and no UTF-8
//! check. A rebuild that splits the log by stream reads every event's stream this way and
//! decodes in full only the events it applies; the index is rebuilt from them alone.

use crate::error::EnvelopeError;

/// The ids an event is found by, borrowed from its stored body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventIds<'a> {
    /// `eventId` (every stored event has one).
    pub event_id: Option<&'a str>,
    /// `runId`.
    pub run_id: Option<&'a str>,
    /// `sessionId`.
    pub session_id: Option<&'a str>,
    /// `taskId`.
    pub task_id: Option<&'a str>,
    /// `runtimeId`.
    pub runtime_id: Option<&'a str>,
}

impl<'a> EventIds<'a> {
    /// Reads the ids from a stored MessagePack body (`docs/FORMAT.md`).
    ///
    /// This checks only the body's outline and the five ids: a body it accepts may still fail
    /// [`Envelope::from_msgpack`](crate::Envelope::from_msgpack), which checks everything.
    ///
    /// # Errors
    /// [`EnvelopeError::Decode`] when the body is not a MessagePack map with string keys, is cut
    /// short, gives one of the five ids twice, or gives one that is not a string.
    pub fn from_msgpack(body: &'a [u8]) -> Result<EventIds<'a>, EnvelopeError> {
        let mut reader = Reader { bytes: body, at: 0 };
        let entries = reader
            .map_len()?
            .ok_or_else(|| decode_error("the body is not a map", 0))?;
        let mut ids = EventIds::default();
        for _ in 0..entries {
            let key_at = reader.at;
            let key = reader
                .str()?
                .ok_or_else(|| decode_error("a key is not a string", key_at))?;
            let slot = match key {
                b"eventId" => &mut ids.event_id,
                b"runId" => &mut ids.run_id,
                b"sessionId" => &mut ids.session_id,
                b"taskId" => &mut ids.task_id,
                b"runtimeId" => &mut ids.runtime_id,
                _ => {
                    reader.skip_value()?;
                    continue;
                }
            };
            let value_at = reader.at;
            let value = reader
                .str()?
                .ok_or_else(|| decode_error("an id is not a string", value_at))?;
            let value = std::str::from_utf8(value)
                .map_err(|_| decode_error("an id is not UTF-8", value_at))?;
            if slot.replace(value).is_some() {
                return Err(decode_error("an id is given twice", key_at));
            }
        }
        Ok(ids)
    }

    /// The stream key, as [`Envelope::stream_key`](crate::Envelope::stream_key) gives it for the
    /// decoded event.
    #[must_use]
    pub fn stream_key(&self) -> String {
        let (kind, id) = self.stream_key_parts();
        // Not `format!`: this runs for every event a rebuild reads, and the formatting
        // machinery costs several times the two copies.
        let mut key = String::with_capacity(kind.len() + id.len());
        key.push_str(kind);
        key.push_str(id);
        key
    }

    /// The stream key in its two parts, without allocating: the kind with its colon
    /// (`session:`, `task:`, `runtime:`, or `none:` with an empty id) and the id.
    #[must_use]
    pub fn stream_key_parts(&self) -> (&'static str, &'a str) {
        if let Some(id) = self.session_id {
            ("session:", id)
        } else if let Some(id) = self.task_id {
            ("task:", id)
        } else if let Some(id) = self.runtime_id {
            ("runtime:", id)
        } else {
            ("none:", "")
        }
    }
}

fn decode_error(what: &str, at: usize) -> EnvelopeError {
    EnvelopeError::Decode(format!("{what} (body byte {at})"))
}

/// A cursor over MessagePack bytes that reads lengths and steps over values.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
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

    /// A big-endian unsigned length of `n` bytes (1, 2 or 4).
    fn len(&mut self, n: usize) -> Result<usize, EnvelopeError> {
        let bytes = self.take(n)?;
        let value = bytes.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b));
        usize::try_from(value).map_err(|_| decode_error("a length does not fit", self.at))
    }

    fn peek(&self) -> Result<u8, EnvelopeError> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or_else(|| decode_error("the body is cut short", self.at))
    }

    /// The entry count of a map at the cursor, or `None` (cursor unmoved) when it is not one.
    fn map_len(&mut self) -> Result<Option<usize>, EnvelopeError> {
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

    /// The bytes of a string at the cursor, or `None` (cursor unmoved) when it is not one. Like
    /// the envelope's decoder (serde reads a string from MessagePack `bin` too), `bin` counts.
    fn str(&mut self) -> Result<Option<&'a [u8]>, EnvelopeError> {
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

    /// Steps over one value, nested arrays and maps included. Every value takes at least one
    /// byte, so a claimed count larger than the body fails when the bytes run out.
    fn skip_value(&mut self) -> Result<(), EnvelopeError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    fn body(json: &str) -> Vec<u8> {
        let mut next = 0;
        let mut ids = || {
            next += 1;
            format!("gen-{next}")
        };
        Envelope::from_json_slice(json.as_bytes(), &mut ids)
            .unwrap()
            .to_msgpack()
            .unwrap()
    }

    #[test]
    fn gives_the_ids_the_decoded_envelope_gives() {
        for json in [
            r#"{"type":"a.b","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1","taskId":"t1","runtimeId":"r1","payload":{"sessionId":"not this","deep":[{"taskId":7}]}}"#,
            r#"{"eventId":"e1","runId":"run-1","type":"a.b","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1","payload":{"runId":"not this"}}"#,
            r#"{"type":"a.b","timestamp":"2026-05-11T10:00:00Z","taskId":"t1","runtimeId":"r1"}"#,
            r#"{"type":"a.b","timestamp":"2026-05-11T10:00:00Z","runtimeId":"r1","custom":{"x":1}}"#,
            r#"{"type":"a.b","timestamp":"2026-05-11T10:00:00Z"}"#,
        ] {
            let bytes = body(json);
            let decoded = Envelope::from_msgpack(&bytes).unwrap();
            let ids = EventIds::from_msgpack(&bytes).unwrap();
            assert_eq!(ids.stream_key(), decoded.stream_key(), "{json}");
            assert_eq!(ids.event_id, Some(decoded.event_id.as_str()), "{json}");
            assert_eq!(ids.run_id, decoded.run_id.as_deref(), "{json}");
            assert_eq!(ids.task_id, decoded.task_id.as_deref(), "{json}");
            let (kind, id) = ids.stream_key_parts();
            assert_eq!(format!("{kind}{id}"), decoded.stream_key(), "{json}");
        }
    }

    #[test]
    fn steps_over_every_kind_of_value() {
        // A payload holding every MessagePack kind the JSON form and the journal write, and
        // some they do not (bin, ext, float32): each is stepped over by its length.
        let mut body = vec![0x84];
        body.push(0xa1);
        body.push(b'x');
        body.extend_from_slice(&[
            0xdc, 0, 18, 0x00, 0xff, 0xc0, 0xc2, 0xc3, 0xcc, 1, 0xcd, 0, 1,
        ]);
        body.extend_from_slice(&[0xce, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1]);
        body.extend_from_slice(&[0xd0, 1, 0xd1, 0, 1, 0xd2, 0, 0, 0, 1]);
        body.extend_from_slice(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 1, 0xca, 0, 0, 0, 0]);
        body.extend_from_slice(&[0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xc4, 2, 9, 9]);
        body.extend_from_slice(&[0xd4, 1, 2, 0xc7, 1, 5, 7]);
        body.push(0xa1);
        body.push(b'y');
        body.extend_from_slice(&[
            0xde, 0, 1, 0xd9, 1, b'k', 0xdc, 0, 2, 0x81, 0xa0, 0x90, 0xa0,
        ]);
        body.push(0xa9);
        body.extend_from_slice(b"sessionId");
        body.push(0xa2);
        body.extend_from_slice(b"s1");
        body.push(0xa6);
        body.extend_from_slice(b"taskId");
        body.push(0xa2);
        body.extend_from_slice(b"t1");
        let ids = EventIds::from_msgpack(&body).unwrap();
        assert_eq!(ids.session_id, Some("s1"));
        assert_eq!(ids.task_id, Some("t1"));
        assert_eq!(ids.stream_key(), "session:s1");
        // Cut anywhere, the body is refused, never read past its end.
        for cut in 0..body.len() {
            assert!(
                EventIds::from_msgpack(&body[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn refuses_an_id_given_twice_or_an_array_claiming_more_than_the_body_holds() {
        let mut twice = vec![0x82];
        for _ in 0..2 {
            twice.push(0xa6);
            twice.extend_from_slice(b"taskId");
            twice.push(0xa1);
            twice.push(b't');
        }
        let e = EventIds::from_msgpack(&twice).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        let huge = [0x81, 0xa1, b'p', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00];
        assert!(EventIds::from_msgpack(&huge).is_err());
    }

    #[test]
    fn refuses_a_body_that_is_not_a_map_or_an_id_that_is_not_a_string() {
        assert!(EventIds::from_msgpack(&[0x93, 1, 2, 3]).is_err());
        assert!(EventIds::from_msgpack(&[]).is_err());
        // {"sessionId": 5}
        let mut bad = vec![0x81, 0xa9];
        bad.extend_from_slice(b"sessionId");
        bad.push(5);
        assert!(EventIds::from_msgpack(&bad).is_err());
    }
}
