//! The log: the segments on disk and their map in memory, how a segment is created, read and
//! scanned, and how the log is opened (recovery), set right by hand (salvage) and its head
//! recorded (the head record). Nothing here knows the writer or the index.

pub(crate) mod context;
pub(crate) mod entries;
pub(crate) mod follow;
pub(crate) mod head_file;
pub(crate) mod map;
pub(crate) mod quarantine;
pub(crate) mod read;
pub(crate) mod recovery;
pub(crate) mod report;
pub(crate) mod salvage;
pub(crate) mod scan;
pub(crate) mod segment;
pub(crate) mod tail;

pub use map::Head;
pub(crate) use map::Log;
pub(crate) use segment::{Segment, SegmentEnd, SPARSE_INTERVAL_BYTES};
