//! The aliases of a build by partition, held on disk until the build ends: each partition's
//! aliases, sorted, go to a scratch file of their own (a run), and the build's end merges the
//! runs in key order, so that the aliases are inserted into the store once, in order, into a
//! table that holds nothing yet.
//!
//! Written with each partition instead, they went into a table already holding the partitions
//! before, each insert landing in a full leaf of redb's B-tree, whose every entry an insert
//! moves: about 11,000 instructions per alias, against about 3,000 in order into an empty table
//! (`docs/PERFORMANCE.md`, twelfth session). In memory, they would grow with the log.
//!
//! A run is a sequence of records, each: the kind, the id and the key (a `u32` length,
//! little-endian, then the UTF-8 bytes), then the position of the newest event that named the
//! alias in that partition (`u64`, little-endian). The files are unnamed
//! (`tempfile::tempfile_in`): they go with the build, or with the process when it dies.
//!
//! **Invariant:** each run is sorted by (kind, id) and names each (kind, id) once
//! ([`crate::worker`]'s `Aliases::drain_sorted`); the merge gives each (kind, id) of all the runs
//! once, in order, with the key of the run that gave the highest position, as writing the
//! partitions' aliases one after the other, the newest kept, would leave them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::worker::WorkerError;

/// The write and read buffer of a run's file.
const BUFFER_BYTES: usize = 64 * 1024;

/// An alias as a run holds it: (kind, id, key, position).
pub type Alias = (String, String, String, u64);

/// The runs spilled so far.
#[derive(Debug)]
pub struct Runs {
    dir: PathBuf,
    files: Vec<File>,
}

impl Runs {
    /// No runs yet; their files will be in `dir`.
    #[must_use]
    pub fn new(dir: &Path) -> Runs {
        Runs {
            dir: dir.to_path_buf(),
            files: Vec::new(),
        }
    }

    /// Writes `aliases` (sorted by kind and id, each once) as a run.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when the file cannot be created or written; no run is kept then.
    pub fn spill(
        &mut self,
        aliases: &[(&'static str, String, String, u64)],
    ) -> Result<(), WorkerError> {
        debug_assert!(
            aliases.windows(2).all(|w| match w {
                [a, b] => (a.0, &a.1) < (b.0, &b.1),
                _ => true,
            }),
            "a run is sorted and names each alias once"
        );
        let file = tempfile::tempfile_in(&self.dir)
            .map_err(scratch(&self.dir, "creating a run of aliases"))?;
        let mut writer = BufWriter::with_capacity(BUFFER_BYTES, file);
        let written = aliases.iter().try_for_each(|(kind, id, key, position)| {
            write_text(&mut writer, kind)?;
            write_text(&mut writer, id)?;
            write_text(&mut writer, key)?;
            writer.write_all(&position.to_le_bytes())
        });
        let file = written
            .and_then(|()| writer.into_inner().map_err(io::IntoInnerError::into_error))
            .map_err(scratch(&self.dir, "writing a run of aliases"))?;
        self.files.push(file);
        Ok(())
    }

    /// Hands every alias of every run to `f` once, in (kind, id) order, with the key and
    /// position of the run that gave the highest position; consumes the runs.
    ///
    /// # Errors
    /// [`WorkerError::Scratch`] when a run cannot be read back (or ends inside a record, or
    /// holds text that is not UTF-8); `f`'s error.
    pub fn merge(
        self,
        mut f: impl FnMut(&str, &str, &str, u64) -> Result<(), WorkerError>,
    ) -> Result<(), WorkerError> {
        let dir = self.dir;
        let mut readers = Vec::with_capacity(self.files.len());
        for mut file in self.files {
            file.rewind()
                .map_err(scratch(&dir, "going back to the start of a run of aliases"))?;
            readers.push(BufReader::with_capacity(BUFFER_BYTES, file));
        }
        // The next alias of each run, smallest (kind, id) first; a run's index breaks no tie
        // that matters (equal (kind, id) are folded below).
        let mut next = BinaryHeap::new();
        for (run, reader) in readers.iter_mut().enumerate() {
            if let Some(alias) = read_alias(reader, &dir)? {
                next.push(Reverse((alias, run)));
            }
        }
        while let Some(Reverse((mut newest, run))) = next.pop() {
            if let Some(alias) = read_alias(reader_of(&mut readers, run), &dir)? {
                next.push(Reverse((alias, run)));
            }
            // The same alias from other runs: the highest position wins.
            while let Some(Reverse(((kind, id, _, _), _))) = next.peek() {
                if (kind, id) != (&newest.0, &newest.1) {
                    break;
                }
                let Some(Reverse((other, run))) = next.pop() else {
                    break;
                };
                if let Some(alias) = read_alias(reader_of(&mut readers, run), &dir)? {
                    next.push(Reverse((alias, run)));
                }
                if other.3 > newest.3 {
                    newest = other;
                }
            }
            let (kind, id, key, position) = &newest;
            f(kind, id, key, *position)?;
        }
        Ok(())
    }
}

/// Run `run`'s reader; every index the heap holds names one.
fn reader_of(readers: &mut [BufReader<File>], run: usize) -> &mut BufReader<File> {
    let count = readers.len();
    readers
        .get_mut(run)
        .unwrap_or_else(|| unreachable!("run {run} of {count}: the heap holds only their indices"))
}

fn write_text(writer: &mut impl Write, text: &str) -> io::Result<()> {
    let len = u32::try_from(text.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a text longer than 4 GiB"))?;
    writer.write_all(&len.to_le_bytes())?;
    writer.write_all(text.as_bytes())
}

/// The next record of a run, `None` at its end.
fn read_alias(reader: &mut impl Read, dir: &Path) -> Result<Option<Alias>, WorkerError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(scratch(dir, "reading a run of aliases")(e)),
    }
    let kind = read_text(reader, len, dir)?;
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).map_err(inside(dir))?;
    let id = read_text(reader, len, dir)?;
    reader.read_exact(&mut len).map_err(inside(dir))?;
    let key = read_text(reader, len, dir)?;
    let mut position = [0u8; 8];
    reader.read_exact(&mut position).map_err(inside(dir))?;
    Ok(Some((kind, id, key, u64::from_le_bytes(position))))
}

fn read_text(reader: &mut impl Read, len: [u8; 4], dir: &Path) -> Result<String, WorkerError> {
    let len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
    let mut bytes = Vec::new();
    reader
        .take(u64::try_from(len).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)
        .map_err(inside(dir))?;
    if bytes.len() != len {
        return Err(inside(dir)(io::ErrorKind::UnexpectedEof.into()));
    }
    String::from_utf8(bytes).map_err(|_| {
        scratch(dir, "reading a run of aliases")(io::Error::new(
            io::ErrorKind::InvalidData,
            "a text in the run is not UTF-8",
        ))
    })
}

fn inside(dir: &Path) -> impl FnOnce(io::Error) -> WorkerError + '_ {
    scratch(
        dir,
        "reading a run of aliases (the run ends inside a record?)",
    )
}

fn scratch<'a>(dir: &'a Path, context: &'a str) -> impl FnOnce(io::Error) -> WorkerError + 'a {
    move |source| WorkerError::Scratch {
        dir: dir.to_path_buf(),
        context: context.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn merged(runs: Runs) -> Vec<(String, String, String, u64)> {
        let mut out = Vec::new();
        runs.merge(|kind, id, key, position| {
            out.push((kind.to_owned(), id.to_owned(), key.to_owned(), position));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn the_runs_merge_in_order_each_alias_once_the_newest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path());
        // What writing the runs one after the other, the newest position kept, leaves.
        let mut expected: BTreeMap<(String, String), (String, u64)> = BTreeMap::new();
        let kinds = ["run", "task", "thread"];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for partition in 0..7u64 {
            let mut run: BTreeMap<(&'static str, String), (String, u64)> = BTreeMap::new();
            for _ in 0..400 {
                let kind = kinds[usize::try_from(next(3)).unwrap()];
                // Ids shared between partitions, some not ASCII.
                let id = format!("{}-{}", if next(5) == 0 { "é" } else { "id" }, next(300));
                let position = next(1_000_000) * 8 + partition;
                let key = format!("session:s{partition}");
                let slot = run.entry((kind, id)).or_insert((key.clone(), 0));
                if position > slot.1 {
                    *slot = (key, position);
                }
            }
            let run: Vec<_> = run
                .into_iter()
                .map(|((kind, id), (key, position))| (kind, id, key, position))
                .collect();
            for (kind, id, key, position) in &run {
                let slot = expected
                    .entry(((*kind).to_owned(), id.clone()))
                    .or_insert((key.clone(), 0));
                if *position > slot.1 {
                    *slot = (key.clone(), *position);
                }
            }
            runs.spill(&run).unwrap();
        }
        // Unnamed: nothing shows in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let expected: Vec<_> = expected
            .into_iter()
            .map(|((kind, id), (key, position))| (kind, id, key, position))
            .collect();
        assert!(expected.len() > 500, "{}", expected.len());
        assert_eq!(merged(runs), expected);
        assert!(merged(Runs::new(dir.path())).is_empty());
    }

    #[test]
    fn a_run_cut_inside_a_record_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path());
        let run = [("task", "t1".to_owned(), "session:s1".to_owned(), 9)];
        runs.spill(&run).unwrap();
        runs.spill(&run).unwrap();
        let file = runs.files.last().unwrap();
        let len = file.metadata().unwrap().len();
        file.set_len(len - 3).unwrap();
        let error = runs.merge(|_, _, _, _| Ok(())).unwrap_err().to_string();
        assert!(error.contains("ends inside a record"), "{error}");
    }
}
