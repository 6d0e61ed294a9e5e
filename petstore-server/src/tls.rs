//! HTTPS: the certificate and key files, read and checked.

use std::path::PathBuf;

use dropshot::ConfigTls;

/// A PEM certificate chain and its PEM private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// The private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read the TLS {what} {path}: {source}")]
    Read {
        /// Which file: certificate or key.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The files do not make a usable certificate and key.
    #[error("the TLS certificate {cert} and key {key} are not usable: {reason}")]
    Invalid {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl TlsFiles {
    /// Reads and checks both files, as a TLS configuration (offering
    /// HTTP/2 and HTTP/1.1 by ALPN, as dropshot's conversion does).
    pub fn load(&self) -> Result<rustls::ServerConfig, TlsError> {
        let read = |what, path: &PathBuf| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                what,
                path: path.clone(),
                source,
            })
        };
        let bytes = ConfigTls::AsBytes {
            certs: read("certificate", &self.cert)?,
            key: read("key", &self.key)?,
        };
        let invalid = |reason: String| TlsError::Invalid {
            cert: self.cert.clone(),
            key: self.key.clone(),
            reason,
        };
        if let ConfigTls::AsBytes { certs, .. } = &bytes
            && !String::from_utf8_lossy(certs).contains("-----BEGIN CERTIFICATE-----")
        {
            return Err(invalid(
                "the certificate file holds no PEM certificate".into(),
            ));
        }
        rustls::ServerConfig::try_from(&bytes).map_err(|e| invalid(e.to_string()))
    }
}
