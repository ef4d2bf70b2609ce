//! Encryption at rest and crypto-shredding: the keyring that seals each event's content under
//! its subject's data key on append and opens it on read, and the key store (`KEYS`) it keeps
//! those keys in, wrapped by the master key (docs/REDACTION.md).
//!
//! NOTE: the log holds only sealed bytes, so the hash chain and the Merkle tree cover the
//! ciphertext, and destroying a key changes nothing that `verify` or a proof checks.

pub mod master;
pub(crate) mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use journal_format::seal::{self, Sealed};
use journal_format::{Envelope, Position, StoredEvent};
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::seams::Entropy;
use crate::storage::Storage;

pub use master::{MasterKey, MASTER_KEY_ENV};
pub(crate) use store::KeyFile;
pub(crate) use store::Step;
pub use store::Subject;

/// Encryption of a journal's content: the master key, and (for a journal not yet encrypted)
/// which field names the subject whose key seals an event.
#[derive(Clone, Debug)]
pub struct Encryption {
    /// The master key that wraps the data keys.
    pub master: MasterKey,
    /// The subject of a new key store; an existing store keeps its own.
    pub subject: Subject,
}

type Key = Zeroizing<[u8; 32]>;

/// The keys unwrapped in memory, and the store they came from.
struct State {
    master: MasterKey,
    file: KeyFile,
    data: HashMap<String, Key>,
    events: HashMap<String, HashMap<String, Key>>,
}

/// The keyring of an encrypted journal.
pub(crate) struct Keys {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    entropy: Arc<dyn Entropy>,
    state: RwLock<State>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("dir", &self.dir).finish()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The label a single event's wrapped key is bound to.
fn event_label(key_ref: &str, event_id: &str) -> String {
    format!("{key_ref}#{event_id}")
}

impl Keys {
    /// The keyring of `dir`: its store read (and a replacement a crash interrupted finished,
    /// when `writable`), or a new empty store written when there is none and `writable`.
    /// `Ok(None)` when the journal is not encrypted and no encryption is given.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the journal is encrypted and writable without a master key,
    /// or the key given is not the store's; [`Error::Keys`] for a store that is not whole
    /// or a key that does not unwrap; I/O errors.
    pub(crate) fn load(
        storage: Arc<dyn Storage>,
        dir: &Path,
        encryption: Option<&Encryption>,
        entropy: Arc<dyn Entropy>,
        writable: bool,
    ) -> Result<Option<Keys>> {
        let exists = store::exists(&*storage, dir);
        let Some(encryption) = encryption else {
            if exists && writable {
                return Err(Error::InvalidInput(format!(
                    "the journal in {} is encrypted: give its master key (--master-key FILE, or {MASTER_KEY_ENV})",
                    dir.display()
                )));
            }
            return Ok(None);
        };
        let master = encryption.master.clone();
        let file = if exists {
            store::load(&*storage, dir, writable)?
        } else if writable {
            let file = KeyFile::new(encryption.subject, master.id());
            store::replace(&*storage, dir, &file, &mut |_| {})?;
            file
        } else {
            return Ok(None);
        };
        if file.master != master.id() {
            return Err(Error::InvalidInput(format!(
                "the master key given (id {}) is not the one of this journal's key store (id {})",
                master.id(),
                file.master
            )));
        }
        let state = unwrap_all(master, file)?;
        Ok(Some(Keys {
            storage,
            dir: dir.to_path_buf(),
            entropy,
            state: RwLock::new(state),
        }))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The subject of `event`: `<kind>:<id>`, by the store's subject field, else its stream key.
    fn subject_of(&self, subject: Subject, event: &Envelope) -> String {
        let id = match subject {
            Subject::Session => event.session_id.as_deref(),
            Subject::Runtime => event.runtime_id.as_deref(),
            Subject::Tenant => event.product_id.as_deref(),
        };
        match id {
            Some(id) => format!("{}:{id}", subject.name()),
            None => format!("stream:{}", event.stream_key()),
        }
    }

    /// `event` sealed under its subject's current data key; `None` for a redaction fact of the
    /// journal's own.
    /// A subject's first event makes its key, durable in the store before this returns.
    ///
    /// # Errors
    /// An I/O error writing the store, or [`Error::Internal`] if sealing fails.
    pub(crate) fn seal(&self, event: &Envelope) -> Result<Option<Envelope>> {
        let Some((key_ref, event_key)) = self.key_of(event)? else {
            return Ok(None);
        };
        seal::seal(event, &key_ref, &event_key)
            .map(Some)
            .map_err(|e| Error::Internal(format!("sealing event {}: {e}", event.event_id)))
    }

    /// [`Keys::seal`] in place, for an event not needed in plaintext afterwards (its content is
    /// encoded, then dropped, without copying the envelope); `false` when it is left
    /// unencrypted.
    ///
    /// # Errors
    /// As [`Keys::seal`]; the event is then as it was.
    pub(crate) fn seal_in_place(&self, event: &mut Envelope) -> Result<bool> {
        let Some((key_ref, event_key)) = self.key_of(event)? else {
            return Ok(false);
        };
        seal::seal_in_place(event, &key_ref, &event_key)
            .map(|()| true)
            .map_err(|e| Error::Internal(format!("sealing event {}: {e}", event.event_id)))
    }

    /// The reference and event key `event` is sealed under; `None` for a redaction fact of the
    /// journal's own. A subject's first event makes its key, durable in the store before this
    /// returns.
    fn key_of(&self, event: &Envelope) -> Result<Option<(String, Zeroizing<[u8; 32]>)>> {
        let state = self.read();
        // Only the journal's own redaction facts, recorded as pending with their destruction,
        // are left unencrypted: a producer's event of that type is not.
        if !seal::is_sealed_type(&event.event_type) && state.is_pending(&event.event_id) {
            return Ok(None);
        }
        let subject = self.subject_of(state.file.subject, event);
        let key_ref = state.current_ref(&subject);
        let event_key = |key: &Key| Zeroizing::new(seal::event_key(key, &event.event_id));
        if let Some(key) = state.data.get(&key_ref) {
            return Ok(Some((key_ref, event_key(key))));
        }
        drop(state);
        let (key_ref, key) = self.make_key(&subject)?;
        Ok(Some((key_ref, event_key(&key))))
    }

    /// Makes the data keys the subjects of `events` lack (a subject's first event, or its first
    /// after a redaction destroyed its key), all in one rewrite of the store, durable before
    /// this returns: a batch naming many new sessions pays for one rewrite, not one each.
    ///
    /// # Errors
    /// An I/O error writing the store; no key is made then.
    pub(crate) fn prepare(&self, events: &[Envelope]) -> Result<()> {
        let missing: BTreeSet<String> = {
            let state = self.read();
            events
                .iter()
                .filter(|e| seal::is_sealed_type(&e.event_type) || !state.is_pending(&e.event_id))
                .map(|e| self.subject_of(state.file.subject, e))
                .filter(|subject| !state.data.contains_key(&state.current_ref(subject)))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        self.make_keys(&missing)
    }

    /// The current data key of `subject`, made (and the store made durable with it) when it
    /// has none.
    fn make_key(&self, subject: &str) -> Result<(String, Key)> {
        self.make_keys(&BTreeSet::from([subject.to_string()]))?;
        let state = self.read();
        let key_ref = state.current_ref(subject);
        let key = state.data.get(&key_ref).cloned().ok_or_else(|| {
            Error::Internal(format!("the key {key_ref} just made is not in the keyring"))
        })?;
        Ok((key_ref, key))
    }

    /// Makes a current data key for each of `subjects` that has none, in one rewrite of the
    /// store. A generation whose key was destroyed, or whose events' keys are kept one by one,
    /// takes no new events: the next one does.
    fn make_keys(&self, subjects: &BTreeSet<String>) -> Result<()> {
        let mut state = self.write();
        let mut file = state.file.clone();
        let mut made = Vec::new();
        for subject in subjects {
            let generation = file.current.get(subject).copied().unwrap_or(1);
            if state.data.contains_key(&format!("{subject}/{generation}")) {
                continue;
            }
            let old_ref = format!("{subject}/{generation}");
            let generation = if file.destroyed.contains_key(&old_ref)
                || file.event_keys.contains_key(&old_ref)
            {
                generation + 1
            } else {
                generation
            };
            let key_ref = format!("{subject}/{generation}");
            let mut key = Zeroizing::new([0u8; 32]);
            self.entropy.fill(&mut key[..]);
            let wrapped = state.master.wrap(&key_ref, &key, &*self.entropy);
            file.current.insert(subject.clone(), generation);
            file.keys.insert(key_ref.clone(), b64().encode(wrapped));
            made.push((key_ref, key));
        }
        if made.is_empty() {
            return Ok(());
        }
        store::replace(&*self.storage, &self.dir, &file, &mut |_| {})?;
        state.file = file;
        state.data.extend(made);
        Ok(())
    }

    /// Opens `event`'s sealed content in place. An event whose key was destroyed reads
    /// `[redacted]` in each sealed field, with a `redacted` field naming the redaction fact; a
    /// plaintext event (written before the journal was encrypted) is marked `unencrypted`.
    ///
    /// # Errors
    /// [`Error::Keys`] when the sealed content is malformed or does not open with its
    /// key (its bytes were altered).
    pub(crate) fn open(&self, event: &mut StoredEvent) -> Result<()> {
        self.open_envelope(&mut event.envelope, Some(event.position))
    }

    /// [`Keys::open`] for an envelope, at `position` if it is stored (named in errors).
    ///
    /// # Errors
    /// As [`Keys::open`].
    pub(crate) fn open_envelope(
        &self,
        envelope: &mut Envelope,
        position: Option<Position>,
    ) -> Result<()> {
        let at = |id: &str| match position {
            Some(p) => format!("the event at position {p} ({id})"),
            None => format!("the event {id}"),
        };
        let corrupt = |e: seal::SealError, id: &str| {
            Error::Keys(format!("the sealed content of {}: {e}", at(id)))
        };
        let sealed = match Sealed::of(envelope) {
            Ok(Some(sealed)) => sealed,
            Ok(None) => {
                if seal::is_sealed_type(&envelope.event_type) {
                    envelope
                        .extra
                        .insert(seal::UNENCRYPTED_FIELD.into(), Value::Bool(true));
                }
                return Ok(());
            }
            Err(e) => return Err(corrupt(e, &envelope.event_id)),
        };
        let state = self.read();
        let id = &envelope.event_id;
        let key = match state.data.get(&sealed.key) {
            Some(data) => Some(seal::event_key(data, id)),
            None => state
                .events
                .get(&sealed.key)
                .and_then(|keys| keys.get(id))
                .map(|k| **k),
        };
        if let Some(key) = key {
            drop(state);
            let key = Zeroizing::new(key);
            return seal::open(envelope, sealed, &key).map_err(|e| corrupt(e, &envelope.event_id));
        }
        let why = state
            .file
            .destroyed_events
            .get(id)
            .or_else(|| state.file.destroyed.get(&sealed.key));
        match why {
            Some(Value::Object(why)) => {
                let why = why.clone();
                drop(state);
                seal::mark_redacted(envelope, &sealed, why);
                Ok(())
            }
            _ => Err(Error::Keys(format!(
                "{} is sealed under key {}, which the key store neither holds nor records as destroyed",
                at(id),
                sealed.key
            ))),
        }
    }
}

/// What a redaction destroys: for each key reference, the events to redact and the other
/// events sealed under it (whose keys are kept one by one).
#[derive(Debug, Default)]
pub(crate) struct Shred {
    pub(crate) targets: BTreeMap<String, BTreeSet<String>>,
    pub(crate) others: BTreeMap<String, BTreeSet<String>>,
}

impl Keys {
    /// Destroys the keys of `shred`'s targets durably, and records `fact` (the redaction fact,
    /// its JSON form) as pending in the same store: the store is replaced whole (see
    /// `store`), so a crash leaves the keys and no record, or the record and no keys. `why` is
    /// what a redacted event's `redacted` field says. Calls `step` after each step.
    /// Returns the key references destroyed whole.
    ///
    /// # Errors
    /// I/O errors replacing the store (the old store then holds).
    pub(crate) fn destroy(
        &self,
        shred: &Shred,
        why: &Map<String, Value>,
        fact: Value,
        step: &mut dyn FnMut(Step),
    ) -> Result<Vec<String>> {
        let mut state = self.write();
        let mut file = state.file.clone();
        let mut whole = Vec::new();
        let why_value = Value::Object(why.clone());
        for (key_ref, targets) in &shred.targets {
            if let Some(data) = state.data.get(key_ref) {
                for id in targets {
                    file.destroyed_events.insert(id.clone(), why_value.clone());
                }
                file.keys.remove(key_ref);
                if let Some((subject, generation)) = split_ref(key_ref) {
                    let current = file.current.entry(subject.to_string()).or_insert(1);
                    *current = (*current).max(generation + 1);
                }
                let others = shred.others.get(key_ref).filter(|o| !o.is_empty());
                match others {
                    Some(others) => {
                        let kept = file.event_keys.entry(key_ref.clone()).or_default();
                        for id in others {
                            let label = event_label(key_ref, id);
                            let key = Zeroizing::new(seal::event_key(data, id));
                            let wrapped = state.master.wrap(&label, &key, &*self.entropy);
                            kept.insert(id.clone(), b64().encode(wrapped));
                        }
                    }
                    None => {
                        file.destroyed.insert(key_ref.clone(), why_value.clone());
                        whole.push(key_ref.clone());
                    }
                }
            } else if let Some(kept) = file.event_keys.get_mut(key_ref) {
                // Events already redacted keep the record of their first redaction.
                for id in targets {
                    if kept.remove(id).is_some() {
                        file.destroyed_events.insert(id.clone(), why_value.clone());
                    }
                }
                if kept.is_empty() {
                    file.event_keys.remove(key_ref);
                    file.destroyed.insert(key_ref.clone(), why_value.clone());
                    whole.push(key_ref.clone());
                }
            }
        }
        file.pending.push(fact);
        store::replace(&*self.storage, &self.dir, &file, step)?;
        let master = state.master.clone();
        *state = unwrap_all(master, file)?;
        Ok(whole)
    }

    /// Takes `file`, a store copied from this replica's source, as this journal's: the store
    /// replaced whole (the old copy overwritten, see `store`), then the keys in memory.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `file` is wrapped by another master key than the one this
    /// journal was opened with; [`Error::Keys`] when a key does not unwrap; I/O errors.
    pub(crate) fn adopt(&self, file: KeyFile) -> Result<()> {
        let mut state = self.write();
        if file.master != state.master.id() {
            return Err(Error::InvalidInput(format!(
                "the source's key store is wrapped by master key {}, and this replica was opened with {}",
                file.master,
                state.master.id()
            )));
        }
        let adopted = unwrap_all(state.master.clone(), file)?;
        store::replace(&*self.storage, &self.dir, &adopted.file, &mut |_| {})?;
        *state = adopted;
        Ok(())
    }

    /// The redaction facts recorded with a destruction and not yet known to be appended.
    pub(crate) fn pending(&self) -> Vec<Value> {
        self.read().file.pending.clone()
    }

    /// Forgets the pending facts (all appended), durably.
    ///
    /// # Errors
    /// I/O errors replacing the store.
    pub(crate) fn clear_pending(&self) -> Result<()> {
        let mut state = self.write();
        if state.file.pending.is_empty() {
            return Ok(());
        }
        let mut file = state.file.clone();
        file.pending.clear();
        store::replace(&*self.storage, &self.dir, &file, &mut |_| {})?;
        state.file = file;
        Ok(())
    }

    /// Re-wraps every key under `new` and replaces the store; the log is not touched. The old
    /// master key no longer opens anything the store holds.
    ///
    /// # Errors
    /// I/O errors replacing the store (the old store, under the old key, then holds).
    pub(crate) fn rotate(&self, new: &MasterKey) -> Result<()> {
        let mut state = self.write();
        let mut file = state.file.clone();
        file.master = new.id();
        for (key_ref, wrapped) in &mut file.keys {
            let key = state.data.get(key_ref).ok_or_else(|| {
                Error::Internal(format!("key {key_ref} is in the store, not in memory"))
            })?;
            *wrapped = b64().encode(new.wrap(key_ref, key, &*self.entropy));
        }
        for (key_ref, kept) in &mut file.event_keys {
            for (id, wrapped) in kept.iter_mut() {
                let key = state
                    .events
                    .get(key_ref)
                    .and_then(|k| k.get(id))
                    .ok_or_else(|| Error::Internal(format!("key {key_ref}#{id} not in memory")))?;
                *wrapped = b64().encode(new.wrap(&event_label(key_ref, id), key, &*self.entropy));
            }
        }
        store::replace(&*self.storage, &self.dir, &file, &mut |_| {})?;
        state.master = new.clone();
        state.file = file;
        Ok(())
    }

    /// The store's summary: its master key id, subject field, and counts of keys.
    pub(crate) fn status(&self) -> Value {
        let state = self.read();
        let f = &state.file;
        serde_json::json!({
            "master": f.master,
            "subject": f.subject.name(),
            "dataKeys": f.keys.len(),
            "eventKeys": f.event_keys.values().map(BTreeMap::len).sum::<usize>(),
            "destroyedKeys": f.destroyed.len(),
            "redactedEvents": f.destroyed_events.len(),
            "pendingFacts": f.pending.len(),
        })
    }
}

/// A key reference's subject and generation.
pub(crate) fn split_ref(key_ref: &str) -> Option<(&str, u64)> {
    let (subject, generation) = key_ref.rsplit_once('/')?;
    Some((subject, generation.parse().ok()?))
}

impl State {
    /// The reference of `subject`'s current data key, `<subject>/<generation>`.
    fn current_ref(&self, subject: &str) -> String {
        let generation = self.file.current.get(subject).copied().unwrap_or(1);
        format!("{subject}/{generation}")
    }

    /// Whether `event_id` is a pending redaction fact's.
    fn is_pending(&self, event_id: &str) -> bool {
        self.file
            .pending
            .iter()
            .any(|fact| fact.get("eventId").and_then(Value::as_str) == Some(event_id))
    }
}

/// Every key of `file` unwrapped with `master`.
fn unwrap_all(master: MasterKey, file: KeyFile) -> Result<State> {
    let bad = |label: &str| {
        Error::Keys(format!(
            "the key store's key {label} does not unwrap with the master key"
        ))
    };
    let mut data = HashMap::new();
    for (key_ref, wrapped) in &file.keys {
        let bytes = b64().decode(wrapped).map_err(|_| bad(key_ref))?;
        let key = master
            .unwrap_key(key_ref, &bytes)
            .ok_or_else(|| bad(key_ref))?;
        data.insert(key_ref.clone(), key);
    }
    let mut events = HashMap::new();
    for (key_ref, keys) in &file.event_keys {
        let mut one = HashMap::new();
        for (event_id, wrapped) in keys {
            let label = event_label(key_ref, event_id);
            let bytes = b64().decode(wrapped).map_err(|_| bad(&label))?;
            let key = master
                .unwrap_key(&label, &bytes)
                .ok_or_else(|| bad(&label))?;
            one.insert(event_id.clone(), key);
        }
        events.insert(key_ref.clone(), one);
    }
    Ok(State {
        master,
        file,
        data,
        events,
    })
}
