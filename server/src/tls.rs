//! HTTPS: the certificate chain and private key (PEM files) `journal serve --tls-cert FILE
//! --tls-key FILE` serves with, through rustls (its `ring` provider, TLS 1.2 and 1.3, HTTP/1.1
//! offered by ALPN). They are read and checked before the journal is opened, so a wrong path or
//! a key that does not match the certificate stops the server at start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// One of `--tls-cert` and `--tls-key` without the other.
    #[error("--tls-cert and --tls-key go together: give both (the certificate chain and its private key, PEM), or neither for plain HTTP")]
    Incomplete,
    /// A file that could not be read or holds no PEM item of the kind needed.
    #[error("{what} {path}: {message}")]
    File {
        /// "TLS certificate" or "TLS private key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the pair (a key that does not match the certificate, say).
    #[error("TLS certificate {cert} with key {key}: {message}")]
    Refused {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        message: String,
    },
}

/// A loaded certificate and key: what the server needs to accept TLS connections.
#[derive(Clone)]
pub struct Tls {
    certificate: PathBuf,
    acceptor: TlsAcceptor,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("certificate", &self.certificate)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// The TLS setting of `--tls-cert` and `--tls-key`: `None` when neither is given.
    ///
    /// # Errors
    /// [`TlsError::Incomplete`] for one without the other; else as [`Tls::load`].
    pub fn from_flags(cert: Option<&Path>, key: Option<&Path>) -> Result<Option<Tls>, TlsError> {
        match (cert, key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Tls::load(cert, key).map(Some),
            _ => Err(TlsError::Incomplete),
        }
    }

    /// Reads the certificate chain (`cert`, the server's certificate first) and the private key
    /// (`key`: PKCS#8, PKCS#1 or SEC1), PEM.
    ///
    /// # Errors
    /// [`TlsError::File`] for a file that cannot be read or holds no certificate or key;
    /// [`TlsError::Refused`] when rustls refuses the pair.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let chain = certificates(cert)?;
        let private = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
            what: "TLS private key",
            path: key.to_path_buf(),
            message: format!("no usable PEM private key: {e}"),
        })?;
        let refused = |e: rustls::Error| TlsError::Refused {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            message: e.to_string(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(refused)?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(refused)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            certificate: cert.to_path_buf(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The certificate file.
    #[must_use]
    pub fn certificate(&self) -> &Path {
        &self.certificate
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

/// The certificates of the PEM file `path`, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |message: String| TlsError::File {
        what: "TLS certificate",
        path: path.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(chain)
}
