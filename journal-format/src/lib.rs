//! The journal's byte formats: the event envelope, its MessagePack encoding, frames with their
//! checksums and hash chain, the segment header and footer, the Merkle tree over the events, and
//! the signed checkpoints and proof documents an auditor checks offline.
//!
//! NOTE: this crate is pure. It performs no I/O, reads no clock and holds no state; it turns
//! values into bytes and bytes into values, and reports what is wrong with bytes it cannot
//! decode. Deciding what a decoding error *means* (a torn tail to cut, or corruption to refuse)
//! is the engine's job. The layout is specified in `docs/FORMAT.md`; the golden-bytes tests in
//! [`frame`] and [`segment`] keep that document and this code in step.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod bit_rot;
pub mod checkpoint;
pub mod conformance;
pub mod digest;
pub mod envelope;
pub mod error;
pub mod frame;
pub mod head_record;
pub mod merkle;
pub mod payload;
pub mod proof;
pub mod seal;
pub mod segment;
pub mod status;
pub mod strict_json;
pub mod time_fmt;
pub mod types;
pub mod vocabulary;

pub use digest::Digest;
pub use envelope::{Envelope, EventIds, Object, Provenance, StoredEvent, StoredPayload};
pub use error::{EnvelopeError, FormatError};
pub use frame::{
    FrameFlags, FrameHeader, FrameMeta, GroupCheck, FRAME_BODY_LEN_MAX, FRAME_HEADER_LEN,
    LINK_GROUP_BYTES,
};
pub use segment::{
    FooterEntry, SegmentFooter, SegmentHeader, FORMAT_VERSION, SEGMENT_FOOTER_TRAILER_LEN,
    SEGMENT_HEADER_LEN,
};
pub use types::{ByteOffset, ChainHash, Located, Location, Position, SegmentId};
