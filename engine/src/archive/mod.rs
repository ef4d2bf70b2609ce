//! Archiving old segments (docs/ARCHIVE.md), below the journal: the manifest (`ARCHIVE`) that
//! keeps the chain continuous across the boundary, the retention policies, archived files, and
//! what open does with an archive: it finishes or rolls back an interrupted step, starts the
//! live log after the boundary, and, when the archive is attached, opens the archived segments
//! in front of it. `Journal::archive` and `Journal::restore` (in `journal/`) use it.
//!
//! The steps of an archive are ordered so that a crash anywhere leaves every event live or
//! archived and listed: each segment copied and synced (file and directory), then the manifest
//! replaced, then the live files removed. A restore copies back, then replaces the manifest.
//! Open removes the live copy of a segment the manifest lists once its archived copy is there
//! whole, and otherwise rolls the manifest back, the segment staying live.

pub(crate) mod files;
pub mod manifest;
pub(crate) mod plan;

use std::path::Path;
use std::sync::Arc;

use journal_format::SegmentId;
use serde::Serialize;

pub use manifest::{ArchivedSegment, Manifest, MANIFEST_FILE};
pub use plan::{parse_duration, parse_size, Retention};

use crate::error::{Error, Result};
use crate::log::map::Boundary;
use crate::log::report::RecoveryAction;
use crate::log::segment::{segment_path, SEGMENTS_DIR};
use crate::log::{Head, Log};
use crate::storage::Storage;

/// One segment an archive or a restore moved (or, in a dry run, would move).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MovedSegment {
    /// Its file name.
    pub segment: String,
    /// The first position it holds.
    pub first: u64,
    /// The last position it holds.
    pub last: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

/// What an archive or a restore did.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ArchiveOutcome {
    /// Whether nothing was moved (`--dry-run`: the plan only).
    pub dry_run: bool,
    /// The segments moved, oldest first.
    pub segments: Vec<MovedSegment>,
    /// The bytes moved.
    pub bytes: u64,
    /// The first live position afterwards: the live log starts there (1 when nothing is
    /// archived).
    pub first_live: u64,
    /// The last archived position afterwards (0 when nothing is archived).
    pub last_archived: u64,
    /// The archive directory.
    pub archive: String,
}

/// What open learned from the manifest: the manifest, and where the live log begins.
pub(crate) struct AtOpen {
    pub manifest: Manifest,
    /// The last archived segment and the head at its end.
    pub base: Option<(SegmentId, Head)>,
}

/// Reads the manifest before recovery and, unless `read_only`, finishes or rolls back what an
/// interrupted archive or restore left (see [`settle_live_copies`]), reporting it in `actions`.
pub(crate) fn before_recovery(
    storage: &dyn Storage,
    dir: &Path,
    read_only: bool,
    actions: &mut Vec<RecoveryAction>,
) -> Result<AtOpen> {
    let mut manifest = manifest::read(storage, dir)?;
    if !read_only {
        let settled = settle_live_copies(storage, dir, &mut manifest)?;
        if !settled.rolled_back.is_empty() {
            actions.push(RecoveryAction::ArchiveRolledBack {
                segments: settled.rolled_back,
            });
        }
        if !settled.removed.is_empty() {
            actions.push(RecoveryAction::ArchiveCompleted {
                segments: settled.removed,
            });
        }
    }
    let base = manifest
        .boundary()
        .map(|(id, position, hash)| (id, Head { position, hash }));
    Ok(AtOpen { manifest, base })
}

/// What [`settle_live_copies`] did: the listed segments whose live copies it removed, and
/// those it took out of the manifest, their archived copies missing or not whole.
#[derive(Default)]
struct Settled {
    removed: Vec<String>,
    rolled_back: Vec<String>,
}

/// Settles the segments the manifest lists that are still live (an archive interrupted after
/// its manifest step, or a restore before it): when every such archived copy is there with the
/// hash the manifest records, the live copies are removed; otherwise (an archive directory a
/// crash lost, a copy not whole) the manifest's tail from the first such segment is rolled
/// back, its segments staying live, and the manifest replaced. Partial copies (`*.seg.part`)
/// an interrupted restore left are removed. The live copy is never removed on the manifest's
/// word alone.
///
/// # Errors
/// [`Error::Corruption`] when an archived copy is missing and its live copy is gone too, or a
/// segment to roll back is followed by one that is not live; an I/O error.
fn settle_live_copies(
    storage: &dyn Storage,
    dir: &Path,
    manifest: &mut Manifest,
) -> Result<Settled> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    let mut changed = remove_partial_copies(storage, &seg_dir)?;
    let mut settled = Settled::default();
    let live = |entry: &ArchivedSegment| storage.exists(&segment_path(dir, entry.segment));
    let whole = |entry: &ArchivedSegment| {
        let copy = Path::new(&entry.location).join(entry.segment.file_name());
        storage.exists(&copy)
            && files::hash(storage, &copy).is_ok_and(|h| h == (entry.len, entry.file_hash))
    };
    if let Some(first_bad) = manifest.segments.iter().position(|e| live(e) && !whole(e)) {
        if let Some(gone) = manifest
            .segments
            .get(first_bad..)
            .and_then(|t| t.iter().find(|e| !live(e)))
        {
            return Err(Error::Corruption {
                segment: gone.segment,
                offset: 0,
                position: Some(gone.first),
                detail: format!(
                    "an interrupted archive left segments {}.. live with no whole archived copy, but {} is neither live nor whole",
                    first_bad, gone.segment.file_name()
                ),
            });
        }
        let tail = manifest.segments.split_off(first_bad);
        settled.rolled_back = tail.iter().map(|e| e.segment.file_name()).collect();
        manifest::write(storage, dir, manifest)?;
    }
    for entry in &manifest.segments {
        let path = segment_path(dir, entry.segment);
        if storage.exists(&path) {
            storage.remove_file(&path).map_err(Error::io_with(|| {
                format!("removing the archived {}", path.display())
            }))?;
            settled.removed.push(entry.segment.file_name());
            changed = true;
        }
    }
    if changed {
        storage
            .sync_dir(&seg_dir)
            .map_err(Error::io_with(|| format!("syncing {}", seg_dir.display())))?;
    }
    Ok(settled)
}

/// Removes the partial copies (`*.seg.part`) an interrupted restore left in `seg_dir`; whether
/// there were any.
fn remove_partial_copies(storage: &dyn Storage, seg_dir: &Path) -> Result<bool> {
    if !storage.exists(seg_dir) {
        return Ok(false);
    }
    let names = storage
        .list_dir(seg_dir)
        .map_err(Error::io_with(|| format!("listing {}", seg_dir.display())))?;
    let mut any = false;
    for name in names.iter().filter(|n| n.ends_with(".seg.part")) {
        let path = seg_dir.join(name);
        storage
            .remove_file(&path)
            .map_err(Error::io_with(|| format!("removing {}", path.display())))?;
        any = true;
    }
    Ok(any)
}

/// After recovery: records where the live log begins in `log` and, when `archive` is given,
/// opens the archived segments from it in front of the live ones.
///
/// # Errors
/// [`Error::Corruption`] naming the segment when an archived file is missing or is not the
/// segment the manifest lists; an I/O error.
pub(crate) fn after_recovery(
    storage: &dyn Storage,
    log: &Log,
    manifest: &Manifest,
    archive: Option<&Path>,
) -> Result<()> {
    if manifest.segments.is_empty() {
        log.set_boundary(None);
        return Ok(());
    }
    if let Some(archive) = archive {
        let opened = open_all(storage, archive, &manifest.segments)?;
        log.splice(0..0, opened);
    }
    log.set_boundary(boundary(manifest, archive.is_some()));
    Ok(())
}

/// Opens `entries` (archived, oldest first, from position 1) from `archive`.
pub(crate) fn open_all(
    storage: &dyn Storage,
    archive: &Path,
    entries: &[ArchivedSegment],
) -> Result<Vec<Arc<crate::log::Segment>>> {
    let mut prev = Head::default();
    let mut opened = Vec::with_capacity(entries.len());
    for entry in entries {
        let segment = files::open_archived(storage, archive, entry, prev)?;
        prev = Head {
            position: entry.last,
            hash: entry.last_hash,
        };
        opened.push(segment);
    }
    Ok(opened)
}

/// The boundary `manifest` gives, `attached` or not; `None` when nothing is archived.
pub(crate) fn boundary(manifest: &Manifest, attached: bool) -> Option<Boundary> {
    let (_, last_archived, last_hash) = manifest.boundary()?;
    let mut locations: Vec<String> = Vec::new();
    for s in &manifest.segments {
        if !locations.contains(&s.location) {
            locations.push(s.location.clone());
        }
    }
    Some(Boundary {
        last_archived,
        last_hash,
        locations,
        attached,
    })
}
