//! [`Checkpoint`] and its body: the five lines a signature covers, written in one canonical form
//! and read back only in that form.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use time::OffsetDateTime;

use super::{control_character_at, CheckpointError, ORIGIN_LEN_MAX};
use crate::merkle::TreeHash;
use crate::types::{ChainHash, Position};

/// What the journal states at one moment: the tree head (size and root of the Merkle tree over
/// its events), the chain head (the position and link of the hash chain) and the time, under
/// the journal's identity. Signed, it is a [`super::SignedCheckpoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The journal's identity, [`Checkpoint::origin_for`] its id.
    pub origin: String,
    /// The number of leaves (events) of the tree.
    pub tree_size: u64,
    /// The root of the tree of `tree_size` leaves.
    pub root: TreeHash,
    /// The position of the chain head the checkpoint names.
    pub chain_position: Position,
    /// The chain link at `chain_position`.
    pub chain_hash: ChainHash,
    /// When the checkpoint was made: nanoseconds since the Unix epoch, UTC.
    pub time_ns: i64,
}

/// What each line of a body holds, for error messages.
const LINES: [&str; 5] = ["origin", "tree size", "root", "chain", "time"];

impl Checkpoint {
    /// The origin of the journal whose id is `journal_id`: `agent-journal/<journal id>`.
    #[must_use]
    pub fn origin_for(journal_id: &str) -> String {
        format!("agent-journal/{journal_id}")
    }

    /// The body, the text a signature covers: five lines, each ending in a newline.
    ///
    /// ```text
    /// <origin>
    /// <tree size, decimal>
    /// <root, base64 of its 32 bytes>
    /// chain <position> <chain hash, 64 lower-case hex digits>
    /// time <YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ>
    /// ```
    #[must_use]
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\nchain {} {}\ntime {}\n",
            self.origin,
            self.tree_size,
            BASE64.encode(self.root.0),
            self.chain_position.0,
            self.chain_hash.to_hex(),
            format_time(self.time_ns),
        )
    }

    /// Checks that the body of this checkpoint reads back as it: an origin that is a non-empty
    /// line of at most [`ORIGIN_LEN_MAX`] bytes without control characters.
    ///
    /// # Errors
    /// [`CheckpointError::InvalidOrigin`] saying what is wrong with the origin.
    pub fn check(&self) -> Result<(), CheckpointError> {
        check_origin(&self.origin)
    }

    /// Reads a body as [`Checkpoint::body`] writes it, and nothing else: every other text
    /// (another number form, upper-case hex, a missing or extra line) is refused, so that one
    /// checkpoint has one body.
    ///
    /// # Errors
    /// [`CheckpointError::Body`] naming the line and what is wrong with it.
    pub fn parse_body(text: &str) -> Result<Checkpoint, CheckpointError> {
        let Some(lines) = text.strip_suffix('\n') else {
            return Err(body_error(
                LINES.len(),
                "the body must end with a newline".into(),
            ));
        };
        let mut lines = lines.split('\n');
        let mut next = |n: usize| {
            lines
                .next()
                .ok_or_else(|| body_error(n, "missing: a checkpoint body has 5 lines".into()))
        };
        let origin = next(1)?;
        check_origin(origin).map_err(|e| body_error(1, e.to_string()))?;
        let tree_size = parse_decimal(next(2)?).map_err(|p| body_error(2, p))?;
        let root = parse_root(next(3)?).map_err(|p| body_error(3, p))?;
        let (chain_position, chain_hash) = parse_chain(next(4)?).map_err(|p| body_error(4, p))?;
        let time_ns = parse_time(next(5)?).map_err(|p| body_error(5, p))?;
        if lines.next().is_some() {
            return Err(CheckpointError::Body {
                line: LINES.len() + 1,
                what: "none",
                problem: "a checkpoint body has 5 lines".into(),
            });
        }
        let checkpoint = Checkpoint {
            origin: origin.to_owned(),
            tree_size,
            root,
            chain_position: Position(chain_position),
            chain_hash,
            time_ns,
        };
        debug_assert_eq!(
            checkpoint.body(),
            text,
            "a body parses only in its one form"
        );
        Ok(checkpoint)
    }
}

fn body_error(line: usize, problem: String) -> CheckpointError {
    CheckpointError::Body {
        line,
        what: LINES.get(line - 1).copied().unwrap_or("none"),
        problem,
    }
}

fn check_origin(origin: &str) -> Result<(), CheckpointError> {
    let problem = if origin.is_empty() {
        Some("is empty")
    } else if origin.len() > ORIGIN_LEN_MAX {
        Some("is longer than 1024 bytes")
    } else if control_character_at(origin).is_some() || origin.contains('\n') {
        Some("contains a control character or a newline")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(CheckpointError::InvalidOrigin {
            origin: origin.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// A decimal `u64` without sign or leading zeros.
fn parse_decimal(text: &str) -> Result<u64, String> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return Err(format!(
            "{text:?} is not a decimal number without sign or leading zeros"
        ));
    }
    text.parse::<u64>()
        .map_err(|e| format!("{text:?} is not a 64-bit number: {e}"))
}

fn parse_root(text: &str) -> Result<TreeHash, String> {
    let bytes = BASE64
        .decode(text)
        .map_err(|e| format!("{text:?} is not canonical base64: {e}"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(TreeHash)
        .map_err(|_| format!("a root is 32 bytes, not {}", bytes.len()))
}

fn parse_chain(text: &str) -> Result<(u64, ChainHash), String> {
    let rest = text
        .strip_prefix("chain ")
        .ok_or_else(|| format!("{text:?} does not start with \"chain \""))?;
    let (position, hash) = rest
        .split_once(' ')
        .ok_or_else(|| format!("{text:?} is not \"chain <position> <hash>\""))?;
    let position = parse_decimal(position)?;
    let hash_ok = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hash_ok {
        return Err(format!(
            "the chain hash {hash:?} is not 64 lower-case hex digits"
        ));
    }
    ChainHash::from_hex(hash).map(|h| (position, h))
}

fn parse_time(text: &str) -> Result<i64, String> {
    let time = text
        .strip_prefix("time ")
        .ok_or_else(|| format!("{text:?} does not start with \"time \""))?;
    let ns = crate::time_fmt::parse_rfc3339_ns(time)?;
    let ns = i64::try_from(ns)
        .map_err(|_| format!("{time:?} is beyond the nanoseconds an i64 counts from 1970"))?;
    if format_time(ns) != time {
        return Err(format!(
            "{time:?} is not in the form YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ (UTC, nine fractional digits)"
        ));
    }
    Ok(ns)
}

/// `YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ`: UTC, always nine fractional digits, so that one time has
/// one text. Every `i64` of nanoseconds (1677 to 2262) has a four-digit year.
pub(crate) fn format_time(ns: i64) -> String {
    // Every i64 of nanoseconds is inside the range `time` represents; the fallback is never
    // taken.
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: Checkpoint::origin_for("j1"),
            tree_size: 5,
            root: TreeHash([0xab; 32]),
            chain_position: Position(5),
            chain_hash: ChainHash([0x11; 32]),
            time_ns: 1_795_773_600_123_456_789,
        }
    }

    #[test]
    fn the_body_is_five_lines_and_parses_back() {
        let c = checkpoint();
        let body = c.body();
        let expected = format!(
            "agent-journal/j1\n5\n{}\nchain 5 {}\ntime 2026-11-27T10:00:00.123456789Z\n",
            BASE64.encode([0xab; 32]),
            "11".repeat(32)
        );
        assert_eq!(body, expected);
        assert_eq!(Checkpoint::parse_body(&body), Ok(c));
    }

    #[test]
    fn times_have_nine_fractional_digits_at_both_ends_of_the_range() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(format_time(-1), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(format_time(i64::MAX), "2262-04-11T23:47:16.854775807Z");
        assert_eq!(format_time(i64::MIN), "1677-09-21T00:12:43.145224192Z");
        for ns in [0, -1, i64::MAX, i64::MIN, 1_000_000_000] {
            assert_eq!(parse_time(&format!("time {}", format_time(ns))), Ok(ns));
        }
    }

    #[test]
    fn only_the_canonical_body_parses() {
        let body = checkpoint().body();
        let cases = [
            (body.replacen("\n5\n", "\n05\n", 1), 2, "leading zeros"),
            (body.replacen("\n5\n", "\n+5\n", 1), 2, "leading zeros"),
            (body.replacen("\n5\n", "\n\n", 1), 2, "leading zeros"),
            (
                body.replacen("chain 5", "chain 5 ", 1),
                4,
                "64 lower-case hex",
            ),
            (
                body.replace(&"11".repeat(32), &"1A".repeat(32)),
                4,
                "lower-case",
            ),
            (body.replacen("chain", "chains", 1), 4, "\"chain \""),
            (body.replacen(".123456789Z", "Z", 1), 5, "nine fractional"),
            (
                body.replacen(".123456789Z", ".123456789+00:00", 1),
                5,
                "nine fractional",
            ),
            (body.replacen("time 2026", "time 9999999", 1), 5, "RFC 3339"),
            (body.trim_end().to_owned(), 5, "end with a newline"),
            (format!("{body}extra\n"), 6, "5 lines"),
            (body.replacen("agent-journal/j1", "", 1), 1, "empty"),
            (body.replacen("j1", "j\u{1}", 1), 1, "control character"),
        ];
        for (text, line, says) in cases {
            let err = Checkpoint::parse_body(&text).unwrap_err();
            let CheckpointError::Body { line: got, .. } = &err else {
                panic!("{text:?}: {err}")
            };
            assert_eq!(*got, line, "{text:?}: {err}");
            assert!(err.to_string().contains(says), "{text:?}: {err}");
        }
        let cut: String = body.lines().take(3).map(|l| format!("{l}\n")).collect();
        let err = Checkpoint::parse_body(&cut).unwrap_err();
        assert!(err.to_string().contains("line 4 (chain): missing"), "{err}");
    }

    #[test]
    fn a_root_must_be_canonical_base64_of_32_bytes() {
        let good = BASE64.encode([0xab; 32]);
        assert!(parse_root(&good).is_ok());
        // The last character carries two unused bits; setting one is another text.
        let mut stray = good.clone().into_bytes();
        let last = stray.len() - 2;
        stray[last] += 1;
        let stray = String::from_utf8(stray).unwrap();
        assert!(parse_root(&stray).unwrap_err().contains("canonical base64"));
        assert!(parse_root(&good.replace('=', "")).is_err());
        assert!(parse_root(&BASE64.encode([1; 31]))
            .unwrap_err()
            .contains("not 31"));
    }

    #[test]
    fn origins_are_checked() {
        let mut c = checkpoint();
        assert_eq!(c.check(), Ok(()));
        c.origin = "a\nb".into();
        assert!(c.check().unwrap_err().to_string().contains("newline"));
        c.origin = "o".repeat(1025);
        assert!(c.check().is_err());
        c.origin = String::new();
        assert!(c.check().is_err());
    }
}
