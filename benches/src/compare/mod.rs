//! The comparison command (`cargo run --release -p journal-benches --bin compare`): workloads run
//! through the journal and through what users compare it with, taking turns within one
//! invocation, and reported as ratios to a baseline measured in the same invocation.
//!
//! Each workload is a module with `run(&Context) -> Res<Section>`; [`Workload`] lists them. A new
//! workload (an `import` of a foreign file, say) adds a variant, its name, and a module.
#![allow(
    clippy::disallowed_methods,
    reason = "a measurement tool reads the wall clock by design"
)]
#![allow(
    clippy::cast_precision_loss,
    reason = "counts and durations become f64 figures for printing"
)]

pub mod app;
pub mod append;
pub mod archive;
pub mod encrypt;
pub mod engines;
pub mod http;
pub mod import;
pub mod open;
pub mod read;
pub mod rebuild;
pub mod replay;
pub mod replicate;
pub mod stats;
pub mod tree;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

/// The error type of the comparison: a measurement tool reports and stops.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A workload of the comparison command.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Durable appends through the bound, the journal and the peers (batch 1, 100, 1000; 1 and 8
    /// producers).
    Append,
    /// Sequential read-back, verified and unverified, against a raw read of the same bytes.
    Read,
    /// The time to open after a crash, for 1,000 and 1,000,000 events.
    Open,
    /// The read-model rebuild from the log, against a sequential read, with peak memory.
    Rebuild,
    /// The replay of one session in each format, against reading the session's events.
    Replay,
    /// The import of the largest shared agent session (Claude Code), against parsing its lines
    /// as JSON and against appending the already-mapped events.
    Import,
    /// `journal serve` over loopback HTTP: appends from 1, 16 and 64 clients against the
    /// in-process journal with as many producer threads, and 100 event-stream subscribers.
    Http,
    /// Appends with the Merkle tree kept against without it, and the time to produce and check
    /// proofs on 1,000,000 events.
    Tree,
    /// The review app: the server's answer and Chromium's render of a session's page for
    /// sessions of 1,000, 10,000 and 100,000 events, and of the list of 10,000 sessions.
    App,
    /// Replication to a local three-node JetStream cluster against raw `async-nats` publishing,
    /// the replica's lag at 10,000 events/s, and appends with replication on against off.
    Replicate,
    /// Appends and reads with the journal encrypted against without, and the time to redact a
    /// session of 10,000 events.
    Encrypt,
    /// The time to archive (and restore) about 1 GiB of sealed segments, and the verified read
    /// with the archive attached against all live.
    Archive,
}

impl Workload {
    /// Every workload, in the order a full run measures them.
    pub const ALL: [Workload; 12] = [
        Workload::Append,
        Workload::Read,
        Workload::Open,
        Workload::Rebuild,
        Workload::Replay,
        Workload::Import,
        Workload::Http,
        Workload::Tree,
        Workload::App,
        Workload::Replicate,
        Workload::Encrypt,
        Workload::Archive,
    ];

    /// The workload's name on the command line and in the JSON document.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::Read => "read",
            Workload::Open => "open",
            Workload::Rebuild => "rebuild",
            Workload::Replay => "replay",
            Workload::Import => "import",
            Workload::Http => "http",
            Workload::Tree => "tree",
            Workload::App => "app",
            Workload::Replicate => "replicate",
            Workload::Encrypt => "encrypt",
            Workload::Archive => "archive",
        }
    }

    /// The workload named `name`.
    ///
    /// # Errors
    /// An unknown name, with the known ones.
    pub fn parse(name: &str) -> Res<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!("unknown workload {name}; known: {}", names.join(", ")).into()
            })
    }

    /// Runs the workload.
    ///
    /// # Errors
    /// Any engine's error or an I/O error; the measurement stops there.
    pub fn run(self, ctx: &Context) -> Res<Section> {
        match self {
            Workload::Append => append::run(ctx),
            Workload::Read => read::run(ctx),
            Workload::Open => open::run(ctx),
            Workload::Rebuild => rebuild::run(ctx),
            Workload::Replay => replay::run(ctx),
            Workload::Import => import::run(ctx),
            Workload::Http => http::run(ctx),
            Workload::Tree => tree::run(ctx),
            Workload::App => app::run(ctx),
            Workload::Replicate => replicate::run(ctx),
            Workload::Encrypt => encrypt::run(ctx),
            Workload::Archive => archive::run(ctx),
        }
    }
}

/// What every workload gets: where to put files, and how big to be.
#[derive(Clone, Debug)]
pub struct Context {
    /// A scratch directory on the disk being measured; removed at the end.
    pub dir: PathBuf,
    /// Small sizes, for a smoke run in CI or a test.
    pub quick: bool,
    /// `--events N`: the workload's main size, overriding its default.
    pub events: Option<u64>,
    /// How many times each engine runs per cell (alternating); the median is reported.
    pub rounds: usize,
    /// This executable, for the workloads that measure in a child process.
    pub exe: PathBuf,
    /// `--cell BATCHxPRODUCERS`: only these append cells (all when empty); for profiling.
    pub cells: Vec<(u64, u64)>,
    /// `--cell stream`: the http workload's event stream (alone, unless append cells are named
    /// too); for profiling.
    pub stream_cell: bool,
    /// `--engines a,b`: only these append engines (all when empty); for profiling. Ratios to an
    /// engine left out are not reported.
    pub engines: Vec<engines::Kind>,
    /// `--random-ids`: UUID v4-shaped event ids in no order, instead of ids that grow with time,
    /// for the append workload's events and the journal the read and open workloads build (the
    /// open workload's crash child appends its batch with growing ids either way).
    pub ids: crate::Ids,
}

impl Context {
    /// The workload's main size: `--events` if given, else `quick` or `full`.
    #[must_use]
    pub fn events_or(&self, quick: u64, full: u64) -> u64 {
        self.events.unwrap_or(if self.quick { quick } else { full })
    }

    /// A fresh, empty directory under the scratch directory.
    ///
    /// # Errors
    /// I/O errors.
    pub fn fresh_dir(&self, name: &str) -> Res<PathBuf> {
        let dir = self.dir.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// A workload's result: a table for people and a JSON value for tools.
#[derive(Clone, Debug)]
pub struct Section {
    /// The workload's name.
    pub name: &'static str,
    /// The readable table.
    pub text: String,
    /// The same figures, and more, as JSON.
    pub json: Value,
}

/// The machine the figures come from, as far as the process can tell.
#[must_use]
pub fn machine(dir: &Path) -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    json!({
        "cores": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        "cpu": cpu,
        "kernel": kernel,
        "dir": dir.display().to_string(),
        "fdatasyncUs": fdatasync_us(dir).ok(),
    })
}

/// The median time of a 4 KiB overwrite + `fdatasync` on the measured disk, in microseconds.
fn fdatasync_us(dir: &Path) -> Res<f64> {
    use std::os::unix::fs::FileExt as _;
    let path = dir.join("fdatasync.probe");
    let file = std::fs::File::create(&path)?;
    file.write_all_at(&[0u8; 4096], 0)?;
    file.sync_all()?;
    let mut times = Vec::new();
    for _ in 0..50 {
        let t = std::time::Instant::now();
        file.write_all_at(&[1u8; 4096], 0)?;
        file.sync_data()?;
        times.push(t.elapsed());
    }
    std::fs::remove_file(&path)?;
    Ok(stats::median_duration(&mut times).as_secs_f64() * 1e6)
}

/// Runs what a child process was asked to do (`compare --child WHAT ARGS...`) and returns what
/// it prints: workloads that need a process of their own (peak memory, a crash) use this.
///
/// # Errors
/// Unknown requests and the workload's errors.
pub fn child(args: &[String]) -> Res<Value> {
    match args.first().map(String::as_str) {
        Some("crash-append") => open::crash_append_child(args.get(1..).unwrap_or_default()),
        Some("rebuild-phase") => rebuild::phase_child(args.get(1..).unwrap_or_default()),
        other => Err(format!("unknown child request {other:?}").into()),
    }
}

/// Runs `compare --child ARGS...` and parses what it prints as JSON.
///
/// # Errors
/// The child failing, with its standard error.
pub fn run_child(ctx: &Context, args: &[&str], path: &Path) -> Res<Value> {
    let out = std::process::Command::new(&ctx.exe)
        .arg("--child")
        .args(args)
        .arg(path)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "child {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The apparent size of every file under `path`, in bytes.
#[must_use]
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// A duration in milliseconds, for JSON and tables.
#[must_use]
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Opens the journal a workload builds its input in: buffered (synced every 200 ms), since
/// building is not what is measured.
///
/// # Errors
/// The journal's errors.
pub fn buffered_journal(dir: &Path) -> Res<journal_engine::Journal> {
    use journal_engine::{Durability, Journal, Options};
    Ok(Journal::open(
        dir,
        Options {
            durability: Durability::Buffered {
                sync_interval: Duration::from_millis(200),
            },
            ..Options::default()
        },
    )?)
}

/// A journal of `events` workload events under the scratch directory, built once per
/// invocation and shared by the workloads that read or open it (buffered appends in batches of
/// 1,000, then a clean close).
///
/// # Errors
/// The journal's errors.
pub fn built_journal(ctx: &Context, events: u64) -> Res<PathBuf> {
    use journal_engine::AppendOptions;
    let dir = ctx.dir.join(match ctx.ids {
        crate::Ids::Growing => format!("journal-{events}"),
        crate::Ids::Random => format!("journal-{events}-random-ids"),
    });
    if dir.join("segments").is_dir() {
        return Ok(dir);
    }
    let journal = buffered_journal(&dir)?;
    let mut at = 0;
    while at < events {
        let n = 1000.min(events - at);
        journal.append_batch_blocking(
            (at..at + n)
                .map(|i| crate::workload_event_with(i, ctx.ids))
                .collect::<Vec<_>>(),
            AppendOptions::default(),
        )?;
        at += n;
    }
    journal.close();
    Ok(dir)
}
