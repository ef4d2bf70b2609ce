//! Where each partition's frames are in the log, noted by a build's first pass in scratch files
//! (one per later partition), with a copy of each frame while the copies stay within
//! [`super::Scratch::copy_bytes_max`], so that each later pass reads its own frames alone, in one sequential
//! read of its file, instead of stepping through every frame of the log again.
//!
//! A note is [`NOTE_BYTES`] bytes: the event's position, its frame's segment and offset (`u64`
//! each, little-endian), the frame's length (`u32`) and whether the frame's bytes follow (a
//! byte, 1 or 0). A copied frame is checked again when it is read back
//! ([`journal_engine::Record::from_frame`]: its checksums, position and length), and a copy
//! that fails is a scratch error, not the log's corruption. A frame not copied is read from the
//! log ([`journal_engine::FrameReader`], with a read-ahead): for a partition among many, each
//! read-ahead copies mostly other partitions' frames, so that each later pass copied nearly the
//! whole log out of the page cache (12 passes over 377 MB for 1,121,660 events; with the copies,
//! the log is read once and the copies written and read once, `docs/PERFORMANCE.md`). The
//! files are unnamed (`tempfile::tempfile_in`): they go with the build, or with the process
//! when it dies, and nothing is left to clean up.
//!
//! **Invariant:** a partition's notes are in log order, each naming the frame of the event at
//! its position; [`journal_engine::Record::from_frame`] and [`journal_engine::FrameReader::read`]
//! check that the frame holds that position, so a note that does not is refused, never read as
//! another event.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use journal_engine::{FrameAt, Record};
use journal_format::{Location, Position, SegmentId, FRAME_BODY_LEN_MAX, FRAME_HEADER_LEN};

use crate::worker_error::WorkerError;

/// The bytes of one note: position, segment, offset, length, and whether the frame follows.
pub const NOTE_BYTES: usize = 29;
const _: () = assert!(NOTE_BYTES == 8 + 8 + 8 + 4 + 1);

/// The most partitions whose frames are noted (a scratch file each, held open through the
/// first pass); a build with more steps through the log in each pass instead.
pub const NOTED_PARTITIONS_MAX: u64 = 256;

/// The write buffers of all partitions' files together: each file's is its share, within
/// [`BUFFER_BYTES_MIN`] and [`BUFFER_BYTES_MAX`], so that they take a few MiB whatever the
/// number of partitions.
const BUFFERS_BYTES: usize = 4 << 20;

/// The least write buffer of a partition's file.
const BUFFER_BYTES_MIN: usize = 16 * 1024;

/// The largest buffer of a partition's file, and the read buffer of the one a pass reads. The
/// copies go through these buffers: larger ones make fewer system calls, and the rebuild's
/// system time falls with them up to this size.
const BUFFER_BYTES_MAX: usize = 256 * 1024;

/// One note, as a later pass reads it back.
pub enum Note<'a> {
    /// The frame, copied: checked, to be applied as the log's.
    Copied(Record<'a>),
    /// Where the frame of the event at this position is in the log.
    At(Position, FrameAt),
}

/// The notes of partitions `1..partitions` (the first pass applies partition 0 itself).
#[derive(Debug)]
pub struct Notes {
    dir: PathBuf,
    /// Partition `p`'s file at `p - 1`; taken when its pass reads it.
    files: Vec<Option<BufWriter<File>>>,
    /// The frames' bytes copied so far, all partitions together.
    copied: u64,
    /// The limit on them ([`super::Scratch::copy_bytes_max`]).
    copy_max: u64,
}

impl Notes {
    /// Empty notes for partitions `1..partitions`, their files in `dir`, copying frames up to
    /// `copy_max` bytes in all.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when a file cannot be created.
    pub fn create(dir: &Path, partitions: u64, copy_max: u64) -> Result<Notes, WorkerError> {
        let mut files = Vec::new();
        let share = usize::try_from(partitions.saturating_sub(1))
            .map_or(0, |files| BUFFERS_BYTES / files.max(1));
        let buffer = share.clamp(BUFFER_BYTES_MIN, BUFFER_BYTES_MAX);
        for _ in 1..partitions {
            let file = tempfile::tempfile_in(dir).map_err(scratch(dir, "creating a file"))?;
            files.push(Some(BufWriter::with_capacity(buffer, file)));
        }
        Ok(Notes {
            dir: dir.to_path_buf(),
            files,
            copied: 0,
            copy_max,
        })
    }

    /// Notes that `record`'s event belongs to `partition`, with a copy of its frame while the
    /// copies stay within their limit.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when the write fails or `partition` has no file (0, out of
    /// range, or already read).
    pub fn note(&mut self, partition: u64, record: &Record<'_>) -> Result<(), WorkerError> {
        let at = record.location();
        let frame = Some(record.frame)
            .filter(|frame| self.copied.saturating_add(frame.len() as u64) <= self.copy_max);
        if frame.is_none() {
            // The first frame past the limit ends the copies: the frames after it, smaller
            // ones too, are noted by their place.
            self.copy_max = self.copied;
        }
        let Some(Some(file)) = slot(&mut self.files, partition) else {
            return Err(missing(&self.dir, partition));
        };
        let fields = record
            .position
            .0
            .to_le_bytes()
            .into_iter()
            .chain(at.location.segment.0.to_le_bytes())
            .chain(at.location.offset.to_le_bytes())
            .chain(at.len.to_le_bytes())
            .chain([u8::from(frame.is_some())]);
        let mut note = [0u8; NOTE_BYTES];
        for (slot, byte) in note.iter_mut().zip(fields) {
            *slot = byte;
        }
        let written = file
            .write_all(&note)
            .and_then(|()| frame.map_or(Ok(()), |frame| file.write_all(frame)));
        written.map_err(scratch(&self.dir, "writing a note"))?;
        if let Some(frame) = frame {
            self.copied += frame.len() as u64;
        }
        Ok(())
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

    /// Hands partition `partition`'s notes to `f` in the order they were noted, each copied
    /// frame checked, then deletes them; stops early when `f` returns `false`.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when reading fails, the file ends inside a note, a note gives
    /// a length no frame has, a copied frame fails its check, or `partition` has no file; `f`'s
    /// error.
    pub fn read(
        &mut self,
        partition: u64,
        mut f: impl FnMut(Note<'_>) -> Result<bool, WorkerError>,
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
        let mut reader = BufReader::with_capacity(BUFFER_BYTES_MAX, file);
        let mut frame = Vec::new();
        loop {
            let more = reader
                .fill_buf()
                .map_err(scratch(dir, "reading the notes"))?;
            if more.is_empty() {
                return Ok(());
            }
            // A note in one read, not a read per field.
            let mut note = [0u8; NOTE_BYTES];
            reader
                .read_exact(&mut note)
                .map_err(scratch(dir, "reading a note (the notes end inside one?)"))?;
            let (position, at, copied) = parse(&note);
            let Some(copied) = copied else {
                return Err(invalid(
                    dir,
                    format!("the note of position {position} says neither copied nor not"),
                ));
            };
            let more = if copied {
                let len = at.len as usize;
                if len < FRAME_HEADER_LEN || at.len > FRAME_HEADER_LEN as u32 + FRAME_BODY_LEN_MAX {
                    return Err(invalid(
                        dir,
                        format!("the note of position {position} gives a frame of {len} bytes"),
                    ));
                }
                frame.resize(len, 0);
                reader.read_exact(&mut frame).map_err(scratch(
                    dir,
                    "reading a copied frame (the notes end inside one?)",
                ))?;
                let record = Record::from_frame(&frame, at, position).map_err(|e| match e {
                    // What failed, naming the copy (`from_frame` never blames the log).
                    journal_engine::Error::InvalidInput(what) => invalid(dir, what),
                    other => invalid(dir, other.to_string()),
                })?;
                f(Note::Copied(record))?
            } else {
                f(Note::At(position, at))?
            };
            if !more {
                return Ok(());
            }
        }
    }
}

/// A note's fields: position, segment, offset (`u64` each), length (`u32`), little-endian, and
/// whether the frame follows (1, or 0; `None` for any other byte).
fn parse(note: &[u8; NOTE_BYTES]) -> (Position, FrameAt, Option<bool>) {
    let [p0, p1, p2, p3, p4, p5, p6, p7, s0, s1, s2, s3, s4, s5, s6, s7, o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3, copied] =
        *note;
    let position = Position(u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7]));
    let at = FrameAt {
        location: Location::new(
            SegmentId(u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7])),
            u64::from_le_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        ),
        len: u32::from_le_bytes([l0, l1, l2, l3]),
    };
    let copied = match copied {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    };
    (position, at, copied)
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

/// A scratch error for notes whose bytes are not what was written.
fn invalid(dir: &Path, context: String) -> WorkerError {
    WorkerError::Scratch {
        dir: dir.to_path_buf(),
        context,
        source: io::Error::from(io::ErrorKind::InvalidData),
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
    use journal_format::frame::encode_frame;
    use journal_format::{ChainHash, FrameMeta};

    /// The frame of event `i`: a body of its own length, in segment `i / 10`.
    fn frame(i: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let meta = FrameMeta {
            position: Position(i),
            recorded_at_ns: i64::try_from(i).unwrap() * 1_000,
            stream_version: i,
            flags: journal_format::FrameFlags::default(),
        };
        let body = vec![u8::try_from(i % 251).unwrap(); 20 + usize::try_from(i % 90).unwrap()];
        encode_frame(&mut out, &ChainHash([7; 32]), &meta, &body).unwrap();
        out
    }

    fn at(i: u64, frame: &[u8]) -> FrameAt {
        FrameAt {
            location: Location::new(SegmentId(i / 10), i * 600),
            len: u32::try_from(frame.len()).unwrap(),
        }
    }

    /// What a note gives back: the position, the place, and the copied frame's bytes and body.
    type Read = (Position, FrameAt, Option<(Vec<u8>, Vec<u8>)>);

    fn note(notes: &mut Notes, partition: u64, i: u64) -> Result<(), WorkerError> {
        let bytes = frame(i);
        let record = Record::from_frame(&bytes, at(i, &bytes), Position(i)).unwrap();
        notes.note(partition, &record)
    }

    fn expected(i: u64, copied: bool) -> Read {
        let bytes = frame(i);
        let body = bytes[FRAME_HEADER_LEN..].to_vec();
        (Position(i), at(i, &bytes), copied.then_some((bytes, body)))
    }

    fn read_all(notes: &mut Notes, partition: u64) -> Result<Vec<Read>, WorkerError> {
        let mut read = Vec::new();
        notes.read(partition, |note| {
            read.push(match note {
                Note::Copied(record) => (
                    record.position,
                    record.location(),
                    Some((record.frame.to_vec(), record.body.to_vec())),
                ),
                Note::At(position, at) => (position, at, None),
            });
            Ok(true)
        })?;
        Ok(read)
    }

    /// Partition `partition`'s file, its buffer written out, to damage in place.
    fn flushed(notes: &mut Notes, partition: u64) -> &File {
        let Some(Some(file)) = slot(&mut notes.files, partition) else {
            panic!("partition {partition} has no file");
        };
        file.flush().unwrap();
        file.get_ref()
    }

    /// How many notes `partition` gives before its read fails, and the error.
    fn read_failing(notes: &mut Notes, partition: u64) -> (usize, String) {
        let mut seen = 0;
        let error = notes
            .read(partition, |_| {
                seen += 1;
                Ok(true)
            })
            .unwrap_err()
            .to_string();
        (seen, error)
    }

    #[test]
    fn each_partition_reads_back_its_own_notes_and_frames_in_order_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 4, u64::MAX).unwrap();
        for i in 1..=5000u64 {
            let partition = i % 4;
            if partition > 0 {
                note(&mut notes, partition, i).unwrap();
            }
        }
        // Unnamed: nothing shows in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        for partition in [2, 1, 3] {
            let expected: Vec<_> = (1..=5000u64)
                .filter(|i| i % 4 == partition)
                .map(|i| expected(i, true))
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
        let error = note(&mut notes, 0, 1).unwrap_err().to_string();
        assert!(error.contains("partition 0 has no notes"), "{error}");
    }

    #[test]
    fn past_the_most_bytes_to_copy_frames_are_noted_by_their_place_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 3, u64::MAX).unwrap();
        // Room for the frames of events 1 to 10, all partitions together, and for event 91's,
        // smaller than 11's: the first frame that does not fit ends the copies, so 91's is not
        // copied either.
        let room: u64 = (1..=10).map(|i| frame(i).len() as u64).sum();
        assert!(frame(91).len() < frame(11).len());
        notes.copy_max = room + frame(91).len() as u64;
        let events: Vec<u64> = (1..=30).chain([91]).collect();
        for &i in &events {
            note(&mut notes, 1 + i % 2, i).unwrap();
        }
        assert_eq!(notes.copied, room);
        for partition in [1, 2] {
            let expected: Vec<_> = events
                .iter()
                .filter(|&&i| 1 + i % 2 == partition)
                .map(|&i| expected(i, i <= 10))
                .collect();
            assert_eq!(read_all(&mut notes, partition).unwrap(), expected);
        }
    }

    #[test]
    fn a_note_whose_copied_byte_is_neither_0_nor_1_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 2, 0).unwrap();
        for i in 1..=3 {
            note(&mut notes, 1, i).unwrap();
        }
        // The second note's last byte says whether a frame follows.
        let at = u64::try_from(2 * NOTE_BYTES - 1).unwrap();
        std::os::unix::fs::FileExt::write_all_at(flushed(&mut notes, 1), &[2], at).unwrap();
        let (seen, error) = read_failing(&mut notes, 1);
        assert_eq!(seen, 1);
        assert!(
            error.contains("the note of position 2 says neither copied nor not"),
            "{error}"
        );
    }

    #[test]
    fn a_copy_that_fails_its_check_is_refused_naming_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 2, u64::MAX).unwrap();
        for i in 1..=3 {
            note(&mut notes, 1, i).unwrap();
        }
        // The last byte of the file is the last byte of event 3's body.
        let file = flushed(&mut notes, 1);
        let end = file.metadata().unwrap().len();
        let mut bytes = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, end - 1).unwrap();
        bytes[0] ^= 0x40;
        std::os::unix::fs::FileExt::write_all_at(file, &bytes, end - 1).unwrap();
        let mut seen = Vec::new();
        let error = notes
            .read(1, |note| {
                if let Note::Copied(record) = note {
                    seen.push(record.position.0);
                }
                Ok(true)
            })
            .unwrap_err()
            .to_string();
        assert_eq!(seen, [1, 2]);
        assert!(
            error.contains("the copy of the frame of position 3 (segment 00000000000000000000.seg at 1800) fails its check: body checksum mismatch"),
            "{error}"
        );
    }

    #[test]
    fn a_reader_that_stops_early_stops_and_notes_that_end_inside_one_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Notes::create(dir.path(), 4, u64::MAX).unwrap();
        for i in 1..=10 {
            note(&mut notes, 1, i).unwrap();
            note(&mut notes, 2, i).unwrap();
        }
        notes.copy_max = 0;
        for i in 1..=10 {
            note(&mut notes, 3, i).unwrap();
        }
        let mut seen = 0;
        notes
            .read(1, |_| {
                seen += 1;
                Ok(seen < 3)
            })
            .unwrap();
        assert_eq!(seen, 3);
        // Partition 2's file loses the end of its last copied frame, partition 3's the end of
        // its last note.
        for (partition, cut) in [(2, 5), (3, 5)] {
            let file = flushed(&mut notes, partition);
            let len = file.metadata().unwrap().len();
            file.set_len(len - cut).unwrap();
        }
        for (partition, what) in [(2, "reading a copied frame"), (3, "reading a note")] {
            let (seen, error) = read_failing(&mut notes, partition);
            assert_eq!(seen, 9);
            assert!(
                error.contains(what) && error.contains("end inside one"),
                "{error}"
            );
        }
    }
}
