//! `journal read` and `journal tail [-f]`: stored events as JSON Lines, the recent ones, and
//! (following) each new one as it is appended.

use std::io::{self, BufWriter, Write};

use clap::Args;
use journal_engine::{Filter, Journal};
use journal_format::{Position, StoredEvent};

use crate::{out, Failure, FilterArgs};

/// `journal read`'s arguments.
#[derive(Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `journal tail`'s arguments.
#[derive(Args, Debug)]
pub struct TailArgs {
    /// Keep following new events.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Without --from, start this many events before the head.
    #[arg(short = 'n', long, default_value_t = 10)]
    pub lines: u64,
    #[command(flatten)]
    pub filter: FilterArgs,
}

fn print_event(out: &mut impl Write, event: &StoredEvent) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &event.to_json_value())?;
    out.write_all(b"\n")
}

/// Prints every event `filter` selects.
pub fn read(journal: &Journal, filter: Filter) -> Result<(), Failure> {
    let mut out = BufWriter::new(out::stdout());
    for event in journal.query(filter)? {
        print_event(&mut out, &event?)?;
    }
    out.flush()?;
    Ok(())
}

/// Prints the last events (or those from `--from`), then, with `-f`, each new one.
pub async fn tail(journal: &Journal, args: &TailArgs) -> Result<u8, Failure> {
    let mut filter = args.filter.filter();
    let head = journal.head().position;
    if filter.from.is_none() {
        filter.from = Some(Position(
            head.0.saturating_sub(args.lines.saturating_sub(1)).max(1),
        ));
    }
    let from = filter.from.unwrap_or(Position(1));
    if !args.follow {
        read(journal, filter)?;
        return Ok(0);
    }
    let mut subscription = journal.subscribe(from);
    let mut remaining = filter.limit.unwrap_or(usize::MAX);
    filter.limit = None;
    let mut stdout = out::stdout();
    while remaining > 0 {
        let Some(event) = subscription.next().await else {
            break;
        };
        let event = event?;
        if filter.to.is_some_and(|to| event.position > to) {
            break;
        }
        if filter.matches(&event) {
            print_event(&mut stdout, &event)?;
            stdout.flush()?;
            remaining -= 1;
        }
    }
    Ok(0)
}
