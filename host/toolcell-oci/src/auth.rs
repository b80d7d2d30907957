//! Credentials, found where wkg finds them: a bearer token in
//! `WKG_REGISTRY_<REGISTRY>_AUTH_BEARER` (the registry upper-cased, every character other than
//! a letter or digit as `_`: `WKG_REGISTRY_GHCR_IO_AUTH_BEARER`), then `WKG_OCI_USERNAME` and
//! `WKG_OCI_PASSWORD`, then Docker's `config.json` (`$DOCKER_CONFIG` or `~/.docker`): its
//! `auths`, and the credential helpers of `credsStore` and `credHelpers`, run as
//! `docker-credential-NAME get`.
//! A credential is never put in an error or a log line: errors name the registry and the
//! source only.

use crate::Error;
use oci_client::secrets::RegistryAuth;

/// The variable wkg reads a bearer token for `registry` from.
pub fn bearer_variable(registry: &str) -> String {
    let sanitized: String = registry.chars().map(|character| if character.is_ascii_alphanumeric() { character } else { '_' }).collect();
    format!("WKG_REGISTRY_{}_AUTH_BEARER", sanitized.to_ascii_uppercase())
}

/// The key Docker keeps a registry's credentials under: Docker Hub's is its index URL (what
/// `docker login` writes, and what credential helpers are asked for), any other the host.
fn docker_server(registry: &str) -> &str {
    match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "https://index.docker.io/v1/",
        registry => registry,
    }
}

/// Where a registry's credentials came from, for messages (never the credential itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialSource {
    /// No credentials: an anonymous pull or push.
    Anonymous,
    /// `WKG_REGISTRY_<REGISTRY>_AUTH_BEARER`, or `WKG_OCI_USERNAME` and `WKG_OCI_PASSWORD`.
    Environment,
    /// Docker's `config.json` or one of its credential helpers.
    DockerConfig,
}

/// The credentials for `registry` (`HOST[:PORT]`), and where they came from.
///
/// # Errors
///
/// [`Error::Credentials`] if only one of the two variables is set, if Docker's configuration
/// cannot be read, or if its credential helper fails.
pub(crate) fn credentials(registry: &str) -> Result<(RegistryAuth, CredentialSource), Error> {
    let fail = |reason: String| Error::Credentials { registry: registry.to_owned(), reason };
    if let Ok(token) = std::env::var(bearer_variable(registry))
        && !token.is_empty()
    {
        return Ok((RegistryAuth::Bearer(token), CredentialSource::Environment));
    }
    match (std::env::var("WKG_OCI_USERNAME"), std::env::var("WKG_OCI_PASSWORD")) {
        (Ok(username), Ok(password)) => return Ok((RegistryAuth::Basic(username, password), CredentialSource::Environment)),
        (Ok(_), Err(_)) => return Err(fail("`WKG_OCI_USERNAME` is set without `WKG_OCI_PASSWORD`; set both, or neither".to_owned())),
        (Err(_), Ok(_)) => return Err(fail("`WKG_OCI_PASSWORD` is set without `WKG_OCI_USERNAME`; set both, or neither".to_owned())),
        (Err(_), Err(_)) => {}
    }
    use docker_credential::{CredentialRetrievalError as Retrieval, DockerCredential};
    // No Docker configuration at all is no credentials, as for wkg, not an unreadable file.
    let directory = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".docker")));
    if directory.is_none_or(|directory| !directory.join("config.json").exists()) {
        return Ok((RegistryAuth::Anonymous, CredentialSource::Anonymous));
    }
    match docker_credential::get_credential(docker_server(registry)) {
        Ok(DockerCredential::UsernamePassword(username, password)) => {
            Ok((RegistryAuth::Basic(username, password), CredentialSource::DockerConfig))
        }
        Ok(DockerCredential::IdentityToken(_)) => Err(fail(
            "Docker's configuration holds an identity token for it, which registries take only through an OAuth exchange; log in with a username and password (or a token as password)".to_owned(),
        )),
        Err(Retrieval::ConfigNotFound | Retrieval::NoCredentialConfigured) => Ok((RegistryAuth::Anonymous, CredentialSource::Anonymous)),
        Err(Retrieval::HelperFailure { helper, .. }) => Err(fail(format!(
            "the credential helper `{helper}` failed; run `{helper} list` to see what it holds"
        ))),
        Err(Retrieval::ConfigReadError) => {
            Err(fail("Docker's `config.json` cannot be read or parsed (`$DOCKER_CONFIG`, else `~/.docker`)".to_owned()))
        }
        Err(Retrieval::CredentialDecodingError | Retrieval::MalformedHelperResponse | Retrieval::CredentialMismatchError) => Err(fail(
            "Docker's configuration holds a malformed credential for it; log in again (`docker login`)".to_owned(),
        )),
        Err(Retrieval::HelperCommunicationError) => {
            Err(fail("its credential helper could not be run; is `docker-credential-NAME` on `PATH`?".to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bearer_tokens_are_read_from_the_variable_wkg_names() {
        assert_eq!(super::bearer_variable("ghcr.io"), "WKG_REGISTRY_GHCR_IO_AUTH_BEARER");
        assert_eq!(super::bearer_variable("localhost:5000"), "WKG_REGISTRY_LOCALHOST_5000_AUTH_BEARER");
        assert_eq!(super::bearer_variable("[::1]:5000"), "WKG_REGISTRY____1__5000_AUTH_BEARER");
    }

    #[test]
    fn docker_hub_credentials_are_found_under_the_key_docker_login_writes() {
        for registry in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
            assert_eq!(super::docker_server(registry), "https://index.docker.io/v1/");
        }
        assert_eq!(super::docker_server("localhost:5000"), "localhost:5000");
        let config = br#"{"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"}}}"#;
        let found = docker_credential::get_credential_from_reader(&config[..], super::docker_server("docker.io"));
        assert_eq!(found, Ok(docker_credential::DockerCredential::UsernamePassword("user".to_owned(), "pass".to_owned())));
    }
}
