//! Redaction by crypto-shredding: the keys that seal a session's, a run's or an event's
//! content destroyed durably, a `journal.redacted` fact appended that names what, by whom and
//! why, and the redacted events' blobs destroyed (docs/REDACTION.md).

use std::collections::BTreeSet;

use journal_format::envelope::BLOB_REF_PREFIX;
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
    /// Redacts `what`: destroys the redacted events' blobs, then the keys their content is
    /// sealed under, durably (the key store replaced whole, its old copy overwritten), then
    /// appends a `journal.redacted` fact (`by`, `reason`). Other events sealed under the same
    /// data key keep keys of their own. A crash at any step leaves the keys and no fact, or the
    /// fact (appended by the next open if need be) and no keys.
    ///
    /// Needs the journal to itself for the time it takes (the `journal redact` command holds
    /// its lock): an event appended to the redacted subject while it runs may be sealed under a
    /// key it destroys without being counted among the redacted.
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
        // The blobs go first: the fact a crash leaves pending is appended at the next open, but
        // nothing there would find these blobs again. A crash before the keys are destroyed
        // leaves the redaction to be asked again, its blobs already gone.
        let mut blobs_destroyed = Vec::new();
        for hex in &found.blobs {
            if self.inner.blobs.shred(hex)? {
                blobs_destroyed.push(hex.clone());
            }
        }
        let keys_destroyed = keys.destroy(&found.shred, &why, fact_json, step)?;
        let mut appended = self.append_off_runtime(fact)?;
        step(Step::FactAppended);
        keys.clear_pending()?;
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
        let keys = self.keys_for_redaction()?;
        for stored in self.read_stored(Position::FIRST, None) {
            let mut stored = stored?;
            if !what.matches(&stored.envelope) || stored.envelope.event_type == REDACTED_EVENT_TYPE
            {
                continue;
            }
            let event = stored.envelope.clone();
            let sealed = Sealed::of(&event)
                .map_err(|e| Error::Keys(format!("event {}: {e}", event.event_id)))?;
            let Some(sealed) = sealed else {
                plaintext += 1;
                continue;
            };
            if found.session.is_none() {
                found.session.clone_from(&event.session_id);
            }
            // The blobs it names, its sealed content's included.
            keys.open(&mut stored)?;
            blob_refs(
                &serde_json::to_value(&stored.envelope).unwrap_or_default(),
                &mut found.blobs,
            );
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

/// Every blob reference (`blake3:<64 hex digits>`) among the strings of `value`, as hex.
fn blob_refs(value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::String(text) => {
            if let Some(hex) = text.strip_prefix(BLOB_REF_PREFIX) {
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    out.insert(hex.to_string());
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| blob_refs(v, out)),
        serde_json::Value::Object(fields) => fields.values().for_each(|v| blob_refs(v, out)),
        _ => {}
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use journal_format::{Envelope, Position};
    use serde_json::json;

    use super::*;
    use crate::keys::{Encryption, MasterKey, Subject};
    use crate::seams::SystemEntropy;
    use crate::sim_disk::{Faults, SimDisk};
    use crate::{Filter, Options};

    fn options(disk: &SimDisk, master: &MasterKey) -> Options {
        Options {
            storage: Arc::new(disk.clone()),
            preallocate: false,
            encryption: Some(Encryption {
                master: master.clone(),
                subject: Subject::Session,
            }),
            ..Options::default()
        }
    }

    fn event(id: &str, session: &str) -> Envelope {
        let mut e = Envelope::new("tool.completed", id, "2026-05-11T10:00:00Z");
        e.session_id = Some(session.into());
        e.payload = Some(json!({"toolName": "bash", "output": format!("SECRET {id}")}));
        e
    }

    /// A crash after each step of a redaction (before the new key store is written, once it
    /// is, once the old one is zeroed, once it is renamed, once the fact is appended) leaves,
    /// after the next open, either the key (the content reads) and no fact, or the fact and no
    /// key (the content reads `[redacted]`): never a readable key with a redaction recorded,
    /// and no key gone without its fact.
    #[test]
    fn a_crash_at_each_step_of_a_redaction_leaves_the_key_and_no_fact_or_the_fact_and_no_key() {
        let steps = [
            Step::Started,
            Step::NewWritten,
            Step::OldZeroed,
            Step::Renamed,
            Step::FactAppended,
        ];
        let mut outcomes = Vec::new();
        for crash_at in steps {
            let dir = tempfile::tempdir().expect("tempdir");
            let disk = SimDisk::new(7, Faults::default());
            let master = MasterKey::generate(&SystemEntropy);
            let journal = Journal::open(dir.path(), options(&disk, &master)).expect("open");
            journal
                .append_batch_blocking(
                    vec![event("a1", "s1"), event("a2", "s1"), event("b1", "s2")],
                    AppendOptions::default(),
                )
                .expect("append");
            let crashed: Mutex<Option<SimDisk>> = Mutex::new(None);
            let result = journal.redact_observed(
                &Redaction::Session("s1".into()),
                "test",
                Some("crash"),
                &mut |step| {
                    let mut crashed = crashed.lock().expect("lock");
                    if step == crash_at && crashed.is_none() {
                        *crashed = Some(disk.crash());
                    }
                },
            );
            assert!(
                result.is_err(),
                "{crash_at:?}: the crashed disk fails what follows"
            );
            drop(journal);
            let after = crashed.lock().expect("lock").take().expect("crashed");
            let journal = Journal::open(dir.path(), options(&after, &master)).expect("reopen");
            let facts = journal
                .query(Filter {
                    type_prefix: Some(REDACTED_EVENT_TYPE.into()),
                    ..Filter::default()
                })
                .expect("query")
                .count();
            let a1 = journal.get("a1").expect("get").expect("a1").envelope;
            let output = a1.payload.expect("payload")["output"].clone();
            match facts {
                0 => assert_eq!(output, "SECRET a1", "{crash_at:?}: no fact, so the key"),
                1 => assert_eq!(output, "[redacted]", "{crash_at:?}: the fact, so no key"),
                n => panic!("{crash_at:?}: {n} facts"),
            }
            let b1 = journal.get("b1").expect("get").expect("b1").envelope;
            assert_eq!(b1.payload.expect("payload")["output"], "SECRET b1");
            assert_eq!(journal.head().position, Position(3 + facts as u64));
            assert!(journal.key_status().expect("keys")["pendingFacts"] == 0);
            outcomes.push((crash_at, facts));
        }
        // Before the new store is durable the key stays; from then on the redaction completes.
        assert_eq!(
            outcomes,
            [
                (Step::Started, 0),
                (Step::NewWritten, 1),
                (Step::OldZeroed, 1),
                (Step::Renamed, 1),
                (Step::FactAppended, 1),
            ]
        );
    }
}
