//! Which segments an archive moves: the retention policies (before a position, older than an
//! age, down to a size), applied to the live log's oldest sealed segments, and the parsing of
//! ages (`90d`) and sizes (`10GiB`).

use std::sync::Arc;
use std::time::Duration;

use journal_format::Position;

use crate::error::{Error, Result};
use crate::log::read::{self, Chain};
use crate::log::{Log, Segment};

/// Which sealed segments to archive. Whatever the policy, only sealed segments are archived,
/// oldest first and without a gap, and never the segment holding the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Segments lying wholly before this position.
    Before(Position),
    /// Segments whose last event was recorded (its `recordedAt`) longer ago than this.
    OlderThan(Duration),
    /// The oldest segments, until the live log is at most this many bytes.
    KeepSize(u64),
}

/// The live segments `retention` selects, oldest first: a prefix of `live`.
pub(crate) fn select(
    log: &Log,
    live: &[Arc<Segment>],
    retention: Retention,
    now_ns: i64,
) -> Result<Vec<Arc<Segment>>> {
    let head = log.head().position;
    let candidates = live.iter().take_while(|s| {
        let state = s.snapshot();
        state.sealed && state.last_position < head
    });
    let mut chosen = Vec::new();
    match retention {
        Retention::Before(position) => {
            chosen.extend(
                candidates
                    .take_while(|s| s.snapshot().last_position < position)
                    .cloned(),
            );
        }
        Retention::OlderThan(age) => {
            let age_ns = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
            let cutoff = now_ns.saturating_sub(age_ns);
            for segment in candidates {
                if last_recorded_ns(log, segment.snapshot().last_position)? >= cutoff {
                    break;
                }
                chosen.push(Arc::clone(segment));
            }
        }
        Retention::KeepSize(limit) => {
            let mut total = 0u64;
            for s in live {
                total += file_len(s)?;
            }
            for segment in candidates {
                if total <= limit {
                    break;
                }
                total -= file_len(segment)?;
                chosen.push(Arc::clone(segment));
            }
        }
    }
    Ok(chosen)
}

/// The length of `segment`'s file.
pub(crate) fn file_len(segment: &Segment) -> Result<u64> {
    segment.file.len().map_err(Error::io_with(|| {
        format!("reading the length of segment {}", segment.id)
    }))
}

/// The `recordedAt` (ns) of the event at `position`, read from its frame header.
fn last_recorded_ns(log: &Log, position: Position) -> Result<i64> {
    let mut ns = i64::MAX;
    read::for_each_frame(log, position, position, Chain::Unverified, &mut |raw| {
        ns = raw.header.meta.recorded_at_ns;
        Ok(false)
    })?;
    Ok(ns)
}

/// `text`'s leading whole number and the unit after it; an error saying `text` is not `what`
/// when it has no number.
fn number_and_unit<'t>(text: &'t str, what: &str) -> Result<(u64, &'t str)> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n = digits
        .parse()
        .map_err(|_| Error::InvalidInput(format!("`{text}` is not {what}")))?;
    Ok((n, unit))
}

/// Parses an age: a whole number and a unit, `s`, `m`, `h`, `d` or `w` (`90d`, `12h`).
///
/// # Errors
/// [`Error::InvalidInput`] naming what is wrong.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let (n, unit) = number_and_unit(text, "an age such as 90d, 12h, 30m or 45s")?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(Error::InvalidInput(format!(
                "`{text}`: the age's unit must be s, m, h, d or w"
            )))
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(seconds)))
}

/// Parses a size: a whole number of bytes, or with a unit `KB`, `MB`, `GB`, `TB` (powers of
/// 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024).
///
/// # Errors
/// [`Error::InvalidInput`] naming what is wrong.
pub fn parse_size(text: &str) -> Result<u64> {
    let text = text.trim();
    let (n, unit) = number_and_unit(text, "a size such as 10GiB or 500MB")?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => {
            return Err(Error::InvalidInput(format!(
                "`{text}`: the size's unit must be B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            )))
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| Error::InvalidInput(format!("`{text}` is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_duration("90d").ok(),
            Some(Duration::from_secs(90 * 86_400))
        );
        assert_eq!(parse_duration("45s").ok(), Some(Duration::from_secs(45)));
        assert!(parse_duration("90").is_err());
        assert!(parse_duration("d").is_err());
        assert_eq!(parse_size("10GiB").ok(), Some(10 << 30));
        assert_eq!(parse_size("500MB").ok(), Some(500_000_000));
        assert_eq!(parse_size("4096").ok(), Some(4096));
        let err = parse_size("3 parsecs").expect_err("refused");
        assert!(err.to_string().contains("unit"), "{err}");
    }
}
