//! `journal append`: JSON Lines events from a file or standard input, checked whole and
//! appended as one atomic batch, or (`--stream`) appended as they arrive in group-committed
//! batches. Every refusal names the input line it is about (`line N: …`).

use std::io::{self, BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use journal_engine::input::{Checker, InputBatch, LineError, LineNumbers, Problem};
use journal_engine::{AppendOptions, Error, Journal, Limits};
use journal_format::Envelope;
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::lines::Lines;
use crate::{fail, out, AppendArgs, Failure, Profile};

fn input(file: Option<&PathBuf>) -> Result<Box<dyn BufRead + Send>, Failure> {
    match file {
        None => Ok(Box::new(io::BufReader::new(io::stdin()))),
        Some(p) if p.as_os_str() == "-" => Ok(Box::new(io::BufReader::new(io::stdin()))),
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| fail(format!("{}: {e}", p.display())))?;
            Ok(Box::new(io::BufReader::with_capacity(1 << 20, f)))
        }
    }
}

impl From<LineError> for Failure {
    fn from(e: LineError) -> Failure {
        fail(e.message)
    }
}

/// An error of appending a batch, naming the input line of the event it is about.
fn refusal(lines: &LineNumbers, e: Error) -> Failure {
    match lines.refusal(e) {
        Ok(line) => line.into(),
        Err(other) => Failure::from(other),
    }
}

/// Reads and checks the whole input: every line parses, each event passes the append's checks,
/// and together they fit one batch. Nothing is opened: bad input leaves the journal directory
/// byte-for-byte unchanged.
pub(crate) fn parse_input(args: &AppendArgs, limits: Limits) -> Result<InputBatch, Failure> {
    let mut checker = Checker::new(limits, args.strict.map(Profile::schema));
    let mut lines = Lines::new(input(args.file.as_ref())?, limits);
    let mut batch = InputBatch::default();
    let mut line = Vec::new();
    while let Some(number) = lines.next_into(&mut line)? {
        let Some(event) = checker.parse_line(&line, number)? else {
            continue;
        };
        checker.push(&mut batch, number, event).map_err(|e| {
            let mut f = Failure::from(e.clone());
            if e.problem == Problem::OverBatch {
                f.message
                    .push_str("; use --stream to append it in several batches");
            }
            f
        })?;
    }
    Ok(batch)
}

fn ack_line(a: &journal_engine::Appended) -> String {
    serde_json::to_string(a).unwrap_or_default()
}

/// Appends the checked input as one atomic batch.
pub(crate) async fn append_all(
    journal: &Journal,
    args: &AppendArgs,
    batch: InputBatch,
) -> Result<u8, Failure> {
    let options = AppendOptions {
        expected_stream_version: args.expected_version,
    };
    let (events, lines) = batch.into_parts();
    let appended = journal
        .append_batch(events, options)
        .await
        .map_err(|e| refusal(&lines, e))?;
    let mut out = BufWriter::new(out::stdout());
    for a in &appended {
        writeln!(out, "{}", ack_line(a))?;
    }
    out.flush()?;
    Ok(0)
}

/// The most events in one group of `--stream`: a group is appended as soon as the input pauses
/// or it is this long (or a batch's limits would be passed), so acknowledgements keep flowing.
const GROUP_EVENTS_MAX: usize = 1000;

/// The most bytes of input lines read ahead of the appends in `--stream` (a line at the bound
/// always fits): reading ahead lets a group fill a batch, and the bound keeps a fast producer
/// from filling memory while the appends catch up.
const READ_AHEAD_BYTES: u32 = 64 << 20;

/// A numbered input line read ahead, holding its share of [`READ_AHEAD_BYTES`] until it is
/// dropped; or why reading stopped.
type Incoming = Result<(usize, Vec<u8>, OwnedSemaphorePermit), Failure>;

/// Reads `lines` on a thread of their own, ahead of the appends by at most
/// [`READ_AHEAD_BYTES`].
fn read_ahead<R: BufRead + Send + 'static>(mut lines: Lines<R>) -> mpsc::Receiver<Incoming> {
    let (tx, rx) = mpsc::channel::<Incoming>(GROUP_EVENTS_MAX * 4);
    let budget = Arc::new(Semaphore::new(READ_AHEAD_BYTES as usize));
    let runtime = tokio::runtime::Handle::current();
    std::thread::spawn(move || loop {
        let mut line = Vec::new();
        let next = match lines.next_into(&mut line) {
            Ok(Some(number)) => {
                let share = u32::try_from(line.len().max(1))
                    .unwrap_or(u32::MAX)
                    .min(READ_AHEAD_BYTES);
                match runtime.block_on(Arc::clone(&budget).acquire_many_owned(share)) {
                    Ok(permit) => Ok((number, line, permit)),
                    Err(_) => break,
                }
            }
            Ok(None) => break,
            Err(f) => Err(f),
        };
        let last = next.is_err();
        if tx.blocking_send(next).is_err() || last {
            break;
        }
    });
    rx
}

/// Why `--stream` stops reading.
enum Stop {
    /// The input ended.
    End,
    /// A line was refused: the lines before it are appended first.
    Refused(Failure),
}

/// Groups `--stream`'s lines into batches that keep every batch limit.
struct Groups {
    checker: Checker,
    /// An event that did not fit the last group: the first of the next.
    carried: Option<(usize, Envelope, u64)>,
}

impl Groups {
    /// The next group: the event carried over or the next line to arrive, then the lines that
    /// have arrived since, up to a batch's limits; with why the input stops, if it does.
    async fn next(&mut self, rx: &mut mpsc::Receiver<Incoming>) -> (InputBatch, Option<Stop>) {
        let mut batch = InputBatch::default();
        if let Some((number, event, bytes)) = self.carried.take() {
            batch.push(number, event, bytes);
        } else {
            let Some(first) = rx.recv().await else {
                return (batch, Some(Stop::End));
            };
            if let Err(f) = self.add(&mut batch, first) {
                return (batch, Some(Stop::Refused(f)));
            }
        }
        while batch.len() < GROUP_EVENTS_MAX && self.carried.is_none() {
            let line = match rx.try_recv() {
                Ok(line) => line,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return (batch, Some(Stop::End)),
            };
            if let Err(f) = self.add(&mut batch, line) {
                return (batch, Some(Stop::Refused(f)));
            }
        }
        (batch, None)
    }

    /// Adds a line's event to `batch`, or carries it to the next group when the batch is full.
    fn add(&mut self, batch: &mut InputBatch, line: Incoming) -> Result<(), Failure> {
        let (number, bytes, _share) = line?;
        let Some(event) = self.checker.parse_line(&bytes, number)? else {
            return Ok(());
        };
        let size = self.checker.check(&event, number)?;
        if batch.is_full(self.checker.limits(), size) && !batch.is_empty() {
            self.carried = Some((number, event, size));
        } else {
            batch.push(number, event, size);
        }
        Ok(())
    }
}

/// Appends lines as they arrive, one group-committed batch per burst of input (each within
/// every batch limit), acknowledging each event once it is durable. A refused line stops the
/// stream after the lines before it are appended and acknowledged.
pub(crate) async fn append_stream(journal: &Journal, args: &AppendArgs) -> Result<u8, Failure> {
    let limits = journal.limits();
    let mut rx = read_ahead(Lines::new(input(args.file.as_ref())?, limits));
    let mut groups = Groups {
        checker: Checker::new(limits, args.strict.map(Profile::schema)),
        carried: None,
    };
    let mut stdout = out::stdout();
    loop {
        let (batch, stop) = groups.next(&mut rx).await;
        if !batch.is_empty() {
            let (events, lines) = batch.into_parts();
            let appended = journal
                .append_batch(events, AppendOptions::default())
                .await
                .map_err(|e| refusal(&lines, e))?;
            let mut text = String::new();
            for a in &appended {
                text.push_str(&ack_line(a));
                text.push('\n');
            }
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
        match stop {
            Some(Stop::End) => return Ok(0),
            Some(Stop::Refused(f)) => return Err(f),
            None => {}
        }
    }
}
