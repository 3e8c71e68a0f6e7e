//! The secure port's TLS: the serving certificate (files re-read when they
//! change, or a self-signed pair kept in memory) and the server
//! configuration ([`super::conn`] accepts the connections).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

/// How often the certificate files are looked at for a change: a rotated
/// certificate (cert-manager, a kubelet-style rotation) is served within
/// this long without a restart, as upstream's dynamic serving certificate.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// The serving certificate could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("the private key in {path} cannot be used: {source}")]
    Key {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("the private key in {key} does not belong to the certificate in {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("making the self-signed serving certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The certificate the secure port presents.
#[derive(Debug)]
pub enum ServingCert {
    /// Made at start for `localhost` and the bind address, never written.
    SelfSigned(Arc<CertifiedKey>),
    /// `--tls-cert-file` and `--tls-private-key-file`, re-read when either
    /// file's modification time changes; a pair that fails to load keeps
    /// the previous one in service (and says so).
    Files(Mutex<FilePair>),
}

#[derive(Debug)]
pub struct FilePair {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| CertError::Read {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|source| CertError::Read {
        path: key.to_owned(),
        source,
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|source| CertError::Key {
            path: key.to_owned(),
            source,
        })?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) => Ok(Arc::new(pair)),
        // Keys whose public half cannot be extracted cannot be checked.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(pair))
        }
        Err(_) => Err(CertError::Mismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
        }),
    }
}

impl ServingCert {
    /// The pair in `cert` and `key`, checked now so that a wrong path is an
    /// error at start rather than at the first scrape.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, CertError> {
        let current = load_pair(cert, key)?;
        Ok(ServingCert::Files(Mutex::new(FilePair {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current,
            stamps: (modified(cert), modified(key)),
            checked: Instant::now(),
        })))
    }

    /// A self-signed certificate for `localhost`, the loopback addresses and
    /// `bind_address` (when it is a specific address). Clients such as the
    /// kubelet's HTTPS probes and Prometheus with `insecureSkipVerify` accept
    /// it; anything that verifies needs `--tls-cert-file`.
    pub fn self_signed(bind_address: IpAddr) -> Result<Self, CertError> {
        let mut names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        if !bind_address.is_unspecified() && !bind_address.is_loopback() {
            names.push(bind_address.to_string());
        }
        let mut params = rcgen::CertificateParams::new(names)?;
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // Upstream names its in-memory pair the same way.
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("localhost@{started}"));
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let signing = provider()
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(key.serialize_der().into()))?;
        Ok(ServingCert::SelfSigned(Arc::new(CertifiedKey::new(
            vec![cert.der().clone()],
            signing,
        ))))
    }

    /// The pair to present now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        match self {
            ServingCert::SelfSigned(pair) => pair.clone(),
            ServingCert::Files(files) => {
                let mut f = files.lock();
                if f.checked.elapsed() >= RELOAD_CHECK {
                    f.checked = Instant::now();
                    f.reload_if_changed();
                }
                f.current.clone()
            }
        }
    }

    /// Looks at the files now, whatever the time since the last look.
    #[cfg(test)]
    fn check_now(&self) {
        if let ServingCert::Files(files) = self {
            files.lock().reload_if_changed();
        }
    }
}

impl FilePair {
    fn reload_if_changed(&mut self) {
        let stamps = (modified(&self.cert), modified(&self.key));
        if stamps == self.stamps {
            return;
        }
        match load_pair(&self.cert, &self.key) {
            Ok(pair) => {
                tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                self.current = pair;
                self.stamps = stamps;
            }
            // Mid-rotation (one file written, not the other) or broken: keep
            // serving the last good pair and look again next time.
            Err(e) => {
                tracing::warn!(error = %e, "serving certificate not reloaded; the previous one stays in use")
            }
        }
    }
}

#[derive(Debug)]
struct Resolver(Arc<ServingCert>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
}

/// TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN, no client certificates.
pub fn server_config(cert: Arc<ServingCert>) -> Result<Arc<ServerConfig>, CertError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(cert)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn served_name(cert: &ServingCert) -> Vec<u8> {
        cert.current().cert[0].to_vec()
    }

    #[test]
    fn a_self_signed_pair_names_localhost_and_a_specific_bind_address() {
        let cert = ServingCert::self_signed("192.0.2.10".parse().unwrap()).unwrap();
        let der = served_name(&cert);
        let has = |needle: &[u8]| der.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"localhost"));
        assert!(has(&[192, 0, 2, 10]), "the bind address is a SAN");
        server_config(Arc::new(cert)).unwrap();
    }

    #[test]
    fn files_are_checked_at_start_with_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), "a.example");
        ServingCert::from_files(&cert, &key).unwrap();

        let missing = dir.path().join("missing.crt");
        let err = ServingCert::from_files(&missing, &key).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("reading {}", missing.display())),
            "{err}"
        );
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let err = ServingCert::from_files(&empty, &key).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} holds no PEM certificate", empty.display())
        );
        let other = tempfile::tempdir().unwrap();
        let (_, other_key) = write_pair(other.path(), "b.example");
        let err = ServingCert::from_files(&cert, &other_key).unwrap_err();
        assert!(err.to_string().contains("does not belong to"), "{err}");
    }

    #[test]
    fn a_rotated_pair_is_served_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), "first.example");
        let serving = ServingCert::from_files(&cert, &key).unwrap();
        let first = served_name(&serving);

        // Half-written rotation: the new certificate, the old key.
        let rotated = tempfile::tempdir().unwrap();
        let (new_cert, new_key) = write_pair(rotated.path(), "second.example");
        std::fs::copy(&new_cert, &cert).unwrap();
        bump(&cert);
        serving.check_now();
        assert_eq!(served_name(&serving), first, "mismatched pair not served");

        std::fs::copy(&new_key, &key).unwrap();
        bump(&key);
        serving.check_now();
        let second = CertificateDer::pem_file_iter(&new_cert)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(served_name(&serving), second.to_vec());
    }

    /// Moves a file's modification time forward, as a later write would on
    /// a filesystem with coarse timestamps.
    fn bump(path: &Path) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        f.set_modified(later).unwrap();
    }
}
