//! Network rules: which hosts a role's tools may reach over HTTP, on which schemes and ports,
//! and which special addresses (loopback, private ranges, link-local, …) a rule lets a name
//! lead to. The default is deny. A rule names hosts exactly (`api.example.com`) or by suffix
//! (`*.example.com`, which does not match `example.com` itself); a deny rule beats an allow
//! rule. A host name is checked here; every address it resolves to is checked again with
//! [`NetworkRules::check_address`] before anything connects to it.
//!
//! ```toml
//! [[roles.fetcher.network]]
//! id = "docs"
//! effect = "allow"
//! hosts = ["docs.rs", "*.python.org"]
//! schemes = ["https"]             # the default
//! ports = [443]                   # the default: the scheme's own port
//! tools = ["http_fetch"]          # the default: every tool of the role
//! cidrs = ["10.20.0.0/16"]        # special addresses these hosts may resolve to
//! headers = { Authorization = { env = "DOCS_TOKEN", prefix = "Bearer " } }
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use toml::Spanned;

use super::*;
use crate::parse::SpannedError;

/// A network rule as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetworkRule {
    id: Option<Spanned<String>>,
    effect: Spanned<String>,
    hosts: Spanned<Vec<Spanned<String>>>,
    schemes: Option<Vec<Spanned<String>>>,
    ports: Option<Vec<Spanned<i64>>>,
    tools: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    cidrs: Vec<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<RawSecret>>,
}

/// Where a secret header's value comes from, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSecret {
    env: Option<String>,
    file: Option<String>,
    #[serde(default)]
    prefix: String,
}

/// What a network rule does with the requests it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkEffect {
    /// The requests it matches may go (to the addresses it lets their hosts resolve to).
    Allow,
    /// The requests it matches are refused, whatever allows them.
    Deny,
}

/// The schemes a request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS, the certificate checked against the host name.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a URL of this scheme means when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// The scheme named `text` (`http`, `https`, any case).
    pub fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }
}

/// A host pattern: one name, or every name under a domain (`*.example.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPattern {
    /// The name, or the domain with its leading dot (`.example.com`) for a suffix pattern.
    name: String,
    is_suffix: bool,
}

impl HostPattern {
    /// Whether it covers `host` (normalised). A suffix pattern covers names only: never an
    /// address, whatever its last digits.
    fn matches(&self, host: &str) -> bool {
        if self.is_suffix {
            host.len() > self.name.len() && host.ends_with(&self.name) && host.parse::<IpAddr>().is_err()
        } else {
            host == self.name
        }
    }

    /// Whether it names `domain` or a name under it.
    fn is_within(&self, domain: &str) -> bool {
        let name = self.name.strip_prefix('.').unwrap_or(&self.name);
        name == domain || name.ends_with(&format!(".{domain}"))
    }
}

/// Check the domain of a pattern `*.DOMAIN` (normalised): a domain of two labels or more whose
/// last label is not all digits, so that the pattern covers names under one domain, never
/// addresses or a whole top-level domain.
///
/// # Errors
///
/// What is wrong, for a message that names the pattern.
pub fn check_domain(domain: &str) -> Result<(), String> {
    if domain.parse::<IpAddr>().is_ok() {
        return Err(format!("`*.{domain}` puts `*.` before an address: a pattern `*.domain` names a domain; name the address alone"));
    }
    let last = domain.rsplit('.').next().unwrap_or(domain);
    if !last.is_empty() && last.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!(
            "`*.{domain}` would cover addresses (a top-level domain is never all digits); name a domain, or list the addresses"
        ));
    }
    if !domain.contains('.') {
        return Err(format!("`*.{domain}` covers a whole top-level domain; name a domain under it, such as `*.example.{domain}`"));
    }
    Ok(())
}

/// An address range a rule lets its hosts resolve to, though it is special.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parse `10.0.0.0/8`, `fd00::/8`, or a single address (a `/32` or `/128`).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address.parse::<IpAddr>().ok()?, Some(prefix.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(Cidr { network: address, prefix })
    }

    /// Whether `address` lies in the range (an IPv4-mapped IPv6 address counts as its IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        let keep = |bits: u32, value: u128| if self.prefix == 0 { 0 } else { value >> (bits - u32::from(self.prefix)) };
        match (self.network, address) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                keep(32, u128::from(u32::from(network))) == keep(32, u128::from(u32::from(address)))
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => keep(128, u128::from(network)) == keep(128, u128::from(address)),
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.network, self.prefix)
    }
}

/// Where a secret header's value comes from: the host's environment or a file the host reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The host's environment variable of this name.
    Env(String),
    /// The file at this host path, its content without a final newline.
    File(String),
}

/// A header the host adds to the requests a rule allows; the component never sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHeader {
    /// The header's name, as written (`Authorization`).
    pub name: String,
    /// Where its value comes from.
    pub source: SecretSource,
    /// Put before the value (`Bearer `).
    pub prefix: String,
}

/// One network rule of a role, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRule {
    /// Its id (`ROLE#net-N` when the policy gives none), named in audit records and refusals.
    pub id: String,
    /// The line of the policy it is on.
    pub line: usize,
    /// Allow or deny.
    pub effect: NetworkEffect,
    hosts: Vec<HostPattern>,
    schemes: Vec<Scheme>,
    /// `None`: each scheme's own port.
    ports: Option<Vec<u16>>,
    tools: Option<Vec<String>>,
    cidrs: Vec<Cidr>,
    /// The headers the host adds to the requests this rule allows.
    pub headers: Vec<SecretHeader>,
}

impl NetworkRule {
    /// Whether the rule is about `tool` (it names no tools, or names this one).
    pub fn is_for_tool(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.iter().any(|named| named == tool))
    }

    /// What the rule names, for people: `https://docs.rs, https://*.python.org:8443 (may
    /// reach 10.20.0.0/16)`.
    pub fn summary(&self) -> String {
        let mut destinations = Vec::new();
        for scheme in &self.schemes {
            for host in &self.hosts {
                let host = if host.is_suffix { format!("*{}", host.name) } else { host.name.clone() };
                match &self.ports {
                    None => destinations.push(format!("{}://{host}", scheme.as_str())),
                    Some(ports) => {
                        destinations.extend(ports.iter().map(|port| format!("{}://{host}:{port}", scheme.as_str())));
                    }
                }
            }
        }
        let mut text = destinations.join(", ");
        if !self.cidrs.is_empty() {
            let cidrs: Vec<String> = self.cidrs.iter().map(ToString::to_string).collect();
            text.push_str(&format!(" (may reach {})", cidrs.join(", ")));
        }
        text
    }

    fn matches(&self, request: &Destination<'_>) -> bool {
        self.matches_all_but_host(request) && self.hosts.iter().any(|pattern| pattern.matches(request.host))
    }

    /// Whether it is about the request's tool, scheme and port.
    fn matches_all_but_host(&self, request: &Destination<'_>) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.iter().any(|tool| tool == request.tool))
            && self.schemes.contains(&request.scheme)
            && match &self.ports {
                Some(ports) => ports.contains(&request.port),
                None => request.port == request.scheme.default_port(),
            }
    }
}

/// Where a request goes: the tool that sends it, and its scheme, host (normalised with
/// [`normalize_host`]) and port.
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    /// The tool that sends it.
    pub tool: &'a str,
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host, normalised.
    pub host: &'a str,
    /// The port (the scheme's own when the URL names none).
    pub port: u16,
}

/// What the rules say about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkDecision<'a> {
    /// This rule allows it (its addresses are still to be checked).
    Allowed(&'a NetworkRule),
    /// Refused, by this rule or by default (`None`); the message says which, and how to grant.
    Refused {
        /// The deny rule that refused it; `None` when no rule allowed it.
        rule: Option<&'a NetworkRule>,
        /// For the agent: which rule, and the policy lines that would grant it.
        message: String,
    },
}

/// The network rules of one role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkRules {
    rules: Vec<NetworkRule>,
}

impl NetworkRules {
    /// The rules, in policy order.
    pub fn rules(&self) -> &[NetworkRule] {
        &self.rules
    }

    /// Whether any rule allows anything (a role without one reaches no host).
    pub fn allows_any(&self) -> bool {
        self.rules.iter().any(|rule| rule.effect == NetworkEffect::Allow)
    }

    /// What the rules of `role` say about `request`: a deny rule that matches refuses it; else
    /// the first allow rule that matches allows it; else it is refused by default, and the
    /// message gives the policy lines that would grant it.
    pub fn decide<'a>(&'a self, role: &str, request: &Destination<'_>) -> NetworkDecision<'a> {
        let target = target_of(request);
        let matching = || self.rules.iter().filter(|rule| rule.matches(request));
        if let Some(rule) = matching().find(|rule| rule.effect == NetworkEffect::Deny) {
            return NetworkDecision::Refused {
                rule: Some(rule),
                message: format!(
                    "{target} is denied for role `{role}` by the network rule `{}` (policy line {}); reach another host, or ask the operator to change that rule",
                    rule.id, rule.line
                ),
            };
        }
        if let Some(rule) = matching().next() {
            return NetworkDecision::Allowed(rule);
        }
        let mut grant = format!("[[roles.{role}.network]]\neffect = \"allow\"\nhosts = [\"{}\"]", request.host);
        if request.scheme != Scheme::Https {
            grant.push_str(&format!("\nschemes = [\"{}\"]", request.scheme.as_str()));
        }
        if request.port != request.scheme.default_port() {
            grant.push_str(&format!("\nports = [{}]", request.port));
        }
        NetworkDecision::Refused {
            rule: None,
            message: format!(
                "{target} is not allowed for role `{role}`: no network rule allows it (default deny). The operator can grant it by adding to the policy:\n{grant}"
            ),
        }
    }

    /// The deny rules that refuse some names under the pattern `request.host` (`*.DOMAIN`)
    /// without refusing the pattern as a whole: a request to those names is refused though the
    /// pattern is allowed.
    pub fn denied_within<'a>(&'a self, request: &Destination<'_>) -> Vec<&'a NetworkRule> {
        let Some(domain) = request.host.strip_prefix("*.") else {
            return Vec::new();
        };
        self.rules
            .iter()
            .filter(|rule| rule.effect == NetworkEffect::Deny && !rule.matches(request))
            .filter(|rule| rule.matches_all_but_host(request) && rule.hosts.iter().any(|pattern| pattern.is_within(domain)))
            .collect()
    }

    /// Whether `rule`, which allowed a request to `host`, lets it connect to `address`, one
    /// the host resolved `host` to: a special address (see [`special_range`]) only if one of
    /// the rule's `cidrs` holds it.
    ///
    /// # Errors
    ///
    /// A message naming the host, the address, its range, and the `cidrs` line that would
    /// allow it.
    pub fn check_address(rule: &NetworkRule, host: &str, address: IpAddr) -> Result<(), String> {
        let Some(range) = special_range(address) else {
            return Ok(());
        };
        if rule.cidrs.iter().any(|cidr| cidr.contains(address)) {
            return Ok(());
        }
        let single = match address {
            IpAddr::V4(_) => format!("{address}/32"),
            IpAddr::V6(_) => format!("{address}/128"),
        };
        Err(format!(
            "`{host}` resolves to {address}, {range}, which the network rule `{}` (policy line {}) does not let it reach; if that is meant, the operator can add `cidrs = [\"{single}\"]` to that rule",
            rule.id, rule.line
        ))
    }
}

/// `https://host:port`, for messages.
fn target_of(request: &Destination<'_>) -> String {
    let host = if request.host.contains(':') { format!("[{}]", request.host) } else { request.host.to_owned() };
    format!("`{}://{host}:{}`", request.scheme.as_str(), request.port)
}

/// `host` as rules match it: lower case, without a trailing dot, an IPv6 literal without its
/// brackets.
///
/// # Errors
///
/// A reason, for an empty name or one with characters no host name or address has.
pub fn normalize_host(host: &str) -> Result<String, String> {
    let trimmed = host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).unwrap_or(host);
    let lowered = trimmed.trim_end_matches('.').to_ascii_lowercase();
    if lowered.parse::<IpAddr>().is_ok() {
        return Ok(lowered);
    }
    let valid = !lowered.is_empty()
        && lowered.len() <= 253
        && lowered.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        });
    if valid { Ok(lowered) } else { Err(format!("`{}` is not a host name or an IP address", host.escape_default())) }
}

/// The special range `address` lies in, said for a message (`a loopback address`); `None` for
/// an ordinary public address. IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses
/// are judged by the IPv4 address inside them; Teredo and local-use NAT64 are special.
pub fn special_range(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = address.octets();
    Some(match (a, b, c) {
        (0, _, _) => "an address of `this network` (0.0.0.0/8)",
        (127, _, _) => "a loopback address",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "a private address (RFC 1918)",
        (100, 64..=127, _) => "a shared address (100.64.0.0/10, carrier-grade NAT)",
        (169, 254, _) => "a link-local address (cloud metadata services answer on 169.254.169.254)",
        (192, 0, 0) => "an IETF protocol address (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address (198.18.0.0/15)",
        (224..=239, _, _) => "a multicast address",
        _ if address.is_broadcast() => "the broadcast address",
        (240..=255, _, _) => "a reserved address (240.0.0.0/4)",
        _ => return None,
    })
}

fn special_v6(address: Ipv6Addr) -> Option<&'static str> {
    let segments = address.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if let Some(v4) = address.to_ipv4_mapped() {
        return special_v4(v4);
    }
    Some(match segments {
        [0, 0, 0, 0, 0, 0, 0, 0] => "the unspecified address",
        [0, 0, 0, 0, 0, 0, 0, 1] => "a loopback address",
        // IPv4-compatible (deprecated) and NAT64: the IPv4 address decides.
        [0, 0, 0, 0, 0, 0, high, low] | [0x64, 0xff9b, 0, 0, 0, 0, high, low] => return special_v4(embedded(high, low)),
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64 address (64:ff9b:1::/48)",
        [0x2002, high, low, ..] => return special_v4(embedded(high, low)),
        [0x2001, 0, ..] => "a Teredo address (2001::/32)",
        [0x2001, 0xdb8, ..] => "a documentation address",
        [0x100, 0, 0, 0, ..] => "a discard-only address (100::/64)",
        [first, ..] if first & 0xfe00 == 0xfc00 => "a unique local address (fc00::/7)",
        [first, ..] if first & 0xffc0 == 0xfe80 => "a link-local address (fe80::/10)",
        [first, ..] if first & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    })
}

/// Compile the `network` rules of role `role`; `index` numbers rules without an id.
pub(crate) fn compile_rule(
    role: &str,
    index: usize,
    line: usize,
    raw: &RawNetworkRule,
    known_tools: &[&str],
) -> Result<NetworkRule, SpannedError> {
    let id = raw.id.as_ref().map_or_else(|| format!("{role}#net-{}", index + 1), |id| id.get_ref().clone());
    let effect = match raw.effect.get_ref().as_str() {
        "allow" => NetworkEffect::Allow,
        "deny" => NetworkEffect::Deny,
        other => {
            return Err((
                Some(raw.effect.span()),
                format!("network rule `{id}`: effect `{}` is not `allow` or `deny`", other.escape_default()),
            ));
        }
    };
    if raw.hosts.get_ref().is_empty() {
        return Err((Some(raw.hosts.span()), format!("network rule `{id}` names no hosts: list them in `hosts`")));
    }
    let mut hosts = Vec::new();
    for host in raw.hosts.get_ref() {
        let text = host.get_ref();
        let (is_suffix, name) = match text.strip_prefix("*.") {
            Some(domain) => (true, domain),
            None => (false, text.as_str()),
        };
        let name = normalize_host(name).map_err(|reason| {
            (Some(host.span()), format!("network rule `{id}`: {reason}; write a name (`api.example.com`), `*.example.com`, or an address"))
        })?;
        if is_suffix && let Err(reason) = check_domain(&name) {
            return Err((Some(host.span()), format!("network rule `{id}`: {reason}")));
        }
        hosts.push(if is_suffix { HostPattern { name: format!(".{name}"), is_suffix } } else { HostPattern { name, is_suffix } });
    }
    let schemes = match &raw.schemes {
        None => vec![Scheme::Https],
        Some(schemes) => schemes
            .iter()
            .map(|scheme| {
                Scheme::parse(scheme.get_ref()).ok_or_else(|| {
                    (
                        Some(scheme.span()),
                        format!("network rule `{id}`: scheme `{}` is not `http` or `https`", scheme.get_ref().escape_default()),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let ports = raw
        .ports
        .as_ref()
        .map(|ports| {
            ports
                .iter()
                .map(|port| {
                    u16::try_from(*port.get_ref())
                        .ok()
                        .filter(|port| *port != 0)
                        .ok_or_else(|| (Some(port.span()), format!("network rule `{id}`: port {} is not 1 to 65535", port.get_ref())))
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let tools = match &raw.tools {
        None => None,
        Some(tools) => Some(parse::tool_names(tools, known_tools, &format!("network rule `{id}`"))?),
    };
    let cidrs = raw
        .cidrs
        .iter()
        .map(|cidr| {
            Cidr::parse(cidr.get_ref()).ok_or_else(|| {
                (
                    Some(cidr.span()),
                    format!("network rule `{id}`: `{}` is not an address range such as `10.0.0.0/8`", cidr.get_ref().escape_default()),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if effect == NetworkEffect::Deny && (!cidrs.is_empty() || !raw.headers.is_empty()) {
        return Err((None, format!("network rule `{id}` denies: `cidrs` and `headers` belong to allow rules")));
    }
    let mut headers = Vec::new();
    for (name, secret) in &raw.headers {
        let valid_name = !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte));
        if !valid_name || name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length") {
            return Err((
                Some(secret.span()),
                format!(
                    "network rule `{id}`: `{}` cannot be a secret header (not a header name, or one the host sets)",
                    name.escape_default()
                ),
            ));
        }
        let raw_secret = secret.get_ref();
        let source = match (&raw_secret.env, &raw_secret.file) {
            (Some(variable), None) => SecretSource::Env(variable.clone()),
            (None, Some(file)) => SecretSource::File(file.clone()),
            _ => {
                return Err((
                    Some(secret.span()),
                    format!("network rule `{id}`: the header `{name}` takes its value from exactly one of `env` or `file`"),
                ));
            }
        };
        headers.push(SecretHeader { name: name.clone(), source, prefix: raw_secret.prefix.clone() });
    }
    Ok(NetworkRule { id, line, effect, hosts, schemes, ports, tools, cidrs, headers })
}

/// Build a role's rule list.
pub(crate) fn rules(rules: Vec<NetworkRule>) -> NetworkRules {
    NetworkRules { rules }
}

#[cfg(test)]
mod tests;
