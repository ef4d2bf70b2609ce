//! The comparison command: the journal against the bound of the disk and against SQLite (WAL),
//! redb and okaywal, taking turns within one invocation, reported as ratios; and the journal's
//! other workloads (read-back, open after a crash, read-model rebuild, replay, import, and
//! `journal serve` over HTTP) against their baselines.
//!
//! ```text
//! cargo run --release -p journal-benches --bin compare -- [--events N] [--dir DIR] [--quick]
//!     [--rounds N] [--json FILE] [--only append|read|open|rebuild|replay|import|http|tree|app|replicate|encrypt|archive[,...]]
//!     [--random-ids]
//! ```
//!
//! - `--events N`: each workload's main size (append: events per cell; read, open, rebuild: the
//!   journal's size; replay: the session's size; http: events per cell at batch 100, a fifth of
//!   that at batch 1, and the events the event stream's producer appends). Defaults: 50,000;
//!   1,000,000; 1,000,000; 1,000,000; 100,000; 50,000. The import workload always imports the
//!   largest shared agent session, 5 × `--rounds` times.
//! - `--dir DIR`: where the scratch directory goes (default: the system's temporary directory).
//! - `--quick`: small sizes and one round, for a smoke run.
//! - `--rounds N`: rounds per cell, the median reported (default 3).
//! - `--json FILE`: also write the JSON document there (it is always printed last).
//! - `--only W,...`: run only these workloads (repeatable).
//! - `--cell BATCHxPRODUCERS`, `--engines E,...`: only these append cells and engines
//!   (repeatable; for profiling one engine in one cell); `--cell stream`: the http workload's
//!   event stream.
//! - `--random-ids`: UUID v4-shaped event ids in no order (default: ids that grow with time,
//!   `evt-000000000123`), for the append workload and the journal the read and open workloads
//!   build.
#![allow(
    clippy::disallowed_methods,
    reason = "a measurement tool reads the wall clock by design"
)]

use std::path::PathBuf;

use journal_benches::compare::engines::Kind;
use journal_benches::compare::{child, machine, Context, Res, Workload};
use serde_json::{json, Value};

struct Args {
    ctx: Context,
    only: Vec<Workload>,
    json: Option<PathBuf>,
    dir: Option<PathBuf>,
}

fn parse(args: &[String]) -> Res<Args> {
    let mut out = Args {
        ctx: Context {
            dir: PathBuf::new(),
            quick: false,
            events: None,
            rounds: 3,
            exe: std::env::current_exe()?,
            cells: Vec::new(),
            stream_cell: false,
            engines: Vec::new(),
            ids: journal_benches::Ids::Growing,
        },
        only: Vec::new(),
        json: None,
        dir: None,
    };
    let mut rounds = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--events" => out.ctx.events = Some(value()?.parse()?),
            "--dir" => out.dir = Some(PathBuf::from(value()?)),
            "--quick" => out.ctx.quick = true,
            "--random-ids" => out.ctx.ids = journal_benches::Ids::Random,
            "--rounds" => rounds = Some(value()?.parse()?),
            "--json" => out.json = Some(PathBuf::from(value()?)),
            "--cell" => {
                let v = value()?;
                if v == "stream" {
                    out.ctx.stream_cell = true;
                    continue;
                }
                let (batch, producers) = v
                    .split_once('x')
                    .ok_or("--cell BATCHxPRODUCERS or --cell stream")?;
                out.ctx.cells.push((batch.parse()?, producers.parse()?));
            }
            "--engines" => {
                for name in value()?.split(',') {
                    out.ctx.engines.push(Kind::parse(name.trim())?);
                }
            }
            "--only" => {
                for name in value()?.split(',') {
                    out.only.push(Workload::parse(name.trim())?);
                }
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    out.ctx.rounds = rounds.unwrap_or(if out.ctx.quick { 1 } else { 3 });
    if out.only.is_empty() {
        out.only = Workload::ALL.to_vec();
    }
    Ok(out)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = if argv.first().map(String::as_str) == Some("--child") {
        child(argv.get(1..).unwrap_or_default()).map(|v| println!("{v}"))
    } else {
        run(&argv)
    };
    if let Err(e) = result {
        eprintln!("compare: {e}");
        std::process::exit(1);
    }
}

fn run(argv: &[String]) -> Res<()> {
    let mut args = parse(argv)?;
    let tmp = tempfile::Builder::new()
        .prefix("journal-compare-")
        .tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    args.ctx.dir = tmp.path().to_path_buf();
    let machine = machine(&args.ctx.dir);
    println!("machine: {machine}");
    let mut sections = serde_json::Map::new();
    for workload in &args.only {
        eprintln!("compare: {} ...", workload.name());
        let section = workload.run(&args.ctx)?;
        println!("\n{}", section.text);
        sections.insert(section.name.into(), section.json);
    }
    let report = json!({
        "command": std::iter::once("compare".to_string()).chain(argv.iter().cloned()).collect::<Vec<_>>(),
        "machine": machine,
        "workloads": Value::Object(sections),
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    println!("\n{report}");
    Ok(())
}
