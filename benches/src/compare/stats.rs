//! Percentiles and medians over the rounds of a measurement.

use std::time::Duration;

/// The `q` quantile (0..=1) of sorted durations, nearest rank; zero when empty.
#[must_use]
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank within the slice"
    )]
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(i).copied().unwrap_or(Duration::ZERO)
}

/// The median of durations (sorts them in place).
#[must_use]
pub fn median_duration(values: &mut [Duration]) -> Duration {
    values.sort_unstable();
    percentile(values, 0.5)
}

/// The median of figures (sorts them in place); zero when empty.
#[must_use]
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Per-commit latencies summarised.
#[derive(Copy, Clone, Debug, Default)]
pub struct Latency {
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Worst.
    pub max: Duration,
}

impl Latency {
    /// Summarises latencies (sorts them in place).
    #[must_use]
    pub fn of(latencies: &mut [Duration]) -> Latency {
        latencies.sort_unstable();
        Latency {
            p50: percentile(latencies, 0.5),
            p99: percentile(latencies, 0.99),
            max: latencies.last().copied().unwrap_or_default(),
        }
    }
}
