//! How the pages write numbers, times and durations: thousands separated, times as the
//! producer gave them cut to the second, durations in the largest unit that fits.

use journal_format::time_fmt::parse_rfc3339_ns;

/// `1234567` as `1,234,567`.
#[must_use]
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in milliseconds as `850 ms`, `12.4 s`, `3 min 05 s` or `2 h 07 min`.
#[must_use]
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// The milliseconds from `start` to `end` (RFC 3339 times); `None` when either does not
/// parse or time runs backwards.
#[must_use]
pub fn between_ms(start: &str, end: &str) -> Option<u64> {
    let (a, b) = (parse_rfc3339_ns(start).ok()?, parse_rfc3339_ns(end).ok()?);
    u64::try_from((b - a) / 1_000_000).ok()
}

/// An RFC 3339 time as `2026-05-11 23:00:02` (the zone as given, dropped; a time that is not
/// RFC 3339 as it is).
#[must_use]
pub fn time(text: &str) -> String {
    match (text.get(..10), text.get(11..19)) {
        (Some(day), Some(clock)) if text.len() >= 19 => format!("{day} {clock}"),
        _ => text.to_string(),
    }
}

/// The clock part of an RFC 3339 time, `23:00:02`.
#[must_use]
pub fn clock(text: &str) -> String {
    text.get(11..19).unwrap_or(text).to_string()
}

/// US dollars, `$0.0123` below a cent and `$12.34` above.
#[must_use]
pub fn usd(value: f64) -> String {
    if value < 0.01 {
        format!("${value:.4}")
    } else {
        format!("${value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(12_400), "12.4 s");
        assert_eq!(duration_ms(185_000), "3 min 05 s");
        assert_eq!(duration_ms(7_620_000), "2 h 07 min");
        assert_eq!(
            between_ms("2026-05-11T23:00:00Z", "2026-05-11T23:00:01.5Z"),
            Some(1500)
        );
        assert_eq!(
            between_ms("2026-05-11T23:00:01Z", "2026-05-11T23:00:00Z"),
            None
        );
        assert_eq!(time("2026-05-11T23:00:02.123Z"), "2026-05-11 23:00:02");
        assert_eq!(time("yesterday"), "yesterday");
        assert_eq!(usd(0.00123), "$0.0012");
        assert_eq!(usd(12.345), "$12.35");
    }
}
