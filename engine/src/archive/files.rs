//! Archived segment files: copied between the live log and an archive directory through the
//! storage seam (hashed on the way, synced, renamed into place), hashed again to check them,
//! and opened as sealed segments of the log when the archive is attached.

use std::path::Path;
use std::sync::Arc;

use journal_format::{SegmentHeader, SegmentId, SEGMENT_HEADER_LEN};

use crate::archive::manifest::ArchivedSegment;
use crate::error::{Error, Result};
use crate::log::recovery::{check_continues, sealed_segment};
use crate::log::segment::{read_footer, Segment};
use crate::log::Head;
use crate::storage::{OpenMode, Storage, StorageFile};

/// How much of a file is copied or hashed at a time.
const CHUNK: usize = 1 << 20;

/// Copies `from` to `dir/name` durably: written to `name.part`, synced, renamed over `name`,
/// the directory synced. Returns the file's length and BLAKE3 hash, computed from the bytes
/// read; a `name.part` an earlier failure left is replaced. With `expect`, bytes whose hash
/// differs are refused before the rename (the `.part` file removed).
pub(crate) fn copy(
    storage: &dyn Storage,
    from: &Path,
    dir: &Path,
    name: &str,
    expect: Option<[u8; 32]>,
) -> Result<(u64, [u8; 32])> {
    let shown = |p: &Path| p.display().to_string();
    let source = storage
        .open(from, OpenMode::Read)
        .map_err(Error::io_with(|| format!("opening {}", shown(from))))?;
    let part = dir.join(format!("{name}.part"));
    if storage.exists(&part) {
        storage.remove_file(&part).map_err(Error::io_with(|| {
            format!("removing the stale {}", shown(&part))
        }))?;
    }
    let target = storage
        .open(&part, OpenMode::CreateNew)
        .map_err(Error::io_with(|| format!("creating {}", shown(&part))))?;
    let (len, hash) = stream(&*source, from, &mut |bytes, offset| {
        target
            .write_all_at(bytes, offset)
            .map_err(Error::io_with(|| format!("writing {}", shown(&part))))
    })?;
    target
        .sync_data()
        .map_err(Error::io_with(|| format!("syncing {}", shown(&part))))?;
    drop(target);
    if expect.is_some_and(|e| e != hash) {
        let _ = storage.remove_file(&part);
        return Err(Error::Corruption {
            segment: SegmentId::from_file_name(name).unwrap_or(SegmentId(0)),
            offset: 0,
            position: None,
            detail: format!(
                "{} does not have the BLAKE3 hash the archive manifest records",
                from.display()
            ),
        });
    }
    let path = dir.join(name);
    storage.rename(&part, &path).map_err(Error::io_with(|| {
        format!("renaming {} into place", shown(&part))
    }))?;
    storage
        .sync_dir(dir)
        .map_err(Error::io_with(|| format!("syncing {}", shown(dir))))?;
    Ok((len, hash))
}

/// The length and BLAKE3 hash of the file at `path`.
pub(crate) fn hash(storage: &dyn Storage, path: &Path) -> Result<(u64, [u8; 32])> {
    let file = storage
        .open(path, OpenMode::Read)
        .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
    stream(&*file, path, &mut |_, _| Ok(()))
}

/// Reads `file` from start to end a chunk at a time, handing each chunk and its offset to
/// `each`; returns the length read and its BLAKE3 hash.
fn stream(
    file: &dyn StorageFile,
    path: &Path,
    each: &mut dyn FnMut(&[u8], u64) -> Result<()>,
) -> Result<(u64, [u8; 32])> {
    let len = file.len().map_err(Error::io_with(|| {
        format!("reading the length of {}", path.display())
    }))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0;
    while offset < len {
        let n = usize::try_from((len - offset).min(CHUNK as u64)).unwrap_or(CHUNK);
        let chunk = buf.get_mut(..n).unwrap_or_default();
        file.read_exact_at(chunk, offset)
            .map_err(Error::io_with(|| format!("reading {}", path.display())))?;
        hasher.update(chunk);
        each(chunk, offset)?;
        offset += n as u64;
    }
    Ok((len, *hasher.finalize().as_bytes()))
}

/// Opens archived segment `entry` from `archive` as a sealed segment continuing `prev`: its
/// length, header and footer must be what the manifest records (its bytes are hashed by
/// `verify`, not here).
///
/// # Errors
/// [`Error::Corruption`] naming the segment and its positions when the file is missing or is
/// not the segment the manifest lists; an I/O error.
pub(crate) fn open_archived(
    storage: &dyn Storage,
    archive: &Path,
    entry: &ArchivedSegment,
    prev: Head,
) -> Result<Arc<Segment>> {
    let id = entry.segment;
    let path = archive.join(id.file_name());
    let wrong = |detail: String| Error::Corruption {
        segment: id,
        offset: 0,
        position: Some(entry.first),
        detail: format!(
            "archived segment (positions {}..={}) in {}: {detail}",
            entry.first,
            entry.last,
            archive.display()
        ),
    };
    let file = storage
        .open(&path, OpenMode::Read)
        .map_err(|e| wrong(format!("cannot open {}: {e}", path.display())))?;
    let len = file
        .len()
        .map_err(|e| wrong(format!("cannot read its length: {e}")))?;
    if len != entry.len {
        return Err(wrong(format!(
            "it is {len} bytes long but the manifest records {}",
            entry.len
        )));
    }
    let header = read_header(&*file, id).map_err(wrong)?;
    check_continues(id, &header, prev).map_err(|d| wrong(d.detail))?;
    let footer = read_footer(&*file, len).map_err(|e| wrong(format!("footer: {e}")))?;
    if footer.last_position != entry.last || footer.last_hash != entry.last_hash {
        return Err(wrong(format!(
            "its footer ends at position {} with link {}, the manifest at {} with {}",
            footer.last_position, footer.last_hash, entry.last, entry.last_hash
        )));
    }
    let segment = sealed_segment(id, &header, file, footer).map_err(|d| wrong(d.detail))?;
    Ok(Arc::new(segment))
}

fn read_header(
    file: &dyn StorageFile,
    id: SegmentId,
) -> std::result::Result<SegmentHeader, String> {
    let mut bytes = [0u8; SEGMENT_HEADER_LEN];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("cannot read the header of {id}: {e}"))?;
    SegmentHeader::decode(&bytes).map_err(|e| format!("header: {e}"))
}
