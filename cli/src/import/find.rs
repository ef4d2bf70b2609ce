//! Which files `journal import` reads: the files named, the session files found in the
//! directories named (searched recursively, each file's format told from its first record,
//! the others skipped and counted), or with no path the runtime's usual location
//! (`$CODEX_HOME/sessions`, `$CLAUDE_CONFIG_DIR/projects`, the OpenHands file store's
//! `sessions/`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use journal_replay::import::{self, Detected, Source};

use super::{Format, ImportArgs};
use crate::{fail, Failure};

/// One session to import.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    /// A session file.
    File(PathBuf),
    /// An OpenHands session folder's `events/` directory, one event a file.
    OpenHandsEvents(PathBuf),
}

impl Unit {
    /// The path that names it.
    pub fn path(&self) -> &Path {
        match self {
            Unit::File(p) | Unit::OpenHandsEvents(p) => p,
        }
    }
}

/// What was found.
#[derive(Debug, Default)]
pub struct Found {
    /// The sessions to import, files named first, then those found, in path order.
    pub units: Vec<Unit>,
    /// Files met in the directories that hold no session of the format: skipped.
    pub skipped: u64,
    /// Whether any directory was searched (the count of skipped files is then reported).
    pub searched: bool,
    /// The format's name.
    pub format: &'static str,
}

/// The runtime's usual location, from the flags, then the environment (through clap), then
/// the home directory.
pub fn default_location(args: &ImportArgs) -> Result<PathBuf, Failure> {
    let home = || -> Result<PathBuf, Failure> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| fail("HOME is not set: name the files or directories to import"))
    };
    Ok(match args.format {
        Format::Codex => match &args.codex_home {
            Some(dir) => dir.join("sessions"),
            None => home()?.join(".codex/sessions"),
        },
        Format::ClaudeCode => match &args.claude_dir {
            Some(dir) => dir.join("projects"),
            None => home()?.join(".claude/projects"),
        },
        Format::Openhands => match &args.openhands_dir {
            Some(dir) => dir.join("sessions"),
            None => home()?.join(".openhands/sessions"),
        },
    })
}

/// What the files met so far hold, so that searching a tree again (as `--follow` does on every
/// pass) reads only files not met before, or not told yet and grown since.
#[derive(Debug, Default)]
pub struct Detections(HashMap<PathBuf, (u64, Option<Detected>)>);

impl Detections {
    /// What the file at `path` holds, read only when not known yet.
    fn of(&mut self, path: &Path, source: Source) -> Option<Detected> {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        if let Some((seen_len, detected)) = self.0.get(path) {
            // A file's first record does not change as it grows; a file not told yet (an empty
            // one, or one whose first line is being written) is read again once it grew.
            if detected.is_some() || *seen_len == len {
                return *detected;
            }
        }
        let detected = detect_file(path, source);
        self.0.insert(path.to_path_buf(), (len, detected));
        detected
    }
}

/// The sessions to import for `args`.
///
/// # Errors
/// A path that does not exist, a default location that does not exist (saying how to name
/// another), or a directory that cannot be read.
pub fn find(args: &ImportArgs) -> Result<Found, Failure> {
    find_again(args, &mut Detections::default())
}

/// [`find`], with what earlier searches told of the files in `detections`. Under `--follow`
/// a path that is missing (a file being rotated) is kept, to be looked at again.
///
/// # Errors
/// As [`find`].
pub fn find_again(args: &ImportArgs, detections: &mut Detections) -> Result<Found, Failure> {
    let mut found = Found {
        format: args.format.source().name(),
        ..Found::default()
    };
    let roots = if args.paths.is_empty() {
        let root = default_location(args)?;
        if !root.is_dir() {
            return Err(fail(format!(
                "no {} sessions at {} (its usual location; {}, or name files or directories)",
                args.format.source().name(),
                root.display(),
                override_hint(args.format)
            )));
        }
        vec![root]
    } else {
        args.paths.clone()
    };
    let mut events_dirs = BTreeSet::new();
    let mut files = Vec::new();
    for root in roots {
        let meta = match std::fs::metadata(&root) {
            Ok(meta) => meta,
            // A file being rotated is missing for a moment: followed, it is looked at again.
            Err(e) if args.follow && e.kind() == std::io::ErrorKind::NotFound => {
                found.units.push(Unit::File(root));
                continue;
            }
            Err(e) => return Err(fail(format!("{}: cannot read: {e}", root.display()))),
        };
        if !meta.is_dir() {
            found.units.push(Unit::File(root));
            continue;
        }
        found.searched = true;
        let source = args.format.source();
        walk(
            &root,
            &mut |path| match (detections.of(path, source), path.parent()) {
                (Some(Detected::Session(s)), _) if s == source => files.push(path.to_path_buf()),
                (Some(Detected::OpenHandsEvent), Some(dir)) if source == Source::OpenHands => {
                    events_dirs.insert(dir.to_path_buf());
                }
                _ => found.skipped += 1,
            },
        )?;
    }
    files.sort();
    files.dedup();
    found.units.extend(files.into_iter().map(Unit::File));
    found
        .units
        .extend(events_dirs.into_iter().map(Unit::OpenHandsEvents));
    Ok(found)
}

/// How to name another location for `format`.
fn override_hint(format: Format) -> &'static str {
    match format {
        Format::Codex => "set CODEX_HOME or --codex-home",
        Format::ClaudeCode => "set CLAUDE_CONFIG_DIR or --claude-dir",
        Format::Openhands => "set --openhands-dir",
    }
}

/// Calls `each` with every file below `dir`, in path order. Symbolic links are not followed,
/// so a link that loops is harmless.
fn walk(dir: &Path, each: &mut dyn FnMut(&Path)) -> Result<(), Failure> {
    let read_error = |e: std::io::Error| fail(format!("{}: cannot read: {e}", dir.display()));
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        entries.push((entry.path(), entry.file_type().map_err(read_error)?));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, kind) in entries {
        if kind.is_dir() {
            walk(&path, each)?;
        } else if kind.is_file() {
            each(&path);
        }
    }
    Ok(())
}

/// What the file at `path` holds; only `.json` and `.jsonl` files are read.
fn detect_file(path: &Path, source: Source) -> Option<Detected> {
    let ext = path.extension()?.to_str()?;
    if !matches!(ext, "json" | "jsonl") {
        return None;
    }
    // A Codex or Claude Code session is JSON lines; reading the other files only costs time.
    if ext == "json" && matches!(source, Source::Codex | Source::ClaudeCode) {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    import::detect(&bytes)
}
