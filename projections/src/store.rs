//! The read model store: one redb file (`projections.redb` in the journal directory) holding,
//! for every projection, its states by key, its aliases, and its checkpoint, always written
//! together in one transaction so that a crash never leaves a state and its position apart.
//!
//! Tables: `meta` (projection name → [`Meta`] as JSON), and per projection and version a table
//! of states (`model:<name>:v<version>`, key → MessagePack) and one of aliases
//! (`alias:<name>:v<version>`, `kind\0id` → (position, key): the key of the stream whose event
//! at that position, the newest to name the alias, gave it). Two versions of a projection exist
//! side by side only during a rebuild: readers read the serving one until the new one has
//! caught up.
//!
//! Stores written before aliases carried their position (`kind\0id` → key, with a side table
//! `alias:<name>:v<version>:positions` during a build by partition) are brought to this layout
//! when opened ([`Store::open`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, TableDefinition, TableHandle,
};
use serde::{Deserialize, Serialize};

use journal_format::ChainHash;

use crate::projection::Fault;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// An alias table's value: the position of the newest event that named the alias, and the key
/// of its stream.
type AliasValue = (u64, &'static str);

/// redb's page cache: states are read once per catch-up and cached decoded by the worker, so
/// a large page cache buys little and would dominate memory.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

/// How often [`Store::open_waiting`] tries again while another process has the store open.
const BUSY_RETRY: Duration = Duration::from_millis(10);

/// The store's file name in the journal directory.
pub const FILE_NAME: &str = "projections.redb";

/// A store error, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("read model store {path}: {context}: {message}")]
pub struct StoreError {
    /// The store file.
    pub path: PathBuf,
    /// What was being done.
    pub context: String,
    /// The underlying error.
    pub message: String,
}

/// A generation of a projection's state: the version that built it and the position it
/// reflects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    /// The projection version that built it.
    pub version: u32,
    /// The last position applied (0: none yet).
    pub position: u64,
    /// The chain link of the event at `position`: lets the worker notice a log that no longer
    /// holds what was applied (a buffered append lost in a power failure, a restored backup).
    #[serde(with = "hash_hex")]
    pub hash: Option<ChainHash>,
}

/// A chain link in a checkpoint, as hex.
mod hash_hex {
    use journal_format::ChainHash;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(hash: &Option<ChainHash>, s: S) -> Result<S::Ok, S::Error> {
        match hash {
            Some(h) => s.serialize_some(&h.to_hex()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ChainHash>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|hex| ChainHash::from_hex(&hex).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A projection's checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The generation readers read; `None` before the first build.
    pub serving: Option<Generation>,
    /// A generation being rebuilt from the start (after a version change), with the position
    /// it is rebuilding to.
    pub building: Option<(Generation, u64)>,
    /// The event the newest generation could not apply.
    pub fault: Option<Fault>,
}

/// Whether a commit reaches the disk before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// It does: a crash after it keeps it.
    Immediate,
    /// It need not: a crash may roll back to an earlier durable commit (state and checkpoint
    /// together).
    Deferred,
}

/// The keys whose states changed and the aliases to write in one transaction; the states are
/// encoded one at a time while writing, so a batch never holds them all encoded at once.
#[derive(Debug, Default)]
pub struct Batch {
    /// The keys whose states changed, in order.
    pub keys: Vec<String>,
    /// `(kind, id, key, position)`: the position of the newest event that named the alias.
    pub aliases: Vec<(&'static str, String, String, u64)>,
}

/// Encodes the state of a key for [`Store::commit`] into the buffer given, which it finds empty:
/// `false` when the key has no state to write. One buffer serves every key of a commit, so that
/// a large state is not grown again from nothing for each key (`docs/PERFORMANCE.md`). A commit calls it once for each of its keys, in their order, and never twice for
/// one key: an encoder may hand its state over as it encodes it (a build by partition frees
/// each state then).
pub type Encode<'a> = dyn FnMut(&str, &mut Vec<u8>) -> Result<bool, String> + 'a;

fn model_table(name: &str, version: u32) -> String {
    format!("model:{name}:v{version}")
}

fn alias_table(name: &str, version: u32) -> String {
    format!("alias:{name}:v{version}")
}

fn alias_definition(table_name: &str) -> TableDefinition<'_, &'static str, AliasValue> {
    TableDefinition::new(table_name)
}

fn alias_key(kind: &str, id: &str) -> String {
    format!("{kind}\0{id}")
}

/// A visitor of `(key, encoded state)` pairs.
pub type Visit<'a> = dyn FnMut(&str, &[u8]) -> Result<(), StoreError> + 'a;

/// The file left beside a store that a damaged page made redb panic on.
fn damage_marker(path: &Path) -> PathBuf {
    path.with_extension("damaged")
}

/// Deletes the store at `path` when its damage marker says it was found damaged: its read
/// models are derived, and rebuilt from the log.
fn remove_if_damaged(path: &Path) -> Result<(), StoreError> {
    let marker = damage_marker(path);
    if !marker.exists() {
        return Ok(());
    }
    tracing::warn!(path = %path.display(), "the read-model store was found damaged; rebuilding it");
    for file in [path, marker.as_path()] {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError {
                    path: file.to_path_buf(),
                    context: "removing a damaged store".into(),
                    message: e.to_string(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// See [`Store::guard`].
fn guard<T>(path: &Path, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| String::from("a panic inside redb"));
            if let Err(e) = std::fs::write(damage_marker(path), why.as_bytes()) {
                tracing::warn!(error = %e, "cannot leave the read-model store's damage marker");
            }
            Err(StoreError {
                path: path.to_path_buf(),
                context: String::from("reading the store, which is damaged"),
                message: format!(
                    "{why}; the read models are rebuilt from the log at the next open"
                ),
            })
        }
    }
}

/// The store.
#[derive(Debug)]
pub struct Store {
    db: Database,
    path: PathBuf,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be opened (for example while another process holds
    /// it).
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_waiting(path, Duration::ZERO)
    }

    /// Opens (or creates) the store at `path`, waiting up to `wait` while another process has
    /// it open: redb lets one process at a time open the file, so processes that read the same
    /// read models (`journal get` beside `journal get`) take turns.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be opened, or is still held by another process after
    /// `wait`.
    #[allow(clippy::disallowed_methods)] // A wait is wall time, not the journal's clock.
    pub fn open_waiting(path: impl AsRef<Path>, wait: Duration) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        remove_if_damaged(&path)?;
        match guard(&path, || Store::open_waiting_unguarded(path.clone(), wait)) {
            // Damaged in a way opening found: start afresh at once.
            Err(_) if damage_marker(&path).exists() => {
                remove_if_damaged(&path)?;
                Store::open_waiting_unguarded(path, wait)
            }
            other => other,
        }
    }

    #[allow(clippy::disallowed_methods)] // A wait is wall time, not the journal's clock.
    fn open_waiting_unguarded(path: PathBuf, wait: Duration) -> Result<Store, StoreError> {
        let deadline = Instant::now() + wait;
        let db = loop {
            match Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create(&path)
            {
                Ok(db) => break db,
                Err(DatabaseError::DatabaseAlreadyOpen) if Instant::now() < deadline => {
                    std::thread::sleep(BUSY_RETRY);
                }
                Err(e @ DatabaseError::DatabaseAlreadyOpen) => {
                    return Err(StoreError {
                        path,
                        context: format!(
                            "opening (another process has had it open for {} ms)",
                            wait.as_millis()
                        ),
                        message: e.to_string(),
                    })
                }
                Err(e) => {
                    return Err(StoreError {
                        path,
                        context: "opening".into(),
                        message: e.to_string(),
                    })
                }
            }
        };
        let store = Store { db, path };
        store.upgrade_aliases()?;
        Ok(store)
    }

    /// The store's file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Brings the alias tables of a store written before aliases carried their position
    /// (`kind\0id` → key) to the present layout, in one transaction: each alias gets position
    /// 0, which only a build by partition reads, and a build always starts from empty tables.
    /// The side tables of positions such a build kept are dropped: a build at position 0 is
    /// cleared and started again anyway.
    fn upgrade_aliases(&self) -> Result<(), StoreError> {
        let err = self.err("bringing alias tables to the layout with positions");
        let txn = self.db.begin_write().map_err(|e| err(e.into()))?;
        let names: Vec<String> = txn
            .list_tables()
            .map_err(|e| err(e.into()))?
            .map(|t| t.name().to_owned())
            .filter(|name| name.starts_with("alias:"))
            .collect();
        let mut changed = false;
        for name in names {
            if name.ends_with(":positions") {
                let old: TableDefinition<&str, u64> = TableDefinition::new(&name);
                txn.delete_table(old).map_err(|e| err(e.into()))?;
                changed = true;
                continue;
            }
            match txn.open_table(alias_definition(&name)) {
                Ok(_) => continue,
                Err(redb::TableError::TableTypeMismatch { .. }) => {}
                Err(e) => return Err(err(e.into())),
            }
            let old: TableDefinition<&str, &str> = TableDefinition::new(&name);
            let entries: Vec<(String, String)> = {
                let table = txn.open_table(old).map_err(|e| err(e.into()))?;
                let entries = table
                    .iter()
                    .map_err(|e| err(e.into()))?
                    .map(|entry| {
                        let (alias, key) = entry.map_err(|e| err(e.into()))?;
                        Ok((alias.value().to_owned(), key.value().to_owned()))
                    })
                    .collect::<Result<_, StoreError>>()?;
                entries
            };
            txn.delete_table(old).map_err(|e| err(e.into()))?;
            let mut table = txn
                .open_table(alias_definition(&name))
                .map_err(|e| err(e.into()))?;
            for (alias, key) in &entries {
                table
                    .insert(alias.as_str(), (0, key.as_str()))
                    .map_err(|e| err(e.into()))?;
            }
            changed = true;
        }
        if changed {
            txn.commit().map_err(|e| err(e.into()))
        } else {
            txn.abort().map_err(|e| err(e.into()))
        }
    }

    /// Runs `f` on the store, turning a panic inside redb (what some damaged pages cause) into
    /// a [`StoreError`] naming the damage. It leaves the store's damage marker behind, so that
    /// the next open deletes the store and the read models are rebuilt from the log: they are
    /// derived, and their damage never stops the journal being read.
    fn guard<T>(&self, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        guard(&self.path, f)
    }

    fn err(&self, context: &str) -> impl Fn(redb::Error) -> StoreError + '_ {
        let context = context.to_string();
        move |e| StoreError {
            path: self.path.clone(),
            context: context.clone(),
            message: e.to_string(),
        }
    }

    /// The checkpoint of projection `name` (the default when it was never built).
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn meta(&self, name: &str) -> Result<Meta, StoreError> {
        self.guard(|| {
            let err = self.err(&format!("reading the checkpoint of {name}"));
            let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
            let table = match txn.open_table(META) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Meta::default()),
                Err(e) => return Err(err(e.into())),
            };
            match table.get(name).map_err(|e| err(e.into()))? {
                Some(bytes) => serde_json::from_slice(bytes.value()).map_err(|e| StoreError {
                    path: self.path.clone(),
                    context: format!("decoding the checkpoint of {name}"),
                    message: e.to_string(),
                }),
                None => Ok(Meta::default()),
            }
        })
    }

    /// The encoded state of `key` in generation `version` of `name`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn get(&self, name: &str, version: u32, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.guard(|| {
            let table_name = model_table(name, version);
            let err = self.err(&format!("reading {key} from {table_name}"));
            let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
            let definition: TableDefinition<&str, &[u8]> = TableDefinition::new(&table_name);
            let table = match txn.open_table(definition) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(err(e.into())),
            };
            Ok(table
                .get(key)
                .map_err(|e| err(e.into()))?
                .map(|v| v.value().to_vec()))
        })
    }

    /// The key an alias names in generation `version` of `name`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn lookup(
        &self,
        name: &str,
        version: u32,
        kind: &str,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.guard(|| {
            let table_name = alias_table(name, version);
            let err = self.err(&format!("looking up {kind} {id} in {table_name}"));
            let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
            let table = match txn.open_table(alias_definition(&table_name)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(err(e.into())),
            };
            Ok(table
                .get(alias_key(kind, id).as_str())
                .map_err(|e| err(e.into()))?
                .map(|v| v.value().1.to_string()))
        })
    }

    /// Every `(key, encoded state)` of generation `version` of `name`, in key order.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn for_each(&self, name: &str, version: u32, f: &mut Visit<'_>) -> Result<(), StoreError> {
        self.guard(|| {
            let table_name = model_table(name, version);
            let err = self.err(&format!("scanning {table_name}"));
            let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
            let definition: TableDefinition<&str, &[u8]> = TableDefinition::new(&table_name);
            let table = match txn.open_table(definition) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(e) => return Err(err(e.into())),
            };
            for entry in table.iter().map_err(|e| err(e.into()))? {
                let (key, value) = entry.map_err(|e| err(e.into()))?;
                f(key.value(), value.value())?;
            }
            Ok(())
        })
    }

    /// Writes one partition of a build by partition: the states of `keys` (as `encode` gives
    /// them) and the partition's aliases, each with the position of the event it was taken
    /// from, keeping for each alias the one from the newest event across partitions; the
    /// checkpoint is set to `meta`. Not durable: a crash before the build's last commit starts
    /// the build again.
    ///
    /// # Errors
    /// [`StoreError`]; nothing of the partition is written then.
    pub fn commit_partition(
        &self,
        name: &str,
        version: u32,
        keys: &[String],
        encode: &mut Encode<'_>,
        aliases: &[(&'static str, String, String, u64)],
        meta: &Meta,
    ) -> Result<(), StoreError> {
        self.guard(|| {
            let err = self.err(&format!("committing a partition of {name} v{version}"));
            let mut txn = self.db.begin_write().map_err(|e| err(e.into()))?;
            txn.set_durability(redb::Durability::None)
                .map_err(|e| err(e.into()))?;
            {
                self.write_states(&txn, name, version, keys, encode)?;
                let alias_name = alias_table(name, version);
                let mut table = txn
                    .open_table(alias_definition(&alias_name))
                    .map_err(|e| err(e.into()))?;
                for (kind, id, key, position) in aliases {
                    let alias_key = alias_key(kind, id);
                    // Most aliases are new or come from the same partition's stream: insert first
                    // (one tree walk, not a lookup and then an insert), and put the stored alias
                    // back in the rare case another partition's event gave it later.
                    let newer = match table
                        .insert(alias_key.as_str(), (*position, key.as_str()))
                        .map_err(|e| err(e.into()))?
                    {
                        Some(stored) => {
                            let (at, key) = stored.value();
                            (at > *position).then(|| (at, key.to_owned()))
                        }
                        None => None,
                    };
                    if let Some((stored, key)) = newer {
                        table
                            .insert(alias_key.as_str(), (stored, key.as_str()))
                            .map_err(|e| err(e.into()))?;
                    }
                }
                self.write_meta(&txn, name, meta)?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Calls `f(kind, id, key)` for every alias of generation `version` of `name`, in key
    /// order.
    ///
    /// # Errors
    /// [`StoreError`], or the first error `f` returns.
    pub fn for_each_alias(
        &self,
        name: &str,
        version: u32,
        f: &mut dyn FnMut(&str, &str, &str) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.guard(|| {
            let table_name = alias_table(name, version);
            let err = self.err(&format!("scanning {table_name}"));
            let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
            let table = match txn.open_table(alias_definition(&table_name)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(e) => return Err(err(e.into())),
            };
            for entry in table.iter().map_err(|e| err(e.into()))? {
                let (alias, value) = entry.map_err(|e| err(e.into()))?;
                let (kind, id) = alias
                    .value()
                    .split_once('\0')
                    .unwrap_or(("", alias.value()));
                f(kind, id, value.value().1)?;
            }
            Ok(())
        })
    }

    /// Writes `batch` (each state as `encode` gives it) into generation `version` of `name` and
    /// sets its checkpoint to `meta`, in one transaction; returns the bytes of state written; drops the tables of every other
    /// generation of `name` that `meta` no longer names; `durability` says whether the transaction
    /// reaches the disk before returning.
    ///
    /// # Errors
    /// [`StoreError`]; nothing of the batch is written then.
    pub fn commit(
        &self,
        name: &str,
        version: u32,
        batch: &Batch,
        encode: &mut Encode<'_>,
        meta: &Meta,
        durability: Durability,
    ) -> Result<u64, StoreError> {
        self.guard(|| {
            let err = self.err(&format!("committing {name} v{version}"));
            let written;
            let mut txn = self.db.begin_write().map_err(|e| err(e.into()))?;
            txn.set_durability(match durability {
                Durability::Immediate => redb::Durability::Immediate,
                Durability::Deferred => redb::Durability::None,
            })
            .map_err(|e| err(e.into()))?;
            {
                written = self.write_states(&txn, name, version, &batch.keys, encode)?;
                let alias_name = alias_table(name, version);
                let mut table = txn
                    .open_table(alias_definition(&alias_name))
                    .map_err(|e| err(e.into()))?;
                for (kind, id, key, position) in &batch.aliases {
                    table
                        .insert(alias_key(kind, id).as_str(), (*position, key.as_str()))
                        .map_err(|e| err(e.into()))?;
                }
                self.write_meta(&txn, name, meta)?;
            }
            let live: Vec<u32> = meta
                .serving
                .iter()
                .map(|g| g.version)
                .chain(meta.building.iter().map(|(g, _)| g.version))
                .chain(std::iter::once(version))
                .collect();
            let prefixes = [format!("model:{name}:v"), format!("alias:{name}:v")];
            let stale: Vec<_> = txn
                .list_tables()
                .map_err(|e| err(e.into()))?
                .filter(|t| {
                    prefixes.iter().any(|p| {
                        t.name()
                            .strip_prefix(p.as_str())
                            .and_then(|v| v.split(':').next())
                            .and_then(|v| v.parse::<u32>().ok())
                            .is_some_and(|v| !live.contains(&v))
                    })
                })
                .collect();
            for table in stale {
                txn.delete_table(table).map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))?;
            Ok(written)
        })
    }

    /// Makes every commit so far durable (those made with [`Durability::Deferred`]): an
    /// empty transaction committed with [`Durability::Immediate`].
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn sync(&self) -> Result<(), StoreError> {
        self.guard(|| {
            let err = self.err("making the read models' commits durable");
            let mut txn = self.db.begin_write().map_err(|e| err(e.into()))?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(|e| err(e.into()))?;
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Drops every state and alias of generation `version` of projection `name`: a generation
    /// at position 0 must hold nothing, and a build that was interrupted before its first
    /// checkpoint may have left states behind. With `meta`, sets the checkpoint to it in the
    /// same transaction; without, leaves it as it is.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn clear_generation(
        &self,
        name: &str,
        version: u32,
        meta: Option<&Meta>,
    ) -> Result<(), StoreError> {
        self.guard(|| {
            let err = self.err(&format!("clearing {name} v{version}"));
            let txn = self.db.begin_write().map_err(|e| err(e.into()))?;
            if let Some(meta) = meta {
                self.write_meta(&txn, name, meta)?;
            }
            self.drop_tables(
                &txn,
                &[model_table(name, version), alias_table(name, version)],
            )?;
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Forgets projection `name` entirely: its checkpoint and every generation. The next worker
    /// run rebuilds it from the start.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn reset(&self, name: &str) -> Result<(), StoreError> {
        self.guard(|| {
            let err = self.err(&format!("resetting {name}"));
            let mut txn = self.db.begin_write().map_err(|e| err(e.into()))?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(|e| err(e.into()))?;
            let prefixes = [format!("model:{name}:v"), format!("alias:{name}:v")];
            let tables: Vec<_> = txn
                .list_tables()
                .map_err(|e| err(e.into()))?
                .filter(|t| prefixes.iter().any(|p| t.name().starts_with(p.as_str())))
                .collect();
            for table in tables {
                txn.delete_table(table).map_err(|e| err(e.into()))?;
            }
            {
                let mut table = txn.open_table(META).map_err(|e| err(e.into()))?;
                table.remove(name).map_err(|e| err(e.into()))?;
            }
            txn.commit().map_err(|e| err(e.into()))
        })
    }

    /// Writes the state of each of `keys` (as `encode` gives it; a key it gives none for is
    /// left as it is) into generation `version` of `name`; the bytes written.
    fn write_states(
        &self,
        txn: &redb::WriteTransaction,
        name: &str,
        version: u32,
        keys: &[String],
        encode: &mut Encode<'_>,
    ) -> Result<u64, StoreError> {
        let err = self.err(&format!("writing the states of {name} v{version}"));
        let model_name = model_table(name, version);
        let definition: TableDefinition<&str, &[u8]> = TableDefinition::new(&model_name);
        let mut table = txn.open_table(definition).map_err(|e| err(e.into()))?;
        let mut written = 0u64;
        let mut bytes = Vec::new();
        // Each key once, so that each is encoded once ([`Encode`]): the callers give them
        // sorted.
        debug_assert!(
            keys.windows(2).all(|pair| matches!(pair, [a, b] if a < b)),
            "a commit's keys are sorted and each given once"
        );
        for key in keys {
            bytes.clear();
            let encoded = encode(key, &mut bytes).map_err(|message| StoreError {
                path: self.path.clone(),
                context: format!("encoding the state of {key} in {name}"),
                message,
            })?;
            if encoded {
                written += bytes.len() as u64;
                table
                    .insert(key.as_str(), bytes.as_slice())
                    .map_err(|e| err(e.into()))?;
            }
        }
        Ok(written)
    }

    /// Sets the checkpoint of `name` to `meta`.
    fn write_meta(
        &self,
        txn: &redb::WriteTransaction,
        name: &str,
        meta: &Meta,
    ) -> Result<(), StoreError> {
        let err = self.err(&format!("writing the checkpoint of {name}"));
        let encoded = serde_json::to_vec(meta).map_err(|e| StoreError {
            path: self.path.clone(),
            context: format!("encoding the checkpoint of {name}"),
            message: e.to_string(),
        })?;
        let mut table = txn.open_table(META).map_err(|e| err(e.into()))?;
        table
            .insert(name, encoded.as_slice())
            .map_err(|e| err(e.into()))?;
        Ok(())
    }

    /// Drops the tables named `names` that exist.
    fn drop_tables(
        &self,
        txn: &redb::WriteTransaction,
        names: &[String],
    ) -> Result<(), StoreError> {
        let err = self.err("dropping tables");
        let tables: Vec<_> = txn
            .list_tables()
            .map_err(|e| err(e.into()))?
            .filter(|t| names.iter().any(|n| t.name() == n))
            .collect();
        for table in tables {
            txn.delete_table(table).map_err(|e| err(e.into()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_waits_its_turn_while_the_store_is_held_and_gives_up_after_its_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.redb");
        let held = Store::open(&path).expect("open");
        let busy = Store::open_waiting(&path, Duration::from_millis(30)).expect_err("held");
        assert!(busy.context.contains("has had it open for 30 ms"), "{busy}");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        Store::open_waiting(&path, Duration::from_secs(10)).expect("its turn came");
        release.join().expect("release");
    }

    fn partition(store: &Store, aliases: &[(&'static str, &str, &str, u64)]) {
        let aliases: Vec<_> = aliases
            .iter()
            .map(|&(kind, id, key, at)| (kind, id.to_owned(), key.to_owned(), at))
            .collect();
        store
            .commit_partition(
                "p",
                1,
                &[],
                &mut |_, _| Ok(false),
                &aliases,
                &Meta::default(),
            )
            .expect("commit a partition");
    }

    fn aliases(store: &Store) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        store
            .for_each_alias("p", 1, &mut |kind, id, key| {
                out.push((kind.to_owned(), id.to_owned(), key.to_owned()));
                Ok(())
            })
            .expect("scan aliases");
        out
    }

    #[test]
    fn a_build_by_partition_keeps_each_alias_from_its_newest_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("s.redb")).expect("open");
        // The first pass gives t1 from stream a at 9 and t2 from a at 3; the second gives t1
        // from b at 5 (older: a stays) and t2 from b at 7 (newer: b wins).
        partition(&store, &[("task", "t1", "a", 9), ("task", "t2", "a", 3)]);
        partition(&store, &[("task", "t1", "b", 5), ("task", "t2", "b", 7)]);
        let lookup = |id| store.lookup("p", 1, "task", id).expect("lookup");
        assert_eq!(lookup("t1").as_deref(), Some("a"));
        assert_eq!(lookup("t2").as_deref(), Some("b"));
        assert_eq!(lookup("t3"), None);
    }

    #[test]
    fn a_store_with_aliases_without_positions_is_brought_to_the_present_layout() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.redb");
        {
            // The layout before aliases carried positions: `kind\0id` → key, and the side
            // table of positions an interrupted build by partition left.
            let db = Database::create(&path).expect("create");
            let txn = db.begin_write().expect("write");
            {
                let old: TableDefinition<&str, &str> = TableDefinition::new("alias:p:v1");
                let mut table = txn.open_table(old).expect("table");
                table.insert("run\0r1", "session:s1").expect("insert");
                table.insert("task\0t1", "session:s2").expect("insert");
                let positions: TableDefinition<&str, u64> =
                    TableDefinition::new("alias:p:v2:positions");
                let mut table = txn.open_table(positions).expect("table");
                table.insert("task\0t1", 4).expect("insert");
            }
            txn.commit().expect("commit");
        }
        let store = Store::open(&path).expect("open an old store");
        assert_eq!(
            aliases(&store),
            [
                ("run".into(), "r1".into(), "session:s1".into()),
                ("task".into(), "t1".into(), "session:s2".into()),
            ]
        );
        let txn = store.db.begin_read().expect("read");
        let names: Vec<String> = txn
            .list_tables()
            .expect("list")
            .map(|t| t.name().to_owned())
            .collect();
        assert_eq!(names, ["alias:p:v1"], "the side table of positions is gone");
        drop(txn);
        // Written to as any other: a later event's alias replaces the upgraded one.
        let batch = Batch {
            keys: Vec::new(),
            aliases: vec![("task", "t1".into(), "session:s3".into(), 10)],
        };
        store
            .commit(
                "p",
                1,
                &batch,
                &mut |_, _| Ok(false),
                &Meta::default(),
                Durability::Deferred,
            )
            .expect("commit");
        assert_eq!(
            store
                .lookup("p", 1, "task", "t1")
                .expect("lookup")
                .as_deref(),
            Some("session:s3")
        );
        drop(store);
        // Opening it again finds nothing to change.
        let store = Store::open(&path).expect("reopen");
        assert_eq!(aliases(&store).len(), 2);
    }

    #[test]
    fn each_state_of_a_commit_is_written_as_encoded_alone_in_the_one_buffer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("s.redb")).expect("open");
        // A long encoding, then a short one, then a key with nothing to write: each written
        // alone, whatever the buffer held before.
        let states = [("a", vec![7u8; 5000]), ("b", vec![1, 2, 3])];
        let mut encode = |key: &str, bytes: &mut Vec<u8>| {
            assert!(bytes.is_empty(), "the buffer is handed over empty");
            match states.iter().find(|(k, _)| *k == key) {
                Some((_, state)) => {
                    bytes.extend_from_slice(state);
                    Ok(true)
                }
                None => Ok(false),
            }
        };
        let batch = Batch {
            keys: vec!["a".into(), "b".into(), "c".into()],
            aliases: Vec::new(),
        };
        let written = store
            .commit(
                "p",
                1,
                &batch,
                &mut encode,
                &Meta::default(),
                Durability::Deferred,
            )
            .expect("commit");
        assert_eq!(written, 5003);
        for (key, state) in &states {
            assert_eq!(store.get("p", 1, key).expect("get").as_ref(), Some(state));
        }
        assert_eq!(store.get("p", 1, "c").expect("get"), None);
        let mut failing = |_: &str, _: &mut Vec<u8>| Err("no".to_string());
        let error = store
            .commit(
                "p",
                1,
                &batch,
                &mut failing,
                &Meta::default(),
                Durability::Deferred,
            )
            .expect_err("an encoding that fails")
            .to_string();
        assert!(error.contains("encoding the state of a in p"), "{error}");
    }
}
