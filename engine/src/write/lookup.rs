//! What the writer asks of the events stored before those it remembers itself: where an event
//! id's frame is, and how far a stream has got. The index answers; the writer sees it only
//! through these traits, so that the write layer does not depend on the index.

use journal_format::{Located, Position};

use crate::error::Result;

/// The stored events, looked up by id and by stream, as of the newest state.
pub(crate) trait Lookup: Send + Sync + std::fmt::Debug {
    /// A read view that stays as it is now while lookups go on.
    fn view(&self) -> Result<Box<dyn LookupView>>;
    /// Where the event with this id is, if it is stored.
    fn event(&self, event_id: &str) -> Result<Option<Located>>;
    /// The version of the stream's last event (0 for a stream with none).
    fn stream_head(&self, stream_key: &str) -> Result<u64>;
}

/// A read view of the stored events, as of the position it holds.
pub(crate) trait LookupView: Send {
    /// The last position the view reflects.
    fn indexed(&self) -> Position;
    /// Where the event with this id is, if the view holds it.
    fn event(&self, event_id: &str) -> Result<Option<Located>>;
    /// The version of the stream's last event in the view (0 for a stream with none).
    fn stream_head(&self, stream_key: &str) -> Result<u64>;
}
