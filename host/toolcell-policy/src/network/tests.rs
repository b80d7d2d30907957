use super::*;

const TOOLS: &[&str] = &["read_file", "http_fetch", "crawl"];

fn load(network: &str) -> Result<Policy, String> {
    let text = format!("version = 1\n\n[roles.fetcher]\ntools = [\"read_file\", \"http_fetch\", \"crawl\"]\n\n{network}");
    Policy::parse("policy.toml", &text, TOOLS).map_err(|error| error.to_string())
}

fn request<'a>(tool: &'a str, scheme: Scheme, host: &'a str, port: u16) -> Destination<'a> {
    Destination { tool, scheme, host, port }
}

/// `allow RULE`, `deny RULE` or `default`, for what the rules of `policy` say about a request.
fn verdict(policy: &Policy, destination: &Destination<'_>) -> String {
    match policy.role("fetcher").expect("role").network().decide("fetcher", destination) {
        NetworkDecision::Allowed(rule) => format!("allow {}", rule.id),
        NetworkDecision::Refused { rule: Some(rule), .. } => format!("deny {}", rule.id),
        NetworkDecision::Refused { rule: None, .. } => "default".to_owned(),
    }
}

const RULES: &str = r#"
[[roles.fetcher.network]]
id = "docs"
effect = "allow"
hosts = ["docs.rs", "*.python.org"]

[[roles.fetcher.network]]
id = "internal"
effect = "allow"
hosts = ["wiki.corp.example"]
schemes = ["http", "https"]
ports = [80, 8080]
tools = ["crawl"]
cidrs = ["10.20.0.0/16"]
headers = { Authorization = { env = "WIKI_TOKEN", prefix = "Bearer " } }

[[roles.fetcher.network]]
id = "no-legacy"
effect = "deny"
hosts = ["legacy.python.org"]
"#;

#[test]
fn hosts_schemes_ports_and_tools_decide_and_deny_beats_allow() {
    let policy = load(RULES).expect("the policy loads");
    let table = [
        (request("http_fetch", Scheme::Https, "docs.rs", 443), "allow docs"),
        (request("http_fetch", Scheme::Https, "peps.python.org", 443), "allow docs"),
        (request("http_fetch", Scheme::Https, "a.b.python.org", 443), "allow docs"),
        // `*.python.org` is the names under it, not the domain itself.
        (request("http_fetch", Scheme::Https, "python.org", 443), "default"),
        (request("http_fetch", Scheme::Https, "evilpython.org", 443), "default"),
        // https only, on its own port, unless the rule says otherwise.
        (request("http_fetch", Scheme::Http, "docs.rs", 80), "default"),
        (request("http_fetch", Scheme::Https, "docs.rs", 8443), "default"),
        (request("http_fetch", Scheme::Https, "legacy.python.org", 443), "deny no-legacy"),
        // A rule for one tool.
        (request("crawl", Scheme::Http, "wiki.corp.example", 8080), "allow internal"),
        (request("crawl", Scheme::Https, "wiki.corp.example", 80), "allow internal"),
        (request("http_fetch", Scheme::Http, "wiki.corp.example", 8080), "default"),
        (request("crawl", Scheme::Http, "wiki.corp.example", 443), "default"),
    ];
    for (destination, expected) in table {
        assert_eq!(verdict(&policy, &destination), expected, "{destination:?}");
    }
    let rule = policy.role("fetcher").expect("role").network().rules()[1].clone();
    assert_eq!(
        rule.headers,
        [SecretHeader { name: "Authorization".into(), source: SecretSource::Env("WIKI_TOKEN".into()), prefix: "Bearer ".into() }]
    );
}

#[test]
fn a_refusal_names_the_rule_or_gives_the_lines_that_would_grant_it() {
    let policy = load(RULES).expect("the policy loads");
    let rules = policy.role("fetcher").expect("role").network();
    let message = |destination| match rules.decide("fetcher", &destination) {
        NetworkDecision::Refused { message, .. } => message,
        NetworkDecision::Allowed(rule) => panic!("allowed by {}", rule.id),
    };
    let denied = message(request("http_fetch", Scheme::Https, "legacy.python.org", 443));
    assert!(denied.contains("`https://legacy.python.org:443` is denied") && denied.contains("`no-legacy` (policy line 22)"), "{denied}");
    let default = message(request("http_fetch", Scheme::Http, "evil.example", 8080));
    assert!(
        default
            .ends_with("[[roles.fetcher.network]]\neffect = \"allow\"\nhosts = [\"evil.example\"]\nschemes = [\"http\"]\nports = [8080]"),
        "{default}"
    );
    let ipv6 = message(request("http_fetch", Scheme::Https, "::1", 443));
    assert!(ipv6.starts_with("`https://[::1]:443` is not allowed"), "{ipv6}");
    // No rule at all: nothing is reachable.
    let bare = load("").expect("loads");
    assert!(!bare.role("fetcher").expect("role").network().allows_any());
}

#[test]
fn special_addresses_need_a_cidr_of_the_rule_that_allowed_the_host() {
    let policy = load(RULES).expect("the policy loads");
    let rules = policy.role("fetcher").expect("role").network().rules();
    let (docs, internal) = (&rules[0], &rules[1]);
    let address = |text: &str| text.parse::<IpAddr>().expect("address");
    assert_eq!(NetworkRules::check_address(docs, "docs.rs", address("151.101.1.1")), Ok(()));
    let refused = NetworkRules::check_address(docs, "docs.rs", address("127.0.0.2")).expect_err("loopback");
    assert!(refused.contains("`docs.rs` resolves to 127.0.0.2, a loopback address"), "{refused}");
    assert!(refused.contains("add `cidrs = [\"127.0.0.2/32\"]` to that rule"), "{refused}");
    let metadata = NetworkRules::check_address(docs, "docs.rs", address("169.254.169.254")).expect_err("link-local");
    assert!(metadata.contains("link-local"), "{metadata}");
    assert_eq!(NetworkRules::check_address(internal, "wiki.corp.example", address("10.20.3.4")), Ok(()));
    assert_eq!(NetworkRules::check_address(internal, "wiki.corp.example", address("::ffff:10.20.3.4")), Ok(()));
    assert!(NetworkRules::check_address(internal, "wiki.corp.example", address("10.21.0.1")).is_err());
    assert!(NetworkRules::check_address(internal, "wiki.corp.example", address("::ffff:127.0.0.1")).is_err());
}

#[test]
fn special_ranges() {
    let table = [
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("127.0.0.1", Some("loopback")),
        ("127.255.255.254", Some("loopback")),
        ("0.0.0.0", Some("this network")),
        ("10.1.2.3", Some("private")),
        ("172.16.0.1", Some("private")),
        ("172.31.255.255", Some("private")),
        ("192.168.1.1", Some("private")),
        ("100.64.0.1", Some("shared")),
        ("169.254.169.254", Some("link-local")),
        ("192.0.0.1", Some("IETF")),
        ("192.0.2.1", Some("documentation")),
        ("198.18.0.1", Some("benchmarking")),
        ("224.0.0.1", Some("multicast")),
        ("255.255.255.255", Some("broadcast")),
        ("240.0.0.1", Some("reserved")),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
        ("::", Some("unspecified")),
        ("::1", Some("loopback")),
        ("fc00::1", Some("unique local")),
        ("fd12:3456::1", Some("unique local")),
        ("fe80::1", Some("link-local")),
        ("ff02::1", Some("multicast")),
        // An IPv4 address inside an IPv6 one is judged as itself.
        ("::ffff:127.0.0.1", Some("loopback")),
        ("::ffff:169.254.169.254", Some("link-local")),
        ("::127.0.0.1", Some("loopback")),
        ("64:ff9b::7f00:1", Some("loopback")),
        ("64:ff9b::a9fe:a9fe", Some("link-local")),
        ("2002:7f00:1::", Some("loopback")),
        ("2002:a00:1::", Some("private")),
        ("64:ff9b:1::1", Some("local-use NAT64")),
        ("2001::1", Some("Teredo")),
        ("2001:db8::1", Some("documentation")),
        ("100::1", Some("discard-only")),
    ];
    for (address, expected) in table {
        let range = special_range(address.parse().expect("address"));
        match expected {
            None => assert_eq!(range, None, "{address}"),
            Some(part) => assert!(range.is_some_and(|range| range.contains(part)), "{address}: {range:?}"),
        }
    }
}

#[test]
fn ranges_and_host_names() {
    let cidr = |text: &str| Cidr::parse(text).unwrap_or_else(|| panic!("{text}"));
    let address = |text: &str| text.parse::<IpAddr>().expect("address");
    assert!(cidr("10.0.0.0/8").contains(address("10.255.0.1")));
    assert!(!cidr("10.0.0.0/8").contains(address("11.0.0.1")));
    assert!(cidr("0.0.0.0/0").contains(address("203.0.113.9")));
    assert!(!cidr("0.0.0.0/0").contains(address("::1")));
    assert!(cidr("127.0.0.1").contains(address("127.0.0.1")) && !cidr("127.0.0.1").contains(address("127.0.0.2")));
    assert!(cidr("fd00::/8").contains(address("fd12::1")));
    assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
    for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/"] {
        assert_eq!(Cidr::parse(bad), None, "{bad}");
    }
    assert_eq!(normalize_host("API.Example.COM.").as_deref(), Ok("api.example.com"));
    assert_eq!(normalize_host("[::1]").as_deref(), Ok("::1"));
    for bad in ["", "exa mple.com", "a..b", "-a.com", "a/b", "a:80", &"a".repeat(64)] {
        assert!(normalize_host(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn mistakes_are_refused_with_their_line() {
    let rule = |body: &str| format!("[[roles.fetcher.network]]\n{body}\n");
    let table = [
        (rule("effect = \"maybe\"\nhosts = [\"a.example\"]"), "line 7", "is not `allow` or `deny`"),
        (rule("effect = \"allow\"\nhosts = []"), "line 8", "names no hosts"),
        (rule("effect = \"allow\"\nhosts = [\"exa mple.com\"]"), "line 8", "is not a host name"),
        (rule("effect = \"allow\"\nhosts = [\"*.10.0.0.1\"]"), "line 8", "before an address"),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\nschemes = [\"ftp\"]"), "line 9", "scheme `ftp`"),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\nports = [70000]"), "line 9", "port 70000"),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\ntools = [\"nope\"]"), "line 9", "nope"),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\ncidrs = [\"10.0.0.0/99\"]"), "line 9", "not an address range"),
        (rule("effect = \"deny\"\nhosts = [\"a.example\"]\ncidrs = [\"10.0.0.0/8\"]"), "line 6", "belong to allow rules"),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\nheaders = { Host = { env = \"X\" } }"), "line 9", "cannot be a secret header"),
        (
            rule("effect = \"allow\"\nhosts = [\"a.example\"]\nheaders = { X-Key = { env = \"X\", file = \"/k\" } }"),
            "line 9",
            "exactly one of `env` or `file`",
        ),
        (rule("effect = \"allow\"\nhosts = [\"a.example\"]\nurl = \"x\""), "line 9", "url"),
        (
            format!(
                "{}{}",
                rule("id = \"same\"\neffect = \"allow\"\nhosts = [\"a.example\"]"),
                rule("id = \"same\"\neffect = \"deny\"\nhosts = [\"b.example\"]")
            ),
            "line 10",
            "used twice (first on line 6)",
        ),
    ];
    for (network, line, reason) in table {
        let error = load(&network).expect_err(&network);
        assert!(error.contains(line) && error.contains(reason), "{network}\n=> {error}");
    }
}

#[test]
fn a_rules_summary_names_its_destinations_and_ranges_and_its_tools() {
    let policy = load(RULES).expect("loads");
    let rules = policy.role("fetcher").expect("role").network().rules();
    let summaries: Vec<(String, String, bool, bool)> =
        rules.iter().map(|rule| (rule.id.clone(), rule.summary(), rule.is_for_tool("http_fetch"), rule.is_for_tool("crawl"))).collect();
    assert_eq!(summaries[0], ("docs".to_owned(), "https://docs.rs, https://*.python.org".to_owned(), true, true));
    assert_eq!(
        summaries[1],
        (
            "internal".to_owned(),
            "http://wiki.corp.example:80, http://wiki.corp.example:8080, https://wiki.corp.example:80, https://wiki.corp.example:8080 (may reach 10.20.0.0/16)".to_owned(),
            false,
            true
        )
    );
}

#[test]
fn a_suffix_pattern_covers_names_only_never_addresses_or_a_whole_top_level_domain() {
    for (hosts, expected) in [
        ("[\"*.1\"]", "would cover addresses"),
        ("[\"*.8.8\"]", "would cover addresses"),
        ("[\"*.10.0.0.1\"]", "before an address"),
        ("[\"*.com\"]", "covers a whole top-level domain"),
    ] {
        let error = load(&format!("[[roles.fetcher.network]]\nid = \"wide\"\neffect = \"allow\"\nhosts = {hosts}\n")).expect_err(hosts);
        assert!(error.contains(expected), "{hosts}: {error}");
    }
    let policy = load("[[roles.fetcher.network]]\nid = \"num\"\neffect = \"allow\"\nhosts = [\"*.1e100.net\"]\n").expect("a domain");
    assert_eq!(verdict(&policy, &request("http_fetch", Scheme::Https, "a.1e100.net", 443)), "allow num");
    // However its labels end, an address is never a name under a domain.
    let pattern = HostPattern { name: ".0.1".to_owned(), is_suffix: true };
    assert!(!pattern.matches("127.0.0.1") && !pattern.matches("::ffff:127.0.0.1"));
}

#[test]
fn the_deny_rules_inside_a_pattern_and_every_rule_id_are_known() {
    let policy = load(
        "[[roles.fetcher.rules]]\nid = \"files\"\naccess = [\"read\"]\npaths = [\"**\"]\neffect = \"allow\"\n\
         [[roles.fetcher.network]]\nid = \"ex\"\neffect = \"allow\"\nhosts = [\"*.example.com\"]\n\
         [[roles.fetcher.network]]\nid = \"evil\"\neffect = \"deny\"\nhosts = [\"evil.example.com\"]\n\
         [[roles.fetcher.network]]\nid = \"other\"\neffect = \"deny\"\nhosts = [\"evil.example.org\"]\n",
    )
    .expect("a policy");
    let rules = policy.role("fetcher").expect("role").network();
    let within: Vec<&str> =
        rules.denied_within(&request("http_fetch", Scheme::Https, "*.example.com", 443)).iter().map(|rule| rule.id.as_str()).collect();
    assert_eq!(within, ["evil"]);
    assert!(rules.denied_within(&request("http_fetch", Scheme::Https, "docs.example.com", 443)).is_empty());
    assert!(policy.has_rule_id("files") && policy.has_rule_id("evil") && !policy.has_rule_id("fetcher-x"));
}
