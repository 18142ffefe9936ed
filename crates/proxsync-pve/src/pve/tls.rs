//! TLS trust for a site: the system roots, a CA file (PVE's `pve-root-ca.pem`), or a pinned
//! SHA-256 certificate fingerprint. There is no way to switch verification off: with a pin,
//! the certificate must match it and the handshake signatures are still verified.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::Trust;

/// The crypto provider proxsync uses everywhere (ring: pure Rust and assembly, quick to build).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls client config that trusts what `trust` says and nothing else.
pub fn client_config(trust: &Trust) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let config = match trust {
        Trust::SystemRoots => {
            use rustls_platform_verifier::BuilderVerifierExt;
            builder
                .with_platform_verifier()
                .map_err(|e| format!("TLS setup: the system's root certificates: {e}"))?
                .with_no_client_auth()
        }
        Trust::CaFile(path) => builder
            .with_root_certificates(roots_from_file(path)?)
            .with_no_client_auth(),
        Trust::Fingerprint(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedCertVerifier {
                pin: *pin,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// Reads the PEM certificates of a CA file into a root store.
pub(crate) fn roots_from_file(path: &Path) -> Result<RootCertStore, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("ca_file {}: {e}", path.display()))?;
    roots_from_pem(&bytes).map_err(|e| format!("ca_file {}: {e}", path.display()))
}

/// Parses PEM certificates into a root store; at least one must be usable.
pub(crate) fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let mut seen = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate file: {e}"))?;
        seen += 1;
        roots
            .add(cert)
            .map_err(|e| format!("certificate #{seen} is not usable as a CA: {e}"))?;
    }
    if seen == 0 {
        return Err(
            "holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks, such as \
             /etc/pve/pve-root-ca.pem)"
                .into(),
        );
    }
    Ok(roots)
}

/// SHA-256 of a DER certificate, as `pvenode cert info` shows fingerprints.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// `AB:CD:...` form of a fingerprint.
pub fn format_fingerprint(fp: &[u8; 32]) -> String {
    fp.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Accepts exactly the certificate whose SHA-256 is pinned, as PVE's own clients do with
/// `--fingerprint`. The chain and name are not checked (self-signed node certificates have
/// neither), but the handshake signatures are, so only the key's holder can answer.
#[derive(Debug)]
struct PinnedCertVerifier {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCertVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = fingerprint(end_entity.as_ref());
        // A fingerprint is public: a plain comparison is fine.
        if got == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate fingerprint {} does not match the pinned fingerprint {}",
                format_fingerprint(&got),
                format_fingerprint(&self.pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_certificates_is_refused() {
        assert!(
            roots_from_pem(b"hello")
                .unwrap_err()
                .contains("no PEM certificate")
        );
        assert!(roots_from_pem(b"").is_err());
    }

    #[test]
    fn fingerprint_format_matches_pvenode() {
        let fp = fingerprint(b"abc");
        let text = format_fingerprint(&fp);
        // sha256("abc")
        assert!(text.starts_with("BA:78:16:BF"), "{text}");
        assert_eq!(crate::config::parse_fingerprint(&text).unwrap(), fp);
    }
}
