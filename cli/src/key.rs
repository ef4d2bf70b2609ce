//! `journal key create NAME [--out DIR]`: a new Ed25519 key for signing checkpoints, its seed
//! drawn from the operating system: `NAME.key` (the private key's text, mode 0600, created so
//! before a byte is written) and `NAME.pub` (the verifier key's text, mode 0644), neither ever
//! overwritten. Prints the verifier key.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use journal_format::checkpoint::SigningKey;

use crate::{fail, out, Failure};

/// `journal key`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create a signing key: NAME.key (private, mode 0600) and NAME.pub (the verifier key).
    Create(CreateArgs),
}

/// `journal key create`'s arguments.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The key's name, as signature lines carry it (no spaces, no `+`), e.g.
    /// `agent-journal/<journal id>`.
    name: String,
    /// The directory to write the two files in.
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

/// Runs a `journal key` subcommand.
pub fn run(command: &KeyCommand) -> Result<u8, Failure> {
    match command {
        KeyCommand::Create(args) => create(args),
    }
}

/// The file name stem of the key `name`: the name with every character other than an ASCII
/// letter, digit, `.`, `-` or `_` replaced by `_` (a name such as `example.com/log` holds a `/`).
fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn create(args: &CreateArgs) -> Result<u8, Failure> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| fail(format!("cannot draw a seed from the operating system: {e}")))?;
    let key = SigningKey::from_seed(&args.name, seed).map_err(|e| fail(e.to_string()))?;
    seed.fill(0);
    let stem = file_stem(&args.name);
    let private = args.out.join(format!("{stem}.key"));
    let public = args.out.join(format!("{stem}.pub"));
    for path in [&private, &public] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(fail(format!(
                "{} already exists: a key file is never overwritten",
                path.display()
            )));
        }
    }
    let verifier = key.verifier().to_text();
    write_new(&private, 0o600, &key.to_text())?;
    if let Err(e) = write_new(&public, 0o644, &verifier) {
        // Leave no half-made pair behind, so that the same command can be run again.
        let _ = fs::remove_file(&private);
        return Err(e);
    }
    sync_dir(&args.out)?;
    out::warn(format_args!(
        "journal: wrote {} (private, mode 0600: keep it secret) and {} (give it to auditors)",
        private.display(),
        public.display()
    ));
    out::line(&verifier)?;
    Ok(0)
}

/// Writes `text` and a newline to the new file `path`, created with `mode` (so a private key
/// is never readable by others, not even empty), and synced.
fn write_new(path: &Path, mode: u32, text: &str) -> Result<(), Failure> {
    let in_path = |e: std::io::Error| fail(format!("{}: {e}", path.display()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(in_path)?;
    // The umask may have taken bits from the mode; the mode is what the file must have.
    file.set_permissions(Permissions::from_mode(mode))
        .map_err(in_path)?;
    file.write_all(text.as_bytes()).map_err(in_path)?;
    file.write_all(b"\n").map_err(in_path)?;
    file.sync_all().map_err(in_path)
}

/// Makes the directory's new entries durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Failure> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail(format!("{}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_keep_only_plain_characters() {
        assert_eq!(file_stem("agent-journal/0190-ab"), "agent-journal_0190-ab");
        assert_eq!(file_stem("log.example"), "log.example");
        assert_eq!(file_stem("é/../x"), "__.._x");
    }
}
