//! Bearer tokens: the tokens file (JSON, mode 0600) that keeps only each token's BLAKE3 hash,
//! its scopes and the session-id prefixes it is limited to; and the check of a request's
//! token against it. The token itself is printed once, when created, and never stored.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use journal_engine::seams::{Entropy, SystemEntropy};
use serde::{Deserialize, Serialize};

/// What a token may do.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// `POST /v1/events`.
    Append,
    /// `POST /v1/commands/{name}`.
    Command,
    /// Reading: events, the stream, read models, status, digest.
    Read,
    /// Everything, and `/v1/verify` and `/metrics`.
    Admin,
}

impl Scope {
    /// The scope's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Scope::Append => "append",
            Scope::Command => "command",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    /// The scope named `name`.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(name: &str) -> Result<Scope, TokenError> {
        match name {
            "append" => Ok(Scope::Append),
            "command" => Ok(Scope::Command),
            "read" => Ok(Scope::Read),
            "admin" => Ok(Scope::Admin),
            other => Err(TokenError::Invalid(format!(
                "no scope {other:?} (known: append, command, read, admin)"
            ))),
        }
    }
}

/// One token as the file keeps it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// The token's id: how `journal token list` and `revoke` name it (not a secret).
    pub id: String,
    /// The BLAKE3 hash of the token, hex.
    pub hash: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// When set, the session-id prefixes it is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<String>>,
    /// When it was created (RFC 3339).
    pub created: String,
}

/// The tokens file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokensFile {
    /// The tokens.
    pub tokens: Vec<TokenRecord>,
}

/// A failure to read, write or use the tokens file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The file could not be read or written.
    #[error("tokens file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not a tokens file.
    #[error("tokens file {path} is not valid: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
}

/// The prefix of every token, so that one is recognised in a log or a leak scan.
pub const TOKEN_PREFIX: &str = "jt_";

/// The random bytes of a token (256 bits).
const TOKEN_RANDOM_BYTES: usize = 32;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TokensFile {
    /// Reads the tokens file at `path`; a missing file is an empty one.
    ///
    /// # Errors
    /// [`TokenError`].
    pub fn read(path: &Path) -> Result<TokensFile, TokenError> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| TokenError::Malformed {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TokensFile::default()),
            Err(source) => Err(TokenError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Writes the file to `path` (mode 0600), whole: a new file beside it, synced, renamed
    /// over it.
    ///
    /// # Errors
    /// [`TokenError::Io`].
    pub fn write(&self, path: &Path) -> Result<(), TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = serde_json::to_vec_pretty(self).map_err(|e| io(io::Error::other(e)))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let _ = fs::remove_file(&tmp);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        file.write_all(&text).map_err(io)?;
        file.write_all(b"\n").map_err(io)?;
        file.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)?;
        // The rename is durable once the directory is synced.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        Ok(())
    }

    /// Adds a new token; returns the token (to print once) and its record.
    ///
    /// # Errors
    /// [`TokenError::Invalid`] without a scope or with an empty session prefix.
    pub fn create(
        &mut self,
        scopes: Vec<Scope>,
        sessions: Option<Vec<String>>,
        created: String,
    ) -> Result<(String, TokenRecord), TokenError> {
        if scopes.is_empty() {
            return Err(TokenError::Invalid(
                "a token needs at least one scope".into(),
            ));
        }
        if sessions
            .as_ref()
            .is_some_and(|s| s.is_empty() || s.iter().any(String::is_empty))
        {
            return Err(TokenError::Invalid(
                "a session prefix must not be empty (leave --sessions out for every session)"
                    .into(),
            ));
        }
        let mut random = [0u8; TOKEN_RANDOM_BYTES];
        SystemEntropy.fill(&mut random);
        let token = format!("{TOKEN_PREFIX}{}", hex(&random));
        let mut id = [0u8; 6];
        SystemEntropy.fill(&mut id);
        let record = TokenRecord {
            id: format!("tok_{}", hex(&id)),
            hash: blake3::hash(token.as_bytes()).to_hex().to_string(),
            scopes,
            sessions,
            created,
        };
        self.tokens.push(record.clone());
        Ok((token, record))
    }

    /// Removes the token `id`; whether it was there.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.tokens.len();
        self.tokens.retain(|t| t.id != id);
        self.tokens.len() != before
    }
}

/// What a request's token grants.
#[derive(Clone, Debug)]
pub struct Grant {
    scopes: Vec<Scope>,
    sessions: Option<Vec<String>>,
}

impl Grant {
    /// Everything: no tokens file, on loopback.
    #[must_use]
    pub fn everything() -> Grant {
        Grant {
            scopes: vec![Scope::Admin],
            sessions: None,
        }
    }

    /// Whether the grant includes `scope` (`admin` includes every scope).
    #[must_use]
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }

    /// The session-id prefixes the grant is limited to, if it is.
    #[must_use]
    pub fn sessions(&self) -> Option<&[String]> {
        self.sessions.as_deref()
    }

    /// Whether the grant covers session `id` (`None`: an event or request of no session,
    /// which only an unlimited grant covers).
    #[must_use]
    pub fn covers(&self, id: Option<&str>) -> bool {
        match (&self.sessions, id) {
            (None, _) => true,
            (Some(prefixes), Some(id)) => prefixes.iter().any(|p| id.starts_with(p.as_str())),
            (Some(_), None) => false,
        }
    }
}

/// One accepted token: its hash and what it grants.
type Entry = (blake3::Hash, Grant);

/// The tokens a server accepts: the hashes of the tokens file, loaded at start and replaced
/// whenever the file is read again (`reload.rs`), so that a revoked token is refused without a
/// restart.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    entries: RwLock<Arc<[Entry]>>,
}

impl Tokens {
    /// The tokens of `file`, read from `path`.
    ///
    /// # Errors
    /// [`TokenError::Malformed`] for a hash that is not 64 hex digits.
    pub fn new(file: &TokensFile, path: &Path) -> Result<Tokens, TokenError> {
        Ok(Tokens {
            path: path.to_path_buf(),
            entries: RwLock::new(entries(file, path)?),
        })
    }

    /// The tokens file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts the tokens of `file` from now on (and no others); how many there are.
    ///
    /// # Errors
    /// [`TokenError::Malformed`] for a hash that is not 64 hex digits; the tokens accepted are
    /// then unchanged.
    pub fn replace(&self, file: &TokensFile) -> Result<usize, TokenError> {
        let entries = entries(file, &self.path)?;
        let n = entries.len();
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = entries;
        Ok(n)
    }

    /// Accepts no token from now on (a tokens file that cannot be read refuses everyone rather
    /// than keep a revoked token alive).
    pub fn clear(&self) {
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = Arc::from(Vec::new());
    }

    /// The grant of `token`, if it is one of these. Every stored hash is compared, each in
    /// constant time (`blake3::Hash`'s equality), so the time taken tells nothing of which
    /// hash, or how much of one, matched.
    #[must_use]
    pub fn check(&self, token: &str) -> Option<Grant> {
        let presented = blake3::hash(token.as_bytes());
        let entries = Arc::clone(&self.entries.read().unwrap_or_else(|p| p.into_inner()));
        let mut found = None;
        for (hash, grant) in entries.iter() {
            if *hash == presented && found.is_none() {
                found = Some(grant.clone());
            }
        }
        found
    }
}

/// The entries of `file`.
fn entries(file: &TokensFile, path: &Path) -> Result<Arc<[Entry]>, TokenError> {
    file.tokens
        .iter()
        .map(|t| {
            let hash = blake3::Hash::from_hex(&t.hash).map_err(|e| TokenError::Malformed {
                path: path.to_path_buf(),
                message: format!("token {}: {e}", t.id),
            })?;
            Ok((
                hash,
                Grant {
                    scopes: t.scopes.clone(),
                    sessions: t.sessions.clone(),
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_token_is_checked_by_its_hash_and_revoked_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let mut file = TokensFile::read(&path).unwrap();
        let (token, record) = file
            .create(vec![Scope::Read], Some(vec!["acme-".into()]), "now".into())
            .unwrap();
        file.write(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&token), "the token itself is never stored");
        let mode = fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let tokens = Tokens::new(&TokensFile::read(&path).unwrap(), &path).unwrap();
        let grant = tokens.check(&token).unwrap();
        assert!(grant.has(Scope::Read) && !grant.has(Scope::Append));
        assert!(
            grant.covers(Some("acme-1")) && !grant.covers(Some("other")) && !grant.covers(None)
        );
        assert!(tokens.check("jt_wrong").is_none());
        let mut file = TokensFile::read(&path).unwrap();
        assert!(file.revoke(&record.id));
        assert!(file.tokens.is_empty());
        assert_eq!(tokens.replace(&file).unwrap(), 0);
        assert!(tokens.check(&token).is_none(), "revoked once replaced");
    }
}
