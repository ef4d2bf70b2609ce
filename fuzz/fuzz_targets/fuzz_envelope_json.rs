//! Arbitrary bytes through the JSON event parser, the stored-body decoder and the id reader
//! (`EventIds`): no panic, an event that parses survives a MessagePack round trip unchanged, a
//! body the decoder accepts gives the id reader the same ids, and decoding into an envelope
//! that holds another event gives what decoding into a new one gives (or the same error, and
//! the default envelope).
#![no_main]

use journal_format::{Envelope, EventIds};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = Envelope::from_json_slice(data, &mut || String::from("fuzz-id")) {
        let body = envelope.to_msgpack().expect("a parsed event encodes");
        assert_eq!(Envelope::from_msgpack(&body).expect("and decodes"), envelope);
        let ids = EventIds::from_msgpack(&body).expect("its ids read");
        assert_eq!(ids, envelope.ids());
    }
    let ids = EventIds::from_msgpack(data);
    let fresh = Envelope::from_msgpack(data);
    if let Ok(envelope) = &fresh {
        let ids = ids.expect("a body the decoder accepts gives its ids");
        assert_eq!(ids, envelope.ids());
    }
    let mut reused = Envelope::from_json_slice(USED.as_bytes(), &mut || String::from("used"))
        .expect("the used event parses");
    match (reused.decode_msgpack(data), fresh) {
        (Ok(()), Ok(fresh)) => assert_eq!(reused, fresh),
        (Err(ours), Err(theirs)) => {
            assert_eq!(ours.to_string(), theirs.to_string());
            assert_eq!(reused, Envelope::default());
        }
        (ours, theirs) => panic!("into a used envelope {ours:?}, into a new one {theirs:?}"),
    }
});

/// An event with most kinds of field set, decoded into before each input.
const USED: &str = r#"{"type":"tool.call.completed","eventId":"evt-used","timestamp":"2026-05-11T10:00:00Z","runtimeId":"rt","sessionId":"s","threadId":"t","turnId":"u","taskId":"k","runId":"r","toolCallId":"c","sequence":9,"provenance":"observed","payload":{"tool":"x"},"refs":{"a":1},"task":{"title":"t"},"somethingElse":[1,2]}"#;
