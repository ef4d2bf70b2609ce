//! `Journal::restore`: the newest archived segments, from the one asked for on (or all),
//! brought back into the live log, each checked against the manifest's hash before it is
//! renamed into `segments/`, then the manifest replaced without them. The archive's copies are
//! kept.

use std::path::Path;
use std::sync::Arc;

use journal_format::Position;

use crate::archive::manifest::{self, ArchivedSegment, Manifest};
use crate::archive::{boundary, files, open_all, ArchiveOutcome, MovedSegment};
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::log::segment::{segment_path, SEGMENTS_DIR};
use crate::log::{Head, Segment};

impl Journal {
    /// Brings archived segments back from `from` into the live log: all of them, or (with
    /// `after`) those holding positions at or after it, which keeps the live log continuous.
    /// Each file's BLAKE3 hash is checked against the manifest before it is renamed into
    /// `segments/`; then the manifest is replaced without them. A crash before the manifest
    /// step leaves them archived (open removes the live copies).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when nothing is archived; [`Error::Corruption`] naming the
    /// segment whose file is missing or does not hash as recorded (nothing is restored then);
    /// an I/O error.
    pub fn restore(&self, from: &Path, after: Option<Position>) -> Result<ArchiveOutcome> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let _one_at_a_time = self.archiving();
        let storage = Arc::clone(&self.options().storage);
        let mut manifest = manifest::read(&*storage, self.dir())?;
        if manifest.segments.is_empty() {
            return Err(Error::InvalidInput(
                "nothing is archived: the journal has no archive manifest entries".into(),
            ));
        }
        let keep = after.map_or(0, |p| manifest.segments.partition_point(|s| s.last < p));
        let back: Vec<ArchivedSegment> = manifest.segments.split_off(keep);
        let seg_dir = self.dir().join(SEGMENTS_DIR);
        // 1. Each file copied into `segments/` (checked against its hash, synced, renamed);
        // on a refusal, the copies made so far are removed again.
        for (copied, entry) in back.iter().enumerate() {
            let name = entry.segment.file_name();
            let source = from.join(&name);
            let done = match storage.exists(&source) {
                false => Err(missing(entry, from)),
                true => files::copy(&*storage, &source, &seg_dir, &name, Some(entry.file_hash)),
            };
            if let Err(e) = done {
                for undone in back.iter().take(copied) {
                    let path = segment_path(self.dir(), undone.segment);
                    if let Err(e) = storage.remove_file(&path) {
                        tracing::error!(error = %e, path = %path.display(), "removing a restored copy after a refusal failed; the next open removes it");
                    }
                }
                return Err(e);
            }
        }
        // 2. The manifest no longer lists them: they are live.
        manifest::write(&*storage, self.dir(), &manifest)?;
        self.remap_restored(&manifest, &back)?;
        let segments = back
            .iter()
            .map(|s| MovedSegment {
                segment: s.segment.file_name(),
                first: s.first.0,
                last: s.last.0,
                bytes: s.len,
            })
            .collect::<Vec<_>>();
        let last_archived = manifest.boundary().map_or(0, |(_, p, _)| p.0);
        Ok(ArchiveOutcome {
            dry_run: false,
            bytes: segments.iter().map(|s| s.bytes).sum(),
            segments,
            first_live: last_archived + 1,
            last_archived,
            archive: from.display().to_string(),
        })
    }

    /// The map after `back` were restored: opened from `segments/`, in place of their archived
    /// copies when the archive is attached, else in front of the live segments.
    fn remap_restored(&self, manifest: &Manifest, back: &[ArchivedSegment]) -> Result<()> {
        let storage = &*self.options().storage;
        let seg_dir = self.dir().join(SEGMENTS_DIR);
        let mut opened: Vec<Arc<Segment>> = Vec::with_capacity(back.len());
        let mut prev = manifest
            .boundary()
            .map_or(Head::default(), |(_, position, hash)| Head {
                position,
                hash,
            });
        for entry in back {
            opened.push(files::open_archived(storage, &seg_dir, entry, prev)?);
            prev = Head {
                position: entry.last,
                hash: entry.last_hash,
            };
        }
        let log = self.log();
        let kept = manifest.segments.len();
        match self.options().archive.as_deref() {
            Some(archive) => {
                let mut all = open_all(storage, archive, &manifest.segments)?;
                all.extend(opened);
                log.splice(0..kept + back.len(), all);
            }
            None => log.splice(0..0, opened),
        }
        log.set_boundary(boundary(manifest, self.options().archive.is_some()));
        Ok(())
    }
}

/// The error for an archived segment whose file is not in `from`.
fn missing(entry: &ArchivedSegment, from: &Path) -> Error {
    Error::Corruption {
        segment: entry.segment,
        offset: 0,
        position: Some(entry.first),
        detail: format!(
            "archived segment (positions {}..={}) is not in {}",
            entry.first,
            entry.last,
            from.display()
        ),
    }
}
