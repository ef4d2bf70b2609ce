//! Token revocation without restart: the server reads its tokens file again when the file
//! changes (its modification time, size or inode, looked at once a second) and at once on
//! SIGHUP. `journal token revoke` writes a new file and renames it over the old one, so a
//! revoked token is refused within about a second. A file that is gone or cannot be read
//! refuses every token until it is fixed, rather than keep a revoked one alive.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::tokens::{Tokens, TokensFile};
use crate::AppState;

/// How often the tokens file's metadata is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What tells one version of the file from another: modification time, size and inode.
type Stamp = Option<(Option<SystemTime>, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok(), meta.len(), meta.ino()))
}

/// Watches the tokens file of a server that has one, until aborted.
pub(crate) fn spawn(state: Arc<AppState>) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Some(tokens) = &state.tokens {
            watch(tokens).await;
        }
    })
}

async fn watch(tokens: &Tokens) {
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(target: "journal::tokens", "no SIGHUP handler ({e}); the tokens file is still read again when it changes");
            None
        }
    };
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut seen = stamp(tokens.path());
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            () = hung_up(&mut hangup) => true,
        };
        let now = stamp(tokens.path());
        if forced || now != seen {
            seen = now;
            reload(tokens);
        }
    }
}

/// Completes on the next SIGHUP (never without a handler).
async fn hung_up(hangup: &mut Option<tokio::signal::unix::Signal>) {
    if let Some(s) = hangup {
        if s.recv().await.is_some() {
            return;
        }
    }
    std::future::pending().await
}

/// Reads the tokens file again and accepts its tokens from now on.
fn reload(tokens: &Tokens) {
    let path = tokens.path();
    let read = if path.exists() {
        TokensFile::read(path).and_then(|file| tokens.replace(&file))
    } else {
        Err(crate::tokens::TokenError::Invalid(format!(
            "tokens file {} is gone",
            path.display()
        )))
    };
    match read {
        Ok(n) => tracing::info!(
            target: "journal::tokens",
            tokens = n,
            "tokens file {} read again: {n} token(s) accepted",
            path.display()
        ),
        Err(e) => {
            tokens.clear();
            tracing::error!(target: "journal::tokens", "{e}; every token is refused until the file is fixed");
        }
    }
}
