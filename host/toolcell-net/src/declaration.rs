//! The hosts a component declares it wants: a custom section named `toolcell:network` in the
//! component binary, read without running it. The declaration grants nothing (the policy's
//! network rules decide every request); it tells an operator what to expect, so that
//! `toolcell tools add` can show each host beside what the policy says about it, and give the
//! policy lines that would grant the ones it does not.
//!
//! The section's content is UTF-8 text, one destination per line, `SCHEME://HOST[:PORT]`:
//!
//! ```text
//! # documentation pages this tool is meant for
//! https://docs.rs
//! https://*.wikipedia.org
//! http://intranet.example.com:8080
//! ```
//!
//! `SCHEME` is `http` or `https`; `HOST` is a name, an IP address, or `*.domain` (every name
//! under the domain, as in a network rule); `PORT` defaults to the scheme's own. Empty lines
//! and lines starting with `#` are skipped. Several sections (the component's own, and one in
//! each of its core modules) add up, so a linker that concatenates same-named sections keeps
//! the text valid. A component in any language can carry one: the Rust SDK's
//! `declare_hosts!` writes it from source, and any tool that appends a custom section to a
//! wasm binary can add it after the build.

use std::fmt;

use toolcell_policy::{Destination, NetworkDecision, NetworkRules, Scheme};

/// The name of the custom section holding the declaration.
pub const SECTION: &str = "toolcell:network";

/// The most text a declaration may hold, over all its sections.
pub const MAX_DECLARATION_BYTES: usize = 16 << 10;

/// The most destinations a declaration may name.
pub const MAX_DECLARED_HOSTS: usize = 64;

/// One destination a component declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredHost {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host, normalised; `*.example.com` for every name under `example.com`.
    pub host: String,
    /// The port (the scheme's own when the line names none).
    pub port: u16,
}

impl DeclaredHost {
    /// Whether it names every host under a domain (`*.example.com`).
    pub fn is_pattern(&self) -> bool {
        self.host.starts_with("*.")
    }

    /// What the network rules of `role` say about `tool` reaching it. A pattern is allowed
    /// only by a rule that covers every name under its domain (`*.example.com` or a wider
    /// suffix), never by rules naming some of them.
    pub fn decide<'a>(&self, role: &str, tool: &str, rules: &'a NetworkRules) -> NetworkDecision<'a> {
        rules.decide(role, &self.destination(tool))
    }

    /// Where a request of `tool` to it goes, for the network rules.
    pub fn destination<'a>(&'a self, tool: &'a str) -> Destination<'a> {
        Destination { tool, scheme: self.scheme, host: &self.host, port: self.port }
    }

    /// Why the rule `rule`, which allows it, still does not let a request reach it: it is a
    /// special address (loopback, private, link-local, …) the rule's `cidrs` do not hold. A
    /// name is checked when it is resolved, at the request.
    pub fn address_refusal(&self, rule: &toolcell_policy::NetworkRule) -> Option<String> {
        let address = self.host.parse::<std::net::IpAddr>().ok()?;
        NetworkRules::check_address(rule, &self.host, address).err()
    }
}

impl fmt::Display for DeclaredHost {
    /// `https://docs.rs`, `http://*.corp.example:8080`: the port only when it is not the
    /// scheme's own.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        write!(formatter, "{}://{host}", self.scheme.as_str())?;
        if self.port != self.scheme.default_port() {
            write!(formatter, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Why a declaration cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeclarationError {
    /// The binary is not a wasm component or module that parses.
    #[error("the component cannot be parsed to find its `{SECTION}` section: {reason}")]
    Binary {
        /// What the parser said.
        reason: String,
    },
    /// A section is not UTF-8 text.
    #[error("the `{SECTION}` section is not UTF-8 text; write one `SCHEME://HOST[:PORT]` per line")]
    NotText,
    /// The sections hold more than [`MAX_DECLARATION_BYTES`] or name more than
    /// [`MAX_DECLARED_HOSTS`] destinations.
    #[error(
        "the `{SECTION}` section is too large ({detail}); declare at most {MAX_DECLARED_HOSTS} destinations in {MAX_DECLARATION_BYTES} bytes, using `*.domain` patterns"
    )]
    TooLarge {
        /// What is over the bound.
        detail: String,
    },
    /// A line is not `SCHEME://HOST[:PORT]`.
    #[error("line {line} of the `{SECTION}` section, `{text}`, is not a destination: {reason}")]
    Line {
        /// Its number (from 1, over the sections as they come).
        line: usize,
        /// The line, escaped.
        text: String,
        /// What is wrong, and what to write instead.
        reason: String,
    },
}

/// The hosts a component declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declaration {
    /// The destinations, in the order declared, without repeats.
    pub hosts: Vec<DeclaredHost>,
}

impl Declaration {
    /// The declaration in the `toolcell:network` sections of `wasm` (a component, or a core
    /// module), wherever they are nested; `None` when it has none.
    ///
    /// # Errors
    ///
    /// [`DeclarationError`] when the binary does not parse, or a section is not a valid
    /// declaration.
    pub fn from_wasm(wasm: &[u8]) -> Result<Option<Declaration>, DeclarationError> {
        let mut text = Vec::new();
        let mut found = false;
        for payload in wasmparser::Parser::new(0).parse_all(wasm) {
            let payload = payload.map_err(|error| DeclarationError::Binary { reason: error.to_string() })?;
            if let wasmparser::Payload::CustomSection(section) = payload
                && section.name() == SECTION
            {
                found = true;
                text.extend_from_slice(section.data());
                if !text.ends_with(b"\n") {
                    text.push(b'\n');
                }
                if text.len() > MAX_DECLARATION_BYTES {
                    return Err(DeclarationError::TooLarge { detail: format!("more than {MAX_DECLARATION_BYTES} bytes") });
                }
            }
        }
        if !found {
            return Ok(None);
        }
        let text = String::from_utf8(text).map_err(|_| DeclarationError::NotText)?;
        Declaration::parse(&text).map(Some)
    }

    /// Parse a declaration's text.
    ///
    /// # Errors
    ///
    /// [`DeclarationError::Line`] naming the first line that is not `SCHEME://HOST[:PORT]`;
    /// [`DeclarationError::TooLarge`] past the bounds.
    pub fn parse(text: &str) -> Result<Declaration, DeclarationError> {
        if text.len() > MAX_DECLARATION_BYTES {
            return Err(DeclarationError::TooLarge { detail: format!("{} bytes", text.len()) });
        }
        let mut declaration = Declaration::default();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let host = parse_line(line).map_err(|reason| DeclarationError::Line {
                line: index + 1,
                text: line.escape_default().to_string(),
                reason,
            })?;
            if !declaration.hosts.contains(&host) {
                declaration.hosts.push(host);
            }
            if declaration.hosts.len() > MAX_DECLARED_HOSTS {
                return Err(DeclarationError::TooLarge { detail: format!("more than {MAX_DECLARED_HOSTS} destinations") });
            }
        }
        Ok(declaration)
    }
}

/// `SCHEME://HOST[:PORT]`, nothing else.
fn parse_line(line: &str) -> Result<DeclaredHost, String> {
    let (scheme, rest) =
        line.split_once("://").ok_or_else(|| "write `SCHEME://HOST[:PORT]`, such as `https://api.example.com`".to_owned())?;
    let scheme = Scheme::parse(scheme).ok_or_else(|| format!("the scheme `{}` is neither `http` nor `https`", scheme.escape_default()))?;
    if let Some(extra) = rest.find(['/', '?', '#', '@', ' ', '\t']) {
        return Err(format!("a destination is a scheme, a host and a port only; remove `{}`", rest[extra..].escape_default()));
    }
    let (host, port) = split_port(rest)?;
    let port = match port {
        None => scheme.default_port(),
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("the port `{}` is not a number from 1 to 65535", text.escape_default())),
        },
    };
    let host = match host.strip_prefix("*.") {
        Some(domain) => {
            let domain = toolcell_policy::normalize_host(domain)?;
            toolcell_policy::check_domain(&domain)?;
            format!("*.{domain}")
        }
        None if host.contains('*') => return Err("a pattern is written `*.domain`, the `*` alone at the start".to_owned()),
        None => toolcell_policy::normalize_host(host)?,
    };
    Ok(DeclaredHost { scheme, host, port })
}

/// `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_port(rest: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = rest.strip_prefix('[') {
        let (address, after) = bracketed.split_once(']').ok_or_else(|| "an IPv6 address is written `[ADDRESS]`".to_owned())?;
        return match after.strip_prefix(':') {
            Some(port) => Ok((address, Some(port))),
            None if after.is_empty() => Ok((address, None)),
            None => Err(format!("`{}` after the address is not `:PORT`", after.escape_default())),
        };
    }
    Ok(match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    })
}

/// The policy lines that let `tool`, for `role`, reach `hosts`: one rule per scheme and port,
/// scoped to the tool, named `{role}-{tool}-declared` (then `-2`, `-3`, …), skipping the ids
/// `is_taken` says the policy uses already (ids are unique across a policy).
pub fn grant_lines(role: &str, tool: &str, hosts: &[&DeclaredHost], is_taken: impl Fn(&str) -> bool) -> String {
    let mut groups: Vec<(Scheme, u16, Vec<&str>)> = Vec::new();
    for host in hosts {
        match groups.iter_mut().find(|(scheme, port, _)| *scheme == host.scheme && *port == host.port) {
            Some((_, _, names)) => names.push(&host.host),
            None => groups.push((host.scheme, host.port, vec![&host.host])),
        }
    }
    let mut text = String::new();
    let mut number = 1;
    for (scheme, port, names) in &groups {
        let id = loop {
            let id = if number == 1 { format!("{role}-{tool}-declared") } else { format!("{role}-{tool}-declared-{number}") };
            number += 1;
            if !is_taken(&id) {
                break id;
            }
        };
        let names: Vec<String> = names.iter().map(|name| format!("\"{name}\"")).collect();
        text.push_str(&format!("[[roles.{role}.network]]\nid = \"{id}\"\neffect = \"allow\"\nhosts = [{}]\n", names.join(", ")));
        if *scheme != Scheme::Https {
            text.push_str(&format!("schemes = [\"{}\"]\n", scheme.as_str()));
        }
        if *port != scheme.default_port() {
            text.push_str(&format!("ports = [{port}]\n"));
        }
        text.push_str(&format!("tools = [\"{tool}\"]\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Result<String, String> {
        parse_line(text).map(|host| host.to_string())
    }

    #[test]
    fn lines_parse_to_destinations_or_say_what_is_wrong() {
        let table: &[(&str, Result<&str, &str>)] = &[
            ("https://docs.rs", Ok("https://docs.rs")),
            ("HTTPS://Docs.RS.", Ok("https://docs.rs")),
            ("https://docs.rs:443", Ok("https://docs.rs")),
            ("http://api.test:8080", Ok("http://api.test:8080")),
            ("https://*.wikipedia.org", Ok("https://*.wikipedia.org")),
            ("http://10.0.0.5:81", Ok("http://10.0.0.5:81")),
            ("https://[::1]:8443", Ok("https://[::1]:8443")),
            ("docs.rs", Err("SCHEME://HOST")),
            ("ftp://docs.rs", Err("`ftp`")),
            ("https://docs.rs/path", Err("remove `/path`")),
            ("https://user@docs.rs", Err("remove `@docs.rs`")),
            ("https://docs.rs:0", Err("port `0`")),
            ("https://docs.rs:http", Err("port `http`")),
            ("https://a.*.org", Err("`*.domain`")),
            ("https://*", Err("`*.domain`")),
            ("https://*.10.0.0.1", Err("before an address")),
            ("http://*.1:18081", Err("would cover addresses")),
            ("http://*.8.8", Err("would cover addresses")),
            ("https://*.com", Err("whole top-level domain")),
            ("https://", Err("not a host name")),
        ];
        for (line, expected) in table {
            match (host(line), expected) {
                (Ok(shown), Ok(expected)) => assert_eq!(&shown, expected, "{line}"),
                (Err(reason), Err(fragment)) => assert!(reason.contains(fragment), "{line}: {reason}"),
                (got, _) => panic!("{line}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_declaration_skips_comments_merges_repeats_and_names_the_bad_line() {
        let declaration = Declaration::parse("# docs\nhttps://docs.rs\n\n  https://docs.rs:443 \nhttp://a.test:81\n").expect("valid");
        let shown: Vec<String> = declaration.hosts.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["https://docs.rs", "http://a.test:81"]);
        let error = Declaration::parse("https://docs.rs\nnot a url\n").expect_err("invalid");
        assert!(matches!(&error, DeclarationError::Line { line: 2, .. }), "{error}");
        assert!(error.to_string().contains("line 2 of the `toolcell:network` section, `not a url`"), "{error}");
        let many: String = (0..=MAX_DECLARED_HOSTS).map(|index| format!("https://h{index}.test\n")).collect();
        assert!(matches!(Declaration::parse(&many), Err(DeclarationError::TooLarge { .. })));
    }

    #[test]
    fn sections_are_found_in_a_module_and_a_component_wrapping_it() {
        let custom = |name: &str, data: &[u8]| {
            let mut section = vec![0u8];
            let body: Vec<u8> = [&[name.len() as u8][..], name.as_bytes(), data].concat();
            section.push(body.len() as u8);
            section.extend(body);
            section
        };
        let module = [&b"\0asm\x01\0\0\0"[..], &custom(SECTION, b"https://docs.rs"), &custom("other", b"x")].concat();
        let found = Declaration::from_wasm(&module).expect("parses").expect("declared");
        assert_eq!(found.hosts[0].to_string(), "https://docs.rs");
        // A component: its own section, and a core module section (id 1) holding the module.
        let mut component = [&b"\0asm\x0d\0\x01\0"[..], &custom(SECTION, b"http://a.test:81\n")].concat();
        component.push(1);
        component.push(module.len() as u8);
        component.extend(&module);
        let found = Declaration::from_wasm(&component).expect("parses").expect("declared");
        let shown: Vec<String> = found.hosts.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["http://a.test:81", "https://docs.rs"]);
        assert_eq!(Declaration::from_wasm(b"\0asm\x01\0\0\0").expect("parses"), None);
        assert!(matches!(Declaration::from_wasm(b"not wasm"), Err(DeclarationError::Binary { .. })));
        let binary = [&b"\0asm\x01\0\0\0"[..], &custom(SECTION, &[0xff, 0xfe])].concat();
        assert_eq!(Declaration::from_wasm(&binary), Err(DeclarationError::NotText));
    }

    #[test]
    fn the_grant_lines_group_hosts_by_scheme_and_port_and_name_the_tool() {
        let declaration = Declaration::parse("https://docs.rs\nhttps://*.wikipedia.org\nhttp://api.test:8080\n").expect("valid");
        let hosts: Vec<&DeclaredHost> = declaration.hosts.iter().collect();
        assert_eq!(
            grant_lines("fetcher", "http_fetch", &hosts, |id| id == "fetcher-http_fetch-declared-2"),
            "[[roles.fetcher.network]]\nid = \"fetcher-http_fetch-declared\"\neffect = \"allow\"\nhosts = [\"docs.rs\", \"*.wikipedia.org\"]\ntools = [\"http_fetch\"]\n\
             [[roles.fetcher.network]]\nid = \"fetcher-http_fetch-declared-3\"\neffect = \"allow\"\nhosts = [\"api.test\"]\nschemes = [\"http\"]\nports = [8080]\ntools = [\"http_fetch\"]\n"
        );
    }

    #[test]
    fn a_pattern_is_allowed_only_by_a_rule_covering_the_whole_domain() {
        let policy = toolcell_policy::Policy::parse(
            "p.toml",
            "version = 1\n[roles.r]\ntools = [\"t\"]\n[[roles.r.network]]\nid = \"exact\"\neffect = \"allow\"\nhosts = [\"en.wikipedia.org\", \"docs.rs\"]\n[[roles.r.network]]\nid = \"python\"\neffect = \"allow\"\nhosts = [\"*.wikipedia.org\"]\ntools = [\"t\"]\n",
            &["t"],
        )
        .expect("a policy");
        let rules = policy.role("r").expect("role r").network();
        let decide = |line: &str, tool: &str| match parse_line(line).expect("valid").decide("r", tool, rules) {
            NetworkDecision::Allowed(rule) => Some(rule.id.clone()),
            NetworkDecision::Refused { .. } => None,
        };
        assert_eq!(decide("https://docs.rs", "t"), Some("exact".to_owned()));
        assert_eq!(decide("https://*.wikipedia.org", "t"), Some("python".to_owned()));
        assert_eq!(decide("https://*.en.wikipedia.org", "t"), Some("python".to_owned()));
        assert_eq!(decide("https://*.wikipedia.org", "other"), None);
        assert_eq!(decide("https://*.crates.rs", "t"), None);
        assert_eq!(decide("http://docs.rs", "t"), None);
    }
}
