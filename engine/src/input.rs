//! Input for an append: JSON events checked one by one, each named by the line (or array
//! element) it came from, exactly as an append would check it, before anything is opened or
//! written. `journal append` and `journal serve`'s `POST /v1/events` share it, so a refusal
//! reads the same from either.

use journal_format::conformance::Schema;
use journal_format::{Envelope, FRAME_HEADER_LEN};

use crate::error::Error;
use crate::options::Limits;
use crate::seams::{uuid_v7, SystemClock, SystemEntropy};

/// How many times the event size limit an input line may be: JSON's escapes can make an
/// event's line several times its stored size (`\u0001` is six bytes for one), and the stored
/// form is what the limit measures.
pub const LINE_BYTES_PER_STORED_BYTE: usize = 4;

/// The most bytes an input line (or a command's arguments) may hold, its newline aside.
#[must_use]
pub fn line_bytes_max(limits: &Limits) -> usize {
    usize::try_from(limits.event_bytes_max)
        .unwrap_or(usize::MAX)
        .saturating_mul(LINE_BYTES_PER_STORED_BYTE)
}

/// What is wrong with an input line.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The line is not an event: not JSON, not an object, a field of the wrong form.
    Invalid,
    /// The event is over the event size limit.
    EventTooLarge,
    /// The line is longer than [`line_bytes_max`].
    LineTooLong,
    /// With this line the input no longer fits one batch (events or stored bytes).
    OverBatch,
    /// The event's id is stored already with another body.
    IdReused,
}

impl Problem {
    /// Whether the problem is a size: the input is too large, not malformed.
    #[must_use]
    pub fn is_size(self) -> bool {
        matches!(
            self,
            Problem::EventTooLarge | Problem::LineTooLong | Problem::OverBatch
        )
    }
}

/// The refusal of one input line: its number, what kind of problem, and a message that starts
/// with `line N: ` (or `element N: ` for an array's elements).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LineError {
    /// The line's (or element's) number, from 1.
    pub line: usize,
    /// What kind of problem.
    pub problem: Problem,
    /// What is wrong, naming the line.
    pub message: String,
}

/// Events checked one by one, each with the input line it came from, and what they take of a
/// batch. Invariant: `events` and `lines` have the same length, and the events fit one batch
/// under the checker's limits.
#[derive(Debug, Default)]
pub struct InputBatch {
    events: Vec<Envelope>,
    lines: Vec<usize>,
    bytes: u64,
}

impl InputBatch {
    /// The number of events.
    #[must_use]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events, in input order.
    #[must_use]
    pub fn events(&self) -> &[Envelope] {
        &self.events
    }

    /// The events, and the input line of each.
    #[must_use]
    pub fn into_parts(self) -> (Vec<Envelope>, LineNumbers) {
        (self.events, LineNumbers(self.lines))
    }

    /// Whether an event of `bytes` more would take the batch past a limit.
    #[must_use]
    pub fn is_full(&self, limits: &Limits, bytes: u64) -> bool {
        self.events.len() >= limits.batch_events_max
            || self.bytes.saturating_add(bytes) > limits.batch_bytes_max
    }

    /// Adds a checked event of `bytes` (its frame), from input line `line`.
    pub fn push(&mut self, line: usize, event: Envelope, bytes: u64) {
        self.events.push(event);
        self.lines.push(line);
        self.bytes += bytes;
    }
}

/// The input line of each event of a batch.
#[derive(Debug, Default)]
pub struct LineNumbers(Vec<usize>);

impl LineNumbers {
    /// The input line of the batch's event `index`.
    #[must_use]
    pub fn line(&self, index: usize) -> usize {
        self.0.get(index).copied().unwrap_or(index + 1)
    }

    /// An error of appending the batch as a refusal of the input line it is about, when it is
    /// about one event (`Ok`); any other error as it is (`Err`).
    ///
    /// # Errors
    /// `e` itself when it names no event of the batch.
    pub fn refusal(&self, e: Error) -> Result<LineError, Error> {
        match e {
            Error::InvalidEvent { index: Some(i), .. }
            | Error::EventTooLarge { index: i, .. }
            | Error::IdReused { index: i, .. } => Ok(refusal("line", self.line(i), e)),
            other => Err(other),
        }
    }
}

/// The refusal of the event on input line `number` by the journal's checks.
fn refusal(unit: &str, number: usize, e: Error) -> LineError {
    let (problem, message) = match e {
        Error::EventTooLarge {
            event_id,
            size,
            limit,
            ..
        } => (
            Problem::EventTooLarge,
            format!(
                "{unit} {number}: event {event_id} is {size} bytes stored, over the event size limit of {limit}"
            ),
        ),
        Error::InvalidEvent { source, .. } => (Problem::Invalid, format!("{unit} {number}: {source}")),
        e @ Error::IdReused { .. } => (Problem::IdReused, format!("{unit} {number}: {e}")),
        other => (Problem::Invalid, format!("{unit} {number}: {other}")),
    };
    LineError {
        line: number,
        problem,
        message,
    }
}

/// Checks input lines as an append checks events: their form, their payload's shape, the
/// conformance profile, their stored size, and that together they fit one batch.
#[derive(Debug)]
pub struct Checker {
    limits: Limits,
    conformance: Option<Schema>,
    /// What an input item is called in messages: `line`, or `element` for an array.
    unit: &'static str,
    /// A scratch buffer for sizing events.
    body: Vec<u8>,
}

impl Checker {
    /// A checker for `limits`, in strict mode when `conformance` is given.
    #[must_use]
    pub fn new(limits: Limits, conformance: Option<Schema>) -> Checker {
        Checker {
            limits,
            conformance,
            unit: "line",
            body: Vec::new(),
        }
    }

    /// Names input items `element N` instead of `line N` (a JSON array's elements).
    #[must_use]
    pub fn elements(mut self) -> Checker {
        self.unit = "element";
        self
    }

    /// The limits checked against.
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The refusal of line `number` for being longer than [`line_bytes_max`].
    #[must_use]
    pub fn too_long(&self, number: usize) -> LineError {
        let max = line_bytes_max(&self.limits);
        LineError {
            line: number,
            problem: Problem::LineTooLong,
            message: format!(
                "{} {number}: longer than {max} bytes, the most an input line may hold ({LINE_BYTES_PER_STORED_BYTE} times the event size limit of {} stored bytes); refused without reading the rest of it",
                self.unit, self.limits.event_bytes_max
            ),
        }
    }

    /// Parses one input line; a blank line is skipped (`None`). A missing `eventId` gets a
    /// UUID v7.
    ///
    /// # Errors
    /// The line's refusal: not an event, or longer than [`line_bytes_max`].
    pub fn parse_line(&self, line: &[u8], number: usize) -> Result<Option<Envelope>, LineError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > line_bytes_max(&self.limits) {
            return Err(self.too_long(number));
        }
        Envelope::from_json_slice(line, &mut || uuid_v7(&SystemClock, &SystemEntropy))
            .map(Some)
            .map_err(|e| self.invalid(number, e))
    }

    /// Builds the event of an array's element `number`; a missing `eventId` gets a UUID v7.
    ///
    /// # Errors
    /// The element's refusal.
    pub fn parse_value(
        &self,
        value: serde_json::Value,
        number: usize,
    ) -> Result<Envelope, LineError> {
        Envelope::from_json_value(value, &mut || uuid_v7(&SystemClock, &SystemEntropy))
            .map_err(|e| self.invalid(number, e))
    }

    fn invalid(&self, number: usize, e: impl std::fmt::Display) -> LineError {
        LineError {
            line: number,
            problem: Problem::Invalid,
            message: format!("{} {number}: {e}", self.unit),
        }
    }

    /// Checks one event as an append does (its form, its payload's shape, the conformance
    /// profile, its stored size); returns the bytes it takes in a batch (its frame).
    ///
    /// # Errors
    /// The refusal of line `number`.
    pub fn check(&mut self, event: &Envelope, number: usize) -> Result<u64, LineError> {
        let checked = (|| {
            self.limits
                .check_batch(std::slice::from_ref(event), self.conformance)?;
            self.body.clear();
            event
                .write_msgpack(&mut self.body)
                .map_err(|source| Error::InvalidEvent {
                    index: None,
                    source,
                })?;
            Ok((self.body.len() + FRAME_HEADER_LEN) as u64)
        })();
        checked.map_err(|e| refusal(self.unit, number, e))
    }

    /// Checks the event of line `number` and adds it to `batch`.
    ///
    /// # Errors
    /// The line's refusal, [`Problem::OverBatch`] when the batch would no longer fit.
    pub fn push(
        &mut self,
        batch: &mut InputBatch,
        number: usize,
        event: Envelope,
    ) -> Result<(), LineError> {
        let bytes = self.check(&event, number)?;
        if batch.is_full(&self.limits, bytes) {
            return Err(self.over_batch(batch, number, bytes));
        }
        batch.push(number, event, bytes);
        Ok(())
    }

    /// The refusal of an input that does not fit one batch once line `number`, of `bytes`, is
    /// added.
    #[must_use]
    pub fn over_batch(&self, batch: &InputBatch, number: usize, bytes: u64) -> LineError {
        let limits = &self.limits;
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
        LineError {
            line: number,
            problem: Problem::OverBatch,
            message: format!(
                "{} {number}: the input's {what} is {actual}, over the limit of {limit}",
                self.unit
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str) -> Vec<u8> {
        format!(r#"{{"type":"session.created","eventId":"{id}","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1"}}"#).into_bytes()
    }

    #[test]
    fn a_bad_line_is_named_by_number() {
        let checker = Checker::new(Limits::default(), None);
        assert!(checker.parse_line(&line("e1"), 1).unwrap().is_some());
        assert!(checker.parse_line(b"  \n", 2).unwrap().is_none());
        let error = checker.parse_line(b"{\"type\":", 3).unwrap_err();
        assert_eq!((error.line, error.problem), (3, Problem::Invalid));
        assert!(error.message.starts_with("line 3: "), "{}", error.message);
    }

    #[test]
    fn the_line_past_the_batch_limit_is_named() {
        let limits = Limits {
            batch_events_max: 2,
            ..Limits::default()
        };
        let mut checker = Checker::new(limits, None).elements();
        let mut batch = InputBatch::default();
        for n in 1..=2 {
            let event = checker
                .parse_line(&line(&format!("e{n}")), n)
                .unwrap()
                .unwrap();
            checker.push(&mut batch, n, event).unwrap();
        }
        let event = checker.parse_line(&line("e3"), 3).unwrap().unwrap();
        let error = checker.push(&mut batch, 3, event).unwrap_err();
        assert_eq!(error.problem, Problem::OverBatch);
        assert!(error
            .message
            .starts_with("element 3: the input's batch length (events) is 3"));
        assert_eq!(batch.len(), 2);
    }
}
