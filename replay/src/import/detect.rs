//! Telling which runtime wrote a file from its first record, so that a directory tree can be
//! imported file by file: a Codex rollout line (`timestamp`, `type`, `payload`), a Claude Code
//! transcript record (`type` with `uuid`, `sessionId`, `leafUuid` or `messageId`), an OpenHands trajectory
//! (a JSON array of events with `id` and `action` or `observation`), an OpenHands evaluation
//! output line (`instance_id` with `history`), or one OpenHands event as its session folder
//! stores it (`events/<id>.json`).

use serde::de::{Deserializer as _, IgnoredAny, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Source;

/// What a file holds, as far as import is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// A whole session file of `Source`.
    Session(Source),
    /// One OpenHands event, as `sessions/<id>/events/<n>.json` holds it.
    OpenHandsEvent,
}

/// The kind of the file whose bytes are `bytes`, from its first record; `None` when it is
/// none of the formats import reads (or its first record is not JSON).
#[must_use]
pub fn detect(bytes: &[u8]) -> Option<Detected> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let body = bytes.get(start..)?;
    if body.first() == Some(&b'[') {
        return match first_element(body)? {
            Value::Object(e) if is_openhands_event(&e) => {
                Some(Detected::Session(Source::OpenHands))
            }
            _ => None,
        };
    }
    let first_line = body.split(|b| *b == b'\n').next()?;
    let record = match serde_json::from_slice::<Value>(first_line) {
        Ok(Value::Object(record)) => record,
        // A single JSON object over several lines: one OpenHands event file.
        _ => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(event)) if is_openhands_event(&event) => {
                return Some(Detected::OpenHandsEvent)
            }
            _ => return None,
        },
    };
    let has = |k: &str| record.contains_key(k);
    let kind = record.get("type").and_then(Value::as_str);
    if kind.is_some() && has("timestamp") && record.get("payload").is_some_and(Value::is_object) {
        Some(Detected::Session(Source::Codex))
    } else if kind.is_some()
        && ["uuid", "sessionId", "leafUuid", "messageId"]
            .iter()
            .any(|k| has(k))
    {
        Some(Detected::Session(Source::ClaudeCode))
    } else if has("instance_id") && has("history") {
        Some(Detected::Session(Source::OpenHands))
    } else if is_openhands_event(&record) {
        // A file of one event on one line is an event file, not a trajectory.
        let more = body
            .get(first_line.len()..)
            .is_some_and(|rest| rest.iter().any(|b| !b.is_ascii_whitespace()));
        (!more).then_some(Detected::OpenHandsEvent)
    } else {
        None
    }
}

fn is_openhands_event(event: &Map<String, Value>) -> bool {
    event.contains_key("id") && (event.contains_key("action") || event.contains_key("observation"))
}

/// The first element of a JSON array, without reading the rest into values.
fn first_element(bytes: &[u8]) -> Option<Value> {
    struct First;
    impl<'de> Visitor<'de> for First {
        type Value = Option<Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
            let first = seq.next_element::<Value>()?;
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    serde_json::Deserializer::from_slice(bytes)
        .deserialize_seq(First)
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::{detect, Detected};
    use crate::import::Source;

    #[test]
    fn each_format_is_told_by_its_first_record() {
        let codex =
            br#"{"timestamp":"2026-01-01T00:00:00Z","type":"session_meta","payload":{"id":"s"}}"#;
        assert_eq!(detect(codex), Some(Detected::Session(Source::Codex)));
        let claude = b"{\"type\":\"user\",\"uuid\":\"u1\",\"sessionId\":\"s\"}\n{}";
        assert_eq!(detect(claude), Some(Detected::Session(Source::ClaudeCode)));
        let trajectory =
            b"[\n {\"id\": 0, \"source\": \"user\", \"action\": \"message\"},\n {\"id\": 1}\n]";
        assert_eq!(
            detect(trajectory),
            Some(Detected::Session(Source::OpenHands))
        );
        let eval = br#"{"instance_id":"i1","history":[]}"#;
        assert_eq!(detect(eval), Some(Detected::Session(Source::OpenHands)));
        let event = b"{\n  \"id\": 3,\n  \"observation\": \"run\"\n}\n";
        assert_eq!(detect(event), Some(Detected::OpenHandsEvent));
        for other in [
            &b"{\"name\":\"package\"}"[..],
            b"[1, 2]",
            b"not json",
            b"",
            b"   ",
        ] {
            assert_eq!(detect(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }
}
