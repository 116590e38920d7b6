//! TLS for both endpoints, one stack: rustls with the ring provider, for lapin (AMQPS) and for
//! the management client (HTTPS). Peer verification and host name checking are always on; the
//! trusted roots are the system's, plus a CA file when one is given. A certificate that fails is
//! explained by what failed (unknown issuer, host name, expiry), never as a lost connection.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result, bail};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use rustls::{AlertDescription, CertificateError};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The TLS files a run was given, read once.
#[derive(Clone, Default)]
pub struct Tls {
    /// A CA to trust besides the system's: (its file, its PEM text).
    ca: Option<(PathBuf, String)>,
    /// A client certificate and its key, PEM.
    client: Option<ClientIdentity>,
}

#[derive(Clone)]
struct ClientIdentity {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// Never the key's bytes.
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(|(p, _)| p))
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

impl Tls {
    /// Reads and checks the files now, so that a wrong path is an error before anything
    /// connects: `--tls-ca-cert-file`, `--tls-cert-file`, `--tls-key-file`.
    pub fn load(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<Tls> {
        let ca = match ca {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the CA file {} (--tls-ca-cert-file)", path.display()))?;
                if certificates(text.as_bytes()).is_empty() {
                    bail!("{} (--tls-ca-cert-file) holds no PEM certificate", path.display());
                }
                Some((path.to_path_buf(), text))
            }
            None => None,
        };
        let client = match (cert, key) {
            (None, None) => None,
            (Some(_), None) => bail!("--tls-cert-file needs --tls-key-file: the client certificate's private key"),
            (None, Some(_)) => bail!("--tls-key-file needs --tls-cert-file: the client certificate"),
            (Some(cert_path), Some(key_path)) => {
                let cert = std::fs::read(cert_path).with_context(|| {
                    format!("cannot read the client certificate {} (--tls-cert-file)", cert_path.display())
                })?;
                if certificates(&cert).is_empty() {
                    bail!("{} (--tls-cert-file) holds no PEM certificate", cert_path.display());
                }
                let key = std::fs::read(key_path)
                    .with_context(|| format!("cannot read the client key {} (--tls-key-file)", key_path.display()))?;
                if rustls_pki_types::PrivateKeyDer::from_pem_slice(&key).is_err() {
                    bail!(
                        "{} (--tls-key-file) holds no PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted)",
                        key_path.display()
                    );
                }
                Some(ClientIdentity { cert, key })
            }
        };
        Ok(Tls { ca, client })
    }

    /// For lapin: the CA (added to the system's roots) and the client identity.
    pub fn amqp(&self) -> OwnedTLSConfig {
        OwnedTLSConfig {
            identity: self.client.as_ref().map(|c| OwnedIdentity::PKCS8 { pem: c.cert.clone(), key: c.key.clone() }),
            cert_chain: self.ca.as_ref().map(|(_, text)| text.clone()),
        }
    }

    /// For the management client: the same roots and identity, the same provider. The system's
    /// roots only `with_system_roots`: without them, a TLS handshake no URL asked for fails as
    /// an unknown issuer, never as a missing provider's panic.
    pub fn http(&self, with_system_roots: bool) -> ureq::tls::TlsConfig {
        let system = if with_system_roots { system_roots() } else { &[] };
        let mut roots: Vec<ureq::tls::Certificate<'static>> =
            system.iter().map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()).collect();
        if let Some((_, text)) = &self.ca {
            roots.extend(certificates(text.as_bytes()).iter().map(|c| ureq::tls::Certificate::from_der(c).to_owned()));
        }
        let client = self.client.as_ref().map(|c| {
            let chain: Vec<_> =
                certificates(&c.cert).iter().map(|d| ureq::tls::Certificate::from_der(d).to_owned()).collect();
            let key = ureq::tls::PrivateKey::from_pem(&c.key).expect("checked when loaded");
            ureq::tls::ClientCert::new_with_certs(&chain, key)
        });
        ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .client_cert(client)
            .unversioned_rustls_crypto_provider(provider())
            .build()
    }
}

fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).map(|c| c.to_vec()).collect()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())).clone()
}

/// The system's trusted roots, as lapin's rustls-native-certs reads them.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// What went wrong in a TLS handshake, found anywhere in an error's chain (lapin and ureq wrap
/// rustls' error in an I/O error, whose `source` skips it), as a sentence naming the cause.
pub fn explain(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = rustls_error(e) {
            return Some(describe(found));
        }
        next = e.source();
    }
    None
}

fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(r);
    }
    if let Some(ureq::Error::Rustls(r)) = e.downcast_ref::<ureq::Error>() {
        return Some(r);
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.get_ref().and_then(|inner| rustls_error(inner));
    }
    if let Some(ureq::Error::Io(io)) = e.downcast_ref::<ureq::Error>() {
        return io.get_ref().and_then(|inner| rustls_error(inner));
    }
    None
}

/// `DnsName("localhost")`, as rustls lists a certificate's names, is `localhost` to a reader.
fn plain(name: &str) -> &str {
    match (name.find("(\""), name.rfind("\")")) {
        (Some(start), Some(end)) if start + 2 <= end => &name[start + 2..end],
        _ => name,
    }
}

fn describe(e: &rustls::Error) -> String {
    const CA_HINT: &str = "pass the CA that signed it with --tls-ca-cert-file (HOPPER_TLS_CA_CERT_FILE)";
    const CLIENT_HINT: &str = "pass a client certificate with --tls-cert-file and --tls-key-file";
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                format!("TLS: the server's certificate is signed by an unknown issuer (no trusted CA); {CA_HINT}")
            }
            CertificateError::NotValidForName => {
                "TLS: hostname mismatch: the server's certificate is not valid for the host name in the URL; connect with a name the certificate lists".to_string()
            }
            CertificateError::NotValidForNameContext { expected, presented } => format!(
                "TLS: hostname mismatch: the server's certificate is not valid for `{}` (it names {}); connect with a name the certificate lists",
                expected.to_str(),
                if presented.is_empty() { "no host".to_string() } else { presented.iter().map(|p| plain(p)).collect::<Vec<_>>().join(", ") }
            ),
            CertificateError::Expired => "TLS: the server's certificate has expired".to_string(),
            CertificateError::ExpiredContext { not_after, .. } => format!(
                "TLS: the server's certificate has expired (valid until {})",
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(not_after.as_secs()))
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "TLS: the server's certificate is not valid yet (is this machine's clock right?)".to_string()
            }
            CertificateError::Revoked => "TLS: the server's certificate has been revoked".to_string(),
            other => format!("TLS: the server's certificate was refused: {other:?}"),
        },
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::CertificateRequired => {
                format!("TLS: the server requires a client certificate and none was given; {CLIENT_HINT}")
            }
            AlertDescription::HandshakeFailure => format!(
                "TLS: the server refused the handshake (handshake_failure; a server that requires a client certificate says this when none was given: {CLIENT_HINT})"
            ),
            AlertDescription::UnknownCA => {
                "TLS: the server does not trust the client certificate's issuer (unknown_ca)".to_string()
            }
            AlertDescription::CertificateExpired => "TLS: the server says the client certificate has expired".to_string(),
            AlertDescription::BadCertificate | AlertDescription::UnsupportedCertificate => {
                format!("TLS: the server refused the client certificate ({alert:?})")
            }
            other => format!("TLS: the server ended the handshake ({other:?})"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "TLS: the server does not speak TLS on this port (is the URL's scheme right: amqp/amqps, http/https?)"
                .to_string()
        }
        other => format!("TLS: {other}"),
    }
}
