//! The index as the writer looks events up in it: [`Index`] and [`IndexReader`] answer the
//! write layer's [`Lookup`] and [`LookupView`].

use journal_format::{Located, Position};

use crate::error::Result;
use crate::index::{Index, IndexReader};
use crate::write::lookup::{Lookup, LookupView};

impl Lookup for Index {
    fn view(&self) -> Result<Box<dyn LookupView>> {
        Ok(Box::new(self.reader()?))
    }

    fn event(&self, event_id: &str) -> Result<Option<Located>> {
        Index::event(self, event_id)
    }

    fn stream_head(&self, stream_key: &str) -> Result<u64> {
        Index::stream_head(self, stream_key)
    }
}

impl LookupView for IndexReader {
    fn indexed(&self) -> Position {
        IndexReader::indexed(self)
    }

    fn event(&self, event_id: &str) -> Result<Option<Located>> {
        IndexReader::event(self, event_id)
    }

    fn stream_head(&self, stream_key: &str) -> Result<u64> {
        IndexReader::stream_head(self, stream_key)
    }
}
