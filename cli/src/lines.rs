//! Input read with a bound: JSON Lines (`append`, `append --stream`) one line at a time, and a
//! command's arguments from standard input. Input longer than the bound is refused as soon as
//! it is past it, never buffered whole: a 1 GiB line costs no more memory than a line at the
//! bound.

use std::io::{self, BufRead, Read};

use journal_engine::Limits;

use crate::{fail, Failure};

pub use journal_engine::input::line_bytes_max as bytes_max;
use journal_engine::input::{Checker, LINE_BYTES_PER_STORED_BYTE};

/// Why a line is refused for its length.
fn too_long(number: usize, limits: &Limits) -> Failure {
    Checker::new(*limits, None).too_long(number).into()
}

/// The lines of `reader`, numbered from 1, each at most [`bytes_max`] long.
pub struct Lines<R> {
    reader: R,
    max: usize,
    number: usize,
    limits: Limits,
}

impl<R: BufRead> Lines<R> {
    /// The lines of `reader`, bounded by `limits`' event size.
    pub fn new(reader: R, limits: Limits) -> Lines<R> {
        Lines {
            reader,
            max: bytes_max(&limits),
            number: 0,
            limits,
        }
    }

    /// Reads the next line into `line` (its newline included); returns its number, or `None`
    /// at the end of the input.
    ///
    /// # Errors
    /// A read error, or a line longer than the bound, named by its number (the bytes past the
    /// bound are not read).
    pub fn next_into(&mut self, line: &mut Vec<u8>) -> Result<Option<usize>, Failure> {
        line.clear();
        loop {
            let available = match self.reader.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(format!("line {}: {e}", self.number + 1))),
            };
            if available.is_empty() {
                if line.is_empty() {
                    return Ok(None);
                }
                self.number += 1;
                return Ok(Some(self.number));
            }
            let end = available.iter().position(|b| *b == b'\n');
            let chunk = match end {
                Some(i) => available.get(..=i).unwrap_or(available),
                None => available,
            };
            let content = line.len() + chunk.len() - usize::from(end.is_some());
            if content > self.max {
                return Err(too_long(self.number + 1, &self.limits));
            }
            line.extend_from_slice(chunk);
            let used = chunk.len();
            self.reader.consume(used);
            if end.is_some() {
                self.number += 1;
                return Ok(Some(self.number));
            }
        }
    }
}

/// Reads all of `reader` as text, refusing more than [`bytes_max`] bytes: a command's
/// arguments from standard input. `Err(message)` for input past the bound or not UTF-8.
///
/// # Errors
/// A read error.
pub fn read_bounded(reader: impl Read, limits: &Limits) -> Result<Result<String, String>, Failure> {
    let max = bytes_max(limits);
    let mut buffer = Vec::new();
    reader
        .take(u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut buffer)?;
    if buffer.len() > max {
        return Ok(Err(format!(
            "the arguments on standard input are longer than {max} bytes, the most they may hold ({LINE_BYTES_PER_STORED_BYTE} times the event size limit of {} stored bytes)",
            limits.event_bytes_max
        )));
    }
    Ok(String::from_utf8(buffer)
        .map_err(|e| format!("the arguments on standard input are not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Limits whose lines hold at most 16 bytes.
    fn small() -> Limits {
        Limits {
            event_bytes_max: 4,
            ..Limits::default()
        }
    }

    fn all(input: &[u8]) -> Result<Vec<(usize, Vec<u8>)>, String> {
        // A reader handing out 3 bytes at a time, so lines span several buffers.
        let reader = io::BufReader::with_capacity(3, input);
        let mut lines = Lines::new(reader, small());
        let mut out = Vec::new();
        let mut line = Vec::new();
        while let Some(n) = lines.next_into(&mut line).map_err(|f| f.message)? {
            out.push((n, line.clone()));
        }
        Ok(out)
    }

    #[test]
    fn lines_are_numbered_and_the_last_needs_no_newline() {
        let lines = all(b"a\n\nbcd\nlast").unwrap();
        let expected: Vec<(usize, Vec<u8>)> = vec![
            (1, b"a\n".to_vec()),
            (2, b"\n".to_vec()),
            (3, b"bcd\n".to_vec()),
            (4, b"last".to_vec()),
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn a_line_at_the_bound_is_read_and_one_past_it_is_refused_by_number() {
        let at = [b'x'; 16];
        let mut input = b"ok\n".to_vec();
        input.extend_from_slice(&at);
        input.extend_from_slice(b"\n");
        assert_eq!(all(&input).unwrap().len(), 2);
        input.extend_from_slice(&[b'y'; 17]);
        let error = all(&input).unwrap_err();
        assert!(error.starts_with("line 3: longer than 16 bytes"), "{error}");
    }

    #[test]
    fn arguments_past_the_bound_are_refused() {
        let read = |n: usize| read_bounded(&vec![b'a'; n][..], &small()).map_err(|f| f.message);
        assert_eq!(read(16), Ok(Ok("a".repeat(16))));
        let over = read(17).unwrap().unwrap_err();
        assert!(over.contains("longer than 16 bytes"), "{over}");
    }
}
