//! `oci://HOST[:PORT]/NAME:TAG` and `oci://HOST[:PORT]/NAME[:TAG]@sha256:HEX`, parsed once into
//! a typed form.

use crate::Error;

/// A component's place in a registry: the registry, the repository and a tag, a manifest
/// digest, or both (a tag with the digest it was resolved to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl std::str::FromStr for Reference {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Error> {
        let fail = |reason: &'static str| Error::Reference { value: value.escape_default().to_string(), reason };
        let rest = value.strip_prefix("oci://").ok_or_else(|| fail("it does not start with `oci://`"))?;
        let (registry, rest) = rest.split_once('/').ok_or_else(|| fail("it names no repository after the registry"))?;
        if !is_registry(registry) {
            return Err(fail("the registry is not `HOST` or `HOST:PORT`"));
        }
        let (name, digest) = match rest.split_once('@') {
            Some((name, digest)) => {
                let hex = digest.strip_prefix("sha256:").ok_or_else(|| fail("the digest is not `sha256:` and 64 hex digits"))?;
                if hex.len() != 64 || !hex.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
                    return Err(fail("the digest is not `sha256:` and 64 lowercase hex digits"));
                }
                (name, Some(digest.to_owned()))
            }
            None => (rest, None),
        };
        let (repository, tag) = match name.rsplit_once(':') {
            Some((repository, tag)) => (repository, Some(tag.to_owned())),
            None => (name, None),
        };
        if !is_repository(repository) {
            return Err(fail("the name is not lowercase letters, digits and `._-` in `/`-separated parts"));
        }
        if let Some(tag) = &tag
            && !is_tag(tag)
        {
            return Err(fail("the tag is not letters, digits and `._-` (at most 128, not starting with `.` or `-`)"));
        }
        if tag.is_none() && digest.is_none() {
            return Err(fail("it names neither a tag (`:TAG`) nor a digest (`@sha256:…`)"));
        }
        Ok(Self { registry: registry.to_owned(), repository: repository.to_owned(), tag, digest })
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(formatter, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(formatter, "@{digest}")?;
        }
        Ok(())
    }
}

impl Reference {
    /// `HOST` or `HOST:PORT`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository (`tools/line-count`).
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if the reference names one.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The manifest digest (`sha256:…`), if the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The same place pinned to `digest`, the tag kept so that `tools update` can re-resolve it.
    pub fn pinned(&self, digest: &str) -> Self {
        Self { digest: Some(digest.to_owned()), ..self.clone() }
    }

    /// The same place by its tag alone, to resolve it again; `None` without a tag.
    pub fn unpinned(&self) -> Option<Self> {
        self.tag.as_ref().map(|_| Self { digest: None, ..self.clone() })
    }

    /// The tag `tag` in the same repository (for the signatures of a manifest).
    pub(crate) fn tagged(reference: &Self, tag: &str) -> Self {
        Self { tag: Some(tag.to_owned()), digest: None, ..reference.clone() }
    }

    /// Whether the registry is on this machine: the only place plain HTTP may be used.
    pub fn is_local(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        matches!(host, "localhost" | "127.0.0.1" | "::1")
    }

    /// The form `oci-client` takes: the digest wins over the tag.
    pub(crate) fn to_client(&self) -> oci_client::Reference {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => oci_client::Reference::with_digest(self.registry.clone(), self.repository.clone(), digest.clone()),
            (None, Some(tag)) => oci_client::Reference::with_tag(self.registry.clone(), self.repository.clone(), tag.clone()),
            (None, None) => oci_client::Reference::with_tag(self.registry.clone(), self.repository.clone(), "latest".to_owned()),
        }
    }
}

/// `NAME[:PORT]` (letters, digits, `.` and `-`) or `[IPV6][:PORT]`, nothing else: what a URL
/// parser reads as the host is then exactly what [`Reference::is_local`] judged.
fn is_registry(registry: &str) -> bool {
    let (host_ok, port) = match registry.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((address, rest)) => (address.parse::<std::net::Ipv6Addr>().is_ok(), rest),
            None => return false,
        },
        None => {
            let (host, port) = registry.find(':').map_or((registry, ""), |at| registry.split_at(at));
            let name_ok = !host.is_empty()
                && host.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-'))
                && !host.starts_with(['.', '-']);
            (name_ok, port)
        }
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|byte| byte.is_ascii_digit()),
        None => port.is_empty(),
    };
    host_ok && port_ok
}

fn is_repository(repository: &str) -> bool {
    !repository.is_empty()
        && repository.split('/').all(|part| {
            !part.is_empty()
                && part.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'.' | b'_' | b'-'))
                && part.bytes().next().is_some_and(|byte| byte.is_ascii_alphanumeric())
        })
}

fn is_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && tag.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        && !tag.starts_with(['.', '-'])
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_or_say_why_not() {
        for (text, expected) in [
            ("oci://localhost:5000/tools/echo:1.0".to_owned(), Ok(("localhost:5000", "tools/echo", Some("1.0"), None))),
            ("oci://ghcr.io/a/b@".to_owned() + DIGEST, Ok(("ghcr.io", "a/b", None, Some(DIGEST)))),
            ("oci://ghcr.io/a:v1@".to_owned() + DIGEST, Ok(("ghcr.io", "a", Some("v1"), Some(DIGEST)))),
            ("localhost:5000/a:1".to_owned(), Err("does not start with `oci://`")),
            ("oci://localhost:5000".to_owned(), Err("names no repository")),
            ("oci://localhost:5000/a".to_owned(), Err("neither a tag")),
            ("oci://localhost:5000/A:1".to_owned(), Err("the name is not")),
            ("oci://localhost:5000/a@sha256:12".to_owned(), Err("64 lowercase hex")),
            ("oci://localhost:5000/a@md5:12".to_owned(), Err("the digest is not")),
            ("oci://local host/a:1".to_owned(), Err("the registry is not")),
            ("oci://localhost:evil.com:5000/a:1".to_owned(), Err("the registry is not")),
            ("oci://[::1].evil.com:5000/a:1".to_owned(), Err("the registry is not")),
            ("oci://[localhost]evil.com:5000/a:1".to_owned(), Err("the registry is not")),
            ("oci://[::1]:5000/a:1".to_owned(), Ok(("[::1]:5000", "a", Some("1"), None))),
            ("oci://localhost:5000/a:-x".to_owned(), Err("the tag is not")),
        ]
        .map(|(text, expected)| (text.to_string(), expected))
        {
            match (text.parse::<Reference>(), expected) {
                (Ok(reference), Ok((registry, repository, tag, digest))) => {
                    assert_eq!(
                        (reference.registry(), reference.repository(), reference.tag(), reference.digest()),
                        (registry, repository, tag, digest),
                        "{text}"
                    );
                    assert_eq!(reference.to_string(), text);
                }
                (Err(error), Err(reason)) => {
                    let message = error.to_string();
                    assert!(message.contains(reason) && message.contains(&format!("`{text}`")), "{text}: {message}");
                }
                (got, expected) => panic!("{text}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn only_this_machine_is_local() {
        for (text, local) in [
            ("oci://localhost:5000/a:1", true),
            ("oci://127.0.0.1:5000/a:1", true),
            ("oci://[::1]:5000/a:1", true),
            ("oci://localhost.evil.example/a:1", false),
            ("oci://ghcr.io/a:1", false),
        ] {
            assert_eq!(text.parse::<Reference>().expect("parses").is_local(), local, "{text}");
        }
    }
}
