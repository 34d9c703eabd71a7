//! HTTPS to providers: a [`Connector`] that wraps another in TLS (rustls).
//!
//! Trust comes from the Mozilla roots compiled in (`webpki-roots`), or from
//! the platform's store (`rustls-native-certs`), plus an optional PEM file
//! of extra certificate authorities (a private CA, or a test certificate).
//! Only the `ring` provider is compiled in, so no C toolchain beyond a
//! compiler is needed, and the configuration names it explicitly rather
//! than relying on a process-wide default.
//!
//! A TLS handshake that fails is a connect that fails: nothing was
//! dispatched, which is what the worker needs to know.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};

use super::connect::Connector;

/// Where the trusted roots come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsRoots {
    /// Mozilla's roots, compiled in: the same on every machine.
    #[default]
    Webpki,
    /// The operating system's certificate store.
    Platform,
}

impl FromStr for TlsRoots {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "webpki" => Ok(TlsRoots::Webpki),
            "platform" => Ok(TlsRoots::Platform),
            other => Err(format!(
                "unknown TLS roots {other:?}; known: webpki, platform"
            )),
        }
    }
}

/// What a TLS client trusts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    #[serde(default)]
    pub roots: TlsRoots,
    /// A PEM file of extra certificate authorities to trust.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// A TLS client configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read the CA file: {detail}")]
    CaFile { path: String, detail: String },
    #[error("{path}: holds no certificate")]
    NoCertificate { path: String },
    #[error("the platform's certificate store: {0}")]
    Platform(String),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in a PEM file.
pub fn certificates_in(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let display = path.display().to_string();
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::CaFile {
            path: display.clone(),
            detail: e.to_string(),
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::CaFile {
            path: display.clone(),
            detail: e.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate { path: display });
    }
    Ok(certificates)
}

/// The client configuration for `settings`.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match settings.roots {
        TlsRoots::Webpki => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        TlsRoots::Platform => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty()
                && let Some(error) = found.errors.first()
            {
                return Err(TlsError::Platform(error.to_string()));
            }
            // Unparseable entries in a platform store are skipped, as
            // browsers do; the usable ones still count.
            let _ = roots.add_parsable_certificates(found.certs);
        }
    }
    if let Some(path) = &settings.ca_file {
        for certificate in certificates_in(path)? {
            roots.add(certificate)?;
        }
    }
    let config = ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Opens a stream with `inner`, then speaks TLS over it, checking the
/// server's certificate against the host of the authority.
#[derive(Clone)]
pub struct TlsConnector<C> {
    inner: C,
    config: Arc<ClientConfig>,
}

impl<C: fmt::Debug> fmt::Debug for TlsConnector<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<C: Connector> TlsConnector<C> {
    pub fn new(inner: C, config: Arc<ClientConfig>) -> Self {
        Self { inner, config }
    }
}

/// The host part of `host:port` (or `[v6]:port`).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

impl<C: Connector> Connector for TlsConnector<C> {
    type Stream = tokio_rustls::client::TlsStream<C::Stream>;

    async fn connect(&self, authority: &str) -> io::Result<Self::Stream> {
        let name = ServerName::try_from(host_of(authority).to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let stream = self.inner.connect(authority).await?;
        tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, stream)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_cut_from_authorities() {
        assert_eq!(host_of("api.example.com:443"), "api.example.com");
        assert_eq!(host_of("localhost:9001"), "localhost");
        assert_eq!(host_of("[::1]:8443"), "::1");
        assert_eq!(host_of("bare"), "bare");
    }

    #[test]
    fn the_compiled_in_roots_build_a_config() {
        assert!(client_config(&TlsSettings::default()).is_ok());
        let missing = TlsSettings {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..TlsSettings::default()
        };
        assert!(matches!(
            client_config(&missing),
            Err(TlsError::CaFile { .. })
        ));
    }
}
