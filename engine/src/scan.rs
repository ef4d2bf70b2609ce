//! Sequential frame scanning over one segment file, in bounded chunks. The scanner reports
//! *what* it found where (a frame, zeroed space, damage); callers decide what that means.

use std::sync::Arc;

use journal_format::frame::is_zeroed;
use journal_format::{FormatError, FrameHeader, SegmentId, FRAME_HEADER_LEN};

use crate::error::{Error, Result};
use crate::storage::StorageFile;

/// How much the scanner reads at a time (frames larger than this are read whole).
const SCAN_CHUNK_BYTES: u64 = 256 * 1024;

/// Why a scan stopped before the next frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The scan reached its end offset exactly.
    End,
    /// The bytes at the next frame's place are zero: unwritten space.
    Zeroed,
    /// The bytes at the next frame's place are not a valid frame.
    Damaged(FormatError),
}

/// A frame found by the scanner. The body borrows the scanner's buffer.
#[derive(Debug)]
pub(crate) struct Scanned<'a> {
    /// The frame's byte offset in the segment.
    pub offset: u64,
    /// The decoded, checksum-checked header.
    pub header: FrameHeader,
    /// The body, checksum-checked unless the caller asked otherwise
    /// ([`FrameScanner::next_frame`]).
    pub body: &'a [u8],
}

/// Reads frames one after another from `offset` up to `end`.
#[derive(Debug)]
pub(crate) struct FrameScanner {
    file: Arc<dyn StorageFile>,
    segment: SegmentId,
    offset: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl FrameScanner {
    pub(crate) fn new(
        file: Arc<dyn StorageFile>,
        segment: SegmentId,
        offset: u64,
        end: u64,
    ) -> Self {
        FrameScanner {
            file,
            segment,
            offset,
            end,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// The offset of the next frame.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Ensures bytes `offset..offset + len` are buffered and returns them.
    fn fill(&mut self, offset: u64, len: u64) -> Result<&[u8]> {
        let buffered_end = self.buf_start + self.buf.len() as u64;
        if !(self.buf_start <= offset && offset + len <= buffered_end) {
            let read_len = len.max(SCAN_CHUNK_BYTES).min(self.end - offset).max(len);
            let read_len = usize::try_from(read_len)
                .map_err(|_| Error::InvalidInput("scan chunk does not fit memory".into()))?;
            self.buf.resize(read_len, 0);
            self.file
                .read_exact_at(&mut self.buf, offset)
                .map_err(Error::io_with(|| {
                    format!("reading segment {} at {offset}", self.segment)
                }))?;
            self.buf_start = offset;
        }
        let start = usize::try_from(offset - self.buf_start).unwrap_or(usize::MAX);
        let stop = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .saturating_add(start);
        self.buf
            .get(start..stop)
            .ok_or_else(|| Error::InvalidInput("scanner buffer out of range".into()))
    }

    /// The next frame, or why there is none. I/O errors are `Err`; what the bytes hold is
    /// `Ok(Err(stop))`.
    pub(crate) fn next(&mut self) -> Result<std::result::Result<Scanned<'_>, Stop>> {
        self.next_frame(true)
    }

    /// As [`FrameScanner::next`]; with `check_body` false, the body's checksum is not checked
    /// (the header's always is): for a frame the caller steps over without reading its body.
    pub(crate) fn next_frame(
        &mut self,
        check_body: bool,
    ) -> Result<std::result::Result<Scanned<'_>, Stop>> {
        let offset = self.offset;
        if offset >= self.end {
            return Ok(Err(Stop::End));
        }
        let available = self.end - offset;
        let header_len = FRAME_HEADER_LEN as u64;
        if available < header_len {
            let rest = self.fill(offset, available)?;
            return Ok(Err(if is_zeroed(rest) {
                Stop::Zeroed
            } else {
                Stop::Damaged(FormatError::Truncated {
                    needed: header_len,
                    available,
                })
            }));
        }
        let header_bytes = self.fill(offset, header_len)?;
        if is_zeroed(header_bytes) {
            return Ok(Err(Stop::Zeroed));
        }
        let header = match FrameHeader::decode(header_bytes) {
            Ok(header) => header,
            Err(e) => return Ok(Err(Stop::Damaged(e))),
        };
        let frame_len = header.frame_len();
        if frame_len > available {
            return Ok(Err(Stop::Damaged(FormatError::Truncated {
                needed: frame_len,
                available,
            })));
        }
        self.fill(offset, frame_len)?;
        let start = usize::try_from(offset - self.buf_start).unwrap_or(usize::MAX);
        let body_start = start.saturating_add(FRAME_HEADER_LEN);
        let body_end = body_start.saturating_add(header.body_len() as usize);
        let Some(body) = self.buf.get(body_start..body_end) else {
            return Err(Error::InvalidInput("scanner buffer out of range".into()));
        };
        if check_body {
            if let Err(e) = header.check_body(body) {
                return Ok(Err(Stop::Damaged(e)));
            }
        }
        self.offset = offset + frame_len;
        Ok(Ok(Scanned {
            offset,
            header,
            body,
        }))
    }
}
