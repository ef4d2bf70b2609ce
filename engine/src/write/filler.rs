//! The filler: zero-fills the tail segment ahead of the writer's frames, and syncs the zeros,
//! on a thread of its own.
//!
//! A commit whose frames land in space that is already written and synced makes `fdatasync`
//! flush those frames only. A commit that extends the file also commits the file's new size
//! and blocks through ext4's journal, a second device flush; a commit that zero-filled the
//! space after it itself would also write and flush the zeros, a mebibyte at a time. Here the
//! zeros are written and synced beside the commits, off their path.
//!
//! **Invariant: zeros never land on frames.** The writer announces how far each write's frames
//! reach ([`Filler::before_write`]) before it writes them; the filler claims a chunk to fill
//! only after the frames' end announced so far, and the writer waits for a claimed chunk that
//! its frames would overlap. Both happen under one mutex.
//!
//! The filler writes through a file handle of its own: after a failed writeback Linux reports
//! the error to each open handle of the file once, so the writer's `fdatasync` on its own handle
//! still sees a failure that the filler's sync saw first (and poisons the writer). A failure of
//! the filler's own write or sync only stops the filling of that segment: commits then extend
//! the file, as they would without it. Recovery treats zeros after the last frame as clean
//! (row "zeroed space" of the recovery table in `docs/FORMAT.md`) and trims them; a seal and
//! a clean close trim them first, after [`Filler::detach`].

use std::ops::Range;
use std::sync::{Arc, LazyLock, MutexGuard};
use std::thread::JoinHandle;

use crate::signal::Signal;
use crate::storage::StorageFile;

/// How much the filler writes at a time (and the length of [`ZEROS`]).
pub(crate) const FILL_CHUNK_BYTES: u64 = 1 << 20;

/// How much the filler writes in a chunk that starts at the frames' end (at open, after a
/// roll, or when the writer caught up): the next write lands in it and waits for it, 3 ms or
/// more for a mebibyte and its sync on the development machine, against well under one for this.
pub(crate) const FIRST_CHUNK_BYTES: u64 = 64 << 10;

/// How far ahead of the frames the filler keeps zeros at least (more after large writes): it is
/// asked for more once less than half of this is left.
pub(crate) const FILL_AHEAD_BYTES: u64 = 2 * FILL_CHUNK_BYTES;

/// The zeros the filler writes, allocated once per process: a `vec![0; 1 MiB]` per fill
/// allocated and freed them each time, their fresh pages faulted in inside the `pwrite`
/// (`docs/PERFORMANCE.md`). Not a `static` array: an all-zero constant is stored in the binary's
/// read-only data, a mebibyte in every binary that links the engine.
static ZEROS: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    vec![0; usize::try_from(FILL_CHUNK_BYTES).unwrap_or(1 << 20)].into_boxed_slice()
});

/// What the writer and the filler thread share ([`Shared`]).
#[derive(Debug, Default)]
struct State {
    /// The tail segment being filled, through the filler's own handle; `None` between segments,
    /// after a failure, and once stopped.
    file: Option<Arc<dyn StorageFile>>,
    /// Zeros are written and synced from the frames' end at [`Filler::attach`] up to here.
    filled: u64,
    /// How far the writer's frames may reach: zeros go only after it.
    frames_end: u64,
    /// The filler fills up to here (never past the segment's size limit).
    wanted: u64,
    /// The segment's size limit.
    limit: u64,
    /// Whether the zeros are synced (in durable mode; in buffered mode the writer's periodic
    /// sync takes them with its frames, and nothing else syncs).
    sync: bool,
    /// The chunk being written (and synced) now, outside the mutex.
    filling: Option<Range<u64>>,
    stop: bool,
}

/// What the writer and the filler thread share: the state, signalled when the writer asks for
/// more zeros or stops the filler, and when a chunk is done.
type Shared = Signal<State>;

/// The writer's side of the filler thread. Dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct Filler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Filler {
    /// Starts the filler thread. Without it (the thread could not start), nothing is filled:
    /// commits extend the file.
    pub(crate) fn start() -> Filler {
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("journal-filler".into())
                .spawn(move || run(&shared))
        };
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the filler thread; commits extend the tail");
                None
            }
        };
        Filler { shared, thread }
    }

    /// Fills `file` (a handle of the filler's own on the tail segment, whose frames end at
    /// `end`) up to [`FILL_AHEAD_BYTES`] after its frames, never past `limit`, and syncs the
    /// zeros if `sync`. Without the filler thread (it could not start) nothing is filled.
    pub(crate) fn attach(&self, file: Arc<dyn StorageFile>, end: u64, limit: u64, sync: bool) {
        if self.thread.is_none() {
            return;
        }
        let mut state = self.shared.lock();
        // The previous segment was detached before it was sealed.
        debug_assert!(state.file.is_none() && state.filling.is_none());
        *state = State {
            file: Some(file),
            filled: end,
            frames_end: end,
            wanted: (end + FILL_AHEAD_BYTES).min(limit),
            limit,
            sync,
            filling: None,
            stop: false,
        };
        self.shared.changed();
    }

    /// Called before frames are written up to `end`: waits for a chunk being filled that they
    /// would overlap, and keeps the filler after `end` from now on.
    pub(crate) fn before_write(&self, end: u64) {
        let mut state = self.shared.lock();
        while state
            .filling
            .as_ref()
            .is_some_and(|chunk| chunk.start < end)
        {
            state = self.shared.wait(state);
        }
        state.frames_end = state.frames_end.max(end);
    }

    /// Called after a write of `len` bytes of frames, up to `end`: asks for more zeros once
    /// less than half of the run-ahead is left after them. The run-ahead is
    /// [`FILL_AHEAD_BYTES`], or twice the write when that is more, so that the next write of
    /// that size lands on zeros rather than on a chunk being filled (which it would wait for).
    pub(crate) fn after_write(&self, end: u64, len: u64) {
        let ahead = FILL_AHEAD_BYTES.max(2 * len);
        let mut state = self.shared.lock();
        if state.file.is_some() && state.wanted < end + ahead / 2 {
            state.wanted = (end + ahead).min(state.limit);
            self.shared.changed();
        }
    }

    /// Stops filling the tail segment, once a chunk being filled is done. After it, nothing is
    /// written to that segment but by the writer (it may trim and seal it).
    pub(crate) fn detach(&self) {
        let mut state = self.shared.lock();
        state.file = None;
        while state.filling.is_some() {
            state = self.shared.wait(state);
        }
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stop = true;
            state.file = None;
            self.shared.changed();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The filler thread: claims the next chunk after both the zeros and the frames, up to what
/// the writer asked for, and fills it; until stopped.
fn run(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let from = state.filled.max(state.frames_end);
        let chunk = if from == state.frames_end {
            FIRST_CHUNK_BYTES
        } else {
            FILL_CHUNK_BYTES
        };
        let to = (from + chunk).min(state.wanted);
        state = match state.file.clone().filter(|_| from < to) {
            Some(file) => {
                let sync = state.sync;
                fill(shared, state, &file, from..to, sync)
            }
            None => shared.wait(state),
        };
    }
}

/// Claims `chunk` (after the frames' end and the zeros', no chunk being filled), writes its
/// zeros and syncs them if `sync` with the mutex released, and records the outcome. A failure
/// stops the filling of the segment: best effort, commits extend the file from there, as
/// without the filler. (A failed writeback of the writer's frames is reported to the writer's
/// own handle as well.)
fn fill<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    file: &Arc<dyn StorageFile>,
    chunk: Range<u64>,
    sync: bool,
) -> MutexGuard<'a, State> {
    assert!(
        state.filling.is_none() && chunk.start >= state.frames_end.max(state.filled),
        "zeros are written after the frames and the zeros, one chunk at a time"
    );
    state.filling = Some(chunk.clone());
    drop(state);
    let len = usize::try_from(chunk.end - chunk.start).unwrap_or(usize::MAX);
    let result = match ZEROS.get(..len) {
        Some(zeros) => file.write_all_at(zeros, chunk.start).and_then(|()| {
            if sync {
                file.sync_data()
            } else {
                Ok(())
            }
        }),
        None => Err(std::io::Error::other("a chunk longer than the zeros")),
    };
    let mut state = shared.lock();
    state.filling = None;
    match result {
        Ok(()) => state.filled = state.filled.max(chunk.end),
        Err(e) => {
            tracing::debug!(error = %e, offset = chunk.start, "cannot zero-fill the tail segment");
            state.file = None;
        }
    }
    shared.changed();
    state
}
#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::storage::{FsStorage, OpenMode, Storage};

    fn open_pair(path: &Path) -> (Arc<dyn StorageFile>, Arc<dyn StorageFile>) {
        let storage = FsStorage;
        let writer = storage.open(path, OpenMode::CreateNew).expect("create");
        let filler = storage.open(path, OpenMode::ReadWrite).expect("open");
        (writer, filler)
    }

    fn wait_until(mut done: impl FnMut() -> bool) {
        for _ in 0..2_000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the filler did not get there in 2 s");
    }

    #[test]
    fn fills_ahead_of_the_frames_and_never_over_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, filler_file) = open_pair(&dir.path().join("seg"));
        let limit = 64 * FILL_CHUNK_BYTES;
        let filler = Filler::start();
        filler.attach(filler_file, 0, limit, true);
        // Frames of 300 KiB of 0xAB, written as a writer does.
        let frames = vec![0xAB_u8; 300 * 1024];
        let mut end = 0;
        for _ in 0..20 {
            filler.before_write(end + frames.len() as u64);
            writer.write_all_at(&frames, end).expect("write");
            end += frames.len() as u64;
            filler.after_write(end, frames.len() as u64);
        }
        wait_until(|| filler.shared.lock().filled >= end + FILL_AHEAD_BYTES / 2);
        filler.detach();
        let len = writer.len().expect("len");
        assert!(len > end, "zeros after the frames: {len} > {end}");
        assert!(
            len <= end + FILL_AHEAD_BYTES,
            "at most the run-ahead: {len}"
        );
        let mut all = vec![0; usize::try_from(len).expect("fits")];
        writer.read_exact_at(&mut all, 0).expect("read");
        let (written, zeros) = all.split_at(usize::try_from(end).expect("fits"));
        assert!(
            written.iter().all(|b| *b == 0xAB),
            "no zero landed on a frame"
        );
        assert!(zeros.iter().all(|b| *b == 0), "only zeros after the frames");
    }

    #[test]
    fn stops_at_the_limit_and_after_detach() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, filler_file) = open_pair(&dir.path().join("seg"));
        let filler = Filler::start();
        let limit = FILL_CHUNK_BYTES + 4096;
        filler.attach(filler_file, 0, limit, true);
        wait_until(|| filler.shared.lock().filled == limit);
        filler.detach();
        assert_eq!(writer.len().expect("len"), limit, "never past the limit");
        // Detached: asking for more writes nothing.
        filler.after_write(limit, 4096);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(writer.len().expect("len"), limit);
    }
}
