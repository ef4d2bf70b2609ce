//! The seams through which the engine reads time and randomness, so that a simulation can
//! replace both and one seed reproduces one run.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The journal's clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Nanoseconds since the Unix epoch, UTC.
    fn now_unix_ns(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one place the wall clock is read.
    fn now_unix_ns(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A source of random bytes.
pub trait Entropy: Send + Sync + fmt::Debug {
    /// Fills `buf` with random bytes.
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's random source (through `uuid`'s v4 generator, which uses it).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEntropy;

impl Entropy for SystemEntropy {
    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(16) {
            let random = uuid::Uuid::new_v4().into_bytes();
            let n = chunk.len();
            chunk.copy_from_slice(random.get(..n).unwrap_or_default());
        }
    }
}

/// A new UUID v7 from the given clock and entropy.
pub fn uuid_v7(clock: &dyn Clock, entropy: &dyn Entropy) -> String {
    let ms = u64::try_from(clock.now_unix_ns() / 1_000_000).unwrap_or(0);
    let mut random = [0u8; 10];
    entropy.fill(&mut random);
    uuid::Builder::from_unix_timestamp_millis(ms, &random)
        .into_uuid()
        .to_string()
}

/// A new UUID v4 from the given entropy: an id that says nothing of when it was made (and reads
/// no clock).
pub fn uuid_v4(entropy: &dyn Entropy) -> String {
    let mut random = [0u8; 16];
    entropy.fill(&mut random);
    uuid::Builder::from_random_bytes(random)
        .into_uuid()
        .to_string()
}
