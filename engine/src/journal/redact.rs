//! Redaction by crypto-shredding: the keys that seal a session's, a run's or an event's
//! content destroyed durably, a `journal.redacted` fact appended that names what, by whom and
//! why, and the redacted events' blobs destroyed (docs/REDACTION.md).

use std::collections::BTreeSet;

use journal_format::seal::{Sealed, REDACTED_EVENT_TYPE};
use journal_format::{time_fmt, Envelope, Position};
use serde_json::{json, Map};

use crate::error::{Error, Result};
use crate::journal::append::AppendOptions;
use crate::journal::Journal;
use crate::keys::{Keys, Shred, Step};
use crate::write::Appended;

/// What to redact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redaction {
    /// Every event of a session (`sessionId`).
    Session(String),
    /// Every event of a run (`runId`).
    Run(String),
    /// One event, by id.
    Event(String),
}

impl Redaction {
    fn scope(&self) -> (&'static str, &str) {
        match self {
            Redaction::Session(id) => ("session", id),
            Redaction::Run(id) => ("run", id),
            Redaction::Event(id) => ("event", id),
        }
    }

    fn matches(&self, event: &Envelope) -> bool {
        match self {
            Redaction::Session(id) => event.session_id.as_deref() == Some(id),
            Redaction::Run(id) => event.run_id.as_deref() == Some(id),
            Redaction::Event(id) => event.event_id == *id,
        }
    }
}

/// What a redaction did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Redacted {
    /// The `journal.redacted` fact.
    pub fact: Appended,
    /// How many events' content was made unreadable.
    pub events: u64,
    /// The data keys destroyed whole (`<subject>/<generation>`).
    pub keys_destroyed: Vec<String>,
    /// The blobs destroyed (hex).
    pub blobs_destroyed: Vec<String>,
}

impl Journal {
    /// Redacts `what`: destroys the keys its events' content is sealed under, durably (the key
    /// store replaced whole, its old copy overwritten), then appends a `journal.redacted` fact
    /// (`by`, `reason`), then destroys the redacted events' blobs. Other events sealed under the
    /// same data key keep keys of their own. A crash at any step leaves the keys and no fact,
    /// or the fact (appended by the next open if need be) and no keys.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the journal is not encrypted, when nothing sealed matches,
    /// or when a matching event was written before the journal was encrypted (its plaintext
    /// cannot be shredded); I/O errors.
    pub fn redact(&self, what: &Redaction, by: &str, reason: Option<&str>) -> Result<Redacted> {
        self.redact_observed(what, by, reason, &mut |_| {})
    }

    /// [`Journal::redact`], calling `step` after each durable step (for crash tests).
    pub(crate) fn redact_observed(
        &self,
        what: &Redaction,
        by: &str,
        reason: Option<&str>,
        step: &mut dyn FnMut(Step),
    ) -> Result<Redacted> {
        let keys = self.keys_for_redaction()?;
        let found = self.find_targets(what)?;
        let (scope, id) = what.scope();
        let fact_id = self.new_event_id();
        let timestamp = time_fmt::format_rfc3339_ns(self.inner.options.clock.now_unix_ns());
        let mut fact = Envelope::new(REDACTED_EVENT_TYPE, fact_id.clone(), timestamp.clone());
        match what {
            Redaction::Session(s) => fact.session_id = Some(s.clone()),
            Redaction::Run(r) => {
                fact.run_id = Some(r.clone());
                fact.session_id = found.session.clone();
            }
            Redaction::Event(_) => fact.session_id = found.session.clone(),
        }
        let events = found
            .shred
            .targets
            .values()
            .map(BTreeSet::len)
            .sum::<usize>() as u64;
        let key_refs: Vec<&String> = found.shred.targets.keys().collect();
        fact.payload = Some(json!({
            "scope": scope, "target": id, "by": by, "reason": reason,
            "events": events, "keys": key_refs,
        }));
        let mut why = Map::new();
        why.insert("factEventId".into(), json!(fact_id));
        why.insert("by".into(), json!(by));
        why.insert("reason".into(), json!(reason));
        why.insert("at".into(), json!(timestamp));
        let fact_json = serde_json::to_value(&fact)
            .map_err(|e| Error::Internal(format!("the redaction fact: {e}")))?;
        let keys_destroyed = keys.destroy(&found.shred, &why, fact_json, step)?;
        let mut appended = self.append_off_runtime(fact)?;
        step(Step::FactAppended);
        keys.clear_pending()?;
        let mut blobs_destroyed = Vec::new();
        for hex in &found.blobs {
            if self.inner.blobs.shred(hex)? {
                blobs_destroyed.push(hex.clone());
            }
        }
        Ok(Redacted {
            fact: appended
                .pop()
                .ok_or_else(|| Error::Internal("no answer for the redaction fact".into()))?,
            events,
            keys_destroyed,
            blobs_destroyed,
        })
    }

    /// Appends `fact` and waits until it is durable, on a thread of its own: redaction is
    /// blocking work, and its callers (the CLI, an open) may be on an async runtime's thread,
    /// where waiting for the writer's answer is not allowed.
    fn append_off_runtime(&self, fact: Envelope) -> Result<Vec<Appended>> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.append_batch_blocking(vec![fact], AppendOptions::default()))
                .join()
                .unwrap_or_else(|_| {
                    Err(Error::Internal(
                        "the redaction fact's append panicked".into(),
                    ))
                })
        })
    }

    fn keys_for_redaction(&self) -> Result<&Keys> {
        self.inner.keys.as_deref().ok_or_else(|| {
            Error::InvalidInput(
                "this journal is not encrypted (or was opened without its master key): its content cannot be redacted by destroying keys".into(),
            )
        })
    }

    /// The sealed events `what` names, by key, with the other events of those keys, read from
    /// the log as stored (two passes: the targets, then the others of their keys).
    fn find_targets(&self, what: &Redaction) -> Result<Found> {
        let mut found = Found::default();
        let mut plaintext = 0u64;
        let (scope, id) = what.scope();
        for event in self.read_stored(Position::FIRST, None) {
            let event = event?.envelope;
            if !what.matches(&event) || event.event_type == REDACTED_EVENT_TYPE {
                continue;
            }
            let sealed = Sealed::of(&event)
                .map_err(|e| Error::Keys(format!("event {}: {e}", event.event_id)))?;
            let Some(sealed) = sealed else {
                plaintext += 1;
                continue;
            };
            if found.session.is_none() {
                found.session.clone_from(&event.session_id);
            }
            found.blobs.extend(event.blob_refs().map(str::to_string));
            found
                .shred
                .targets
                .entry(sealed.key)
                .or_default()
                .insert(event.event_id);
        }
        if plaintext > 0 {
            return Err(Error::InvalidInput(format!(
                "{plaintext} events of {scope} {id} were written before the journal was encrypted: their content is stored in plaintext and cannot be redacted by destroying a key"
            )));
        }
        if found.shred.targets.is_empty() {
            return Err(Error::InvalidInput(format!(
                "no sealed event of {scope} {id} is in the journal"
            )));
        }
        for event in self.read_stored(Position::FIRST, None) {
            let event = event?.envelope;
            let Ok(Some(sealed)) = Sealed::of(&event) else {
                continue;
            };
            if let Some(targets) = found.shred.targets.get(&sealed.key) {
                if !targets.contains(&event.event_id) {
                    found
                        .shred
                        .others
                        .entry(sealed.key)
                        .or_default()
                        .insert(event.event_id);
                }
            }
        }
        Ok(found)
    }

    /// Appends the redaction facts a crash kept from being appended after their keys were
    /// destroyed (recorded in the key store with the destruction), then forgets them.
    pub(crate) fn append_pending_redactions(&self) -> Result<()> {
        let Some(keys) = self.inner.keys.as_deref() else {
            return Ok(());
        };
        let pending = keys.pending();
        if pending.is_empty() {
            return Ok(());
        }
        for value in pending {
            let fact = Envelope::from_json_value(value, &mut || String::new()).map_err(|e| {
                Error::Keys(format!("a pending redaction fact in the key store: {e}"))
            })?;
            if self.get(&fact.event_id)?.is_none() {
                self.append_off_runtime(fact)?;
            }
        }
        keys.clear_pending()
    }
}

/// What a redaction found in the log.
#[derive(Default)]
struct Found {
    shred: Shred,
    /// The first target's session, named by the fact.
    session: Option<String>,
    blobs: BTreeSet<String>,
}
