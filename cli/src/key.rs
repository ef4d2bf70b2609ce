//! `journal key create NAME [--out DIR]`: a new Ed25519 key for signing checkpoints, its seed
//! drawn from the operating system: `NAME.key` (the private key's text, mode 0600, created so
//! before a byte is written) and `NAME.pub` (the verifier key's text, mode 0644), neither ever
//! overwritten. Prints the verifier key.
//!
//! The master key of encryption at rest (docs/REDACTION.md): `journal key master FILE` makes
//! one; `key init` encrypts the journal from then on, `key rotate --new FILE` re-wraps its data
//! keys under another, `key status` shows its key store.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use journal_format::checkpoint::SigningKey;

use journal_engine::{Encryption, MasterKey, Subject, MASTER_KEY_ENV};

use crate::{fail, out, Access, Cli, Failure, Verb};

/// `journal key`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create a signing key: NAME.key (private, mode 0600) and NAME.pub (the verifier key).
    Create(CreateArgs),
    /// Make a master key: FILE (64 hex digits, mode 0600), never overwritten; prints its id.
    Master {
        /// The file to write.
        file: PathBuf,
    },
    /// Encrypt the journal's content from now on (creating the journal if need be), with the
    /// master key of --master-key or JOURNAL_MASTER_KEY.
    Init {
        /// Which field names an event's subject, whose data key seals it: `session`
        /// (`sessionId`), `runtime` (`runtimeId`) or `tenant` (`productId`).
        #[arg(long, value_enum, default_value = "session")]
        subject: SubjectArg,
    },
    /// Re-wrap every data key under the master key in FILE; the log is not touched. The
    /// journal opens with the new key only from then on.
    Rotate {
        /// The new master key's file.
        #[arg(long)]
        new: PathBuf,
    },
    /// Print the key store's summary: master key id, subject, counts of keys and redactions.
    Status,
}

/// `--subject`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectArg {
    /// `sessionId`.
    Session,
    /// `runtimeId`.
    Runtime,
    /// `productId`.
    Tenant,
}

impl KeyCommand {
    /// Whether the command runs without a journal.
    pub fn offline(&self) -> bool {
        matches!(self, KeyCommand::Create(_) | KeyCommand::Master { .. })
    }
}

/// The master key given (`--master-key FILE`, else `JOURNAL_MASTER_KEY`), if any.
fn master_key(cli: &Cli) -> Result<Option<MasterKey>, Failure> {
    if let Some(path) = &cli.master_key {
        return Ok(Some(MasterKey::from_file(path)?));
    }
    match std::env::var(MASTER_KEY_ENV) {
        Ok(text) => Ok(Some(
            MasterKey::parse(&text).map_err(|e| fail(format!("{MASTER_KEY_ENV}: {e}")))?,
        )),
        Err(_) => Ok(None),
    }
}

/// The encryption to open the journal with: the master key given, for a journal that is
/// encrypted (it has a key store) or is being made so (`key init`). A key given to a journal
/// that is not encrypted changes nothing.
pub fn encryption(cli: &Cli) -> Result<Option<Encryption>, Failure> {
    let Some(master) = master_key(cli)? else {
        return Ok(None);
    };
    let subject = match &cli.verb {
        Verb::Key(KeyCommand::Init { subject }) => match subject {
            SubjectArg::Session => Subject::Session,
            SubjectArg::Runtime => Subject::Runtime,
            SubjectArg::Tenant => Subject::Tenant,
        },
        _ if cli.dir.join("KEYS").exists() || cli.dir.join("KEYS.new").exists() => Subject::Session,
        _ => return Ok(None),
    };
    Ok(Some(Encryption { master, subject }))
}

/// Runs a `journal key` subcommand that uses the journal.
pub fn on_journal(cli: &Cli, command: &KeyCommand) -> Result<u8, Failure> {
    if encryption(cli)?.is_none() {
        return Err(fail(format!(
            "give the master key: --master-key FILE, or {MASTER_KEY_ENV} (`journal key master FILE` makes one)"
        )));
    }
    let access = match command {
        KeyCommand::Status => Access::Read,
        _ => Access::Write,
    };
    let journal = crate::open(cli, access)?;
    if let KeyCommand::Rotate { new } = command {
        let new = MasterKey::from_file(new)?;
        journal.rotate_master_key(&new)?;
    }
    let status = journal.key_status().ok_or_else(|| {
        fail("this journal is not encrypted: `journal key init` encrypts it from now on")
    })?;
    out::line(&status)?;
    journal.close();
    Ok(0)
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
        KeyCommand::Master { file } => master(file),
        _ => Err(fail("this key command needs the journal")),
    }
}

fn master(file: &Path) -> Result<u8, Failure> {
    if fs::symlink_metadata(file).is_ok() {
        return Err(fail(format!(
            "{} already exists: a key file is never overwritten",
            file.display()
        )));
    }
    let key = MasterKey::generate(&journal_engine::seams::SystemEntropy);
    write_new(file, 0o600, &key.to_hex())?;
    sync_dir(file.parent().unwrap_or(Path::new(".")))?;
    out::line(serde_json::json!({"file": file.display().to_string(), "id": key.id()}))?;
    Ok(0)
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
