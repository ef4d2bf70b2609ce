//! Opening the log: checking every segment's header and footer, scanning the unsealed tail,
//! and deciding, row by row of the recovery table in `docs/FORMAT.md`, what damage means.
//!
//! Only the unsealed tail is scanned frame by frame, so opening does not slow down as the
//! journal grows; sealed segments are checked through their header and footer (their frames are
//! `verify`'s job). A torn final write is cut off and reported (its bytes kept in
//! `quarantine/`); any other damage refuses to open, naming the segment, offset and position,
//! unless the caller asked for salvage.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use journal_format::frame::is_zeroed;
use journal_format::{
    Position, SegmentFooter, SegmentHeader, SegmentId, SEGMENT_FOOTER_TRAILER_LEN,
    SEGMENT_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::log::context::RecoveryContext;
use crate::log::map::Head;
use crate::log::quarantine::{
    create_unique, move_whole_segment, readable_positions, Readable, QUARANTINE_DIR,
};
use crate::log::report::{Damage, RecoveryAction, RecoveryReport};
use crate::log::salvage;
use crate::log::segment::{
    read_footer, read_rest, segment_path, Segment, SegmentState, SEGMENTS_DIR,
};
use crate::log::tail::{scan_tail, Tail};
use crate::storage::{OpenMode, Storage, StorageFile};

/// The result of recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: Vec<Arc<Segment>>,
    pub head: Head,
    pub report: RecoveryReport,
}

/// The segments opened so far, in order, and the head after the last of them.
struct Opened {
    segments: Vec<Arc<Segment>>,
    head: Head,
    /// The id the first segment must have: 1, or the one after the last archived segment.
    first_id: u64,
}

impl Opened {
    /// Adds `kept` (when a segment was kept) to the log being recovered, moving the head past
    /// it.
    fn push(&mut self, kept: Option<Segment>) {
        if let Some(segment) = kept {
            let state = segment.snapshot();
            self.head = Head {
                position: state.last_position,
                hash: state.last_hash,
            };
            self.segments.push(Arc::new(segment));
        }
    }
}

/// How the log is being opened.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opening {
    /// Damage outside a torn tail is set aside (moved to `quarantine/` and reported) instead of
    /// refusing to open.
    pub salvage: bool,
    /// The last position the journal's evidence records as durably committed.
    pub committed: Position,
    /// Another process writes the log: nothing is cut or written, a write under way is left.
    pub read_only: bool,
    /// Where the live log begins when older segments were archived: the last archived segment
    /// and the head at its end, which the first live segment continues.
    pub base: Option<(SegmentId, Head)>,
}

/// Opens the log in `dir`, applying the recovery table.
///
/// `committed` is the last position the journal's evidence (`HEAD`, the index) records as
/// durably committed: bytes a torn-write rule would cut at or before it were acknowledged, so
/// they are damage instead (`Position::ZERO` when there is no evidence).
pub(crate) fn recover(storage: &dyn Storage, dir: &Path, opening: Opening) -> Result<Recovered> {
    let Opening {
        salvage,
        committed,
        read_only,
        base,
    } = opening;
    let (mut ids, mut report) = list_segments(storage, dir, salvage, read_only)?;
    let (last_archived, base_head) = base.unwrap_or((SegmentId(0), Head::default()));
    // Archived segments a crash left live are removed before recovery when writable (see
    // `archive::before_recovery`); read-only, they are passed over.
    ids.retain(|id| *id > last_archived);
    report.segments = ids.len();
    let mut ctx = RecoveryContext {
        storage,
        dir,
        committed,
        read_only,
        report: &mut report,
    };
    let mut opened = Opened {
        segments: Vec::new(),
        head: base_head,
        first_id: last_archived.0 + 1,
    };
    for (i, id) in ids.iter().copied().enumerate() {
        let is_last = i + 1 == ids.len();
        match open_next(&mut ctx, &opened, id, is_last) {
            Ok(kept) => opened.push(kept),
            Err(damage) if salvage => {
                if salvage_damage(&mut ctx, &mut opened, damage, &ids, i)?.is_break() {
                    break;
                }
            }
            Err(damage) => return Err(damage.into_error()),
        }
    }
    Ok(Recovered {
        segments: opened.segments,
        head: opened.head,
        report,
    })
}

/// The ids of the segment files in `dir`, in order, and the report recovery starts with (the
/// number of segments). A file named segment 0 refuses to open, unless `salvage` (and not
/// `read_only`) sets it aside, which the report records.
fn list_segments(
    storage: &dyn Storage,
    dir: &Path,
    salvage: bool,
    read_only: bool,
) -> Result<(Vec<SegmentId>, RecoveryReport)> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    storage
        .create_dir_all(&seg_dir)
        .map_err(Error::io_with(|| format!("creating {}", seg_dir.display())))?;
    let names = storage
        .list_dir(&seg_dir)
        .map_err(Error::io_with(|| format!("listing {}", seg_dir.display())))?;
    let mut set_aside = RecoveryReport::default();
    let mut ids: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| SegmentId::from_file_name(n))
        .collect();
    if ids.first() == Some(&SegmentId(0)) {
        // Segment ids start at 1: a file named 0 was never written by a journal.
        if !salvage || read_only {
            return Err(Error::Corruption {
                segment: SegmentId(0),
                offset: 0,
                position: None,
                detail: String::from(
                    "not a segment of this journal (segment ids start at 1); open with --salvage to set it aside",
                ),
            });
        }
        ids.remove(0);
        salvage::set_aside(
            storage,
            dir,
            &[SegmentId(0)],
            "not a segment of this journal: segment ids start at 1",
            &mut set_aside,
        )?;
    }
    let mut report = RecoveryReport {
        segments: ids.len(),
        ..RecoveryReport::default()
    };
    report.actions.append(&mut set_aside.actions);
    Ok((ids, report))
}

/// Opens segment file `id` (`is_last`: the last file found) after the segments `opened` holds;
/// a file whose id does not follow theirs means the segment that does is missing.
fn open_next(
    ctx: &mut RecoveryContext<'_>,
    opened: &Opened,
    id: SegmentId,
    is_last: bool,
) -> Result<Option<Segment>, Damage> {
    let expected_id = SegmentId(
        opened
            .segments
            .last()
            .map_or(opened.first_id, |s| s.id.0 + 1),
    );
    if id != expected_id {
        return Err(Damage::at(
            expected_id,
            0,
            Some(opened.head.position.next()),
            format!(
                "segment file {} is missing (found {} next)",
                expected_id, id
            ),
        ));
    }
    open_segment(ctx, id, is_last, opened.head)
}

/// Salvage of `damage` found opening segment file `ids[i]`: keeps what holds of it in
/// `opened` and moves the rest, and every later file, to `quarantine/`. Breaks unless the
/// segment, sealed again, is continued by the next file, which is then opened in turn.
fn salvage_damage(
    ctx: &mut RecoveryContext<'_>,
    opened: &mut Opened,
    damage: Damage,
    ids: &[SegmentId],
    i: usize,
) -> Result<ControlFlow<()>> {
    let Some(id) = ids.get(i).copied() else {
        return Err(damage.into_error());
    };
    let (storage, dir) = (ctx.storage, ctx.dir);
    if damage.unsealed {
        let later = ids.get(i + 1..).unwrap_or_default();
        let Some((segment, continues)) =
            salvage::unsealed(storage, dir, id, opened.head, later, ctx.report)?
        else {
            let (kept, action) = quarantine(storage, dir, damage, id, later)?;
            opened.push(kept);
            ctx.report.actions.push(action);
            return Ok(ControlFlow::Break(()));
        };
        opened.push(Some(segment));
        return Ok(if continues {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        });
    }
    // A missing segment: the file found in its place (`id`) cannot follow either.
    let skip = if damage.segment == id { i + 1 } else { i };
    let later = ids.get(skip..).unwrap_or_default();
    let (kept, action) = quarantine(storage, dir, damage, id, later)?;
    opened.push(kept);
    ctx.report.actions.push(action);
    Ok(ControlFlow::Break(()))
}

/// Checks one segment. Returns `None` for a last segment whose creation never completed (it is
/// removed and reported; read-only, it is only skipped).
pub(crate) fn open_segment(
    ctx: &mut RecoveryContext<'_>,
    id: SegmentId,
    is_last: bool,
    prev: Head,
) -> Result<Option<Segment>, Damage> {
    let path = segment_path(ctx.dir, id);
    let mode = if is_last {
        OpenMode::ReadWrite
    } else {
        OpenMode::Read
    };
    let file = ctx
        .storage
        .open(&path, mode)
        .map_err(|e| cannot(id, "open the segment", e))?;
    let len = file
        .len()
        .map_err(|e| cannot(id, "read the segment length", e))?;
    let mut header_bytes = vec![0u8; SEGMENT_HEADER_LEN.min(usize::try_from(len).unwrap_or(0))];
    file.read_exact_at(&mut header_bytes, 0)
        .map_err(|e| cannot(id, "read the segment header", e))?;
    let header = match SegmentHeader::decode(&header_bytes) {
        Ok(header) => header,
        Err(e) => {
            // Row "incomplete segment": the last file, no valid header, nothing but zeros.
            // Its creation was never synced, so nothing in it was acknowledged.
            let zero = never_written(&*file, len);
            if !(is_last && zero) {
                return Err(Damage::at(id, 0, None, format!("segment header: {e}")));
            }
            // Read-only, its creation is under way in the writing process, or never completed.
            if !ctx.read_only {
                drop(file);
                remove_incomplete(ctx, id, len)?;
            }
            return Ok(None);
        }
    };
    check_continues(id, &header, prev)?;
    match read_footer(&*file, len) {
        Ok(footer) => sealed_segment(id, &header, file, footer).map(Some),
        Err(e) if !is_last => Err(Damage {
            unsealed: true,
            ..Damage::at(
                id,
                len.saturating_sub(SEGMENT_FOOTER_TRAILER_LEN as u64),
                None,
                format!("sealed segment has no valid footer: {e}"),
            )
        }),
        Err(_) => {
            // The whole tail is scanned, checksums and chain, so damage anywhere in it (a flipped
            // bit, a body edited with its checksums recomputed, frames swapped) is found here.
            let tail = Tail {
                id,
                file: &file,
                len,
                header: &header,
            };
            let state = scan_tail(ctx, &tail, None)?;
            Ok(Some(Segment::new(id, &header, file, state)))
        }
    }
}

/// The damage of an I/O failure to do `what` with segment `id`.
fn cannot(id: SegmentId, what: &str, e: std::io::Error) -> Damage {
    Damage::at(id, 0, None, format!("cannot {what}: {e}"))
}

/// Whether a segment file of `len` bytes holds nothing written: shorter than a header, or
/// zeros throughout (and under 1 MiB).
fn never_written(file: &dyn StorageFile, len: u64) -> bool {
    let mut all = vec![0u8; usize::try_from(len.min(1 << 20)).unwrap_or(0)];
    len < (1 << 20)
        && file.read_exact_at(&mut all, 0).is_ok()
        && (is_zeroed(&all) || len < SEGMENT_HEADER_LEN as u64)
}

/// Removes segment file `id` (`len` bytes), whose creation never completed, and reports it.
fn remove_incomplete(ctx: &mut RecoveryContext<'_>, id: SegmentId, len: u64) -> Result<(), Damage> {
    ctx.storage
        .remove_file(&segment_path(ctx.dir, id))
        .map_err(|e| cannot(id, "remove the incomplete segment", e))?;
    ctx.report
        .actions
        .push(RecoveryAction::IncompleteSegmentRemoved {
            segment: id.file_name(),
            bytes: len,
        });
    Ok(())
}

/// Checks that `header` belongs to segment `id` and continues the segment before it, which ends
/// at `prev`.
pub(crate) fn check_continues(
    id: SegmentId,
    header: &SegmentHeader,
    prev: Head,
) -> Result<(), Damage> {
    let expected_first = prev.position.next();
    if header.segment_id != id {
        return Err(Damage::at(
            id,
            0,
            None,
            format!(
                "header names segment {} but the file is {}",
                header.segment_id.0, id
            ),
        ));
    }
    if header.first_position != expected_first {
        return Err(Damage::at(
            id,
            0,
            Some(expected_first),
            format!(
                "segment starts at position {} but the previous segment ends at {}",
                header.first_position, prev.position
            ),
        ));
    }
    if header.prev_hash != prev.hash {
        return Err(Damage::at(
            id,
            0,
            Some(expected_first),
            format!(
                "segment's previous-hash {} does not match the previous segment's last hash {}",
                header.prev_hash, prev.hash
            ),
        ));
    }
    Ok(())
}

/// The sealed segment `id` in `file`, as its `header` and `footer` describe it; a footer whose
/// count does not match its positions is damage.
pub(crate) fn sealed_segment(
    id: SegmentId,
    header: &SegmentHeader,
    file: Arc<dyn StorageFile>,
    footer: SegmentFooter,
) -> Result<Segment, Damage> {
    let expected_count = footer
        .last_position
        .0
        .checked_sub(header.first_position.0 - 1);
    if expected_count != Some(footer.count) {
        return Err(Damage::at(
            id,
            footer.index_offset.0,
            None,
            format!(
                "footer counts {} frames for positions {}..={}",
                footer.count, header.first_position, footer.last_position
            ),
        ));
    }
    let state = SegmentState {
        sparse: footer.entries,
        end_offset: footer.index_offset.0,
        last_position: footer.last_position,
        last_hash: footer.last_hash,
        sealed: true,
    };
    Ok(Segment::new(id, header, file, state))
}

/// What salvage moved to `quarantine/`: the files, and the checksum-valid frames their bytes
/// hold (the first and last positions, and how many).
#[derive(Default)]
struct Moved {
    files: Vec<String>,
    first: Option<u64>,
    last: Option<u64>,
    readable: u64,
}

impl Moved {
    /// Records `file` moved to `quarantine/`, holding the frames `found`.
    fn note(&mut self, file: String, (f, l, n): Readable) {
        if let Some(f) = f {
            self.first = Some(self.first.map_or(f, |x| x.min(f)));
        }
        if let Some(l) = l {
            self.last = Some(self.last.map_or(l, |x| x.max(l)));
        }
        self.readable += n;
        self.files.push(file);
    }
}

/// Salvage: moves the damaged part of segment `id` (from the damage offset) and all later
/// segments into `quarantine/`, and returns what remains of segment `id` (if anything) as the
/// new unsealed tail.
fn quarantine(
    storage: &dyn Storage,
    dir: &Path,
    damage: Damage,
    id: SegmentId,
    later: &[SegmentId],
) -> Result<(Option<Segment>, RecoveryAction)> {
    let qdir = dir.join(QUARANTINE_DIR);
    storage
        .create_dir_all(&qdir)
        .map_err(Error::io_with(|| format!("creating {}", qdir.display())))?;
    let mut moved = Moved::default();
    let cut = if damage.segment == id && damage.offset >= SEGMENT_HEADER_LEN as u64 {
        Some(damage.offset)
    } else {
        None
    };
    let mut kept = None;
    if storage.exists(&segment_path(dir, damage.segment)) {
        kept = quarantine_damaged(storage, dir, damage.segment, cut, &mut moved)?;
    }
    for later_id in later {
        let (file, found) = move_whole_segment(storage, dir, *later_id)?;
        moved.note(file, found);
    }
    storage
        .sync_dir(&qdir)
        .map_err(Error::io("syncing quarantine"))?;
    storage
        .sync_dir(&dir.join(SEGMENTS_DIR))
        .map_err(Error::io("syncing the segments directory"))?;
    tracing::warn!(segment = %damage.segment, offset = damage.offset, detail = %damage.detail, "salvage moved damaged bytes to quarantine");
    let action = RecoveryAction::Quarantined {
        segment: damage.segment.file_name(),
        offset: damage.offset,
        detail: damage.detail,
        files: moved.files,
        positions: moved.first.zip(moved.last).map(|(a, b)| [a, b]),
        readable_frames: moved.readable,
    };
    Ok((kept, action))
}

/// Copies damaged segment `segment`, from `cut` on (the whole file when `None`), into
/// `quarantine/`, then cuts it there and returns what remains, rescanned as the unsealed tail;
/// the whole file moved is removed.
fn quarantine_damaged(
    storage: &dyn Storage,
    dir: &Path,
    segment: SegmentId,
    cut: Option<u64>,
    moved: &mut Moved,
) -> Result<Option<Segment>> {
    let path = segment_path(dir, segment);
    let file = storage
        .open(&path, OpenMode::ReadWrite)
        .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
    let len = file.len().map_err(Error::io("reading a segment length"))?;
    let from = cut.unwrap_or(0).min(len);
    let bytes = read_rest(&file, from, len).map_err(|e| Error::Io {
        context: format!("reading {}", path.display()),
        source: std::io::Error::other(e),
    })?;
    let found = readable_positions(&bytes);
    let qdir = dir.join(QUARANTINE_DIR);
    let (name, out) = create_unique(
        storage,
        &qdir,
        &format!("{:020}-{from:020}", segment.0),
        "damaged",
    )
    .map_err(|e| Error::Io {
        context: String::from("creating a quarantine file"),
        source: std::io::Error::other(e),
    })?;
    out.write_all_at(&bytes, 0)
        .map_err(Error::io("writing quarantine"))?;
    out.sync_data().map_err(Error::io("syncing quarantine"))?;
    moved.note(format!("{QUARANTINE_DIR}/{name}"), found);
    if let Some(offset) = cut {
        return rescan_cut(storage, dir, segment, file, offset).map(Some);
    }
    drop(file);
    storage
        .remove_file(&path)
        .map_err(Error::io("removing a damaged segment"))?;
    Ok(None)
}

/// Cuts segment `segment` (in `file`) at `offset` and rescans what remains, a valid prefix, as
/// an unsealed tail.
fn rescan_cut(
    storage: &dyn Storage,
    dir: &Path,
    segment: SegmentId,
    file: Arc<dyn StorageFile>,
    offset: u64,
) -> Result<Segment> {
    file.set_len(offset)
        .map_err(Error::io("truncating the damaged segment"))?;
    file.sync_data()
        .map_err(Error::io("syncing the damaged segment"))?;
    let mut header_bytes = vec![0u8; SEGMENT_HEADER_LEN];
    file.read_exact_at(&mut header_bytes, 0)
        .map_err(Error::io("reading a segment header"))?;
    let header = SegmentHeader::decode(&header_bytes).map_err(|e| Error::Corruption {
        segment,
        offset: 0,
        position: None,
        detail: format!("segment header: {e}"),
    })?;
    let mut scratch = RecoveryReport::default();
    let mut ctx = RecoveryContext {
        storage,
        dir,
        committed: Position::ZERO,
        read_only: false,
        report: &mut scratch,
    };
    let tail = Tail {
        id: segment,
        file: &file,
        len: offset,
        header: &header,
    };
    let state = scan_tail(&mut ctx, &tail, None).map_err(Damage::into_error)?;
    Ok(Segment::new(segment, &header, file, state))
}

/// Salvage of damage found after recovery (by the index's rebuild): moves segment `segment`
/// from `offset` on, and every later segment, to `quarantine/`, as [`quarantine`] does for
/// damage recovery finds.
///
/// # Errors
/// An I/O error.
pub(crate) fn quarantine_from(
    storage: &dyn Storage,
    dir: &Path,
    segment: SegmentId,
    offset: u64,
    position: Option<Position>,
    detail: String,
) -> Result<RecoveryAction> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    let names = storage
        .list_dir(&seg_dir)
        .map_err(Error::io_with(|| format!("listing {}", seg_dir.display())))?;
    let later: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| SegmentId::from_file_name(n))
        .filter(|id| id.0 > segment.0)
        .collect();
    let damage = Damage::at(segment, offset, position, detail);
    let (_, action) = quarantine(storage, dir, damage, segment, &later)?;
    Ok(action)
}
