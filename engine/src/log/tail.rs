//! The unsealed tail's scan: frame by frame, checksums and chain, to where its committed frames
//! end; and what lies after them judged, by the tail rows of the recovery table in
//! `docs/FORMAT.md` (a torn write is cut and kept, anything else is damage).

use std::sync::Arc;

use journal_format::bit_rot::{flipped_bit, FlippedBit};
use journal_format::frame::{decode_frame, is_zeroed, peek_position};
use journal_format::{
    FooterEntry, FormatError, FrameHeader, GroupCheck, Position, SegmentFooter, SegmentHeader,
    SegmentId, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN,
};

use crate::error::Result;
use crate::log::context::RecoveryContext;
use crate::log::quarantine::{save_cut, trim};
use crate::log::report::{Damage, RecoveryAction};
use crate::log::scan::{FrameScanner, Stop};
use crate::log::segment::{read_rest, SegmentState, SPARSE_INTERVAL_BYTES};
use crate::storage::StorageFile;

/// The unsealed segment a tail scan reads: its id, its file and the file's length, its header.
pub(crate) struct Tail<'f> {
    /// The segment's id.
    pub id: SegmentId,
    /// Its file.
    pub file: &'f Arc<dyn StorageFile>,
    /// How many bytes of the file are scanned: its length, or where a cut left it.
    pub len: u64,
    /// Its header.
    pub header: &'f SegmentHeader,
}

impl Tail<'_> {
    /// Damage in this segment at `offset`, where position `position` belongs.
    fn damage(&self, offset: u64, position: Option<Position>, detail: String) -> Damage {
        Damage::at(self.id, offset, position, detail)
    }

    /// A failure to read or repair this segment at `offset`.
    fn io_failure(&self, offset: u64, detail: String) -> Damage {
        Damage::io_failure(self.id, offset, detail)
    }
}

/// Where the frame-by-frame scan of a tail stopped, and what it found before.
struct TailScan {
    /// The segment's state after its last complete batch.
    committed: SegmentState,
    /// Why the scan stopped.
    stop: Stop,
    /// Where it stopped: the offset of the next frame.
    at: u64,
    /// The position the next frame would hold.
    expected: Position,
    /// The first position of the frames after the last complete batch, if any.
    pending_first: Option<Position>,
}

/// What follows the last complete batch of a tail, judged by the tail rows of the table.
enum Beyond {
    /// Nothing: the frames end with the file.
    Nothing,
    /// Zeroed space, preallocated or never written: the log ends there.
    Zeroed,
    /// What a write that never completed left, and what was found there: nothing in it was
    /// acknowledged, unless the journal's evidence says otherwise.
    Torn(String),
}

/// Scans the unsealed `tail` frame by frame (from `start` when given, else from the first
/// frame) and applies the tail rows of the table.
/// Read-only (another process writes the journal), whatever follows the last complete batch is
/// taken as a write under way: it is neither judged nor cut.
pub(crate) fn scan_tail(
    ctx: &mut RecoveryContext<'_>,
    tail: &Tail<'_>,
    start: Option<SegmentState>,
) -> Result<SegmentState, Damage> {
    let committed = start.unwrap_or(SegmentState {
        sparse: Vec::new(),
        end_offset: SEGMENT_HEADER_LEN as u64,
        last_position: Position(tail.header.first_position.0 - 1),
        last_hash: tail.header.prev_hash,
        sealed: false,
    });
    ctx.report.tail_bytes_scanned = tail.len.saturating_sub(committed.end_offset);
    let scan = scan_frames(tail, committed)?;
    if ctx.read_only {
        return Ok(scan.committed);
    }
    let cut_at = scan.committed.end_offset;
    match judge_beyond(tail, &scan)? {
        Beyond::Nothing => {}
        // The zeros are trimmed, and nothing is reported: nothing was written there.
        Beyond::Zeroed => {
            trim(tail.file, cut_at, tail.len).map_err(|e| tail.io_failure(cut_at, e))?;
        }
        Beyond::Torn(detail) => cut_torn(ctx, tail, &scan, detail)?,
    }
    Ok(scan.committed)
}

/// Reads `tail`'s frames from the end of the batches `committed` holds, checking each frame's
/// checksums, position and chain, and moves `committed` past each complete batch; stops where
/// no frame follows. A checksum-valid frame that does not continue the log, or a link group whose
/// link does not hold, is damage.
fn scan_frames(tail: &Tail<'_>, mut committed: SegmentState) -> Result<TailScan, Damage> {
    let mut scanner = FrameScanner::new(
        Arc::clone(tail.file),
        tail.id,
        committed.end_offset,
        tail.len,
    );
    let mut pending_sparse: Vec<FooterEntry> = Vec::new();
    let mut pending_first: Option<Position> = None;
    let mut expected = committed.last_position.next();
    let mut prev = committed.last_hash;
    // The group being read, checked at its last frame; where it starts.
    let mut group = GroupCheck::default();
    let mut run_start = (committed.end_offset, expected);
    let stop = loop {
        let frame = match scanner.next() {
            Ok(Ok(frame)) => frame,
            Ok(Err(stop)) => break stop,
            Err(e) => return Err(tail.damage(scanner.offset(), Some(expected), e.to_string())),
        };
        // Row "valid frame out of sequence": a checksum-valid frame that does not continue the
        // log is never a torn write.
        if frame.header.meta.position != expected {
            return Err(tail.damage(
                frame.offset,
                Some(expected),
                format!(
                    "frame holds position {} where {} was expected",
                    frame.header.meta.position, expected
                ),
            ));
        }
        if group.is_empty() {
            run_start = (frame.offset, expected);
        }
        match group.push(&prev, &frame.header, frame.frame) {
            Ok(Some(link)) => prev = link,
            Ok(None) => {}
            Err(e) => {
                let (offset, position) = run_start;
                return Err(tail.damage(
                    offset,
                    Some(position),
                    format!("the link group from offset {offset}: {e}"),
                ));
            }
        }
        add_sparse(&mut pending_sparse, &committed, frame.offset, expected);
        pending_first.get_or_insert(expected);
        if frame.header.meta.flags.is_end_of_batch() {
            committed.end_offset = scanner.offset();
            committed.last_position = expected;
            committed.last_hash = prev;
            committed.sparse.append(&mut pending_sparse);
            pending_first = None;
        }
        expected = expected.next();
    };
    Ok(TailScan {
        committed,
        stop,
        at: scanner.offset(),
        expected,
        pending_first,
    })
}

/// Adds the frame at `offset`, holding `position`, to the sparse entries of the unfinished
/// batch (`pending`) when it lies far enough past the last entry (`committed`'s, when `pending`
/// holds none).
fn add_sparse(
    pending: &mut Vec<FooterEntry>,
    committed: &SegmentState,
    offset: u64,
    position: Position,
) {
    let last_sparse = pending
        .last()
        .or(committed.sparse.last())
        .map(|e| e.offset.0);
    if last_sparse.is_none_or(|o| offset >= o + SPARSE_INTERVAL_BYTES) {
        pending.push(FooterEntry {
            position,
            offset: journal_format::ByteOffset(offset),
        });
    }
}

/// Judges what follows the last complete batch of `tail`, where `scan` stopped: nothing, zeroed
/// space, or a torn write (with what was found); anything else is damage.
fn judge_beyond(tail: &Tail<'_>, scan: &TailScan) -> Result<Beyond, Damage> {
    let cut_at = scan.committed.end_offset;
    let stop = &scan.stop;
    match stop {
        Stop::End if cut_at == tail.len => return Ok(Beyond::Nothing),
        Stop::End => {
            return Ok(Beyond::Torn(String::from(
                "the last batch has no end-of-batch frame",
            )))
        }
        Stop::Zeroed | Stop::Damaged(_) => {}
    }
    let (at, expected) = (scan.at, scan.expected);
    let rest = read_rest(tail.file, at, tail.len).map_err(|e| tail.io_failure(at, e))?;
    let zero_tail = matches!(stop, Stop::Zeroed) && is_zeroed(&rest);
    if zero_tail && cut_at == at {
        // Row "zeroed space": preallocated or never written; the log ends here.
        return Ok(Beyond::Zeroed);
    }
    // Row "damage followed by a later write": synced data is damaged.
    if let Some((offset, position)) = find_later_write(&rest, at, expected) {
        return Err(tail.damage(
            at,
            Some(expected),
            format!(
            "{} at offset {at}, but a later write starts at offset {offset} (position {position})",
            describe(stop)
        ),
        ));
    }
    // Row "damage that no torn write explains": a complete frame with wrong bytes and
    // no sign of unwritten space is bit rot or tampering in the last write, which was
    // acknowledged; it is never cut away.
    // Row "unfinished seal": the bytes after the last batch are what sealing writes (the
    // footer), in part. The frames are whole; only the seal is cut.
    let torn_seal =
        cut_at == at && is_partial_footer(&rest, at, &scan.committed, tail.header.first_position);
    // A zeroed header (72 zero bytes where a frame belongs) is itself unwritten space.
    // A frame the file holds whole whose checksum one flipped bit explains is bit rot,
    // even where its last bytes are zeros that a torn write would also leave.
    let rot = one_bit_rot(stop, &rest);
    if !torn_seal && !matches!(stop, Stop::Zeroed) && (rot || !torn_evidence(&rest, at)) {
        let why = if rot {
            "one flipped bit explains it, so this is bit rot, not a torn write"
        } else {
            "the frame is complete, so this is not a torn write"
        };
        return Err(tail.damage(
            at,
            Some(expected),
            format!("{} at offset {at}: {why}", describe(stop)),
        ));
    }
    Ok(Beyond::Torn(if torn_seal {
        String::from("an unfinished seal: part of the segment footer")
    } else if zero_tail {
        String::from("the last batch has no end-of-batch frame")
    } else {
        describe(stop)
    }))
}

/// Cuts what a torn write left after `tail`'s last complete batch (`detail`: what was found
/// there), keeping its bytes in `quarantine/` and reporting the cut; unless the journal's
/// evidence records positions it would cut as committed, which makes them damage.
fn cut_torn(
    ctx: &mut RecoveryContext<'_>,
    tail: &Tail<'_>,
    scan: &TailScan,
    detail: String,
) -> Result<(), Damage> {
    let committed = &scan.committed;
    let cut_at = committed.end_offset;
    // Row "a cut the evidence forbids": what the rules below would cut holds positions the
    // journal's evidence records as committed, so it was acknowledged: damage, never cut.
    if committed.last_position < ctx.committed {
        return Err(tail.damage(
            cut_at,
            Some(committed.last_position.next()),
            format!(
                "{detail} at offset {cut_at}, but position {} was recorded as committed (HEAD or the index), so these bytes were acknowledged: damage, not a torn write",
                ctx.committed
            ),
        ));
    }
    // Rows "torn final write" and "unfinished batch": nothing here was acknowledged.
    let (id, len) = (tail.id, tail.len);
    let cut_bytes = len - cut_at;
    let saved_to = save_cut(ctx.storage, ctx.dir, id, tail.file, cut_at, len)
        .map_err(|e| tail.io_failure(cut_at, e))?;
    trim(tail.file, cut_at, len).map_err(|e| tail.io_failure(cut_at, e))?;
    let positions = scan
        .pending_first
        .map(|first| [first.0, scan.expected.0 - 1])
        .filter(|[a, b]| a <= b);
    tracing::warn!(segment = %id, offset = cut_at, bytes = cut_bytes, %detail, "cut a torn tail");
    ctx.report.actions.push(RecoveryAction::TornTailCut {
        segment: id.file_name(),
        offset: cut_at,
        bytes: cut_bytes,
        positions,
        detail,
        saved_to,
    });
    Ok(())
}

/// Whether the damage `stop` found in the frame at the start of `rest` (the file's bytes from
/// there on) is one flipped bit in a frame the file holds whole: bit rot, not a torn write, whose
/// lost bytes read as zeros and change many bits (`journal_format::bit_rot`). A bit whose byte
/// lies in the zeros that end the frame's checked bytes is no proof: a torn write that lost a
/// byte holding one set bit leaves the same bytes.
fn one_bit_rot(stop: &Stop, rest: &[u8]) -> bool {
    let (stored, computed, checked) = match stop {
        // `header_crc` covers the header after itself.
        Stop::Damaged(FormatError::HeaderChecksumMismatch { stored, computed }) => {
            (*stored, *computed, rest.get(4..FRAME_HEADER_LEN))
        }
        Stop::Damaged(FormatError::BodyChecksumMismatch { stored, computed }) => {
            let body = FrameHeader::decode(rest).ok().and_then(|header| {
                let end = usize::try_from(header.frame_len()).ok()?;
                rest.get(FRAME_HEADER_LEN..end)
            });
            (*stored, *computed, body)
        }
        _ => return false,
    };
    let Some(checked) = checked else {
        return false; // not whole in the file
    };
    let written_end = checked.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    match flipped_bit(stored, computed, checked.len() as u64) {
        Some(FlippedBit::InStored) => true,
        Some(FlippedBit::InMessage { byte }) => byte < written_end as u64,
        None => false,
    }
}

fn describe(stop: &Stop) -> String {
    match stop {
        Stop::End => String::from("end of file"),
        Stop::Zeroed => String::from("zeroed bytes followed by non-zero bytes"),
        Stop::Damaged(e) => format!("damaged frame: {e}"),
    }
}

/// Whether `rest` (file offset `base`, right after the last committed batch) is part of the
/// footer that sealing this segment writes: every sector of it either holds the footer's bytes
/// or was not written (zeros).
fn is_partial_footer(rest: &[u8], base: u64, state: &SegmentState, first: Position) -> bool {
    let footer = SegmentFooter {
        last_position: state.last_position,
        count: state.last_position.0 + 1 - first.0,
        index_offset: journal_format::ByteOffset(base),
        last_hash: state.last_hash,
        entries: state.sparse.clone(),
    }
    .encode();
    if rest.is_empty() || rest.len() > footer.len() {
        return false;
    }
    let mut at = 0usize;
    while at < rest.len() {
        let sector_end =
            usize::try_from((base + at as u64) / SECTOR_BYTES * SECTOR_BYTES + SECTOR_BYTES - base)
                .unwrap_or(usize::MAX)
                .min(rest.len());
        let got = rest.get(at..sector_end).unwrap_or_default();
        let want = footer.get(at..sector_end).unwrap_or_default();
        if got != want && !is_zeroed(got) {
            return false;
        }
        at = sector_end;
    }
    true
}

/// Whether the damaged bytes `rest` (file offset `base` to the end of the file: the final write,
/// since no later write exists) look like a write that did not complete, rather than complete
/// frames whose bytes are wrong (bit rot, tampering). Unwritten space reads as zeros, a sector
/// (512 aligned bytes) at a time, so the evidence is:
///
/// - a frame in the region runs past the end of the file (of its non-zero bytes, see below);
/// - an aligned sector inside the region that is all zeros;
/// - the region's first piece (from `base` to the first sector boundary) all zeros;
/// - the region's last piece (from the last sector boundary to the end of the file) all zeros.
///
/// A flipped bit in complete frames shows none of these, unless the frame's own bytes happen to
/// be zero from a sector boundary on: from its start (about one chance in 131,072 for a checksum
/// field), or to the end of the file (k trailing zero bytes of a body, as a final `0` or `0.0`
/// gives, reach back to a sector boundary about k times in 512). Such a frame would be cut as a
/// torn write — reported, and kept in `quarantine/` — rather than refused.
///
/// Zeros after the last non-zero byte are left out first: the writer zero-fills the tail ahead
/// of its frames, so an open journal's file always ends in zeros, and they say nothing about the
/// last write. What remains must itself show unwritten space: a frame that runs past it, or a
/// zero sector inside it. (Without this, bit rot in the last acknowledged frame of a journal that
/// crashed would read as a torn write and be cut.)
fn torn_evidence(rest: &[u8], base: u64) -> bool {
    let data_len = rest.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    let Some(rest) = rest.get(..data_len).filter(|r| !r.is_empty()) else {
        return true; // nothing but zeros: unwritten space
    };
    match FrameHeader::decode(rest) {
        Ok(header) if header.frame_len() > rest.len() as u64 => return true,
        Err(FormatError::Truncated { .. }) => return true,
        _ => {}
    }
    let end = base + rest.len() as u64;
    let piece = |from: u64, to: u64| -> &[u8] {
        let a = usize::try_from(from - base).unwrap_or(usize::MAX);
        let b = usize::try_from(to - base).unwrap_or(usize::MAX);
        rest.get(a..b).unwrap_or_default()
    };
    let first_boundary = base.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    let first = piece(base, first_boundary.min(end));
    if !first.is_empty() && is_zeroed(first) {
        return true;
    }
    let mut sector = first_boundary;
    while sector + SECTOR_BYTES <= end {
        if is_zeroed(piece(sector, sector + SECTOR_BYTES)) {
            return true;
        }
        sector += SECTOR_BYTES;
    }
    let last = piece(sector.max(base), end);
    sector < end && !last.is_empty() && is_zeroed(last)
}

/// Searches `rest` (the bytes from file offset `base` on) for a valid frame that starts a write
/// and holds a position at or after `expected`: proof that the damage before it was synced.
fn find_later_write(rest: &[u8], base: u64, expected: Position) -> Option<(u64, Position)> {
    let max_frames = rest.len() as u64 / FRAME_HEADER_LEN as u64 + 1;
    (1..rest.len().saturating_sub(FRAME_HEADER_LEN - 1)).find_map(|i| {
        let candidate = rest.get(i..)?;
        let position = peek_position(candidate)?;
        if position < expected || position.0 > expected.0.saturating_add(max_frames) {
            return None;
        }
        let (header, _) = decode_frame(candidate).ok()?;
        header
            .meta
            .flags
            .is_first_in_write()
            .then_some((base + i as u64, position))
    })
}

/// The size of the unit in which a disk persists writes; an all-zero, aligned run of this many
/// bytes inside a damaged frame is unwritten space, not bit rot.
const SECTOR_BYTES: u64 = 512;
