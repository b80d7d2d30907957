//! `[registry]`: how components are taken from OCI registries: which registries on this
//! machine may be reached over plain HTTP, the public keys signatures are checked against,
//! and whether a component must be signed to be added.
//!
//! ```toml
//! [registry]
//! insecure = ["localhost:5000"]       # plain HTTP; registries on this machine only
//! signature_keys = ["keys/cosign.pub"] # relative to the policy file
//! require_signatures = true           # an unsigned component is refused
//! ```

use serde::Deserialize;
use toml::Spanned;

use crate::PolicyError;
use crate::parse::{located, toml_message};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRegistry {
    #[serde(default)]
    insecure: Vec<Spanned<String>>,
    #[serde(default)]
    signature_keys: Vec<Spanned<String>>,
    #[serde(default)]
    require_signatures: Option<Spanned<bool>>,
}

/// Only the `[registry]` table.
#[derive(Deserialize)]
struct RawRegistryOnly {
    #[serde(default)]
    registry: Option<RawRegistry>,
}

/// What `[registry]` says, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrySettings {
    /// Registries (`HOST[:PORT]`, all on this machine) that may be reached over plain HTTP.
    pub insecure: Vec<String>,
    /// Files of PEM public keys, as written (relative to the policy file's directory).
    pub signature_keys: Vec<String>,
    /// Whether a component from a registry must carry a signature by one of the keys, and a
    /// component from a file cannot be added at all.
    pub require_signatures: bool,
}

impl RegistrySettings {
    /// Whether plain HTTP may be used for `registry` (`HOST[:PORT]`).
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.iter().any(|allowed| allowed == registry)
    }
}

/// Whether `registry` (`HOST[:PORT]`) is on this machine.
fn is_local(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => registry.split(':').next().unwrap_or_default(),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

impl RawRegistry {
    /// Check the table; errors carry the line of the value at fault.
    pub(crate) fn compile(&self, file: &str, text: &str) -> Result<RegistrySettings, PolicyError> {
        let error = located(file, text);
        for registry in &self.insecure {
            if !is_local(registry.get_ref()) {
                return Err(error(
                    Some(registry.span()),
                    format!(
                        "`[registry] insecure` lists `{}`, which is not on this machine: plain HTTP is only for `localhost`, `127.0.0.1` or `[::1]` (with a port); reach other registries over HTTPS",
                        registry.get_ref().escape_default()
                    ),
                ));
            }
        }
        for key in &self.signature_keys {
            if key.get_ref().trim().is_empty() {
                return Err(error(
                    Some(key.span()),
                    "`[registry] signature_keys` has an empty file name; name a PEM public key file".to_owned(),
                ));
            }
        }
        let require_signatures = self.require_signatures.as_ref().is_some_and(|require| *require.get_ref());
        if require_signatures && self.signature_keys.is_empty() {
            return Err(error(
                self.require_signatures.as_ref().map(Spanned::span),
                "`[registry] require_signatures = true` needs the keys to check against: add `signature_keys = [\"cosign.pub\"]` (PEM public keys, relative to the policy file)".to_owned(),
            ));
        }
        Ok(RegistrySettings {
            insecure: self.insecure.iter().map(|registry| registry.get_ref().clone()).collect(),
            signature_keys: self.signature_keys.iter().map(|key| key.get_ref().clone()).collect(),
            require_signatures,
        })
    }
}

/// What the `[registry]` table of a policy says (defaults without one); every other table is
/// left to [`Policy::parse`](crate::Policy::parse).
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse, an unknown key in the table,
/// a registry in `insecure` that is not on this machine, or `require_signatures` without keys.
pub fn registry_settings(file: &str, text: &str) -> Result<RegistrySettings, PolicyError> {
    let error = located(file, text);
    let raw: RawRegistryOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    raw.registry.unwrap_or_default().compile(file, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_table_is_read_and_its_mistakes_are_named_with_their_line() {
        let settings = registry_settings(
            "p.toml",
            "version = 1\n[registry]\ninsecure = [\"localhost:5000\"]\nsignature_keys = [\"cosign.pub\"]\nrequire_signatures = true\n",
        )
        .expect("reads");
        assert!(settings.is_insecure("localhost:5000") && !settings.is_insecure("localhost:5001"));
        assert!(settings.require_signatures);
        assert_eq!(registry_settings("p.toml", "version = 1\n").expect("reads"), RegistrySettings::default());
        let remote = registry_settings("p.toml", "[registry]\ninsecure = [\"ghcr.io\"]\n").expect_err("refused");
        assert_eq!(remote.line, Some(2));
        assert!(remote.reason.contains("`ghcr.io`"), "{}", remote.reason);
        let keyless = registry_settings("p.toml", "[registry]\nrequire_signatures = true\n").expect_err("refused");
        assert!(keyless.reason.contains("signature_keys"), "{}", keyless.reason);
        let unknown = registry_settings("p.toml", "[registry]\nkeys = []\n").expect_err("refused");
        assert!(unknown.reason.contains("keys"), "{}", unknown.reason);
    }
}
