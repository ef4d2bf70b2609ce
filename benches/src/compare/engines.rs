//! The append engines compared side by side, behind one trait: the bound (a preallocated file,
//! one `write` + `fdatasync` per batch), the journal (durable default), SQLite (WAL,
//! `synchronous=FULL`), redb and okaywal. Each gets the same events; the peers store each
//! event's MessagePack bytes as a value keyed by a `u64` (the cheapest key they offer).

use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::{Envelope, FRAME_HEADER_LEN};

use super::Res;
use crate::{workload_event_with, Ids};

/// One batch of events in the form an engine takes, built before the clock starts.
#[derive(Debug, Default)]
pub struct Batch {
    /// The envelopes (the journal).
    pub envelopes: Vec<Envelope>,
    /// The keys (the peers).
    pub keys: Vec<u64>,
    /// Each event's MessagePack bytes (the peers).
    pub bodies: Vec<Vec<u8>>,
    /// The batch as one buffer of frame-sized records (the bound).
    pub framed: Vec<u8>,
    /// The MessagePack bytes of the batch, whichever form the engine takes.
    pub msgpack_bytes: u64,
}

/// The engines, in the order each cell runs them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A preallocated, zero-filled file: one `pwrite` + `fdatasync` per batch.
    Bound,
    /// This journal, `Options::default()` (durable, group commit).
    Journal,
    /// SQLite through rusqlite (bundled), WAL mode, `synchronous=FULL`, one transaction per
    /// batch, a connection per producer.
    Sqlite,
    /// redb, one write transaction per batch (durability `Immediate`, its default).
    Redb,
    /// okaywal, one entry (a chunk per event) committed per batch.
    Okaywal,
}

impl Kind {
    /// Every engine.
    pub const ALL: [Kind; 5] = [
        Kind::Bound,
        Kind::Journal,
        Kind::Sqlite,
        Kind::Redb,
        Kind::Okaywal,
    ];

    /// The engine's name in tables and JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bound => "bound",
            Kind::Journal => "journal",
            Kind::Sqlite => "sqlite",
            Kind::Redb => "redb",
            Kind::Okaywal => "okaywal",
        }
    }

    /// The engine named `name`.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(name: &str) -> Res<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("unknown engine {name}").into())
    }

    /// Builds the batch of events `keys` in this engine's form, their ids made as `ids` says.
    ///
    /// # Errors
    /// An event that does not encode (a bug in the workload).
    pub fn batch(self, keys: Vec<u64>, ids: Ids) -> Res<Batch> {
        let mut batch = Batch::default();
        for &key in &keys {
            let event = workload_event_with(key, ids);
            let body = event.to_msgpack()?;
            batch.msgpack_bytes += body.len() as u64;
            match self {
                Kind::Journal => batch.envelopes.push(event),
                Kind::Bound => {
                    // The journal's frame: a header's worth of bytes, then the body.
                    batch.framed.extend_from_slice(&[0xA5; FRAME_HEADER_LEN]);
                    batch.framed.extend_from_slice(&body);
                }
                Kind::Sqlite | Kind::Redb | Kind::Okaywal => batch.bodies.push(body),
            }
        }
        if matches!(self, Kind::Sqlite | Kind::Redb | Kind::Okaywal) {
            batch.keys = keys;
        }
        Ok(batch)
    }

    /// Opens the engine in the empty directory `dir`, for `producers` producers writing at most
    /// `bytes_max` bytes in all.
    ///
    /// # Errors
    /// The engine's open error.
    pub fn open(self, dir: &Path, producers: usize, bytes_max: u64) -> Res<Box<dyn Engine>> {
        Ok(match self {
            Kind::Bound => Box::new(Bound::open(dir, bytes_max)?),
            Kind::Journal => Box::new(JournalEngine(Journal::open(
                dir.join("journal"),
                Options::default(),
            )?)),
            Kind::Sqlite => Box::new(Sqlite::open(dir, producers)?),
            Kind::Redb => Box::new(Redb(redb::Database::create(dir.join("peer.redb"))?)),
            Kind::Okaywal => Box::new(Okaywal(
                okaywal::Configuration::default_for(dir.join("okaywal"))
                    // Keep every entry, as an audit log must; the default checkpoints (and, with
                    // `LogVoid`, drops) after 768 KiB.
                    .checkpoint_after_bytes(u64::MAX / 2)
                    .open(okaywal::LogVoid)?,
            )),
        })
    }
}

/// An engine taking durable batches from several producer threads.
pub trait Engine: Send + Sync {
    /// Appends `batch` durably for producer `producer`; returns once it is durable. The batch
    /// is the caller's: built before the clock and freed after it, for every engine alike.
    ///
    /// # Errors
    /// The engine's error.
    fn append(&self, producer: usize, batch: &Batch) -> Res<()>;

    /// Closes the engine cleanly, so that what is on disk can be measured.
    ///
    /// # Errors
    /// The engine's error.
    fn close(self: Box<Self>) -> Res<()>;
}

/// The bound. Producers take turns under a lock, each batch one `pwrite` + `fdatasync` into
/// space that is already allocated and zero-filled, so the sync touches no metadata.
struct Bound {
    file: Mutex<(std::fs::File, u64)>,
}

impl Bound {
    fn open(dir: &Path, bytes_max: u64) -> Res<Bound> {
        let path = dir.join("bound.dat");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < bytes_max + (1 << 20) {
            file.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        file.sync_all()?;
        Ok(Bound {
            file: Mutex::new((file, 0)),
        })
    }
}

impl Engine for Bound {
    fn append(&self, _producer: usize, batch: &Batch) -> Res<()> {
        let mut guard = self.file.lock().map_err(|_| "bound lock poisoned")?;
        let at = guard.1;
        guard.0.write_all_at(&batch.framed, at)?;
        guard.0.sync_data()?;
        guard.1 += batch.framed.len() as u64;
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        // The bound's bytes on disk are the bytes written, not the preallocation.
        let (file, len) = self.file.into_inner().map_err(|_| "bound lock poisoned")?;
        file.set_len(len)?;
        Ok(())
    }
}

struct JournalEngine(Journal);

impl Engine for JournalEngine {
    fn append(&self, _producer: usize, batch: &Batch) -> Res<()> {
        self.0
            .append_batch_blocking(&batch.envelopes, AppendOptions::default())?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        self.0.close();
        Ok(())
    }
}

struct Sqlite {
    connections: Vec<Mutex<rusqlite::Connection>>,
}

impl Sqlite {
    fn open(dir: &Path, producers: usize) -> Res<Sqlite> {
        let path = dir.join("peer.sqlite");
        let mut connections = Vec::new();
        for _ in 0..producers.max(1) {
            let conn = rusqlite::Connection::open(&path)?;
            let mode: String =
                conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(format!("SQLite refused WAL mode ({mode})").into());
            }
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.busy_timeout(Duration::from_secs(600))?;
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS events (key INTEGER PRIMARY KEY, body BLOB NOT NULL)",
            )?;
            connections.push(Mutex::new(conn));
        }
        Ok(Sqlite { connections })
    }
}

impl Engine for Sqlite {
    fn append(&self, producer: usize, batch: &Batch) -> Res<()> {
        let mut conn = self
            .connections
            .get(producer)
            .ok_or("no connection for the producer")?
            .lock()
            .map_err(|_| "connection lock poisoned")?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut insert = tx.prepare_cached("INSERT INTO events (key, body) VALUES (?1, ?2)")?;
            for (key, body) in batch.keys.iter().zip(&batch.bodies) {
                insert.execute(rusqlite::params![i64::try_from(*key)?, body])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        for conn in self.connections {
            conn.into_inner()
                .map_err(|_| "connection lock poisoned")?
                .close()
                .map_err(|(_, e)| e)?;
        }
        Ok(())
    }
}

const REDB_EVENTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");

struct Redb(redb::Database);

impl Engine for Redb {
    fn append(&self, _producer: usize, batch: &Batch) -> Res<()> {
        let txn = self.0.begin_write()?;
        {
            let mut table = txn.open_table(REDB_EVENTS)?;
            for (key, body) in batch.keys.iter().zip(&batch.bodies) {
                table.insert(*key, body.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        drop(self.0);
        Ok(())
    }
}

struct Okaywal(okaywal::WriteAheadLog);

impl Engine for Okaywal {
    fn append(&self, _producer: usize, batch: &Batch) -> Res<()> {
        let mut entry = self.0.begin_entry()?;
        for body in &batch.bodies {
            entry.write_chunk(body)?;
        }
        entry.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        self.0.shutdown()?;
        Ok(())
    }
}
