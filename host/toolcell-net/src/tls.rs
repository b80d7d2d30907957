//! The TLS client configuration: ring as the one crypto provider, Mozilla's roots plus the
//! operator's, HTTP/1.1 only.

use std::sync::{Arc, Once};

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::NetError;

/// Install ring as the process's default rustls provider, once; later calls do nothing. A
/// provider installed before (by another part of the binary) is left in place: this crate's
/// own configuration names ring explicitly either way.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err means a provider is installed already; either way there is one for the process.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client configuration trusting Mozilla's roots and `extra` (named PEM bundles).
pub(crate) fn client_config(extra: &[(String, Vec<u8>)]) -> Result<Arc<rustls::ClientConfig>, NetError> {
    install_crypto_provider();
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for (name, pem) in extra {
        let mut count = 0;
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let failure = |reason: String| NetError::Roots { bundle: name.clone(), reason };
            let certificate = certificate.map_err(|error| failure(format!("it is not PEM ({error})")))?;
            roots.add(certificate).map_err(|error| failure(format!("rustls rejects a certificate in it ({error})")))?;
            count += 1;
        }
        if count == 0 {
            return Err(NetError::Roots { bundle: name.clone(), reason: "it holds no `CERTIFICATE` block".to_owned() });
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| NetError::Roots { bundle: "(the built-in roots)".to_owned(), reason: error.to_string() })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
