//! Standard output and standard error for every command. A reader that goes away early
//! (`journal read | head`) ends the command quietly, as it ends `cat`: every write to standard
//! output goes through [`Stdout`], which notes a closed pipe, and `main` then exits 0 without a
//! message, whatever error the closed pipe made the command return. Nothing prints with
//! `println!`, which panics on a closed pipe.

use std::fmt::Display;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to standard output met a closed pipe.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write to standard output met a closed pipe: the reader is gone, and the command
/// ends quietly.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Notes a closed pipe in `result`, and passes it on.
fn note<T>(result: io::Result<T>) -> io::Result<T> {
    if let Err(e) = &result {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        }
    }
    result
}

/// Standard output, locked: a writer that notes a closed pipe.
pub struct Stdout(io::StdoutLock<'static>);

/// Standard output, for a command's answer.
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        note(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        note(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        note(self.0.flush())
    }
}

/// Prints `text` and a newline on standard output.
///
/// # Errors
/// The write's error (a closed pipe is noted, see [`closed`]).
pub fn line(text: impl Display) -> io::Result<()> {
    let mut out = stdout();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Prints `text` on standard output, with no newline added.
///
/// # Errors
/// As [`line()`].
pub fn text(text: impl Display) -> io::Result<()> {
    let mut out = stdout();
    write!(out, "{text}")?;
    out.flush()
}

/// Writes `bytes` to standard output as they are.
///
/// # Errors
/// As [`line()`].
pub fn bytes(bytes: &[u8]) -> io::Result<()> {
    let mut out = stdout();
    out.write_all(bytes)?;
    out.flush()
}

/// Prints `text` and a newline on standard error. A failure is ignored: there is nowhere left
/// to report it.
pub fn warn(text: impl Display) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// ANSI colours when standard output is a terminal, plain text otherwise.
pub fn colour() -> journal_replay::text::Colour {
    if io::IsTerminal::is_terminal(&io::stdout()) {
        journal_replay::text::Colour::Ansi
    } else {
        journal_replay::text::Colour::Plain
    }
}
