//! The journal's Merkle tree on disk (`tree/` in the journal's directory): the hash of every
//! complete aligned subtree, a file per level ([`levels`]), and a head record of the size and
//! root last made durable ([`head`]). The hashing and the proofs are `journal_format::merkle`'s.
//!
//! Derived from the log, like the index: the indexer grows the tree behind each commit it
//! applies, from the leaf hashes the writer hands it (each body hashed by its appender, beside
//! its encoding, so a leaf is what is stored and the writer's thread pays nothing for the tree;
//! bodies are read back from the log only for what it was not given), and makes it durable with
//! the index when idle, and every ten seconds when busy (each persist syncs the level files
//! written since the last). Open checks the files against the head and cuts them to the log; a
//! tree missing or doubtful is rebuilt from the log. A proof for a tree of `n` leaves reads
//! `O(log n)` hashes.
//!
//! One writer (the indexer thread, or open before it starts) grows the tree; readers use
//! [`Tree::size`], below which every hash is written.

mod grow;
mod head;
mod levels;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use journal_format::merkle::{self, Frontier, ProveError, Subtrees, TreeHash};
use journal_format::Position;

use crate::error::{Error, Result};
use crate::log::read::{self, Chain};
use crate::log::Log;
use crate::storage::Storage;
use head::{Found, TreeRecord};
use levels::Levels;

/// The tree's directory, inside the journal's.
pub(crate) const TREE_DIR: &str = "tree";

/// The journal's Merkle tree.
#[derive(Debug)]
pub(crate) struct Tree {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    levels: Levels,
    /// The writer's side: the frontier of the leaves written, and the size last made durable.
    writer: Mutex<Writing>,
    /// The leaves readers may use: every hash of the tree of this size is written.
    size: AtomicU64,
    /// Why the tree stopped growing, once it has: it is rebuilt at the next open.
    failed: Mutex<Option<String>>,
    /// Why the last growth failed, until one succeeds (the next tries again).
    lagging: Mutex<Option<String>>,
    read_only: bool,
}

#[derive(Debug)]
struct Writing {
    frontier: Frontier,
    durable: u64,
}

/// A tree opened, and why it was rebuilt when it was.
pub(crate) struct Opened {
    pub tree: Tree,
    /// Why the stored tree was set aside (its leaves are then built again from the log).
    pub rebuilt: Option<String>,
}

impl Tree {
    /// Opens the tree of the journal in `journal_dir` beside its `log`: keeps the stored tree
    /// when its files give its head's root and its last leaf is the hash of the log's event
    /// there, cut to the log; otherwise (or when `distrust` gives a reason, as when salvage
    /// accepted a rewritten log) starts again from no leaves and says why. The caller grows it
    /// to the log ([`Tree::grow`]).
    ///
    /// # Errors
    /// An I/O error, or damage reading the log's event; a doubtful tree is not an error.
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        journal_dir: &Path,
        log: &Log,
        distrust: Option<String>,
    ) -> Result<Opened> {
        let dir = journal_dir.join(TREE_DIR);
        storage
            .create_dir_all(&dir)
            .map_err(Error::io_with(|| format!("creating {}", dir.display())))?;
        let levels = Levels::open(Arc::clone(&storage), &dir, false)?;
        let found = head::read(&*storage, &dir)?;
        let log_size = log.head().position.0;
        let held = match &found {
            Found::Record(record) => record.size,
            Found::Missing | Found::Unreadable(_) => 0,
        };
        let kept = match (distrust, check(&levels, found, log_size)?) {
            (Some(why), _) | (None, Err(why)) => Err(why),
            (None, Ok(size)) => last_leaf_matches(&levels, log, size)?.map(|()| size),
        };
        let (size, rebuilt) = match kept {
            Ok(size) => (size, None),
            Err(why) => {
                levels.clear()?;
                head::remove(&*storage, &dir)?;
                (0, (log_size > 0).then_some(why))
            }
        };
        levels.truncate(size)?;
        let frontier = frontier_at(&levels, size)?;
        if size < held {
            // Cut below its head (the log lost a tail the tree had grown over): the cut is made
            // durable before the tree grows again, or a crash could leave the old head naming
            // hashes of new events at its positions.
            levels.sync()?;
            let root = frontier.root();
            head::write(&*storage, &dir, TreeRecord { size, root })?;
        }
        Ok(Opened {
            tree: Tree::new(storage, dir, levels, frontier, false),
            rebuilt,
        })
    }

    /// Opens the tree read-only: the stored tree up to its head, cut to the log, when its files
    /// give its head's root. A tree the writing process has not made durable yet holds nothing
    /// (and says so); a doubtful one holds nothing and says why.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn open_read_only(
        storage: Arc<dyn Storage>,
        journal_dir: &Path,
        log_size: u64,
    ) -> Result<Tree> {
        let dir = journal_dir.join(TREE_DIR);
        let found = match storage.exists(&dir) {
            true => head::read(&*storage, &dir)?,
            false => Found::Missing,
        };
        if matches!(found, Found::Missing) {
            let levels = Levels::open_none(Arc::clone(&storage), &dir);
            let tree = Tree::new(storage, dir, levels, Frontier::new(), true);
            *tree.lagging.lock().unwrap_or_else(|p| p.into_inner()) =
                Some("the process writing the journal has not made its tree durable yet".into());
            return Ok(tree);
        }
        let levels = Levels::open(Arc::clone(&storage), &dir, true)?;
        match check(&levels, found, log_size)? {
            Ok(size) => {
                let frontier = frontier_at(&levels, size)?;
                Ok(Tree::new(storage, dir, levels, frontier, true))
            }
            Err(why) => Tree::unavailable(storage, dir, &why),
        }
    }

    fn new(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        levels: Levels,
        frontier: Frontier,
        read_only: bool,
    ) -> Tree {
        let size = frontier.size();
        Tree {
            storage,
            dir,
            levels,
            writer: Mutex::new(Writing {
                frontier,
                durable: size,
            }),
            size: AtomicU64::new(size),
            failed: Mutex::new(None),
            lagging: Mutex::new(None),
            read_only,
        }
    }

    /// The tree of a journal opened without one ([`crate::Options::tree`] off): it holds no
    /// leaves, touches no file, and says why to every proof asked of it.
    pub(crate) fn off(storage: Arc<dyn Storage>, journal_dir: &Path) -> Tree {
        let dir = journal_dir.join(TREE_DIR);
        let levels = Levels::open_none(Arc::clone(&storage), &dir);
        let tree = Tree::new(storage, dir, levels, Frontier::new(), true);
        tree.fail("the journal was opened without its Merkle tree (Options::tree is off)");
        tree
    }

    /// A read-only tree of no leaves that gives `why` for every proof asked of it.
    fn unavailable(storage: Arc<dyn Storage>, dir: PathBuf, why: &str) -> Result<Tree> {
        let levels = Levels::open_none(Arc::clone(&storage), &dir);
        let tree = Tree::new(storage, dir, levels, Frontier::new(), true);
        tree.fail(why);
        Ok(tree)
    }

    /// The frontier of the tree of the first `size` leaves, read from the stored hashes.
    ///
    /// # Errors
    /// [`Error::Tree`] when the tree holds fewer leaves; an I/O error reading them.
    pub(crate) fn frontier(&self, size: u64) -> Result<Frontier> {
        if size > self.size() {
            return Err(Error::Tree(format!(
                "the tree holds {} leaves, not {size}",
                self.size()
            )));
        }
        frontier_at(&self.levels, size)
    }

    /// The leaves the tree holds: every hash of the tree of this size can be read.
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Records why the tree stopped growing; it holds what it held, and is rebuilt at the next
    /// open.
    pub(crate) fn fail(&self, why: &str) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_none() {
            *failed = Some(why.to_owned());
        }
    }

    /// Why the tree stopped growing, if it has.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why the tree lags: it stopped growing, or its last growth failed.
    pub(crate) fn lag_cause(&self) -> Option<String> {
        self.failure().or_else(|| {
            self.lagging
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    /// Makes the leaves grown since the last call durable: the level files synced, then the
    /// head naming their size and root.
    ///
    /// # Errors
    /// An I/O error; the next call tries again.
    pub(crate) fn persist(&self) -> Result<()> {
        if self.read_only || self.failure().is_some() {
            return Ok(());
        }
        let mut writing = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let size = writing.frontier.size();
        if writing.durable == size {
            return Ok(());
        }
        let record = TreeRecord {
            size,
            root: writing.frontier.root(),
        };
        let made = self
            .levels
            .sync()
            .and_then(|()| head::write(&*self.storage, &self.dir, record));
        // A failure leaves the old head in place, naming hashes still on disk: the next
        // persist tries again.
        if made.is_ok() {
            writing.durable = size;
        }
        made
    }

    /// The root of the tree of the first `size` leaves.
    ///
    /// # Errors
    /// [`Error::Tree`] when the tree does not hold `size` leaves; an I/O error.
    pub(crate) fn root_at(&self, size: u64) -> Result<TreeHash> {
        let view = self.view(size)?;
        merkle::root_at(&view, size)
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves.
    ///
    /// # Errors
    /// [`Error::Tree`] when the tree does not hold `size` leaves, or `index` is not below
    /// `size`; an I/O error.
    pub(crate) fn inclusion_proof(&self, index: u64, size: u64) -> Result<Vec<TreeHash>> {
        let view = self.view(size)?;
        merkle::inclusion_proof(&view, index, size).map_err(proving)
    }

    /// The consistency proof from the tree of `old` leaves to the tree of `new`.
    ///
    /// # Errors
    /// [`Error::Tree`] when the tree does not hold `new` leaves, or `old > new`; an I/O error.
    pub(crate) fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<TreeHash>> {
        let view = self.view(new)?;
        merkle::consistency_proof(&view, old, new).map_err(proving)
    }

    /// Reads `count` stored hashes of level `level` from `index` on (for `verify`).
    pub(crate) fn hashes(&self, level: u32, index: u64, count: usize) -> Result<Vec<TreeHash>> {
        self.levels.read(level as usize, index, count)
    }

    /// The tree as of `size` leaves, for proofs; refused when it does not hold them.
    fn view(&self, size: u64) -> Result<View<'_>> {
        let held = self.size();
        if size > held {
            let why = match self.lag_cause() {
                Some(failure) => format!("; {failure}"),
                None => String::new(),
            };
            return Err(Error::Tree(format!(
                "the tree holds {held} events, not the {size} asked for{why}"
            )));
        }
        Ok(View { tree: self, size })
    }
}

/// A tree's stored hashes, as far as `size` leaves.
struct View<'t> {
    tree: &'t Tree,
    size: u64,
}

impl Subtrees for View<'_> {
    type Error = Error;

    fn aligned(&self, level: u32, index: u64) -> Result<TreeHash> {
        let end = index
            .checked_add(1)
            .and_then(|n| n.checked_shl(level))
            .filter(|end| *end <= self.size);
        if end.is_none() {
            return Err(Error::Internal(format!(
                "a proof asked for subtree {index} of level {level}, beyond {} leaves",
                self.size
            )));
        }
        let mut one = self.tree.levels.read(level as usize, index, 1)?;
        one.pop()
            .ok_or_else(|| Error::Internal("a read of one hash gave none".into()))
    }
}

/// Turns a proof generator's error into the engine's.
fn proving(e: ProveError<Error>) -> Error {
    match e {
        ProveError::Source(e) => e,
        other => Error::Tree(other.to_string()),
    }
}

/// Decides what of the stored tree can be kept: `Ok(size)` for a tree whose files hold its
/// head's hashes and give its root, cut to `log_size`; `Err(why)` for one to rebuild.
fn check(levels: &Levels, found: Found, log_size: u64) -> Result<std::result::Result<u64, String>> {
    let record = match found {
        Found::Record(record) => record,
        Found::Missing if levels.count() == 0 => return Ok(Err("the tree was missing".into())),
        Found::Missing => return Ok(Err("the tree's head was missing".into())),
        Found::Unreadable(why) => return Ok(Err(why)),
    };
    for level in 0..64 {
        let needed = record.size >> level;
        if needed > 0 && levels.hashes(level)? < needed {
            return Ok(Err(format!(
                "level {level} of the tree holds fewer than the {needed} hashes its head's size needs"
            )));
        }
    }
    let stored = frontier_at(levels, record.size)?.root();
    if stored != record.root {
        return Ok(Err(format!(
            "the tree's files give root {stored} for {} events, its head says {}",
            record.size, record.root
        )));
    }
    Ok(Ok(record.size.min(log_size)))
}

/// Whether the last of `size` stored leaves is the hash of the log's event at that position:
/// a log rewritten under a kept tree (salvage accepting it) is caught at open, not only by
/// `verify`.
fn last_leaf_matches(
    levels: &Levels,
    log: &Log,
    size: u64,
) -> Result<std::result::Result<(), String>> {
    if size == 0 {
        return Ok(Ok(()));
    }
    let stored = levels.read(0, size - 1, 1)?;
    let mut logged = None;
    read::for_each_frame(
        log,
        Position(size),
        Position(size),
        Chain::Unverified,
        &mut |raw| {
            logged = Some(merkle::leaf_hash(raw.body));
            Ok(false)
        },
    )?;
    if stored.first() == logged.as_ref() {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "the tree's leaf at position {size} is not the hash of the log's event there"
    )))
}

/// The frontier of the tree of `size` leaves, from the stored hashes: for each set bit `k` of
/// `size`, the hash of the `2^k` leaves that follow those of the higher bits.
fn frontier_at(levels: &Levels, size: u64) -> Result<Frontier> {
    let mut hashes = Vec::new();
    for level in (0..64u32).rev() {
        if (size >> level) & 1 == 1 {
            let index = (size >> level) - 1;
            hashes.extend(levels.read(level as usize, index, 1)?);
        }
    }
    Frontier::from_parts(size, hashes)
        .map_err(|e| Error::Internal(format!("rebuilding the tree's frontier: {e}")))
}
