//! Arbitrary bytes through the frame, segment header and footer decoders: no panic, no hang, no
//! unbounded allocation.
#![no_main]

use journal_format::frame::decode_frame;
use journal_format::{ChainHash, FrameHeader, GroupCheck, SegmentFooter, SegmentHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_frame(data);
    // The bytes as a run of frames, checked frame by frame as a reader does.
    let mut check = GroupCheck::default();
    let mut at = 0usize;
    while let Some(Ok(header)) = data.get(at..).map(FrameHeader::decode) {
        let Some(frame) = data.get(at..at + header.frame_len() as usize) else {
            break;
        };
        let _ = check.push(&ChainHash::GENESIS, &header, frame);
        at += frame.len();
    }
    let _ = SegmentHeader::decode(data);
    if data.len() >= 72 {
        let split = data.len() - 72;
        if let Ok(trailer) = SegmentFooter::decode_trailer(&data[split..], data.len() as u64) {
            let start = trailer.index_offset.0 as usize;
            if start <= split {
                let _ = SegmentFooter::decode(&trailer, &data[start..split]);
            }
        }
    }
});
