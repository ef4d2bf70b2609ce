//! `journal append`: JSON Lines events from a file or standard input, checked whole and
//! appended as one atomic batch, or (`--stream`) appended as they arrive in group-committed
//! batches. Every refusal names the input line it is about (`line N: …`).

use std::io::{self, BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use journal_engine::seams::{uuid_v7, SystemClock, SystemEntropy};
use journal_engine::{AppendOptions, Error, Journal, Limits};
use journal_format::conformance::Schema;
use journal_format::{Envelope, FRAME_HEADER_LEN};
use serde_json::json;
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

/// Parses one input line; blank lines are skipped (`None`). A missing `eventId` gets a UUID v7.
fn parse_line(line: &[u8], number: usize) -> Result<Option<Envelope>, Failure> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Envelope::from_json_slice(line, &mut || uuid_v7(&SystemClock, &SystemEntropy))
        .map(Some)
        .map_err(|e| fail(format!("line {number}: {e}")))
}

/// The refusal of the event on input line `number` by the journal's checks.
fn refusal(number: usize, e: Error) -> Failure {
    fail(match e {
        Error::EventTooLarge {
            event_id,
            size,
            limit,
            ..
        } => format!(
            "line {number}: event {event_id} is {size} bytes stored, over the event size limit of {limit}"
        ),
        Error::InvalidEvent { source, .. } => format!("line {number}: {source}"),
        other => format!("line {number}: {other}"),
    })
}

/// Checks one event as an append does (its form, its payload's shape, the conformance profile,
/// its stored size); returns the bytes it takes in a batch (its frame).
fn checked_size(
    limits: &Limits,
    event: &Envelope,
    conformance: Option<Schema>,
    body: &mut Vec<u8>,
) -> Result<u64, Error> {
    limits.check_batch(std::slice::from_ref(event), conformance)?;
    body.clear();
    event
        .write_msgpack(body)
        .map_err(|source| Error::InvalidEvent {
            index: None,
            source,
        })?;
    Ok((body.len() + FRAME_HEADER_LEN) as u64)
}

/// The input line of each event of a batch.
#[derive(Default)]
pub(crate) struct LineNumbers(Vec<usize>);

impl LineNumbers {
    /// The input line of the batch's event `index`.
    fn line(&self, index: usize) -> usize {
        self.0.get(index).copied().unwrap_or(index + 1)
    }

    /// An error of appending the batch, naming the input line of the event it is about.
    fn refusal(&self, e: Error) -> Failure {
        match e {
            Error::InvalidEvent { index: Some(i), .. }
            | Error::EventTooLarge { index: i, .. }
            | Error::IdReused { index: i, .. } => refusal(self.line(i), e),
            other => Failure::from(other),
        }
    }
}

/// Events checked one by one, each with its input line, and what they take of a batch.
#[derive(Default)]
pub(crate) struct Batch {
    events: Vec<Envelope>,
    lines: LineNumbers,
    bytes: u64,
}

impl Batch {
    /// Whether an event of `bytes` more would take the batch past a limit.
    fn is_full(&self, limits: &Limits, bytes: u64) -> bool {
        self.events.len() >= limits.batch_events_max
            || self.bytes.saturating_add(bytes) > limits.batch_bytes_max
    }

    fn push(&mut self, number: usize, event: Envelope, bytes: u64) {
        self.events.push(event);
        self.lines.0.push(number);
        self.bytes += bytes;
    }
}

/// The refusal of an input that does not fit one batch, at line `number`.
fn over_batch(limits: &Limits, batch: &Batch, number: usize, bytes: u64) -> Failure {
    let (what, actual, limit) = if batch.events.len() >= limits.batch_events_max {
        (
            "batch length (events)",
            batch.events.len() as u64 + 1,
            limits.batch_events_max as u64,
        )
    } else {
        (
            "batch size (stored bytes)",
            batch.bytes.saturating_add(bytes),
            limits.batch_bytes_max,
        )
    };
    fail(format!(
        "line {number}: the input's {what} is {actual}, over the limit of {limit}; use --stream to append it in several batches"
    ))
}

/// Reads and checks the whole input: every line parses, each event passes the append's checks,
/// and together they fit one batch. Nothing is opened: bad input leaves the journal directory
/// byte-for-byte unchanged.
pub(crate) fn parse_input(args: &AppendArgs) -> Result<Batch, Failure> {
    let limits = Limits::default();
    let conformance = args.strict.map(Profile::schema);
    let mut lines = Lines::new(input(args.file.as_ref())?, limits);
    let mut batch = Batch::default();
    let mut line = Vec::new();
    let mut body = Vec::new();
    while let Some(number) = lines.next_into(&mut line)? {
        let Some(event) = parse_line(&line, number)? else {
            continue;
        };
        let bytes = checked_size(&limits, &event, conformance, &mut body)
            .map_err(|e| refusal(number, e))?;
        if batch.is_full(&limits, bytes) {
            return Err(over_batch(&limits, &batch, number, bytes));
        }
        batch.push(number, event, bytes);
    }
    Ok(batch)
}

fn ack_line(a: &journal_engine::Appended) -> String {
    let mut v = json!({
        "position": a.position.0,
        "eventId": a.event_id,
        "hash": a.hash.to_hex(),
        "streamVersion": a.stream_version,
    });
    if a.duplicate {
        v["duplicate"] = json!(true);
    }
    v.to_string()
}

/// Appends the checked input as one atomic batch.
pub(crate) async fn append_all(
    journal: &Journal,
    args: &AppendArgs,
    batch: Batch,
) -> Result<u8, Failure> {
    let options = AppendOptions {
        expected_stream_version: args.expected_version,
    };
    let Batch { events, lines, .. } = batch;
    let appended = journal
        .append_batch(events, options)
        .await
        .map_err(|e| lines.refusal(e))?;
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
    limits: Limits,
    conformance: Option<Schema>,
    /// A scratch buffer for sizing events.
    body: Vec<u8>,
    /// An event that did not fit the last group: the first of the next.
    carried: Option<(usize, Envelope, u64)>,
}

impl Groups {
    /// The next group: the event carried over or the next line to arrive, then the lines that
    /// have arrived since, up to a batch's limits; with why the input stops, if it does.
    async fn next(&mut self, rx: &mut mpsc::Receiver<Incoming>) -> (Batch, Option<Stop>) {
        let mut batch = Batch::default();
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
        while batch.events.len() < GROUP_EVENTS_MAX && self.carried.is_none() {
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
    fn add(&mut self, batch: &mut Batch, line: Incoming) -> Result<(), Failure> {
        let (number, bytes, _share) = line?;
        let Some(event) = parse_line(&bytes, number)? else {
            return Ok(());
        };
        let size = checked_size(&self.limits, &event, self.conformance, &mut self.body)
            .map_err(|e| refusal(number, e))?;
        if batch.is_full(&self.limits, size) && !batch.events.is_empty() {
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
    let limits = Limits::default();
    let mut rx = read_ahead(Lines::new(input(args.file.as_ref())?, limits));
    let mut groups = Groups {
        limits,
        conformance: args.strict.map(Profile::schema),
        body: Vec::new(),
        carried: None,
    };
    let mut stdout = out::stdout();
    loop {
        let (batch, stop) = groups.next(&mut rx).await;
        if !batch.events.is_empty() {
            let Batch { events, lines, .. } = batch;
            let appended = journal
                .append_batch(events, AppendOptions::default())
                .await
                .map_err(|e| lines.refusal(e))?;
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
