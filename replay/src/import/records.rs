//! Splitting a source file into records, each with the line it starts on: the lines of a
//! JSON-lines file, or the elements of a JSON array. A record that is not a JSON object is
//! damaged: refused with its line, or skipped under `--skip-bad`.

use serde::de::{Deserializer as _, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{ImportError, Options, Skipped};

/// One record of a source file.
pub(super) struct Record {
    /// The line (1-based) it starts on.
    pub line: u64,
    /// The record.
    pub value: Map<String, Value>,
}

/// The records of a file, and the damaged ones skipped.
pub(super) struct Records {
    pub records: Vec<Record>,
    pub skipped: Vec<Skipped>,
    /// Records read, skipped ones included.
    pub read: u64,
}

fn damaged(file: &str, line: u64, message: impl Into<String>) -> ImportError {
    ImportError::Damaged {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

/// Refuses a damaged record, or records it as skipped under `--skip-bad`.
pub(super) fn bad(
    file: &str,
    options: &Options,
    skipped: &mut Vec<Skipped>,
    line: u64,
    message: String,
) -> Result<(), ImportError> {
    if options.skip_bad {
        skipped.push(Skipped {
            line,
            error: message,
        });
        Ok(())
    } else {
        Err(damaged(file, line, message))
    }
}

/// The lines of a JSON-lines file; blank lines are not records.
pub(super) fn json_lines(
    file: &str,
    bytes: &[u8],
    options: &Options,
) -> Result<Records, ImportError> {
    let mut out = Records {
        records: Vec::new(),
        skipped: Vec::new(),
        read: 0,
    };
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let number = i as u64 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.read += 1;
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(value)) => out.records.push(Record {
                line: number,
                value,
            }),
            Ok(other) => bad(
                file,
                options,
                &mut out.skipped,
                number,
                format!("a record is a JSON object, not {}", kind_of(&other)),
            )?,
            Err(e) => bad(
                file,
                options,
                &mut out.skipped,
                number,
                format!("not a JSON record ({e})"),
            )?,
        }
    }
    if out.read == 0 {
        return Err(ImportError::NotImportable {
            file: file.to_string(),
            message: "the file holds no records".into(),
        });
    }
    Ok(out)
}

/// The elements of a JSON array. Damage inside the array stops parsing at its line; under
/// `--skip-bad` the elements before it are kept and the rest is reported as skipped.
pub(super) fn json_array(
    file: &str,
    bytes: &[u8],
    options: &Options,
) -> Result<Records, ImportError> {
    let line_at = |offset: usize| -> u64 {
        1 + bytes
            .get(..offset)
            .map_or(0, |b| b.iter().filter(|c| **c == b'\n').count()) as u64
    };
    let mut raw: Vec<&RawValue> = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = de
        .deserialize_seq(Collect(&mut raw))
        .and_then(|()| de.end());
    let mut out = Records {
        records: Vec::new(),
        skipped: Vec::new(),
        read: 0,
    };
    for element in &raw {
        out.read += 1;
        // The element is a slice of `bytes`: its offset gives its line.
        let offset = (element.get().as_ptr() as usize).saturating_sub(bytes.as_ptr() as usize);
        let line = line_at(offset);
        match serde_json::from_str::<Value>(element.get()) {
            Ok(Value::Object(value)) => out.records.push(Record { line, value }),
            Ok(other) => bad(
                file,
                options,
                &mut out.skipped,
                line,
                format!("a record is a JSON object, not {}", kind_of(&other)),
            )?,
            Err(e) => bad(file, options, &mut out.skipped, line, e.to_string())?,
        }
    }
    if let Err(e) = parsed {
        let message = format!("not a JSON array of records ({e})");
        if options.skip_bad && !raw.is_empty() {
            out.read += 1;
            out.skipped.push(Skipped {
                line: e.line() as u64,
                error: format!("{message}; the rest of the file is skipped"),
            });
        } else {
            return Err(damaged(file, e.line() as u64, message));
        }
    }
    if out.read == 0 {
        return Err(ImportError::NotImportable {
            file: file.to_string(),
            message: "the file holds no records".into(),
        });
    }
    Ok(out)
}

/// Collects the elements of an array as raw slices, keeping those read before an error.
struct Collect<'a, 'de>(&'a mut Vec<&'de RawValue>);

impl<'de> Visitor<'de> for Collect<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<&'de RawValue>()? {
            self.0.push(element);
        }
        Ok(())
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A record's string field.
pub(super) fn str_of<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

/// The string at a JSON pointer below a value.
pub(super) fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// The value at a JSON pointer below a record.
pub(super) fn ptr<'a>(record: &'a Map<String, Value>, pointer: &str) -> Option<&'a Value> {
    let path = pointer.strip_prefix('/')?;
    match path.split_once('/') {
        Some((first, rest)) => record.get(first)?.pointer(&format!("/{rest}")),
        None => record.get(path),
    }
}
