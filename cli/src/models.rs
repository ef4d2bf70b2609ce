//! `journal get`, `journal rebuild` and the projections of `journal status`: the read models
//! kept in `projections.redb` beside the log. The CLI catches the projections up before it
//! answers, so an answer is fresh unless another process keeps appending (or a projection is
//! faulted), and it says so either way.

use std::io::{self, IsTerminal};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use journal_engine::Journal;
use journal_projections::models::{
    freshness_of, versions, ProjectionStatus, ReadError, PROJECTIONS,
};
use journal_projections::store::{Meta, Store, FILE_NAME};
use journal_projections::ReadModels;
use serde_json::{json, Value};

use crate::{fail, out, Failure};

impl From<ReadError> for Failure {
    fn from(e: ReadError) -> Failure {
        Failure {
            code: match e {
                ReadError::UnknownProjection(_) | ReadError::UnknownModel(_) => 2,
                _ => 1,
            },
            message: e.to_string(),
        }
    }
}

/// A progress bar on a terminal, hidden otherwise.
fn bar(template: &str) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// How long a command waits for the read-model store while other processes have it open. redb
/// lets one process at a time open it, and `journal get` holds it while it catches the read
/// models up and, with `--min-position`, while it waits (5 s by default): readers beside each
/// other take turns rather than fail.
const STORE_WAIT: Duration = Duration::from_secs(30);

/// Whether the journal in `dir` has a read-model store yet.
pub fn has_store(dir: &Path) -> bool {
    dir.join(FILE_NAME).exists()
}

/// Opens (or creates) the read-model store of the journal in `dir`, waiting its turn (up to
/// [`STORE_WAIT`]) while other processes have it open. Opened before the journal, so that a
/// command waiting for it holds no lock on the journal and keeps no writer out.
pub fn open_store(dir: &Path) -> Result<Arc<Store>, Failure> {
    let store = Store::open_waiting(dir.join(FILE_NAME), STORE_WAIT).map_err(ReadError::from)?;
    Ok(Arc::new(store))
}

/// The read models of `journal`, in `store` when the caller opened it first, else in the store
/// opened now.
fn read_models(journal: &Journal, store: Option<Arc<Store>>) -> Result<ReadModels, Failure> {
    let store = match store {
        Some(store) => store,
        None => open_store(journal.dir())?,
    };
    Ok(ReadModels::with_store(journal, store))
}

/// Opens the read models and catches them up, with a progress bar on a terminal.
fn caught_up(journal: &Journal, store: Option<Arc<Store>>) -> Result<ReadModels, Failure> {
    let models = read_models(journal, store)?;
    catch_up(&models)?;
    Ok(models)
}

/// Brings the read models in `store` up to the journal's head (before an archive, so that they
/// never need an archived event to catch up).
pub fn bring_up_to_date(journal: &Journal, store: Arc<Store>) -> Result<(), Failure> {
    caught_up(journal, Some(store)).map(|_| ())
}

fn catch_up(models: &ReadModels) -> Result<(), Failure> {
    let bar = bar("{msg:>10} {bar:40} {pos}/{len} events {per_sec} {eta}");
    let reached = models.catch_up(&mut |name, position, head| {
        bar.set_message(name.to_string());
        bar.set_length(head);
        bar.set_position(position);
    })?;
    bar.finish_and_clear();
    for (name, reached) in reached {
        if let journal_projections::worker::Reached::Faulted(fault) = reached {
            out::warn(format_args!(
                "journal: projection {name} is faulted at position {} (event {}): {}",
                fault.position, fault.event_id, fault.error
            ));
        }
    }
    Ok(())
}

/// The form `journal get` answers in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The read model as the journal keeps it, `unknown` where facts are missing.
    Journal,
    /// The Agent Runtime snapshot form (session and thread).
    Agentruntime,
}

/// The exit code of `journal get --min-position P` when the answer does not reflect P in time
/// (the answer is printed, marked `behind`).
const NOT_REACHED: u8 = 4;

/// `journal get KIND ID`: prints `{"model":…,"freshness":…}`; exit 1 when nothing is recorded
/// about the id, 4 ([`NOT_REACHED`]) when the answer does not reflect `--min-position` in time.
pub fn get(
    journal: &Journal,
    store: Option<Arc<Store>>,
    form: Form,
    kind: &str,
    id: &str,
    min_position: Option<u64>,
    timeout: Duration,
) -> Result<u8, Failure> {
    let models = caught_up(journal, store)?;
    if let Some(position) = min_position {
        models.wait_for(position, timeout)?;
    }
    let mut answer = match form {
        Form::Journal => models.view(kind, id)?,
        Form::Agentruntime => models.view_agentruntime(kind, id)?,
    };
    let reached = min_position.is_none_or(|p| answer.freshness.require(p));
    out::line(serde_json::to_string(&answer).map_err(|e| fail(e.to_string()))?)?;
    if !reached {
        out::warn(format_args!(
            "journal: the read models reflect position {}, short of --min-position {} after {} ms: the answer is marked `behind`",
            answer.freshness.position,
            min_position.unwrap_or_default(),
            timeout.as_millis()
        ));
        return Ok(NOT_REACHED);
    }
    if answer.model.is_none() {
        out::warn(format_args!(
            "journal: nothing is recorded about {kind} {id}"
        ));
        return Ok(1);
    }
    Ok(0)
}

/// `journal rebuild [--projection NAME]`: forgets the projection(s), rebuilds from the log, and
/// prints each one's digest over a canonical encoding.
pub fn rebuild(
    journal: &Journal,
    store: Option<Arc<Store>>,
    projection: Option<&str>,
) -> Result<u8, Failure> {
    check_name(projection)?;
    let models = read_models(journal, store)?;
    models.reset(projection)?;
    let clock = journal.clock();
    let started = clock.now_unix_ns();
    catch_up(&models)?;
    let elapsed_ns = clock.now_unix_ns().saturating_sub(started).max(1);
    let head = journal.head().position.0;
    let mut out = Vec::new();
    for name in selected(projection) {
        let (digest, keys) = models.digest(name)?;
        let freshness = models.freshness(name)?;
        out.push(json!({
            "projection": name,
            "position": freshness.position,
            "state": freshness.state,
            "keys": keys,
            "digest": digest.to_hex().to_string(),
        }));
    }
    let seconds = elapsed_ns as f64 / 1e9;
    out::line(format_args!(
        "{}",
        json!({
            "events": head,
            "seconds": seconds,
            "eventsPerSecond": (head as f64 / seconds).round(),
            "projections": out,
        })
    ))?;
    Ok(0)
}

fn check_name(projection: Option<&str>) -> Result<(), Failure> {
    match projection {
        Some(p) if !PROJECTIONS.contains(&p) => {
            Err(ReadError::UnknownProjection(p.to_string()).into())
        }
        _ => Ok(()),
    }
}

fn selected(projection: Option<&str>) -> impl Iterator<Item = &'static str> + '_ {
    PROJECTIONS
        .into_iter()
        .filter(move |name| projection.is_none_or(|p| p == *name))
}

/// `journal rebuild --verify`: catches the stored read models up, rebuilds them from scratch
/// into a scratch store beside them, and compares digests; exit 3 when any differ (the stored
/// models are then wrong: rebuild them).
pub fn verify(
    journal: &Journal,
    store: Option<Arc<Store>>,
    projection: Option<&str>,
) -> Result<u8, Failure> {
    let models = caught_up(journal, store)?;
    check_name(projection)?;
    let scratch_path = journal
        .dir()
        .join(format!("projections.verify.{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&scratch_path);
    let result = (|| {
        let scratch = ReadModels::open_at(journal, &scratch_path)?;
        scratch.catch_up(&mut |_, _, _| {})?;
        let mut out = Vec::new();
        let mut equal = true;
        for name in selected(projection) {
            let (kept, keys) = models.digest(name)?;
            let (rebuilt, rebuilt_keys) = scratch.digest(name)?;
            let same = kept == rebuilt && keys == rebuilt_keys;
            equal &= same;
            out.push(json!({
                "projection": name,
                "position": models.freshness(name)?.position,
                "keys": keys,
                "digest": kept.to_hex().to_string(),
                "rebuiltDigest": rebuilt.to_hex().to_string(),
                "equal": same,
            }));
        }
        Ok::<_, ReadError>((equal, out))
    })();
    let _ = std::fs::remove_file(&scratch_path);
    let (equal, out) = result?;
    out::line(json!({"equal": equal, "projections": out}))?;
    Ok(if equal { 0 } else { 3 })
}

/// The projections' part of `journal status` (not caught up first: it shows the true lag).
/// Without a store yet (no read model was ever asked for), every projection is `unknown`, and
/// no store is created: `status` changes nothing.
pub fn status(journal: &Journal, store: Option<Arc<Store>>) -> Result<Value, Failure> {
    if store.is_none() && !has_store(journal.dir()) {
        let unknown = versions()
            .into_iter()
            .map(|(name, version)| {
                Ok(ProjectionStatus {
                    name: name.to_string(),
                    version,
                    serving_version: None,
                    freshness: freshness_of(&Meta::default(), journal, name)?,
                })
            })
            .collect::<Result<Vec<_>, ReadError>>()?;
        return serde_json::to_value(unknown).map_err(|e| fail(e.to_string()));
    }
    let models = read_models(journal, store)?;
    serde_json::to_value(models.status()?).map_err(|e| fail(e.to_string()))
}

/// `journal get history SESSION [--cursor P] [--limit N]`: one window of the session's events,
/// with the cursor of the next (`null` at the end). Read from the log: always current.
pub fn history(journal: &Journal, session: &str, cursor: u64, limit: usize) -> Result<u8, Failure> {
    let window = journal_projections::models::history(journal, session, cursor, limit)?;
    let empty = window.events.is_empty();
    out::line(format_args!(
        "{}",
        serde_json::to_string(&json!({"model": window})).map_err(|e| fail(e.to_string()))?
    ))?;
    Ok(u8::from(empty))
}
