//! RFC 3339 timestamps: checking the producer's `timestamp` and formatting the journal's
//! `recordedAt` (nanoseconds since the Unix epoch, UTC).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Checks that `text` is an RFC 3339 date-time, returning it as nanoseconds since the Unix epoch.
///
/// # Errors
/// Returns the parser's explanation when the text is not RFC 3339.
pub fn parse_rfc3339_ns(text: &str) -> Result<i128, String> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map(OffsetDateTime::unix_timestamp_nanos)
        .map_err(|e| format!("{text:?} is not an RFC 3339 date-time: {e}"))
}

/// Formats nanoseconds since the Unix epoch as RFC 3339 in UTC with nanosecond precision, e.g.
/// `2026-11-22T02:08:17.123456789Z`. Out-of-range values (beyond year 9999) are clamped to the
/// range RFC 3339 can express, so formatting never fails.
#[must_use]
pub fn format_rfc3339_ns(unix_ns: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(&Rfc3339)
        .unwrap_or_else(|_| String::from("1970-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_nanoseconds() {
        let text = format_rfc3339_ns(1_700_000_000_123_456_789);
        assert_eq!(text, "2023-11-14T22:13:20.123456789Z");
        assert_eq!(parse_rfc3339_ns(&text), Ok(1_700_000_000_123_456_789));
    }

    #[test]
    fn rejects_non_rfc3339() {
        assert!(parse_rfc3339_ns("2026-05-11 10:00:00").is_err());
        assert!(parse_rfc3339_ns("yesterday").is_err());
        assert!(parse_rfc3339_ns("2026-05-11T10:00:00+01:00").is_ok());
    }
}
