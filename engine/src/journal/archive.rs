//! `Journal::archive`: the plan a retention policy gives, then the segments copied to the
//! archive (each synced), the manifest replaced, and the live files removed, in that order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::archive::manifest::{self, ArchivedSegment, Manifest};
use crate::archive::plan::{self, Retention};
use crate::archive::{boundary, files, open_all, ArchiveOutcome, MovedSegment};
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::log::segment::{segment_path, SEGMENTS_DIR};
use crate::log::Segment;

/// What to archive, and where to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveRequest {
    /// Which segments.
    pub retention: Retention,
    /// The archive directory (created when missing).
    pub to: PathBuf,
    /// Only say what would be moved.
    pub dry_run: bool,
}

impl Journal {
    /// Moves the sealed segments `request.retention` selects to `request.to`: each copied
    /// through the storage seam and synced, then the manifest (`ARCHIVE`) replaced to list
    /// them, then the live files removed. The open segment and the segment holding the head are
    /// never archived. The index and the Merkle tree are made durable first, so that no
    /// catch-up after a crash needs the archived events.
    ///
    /// # Errors
    /// [`Error::ReadOnly`] on a read-only journal; an I/O error (the steps done so far leave
    /// every event live or archived and listed: see docs/ARCHIVE.md).
    pub fn archive(&self, request: &ArchiveRequest) -> Result<ArchiveOutcome> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let _one_at_a_time = self.archiving();
        if let Some(attached) = &self.options().archive {
            if absolute(attached) != absolute(&request.to) {
                return Err(Error::InvalidInput(format!(
                    "the archive attached is {}: archive to it, or open the journal without one",
                    attached.display()
                )));
            }
        }
        let journal_dir = absolute(self.dir());
        if Path::new(&absolute(&request.to)).starts_with(&journal_dir) {
            return Err(Error::InvalidInput(format!(
                "the archive {} is inside the journal's directory {journal_dir}: archive to a directory of its own",
                request.to.display()
            )));
        }
        let storage = Arc::clone(&self.options().storage);
        let mut manifest = manifest::read(&*storage, self.dir())?;
        let live = self.live_segments(&manifest);
        let now = self.clock().now_unix_ns();
        let chosen = plan::select(self.log(), &live, request.retention, now)?;
        let mut moved = Vec::with_capacity(chosen.len());
        for s in &chosen {
            moved.push(moved_segment(s)?);
        }
        if request.dry_run || chosen.is_empty() {
            return Ok(outcome(request, &manifest, moved, request.dry_run));
        }
        self.make_derived_durable()?;
        let location = absolute(&request.to);
        create_durable_dir(&*storage, &request.to)?;
        // 1. Each segment copied into the archive, synced with its directory.
        for segment in &chosen {
            manifest.segments.push(copy_out(
                &*storage,
                self.dir(),
                segment,
                &request.to,
                &location,
            )?);
        }
        // 2. The manifest lists them: from here on they are archived.
        manifest::write(&*storage, self.dir(), &manifest)?;
        // 3. The live copies removed (open removes any a crash left).
        for segment in &chosen {
            let path = segment_path(self.dir(), segment.id);
            storage
                .remove_file(&path)
                .map_err(Error::io_with(|| format!("removing {}", path.display())))?;
        }
        let seg_dir = self.dir().join(SEGMENTS_DIR);
        storage
            .sync_dir(&seg_dir)
            .map_err(Error::io_with(|| format!("syncing {}", seg_dir.display())))?;
        self.remap_archived(&manifest, chosen.len())?;
        Ok(outcome(request, &manifest, moved, false))
    }

    /// The live segments (after those an attached archive put in front of them).
    pub(crate) fn live_segments(&self, manifest: &Manifest) -> Vec<Arc<Segment>> {
        let last = manifest.boundary().map_or(0, |(id, _, _)| id.0);
        self.log()
            .segments()
            .into_iter()
            .filter(|s| s.id.0 > last)
            .collect()
    }

    /// Makes the index and the tree durable up to the head, so that neither needs an archived
    /// event to catch up after a crash.
    fn make_derived_durable(&self) -> Result<()> {
        self.wait_indexed()?;
        if let Some(index) = self.index() {
            index.persist()?;
        }
        if self.keeps_tree() {
            self.tree_head()?;
            self.tree().persist()?;
        }
        Ok(())
    }

    /// The map after `moved` more segments were archived: with the archive attached they are
    /// opened from it in place of the live files; otherwise they leave the map.
    fn remap_archived(&self, manifest: &Manifest, moved: usize) -> Result<()> {
        let log = self.log();
        let attached = self.options().archive.as_deref();
        // The map holds the segments archived before (when attached), then the moved ones.
        let before = match attached {
            Some(_) => manifest.segments.len() - moved,
            None => 0,
        };
        match attached {
            Some(archive) => {
                let opened = open_all(&*self.options().storage, archive, &manifest.segments)?;
                log.splice(0..before + moved, opened);
            }
            None => log.splice(0..moved, Vec::new()),
        }
        log.set_boundary(boundary(manifest, attached.is_some()));
        Ok(())
    }
}

/// Creates `dir` and the directories above it that are missing, and makes each new entry
/// durable (each created directory synced, and the one above the highest): a copy synced into
/// a directory whose own entry a crash can lose is not archived.
fn create_durable_dir(storage: &dyn crate::storage::Storage, dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !storage.exists(d))
        .collect();
    storage
        .create_dir_all(dir)
        .map_err(Error::io_with(|| format!("creating {}", dir.display())))?;
    let Some(highest) = missing.last() else {
        return Ok(());
    };
    let above = highest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for d in missing.iter().copied().chain([above]) {
        storage
            .sync_dir(d)
            .map_err(Error::io_with(|| format!("syncing {}", d.display())))?;
    }
    Ok(())
}

/// Copies live `segment` into `archive`, returning its manifest entry.
fn copy_out(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    segment: &Segment,
    archive: &Path,
    location: &str,
) -> Result<ArchivedSegment> {
    let state = segment.snapshot();
    let from = segment_path(dir, segment.id);
    let (len, file_hash) = files::copy(storage, &from, archive, &segment.id.file_name(), None)?;
    Ok(ArchivedSegment {
        segment: segment.id,
        first: segment.first_position,
        last: state.last_position,
        len,
        file_hash,
        prev_hash: segment.prev_hash,
        last_hash: state.last_hash,
        location: location.to_string(),
    })
}

fn moved_segment(segment: &Segment) -> Result<MovedSegment> {
    Ok(MovedSegment {
        segment: segment.id.file_name(),
        first: segment.first_position.0,
        last: segment.snapshot().last_position.0,
        bytes: plan::file_len(segment)?,
    })
}

/// The outcome of `request` with `manifest` as it now stands.
fn outcome(
    request: &ArchiveRequest,
    manifest: &Manifest,
    segments: Vec<MovedSegment>,
    dry_run: bool,
) -> ArchiveOutcome {
    let mut last_archived = manifest.boundary().map_or(0, |(_, p, _)| p.0);
    if dry_run {
        last_archived = segments.last().map_or(last_archived, |s| s.last);
    }
    ArchiveOutcome {
        dry_run,
        bytes: segments.iter().map(|s| s.bytes).sum(),
        segments,
        first_live: last_archived + 1,
        last_archived,
        archive: absolute(&request.to),
    }
}

/// `path` made absolute against the working directory, as the manifest records it.
fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
