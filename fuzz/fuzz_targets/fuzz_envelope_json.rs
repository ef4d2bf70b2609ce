//! Arbitrary bytes through the JSON event parser, the stored-body decoder and the id reader
//! (`EventIds`): no panic, an event that parses survives a MessagePack round trip unchanged, and
//! a body the decoder accepts gives the id reader the same ids.
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
    if let Ok(envelope) = Envelope::from_msgpack(data) {
        let ids = ids.expect("a body the decoder accepts gives its ids");
        assert_eq!(ids, envelope.ids());
    }
});
