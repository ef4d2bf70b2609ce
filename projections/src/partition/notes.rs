//! Where each partition's frames are in the log, noted by a build's first pass in scratch files
//! (one per later partition), so that each later pass reads its own frames alone
//! ([`journal_engine::FrameReader`]) instead of stepping through every frame of the log again.
//!
//! A note is [`NOTE_BYTES`] bytes: the event's position, its frame's segment and offset (`u64`
//! each, little-endian) and the frame's length (`u32`). The notes sit on disk, not in memory:
//! 28 bytes per event, each written once and read once (31 MB for 1,121,660 events, mostly in
//! the page cache while the build runs). The files are unnamed (`tempfile::tempfile_in`): they
//! go with the build, or with the process when it dies, and nothing is left to clean up.
//!
//! **Invariant:** a partition's notes are in log order, each naming the frame of the event at
//! its position; [`journal_engine::FrameReader::read`] checks that the frame there holds that
//! position, so a note that does not is refused, never read as another event.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use journal_engine::FrameAt;
use journal_format::{Position, SegmentId};

use crate::worker::WorkerError;

/// The bytes of one note: position, segment, offset, length.
pub const NOTE_BYTES: usize = 28;
const _: () = assert!(NOTE_BYTES == 8 + 8 + 8 + 4);

/// The most partitions whose frames are noted (a scratch file each, held open through the
/// first pass); a build with more steps through the log in each pass instead.
pub const NOTED_PARTITIONS_MAX: u64 = 256;

/// The write buffer of each partition's file.
const BUFFER_BYTES: usize = 16 * 1024;

/// The notes of partitions `1..partitions` (the first pass applies partition 0 itself).
#[derive(Debug)]
pub struct Notes {
    dir: PathBuf,
    /// Partition `p`'s file at `p - 1`; taken when its pass reads it.
    files: Vec<Option<BufWriter<File>>>,
}

impl Notes {
    /// Empty notes for partitions `1..partitions`, their files in `dir`.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when a file cannot be created.
    pub fn create(dir: &Path, partitions: u64) -> Result<Notes, WorkerError> {
        let mut files = Vec::new();
        for _ in 1..partitions {
            let file = tempfile::tempfile_in(dir).map_err(scratch(dir, "creating a file"))?;
            files.push(Some(BufWriter::with_capacity(BUFFER_BYTES, file)));
        }
        Ok(Notes {
            dir: dir.to_path_buf(),
            files,
        })
    }

    /// Notes that the event at `position`, of `partition`, is in the frame at `at`.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when the write fails or `partition` has no file (0, out of
    /// range, or already read).
    pub fn note(
        &mut self,
        partition: u64,
        position: Position,
        at: FrameAt,
    ) -> Result<(), WorkerError> {
        let Some(Some(file)) = slot(&mut self.files, partition) else {
            return Err(missing(&self.dir, partition));
        };
        let written = file
            .write_all(&position.0.to_le_bytes())
            .and_then(|()| file.write_all(&at.segment.0.to_le_bytes()))
            .and_then(|()| file.write_all(&at.offset.to_le_bytes()))
            .and_then(|()| file.write_all(&at.len.to_le_bytes()));
        written.map_err(scratch(&self.dir, "writing a note"))
    }

    /// Writes out what every partition's file still buffers, so that a failure to write (a
    /// full disk) shows now, when the first pass ends, rather than when a later pass reads.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when a write fails.
    pub fn flush(&mut self) -> Result<(), WorkerError> {
        for file in self.files.iter_mut().flatten() {
            file.flush()
                .map_err(scratch(&self.dir, "writing the notes out"))?;
        }
        Ok(())
    }

    /// Hands partition `partition`'s notes to `f` in the order they were noted, then deletes
    /// them; stops early when `f` returns `false`.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when reading fails, the file ends inside a note, or
    /// `partition` has no file; `f`'s error.
    pub fn read(
        &mut self,
        partition: u64,
        mut f: impl FnMut(Position, FrameAt) -> Result<bool, WorkerError>,
    ) -> Result<(), WorkerError> {
        let Some(writer) = slot(&mut self.files, partition).and_then(Option::take) else {
            return Err(missing(&self.dir, partition));
        };
        let dir = &self.dir;
        let mut file = writer
            .into_inner()
            .map_err(|e| scratch(dir, "flushing the notes")(e.into_error()))?;
        file.rewind()
            .map_err(scratch(dir, "going back to the first note"))?;
        let mut reader = BufReader::with_capacity(BUFFER_BYTES, file);
        loop {
            let more = reader
                .fill_buf()
                .map_err(scratch(dir, "reading the notes"))?;
            if more.is_empty() {
                return Ok(());
            }
            // A note in one read (a read of each field cost about 70 instructions).
            let mut note = [0u8; NOTE_BYTES];
            reader
                .read_exact(&mut note)
                .map_err(scratch(dir, "reading a note (the notes end inside one?)"))?;
            let (position, at) = parse(&note);
            if !f(position, at)? {
                return Ok(());
            }
        }
    }
}

/// A note's fields: position, segment, offset (`u64` each) and length (`u32`), little-endian.
fn parse(note: &[u8; NOTE_BYTES]) -> (Position, FrameAt) {
    let [p0, p1, p2, p3, p4, p5, p6, p7, s0, s1, s2, s3, s4, s5, s6, s7, o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3] =
        *note;
    let position = Position(u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7]));
    let at = FrameAt {
        segment: SegmentId(u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7])),
        offset: u64::from_le_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        len: u32::from_le_bytes([l0, l1, l2, l3]),
    };
    (position, at)
}

/// Partition `partition`'s file, while it is being written.
fn slot(
    files: &mut [Option<BufWriter<File>>],
    partition: u64,
) -> Option<&mut Option<BufWriter<File>>> {
    usize::try_from(partition)
        .ok()
        .and_then(|p| p.checked_sub(1))
        .and_then(|i| files.get_mut(i))
}

fn scratch<'a>(dir: &'a Path, context: &'a str) -> impl FnOnce(io::Error) -> WorkerError + 'a {
    move |source| WorkerError::Scratch {
        dir: dir.to_path_buf(),
        context: context.to_string(),
        source,
    }
}

fn missing(dir: &Path, partition: u64) -> WorkerError {
    WorkerError::Scratch {
        dir: dir.to_path_buf(),
        context: format!("partition {partition} has no notes (the first pass applies partition 0; each other partition's notes are read once)"),
        source: io::Error::from(io::ErrorKind::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: u64) -> FrameAt {
        FrameAt {
            segment: SegmentId(i / 10),
            offset: i * 600,
            len: 600 + u32::try_from(i).unwrap(),
        }
    }

    fn read_all(
        notes: &mut Notes,
        partition: u64,
    ) -> Result<Vec<(Position, FrameAt)>, WorkerError> {
        let mut read = Vec::new();
        notes.read(partition, |position, at| {
            read.push((position, at));
            Ok(true)
        })?;
        Ok(read)
    }

    #[test]
    fn each_partition_reads_back_its_own_notes_in_order_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 4).unwrap();
        for i in 1..=5000u64 {
            let partition = i % 4;
            if partition > 0 {
                notes.note(partition, Position(i), at(i)).unwrap();
            }
        }
        // Unnamed: nothing shows in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        for partition in [2, 1, 3] {
            let expected: Vec<_> = (1..=5000u64)
                .filter(|i| i % 4 == partition)
                .map(|i| (Position(i), at(i)))
                .collect();
            assert_eq!(read_all(&mut notes, partition).unwrap(), expected);
        }
        for partition in [0, 1, 4] {
            let error = read_all(&mut notes, partition).unwrap_err().to_string();
            assert!(
                error.contains(&format!("partition {partition} has no notes")),
                "{error}"
            );
        }
        let error = notes.note(0, Position(1), at(1)).unwrap_err().to_string();
        assert!(error.contains("partition 0 has no notes"), "{error}");
    }

    #[test]
    fn a_reader_that_stops_early_stops_and_notes_that_end_inside_one_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 3).unwrap();
        for i in 1..=10 {
            notes.note(1, Position(i), at(i)).unwrap();
            notes.note(2, Position(i), at(i)).unwrap();
        }
        let mut seen = 0;
        notes
            .read(1, |_, _| {
                seen += 1;
                Ok(seen < 3)
            })
            .unwrap();
        assert_eq!(seen, 3);
        // Partition 2's file loses the end of its last note.
        if let Some(Some(file)) = slot(&mut notes.files, 2) {
            file.flush().unwrap();
            let len = u64::try_from(10 * NOTE_BYTES - 5).unwrap();
            file.get_ref().set_len(len).unwrap();
        }
        let mut seen = 0;
        let error = notes
            .read(2, |_, _| {
                seen += 1;
                Ok(true)
            })
            .unwrap_err()
            .to_string();
        assert_eq!(seen, 9);
        assert!(error.contains("end inside one"), "{error}");
    }
}
