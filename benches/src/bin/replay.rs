//! The replay workload: the time to replay one session of about 100,000 events in each format,
//! against reading the same session's events from the journal in the same run.
//!
//! ```sh
//! cargo run --release -p journal-benches --bin replay -- [--events 100000] [--dir DIR]
//! ```

#![allow(clippy::disallowed_methods)] // A measurement tool reads the wall clock by design.

use std::path::PathBuf;
use std::time::Instant;

use journal_engine::{AppendOptions, Durability, Filter, Journal, Options};
use journal_projections::workload;
use journal_replay::{html, narrative, text, Scope};
use serde_json::json;

fn median_ms(mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        size = f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[2], size)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut events = 100_000usize;
    let mut dir: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--events" => {
                events = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--events N")
            }
            "--dir" => dir = args.next().map(PathBuf::from),
            other => {
                eprintln!("replay: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let tmp = tempfile::tempdir_in(dir.unwrap_or_else(|| PathBuf::from("."))).expect("tempdir");
    let journal = Journal::open(
        tmp.path(),
        Options {
            durability: Durability::Buffered {
                sync_interval: std::time::Duration::from_millis(200),
            },
            ..Options::default()
        },
    )
    .expect("open");
    let generated = workload::generate(7, 1, events);
    let n = generated.len();
    for chunk in generated.chunks(1000) {
        journal
            .append_batch_blocking(chunk.to_vec(), AppendOptions::default())
            .expect("append");
    }
    let session = "sess_00000".to_string();
    let scope = Scope::Session(session.clone());
    println!("one session of {n} events");
    let (read_ms, _) = median_ms(|| {
        journal
            .query(Filter {
                session: Some(session.clone()),
                ..Filter::default()
            })
            .expect("query")
            .count()
    });
    let stored = journal_replay::events(&journal, &scope).expect("events");
    let head = journal.head().position.0;
    let (build_ms, steps) = median_ms(|| narrative::build(&scope, &stored, None, head).steps.len());
    let (load_ms, _) = median_ms(|| {
        journal_replay::load(&journal, &scope, None)
            .expect("load")
            .steps
            .len()
    });
    let built = journal_replay::load(&journal, &scope, None).expect("load");
    let (text_ms, text_bytes) = median_ms(|| text::render(&built, false).len());
    let (json_ms, json_bytes) = median_ms(|| serde_json::to_vec(&built).expect("json").len());
    let (html_ms, html_bytes) = median_ms(|| html::render(&built).len());
    println!(
        "\n{:<34} {:>10} {:>12} {:>10}",
        "phase", "ms", "bytes", "× read"
    );
    let rows = [
        ("read the session's events", read_ms, 0),
        ("build the narrative (no I/O)", build_ms, steps),
        ("load: read + build + judge", load_ms, 0),
        (
            "replay, text (load + render)",
            load_ms + text_ms,
            text_bytes,
        ),
        (
            "replay, json (load + render)",
            load_ms + json_ms,
            json_bytes,
        ),
        (
            "replay, html (load + render)",
            load_ms + html_ms,
            html_bytes,
        ),
    ];
    for (name, ms, bytes) in rows {
        println!("{name:<34} {ms:>10.1} {bytes:>12} {:>10.2}", ms / read_ms);
    }
    println!(
        "\n{}",
        json!({
            "events": n, "steps": steps, "readMs": read_ms, "buildMs": build_ms, "loadMs": load_ms,
            "textMs": load_ms + text_ms, "jsonMs": load_ms + json_ms, "htmlMs": load_ms + html_ms,
            "textBytes": text_bytes, "jsonBytes": json_bytes, "htmlBytes": html_bytes,
        })
    );
    journal.close();
}
