//! Tool components in OCI registries, as `wkg oci push` writes them and `wkg oci pull` reads
//! them: an OCI image manifest, a config of media type `application/vnd.wasm.config.v0+json`
//! (the component's exports, imports and target, filled by `oci-wasm` as wkg does), and exactly
//! one `application/wasm` layer whose digest is the component's sha256.
//!
//! Every blob is checked against its digest as it arrives (the manifest against a pinned
//! digest, the layer against the manifest), and kept in a [`Cache`] by digest, so a pinned
//! reference pulled once needs no network. Plain HTTP is used only when asked for, and only
//! for a registry on this machine. Credentials are found as wkg finds them and never appear
//! in an error.
//!
//! ```
//! let reference: toolcell_oci::Reference = "oci://localhost:5000/tools/line-count:1.0".parse()?;
//! assert_eq!(reference.tag(), Some("1.0"));
//! assert!("ghcr.io/tools/line-count:1.0".parse::<toolcell_oci::Reference>().is_err());
//! # Ok::<(), toolcell_oci::Error>(())
//! ```

mod auth;
mod cache;
mod capped;
mod reference;
mod signature;

pub use auth::{CredentialSource, bearer_variable};
pub use cache::{Cache, sha256_digest};
pub use reference::Reference;
pub use signature::{PublicKeys, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, Signed, SigningKey, signature_tag, verify_cached};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
pub use oci_wasm::{WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE};

/// What went wrong; each names the value at fault and never a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A reference that is not `oci://HOST[:PORT]/NAME:TAG` or `…@sha256:…`.
    #[error(
        "`{value}` is not a registry reference: {reason}; write `oci://HOST[:PORT]/NAME:TAG` or `oci://HOST[:PORT]/NAME@sha256:DIGEST`"
    )]
    Reference {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Plain HTTP asked for a registry that is not on this machine.
    #[error(
        "plain HTTP to `{registry}` refused: `--insecure` is only for a registry on this machine (`localhost`, `127.0.0.1`, `[::1]`); use HTTPS"
    )]
    InsecureRemote {
        /// `HOST[:PORT]`.
        registry: String,
    },
    /// The credentials for a registry could not be found.
    #[error("credentials for `{registry}`: {reason}")]
    Credentials {
        /// `HOST[:PORT]`.
        registry: String,
        /// Why, naming the source, never the credential.
        reason: String,
    },
    /// The registry refused or failed a request.
    #[error("registry `{registry}`: {action} failed: {message}")]
    Registry {
        /// `HOST[:PORT]`.
        registry: String,
        /// What was being done (`pulling the manifest of oci://…`).
        action: String,
        /// The client's message.
        message: String,
    },
    /// A blob's bytes do not hash to the digest they were asked for by.
    #[error(
        "`{reference}`: the registry served a {what} whose digest is `{actual}`, not `{expected}`; refused. The registry's content under a pinned digest changed (a tampered or corrupted registry): do not use it; if a new build was published on purpose, take it with `toolcell tools update`"
    )]
    DigestMismatch {
        /// The reference pulled.
        reference: String,
        /// `manifest`, `config` or `component`.
        what: &'static str,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes served.
        actual: String,
    },
    /// The artifact is not one wasm component as wkg writes it.
    #[error("`{reference}` is not a wasm component artifact: {reason}; push it with `toolcell tools push` or `wkg oci push`")]
    NotComponent {
        /// The reference pulled.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key file that is not a key toolcell reads.
    #[error("the key `{name}`: {reason}")]
    Key {
        /// The key's name (its file).
        name: String,
        /// What is wrong with it (never its bytes).
        reason: String,
    },
    /// Signatures are published for a manifest, and none is a valid signature of it by a
    /// trusted key.
    #[error(
        "`{reference}`: refused: its signatures do not hold: {reason}. Either it was altered after it was signed, or it was signed by a key the policy does not trust (`[registry] signature_keys`); do not use it"
    )]
    Signature {
        /// The reference checked.
        reference: String,
        /// Why no signature holds.
        reason: String,
    },
    /// The cache cannot be written.
    #[error("cannot write the registry cache in `{path}`: {source}")]
    Cache {
        /// The cache's directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The `org.opencontainers.image.*` annotations of a pushed component.
#[derive(Debug, Clone, Default)]
pub struct Annotations {
    /// `org.opencontainers.image.version`.
    pub version: Option<String>,
    /// `org.opencontainers.image.description`.
    pub description: Option<String>,
    /// `org.opencontainers.image.source`.
    pub source: Option<String>,
    /// The layer's `org.opencontainers.image.title`, the name OCI tools give the file on disk
    /// (wkg: the pushed file's name; without it, the repository's, `/` as `_`, and `.wasm`).
    pub title: Option<String>,
}

/// A component fetched from a registry (or the cache), every digest checked.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest (its tag kept).
    pub reference: Reference,
    /// The manifest's digest, `sha256:…`.
    pub manifest_digest: String,
    /// The component's sha256 (hex), the layer's digest: the pin toolcell keeps.
    pub sha256: String,
    /// The component.
    pub wasm: Vec<u8>,
    /// The manifest's annotations.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// Whether it came from the cache, without the network.
    pub from_cache: bool,
}

/// A client for one registry, with its credentials.
pub struct Registry {
    client: oci_wasm::WasmClient,
    insecure: bool,
    auth: oci_client::secrets::RegistryAuth,
    registry: String,
    cache: Option<Cache>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credentials stay out of every debug print.
        formatter.debug_struct("Registry").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl Registry {
    /// A client for the registry of `reference`, over HTTPS, or plain HTTP if `insecure` (only
    /// for a registry on this machine), with the credentials wkg would use, and `cache` to keep
    /// and answer from.
    ///
    /// # Errors
    ///
    /// [`Error::InsecureRemote`] if `insecure` is asked for another machine;
    /// [`Error::Credentials`] if the credentials cannot be read.
    pub fn new(reference: &Reference, insecure: bool, cache: Option<Cache>) -> Result<Self, Error> {
        if insecure && !reference.is_local() {
            return Err(Error::InsecureRemote { registry: reference.registry().to_owned() });
        }
        let protocol = if insecure { ClientProtocol::HttpsExcept(vec![reference.registry().to_owned()]) } else { ClientProtocol::Https };
        let client = oci_wasm::WasmClient::new(oci_client::Client::new(ClientConfig { protocol, ..ClientConfig::default() }));
        let (auth, _) = auth::credentials(reference.registry())?;
        Ok(Self { client, insecure, auth, registry: reference.registry().to_owned(), cache })
    }

    /// Before credentials go anywhere: ask the registry for its challenge, without following
    /// redirects, and refuse a token service it names over plain HTTP on another machine, or a
    /// redirect elsewhere. The registry client would send the credentials to that token
    /// service as named, and it has no policy of its own for either. (A registry that answers
    /// otherwise later is trusted with the credentials anyway; this keeps a mistaken one from
    /// sending them in clear text.)
    async fn preflight(&self, reference: &Reference) -> Result<(), Error> {
        if matches!(self.auth, oci_client::secrets::RegistryAuth::Anonymous) {
            return Ok(());
        }
        let refuse = |reason: String| Error::Credentials { registry: self.registry.clone(), reason };
        let scheme = if self.insecure { "http" } else { "https" };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|error| refuse(format!("the HTTP client cannot start ({error})")))?;
        let answer = client.get(format!("{scheme}://{}/v2/", reference.registry())).send().await.map_err(|error| Error::Registry {
            registry: self.registry.clone(),
            action: "asking for its authentication challenge".to_owned(),
            message: error.without_url().to_string(),
        })?;
        if answer.status().is_redirection() {
            return Err(refuse(format!(
                "it answers `/v2/` with a redirect ({}), and credentials are not sent after one; name the registry it redirects to",
                answer.status()
            )));
        }
        for challenge in answer.headers().get_all(reqwest::header::WWW_AUTHENTICATE) {
            let challenge = challenge.to_str().unwrap_or_default();
            let Some(realm) = challenge.split("realm=\"").nth(1).and_then(|rest| rest.split('"').next()) else { continue };
            let Some(rest) = realm.strip_prefix("http://") else { continue };
            let host = rest.split(['/', '?']).next().unwrap_or_default();
            let local = format!("oci://{host}/x:1").parse::<Reference>().is_ok_and(|token_service| token_service.is_local());
            if !local || !self.insecure {
                return Err(refuse(format!(
                    "it names a token service over plain HTTP (`{}`), which would receive the credentials in clear text; refused",
                    realm.escape_default()
                )));
            }
        }
        Ok(())
    }

    fn failed(&self, action: String) -> impl FnOnce(oci_client::errors::OciDistributionError) -> Error + '_ {
        move |error| Error::Registry { registry: self.registry.clone(), action, message: error.to_string() }
    }

    /// Push `wasm` (a component) to `reference` as wkg does, with `annotations`; returns the
    /// reference pinned to the manifest's digest.
    ///
    /// # Errors
    ///
    /// [`Error::NotComponent`] if `wasm` is not a component; [`Error::Registry`] if the
    /// registry refuses it.
    pub async fn push(&self, reference: &Reference, wasm: Vec<u8>, annotations: &Annotations) -> Result<Reference, Error> {
        let (config, mut layer) = oci_wasm::WasmConfig::from_raw_component(wasm, None)
            .map_err(|error| Error::NotComponent { reference: reference.to_string(), reason: format!("{error:#}") })?;
        let title = annotations.title.clone().unwrap_or_else(|| format!("{}.wasm", reference.repository().replace('/', "_")));
        layer.annotations = Some(std::collections::BTreeMap::from([("org.opencontainers.image.title".to_owned(), title)]));
        let mut manifest_annotations = std::collections::BTreeMap::new();
        for (key, value) in [("version", &annotations.version), ("description", &annotations.description), ("source", &annotations.source)]
        {
            if let Some(value) = value {
                manifest_annotations.insert(format!("org.opencontainers.image.{key}"), value.clone());
            }
        }
        let annotations = (!manifest_annotations.is_empty()).then_some(manifest_annotations);
        self.preflight(reference).await?;
        self.client.push(&reference.to_client(), &self.auth, layer, config, annotations).await.map_err(|error| Error::Registry {
            registry: self.registry.clone(),
            action: format!("pushing to `{reference}`"),
            message: format!("{error:#}"),
        })?;
        // The digest the registry keeps the manifest under, read back and checked.
        let (manifest, digest) = self
            .client
            .pull_manifest_raw(&reference.to_client(), &self.auth, &[WASM_MANIFEST_MEDIA_TYPE])
            .await
            .map_err(self.failed(format!("reading back the manifest of `{reference}`")))?;
        let actual = sha256_digest(&manifest);
        if actual != digest {
            return Err(Error::DigestMismatch { reference: reference.to_string(), what: "manifest", expected: digest, actual });
        }
        if let Some(cache) = &self.cache {
            cache.put(&manifest)?;
        }
        Ok(reference.pinned(&digest))
    }

    /// Fetch the component of `reference`: from the cache if the reference pins a digest
    /// already pulled, else from the registry, each blob checked against its digest as it
    /// arrives, then kept in the cache.
    ///
    /// # Errors
    ///
    /// [`Error::DigestMismatch`] if a blob's bytes do not match its digest;
    /// [`Error::NotComponent`] if the artifact is not one wasm component;
    /// [`Error::Registry`] if the registry cannot be reached or refuses.
    pub async fn pull(&self, reference: &Reference) -> Result<Pulled, Error> {
        if let Some(pulled) = self.cached(reference) {
            return Ok(pulled);
        }
        self.preflight(reference).await?;
        let client_reference = reference.to_client();
        let (manifest_bytes, _) = self
            .client
            .pull_manifest_raw(&client_reference, &self.auth, &[WASM_MANIFEST_MEDIA_TYPE])
            .await
            .map_err(|error| self.blob_error(reference, "manifest", reference.digest().unwrap_or("by its tag"), error))?;
        let manifest_digest = sha256_digest(&manifest_bytes);
        if let Some(expected) = reference.digest()
            && expected != manifest_digest
        {
            return Err(Error::DigestMismatch {
                reference: reference.to_string(),
                what: "manifest",
                expected: expected.to_owned(),
                actual: manifest_digest,
            });
        }
        let manifest = self.component_manifest(reference, &manifest_bytes)?;
        let config = self.capped_blob(reference, &client_reference, &manifest.config, "config", capped::MAX_CONFIG).await?;
        let layer = &manifest.layers[0];
        let wasm = self.capped_blob(reference, &client_reference, layer, "component", capped::MAX_COMPONENT).await?;
        // Checked here too: the pin toolcell keeps is this digest.
        let actual = sha256_digest(&wasm);
        if actual != layer.digest {
            return Err(Error::DigestMismatch {
                reference: reference.to_string(),
                what: "component",
                expected: layer.digest.clone(),
                actual,
            });
        }
        if let Some(cache) = &self.cache {
            cache.put(&manifest_bytes)?;
            cache.put(&config)?;
            cache.put(&wasm)?;
        }
        Ok(Pulled {
            reference: reference.pinned(&manifest_digest),
            manifest_digest,
            sha256: actual.trim_start_matches("sha256:").to_owned(),
            wasm,
            annotations: manifest.annotations.unwrap_or_default(),
            from_cache: false,
        })
    }

    /// The component of a pinned `reference` from the cache alone, if every blob is there.
    fn cached(&self, reference: &Reference) -> Option<Pulled> {
        let cache = self.cache.as_ref()?;
        let manifest_digest = reference.digest()?;
        let manifest_bytes = cache.get(manifest_digest)?;
        let manifest = self.component_manifest(reference, &manifest_bytes).ok()?;
        let layer = &manifest.layers[0];
        let wasm = cache.get(&layer.digest)?;
        Some(Pulled {
            reference: reference.clone(),
            manifest_digest: manifest_digest.to_owned(),
            sha256: layer.digest.trim_start_matches("sha256:").to_owned(),
            wasm,
            annotations: manifest.annotations.clone().unwrap_or_default(),
            from_cache: true,
        })
    }

    /// The manifest in `bytes`, if it is one wasm component as wkg writes it.
    fn component_manifest(&self, reference: &Reference, bytes: &[u8]) -> Result<OciImageManifest, Error> {
        let fail = |reason: String| Error::NotComponent { reference: reference.to_string(), reason };
        let manifest: OciImageManifest =
            serde_json::from_slice(bytes).map_err(|error| fail(format!("its manifest is not an OCI image manifest ({error})")))?;
        if manifest.media_type.as_deref().is_some_and(|media_type| media_type != WASM_MANIFEST_MEDIA_TYPE) {
            return Err(fail(format!("its manifest's media type is `{}`", manifest.media_type.as_deref().unwrap_or_default())));
        }
        if manifest.config.media_type != WASM_MANIFEST_CONFIG_MEDIA_TYPE {
            return Err(fail(format!(
                "its config's media type is `{}`, not `{WASM_MANIFEST_CONFIG_MEDIA_TYPE}`",
                manifest.config.media_type
            )));
        }
        match manifest.layers.as_slice() {
            [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => Ok(manifest),
            [layer] => Err(fail(format!("its layer's media type is `{}`, not `{WASM_LAYER_MEDIA_TYPE}`", layer.media_type))),
            layers => Err(fail(format!("it has {} layers, not exactly one", layers.len()))),
        }
    }

    /// The blob of `descriptor`, at most its declared size and at most `max` bytes, its digest
    /// checked as it arrives.
    pub(crate) async fn capped_blob(
        &self,
        reference: &Reference,
        client_reference: &oci_client::Reference,
        descriptor: &oci_client::manifest::OciDescriptor,
        what: &'static str,
        max: u64,
    ) -> Result<Vec<u8>, Error> {
        let mut sink = capped::Capped::new(descriptor.size, max).map_err(|reason| Error::NotComponent {
            reference: reference.to_string(),
            reason: format!("its {what} `{}`: {reason}", descriptor.digest),
        })?;
        self.client
            .pull_blob(client_reference, descriptor, &mut sink)
            .await
            .map_err(|error| self.blob_error(reference, what, &descriptor.digest, error))?;
        Ok(sink.bytes)
    }

    fn blob_error(
        &self,
        reference: &Reference,
        what: &'static str,
        digest: &str,
        error: oci_client::errors::OciDistributionError,
    ) -> Error {
        use oci_client::errors::{DigestError, OciDistributionError};
        match error {
            OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
                Error::DigestMismatch { reference: reference.to_string(), what, expected, actual }
            }
            error => Error::Registry {
                registry: self.registry.clone(),
                action: format!("pulling the {what} `{digest}` of `{reference}`"),
                message: error.to_string(),
            },
        }
    }
}
