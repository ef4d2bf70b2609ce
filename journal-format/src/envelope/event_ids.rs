//! [`EventIds`]: the ids an event is found by (its own, and those naming its stream, task and
//! run), read from a stored body without decoding the rest of it: the ids are borrowed from the
//! body, the other leading fields are stepped over by their lengths, and reading stops at the
//! first field after them, with no allocation and no UTF-8 check but the ids'. A rebuild that
//! splits the log by stream reads every event's stream this way and decodes in full only the
//! events it applies; the index is rebuilt from them alone.

use super::body::is_leading;
use super::msgpack::{decode_error, Reader};
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
    /// It reads the leading fields only (`type` to `runId`, which a stored body holds before any
    /// other, `docs/FORMAT.md`) and stops at the first other field, so its cost does not grow
    /// with the payload. It checks only what it reads: a body it accepts may still fail
    /// [`Envelope::from_msgpack`](crate::Envelope::from_msgpack), which checks everything.
    ///
    /// # Errors
    /// [`EnvelopeError::Decode`] when the body is not a MessagePack map with string keys, is cut
    /// short in its leading fields, gives one of the five ids twice, or gives one that is not a
    /// string.
    pub fn from_msgpack(body: &'a [u8]) -> Result<EventIds<'a>, EnvelopeError> {
        let raw = RawIds::read(body, Until::LeadingEnd)?;
        let text = |id: Option<(&'a [u8], usize)>| {
            id.map(|(bytes, at)| {
                std::str::from_utf8(bytes).map_err(|_| decode_error("an id is not UTF-8", at))
            })
            .transpose()
        };
        Ok(EventIds {
            event_id: text(raw.event_id)?,
            run_id: text(raw.run_id)?,
            session_id: text(raw.session_id)?,
            task_id: text(raw.task_id)?,
            runtime_id: text(raw.runtime_id)?,
        })
    }

    /// The stream key of a stored body in its two parts, as [`EventIds::stream_key_parts`]
    /// gives them, the id as the bytes the body holds, not checked to be UTF-8: for a caller
    /// that only hashes it (the rebuild's partitions), and decodes in full the events it keeps.
    ///
    /// It stops at the session id, which decides the key when present (`runtimeId` and
    /// `sessionId` come before `taskId` among the leading fields): the fields after it are not
    /// read, so a fault there (an id given twice, one that is not a string) is found only by
    /// the decode of the whole event.
    ///
    /// # Errors
    /// As [`EventIds::from_msgpack`], but for UTF-8 and for the fields after the session id.
    pub fn stream_key_bytes(body: &'a [u8]) -> Result<(&'static str, &'a [u8]), EnvelopeError> {
        let raw = RawIds::read(body, Until::SessionId)?;
        Ok(if let Some((id, _)) = raw.session_id {
            ("session:", id)
        } else if let Some((id, _)) = raw.task_id {
            ("task:", id)
        } else if let Some((id, _)) = raw.runtime_id {
            ("runtime:", id)
        } else {
            ("none:", &[])
        })
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

/// The five ids as the body holds them, each with the body byte where its value starts.
#[derive(Default)]
struct RawIds<'a> {
    event_id: Option<(&'a [u8], usize)>,
    run_id: Option<(&'a [u8], usize)>,
    session_id: Option<(&'a [u8], usize)>,
    task_id: Option<(&'a [u8], usize)>,
    runtime_id: Option<(&'a [u8], usize)>,
}

/// Where [`RawIds::read`] stops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// At the end of the leading fields.
    LeadingEnd,
    /// Once it has the session id (or at the end of the leading fields without one).
    SessionId,
}

impl<'a> RawIds<'a> {
    /// Reads the leading fields (see [`EventIds::from_msgpack`]), up to `until`.
    fn read(body: &'a [u8], until: Until) -> Result<RawIds<'a>, EnvelopeError> {
        let mut reader = Reader::new(body);
        let entries = reader
            .map_len()?
            .ok_or_else(|| decode_error("the body is not a map", 0))?;
        let mut ids = RawIds::default();
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
                // The leading fields, the five ids among them, come before any other
                // (`docs/FORMAT.md`; the full decoder refuses a body where they do not).
                other if is_leading(other) => {
                    reader.skip_value()?;
                    continue;
                }
                _ => break,
            };
            let value_at = reader.at;
            let value = reader
                .str()?
                .ok_or_else(|| decode_error("an id is not a string", value_at))?;
            if slot.replace((value, value_at)).is_some() {
                return Err(decode_error("an id is given twice", key_at));
            }
            if until == Until::SessionId && ids.session_id.is_some() {
                break;
            }
        }
        Ok(ids)
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
            assert_eq!(
                EventIds::stream_key_bytes(&bytes).unwrap(),
                (kind, id.as_bytes()),
                "{json}"
            );
        }
    }

    #[test]
    fn the_stream_key_is_read_up_to_the_session_id_only() {
        // {"type": "a", "sessionId": "s1", "taskId": "t1", "taskId": "t2"}: a fault after
        // the session id, which the full reading refuses and the stream key does not see.
        let mut body = vec![0x84, 0xa4];
        body.extend_from_slice(b"type");
        body.extend_from_slice(&[0xa1, b'a', 0xa9]);
        body.extend_from_slice(b"sessionId");
        body.extend_from_slice(&[0xa2, b's', b'1']);
        for task in [b"t1", b"t2"] {
            body.push(0xa6);
            body.extend_from_slice(b"taskId");
            body.push(0xa2);
            body.extend_from_slice(task);
        }
        let refused = EventIds::from_msgpack(&body).map(|_| ()).unwrap_err();
        assert!(
            refused.to_string().contains("an id is given twice"),
            "{refused}"
        );
        assert_eq!(
            EventIds::stream_key_bytes(&body).unwrap(),
            ("session:", b"s1".as_slice())
        );
        // Without a session id, the task id decides, and the fault is found.
        body[0] = 0x83;
        let without: Vec<u8> = [&body[..8], &body[21..]].concat();
        let refused = EventIds::stream_key_bytes(&without).unwrap_err();
        assert!(
            refused.to_string().contains("an id is given twice"),
            "{refused}"
        );
    }

    #[test]
    fn steps_over_every_kind_of_value() {
        // Leading fields holding every MessagePack kind the JSON form and the journal write,
        // and some they do not (bin, ext, float32): each is stepped over by its length. (The
        // full decoder refuses such a body; this reader only steps over it.)
        let mut body = vec![0x84];
        body.push(0xa4);
        body.extend_from_slice(b"type");
        body.extend_from_slice(&[
            0xdc, 0, 18, 0x00, 0xff, 0xc0, 0xc2, 0xc3, 0xcc, 1, 0xcd, 0, 1,
        ]);
        body.extend_from_slice(&[0xce, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1]);
        body.extend_from_slice(&[0xd0, 1, 0xd1, 0, 1, 0xd2, 0, 0, 0, 1]);
        body.extend_from_slice(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 1, 0xca, 0, 0, 0, 0]);
        body.extend_from_slice(&[0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xc4, 2, 9, 9]);
        body.extend_from_slice(&[0xd4, 1, 2, 0xc7, 1, 5, 7]);
        body.push(0xa8);
        body.extend_from_slice(b"threadId");
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
        let huge = [
            0x81, 0xa4, b't', b'y', b'p', b'e', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00,
        ];
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

    #[test]
    fn stops_at_the_first_field_after_the_leading_ones() {
        // {"type": "t", "payload": <cut short>}: the payload is never read.
        let mut body = vec![0x83, 0xa4];
        body.extend_from_slice(b"type");
        body.extend_from_slice(&[0xa1, b't', 0xa7]);
        body.extend_from_slice(b"payload");
        body.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(EventIds::from_msgpack(&body).unwrap(), EventIds::default());
        // An id after another field is not read, and the full decoder refuses the body.
        let mut late = vec![0x84, 0xa4];
        late.extend_from_slice(b"type");
        late.extend_from_slice(&[0xa1, b't', 0xa9]);
        late.extend_from_slice(b"timestamp");
        late.extend_from_slice(&[0xb4]);
        late.extend_from_slice(b"2026-05-11T10:00:00Z");
        late.extend_from_slice(&[0xa6]);
        late.extend_from_slice(b"status");
        late.extend_from_slice(&[0xa2, b'o', b'k', 0xa9]);
        late.extend_from_slice(b"sessionId");
        late.extend_from_slice(&[0xa2, b's', b'1']);
        assert_eq!(EventIds::from_msgpack(&late).unwrap().session_id, None);
        let error = Envelope::from_msgpack(&late).unwrap_err().to_string();
        assert!(
            error.contains("field `sessionId` is stored after `status`"),
            "{error}"
        );
    }

    #[test]
    fn the_leading_fields_are_the_first_declared() {
        let names: Vec<&str> = ["type", "eventId", "timestamp"]
            .into_iter()
            .chain(super::super::codec::OPTIONAL_FIELDS.iter().copied())
            .collect();
        let leading = names
            .iter()
            .take_while(|n| super::super::body::is_leading(n.as_bytes()))
            .count();
        assert_eq!(names.get(leading - 1), Some(&"runId"));
        assert!(names[leading..]
            .iter()
            .all(|n| !super::super::body::is_leading(n.as_bytes())));
    }
}
