//! The archive as `verify` sees it: where the walk starts (position 1 when the archive is
//! attached, else after the boundary, from the link the manifest records), and, attached,
//! every archived file hashed against the manifest. A missing, altered or swapped file is a
//! problem naming its segment and first position.

use journal_format::{ChainHash, Position};

use crate::archive::files;
use crate::archive::manifest::{self, Manifest};
use crate::error::Result;
use crate::journal::Journal;
use crate::verify::report::{ArchiveCheck, Problems};

/// The journal's manifest and whether its archive is attached.
pub(super) struct ArchiveSide {
    manifest: Manifest,
    pub attached: bool,
}

impl ArchiveSide {
    /// The archive side of `journal`, when it has archived segments.
    pub fn of(journal: &Journal) -> Result<Option<ArchiveSide>> {
        let manifest = manifest::read(&*journal.options().storage, journal.dir())?;
        if manifest.segments.is_empty() {
            return Ok(None);
        }
        let attached = journal.options().archive.is_some();
        Ok(Some(ArchiveSide { manifest, attached }))
    }

    /// Where the walk starts: position 1 when attached, else after the boundary.
    pub fn start(&self) -> (Position, ChainHash) {
        match (self.attached, self.manifest.boundary()) {
            (false, Some((_, last, hash))) => (last.next(), hash),
            _ => (Position::FIRST, ChainHash::GENESIS),
        }
    }

    /// Attached, hashes every archived file against the manifest; says what was checked.
    pub fn check(self, journal: &Journal, problems: &mut Problems) -> Result<ArchiveCheck> {
        let last = self.manifest.boundary().map_or(0, |(_, p, _)| p.0);
        let archive = journal
            .options()
            .archive
            .as_deref()
            .filter(|_| self.attached);
        let Some(archive) = archive else {
            let locations = locations(&self.manifest);
            return Ok(ArchiveCheck {
                segments: self.manifest.segments.len(),
                last_archived: last,
                attached: false,
                verified_from: last + 1,
                note: format!(
                    "positions 1..={last} are archived in {locations} and were not checked: the live log was verified from position {} on, from the link the manifest records; the index and the Merkle tree were not compared (attach the archive with --archive to check it all)",
                    last + 1
                ),
            });
        };
        let storage = &*journal.options().storage;
        for entry in &self.manifest.segments {
            let path = archive.join(entry.segment.file_name());
            let (kind, detail) = match files::hash(storage, &path) {
                Err(e) => ("archive_missing", format!("cannot read {}: {e}", path.display())),
                Ok((len, hash)) if len != entry.len || hash != entry.file_hash => (
                    "archive_mismatch",
                    format!(
                        "{} ({len} bytes) does not have the length ({}) and BLAKE3 hash the manifest records for positions {}..={}",
                        path.display(),
                        entry.len,
                        entry.first,
                        entry.last
                    ),
                ),
                Ok(_) => continue,
            };
            problems.problem(kind, Some(entry.segment), None, Some(entry.first), detail);
        }
        Ok(ArchiveCheck {
            segments: self.manifest.segments.len(),
            last_archived: last,
            attached: true,
            verified_from: 1,
            note: format!(
                "the archive in {} was attached: its {} files were hashed against the manifest and walked with the live log from position 1",
                archive.display(),
                self.manifest.segments.len()
            ),
        })
    }
}

/// The manifest's archive locations, joined.
fn locations(manifest: &Manifest) -> String {
    let mut all: Vec<&str> = Vec::new();
    for s in &manifest.segments {
        if !all.contains(&s.location.as_str()) {
            all.push(&s.location);
        }
    }
    all.join(", ")
}
