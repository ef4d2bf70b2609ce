//! The errors of this crate: what is wrong with a sequence of bytes or with an event.
//!
//! The format crate reports; the engine decides what an error means where it was found.

use thiserror::Error;

/// What is wrong with bytes that should hold a frame, a segment header or a segment footer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Fewer bytes are present than the structure needs.
    #[error("truncated: need {needed} bytes, have {available}")]
    Truncated {
        /// How many bytes the structure needs.
        needed: u64,
        /// How many bytes are present.
        available: u64,
    },
    /// The header checksum does not match the header bytes.
    #[error("header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksumMismatch {
        /// The checksum stored in the bytes.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// The body checksum does not match the body bytes.
    #[error("body checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BodyChecksumMismatch {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the body as read.
        computed: u32,
    },
    /// The link a group's frames store is not the hash of the previous link and the group.
    #[error("chain link mismatch: stored {stored}, computed {computed}")]
    ChainMismatch {
        /// The link stored in the group's frames.
        stored: String,
        /// The link computed from the previous link and the group's bytes.
        computed: String,
    },
    /// A frame stores another chain link than the frames of its group before it.
    #[error("a frame of a group stores link {frame} after {frames_before} frames storing {group}")]
    GroupLinksDiffer {
        /// The link the group's first frame stores.
        group: String,
        /// The link this frame stores.
        frame: String,
        /// How many frames of the group came before it.
        frames_before: u64,
    },
    /// A link group goes on past the length at which the writer ends one.
    #[error("a link group goes on after {frames} frames holding {bytes} bytes (a group ends once it reaches {max})")]
    GroupTooLong {
        /// The bytes of the group before the frame that should not be in it.
        bytes: u64,
        /// The frames of the group before it.
        frames: u64,
        /// The length at which a group ends (`frame::LINK_GROUP_BYTES`).
        max: u64,
    },
    /// A frame ends its batch but not its group: a batch's last frame always ends a group.
    #[error("frame flags {0:#06x} end the batch inside a link group")]
    BatchEndsInsideGroup(u16),
    /// The magic number is not the one this structure starts (or ends) with.
    #[error("bad magic number {found:02x?}")]
    BadMagic {
        /// The bytes found where the magic number belongs.
        found: [u8; 8],
    },
    /// The format version is one this build cannot read.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u16),
    /// A reserved field is not zero.
    #[error("reserved bytes are not zero")]
    ReservedNotZero,
    /// A frame carries flag bits this version does not define.
    #[error("unknown frame flags {0:#06x}")]
    UnknownFlags(u16),
    /// A length field is larger than the format allows.
    #[error("length {len} exceeds the format's maximum {max}")]
    LengthTooLarge {
        /// The stored length.
        len: u64,
        /// The largest length the format allows.
        max: u64,
    },
    /// A footer's fields contradict each other or the file.
    #[error("inconsistent footer: {0}")]
    InconsistentFooter(String),
}

/// What is wrong with an event: its JSON, its fields, or its stored MessagePack body.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The input is not well-formed JSON, or not a JSON object.
    #[error("not a JSON event object: {0}")]
    NotJson(String),
    /// A field has the wrong type or an invalid value.
    #[error("field `{field}`: {message}")]
    InvalidField {
        /// The JSON path of the field, e.g. `sessionId` or `payload`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// An id or other string field that must not be empty is empty.
    #[error("field `{0}` must not be empty")]
    EmptyField(&'static str),
    /// The input sets a field that only the journal assigns.
    #[error("field `{0}` is assigned by the journal and must not be set by the producer")]
    JournalField(&'static str),
    /// The payload does not have the typed shape of its event type.
    #[error("`{event_type}` event, field `{field}`: {message}")]
    InvalidPayload {
        /// The event's type.
        event_type: String,
        /// The JSON path of the field, e.g. `payload.items[0].status`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The event does not conform to the Agent Runtime JSON Schema (strict mode).
    #[error("does not conform to {schema}: {message}")]
    Nonconforming {
        /// Which schema.
        schema: &'static str,
        /// The first violation, with its JSON pointer.
        message: String,
    },
    /// The stored body could not be encoded as MessagePack.
    #[error("cannot encode event as MessagePack: {0}")]
    Encode(String),
    /// The stored body is not a valid MessagePack event.
    #[error("cannot decode stored event body: {0}")]
    Decode(String),
}
