//! Reading: events by position, id and stream, scans, frame readers, subscriptions, and a
//! read-only journal's refresh.

use std::sync::Arc;

use journal_format::{Position, StoredEvent};

use crate::error::{Error, Result};
use crate::log::follow;
use crate::log::read::{self, Chain, EventIter};
use crate::log::Head;

use crate::journal::Journal;

impl Journal {
    /// Read-only: picks up what the writing process appended since the last look (new frames
    /// of the tail segment, new segments) and returns the new head. A no-op for a journal open
    /// for writing, which always knows its head.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the newly written bytes are damaged, or an I/O error.
    pub fn refresh(&self) -> Result<Head> {
        if !self.is_read_only() {
            return Ok(self.head());
        }
        let _one_at_a_time = self.inner.refresh.lock().unwrap_or_else(|p| p.into_inner());
        follow::refresh(
            &*self.inner.options.storage,
            &self.inner.dir,
            &self.inner.log,
        )
    }

    /// Events `from..=to` (`to` defaults to the head), streamed in bounded memory, with
    /// checksums checked. With [`Chain::Verified`], chain links are checked too, those of the next
    /// 1 MiB of frames in the range at a time, on as many threads as the machine has cores (up
    /// to 8), before the events are handed out in order.
    #[must_use]
    pub fn read(&self, from: Position, to: Option<Position>, chain: Chain) -> EventIter {
        let head = self.head().position;
        let to = to.map_or(head, |t| t.min(head));
        EventIter::new(Arc::clone(&self.inner.log), from, to, chain)
            .with_keys(self.inner.keys.clone())
    }

    /// As [`Journal::read`], the events as stored: sealed content left sealed.
    pub(crate) fn read_stored(&self, from: Position, to: Option<Position>) -> EventIter {
        let head = self.head().position;
        let to = to.map_or(head, |t| t.min(head));
        EventIter::new(Arc::clone(&self.inner.log), from, to, Chain::Unverified)
    }

    /// Opens `event`'s sealed content in place, as every read of this journal does: for a
    /// reader that decodes records itself ([`Journal::scan`], [`Journal::frame_reader`]). An
    /// event whose key was destroyed reads `[redacted]` in each sealed field, with a `redacted`
    /// field naming the redaction fact; in an encrypted journal, an event written before the
    /// journal was encrypted is marked `"unencrypted": true`. A no-op for a journal that is not
    /// encrypted, or opened without its master key.
    ///
    /// # Errors
    /// [`Error::Keys`] when the sealed content is malformed or does not open with its key.
    pub fn open_content(&self, event: &mut StoredEvent) -> Result<()> {
        match &self.inner.keys {
            Some(keys) => keys.open(event),
            None => Ok(()),
        }
    }

    /// Whether this journal's content is sealed and opened with its keys: it has a key store
    /// and was opened with its master key.
    #[must_use]
    pub fn is_encrypted(&self) -> bool {
        self.inner.keys.is_some()
    }

    /// `event` with its sealed content opened ([`Journal::open_content`]).
    pub(crate) fn opened(&self, mut event: StoredEvent) -> Result<StoredEvent> {
        self.open_content(&mut event)?;
        Ok(event)
    }

    /// Calls `f` with each record `from..=to` (`to` defaults to the head) in position order,
    /// before its body is decoded, until `f` breaks. Checksums are checked always, chain links
    /// with [`Chain::Verified`] (ahead, on several threads), exactly as [`Journal::read`] does; the
    /// body borrows the reader's buffer, so nothing is allocated per event.
    /// [`Record::decode`](crate::Record::decode) gives the event when it is wanted.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming where a frame is damaged or out of place, an I/O error, or
    /// the first error `f` returns.
    pub fn scan(
        &self,
        from: Position,
        to: Option<Position>,
        chain: Chain,
        f: impl FnMut(read::Record<'_>) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        self.scan_where(from, to, chain, |_| true, f)
    }

    /// As [`Journal::scan`], calling `f` only with the records whose position `select`
    /// accepts, for a reader that knows which events it wants before reading them (a rebuild
    /// that goes over the log once per partition). The other frames are stepped over: their
    /// headers are checked and must hold the positions expected, but unless the chain is
    /// verified (the chain needs every body) their bodies' checksums are not, since nothing reads
    /// them.
    ///
    /// # Errors
    /// As [`Journal::scan`].
    pub fn scan_where(
        &self,
        from: Position,
        to: Option<Position>,
        chain: Chain,
        mut select: impl FnMut(Position) -> bool,
        mut f: impl FnMut(read::Record<'_>) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        let head = self.head().position;
        let to = to.map_or(head, |t| t.min(head));
        if from.max(Position::FIRST) > to {
            return Ok(());
        }
        read::for_each_selected_frame(&self.inner.log, from, to, chain, &mut select, &mut |raw| {
            Ok(f(raw.record())?.is_continue())
        })
    }

    /// A reader of single frames at locations noted from earlier reads ([`crate::Record::location`]):
    /// for a reader that comes back for some of the frames it scanned, as a build by partition
    /// does for each partition's, without stepping through the others again.
    #[must_use]
    pub fn frame_reader(&self) -> read::FrameReader {
        read::FrameReader::new(Arc::clone(&self.inner.log))
    }

    /// The event with this id.
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails, [`Error::Corruption`] when the frame is damaged.
    pub fn get(&self, event_id: &str) -> Result<Option<StoredEvent>> {
        let Some(index) = &self.inner.index else {
            return self
                .read(Position::FIRST, None, Chain::Unverified)
                .find(|e| e.as_ref().map_or(true, |e| e.envelope.event_id == event_id))
                .transpose();
        };
        self.wait_for_index()?;
        match index.event(event_id)? {
            Some(at) => read::read_at(&self.inner.log, at)
                .and_then(|e| self.opened(e))
                .map(Some),
            None => Ok(None),
        }
    }

    /// The event at `position`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] past the head, [`Error::Corruption`] when the frame is damaged.
    pub fn get_position(&self, position: Position) -> Result<StoredEvent> {
        if position == Position::ZERO || position > self.head().position {
            return Err(Error::InvalidInput(format!(
                "position {position} is not in the log"
            )));
        }
        read::read_position(&self.inner.log, position).and_then(|e| self.opened(e))
    }

    /// The version of a stream (its number of events), by stream key (see
    /// [`Envelope::stream_key`](journal_format::Envelope::stream_key)).
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails.
    pub fn stream_version(&self, stream_key: &str) -> Result<u64> {
        let Some(index) = &self.inner.index else {
            let mut version = 0;
            for e in self.read(Position::FIRST, None, Chain::Unverified) {
                version += u64::from(e?.envelope.stream_key() == stream_key);
            }
            return Ok(version);
        };
        self.wait_for_index()?;
        index.stream_head(stream_key)
    }

    /// Events of one stream from stream version `from_version`, by stream key.
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails; reading errors per event.
    pub fn read_stream(&self, stream_key: &str, from_version: u64) -> Result<Vec<StoredEvent>> {
        let Some(index) = &self.inner.index else {
            let mut out = Vec::new();
            for e in self.read(Position::FIRST, None, Chain::Unverified) {
                let e = e?;
                if e.envelope.stream_key() == stream_key && e.stream_version >= from_version {
                    out.push(e);
                }
            }
            return Ok(out);
        };
        self.wait_for_index()?;
        let mut out = Vec::new();
        let mut version = from_version.max(1);
        loop {
            let page = index.stream_positions(stream_key, version, 1024)?;
            if page.is_empty() {
                return Ok(out);
            }
            version += page.len() as u64;
            for at in page {
                out.push(self.opened(read::read_at(&self.inner.log, at)?)?);
            }
        }
    }

    /// Follows the log from `from` (inclusive): first the history, then live appends, with no
    /// gap and no duplicate at the switch. Resume from a cursor by passing the position after
    /// the last event seen.
    #[must_use]
    pub fn subscribe(&self, from: Position) -> crate::subscribe::Subscription {
        crate::subscribe::Subscription::new(
            Arc::new(self.clone()),
            self.inner.log.watch_head(),
            from.max(Position::FIRST),
        )
    }
}

impl crate::subscribe::Source for Journal {
    fn read_chunk(&self, from: Position, to: Position) -> Result<Vec<StoredEvent>> {
        self.read(from, Some(to), Chain::Verified).collect()
    }

    fn is_read_only(&self) -> bool {
        Journal::is_read_only(self)
    }

    fn refresh(&self) -> Result<Head> {
        Journal::refresh(self)
    }
}
