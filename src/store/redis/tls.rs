//! TLS for the Redis store (feature `tls`): rustls with the ring provider; trust from the
//! system's store, or from a CA file; a client certificate for mutual TLS.
//!
//! fred would build a connector of its own for a `rediss://` URL (system roots only, and an
//! error if any system certificate fails to load); the store hands fred the URL without the
//! `s` and this connector instead.

use std::path::Path;
use std::sync::Arc;

use fred::rustls::pki_types::pem::PemObject;
use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use fred::rustls::{self, ClientConfig, RootCertStore};
use fred::types::config::{TlsConfig, TlsConnector, TlsHostMapping};

use crate::config::RedisConfig;
use crate::connect_error::ConnectError;

/// The TLS settings of `config` for fred: trust, and the client certificate if any. Reads the
/// files named in `config`.
pub(crate) fn tls_config(config: &RedisConfig) -> Result<TlsConfig, ConnectError> {
    let roots = match &config.tls_ca_file {
        Some(path) => roots_from_file(path)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::Tls {
            message: e.to_string(),
        })?
        .with_root_certificates(roots);
    let client = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = certificates(cert_file)?;
            let key = PrivateKeyDer::from_pem_slice(&read(key_file)?)
                .map_err(|e| file_error(key_file, format!("no usable private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| file_error(key_file, e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(TlsConfig {
        connector: TlsConnector::from(client),
        // Cluster nodes are reached at the addresses the cluster announces: their
        // certificates must name those (IP addresses, or hostnames with
        // `cluster-announce-hostname`).
        hostnames: TlsHostMapping::None,
    })
}

/// The system's trust store (through rustls-native-certs: the OS store, or the files named by
/// `SSL_CERT_FILE` / `SSL_CERT_DIR`).
fn system_roots() -> Result<RootCertStore, ConnectError> {
    let found = fred::rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(ConnectError::Tls {
            message: format!(
                "no trusted root certificate in the system's store{}; set redis.tls_ca_file",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", errors.join("; "))
                }
            ),
        });
    }
    Ok(roots)
}

fn roots_from_file(path: &Path) -> Result<RootCertStore, ConnectError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| file_error(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConnectError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it".to_owned()));
    }
    Ok(certs)
}

fn read(path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|e| file_error(path, e.to_string()))
}

fn file_error(path: &Path, message: String) -> ConnectError {
    ConnectError::TlsFile {
        path: path.to_owned(),
        message,
    }
}
