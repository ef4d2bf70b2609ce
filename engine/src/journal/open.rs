//! Opening a journal: its lock, the head record and the index as evidence, recovery of the log
//! against them, the index checked and caught up, and the writer and indexer threads started.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use journal_format::head_record::HeadRecord;
use journal_format::{ChainHash, Position, SegmentId};

use crate::archive;
use crate::blobs::BlobStore;
use crate::checkpoints::{self, CheckpointStore};
use crate::error::{Error, Result};
use crate::evidence::{self, IndexVerdict};
use crate::index::indexer;
use crate::index::{Index, INDEX_FILE};
use crate::keys::Keys;
use crate::log::head_file::{self, HeadFile};
use crate::log::read::{self, Chain};
use crate::log::recovery::{self, Opening};
use crate::log::report::{RecoveryAction, RecoveryReport};
use crate::log::{quarantine, segment};
use crate::log::{Head, Log};
use crate::options::{Durability, Options};
use crate::progress::IndexProgress;
use crate::seams::uuid_v4;
use crate::storage::{Storage, StorageLock};
use crate::tree::Tree;

use crate::journal::{Inner, Journal};
use crate::write::syncer::{Publisher, Syncer};
use crate::write::{self, Poison, Writer};

/// A read-only journal sets nothing aside: damage refuses it.
const NO_SALVAGE: bool = false;

/// The lock file inside the journal directory.
const LOCK_FILE: &str = "LOCK";

/// The largest index backlog that open leaves to the index thread (the usual one after a
/// crash: what the indexer had not yet applied). A larger one (a missing or rebuilt index) is
/// indexed by open itself, so that readers are not left waiting on a long rebuild.
const DEFERRED_CATCH_UP_MAX: u64 = 20_000;

impl Journal {
    /// Opens (or creates) the journal in `dir`: takes its lock, runs recovery (see
    /// [`RecoveryReport`]), checks the index against the log and catches it up (rebuilding it
    /// when missing, damaged or ahead of the log), and starts the writer and indexer threads.
    ///
    /// # Errors
    /// [`Error::Locked`] when another process has it open, [`Error::Corruption`] naming the
    /// place when recovery finds damage outside a torn tail (and `options.salvage` is off),
    /// [`Error::InvalidInput`] for inconsistent options, or an I/O error.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Journal> {
        let dir = dir.as_ref().to_path_buf();
        options.validate()?;
        if options.read_only {
            return Journal::open_read_only(dir, options);
        }
        if !options.salvage {
            return Journal::open_once(dir, options, Vec::new());
        }
        // Salvage: a frame whose checksums and chain hold but whose stream version does not
        // follow its stream's (history rewritten with a consistent chain) stops the index's
        // rebuild; the log is cut there, as at any other damage, and opened again.
        match Journal::open_once(dir.clone(), options.clone(), Vec::new()) {
            Err(Error::Corruption {
                segment,
                offset,
                position,
                detail,
            }) => {
                let storage = Arc::clone(&options.storage);
                let action =
                    recovery::quarantine_from(&*storage, &dir, segment, offset, position, detail)?;
                Journal::open_once(dir, options, vec![action])
            }
            other => other,
        }
    }

    /// One attempt of [`Journal::open`]; `carried` are actions of an earlier attempt, reported
    /// first.
    fn open_once(dir: PathBuf, options: Options, carried: Vec<RecoveryAction>) -> Result<Journal> {
        let storage = Arc::clone(&options.storage);
        let lock = lock_dir(&*storage, &dir)?;
        let Checked {
            log,
            index,
            mut report,
        } = check_log(&*storage, &dir, &options, carried)?;
        // Only once the log stands against its evidence is anything written.
        let keys = open_keys(&storage, &dir, &options, true)?;
        let tail = open_tail(&*storage, &dir, &log)?;
        let head = log.head();
        let buffered = matches!(options.durability, Durability::Buffered { .. });
        let head_file = Arc::new(HeadFile::create(&*storage, &dir, head, buffered)?);
        let backlog = catch_up_index(&log, &index, options.salvage, &mut report)?;
        let tree = match options.tree {
            true => open_tree(&storage, &dir, &log, options.salvage, &mut report)?,
            false => Arc::new(Tree::off(Arc::clone(&storage), &dir)),
        };
        let poison = Arc::new(Poison::default());
        // Readers wait for the tree as for the index: what the indexer has not grown the tree
        // to yet (a small backlog left to it) counts as not indexed.
        let indexed = backlog.indexed.min(Position(tree.size()));
        let progress = Arc::new(IndexProgress::new(indexed));
        let (index_tx, index_rx) = mpsc::channel();
        let index_complete_at = backlog.deferred.map(|(_, to)| to);
        let feed = indexer::TreeFeed {
            tree: Arc::clone(&tree),
            log: Arc::clone(&log),
        };
        let indexer = start_indexer(&index, feed, &progress, index_rx, backlog, head.position)?;
        let publisher = Arc::new(Publisher::new(
            Arc::clone(&log),
            Arc::clone(&poison),
            Arc::clone(&progress),
            index_tx,
        ));
        let syncer = match options.durability {
            Durability::Durable => Some(Syncer::start(Arc::clone(&publisher))?),
            Durability::Buffered { .. } => None,
        };
        let writer = Writer::new(
            write::Wiring {
                storage: Arc::clone(&storage),
                dir: dir.clone(),
                log: Arc::clone(&log),
                lookup: Arc::clone(&index) as Arc<dyn crate::write::lookup::Lookup>,
                poison: Arc::clone(&poison),
                progress: Arc::clone(&progress),
                publisher,
                syncer,
                head_file,
                tail,
                keys: keys.clone(),
            },
            &options,
            index_complete_at,
            last_recorded_ns(&log, head)?,
        );
        let (tx, rx) = mpsc::channel();
        let cell: write::Cell = Arc::new(write::WriterCell::new(writer));
        let writer = {
            let cell = Arc::clone(&cell);
            let progress = Arc::clone(&progress);
            let log = Arc::clone(&log);
            std::thread::Builder::new()
                .name("journal-writer".into())
                .spawn(move || write::thread::run(&cell, &progress, &log, rx))
                .map_err(Error::io("starting the writer thread"))?
        };
        let blobs = BlobStore::new(Arc::clone(&storage), &dir);
        let id = checkpoints::ensure_id(&*storage, &dir, || uuid_v4(&*options.entropy))?;
        let journal = Journal {
            inner: Arc::new(Inner {
                id: Some(id),
                checkpoints: CheckpointStore::new(Arc::clone(&storage), &dir),
                signing: Mutex::new(()),
                archiving: Mutex::new(()),
                signer: Mutex::new(None),
                dir,
                options,
                log,
                index: Some(index),
                tree,
                poison,
                refresh: Mutex::new(()),
                progress,
                tx: Mutex::new(Some(tx)),
                cell: Some(cell),
                writer: Mutex::new(Some(writer)),
                indexer: Mutex::new(Some(indexer)),
                report,
                blobs,
                keys,
                _lock: Some(lock),
            }),
        };
        journal.start_signer()?;
        journal.append_pending_redactions()?;
        Ok(journal)
    }

    /// Starts the thread that signs checkpoints, when the options give it a key. It holds the
    /// journal weakly: the journal's last handle going away stops it.
    fn start_signer(&self) -> Result<()> {
        let Some(policy) = self.inner.options.checkpoints.clone() else {
            return Ok(());
        };
        let (stop, stopped) = mpsc::channel();
        let weak = Arc::downgrade(&self.inner);
        let signed = self
            .latest_checkpoint()?
            .map_or(0, |c| c.checkpoint.tree_size);
        let handle = std::thread::Builder::new()
            .name("journal-signer".into())
            .spawn(move || {
                let journal = || weak.upgrade().map(|inner| Journal { inner });
                let head = || journal().map_or(0, |j| j.head().position.0);
                let sign = || match journal() {
                    Some(j) => j
                        .sign_checkpoint(&policy.key)
                        .map(|c| c.checkpoint.tree_size),
                    None => Err(Error::Closed),
                };
                checkpoints::run_signer(&policy, &stopped, &head, &sign, signed);
            })
            .map_err(Error::io("starting the checkpoint signer thread"))?;
        *self.inner.signer.lock().unwrap_or_else(|p| p.into_inner()) = Some((stop, handle));
        Ok(())
    }

    fn open_read_only(dir: PathBuf, options: Options) -> Result<Journal> {
        let storage = Arc::clone(&options.storage);
        let (record, _) = read_head_record(&*storage, &dir, NO_SALVAGE)?;
        let committed = evidence::committed(record, (Position::ZERO, ChainHash::GENESIS));
        let at_open = archive::before_recovery(&*storage, &dir, true, &mut Vec::new())?;
        let recovered = recovery::recover(
            &*storage,
            &dir,
            Opening {
                salvage: NO_SALVAGE,
                committed,
                read_only: true,
                base: at_open.base,
            },
        )?;
        let head = recovered.head;
        let log = Arc::new(Log::new(recovered.segments, head));
        let attach = options.archive.as_deref();
        archive::after_recovery(&*storage, &log, &at_open.manifest, attach)?;
        let mut report = recovered.report;
        let no_index = (Position::ZERO, ChainHash::GENESIS);
        evidence::check(&log, record, no_index, NO_SALVAGE, &mut report)?;
        let blobs = BlobStore::new(Arc::clone(&storage), &dir);
        let keys = open_keys(&storage, &dir, &options, false)?;
        let tree = Arc::new(Tree::open_read_only(
            Arc::clone(&storage),
            &dir,
            head.position.0,
        )?);
        Ok(Journal {
            inner: Arc::new(Inner {
                id: checkpoints::read_id(&*storage, &dir)?,
                checkpoints: CheckpointStore::new(Arc::clone(&storage), &dir),
                signing: Mutex::new(()),
                archiving: Mutex::new(()),
                signer: Mutex::new(None),
                dir,
                options,
                log,
                index: None,
                tree,
                poison: Arc::new(Poison::default()),
                refresh: Mutex::new(()),
                progress: Arc::new(IndexProgress::new(head.position)),
                tx: Mutex::new(None),
                cell: None,
                writer: Mutex::new(None),
                indexer: Mutex::new(None),
                report,
                blobs,
                keys,
                _lock: None,
            }),
        })
    }
}

/// The journal's keyring, when it is encrypted and its master key given (see `Keys::load`).
fn open_keys(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    options: &Options,
    writable: bool,
) -> Result<Option<Arc<Keys>>> {
    let keys = Keys::load(
        Arc::clone(storage),
        dir,
        options.encryption.as_ref(),
        Arc::clone(&options.entropy),
        // A replica's store is its source's, replaced whole: it is only read here.
        writable && !options.replica,
    )?;
    Ok(keys.map(Arc::new))
}

/// The log's tail segment: its last segment when that is unsealed, else a new one created after
/// it and added to the log.
fn open_tail(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    log: &Log,
) -> Result<Arc<crate::log::Segment>> {
    let segments = log.segments();
    if let Some(last) = segments.last().filter(|s| !s.snapshot().sealed) {
        return Ok(Arc::clone(last));
    }
    let head = log.head();
    let id = SegmentId(segments.last().map_or(1, |s| s.id.0 + 1));
    let tail = Arc::new(segment::create(
        storage,
        dir,
        id,
        head.position.next(),
        head.hash,
    )?);
    log.push(Arc::clone(&tail));
    Ok(tail)
}

/// The head record in `dir`, if any. A damaged one refuses the open, unless `salvage`: then it
/// is set aside as no evidence, with the action that says so.
fn read_head_record(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    salvage: bool,
) -> Result<(Option<HeadRecord>, Option<RecoveryAction>)> {
    match head_file::read(storage, dir) {
        Ok(record) => Ok((record, None)),
        Err(Error::HistoryMismatch {
            evidence,
            position,
            detail,
        }) if salvage => Ok((
            None,
            Some(RecoveryAction::HistoryAccepted {
                evidence,
                position: position.0,
                detail,
            }),
        )),
        Err(e) => Err(e),
    }
}

/// The `recordedAt` of the head event, so `recordedAt` never goes backwards across a reopen.
fn last_recorded_ns(log: &Log, head: Head) -> Result<i64> {
    if head.position == Position::ZERO {
        return Ok(i64::MIN);
    }
    let mut ns = i64::MIN;
    read::for_each_frame(
        log,
        head.position,
        head.position,
        Chain::Unverified,
        &mut |raw| {
            ns = raw.header.meta.recorded_at_ns;
            Ok(false)
        },
    )?;
    Ok(ns)
}

/// Creates `dir` if needed and takes its lock.
fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<Box<dyn StorageLock>> {
    storage
        .create_dir_all(dir)
        .map_err(Error::io_with(|| format!("creating {}", dir.display())))?;
    storage.lock(&dir.join(LOCK_FILE)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked(dir.to_path_buf())
        } else {
            Error::io_with(|| format!("locking {}", dir.display()))(e)
        }
    })
}

/// The log recovered and held against its evidence, the index opened (cleared when it must be
/// rebuilt), and the report of both.
struct Checked {
    log: Arc<Log>,
    index: Arc<Index>,
    report: RecoveryReport,
}

/// Reads the evidence (the head record, then the index's head), recovers the log against it,
/// and decides whether the index can be kept. Nothing is written here but what salvage keeps
/// in `quarantine/`.
fn check_log(
    storage: &dyn Storage,
    dir: &Path,
    options: &Options,
    carried: Vec<RecoveryAction>,
) -> Result<Checked> {
    // The head record is read before the log: it is the evidence the log is held against.
    let (record, unreadable_record) = read_head_record(storage, dir, options.salvage)?;
    // The index is opened next: its head is evidence too (`evidence::committed`).
    let index_path = dir.join(INDEX_FILE);
    let existed = index_path.exists();
    let (index, recreated) = Index::open(&index_path)?;
    let index = Arc::new(index);
    let index_head = index.indexed()?;
    let committed = evidence::committed(record, index_head);
    let mut archived = Vec::new();
    let at_open = archive::before_recovery(storage, dir, false, &mut archived)?;
    let recovered = recovery::recover(
        storage,
        dir,
        Opening {
            salvage: options.salvage,
            committed,
            read_only: false,
            base: at_open.base,
        },
    )?;
    let mut report = recovered.report;
    report.actions.splice(0..0, carried);
    report.actions.splice(0..0, archived);
    report.actions.extend(unreadable_record);
    let head = recovered.head;
    let log = Arc::new(Log::new(recovered.segments, head));
    archive::after_recovery(storage, &log, &at_open.manifest, options.archive.as_deref())?;
    if let Some(why) = recreated {
        report.actions.push(RecoveryAction::IndexRebuilt {
            reason: format!("the index file could not be used ({why})"),
        });
    } else if !existed && head.position > Position::ZERO {
        report.actions.push(RecoveryAction::IndexRebuilt {
            reason: "the index file was missing".into(),
        });
    }
    let verdict = evidence::check(&log, record, index_head, options.salvage, &mut report)?;
    if let IndexVerdict::Rebuild(reason) = verdict {
        index.clear()?;
        report.actions.push(RecoveryAction::IndexRebuilt { reason });
    }
    if options.salvage {
        quarantine::keep_salvage_report(storage, dir, &report)?;
    }
    Ok(Checked { log, index, report })
}

/// What the index lacks of the log at open, and who indexes it.
struct Backlog {
    /// The backlog left to the index thread: positions `from..=to`.
    deferred: Option<(Position, Position)>,
    /// Whether the index lagged the log at open (its catch-up is not yet durable).
    lagging: bool,
    /// The position the index reflects once open returns.
    indexed: Position,
}

/// Catches the index up with the log. A small backlog is left to the index thread (readers and
/// the writer wait for it, see `IndexProgress`); a large one is indexed here. Either way the
/// catch-up commits without a sync: the index is derived from the log, so if the process dies
/// before the indexer's next durable commit (it makes one as soon as it is idle), the next open
/// catches up again. Open waits on no device flush.
fn catch_up_index(
    log: &Arc<Log>,
    index: &Index,
    salvage: bool,
    report: &mut RecoveryReport,
) -> Result<Backlog> {
    let head = log.head();
    let (indexed, _) = index.indexed()?;
    if let Some(b) = log.boundary().filter(|b| !b.attached) {
        if indexed < b.last_archived {
            // Refused rather than left to fail on the index thread: say where the events are.
            let otherwise = Error::Index(format!("the index lacks position {}", indexed.next()));
            return Err(log.missing(indexed.next(), otherwise));
        }
    }
    let lagging = indexed < head.position;
    if !lagging {
        return Ok(Backlog {
            deferred: None,
            lagging,
            indexed: head.position,
        });
    }
    report.actions.push(RecoveryAction::IndexCaughtUp {
        from: indexed.next().0,
        to: head.position.0,
    });
    // Salvage indexes everything before it opens: damage the index finds is then salvage's to
    // deal with.
    if head.position.0 - indexed.0 <= DEFERRED_CATCH_UP_MAX && !salvage {
        return Ok(Backlog {
            deferred: Some((indexed.next(), head.position)),
            lagging,
            indexed,
        });
    }
    indexer::catch_up(log, index, indexed.next(), head.position)?;
    Ok(Backlog {
        deferred: None,
        lagging,
        indexed: head.position,
    })
}

/// Starts the indexer thread with what open left to it: the index's backlog and the tree to
/// grow to the log's head at open (`head`).
fn start_indexer(
    index: &Arc<Index>,
    feed: indexer::TreeFeed,
    progress: &Arc<IndexProgress>,
    rx: mpsc::Receiver<crate::write::answer::CommittedGroup>,
    backlog: Backlog,
    head: Position,
) -> Result<std::thread::JoinHandle<()>> {
    let (index, progress) = (Arc::clone(index), Arc::clone(progress));
    let Backlog {
        deferred, lagging, ..
    } = backlog;
    let backlog = indexer::Backlog {
        index: deferred,
        head,
    };
    std::thread::Builder::new()
        .name("journal-indexer".into())
        .spawn(move || indexer::run(index, feed, progress, rx, backlog, lagging))
        .map_err(Error::io("starting the indexer thread"))
}

/// Opens the Merkle tree, reporting why it is rebuilt when it is. A small backlog (the usual
/// one after a crash) is left to the index thread, which grows the tree before anything else;
/// a large one (a tree missing or set aside) is grown here, as a large index backlog is.
/// Growing it can fail without failing the open: the tree then says why to every proof asked
/// of it, and is rebuilt at the next open.
fn open_tree(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    log: &Log,
    salvage: bool,
    report: &mut RecoveryReport,
) -> Result<Arc<Tree>> {
    let head = log.head().position;
    let accepted = report
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::HistoryAccepted { .. }));
    let distrust = accepted.then(|| "salvage accepted a log that contradicts its evidence".into());
    let opened = Tree::open(Arc::clone(storage), dir, log, distrust)?;
    if let Some(reason) = opened.rebuilt {
        report.actions.push(RecoveryAction::TreeRebuilt { reason });
    }
    let tree = opened.tree;
    if head.0 - tree.size() > DEFERRED_CATCH_UP_MAX || salvage {
        let grown = tree.grow(log, [], head).and_then(|()| tree.persist());
        if let Err(e) = grown {
            tracing::error!(error = %e, "building the Merkle tree at open failed");
        }
    }
    Ok(Arc::new(tree))
}
