//! `journal append`: JSON Lines events from a file or standard input, checked whole and
//! appended as one atomic batch, or (`--stream`) appended as they arrive in group-committed
//! batches. Every refusal names the input line it is about (`line N: …`).

use std::io::{self, BufRead, BufWriter, Write};

use crate::lines::Lines;
use std::path::PathBuf;

use journal_engine::seams::{uuid_v7, SystemClock, SystemEntropy};
use journal_engine::{AppendOptions, Error, Journal, Limits};
use journal_format::conformance::Schema;
use journal_format::{Envelope, FRAME_HEADER_LEN};
use serde_json::json;

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
            Error::InvalidEvent { index: Some(i), .. } | Error::EventTooLarge { index: i, .. } => {
                refusal(self.line(i), e)
            }
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

/// Appends lines as they arrive, one group-committed batch per burst of input, acknowledging
/// each event once it is durable.
pub(crate) async fn append_stream(journal: &Journal, args: &AppendArgs) -> Result<u8, Failure> {
    let mut lines = Lines::new(input(args.file.as_ref())?, Limits::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<(usize, Vec<u8>), Failure>>(4096);
    std::thread::spawn(move || loop {
        let mut line = Vec::new();
        let next = match lines.next_into(&mut line) {
            Ok(Some(number)) => Ok((number, line)),
            Ok(None) => break,
            Err(f) => Err(f),
        };
        let last = next.is_err();
        if tx.blocking_send(next).is_err() || last {
            break;
        }
    });
    let mut stdout = out::stdout();
    while let Some(first) = rx.recv().await {
        let mut lines = vec![first];
        while lines.len() < 1000 {
            match rx.try_recv() {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        let mut batch = Vec::new();
        let mut bad = None;
        for line in lines {
            match line.and_then(|(number, l)| parse_line(&l, number)) {
                Ok(Some(event)) => batch.push(event),
                Ok(None) => {}
                Err(f) => {
                    bad = Some(f);
                    break;
                }
            }
        }
        let appended = journal
            .append_batch(batch, AppendOptions::default())
            .await?;
        let mut text = String::new();
        for a in &appended {
            text.push_str(&ack_line(a));
            text.push('\n');
        }
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        if let Some(f) = bad {
            return Err(f);
        }
    }
    Ok(0)
}
