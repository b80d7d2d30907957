//! Signatures as `cosign sign --key` writes them, checked against public keys the policy names.
//!
//! A signature of the manifest `sha256:HEX` in `HOST/NAME` is an OCI image manifest tagged
//! `sha256-HEX.sig` in the same repository. Each of its layers (media type
//! [`SIMPLE_SIGNING_MEDIA_TYPE`]) holds a "simple signing" payload naming the manifest digest,
//! and carries the base64 of an ECDSA P-256 / SHA-256 signature of the payload's exact bytes
//! in the annotation [`SIGNATURE_ANNOTATION`]. A manifest is signed when one layer's payload
//! names its digest and its signature verifies under one of the keys.
//!
//! The cryptography is the `p256` crate's (RustCrypto); sigstore-rs was not taken because its
//! key-based cosign verification comes only with its Fulcio, Rekor and OpenID clients and a
//! second `oci-client`. Keyless (certificate) signatures and cosign's encrypted key files are
//! not read: keys are PEM (`PUBLIC KEY` to verify; `PRIVATE KEY` or `EC PRIVATE KEY` to sign).

use crate::{Cache, Error, Reference, Registry, sha256_digest};
use base64::Engine as _;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{IMAGE_CONFIG_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};

/// The media type of a layer holding a simple-signing payload.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the payload's signature (base64 of its DER form).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` of a payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Layers read from one signature manifest, at most: a registry cannot make a check endless.
const MAX_SIGNATURES: usize = 16;
/// Bytes of one payload, at most.
const MAX_PAYLOAD: u64 = 64 * 1024;

/// The public keys signatures are checked against, each with the name errors show (its file).
#[derive(Default)]
pub struct PublicKeys {
    keys: Vec<(String, p256::ecdsa::VerifyingKey)>,
}

impl std::fmt::Debug for PublicKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.keys.iter().map(|(name, _)| name)).finish()
    }
}

impl PublicKeys {
    /// Add the key in `pem` (a `PUBLIC KEY` block, ECDSA P-256, as `cosign generate-key-pair`
    /// or `openssl pkey -pubout` write it), shown as `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Key`] if it is not such a key.
    pub fn add_pem(&mut self, name: &str, pem: &str) -> Result<(), Error> {
        let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim()).map_err(|error| Error::Key {
            name: name.to_owned(),
            reason: format!(
                "it is not a PEM `PUBLIC KEY` of an ECDSA P-256 key ({error}); write the public half of a cosign key pair (`cosign.pub`) or `openssl pkey -in KEY -pubout`"
            ),
        })?;
        self.keys.push((name.to_owned(), key));
        Ok(())
    }

    /// Whether no key was given.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The name of the key `signature` of `payload` verifies under, if any.
    fn verifying(&self, payload: &[u8], signature: &p256::ecdsa::Signature) -> Option<&str> {
        self.keys.iter().find(|(_, key)| key.verify(payload, signature).is_ok()).map(|(name, _)| name.as_str())
    }
}

/// A private key to sign with.
pub struct SigningKey(p256::ecdsa::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// The key in `pem`: a `PRIVATE KEY` (PKCS #8) or `EC PRIVATE KEY` (SEC 1) block of an
    /// ECDSA P-256 key, shown as `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Key`] if it is not such a key (the key's bytes are never shown).
    pub fn from_pem(name: &str, pem: &str) -> Result<Self, Error> {
        let pem = pem.trim();
        let fail = |reason: &str| Error::Key { name: name.to_owned(), reason: reason.to_owned() };
        if pem.contains("ENCRYPTED") {
            return Err(fail(
                "it is an encrypted key, which toolcell does not read; make an unencrypted P-256 key for signing (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out KEY`) and keep it where only you can read it",
            ));
        }
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(pem)
            .or_else(|_| p256::SecretKey::from_sec1_pem(pem).map(p256::ecdsa::SigningKey::from))
            .map_err(|_| fail("it is not a PEM `PRIVATE KEY` or `EC PRIVATE KEY` of an ECDSA P-256 key"))?;
        Ok(Self(key))
    }
}

/// Whether a component carries a signature by a trusted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// A signature verified under the key of this name.
    By(String),
    /// No signature is published for it.
    Unsigned,
}

/// The tag cosign keeps the signatures of `manifest_digest` (`sha256:HEX`) under.
pub fn signature_tag(manifest_digest: &str) -> String {
    manifest_digest.replacen(':', "-", 1) + ".sig"
}

/// The payload cosign signs for the manifest `digest` of `reference`.
fn payload(reference: &Reference, digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": { "docker-reference": format!("{}/{}", reference.registry(), reference.repository()) },
            "image": { "docker-manifest-digest": digest },
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// The manifest digest and the repository (`HOST/NAME`) a payload vouches for, if it is a
/// cosign payload.
fn vouched(payload: &[u8]) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let critical = value.get("critical")?;
    (critical.get("type")?.as_str()? == PAYLOAD_TYPE).then_some(())?;
    let digest = critical.get("image")?.get("docker-manifest-digest")?.as_str()?.to_owned();
    let identity = critical.get("identity")?.get("docker-reference")?.as_str()?.to_owned();
    Some((digest, identity))
}

/// `HOST/NAME` as signatures name a repository: Docker Hub's hosts as one.
fn repository_identity(identity: &str) -> String {
    let (host, name) = identity.split_once('/').unwrap_or((identity, ""));
    let host = match host {
        "docker.io" | "registry-1.docker.io" => "index.docker.io",
        host => host,
    };
    format!("{host}/{name}")
}

/// What the signature manifest and its layers say, read from the registry or the cache.
struct SignatureSet {
    layers: Vec<(Vec<u8>, Option<String>)>,
    /// Layers that could not be read within their declared size and the payload cap.
    unreadable: usize,
}

impl SignatureSet {
    /// Check each payload against `digest` of `reference`'s repository and each signature
    /// against `keys`; the first key that verifies a payload naming both, else why none did.
    /// The repository counts: a signed build of one tool served under another's name, or by
    /// another registry, is not signed there.
    fn check(&self, reference: &Reference, digest: &str, keys: &PublicKeys) -> Result<String, String> {
        let repository = repository_identity(&format!("{}/{}", reference.registry(), reference.repository()));
        let mut reasons = Vec::new();
        for (payload, signature) in &self.layers {
            let Some((vouched_digest, identity)) = vouched(payload) else {
                reasons.push("a signature payload is not a cosign payload".to_owned());
                continue;
            };
            if vouched_digest != digest {
                reasons.push("a signature is of another manifest".to_owned());
                continue;
            }
            if repository_identity(&identity) != repository {
                reasons.push(format!(
                    "a signature is of this manifest in another repository (`{}`), not `{repository}`",
                    identity.escape_default()
                ));
                continue;
            }
            let Some(signature) = signature
                .as_deref()
                .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text.trim()).ok())
                .and_then(|bytes| p256::ecdsa::Signature::from_der(&bytes).ok())
            else {
                reasons.push("a signature is not a base64 DER ECDSA signature".to_owned());
                continue;
            };
            match keys.verifying(payload, &signature) {
                Some(name) => return Ok(name.to_owned()),
                None => reasons.push("a signature does not verify under any trusted key".to_owned()),
            }
        }
        if self.unreadable > 0 {
            reasons.push(format!(
                "{} signature payload(s) could not be read within the declared size and the {MAX_PAYLOAD}-byte cap",
                self.unreadable
            ));
        }
        reasons.dedup();
        if reasons.is_empty() {
            reasons.push("the signature manifest holds no simple-signing layer".to_owned());
        }
        Err(reasons.join("; "))
    }
}

/// The simple-signing layers of a signature manifest, the newest (last) [`MAX_SIGNATURES`] of
/// them: signing appends, so junk pushed before a signature cannot hide it.
fn newest_signatures(manifest: &OciImageManifest) -> impl Iterator<Item = &oci_client::manifest::OciDescriptor> {
    let layers: Vec<_> = manifest.layers.iter().filter(|layer| layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE).collect();
    let skip = layers.len().saturating_sub(MAX_SIGNATURES);
    layers.into_iter().skip(skip)
}

/// Where the cache keeps, for a manifest digest, the digest of its signature manifest.
fn cached_pointer(cache: &Cache, digest: &str) -> Option<std::path::PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit())).then(|| cache.root().join("signatures").join(hex))
}

impl Registry {
    /// Sign the manifest `reference` pins with `key`, as `cosign sign --key` does: a layer is
    /// added to the signature manifest of its digest (made if there is none). Returns the
    /// signature manifest's reference.
    ///
    /// # Errors
    ///
    /// [`Error::Reference`] if `reference` pins no digest; [`Error::Registry`] if the registry
    /// refuses.
    pub async fn sign(&self, reference: &Reference, key: &SigningKey) -> Result<Reference, Error> {
        let digest = pinned_digest(reference)?;
        let payload = payload(reference, &digest);
        let signature: p256::ecdsa::Signature = key.0.sign(&payload);
        let encoded = base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes());
        let target = Reference::tagged(reference, &signature_tag(&digest));
        // The layers already there stay: a manifest may carry several signatures.
        let mut layers = match self.signature_set(&target).await? {
            Some(set) => set
                .layers
                .into_iter()
                .map(|(payload, signature)| {
                    let annotations = signature.map(|signature| [(SIGNATURE_ANNOTATION.to_owned(), signature)].into());
                    ImageLayer::new(payload, SIMPLE_SIGNING_MEDIA_TYPE.to_owned(), annotations)
                })
                .collect(),
            None => Vec::new(),
        };
        layers.retain(|layer| layer.annotations.as_ref().and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION)) != Some(&encoded));
        layers.push(ImageLayer::new(
            payload,
            SIMPLE_SIGNING_MEDIA_TYPE.to_owned(),
            Some([(SIGNATURE_ANNOTATION.to_owned(), encoded)].into()),
        ));
        let config = Config::new(b"{}".to_vec(), IMAGE_CONFIG_MEDIA_TYPE.to_owned(), None);
        let client: &oci_client::Client = &self.client;
        client.push(&target.to_client(), &layers, config, &self.auth, None).await.map_err(|error| Error::Registry {
            registry: self.registry.clone(),
            action: format!("pushing the signature `{target}`"),
            message: format!("{error:#}"),
        })?;
        Ok(target)
    }

    /// Check the signatures of the manifest `reference` pins against `keys`: from the cache
    /// when they verify there, else from the registry (then kept in the cache).
    ///
    /// # Errors
    ///
    /// [`Error::Signature`] if signatures are published but none of them is a valid
    /// signature of this manifest by one of `keys` (a forged, altered or foreign signature);
    /// [`Error::Registry`] if the registry cannot be asked.
    pub async fn verify(&self, reference: &Reference, keys: &PublicKeys) -> Result<Signed, Error> {
        let digest = pinned_digest(reference)?;
        if let Some(set) = self.cache.as_ref().and_then(|cache| cached_signatures(cache, &digest))
            && let Ok(name) = set.check(reference, &digest, keys)
        {
            return Ok(Signed::By(name));
        }
        let target = Reference::tagged(reference, &signature_tag(&digest));
        let Some(set) = self.signature_set(&target).await? else { return Ok(Signed::Unsigned) };
        set.check(reference, &digest, keys).map(Signed::By).map_err(|reason| Error::Signature { reference: reference.to_string(), reason })
    }

    /// The signature manifest at `target` and its payloads, or `None` if there is none.
    async fn signature_set(&self, target: &Reference) -> Result<Option<SignatureSet>, Error> {
        use oci_client::errors::OciDistributionError as Failure;
        self.preflight(target).await?;
        let client_reference = target.to_client();
        let (bytes, digest) = match self.client.pull_manifest_raw(&client_reference, &self.auth, &[OCI_IMAGE_MEDIA_TYPE]).await {
            Ok(found) => found,
            Err(Failure::ImageManifestNotFoundError(_)) => return Ok(None),
            Err(Failure::RegistryError { envelope, .. })
                if envelope.errors.iter().any(|error| matches!(error.code, oci_client::errors::OciErrorCode::ManifestUnknown)) =>
            {
                return Ok(None);
            }
            Err(error) => return Err(self.failed(format!("reading the signatures `{target}`"))(error)),
        };
        if sha256_digest(&bytes) != digest {
            return Err(Error::DigestMismatch {
                reference: target.to_string(),
                what: "manifest",
                expected: digest,
                actual: sha256_digest(&bytes),
            });
        }
        let fail = |reason: String| Error::Signature { reference: target.to_string(), reason };
        let manifest: OciImageManifest =
            serde_json::from_slice(&bytes).map_err(|error| fail(format!("the signature manifest does not parse ({error})")))?;
        let mut layers = Vec::new();
        let mut unreadable = 0;
        for layer in newest_signatures(&manifest) {
            // A payload over the cap is not a signature toolcell reads; the others still count.
            let Ok(payload) = self.capped_blob(target, &client_reference, layer, "signature payload", MAX_PAYLOAD).await else {
                unreadable += 1;
                continue;
            };
            let signature = layer.annotations.as_ref().and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION)).cloned();
            layers.push((payload, signature));
        }
        if let Some(cache) = &self.cache {
            self.keep_signatures(cache, target, &bytes, &layers)?;
        }
        Ok(Some(SignatureSet { layers, unreadable }))
    }

    /// Keep a signature manifest and its payloads in the cache, with a pointer from the signed
    /// manifest's digest, so that a pinned add verifies offline.
    fn keep_signatures(
        &self,
        cache: &Cache,
        target: &Reference,
        manifest: &[u8],
        layers: &[(Vec<u8>, Option<String>)],
    ) -> Result<(), Error> {
        let signed = target.tag().and_then(|tag| tag.strip_suffix(".sig")).map(|tag| tag.replacen('-', ":", 1)).unwrap_or_default();
        let Some(pointer) = cached_pointer(cache, &signed) else { return Ok(()) };
        for (payload, _) in layers {
            cache.put(payload)?;
        }
        let digest = cache.put(manifest)?;
        cache.put_file(&pointer, digest.as_bytes())
    }
}

/// The signatures of `digest` kept in the cache, if all their blobs are there.
fn cached_signatures(cache: &Cache, digest: &str) -> Option<SignatureSet> {
    let pointer = std::fs::read_to_string(cached_pointer(cache, digest)?).ok()?;
    let manifest: OciImageManifest = serde_json::from_slice(&cache.get(pointer.trim())?).ok()?;
    let mut layers = Vec::new();
    for layer in newest_signatures(&manifest) {
        // Only the payloads that were read (within the cap) were kept.
        let Some(payload) = cache.get(&layer.digest) else { continue };
        layers.push((payload, layer.annotations.as_ref().and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION)).cloned()));
    }
    Some(SignatureSet { layers, unreadable: 0 })
}

/// From the cache alone, without the network: whether the component of sha256 `sha256` (hex)
/// is the one layer of the manifest `reference` pins, and that manifest carries a signature
/// by one of `keys`. The key's name, else why not.
///
/// # Errors
///
/// Why the component is not shown signed: the reference pins no digest, the manifest or its
/// signatures are not in the cache, the manifest holds other bytes, or no signature holds.
pub fn verify_cached(cache: &Cache, reference: &Reference, sha256: &str, keys: &PublicKeys) -> Result<String, String> {
    let digest = reference.digest().ok_or_else(|| format!("`{reference}` pins no manifest digest"))?;
    let manifest = cache.get(digest).ok_or_else(|| format!("the manifest of `{reference}` is not in the cache"))?;
    let manifest: OciImageManifest =
        serde_json::from_slice(&manifest).map_err(|_| format!("the manifest of `{reference}` in the cache does not parse"))?;
    let expected = format!("sha256:{sha256}");
    if manifest.layers.len() != 1 || manifest.layers[0].digest != expected {
        return Err(format!("the manifest `{reference}` pins is not of the component `{sha256}`"));
    }
    let set = cached_signatures(cache, digest).ok_or_else(|| format!("no signature of `{reference}` is in the cache"))?;
    set.check(reference, digest, keys)
}

fn pinned_digest(reference: &Reference) -> Result<String, Error> {
    reference
        .digest()
        .map(str::to_owned)
        .ok_or_else(|| Error::Reference { value: reference.to_string(), reason: "a signature is of a manifest digest, and it names none" })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIVATE: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgu/+sXR2bnod472YN\nAeKiDGVQqtl977mD+hrwbhRPdLihRANCAAS7agwWNHBRY0v1iXVuYeGBIUOeRlWV\nPtSn87+FA+7NeGBQ0LSAPS9BfaTMvbWF/q0FzezNVTxQTebV5TkL9W/z\n-----END PRIVATE KEY-----\n";
    const PUBLIC: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEu2oMFjRwUWNL9Yl1bmHhgSFDnkZV\nlT7Up/O/hQPuzXhgUNC0gD0vQX2kzL21hf6tBc3szVU8UE3m1eU5C/Vv8w==\n-----END PUBLIC KEY-----\n";

    fn signed_set(payload: Vec<u8>) -> SignatureSet {
        let key = SigningKey::from_pem("key.pem", PRIVATE).expect("a P-256 key");
        let signature: p256::ecdsa::Signature = key.0.sign(&payload);
        let encoded = base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes());
        SignatureSet { layers: vec![(payload, Some(encoded))], unreadable: 0 }
    }

    #[test]
    fn a_payload_signed_by_a_trusted_key_for_this_digest_verifies_and_nothing_else_does() {
        let reference: Reference = "oci://localhost:5000/tools/a:1".parse().expect("a reference");
        let digest = format!("sha256:{}", "a".repeat(64));
        let mut keys = PublicKeys::default();
        keys.add_pem("cosign.pub", PUBLIC).expect("a public key");
        assert_eq!(signed_set(payload(&reference, &digest)).check(&reference, &digest, &keys), Ok("cosign.pub".to_owned()));
        let other = format!("sha256:{}", "b".repeat(64));
        assert!(
            signed_set(payload(&reference, &other)).check(&reference, &digest, &keys).expect_err("refused").contains("another manifest")
        );
        let elsewhere: Reference = "oci://localhost:5000/tools/b:1".parse().expect("a reference");
        let moved = signed_set(payload(&reference, &digest)).check(&elsewhere, &digest, &keys).expect_err("refused");
        assert!(moved.contains("another repository (`localhost:5000/tools/a`)"), "{moved}");
        let mut altered = signed_set(payload(&reference, &digest));
        altered.layers[0].0.push(b' ');
        assert!(altered.check(&reference, &digest, &keys).expect_err("refused").contains("does not verify"));
        assert!(signed_set(payload(&reference, &digest)).check(&reference, &digest, &PublicKeys::default()).is_err());
        assert!(
            SignatureSet { layers: Vec::new(), unreadable: 0 }
                .check(&reference, &digest, &keys)
                .expect_err("refused")
                .contains("no simple-signing layer")
        );
    }

    #[test]
    fn keys_that_are_not_p256_pem_are_refused_by_name_without_their_bytes() {
        let error = PublicKeys::default().add_pem("k.pub", "not a key").expect_err("refused").to_string();
        assert!(error.contains("`k.pub`") && error.contains("PUBLIC KEY"), "{error}");
        let error = SigningKey::from_pem(
            "k.pem",
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----",
        )
        .expect_err("refused")
        .to_string();
        assert!(error.contains("encrypted") && !error.contains("AAAA"), "{error}");
        assert!(SigningKey::from_pem("k.pem", PUBLIC).is_err());
        assert_eq!(signature_tag(&format!("sha256:{}", "c".repeat(64))), format!("sha256-{}.sig", "c".repeat(64)));
    }
}
