//! The JetStream stream events are replicated to: created when missing, with the replication
//! factor and limits given, and checked to take the subject when it exists.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{nats, Error, Result};

/// How the stream is made when it does not exist.
#[derive(Clone, Debug)]
pub struct StreamLimits {
    /// Copies JetStream keeps of each message (its nodes' Raft group): 1, 3 or 5.
    pub replicas: usize,
    /// The most bytes the stream holds (0: no limit); past it new messages are refused, never
    /// old ones dropped, so nothing is lost silently.
    pub max_bytes: i64,
    /// How long a message is kept (zero: for ever).
    pub max_age: Duration,
    /// How long JetStream remembers a message id to drop a repeated publish.
    pub duplicate_window: Duration,
}

impl Default for StreamLimits {
    fn default() -> StreamLimits {
        StreamLimits {
            replicas: 1,
            max_bytes: 0,
            max_age: Duration::ZERO,
            duplicate_window: Duration::from_secs(120),
        }
    }
}

/// The stream `name`, created with `limits` to take `subject` when it does not exist.
pub(crate) async fn ensure(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    limits: &StreamLimits,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        num_replicas: limits.replicas,
        max_bytes: if limits.max_bytes == 0 {
            -1
        } else {
            limits.max_bytes
        },
        max_age: limits.max_age,
        duplicate_window: limits.duplicate_window,
        discard: stream::DiscardPolicy::New,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let mut stream = js
        .get_or_create_stream(config)
        .await
        .map_err(|e| nats(&format!("creating stream {name}"), e))?;
    let info = stream
        .info()
        .await
        .map_err(|e| nats(&format!("reading stream {name}"), e))?;
    let subjects = &info.config.subjects;
    let takes = subjects
        .iter()
        .any(|s| s == subject || subject_matches(s, subject));
    if !takes {
        return Err(Error::Stream {
            stream: name.to_string(),
            reason: format!(
                "it exists and does not take subject {subject} (it takes {subjects:?}): choose another --stream"
            ),
        });
    }
    if subjects.len() != 1 || subjects[0] != subject {
        // Each publish names the stream sequence it must follow (publish.rs): another
        // subject's messages would refuse every one.
        return Err(Error::Stream {
            stream: name.to_string(),
            reason: format!(
                "it takes {subjects:?}, more than this journal's subject {subject}; a journal is replicated to a stream of its own: choose another --stream"
            ),
        });
    }
    Ok(stream)
}

/// The stream `name`, which must exist.
pub(crate) async fn existing(js: &jetstream::Context, name: &str) -> Result<stream::Stream> {
    js.get_stream(name)
        .await
        .map_err(|e| nats(&format!("opening stream {name}"), e))
}

/// Whether the subject pattern `pattern` (with `*` and `>` wildcards) matches `subject`.
fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::subject_matches;

    #[test]
    fn wildcards_match_as_nats_matches_them() {
        assert!(subject_matches("journal.>", "journal.abc"));
        assert!(subject_matches("journal.*", "journal.abc"));
        assert!(!subject_matches("journal.*", "journal.abc.d"));
        assert!(!subject_matches("other.>", "journal.abc"));
        assert!(subject_matches("journal.abc", "journal.abc"));
    }
}
