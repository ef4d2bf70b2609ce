//! Arbitrary bytes through the JSON event parser and the stored-body decoder: no panic, and an
//! event that parses survives a MessagePack round trip unchanged.
#![no_main]

use journal_format::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = Envelope::from_json_slice(data, &mut || String::from("fuzz-id")) {
        let body = envelope.to_msgpack().expect("a parsed event encodes");
        assert_eq!(Envelope::from_msgpack(&body).expect("and decodes"), envelope);
    }
    let _ = Envelope::from_msgpack(data);
});
