//! One segment's life: its path, its creation, what is known of its frames in memory (its
//! state, its end), its footer read back, and the bytes after an offset. Sealing is the
//! writer's; opening and judging a segment is recovery's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use journal_format::segment::Trailer;
use journal_format::{
    ByteOffset, ChainHash, FooterEntry, FormatError, Position, SegmentFooter, SegmentHeader,
    SegmentId, SEGMENT_FOOTER_TRAILER_LEN, SEGMENT_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage, StorageFile};

/// The directory inside the journal that holds segment files.
pub(crate) const SEGMENTS_DIR: &str = "segments";

pub(crate) fn segment_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(SEGMENTS_DIR).join(id.file_name())
}

pub(crate) fn read_footer(
    file: &dyn StorageFile,
    len: u64,
) -> std::result::Result<SegmentFooter, FormatError> {
    let trailer_len = SEGMENT_FOOTER_TRAILER_LEN as u64;
    if len < SEGMENT_HEADER_LEN as u64 + trailer_len {
        return Err(FormatError::Truncated {
            needed: SEGMENT_HEADER_LEN as u64 + trailer_len,
            available: len,
        });
    }
    let mut trailer_bytes = [0u8; SEGMENT_FOOTER_TRAILER_LEN];
    file.read_exact_at(&mut trailer_bytes, len - trailer_len)
        .map_err(|e| FormatError::InconsistentFooter(format!("cannot read the trailer: {e}")))?;
    let trailer: Trailer = SegmentFooter::decode_trailer(&trailer_bytes, len)?;
    let entries_len = usize::try_from(len - trailer_len - trailer.index_offset.0).unwrap_or(0);
    let mut entries = vec![0u8; entries_len];
    file.read_exact_at(&mut entries, trailer.index_offset.0)
        .map_err(|e| FormatError::InconsistentFooter(format!("cannot read the index: {e}")))?;
    SegmentFooter::decode(&trailer, &entries)
}

pub(crate) fn read_rest(
    file: &Arc<dyn StorageFile>,
    from: u64,
    len: u64,
) -> std::result::Result<Vec<u8>, String> {
    let mut rest = vec![0u8; usize::try_from(len - from).map_err(|e| e.to_string())?];
    file.read_exact_at(&mut rest, from)
        .map_err(|e| e.to_string())?;
    Ok(rest)
}

/// Creates a new empty segment file after `prev` and makes it durable (file and directory).
pub(crate) fn create(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    first_position: Position,
    prev_hash: ChainHash,
) -> Result<Segment> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    let path: PathBuf = seg_dir.join(id.file_name());
    let header = SegmentHeader {
        segment_id: id,
        first_position,
        prev_hash,
    };
    let file = storage
        .open(&path, OpenMode::CreateNew)
        .map_err(Error::io_with(|| {
            format!("creating segment {}", path.display())
        }))?;
    file.write_all_at(&header.encode(), 0)
        .map_err(Error::io_with(|| {
            format!("writing the header of {}", path.display())
        }))?;
    file.sync_data()
        .map_err(Error::io_with(|| format!("syncing {}", path.display())))?;
    storage
        .sync_dir(&seg_dir)
        .map_err(Error::io_with(|| format!("syncing {}", seg_dir.display())))?;
    let state = SegmentState {
        sparse: Vec::new(),
        end_offset: SEGMENT_HEADER_LEN as u64,
        last_position: Position(first_position.0 - 1),
        last_hash: prev_hash,
        sealed: false,
    };
    Ok(Segment::new(id, &header, file, state))
}

/// A sparse index entry is added when a frame starts at least this many bytes after the
/// previous entry's frame.
pub(crate) const SPARSE_INTERVAL_BYTES: u64 = 64 * 1024;

/// What a segment holds, as of the last commit.
///
/// # Invariants
/// `sparse` is strictly increasing in position and offset; `last_position + 1 ==
/// first_position` exactly when the segment holds no frame; a sealed segment never changes.
#[derive(Clone, Debug)]
pub(crate) struct SegmentState {
    pub sparse: Vec<FooterEntry>,
    pub end_offset: u64,
    pub last_position: Position,
    pub last_hash: ChainHash,
    pub sealed: bool,
}

/// Where a segment's frames end, as of the last commit: what a writer appending after them and
/// a reader bounded by them need, copied out without the sparse index (which
/// [`Segment::snapshot`] clones: up to a thousand entries in a full segment).
#[derive(Copy, Clone, Debug)]
pub(crate) struct SegmentEnd {
    pub end_offset: u64,
    pub last_position: Position,
    pub last_hash: ChainHash,
    /// The offset of the frame the last sparse index entry points at.
    pub last_sparse_offset: Option<u64>,
}

impl SegmentEnd {
    fn of(state: &SegmentState) -> SegmentEnd {
        SegmentEnd {
            end_offset: state.end_offset,
            last_position: state.last_position,
            last_hash: state.last_hash,
            last_sparse_offset: state.sparse.last().map(|e| e.offset.0),
        }
    }
}

/// One segment file.
#[derive(Debug)]
pub(crate) struct Segment {
    pub id: SegmentId,
    pub first_position: Position,
    pub prev_hash: ChainHash,
    pub file: Arc<dyn StorageFile>,
    state: RwLock<SegmentState>,
}

impl Segment {
    /// Segment `id`, whose header is `header`, in `file`, holding what `state` says.
    pub(crate) fn new(
        id: SegmentId,
        header: &SegmentHeader,
        file: Arc<dyn StorageFile>,
        state: SegmentState,
    ) -> Segment {
        Segment {
            id,
            first_position: header.first_position,
            prev_hash: header.prev_hash,
            file,
            state: RwLock::new(state),
        }
    }

    /// Moves the end of the committed frames to `end` (a group made durable), with the sparse
    /// entries of its frames (taken from `sparse`).
    ///
    /// # Panics
    /// When `end` is not past the current end: groups are published in the order they were
    /// written.
    pub(crate) fn extend(&self, end: SegmentEnd, sparse: &mut Vec<FooterEntry>) {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        assert!(
            end.last_position > s.last_position && end.end_offset > s.end_offset,
            "groups are published in the order they were written"
        );
        s.end_offset = end.end_offset;
        s.last_position = end.last_position;
        s.last_hash = end.last_hash;
        s.sparse.append(sparse);
    }

    /// Seals the segment: writes its footer right after its frames, makes it durable, and
    /// returns the state it sealed. The caller has trimmed the file to its frames.
    pub(crate) fn seal(&self) -> Result<SegmentState> {
        let state = self.snapshot();
        let footer = SegmentFooter {
            last_position: state.last_position,
            count: state.last_position.0 + 1 - self.first_position.0,
            index_offset: ByteOffset(state.end_offset),
            last_hash: state.last_hash,
            entries: state.sparse.clone(),
        };
        self.file
            .write_all_at(&footer.encode(), state.end_offset)
            .map_err(Error::io_with(|| format!("sealing segment {}", self.id)))?;
        self.file.sync_data().map_err(Error::io_with(|| {
            format!("syncing the seal of segment {}", self.id)
        }))?;
        self.state.write().unwrap_or_else(|p| p.into_inner()).sealed = true;
        Ok(state)
    }

    /// Takes the state a footer gives (another process sealed the segment).
    pub(crate) fn seal_from(&self, footer: SegmentFooter) {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        s.sparse = footer.entries;
        s.end_offset = footer.index_offset.0;
        s.last_position = footer.last_position;
        s.last_hash = footer.last_hash;
        s.sealed = true;
    }

    /// Takes `state`, read anew from the file (another process appended to it).
    pub(crate) fn set_state(&self, state: SegmentState) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
    }

    pub(crate) fn snapshot(&self) -> SegmentState {
        self.state
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Where the segment's frames end, as of the last commit.
    pub(crate) fn end(&self) -> SegmentEnd {
        SegmentEnd::of(&self.state.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Where to start scanning for `position`: the offset of the nearest indexed frame at or
    /// before it (`first_offset` when none is), that frame's position, and where the frames
    /// end, read together under one lock.
    pub(crate) fn seek(
        &self,
        first_offset: u64,
        position: Position,
    ) -> (u64, Position, SegmentEnd) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let i = state.sparse.partition_point(|e| e.position <= position);
        let (start, at) = match i.checked_sub(1).and_then(|i| state.sparse.get(i)) {
            Some(e) => (e.offset.0, e.position),
            None => (first_offset, self.first_position),
        };
        let end = SegmentEnd::of(&state);
        (start, at, end)
    }
}
