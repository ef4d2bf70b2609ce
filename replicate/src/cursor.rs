//! The replicate task's durable cursor: the last position JetStream acknowledged and the
//! stream sequence it got, kept in a small file in the journal's directory and replaced
//! atomically (written beside it, synced, renamed, the directory synced), while publishing
//! goes on ([`Notes`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::task::JoinHandle;

use crate::{Error, Result};

/// The last acknowledged position and its stream sequence; zeros before the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acked {
    pub position: u64,
    pub sequence: u64,
}

/// The cursor file of one stream.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    path: PathBuf,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

impl Cursor {
    /// The cursor of replication to `stream`, kept in `dir`.
    pub(crate) fn new(dir: &Path, stream: &str) -> Cursor {
        Cursor {
            path: dir.join(format!("replicate.{stream}.cursor")),
        }
    }

    /// The cursor kept, or zeros when there is none.
    pub(crate) fn load(&self) -> Result<Acked> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Acked::default()),
            Err(e) => return Err(io(format!("reading {}", self.path.display()))(e)),
        };
        let mut numbers = text.split_whitespace().map(str::parse::<u64>);
        match (numbers.next(), numbers.next()) {
            (Some(Ok(position)), Some(Ok(sequence))) => Ok(Acked { position, sequence }),
            _ => Err(Error::Io {
                context: format!("reading {}", self.path.display()),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "expected two numbers: position and stream sequence",
                ),
            }),
        }
    }

    /// Replaces the cursor with `acked`, durably.
    pub(crate) fn store(&self, acked: Acked) -> Result<()> {
        let tmp = self.path.with_extension("cursor.tmp");
        let context = || format!("writing {}", self.path.display());
        let mut file = std::fs::File::create(&tmp).map_err(io(context()))?;
        writeln!(file, "{} {}", acked.position, acked.sequence).map_err(io(context()))?;
        file.sync_data().map_err(io(context()))?;
        std::fs::rename(&tmp, &self.path).map_err(io(context()))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(context()))?;
        }
        Ok(())
    }
}

/// The cursor written in the background: [`Notes::note`] hands the latest acknowledged
/// position to a blocking thread, so that publishing never waits for the cursor's two fsyncs
/// (under load they took tens of milliseconds, all of it replica lag). A note made while a
/// write is under way is left to a later one; [`Notes::flush`] writes the last durably.
pub(crate) struct Notes {
    cursor: Arc<Cursor>,
    writing: Option<JoinHandle<Result<()>>>,
    /// The last position handed to a write.
    noted: Acked,
}

/// Every stream the journal in `dir` is replicated to, with the last position JetStream
/// acknowledged of it (its cursor file), in the order of the streams' names.
///
/// # Errors
/// A cursor file that cannot be read or is not of its form.
pub fn replicated_positions(dir: &Path) -> Result<Vec<(String, u64)>> {
    let entries = std::fs::read_dir(dir).map_err(io(format!("listing {}", dir.display())))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(format!("listing {}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stream) = name
            .strip_prefix("replicate.")
            .and_then(|rest| rest.strip_suffix(".cursor"))
        else {
            continue;
        };
        let acked = Cursor::new(dir, stream).load()?;
        found.push((stream.to_string(), acked.position));
    }
    found.sort();
    Ok(found)
}

fn joined(e: tokio::task::JoinError) -> Error {
    Error::Io {
        context: "writing the replication cursor".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

impl Notes {
    /// Notes for `cursor`, which holds `noted`.
    pub(crate) fn new(cursor: Cursor, noted: Acked) -> Notes {
        Notes {
            cursor: Arc::new(cursor),
            writing: None,
            noted,
        }
    }

    /// Starts writing `acked`, unless it is written already or a write is under way.
    ///
    /// # Errors
    /// The error of the write before, if it failed.
    pub(crate) fn note(&mut self, acked: Acked) -> Result<()> {
        if acked == self.noted || self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            return Ok(());
        }
        if let Some(done) = self.writing.take().and_then(FutureExt::now_or_never) {
            done.map_err(joined)??;
        }
        let cursor = Arc::clone(&self.cursor);
        self.writing = Some(tokio::task::spawn_blocking(move || cursor.store(acked)));
        self.noted = acked;
        Ok(())
    }

    /// Waits for the write under way, then writes `acked` if it is not written yet.
    ///
    /// # Errors
    /// The error of a write.
    pub(crate) async fn flush(&mut self, acked: Acked) -> Result<()> {
        if let Some(writing) = self.writing.take() {
            writing.await.map_err(joined)??;
        }
        if acked != self.noted {
            let cursor = Arc::clone(&self.cursor);
            tokio::task::spawn_blocking(move || cursor.store(acked))
                .await
                .map_err(joined)??;
            self.noted = acked;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_cursor_loads_back_and_none_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let cursor = Cursor::new(dir.path(), "s");
        assert_eq!(cursor.load().unwrap(), Acked::default());
        let acked = Acked {
            position: 42,
            sequence: 44,
        };
        cursor.store(acked).unwrap();
        assert_eq!(cursor.load().unwrap(), acked);
        std::fs::write(dir.path().join("replicate.s.cursor"), "x").unwrap();
        assert!(cursor.load().is_err());
    }
}
