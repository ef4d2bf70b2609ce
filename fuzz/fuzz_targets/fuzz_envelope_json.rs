//! Arbitrary bytes through the JSON event parser, the stored-body decoder and the stream-id
//! reader: no panic, an event that parses survives a MessagePack round trip unchanged, and a
//! body the decoder accepts gives the stream reader the same stream.
#![no_main]

use journal_format::{Envelope, StreamIds};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = Envelope::from_json_slice(data, &mut || String::from("fuzz-id")) {
        let body = envelope.to_msgpack().expect("a parsed event encodes");
        assert_eq!(Envelope::from_msgpack(&body).expect("and decodes"), envelope);
        let ids = StreamIds::from_msgpack(&body).expect("its stream reads");
        assert_eq!(ids.stream_key(), envelope.stream_key());
    }
    let ids = StreamIds::from_msgpack(data);
    if let Ok(envelope) = Envelope::from_msgpack(data) {
        let ids = ids.expect("a body the decoder accepts gives its stream");
        assert_eq!(ids.stream_key(), envelope.stream_key());
    }
});
